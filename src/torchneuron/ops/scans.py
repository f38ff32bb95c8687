"""Scans along a dimension: cumsum, cumprod, cummax/cummin, logcumsumexp."""
from __future__ import annotations

import math

import jax.numpy as jnp
import torch
from jax import lax

from ..lowering import call_warning, lower, out_dtype, sum_dtype
from ..numerics import (
    canon_dim,
    convert,
    is_complex,
    is_float,
    no_complex,
    not_implemented,
    opmath,
    to_dtype,
)


# ---------------------------------------------------------------- scans
def _cum(x, dim, dtype, scan):
    """cumsum/cumprod in the opmath of the result dtype (bool counts as int64)."""
    out = sum_dtype(x, dtype)
    if jnp.issubdtype(x.dtype, jnp.complexfloating) and not jnp.issubdtype(out, jnp.complexfloating):
        call_warning("Casting complex values to real discards the imaginary part", once=True)
    if is_float(x.dtype) and not is_complex(x.dtype) and not is_float(out) and out != jnp.bool_:
        x = convert(x, out)  # float -> int as the CPU converts, then accumulate
    xa = to_dtype(x, opmath(out))
    if x.ndim == 0 or x.size == 0:
        return xa
    if xa.dtype == jnp.bool_:
        xa = xa.astype(jnp.int64)
    return scan(xa, axis=canon_dim(dim, x.ndim))


@lower("cumsum.default")
def cumsum(x, dim, *, dtype=None):
    if dtype == torch.bool:
        raise not_implemented("cumsum_out_cpu", jnp.bool_)
    return _cum(x, dim, dtype, lax.cumsum)


@lower("cumprod.default")
def cumprod(x, dim, *, dtype=None):
    if dtype == torch.bool:
        raise not_implemented("cumprod_out_cpu", jnp.bool_)
    return _cum(x, dim, dtype, lax.cumprod)


def _cum_ext(x, dim, largest):
    """cummax/cummin: values and the index of the last extremum so far (NaN wins)."""
    no_complex("cummax" if largest else "cummin", x)
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = canon_dim(dim, x.ndim)
    idx = lax.broadcasted_iota(jnp.int64, x.shape, d)
    if x.size == 0:
        return x, idx
    v = x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x
    flt = is_float(v.dtype)

    def combine(a, b):
        va, ia = a
        vb, ib = b
        better = (vb >= va) if largest else (vb <= va)
        if flt:
            better = jnp.isnan(vb) | (~jnp.isnan(va) & better)
        return jnp.where(better, vb, va), jnp.where(better, ib, ia)

    vals, inds = lax.associative_scan(combine, (v, idx), axis=d)
    return vals.astype(x.dtype), inds


@lower("cummax.default")
def cummax(x, dim):
    return _cum_ext(x, dim, True)


@lower("cummin.default")
def cummin(x, dim):
    return _cum_ext(x, dim, False)


def _logaddexp(x, y):
    """CPU's _log_add_exp_helper (the logcumsumexp combine), real and complex."""
    if is_complex(x.dtype):
        xnan = jnp.isnan(x.real) | jnp.isnan(x.imag)
        ynan = jnp.isnan(y.real) | jnp.isnan(y.imag)
        lt = x.real < y.real
        mn = jnp.where(ynan, y, jnp.where(xnan, x, jnp.where(lt, x, y)))
        mx = jnp.where(ynan, y, jnp.where(xnan, x, jnp.where(lt, y, x)))
        mnr, mxr = mn.real, mx.real
        nan = jnp.full(x.shape, complex(math.nan, math.nan), x.dtype)
        inf_case = jnp.where(mnr < 0, mn, jnp.log(jnp.exp(mn) + jnp.exp(mx)))
        normal = jnp.log1p(jnp.exp(mn - mx)) + mx
        return jnp.where(jnp.isnan(mnr) | jnp.isnan(mn.imag), nan,
                         jnp.where(~jnp.isfinite(mnr) & (mnr == mxr), inf_case, normal))
    mn = jnp.where(jnp.isnan(y), y, jnp.minimum(x, y))
    mx = jnp.where(jnp.isnan(y), y, jnp.maximum(x, y))
    return jnp.where((mn != mx) | jnp.isfinite(mn), jnp.log1p(jnp.exp(mn - mx)) + mx, x)


@lower("logcumsumexp.default")
def logcumsumexp(x, dim):
    if not is_float(x.dtype):
        raise not_implemented("logcumsumexp", x.dtype)
    dt = out_dtype() or x.dtype
    xa = to_dtype(x, opmath(dt))
    if x.ndim == 0 or x.size == 0:
        return xa
    d = canon_dim(dim, x.ndim)
    return lax.associative_scan(_logaddexp, xa, axis=d)

"""Reductions, scans, sorting and searching.

sum/mean/prod/nansum, amax/amin/max/min/argmax/argmin/aminmax, var/std(+_mean),
vector norms, logsumexp, all/any/count_nonzero, cumsum/cumprod/cummax/cummin/
logcumsumexp, sort/topk/kthvalue/median/nanmedian/mode, searchsorted/bucketize,
histc, _cdist_forward/_cdist_backward, and the kernels for aten::equal and
aten::bincount (a Python bool / a data-dependent size: they read one value back).

Conventions (PyTorch's, checked against the CPU kernels):
- float16/bfloat16 accumulate in float32 and round once, like CPU's acc_type.
- max/min/argmax/argmin pick the first occurrence; NaN wins (first NaN).
- sort is always stable; NaN sorts as the largest value, -0.0 == 0.0.
- cummax/cummin take the last index on ties, like CPU (>= / <= scan).
"""
from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..numerics import (HALF, cast, is_float, jdtype, not_implemented, opmath, pnorm_last,
                        round_to, scalar_type_name)
from ..lowering import lower, out_dtype, out_meta


def _is_complex(dt):
    return jnp.issubdtype(dt, jnp.complexfloating)


def to_dtype(x, dt):
    """cast, dropping the imaginary part for complex -> real like PyTorch."""
    if dt is not None and _is_complex(x.dtype) and not _is_complex(dt):
        x = jnp.real(x)
    return cast(x, dt)


def _real_dtype(dt):
    dt = jnp.dtype(dt)
    if dt == jnp.complex64:
        return jnp.dtype(jnp.float32)
    if dt == jnp.complex128:
        return jnp.dtype(jnp.float64)
    return dt


def _axes(dim, ndim, empty_all=True):
    """Reduction axes for an int / int list / None `dim`."""
    if ndim == 0:
        return ()
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    if len(dim) == 0:
        return tuple(range(ndim)) if empty_all else ()
    return tuple(sorted({d % ndim for d in dim}))


def _axis(dim, ndim):
    return dim % ndim if ndim else 0


def _no_complex(name, x):
    if _is_complex(x.dtype):
        raise not_implemented(name, x.dtype)


def _no_bool(name, x):
    if x.dtype == jnp.bool_:
        raise not_implemented(name, x.dtype)


def _need_nonempty_dim(name, x, dim):
    """CPU's error for a value-selecting reduction over an empty dimension."""
    if x.ndim and x.shape[_axis(dim, x.ndim)] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {_axis(dim, x.ndim)} to have non-zero size.")


def _need_numel(name, x):
    if x.size == 0:
        raise RuntimeError(
            f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument.")


def _sum_dtype(x, dtype):
    """Result dtype of sum/prod/cumsum (ints and bool promote to int64)."""
    dt = out_dtype()
    if dt is not None:
        return dt
    if dtype is not None:
        return jdtype(dtype)
    if x.dtype == jnp.bool_ or jnp.issubdtype(x.dtype, jnp.integer):
        return jnp.dtype(jnp.int64)
    return x.dtype


# ---------------------------------------------------------------- sum / mean / prod
@lower("sum.dim_IntList", "sum.default")
def sum_(x, dim=None, keepdim=False, *, dtype=None):
    dt = _sum_dtype(x, dtype)
    axes = _axes(dim, x.ndim)
    xa = to_dtype(x, opmath(dt))
    if xa.dtype == jnp.bool_:
        return jnp.any(xa, axis=axes, keepdims=keepdim)
    return jnp.sum(xa, axis=axes, keepdims=keepdim)


def _nansum_normalize(self, dim=None, keepdim=False, *, dtype=None):
    """nansum(x, dim=[]) reduces everything on CPU, but PyTorch's meta kernel keeps every
    dim: [] becomes None before the executable is chosen (eager only)."""
    if dim is not None and len(dim) == 0:
        dim = None
    return (self, dim, keepdim), {"dtype": dtype}


@lower("nansum.default", normalize=_nansum_normalize)
def nansum(x, dim=None, keepdim=False, *, dtype=None):
    if _is_complex(x.dtype):
        raise RuntimeError("nansum does not support complex inputs")
    if is_float(x.dtype) and not _is_complex(x.dtype):
        x = jnp.where(jnp.isnan(x), jnp.zeros((), x.dtype), x)
    return sum_(x, dim, keepdim, dtype=dtype)


@lower("mean.default", "mean.dim")
def mean(x, dim=None, keepdim=False, *, dtype=None):
    dt = out_dtype() or (jdtype(dtype) if dtype is not None else x.dtype)
    axes = _axes(dim, x.ndim)
    xa = to_dtype(x, opmath(dt))
    n = math.prod(x.shape[a] for a in axes)
    s = jnp.sum(xa, axis=axes, keepdims=keepdim)
    return s / jnp.asarray(n, _real_dtype(xa.dtype)) if n else s * jnp.asarray(jnp.nan, _real_dtype(xa.dtype))


@lower("prod.default", "prod.dim_int")
def prod(x, dim=None, keepdim=False, *, dtype=None):
    dt = _sum_dtype(x, dtype)
    axes = _axes(dim, x.ndim)
    xa = to_dtype(x, opmath(dt))
    if xa.dtype == jnp.bool_:
        return jnp.all(xa, axis=axes, keepdims=keepdim)
    return jnp.prod(xa, axis=axes, keepdims=keepdim)


# ---------------------------------------------------------------- max / min family
def _max(x, axes, keepdim):
    return jnp.max(x, axis=axes, keepdims=keepdim)


def _min(x, axes, keepdim):
    return jnp.min(x, axis=axes, keepdims=keepdim)


@lower("amax.default")
def amax(x, dim=(), keepdim=False):
    _no_complex("amax", x)
    return _max(x, _axes(dim, x.ndim), keepdim)


@lower("amin.default")
def amin(x, dim=(), keepdim=False):
    _no_complex("amin", x)
    return _min(x, _axes(dim, x.ndim), keepdim)


@lower("max.default")
def max_all(x):
    _no_complex("max_all", x)
    _need_numel("max", x)
    return jnp.max(x)


@lower("min.default")
def min_all(x):
    _no_complex("min_all", x)
    _need_numel("min", x)
    return jnp.min(x)


def _arg(x, axis, largest):
    """First index of the max (min); the first NaN wins (jnp.argmax semantics)."""
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    return jnp.argmax(x, axis=axis) if largest else jnp.argmin(x, axis=axis)


def _val_idx(x, dim, keepdim, largest):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = _axis(dim, x.ndim)
    idx = jnp.expand_dims(_arg(x, d, largest), d)
    vals = jnp.take_along_axis(x, idx, axis=d)
    if not keepdim:
        vals, idx = jnp.squeeze(vals, d), jnp.squeeze(idx, d)
    return vals, idx


@lower("max.dim")
def max_dim(x, dim, keepdim=False):
    _no_complex("max", x)
    _need_nonempty_dim("max", x, dim)
    return _val_idx(x, dim, keepdim, True)


@lower("min.dim")
def min_dim(x, dim, keepdim=False):
    _no_complex("min", x)
    _need_nonempty_dim("min", x, dim)
    return _val_idx(x, dim, keepdim, False)


def _argmaxmin(x, dim, keepdim, largest):
    _no_complex("argmax" if largest else "argmin", x)
    if x.dtype == jnp.bool_:
        raise RuntimeError(f"{'argmax' if largest else 'argmin'}(): does not support bool input")
    if dim is not None:
        _need_nonempty_dim("argmax" if largest else "argmin", x, dim)
    if x.ndim == 0:
        return jnp.zeros((), jnp.int64)
    if dim is None:
        r = _arg(x.reshape(-1), 0, largest)
        return r.reshape((1,) * x.ndim) if keepdim else r
    d = _axis(dim, x.ndim)
    r = _arg(x, d, largest)
    return jnp.expand_dims(r, d) if keepdim else r


@lower("argmax.default")
def argmax(x, dim=None, keepdim=False):
    return _argmaxmin(x, dim, keepdim, True)


@lower("argmin.default")
def argmin(x, dim=None, keepdim=False):
    return _argmaxmin(x, dim, keepdim, False)


@lower("aminmax.default")
def aminmax(x, *, dim=None, keepdim=False):
    _no_complex("aminmax", x)
    if dim is None:
        axes = tuple(range(x.ndim))
    else:
        axes = _axes([dim], x.ndim)
    mn, mx = _min(x, axes, keepdim), _max(x, axes, keepdim)
    return mn, mx


# ---------------------------------------------------------------- var / std
def _var_mean(x, dim, correction, keepdim):
    if not is_float(x.dtype):
        raise RuntimeError("std and var only support floating point and complex dtypes")
    axes = _axes(dim, x.ndim)
    xa = cast(x, opmath(x.dtype))
    if correction is None:
        correction = 1
    n = math.prod(x.shape[a] for a in axes)
    rdt = _real_dtype(xa.dtype)
    m = jnp.mean(xa, axis=axes, keepdims=True) if n else \
        jnp.full(tuple(1 if i in axes else s for i, s in enumerate(x.shape)), jnp.nan, xa.dtype)
    d = xa - m
    sq = d.real * d.real + d.imag * d.imag if _is_complex(d.dtype) else d * d
    denom = max(n - correction, 0)
    if denom <= 0:  # CPU warns on every call; this warns when the executable is built
        warnings.warn("var(): degrees of freedom is <= 0. Correction should be strictly less "
                      "than the reduction factor (input numel divided by output numel).", stacklevel=2)
    var = jnp.sum(sq, axis=axes, keepdims=keepdim) / jnp.asarray(denom, rdt)
    if not keepdim:
        m = jnp.squeeze(m, axes) if axes else m
    return var, m


@lower("var.correction", static=("correction",))
def var(x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(x, dim, correction, keepdim)[0]


@lower("std.correction", static=("correction",))
def std(x, dim=None, *, correction=None, keepdim=False):
    return jnp.sqrt(_var_mean(x, dim, correction, keepdim)[0])


@lower("var_mean.correction", static=("correction",))
def var_mean(x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(x, dim, correction, keepdim)


@lower("std_mean.correction", static=("correction",))
def std_mean(x, dim=None, *, correction=None, keepdim=False):
    v, m = _var_mean(x, dim, correction, keepdim)
    return jnp.sqrt(v), m


# ---------------------------------------------------------------- norms
def _vnorm(x, ord, axes, keepdim):
    rdt = _real_dtype(opmath(x.dtype))
    a = jnp.abs(cast(x, opmath(x.dtype))).astype(rdt)
    if ord == math.inf:
        return jnp.max(a, axis=axes, keepdims=keepdim)
    if ord == -math.inf:
        return jnp.min(a, axis=axes, keepdims=keepdim)
    if ord == 0:
        return jnp.sum((a != 0).astype(rdt), axis=axes, keepdims=keepdim)
    if ord == 1:
        return jnp.sum(a, axis=axes, keepdims=keepdim)
    if ord == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=axes, keepdims=keepdim))
    p = jnp.asarray(ord, rdt)
    return jnp.power(jnp.sum(jnp.power(a, p), axis=axes, keepdims=keepdim), 1 / p)


def _ord(v):
    if v is None:
        return 2.0
    return float(v) if not isinstance(v, bool) else float(int(v))


@lower("linalg_vector_norm.default", static=("ord",))
def linalg_vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        x = to_dtype(x, jdtype(dtype))
    return _vnorm(x, _ord(ord), _axes(dim, x.ndim), keepdim)


@lower("norm.Scalar", static=("p",))
def norm_scalar(x, p=2):
    return _vnorm(x, _ord(p), _axes(None, x.ndim), False)


@lower("norm.ScalarOpt_dim", static=("p",))
def norm_dim(x, p, dim, keepdim=False):
    return _vnorm(x, _ord(p), _axes(dim, x.ndim), keepdim)


@lower("norm.ScalarOpt_dim_dtype", static=("p",))
def norm_dim_dtype(x, p, dim, keepdim, *, dtype):
    return _vnorm(to_dtype(x, jdtype(dtype)), _ord(p), _axes(dim, x.ndim), keepdim)


@lower("norm.ScalarOpt_dtype", static=("p",))
def norm_dtype(x, p, *, dtype):
    return _vnorm(to_dtype(x, jdtype(dtype)), _ord(p), _axes(None, x.ndim), False)


# ---------------------------------------------------------------- logsumexp
@lower("logsumexp.default")
def logsumexp(x, dim, keepdim=False):
    if len(dim) == 0 and x.ndim and not keepdim:
        # CPU: the all-reduced result cannot take the kept-dim max back
        raise RuntimeError(f"output with shape [] doesn't match the broadcast shape {[1] * x.ndim}")
    dt = out_dtype() or (x.dtype if is_float(x.dtype) else jnp.dtype(jnp.float32))
    xa = to_dtype(x, opmath(dt))
    axes = _axes(dim, x.ndim)
    if x.size == 0:
        return jnp.log(jnp.sum(jnp.exp(xa), axis=axes, keepdims=keepdim))
    re = xa.real if _is_complex(xa.dtype) else xa
    m = jnp.max(re, axis=axes, keepdims=True)
    m = jnp.where(jnp.isinf(m), jnp.zeros((), m.dtype), m)
    r = jnp.log(jnp.sum(jnp.exp(xa - m), axis=axes, keepdims=True)) + m
    if not keepdim and axes:
        r = jnp.squeeze(r, axes)
    return r


# ---------------------------------------------------------------- all / any / count_nonzero
def _nz(x):
    return x if x.dtype == jnp.bool_ else x != 0


@lower("all.default")
def all_(x):
    return jnp.all(_nz(x))


@lower("any.default")
def any_(x):
    return jnp.any(_nz(x))


@lower("all.dim")
def all_dim(x, dim, keepdim=False):
    return jnp.all(_nz(x), axis=_axes(dim, x.ndim), keepdims=keepdim)


@lower("any.dim")
def any_dim(x, dim, keepdim=False):
    return jnp.any(_nz(x), axis=_axes(dim, x.ndim), keepdims=keepdim)


@lower("all.dims")
def all_dims(x, dim=None, keepdim=False):
    return jnp.all(_nz(x), axis=_axes(dim, x.ndim, empty_all=False), keepdims=keepdim)


@lower("any.dims")
def any_dims(x, dim=None, keepdim=False):
    return jnp.any(_nz(x), axis=_axes(dim, x.ndim, empty_all=False), keepdims=keepdim)


@lower("count_nonzero.default", "count_nonzero.dim_IntList")
def count_nonzero(x, dim=None):
    return jnp.sum(_nz(x).astype(jnp.int64), axis=_axes(dim, x.ndim))


# ---------------------------------------------------------------- scans
@lower("cumsum.default")
def cumsum(x, dim, *, dtype=None):
    dt = _sum_dtype(x, dtype)
    xa = to_dtype(x, opmath(dt))
    if x.ndim == 0 or x.size == 0:
        return xa
    if xa.dtype == jnp.bool_:
        xa = xa.astype(jnp.int64)
    return lax.cumsum(xa, axis=_axis(dim, x.ndim))


@lower("cumprod.default")
def cumprod(x, dim, *, dtype=None):
    dt = _sum_dtype(x, dtype)
    xa = to_dtype(x, opmath(dt))
    if x.ndim == 0 or x.size == 0:
        return xa
    if xa.dtype == jnp.bool_:
        xa = xa.astype(jnp.int64)
    return lax.cumprod(xa, axis=_axis(dim, x.ndim))


def _cum_ext(x, dim, largest):
    """cummax/cummin: values and the index of the last extremum so far (NaN wins)."""
    _no_complex("cummax" if largest else "cummin", x)
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = _axis(dim, x.ndim)
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
    if _is_complex(x.dtype):
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
    d = _axis(dim, x.ndim)
    return lax.associative_scan(_logaddexp, xa, axis=d)


# ---------------------------------------------------------------- sorting
def _sort_last(x, descending):
    """Stable sort along the last axis: (values, int64 indices); NaN is largest."""
    n = x.shape[-1]
    iota = lax.broadcasted_iota(jnp.int64, x.shape, x.ndim - 1)
    k = x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x
    if n <= 1:
        return x, iota
    if not descending:
        sk, si = lax.sort((k, iota), dimension=x.ndim - 1, num_keys=1, is_stable=True)
    else:
        # ascending by (value, -index), reversed: descending values, ties by index
        sk, sneg = lax.sort((k, -iota), dimension=x.ndim - 1, num_keys=2)
        sk, si = jnp.flip(sk, -1), -jnp.flip(sneg, -1)
    return sk.astype(x.dtype), si


def _sort(x, dim, descending):
    if _is_complex(x.dtype):
        raise RuntimeError("Sort does not support complex dtypes")
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = _axis(dim, x.ndim)
    v, i = _sort_last(jnp.moveaxis(x, d, -1), descending)
    return jnp.moveaxis(v, -1, d), jnp.moveaxis(i, -1, d)


@lower("sort.default")
def sort(x, dim=-1, descending=False):
    return _sort(x, dim, descending)


@lower("sort.stable")
def sort_stable(x, *, stable=None, dim=-1, descending=False):
    return _sort(x, dim, descending)


@lower("topk.default")
def topk(x, k, dim=-1, largest=True, sorted=True):
    _no_complex("topk", x)
    if x.dtype == jnp.bool_:
        raise RuntimeError("topk does not support bool dtypes")
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = _axis(dim, x.ndim)
    xm = jnp.moveaxis(x, d, -1)
    if k == 0 or xm.shape[-1] == 0:
        v, i = xm[..., :0], jnp.zeros(xm.shape[:-1] + (0,), jnp.int64)
    else:
        # lax.top_k orders -NaN lowest and -0.0 below 0.0; PyTorch has every NaN
        # largest and -0.0 == 0.0: rank a canonical key, gather the original values
        key = xm
        if is_float(key.dtype):
            key = jnp.where(jnp.isnan(key), jnp.asarray(jnp.nan, key.dtype),
                            jnp.where(key == 0, jnp.zeros((), key.dtype), key))
            if not largest:
                key = -key
        elif not largest:
            key = ~key
        _, i = lax.top_k(key, k)
        v = jnp.take_along_axis(xm, i, axis=-1)
    return jnp.moveaxis(v, -1, d), jnp.moveaxis(i, -1, d)


def _select(v, i, pos, d, keepdim):
    """Pick sorted position `pos` (array over the leading dims, or int) along last axis."""
    pos = jnp.asarray(pos)
    if pos.ndim == 0:
        pos = jnp.broadcast_to(pos, v.shape[:-1])
    pos = pos[..., None]
    rv = jnp.take_along_axis(v, pos, axis=-1)
    ri = jnp.take_along_axis(i, pos, axis=-1)
    rv, ri = jnp.moveaxis(rv, -1, d), jnp.moveaxis(ri, -1, d)
    if not keepdim:
        rv, ri = jnp.squeeze(rv, d), jnp.squeeze(ri, d)
    return rv, ri


@lower("kthvalue.default")
def kthvalue(x, k, dim=-1, keepdim=False):
    _no_complex("kthvalue", x)
    _no_bool("kthvalue", x)
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = _axis(dim, x.ndim)
    v, i = _sort_last(jnp.moveaxis(x, d, -1), False)
    return _select(v, i, k - 1, d, keepdim)


def _median_last(x, ignore_nan):
    """Median along the last axis of a non-empty x: (values, indices) over leading dims."""
    n = x.shape[-1]
    v, i = _sort_last(x, False)
    if not is_float(x.dtype):
        pos = jnp.full(x.shape[:-1], (n - 1) // 2, jnp.int64)
        return v, i, pos
    nan = jnp.isnan(x)
    if ignore_nan:
        m = jnp.sum(~nan, axis=-1)
        pos = jnp.maximum((m - 1) // 2, 0)
        return v, i, pos
    # any NaN: the first NaN (sorted stably after all numbers, at position n - #nan)
    cnt = jnp.sum(nan, axis=-1)
    pos = jnp.where(cnt > 0, n - cnt, (n - 1) // 2)
    return v, i, pos


@lower("median.default")
def median(x):
    _no_complex("median", x)
    _no_bool("median", x)
    if x.size == 0:
        return jnp.full((), jnp.nan, x.dtype) if is_float(x.dtype) else jnp.zeros((), x.dtype)
    v, i, pos = _median_last(x.reshape(-1), False)
    return jnp.take(v, pos)


@lower("nanmedian.default")
def nanmedian(x):
    _no_complex("nanmedian", x)
    _no_bool("nanmedian", x)
    if x.size == 0:
        return jnp.full((), jnp.nan, x.dtype) if is_float(x.dtype) else jnp.zeros((), x.dtype)
    v, i, pos = _median_last(x.reshape(-1), True)
    return jnp.take(v, pos)


def _median_dim(x, dim, keepdim, ignore_nan):
    name = "nanmedian" if ignore_nan else "median"
    _no_complex(name, x)
    _no_bool(name, x)
    _need_nonempty_dim(name, x, dim)
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = _axis(dim, x.ndim)
    v, i, pos = _median_last(jnp.moveaxis(x, d, -1), ignore_nan)
    return _select(v, i, pos, d, keepdim)


@lower("median.dim")
def median_dim(x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, False)


@lower("nanmedian.dim")
def nanmedian_dim(x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, True)


@lower("mode.default")
def mode(x, dim=-1, keepdim=False):
    _no_complex("mode", x)
    _need_nonempty_dim("mode", x, dim)
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = _axis(dim, x.ndim)
    xm = jnp.moveaxis(x, d, -1)
    n = xm.shape[-1]
    v, i = _sort_last(xm, False)
    if n == 0:
        return _select(v, i, 0, d, keepdim)
    if n == 1:
        return _select(v, i, 0, d, keepdim)
    same = v[..., 1:] == v[..., :-1]
    if is_float(v.dtype):
        same = same | (jnp.isnan(v[..., 1:]) & jnp.isnan(v[..., :-1]))
    shape = v.shape[:-1] + (1,)
    is_start = jnp.concatenate([jnp.ones(shape, bool), ~same], axis=-1)
    is_end = jnp.concatenate([~same, jnp.ones(shape, bool)], axis=-1)
    j = lax.broadcasted_iota(jnp.int64, v.shape, v.ndim - 1)
    start = lax.cummax(jnp.where(is_start, j, 0), axis=v.ndim - 1)
    count = jnp.where(is_end, j - start + 1, 0)
    best = jnp.argmax(count, axis=-1)  # the smallest value among the most frequent
    return _select(v, i, best, d, keepdim)


# ---------------------------------------------------------------- searching
def search_sorted(bd, v, right, sorter):
    """searchsorted's positions of `v` in the sorted last axis of `bd`: CPU's lower/upper
    bound binary search (same comparisons, so NaN behaves alike); shared with the
    histogram kernels."""
    if sorter is not None:
        bd = jnp.take_along_axis(bd, sorter.astype(jnp.int64), axis=-1)
    n = bd.shape[-1]
    v = jnp.asarray(v)
    ct = jnp.result_type(bd, v)
    bd = cast(bd, ct)
    v = cast(v, ct)
    start = jnp.zeros(v.shape, jnp.int64)
    if n == 0:
        return start
    end = jnp.full(v.shape, n, jnp.int64)
    one_d = bd.ndim == 1

    def body(_, se):
        s, e = se
        active = s < e
        mid = (s + e) // 2
        midc = jnp.minimum(mid, n - 1)
        mv = jnp.take(bd, midc) if one_d else jnp.take_along_axis(bd, midc, axis=-1)
        go = ~(mv > v) if right else ~(mv >= v)
        s = jnp.where(active & go, mid + 1, s)
        e = jnp.where(active & ~go, mid, e)
        return s, e

    s, _ = lax.fori_loop(0, int(n).bit_length() + 1, body, (start, end))
    return s


@lower("searchsorted.Tensor", "searchsorted.Scalar")
def searchsorted(sorted_sequence, x, *, out_int32=False, right=False, side=None, sorter=None):
    _no_bool("searchsorted", sorted_sequence)
    r = right or side == "right"
    return search_sorted(sorted_sequence, x, r, sorter)


@lower("bucketize.Tensor", "bucketize.Scalar")
def bucketize(x, boundaries, *, out_int32=False, right=False):
    _no_bool("bucketize", boundaries)
    return search_sorted(boundaries, x, right, None)


# ---------------------------------------------------------------- histc
@lower("histc.default", static=("bins", "min", "max"),
       normalize=lambda *a, **k: _histc_normalize(*a, **k))
def histc(x, bins=100, min=0, max=0):
    if jnp.issubdtype(x.dtype, jnp.integer):
        return _histc_int(x, bins, min, max)
    if not is_float(x.dtype) or _is_complex(x.dtype):
        raise not_implemented("histc", x.dtype)
    dt = x.dtype
    lo, hi = float(min), float(max)
    if lo > hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"torch.histc: range of [{lo}, {hi}] is not finite")
    lo_a = jnp.asarray(lo, jnp.float64)
    hi_a = jnp.asarray(hi, jnp.float64)
    if lo == hi and x.size:
        lo_a = jnp.min(x).astype(jnp.float64)
        hi_a = jnp.max(x).astype(jnp.float64)
    eq = lo_a == hi_a
    lo_a = jnp.where(eq, lo_a - 1, lo_a)
    hi_a = jnp.where(eq, hi_a + 1, hi_a)
    left, right = lo_a.astype(dt), hi_a.astype(dt)
    xf = x.reshape(-1)
    valid = (xf >= left) & (xf <= right)
    if jnp.dtype(dt) in HALF:
        # round after each operation like CPU's Half arithmetic, so edge elements land in
        # CPU's bin
        def r(v):
            return round_to(v, dt)

        f = jnp.float32
        d = r(xf.astype(f) - left.astype(f))
        pos = r(r(d * r(jnp.asarray(bins, f))) / r(right.astype(f) - left.astype(f)))
    else:
        pos = ((xf - left) * jnp.asarray(bins, dt) / (right - left))
    pos = jnp.where(valid, pos, 0).astype(jnp.int64)
    pos = jnp.where(pos == bins, bins - 1, pos)
    pos = jnp.clip(pos, 0, bins - 1)
    acc = opmath(dt)
    return jnp.zeros((bins,), acc).at[pos].add(valid.astype(acc))


def _narrow_int(v, dt):
    """A Python int stored into a C++ integer of dtype `dt` (two's-complement wrap)."""
    return int(np.array(v, dtype=np.int64).astype(dt))


def histc_int_bounds(lo, hi, dt):
    """CUDA's integer bounds (SummaryOps.cu, `_histc_cuda_template`): the Scalars truncated
    to int64, then stored in the input type; None where the data's own range is used."""
    lo64, hi64 = int(math.trunc(lo)), int(math.trunc(hi))
    if lo64 == hi64:
        return None
    return _narrow_int(lo64, dt), _narrow_int(hi64, dt)


def _histc_int(x, bins, lo, hi):
    """Integer histc, which CUDA has and CPU lacks (transformers' MoE path counts expert
    ids with it): CUDA's rule, bin = (v - min) * bins / (max - min) in int64 arithmetic,
    the last bin closed, counts in the input type.  An empty range [m, m] widens to
    [m - 1, m + 1] in the input type.  The eager kernel validates the range first
    (`histc_int_kernel`); in a compiled graph an invalid range counts nothing."""
    dt = x.dtype
    b = histc_int_bounds(lo, hi, dt)
    if b is not None:
        mn, mx = jnp.asarray(b[0], dt), jnp.asarray(b[1], dt)
    elif x.size:
        mn, mx = jnp.min(x), jnp.max(x)
    else:
        mn = mx = jnp.asarray(_narrow_int(int(math.trunc(lo)), dt), dt)
    eq = mn == mx
    mn = jnp.where(eq, mn - jnp.asarray(1, dt), mn)
    mx = jnp.where(eq, mx + jnp.asarray(1, dt), mx)
    mn64, mx64 = mn.astype(jnp.int64), mx.astype(jnp.int64)
    v = x.reshape(-1).astype(jnp.int64)
    valid = (v >= mn64) & (v <= mx64)
    span = jnp.where(mx64 > mn64, mx64 - mn64, 1)
    pos = ((v - mn64) * bins // span).astype(jnp.int32).astype(jnp.int64)
    pos = jnp.where(pos == bins, bins - 1, pos)
    pos = jnp.where(valid, jnp.clip(pos, 0, bins - 1), 0)
    counts = jnp.zeros((bins,), jnp.int64).at[pos].add(valid.astype(jnp.int64))
    return counts.astype(dt)


def _histc_normalize(self, bins=100, min=0, max=0):
    """Integer inputs: CUDA's checks, and CUDA's host read of the data's range when
    min == max, so that an invalid range raises as on CUDA; the executable then gets the
    bounds it bins with."""
    if self.dtype not in _INT_TORCH or not isinstance(bins, int):
        return (self, bins, min, max), {}
    if bins <= 0:
        raise RuntimeError("bins must be > 0")
    dt = jdtype(self.dtype)
    b = histc_int_bounds(min, max, dt)
    if b is None:
        if self.numel() == 0:
            b = (_narrow_int(int(math.trunc(min)), dt),) * 2
        else:
            b = tuple(int(v) for v in torch.aminmax(self))  # one host read, like CUDA
    mn, mx = b
    if mn == mx:
        mn, mx = _narrow_int(mn - 1, dt), _narrow_int(mx + 1, dt)
    if not mn < mx:
        raise RuntimeError("max must be larger than min")
    return (self, bins, mn, mx), {}


_INT_TORCH = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16,
              torch.uint32, torch.uint64)


# ---------------------------------------------------------------- cdist
def _pdiff(x1, x2):
    return x1[..., :, None, :] - x2[..., None, :, :]


def _dist_grad(diff, g, dist, p, acc):
    """d dist / d x1 times g, elementwise over the differences (PyTorch's formulas)."""
    zero = jnp.zeros((), acc)
    nz = dist != 0
    safe = jnp.where(nz, dist, 1)
    if p == 0:
        return jnp.zeros(diff.shape, acc)
    if p == 1:
        return g * jnp.sign(diff)
    if p < 2:
        r = jnp.where(nz, jnp.sign(diff) * jnp.power(jnp.abs(diff), p - 1) * g /
                      jnp.power(safe, p - 1), zero)
        return jnp.where(diff == 0, zero, r) if p < 1 else r
    if p == 2:
        return jnp.where(nz, g * diff / safe, zero)
    if p == math.inf:
        return g * jnp.sign(diff) * (1 - jnp.minimum(1, jnp.ceil(jnp.abs(jnp.abs(diff) - dist))))
    return jnp.where(nz, diff * jnp.power(jnp.abs(diff), p - 2) * g / jnp.power(safe, p - 1), zero)


@lower("_cdist_forward.default", static=("p",))
def cdist_forward(x1, x2, p, compute_mode=None):
    dt = out_dtype() or x1.dtype
    x1, x2 = cast(x1, opmath(dt)), cast(x2, opmath(dt))
    return pnorm_last(jnp.abs(_pdiff(x1, x2)), p)


@lower("_cdist_backward.default", static=("p",))
def cdist_backward(grad, x1, x2, p, cdist):
    dt = out_dtype() or x1.dtype
    acc = opmath(dt)
    x1, x2, grad, cdist = (cast(t, acc) for t in (x1, x2, grad, cdist))
    # like CPU, the result has the broadcast batch shape (autograd sums it down to x1's)
    shape = tuple(out_meta().shape)
    if p == 0 or x1.size == 0 or x2.size == 0 or 0 in shape:
        return jnp.zeros(shape, acc)
    diff = _pdiff(x1, x2)  # (..., P, R, M), batch dims broadcast
    r = _dist_grad(diff, grad[..., None], cdist[..., None], p, acc)
    return jnp.sum(r, axis=-2).reshape(shape)


# ---------------------------------------------------------------- pdist
# the distances of every pair i < j of rows, in row-major order of the upper triangle
def _pairs(n):
    i, j = np.triu_indices(n, 1)
    return jnp.asarray(i), jnp.asarray(j)


@lower("_pdist_forward.default", static=("p",))
def pdist_forward(x, p=2.0):
    dt = out_dtype() or x.dtype
    x = cast(x, opmath(dt))
    n = x.shape[0]
    if n < 2:
        return jnp.zeros((0,), x.dtype)
    i, j = _pairs(n)
    return pnorm_last(jnp.abs(x[i] - x[j]), p)


@lower("_pdist_backward.default", static=("p",))
def pdist_backward(grad, x, p, pdist):
    dt = out_dtype() or x.dtype
    acc = opmath(dt)
    x, grad, pdist = (cast(t, acc) for t in (x, grad, pdist))
    n = x.shape[0]
    if n < 2 or x.shape[1] == 0 or p == 0:
        return jnp.zeros(x.shape, acc)
    i, j = _pairs(n)
    diff = x[i] - x[j]  # (pairs, M)
    r = _dist_grad(diff, grad[:, None], pdist[:, None], p, acc)
    # row i gains d/dx_i, row j gains d/dx_j = -(that)
    return jnp.zeros(x.shape, acc).at[i].add(r).at[j].add(-r)


# ---------------------------------------------------------------- renorm
@lower("renorm.default", static=("p",))
def renorm(x, p, dim, maxnorm):
    dt = x.dtype
    acc = opmath(dt)
    xa = cast(x, acc)
    d = dim % x.ndim  # the meta kernel has checked x.ndim >= 2
    a = jnp.moveaxis(jnp.abs(xa), d, 0)
    norm = pnorm_last(a.reshape(a.shape[0], math.prod(a.shape[1:])), p)  # one per slice
    norm = norm.reshape(tuple(-1 if k == d else 1 for k in range(x.ndim)))
    # CPU: factor = maxnorm / (norm + 1e-7) where norm > maxnorm, else 1, computed from the
    # float32 norm and rounded once to a half input's dtype; then self * factor
    mx = jnp.asarray(maxnorm, acc)
    factor = jnp.where(norm > mx, mx / (norm + jnp.asarray(1e-7, acc)), 1).astype(acc)
    real = jnp.real(jnp.zeros((), dt)).dtype
    if jnp.dtype(real) in HALF:
        factor = cast(cast(factor, real), acc)
    return cast(xa * factor, dt)




# ---------------------------------------------------------------- isin
@lower("isin.Tensor_Tensor", "isin.Tensor_Scalar", "isin.Scalar_Tensor",
       static=("assume_unique", "invert"))
def isin(elements, test_elements, *, assume_unique=False, invert=False):
    # membership by binary search in the sorted test set (NaN is never a member)
    e, t = jnp.asarray(elements), jnp.asarray(test_elements)
    ct = jnp.result_type(e, t)
    e, t = e.astype(ct), t.astype(ct).reshape(-1)
    if t.size == 0:
        found = jnp.zeros(e.shape, jnp.bool_)
    else:
        s = jnp.sort(t)
        i = jnp.clip(jnp.searchsorted(s, e.reshape(-1)), 0, s.size - 1)
        found = (s[i] == e.reshape(-1)).reshape(e.shape)
    return ~found if invert else found


# ---------------------------------------------------------------- segment_reduce
# Segments along `axis`, given per leading-index row by `lengths` (..., S) or `offsets`
# (..., S+1); CPU's rules for `initial` (folded into every segment; an empty segment is
# `initial`, else the reduction's identity, NaN for mean).
_SEG_REDUCE = {"sum": "sum", "prod": "prod", "mean": "mean", "max": "max", "amax": "max",
               "min": "min", "amin": "min"}


def _seg_layout(data, lengths, offsets, axis):
    """data as (B, D, R), per-position segment ids (B, D) (S = outside), lengths (B, S)."""
    axis = axis % data.ndim
    B = math.prod(data.shape[:axis])
    D = data.shape[axis]
    R = math.prod(data.shape[axis + 1:])
    if offsets is not None:
        off = offsets.reshape(B, offsets.shape[-1]).astype(jnp.int64)
        lens = off[:, 1:] - off[:, :-1]
        starts = off[:, :-1]
    else:
        lens = lengths.reshape(B, lengths.shape[-1]).astype(jnp.int64)
        starts = jnp.cumsum(lens, axis=1) - lens
    S = lens.shape[1]
    ends = starts + lens
    pos = jnp.arange(D, dtype=jnp.int64)
    # the segment holding each position: the last one starting at or before it and not empty
    inside = (pos[None, None, :] >= starts[:, :, None]) & (pos[None, None, :] < ends[:, :, None])
    seg = jnp.where(jnp.any(inside, axis=1), jnp.argmax(inside, axis=1), S)
    return data.reshape(B, D, R), seg, lens, axis, S


def _seg_apply(fn, x, seg, S):
    # x (B, D, R), seg (B, D) -> (B, S, R)
    return jax.vmap(lambda xb, sb: fn(xb, sb, num_segments=S))(x, seg)


def _segment_reduce_check(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                          unsafe=False, initial=None):
    """CPU's argument checks; the lengths-sum check reads one value back (a sync)."""
    if reduce not in _SEG_REDUCE:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, "
                           f"got {reduce}")
    if indices is not None:
        raise RuntimeError("segment_reduce(): indices based reduction is not supported yet.")
    if lengths is None and offsets is None:
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined.")
    if not unsafe and lengths is not None and offsets is None and data.numel():
        ok = bool((lengths.sum(-1) == data.shape[axis % data.dim()]).all().item())
        if not ok:
            raise RuntimeError("segment_reduce(): Expected all rows of lengths along axis to "
                               "sum to data.size(lengths.dim()-1) when !unsafe.")


@lower("segment_reduce.default", check=lambda *a, **k: _segment_reduce_check(*a, **k), static=("initial",))
def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                   unsafe=False, initial=None):
    red = _SEG_REDUCE[reduce]
    dt = data.dtype
    acc = opmath(dt)
    x, seg, lens, ax, S = _seg_layout(cast(data, acc), lengths, offsets, axis)
    init = None if initial is None else jnp.asarray(initial, acc)
    cnt = lens[:, :, None]
    if red in ("sum", "mean"):
        r = _seg_apply(jax.ops.segment_sum, x, seg, S)
        if init is not None:
            r = r + init
        if red == "mean":
            r = r / cnt.astype(acc)
            if init is not None:
                r = jnp.where(cnt == 0, init, r)
    elif red == "prod":
        r = _seg_apply(jax.ops.segment_prod, x, seg, S)
        if init is not None:
            r = r * init
    else:
        f = jax.ops.segment_max if red == "max" else jax.ops.segment_min
        r = _seg_apply(f, x, seg, S)
        ident = jnp.asarray(-jnp.inf if red == "max" else jnp.inf, acc)
        r = jnp.where(cnt == 0, ident, r)  # jax's identity for an empty segment
        if init is not None:
            r = jnp.maximum(r, init) if red == "max" else jnp.minimum(r, init)
    out_shape = data.shape[:ax] + (S,) + data.shape[ax + 1:]
    return cast(r.reshape(out_shape), dt)


@lower("_segment_reduce_backward.default", static=("initial",))
def segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0,
                            initial=None):
    red = _SEG_REDUCE[reduce]
    dt = data.dtype
    acc = opmath(dt)
    x, seg, lens, ax, S = _seg_layout(cast(data, acc), lengths, offsets, axis)
    B, D, R = x.shape
    g = cast(grad, acc).reshape(B, S, R)
    out = cast(output, acc).reshape(B, S, R)
    pad = jnp.zeros((B, 1, R), acc)
    take = jax.vmap(lambda t, s: t[s])  # (S+1, R) rows by segment id (S = outside: zero)
    gs = take(jnp.concatenate([g, pad], 1), seg)
    os_ = take(jnp.concatenate([out, pad], 1), seg)
    valid = (seg < S)[:, :, None]
    if red == "sum":
        r = gs
    elif red == "mean":
        n = take(jnp.concatenate([lens, jnp.ones((B, 1), lens.dtype)], 1)[..., None], seg)
        r = gs / n.astype(acc)
    elif red in ("max", "min"):
        # CPU: every element equal to the result (or NaN) gets the gradient; with ties, the
        # positive gradients (only those: CPU's `> 0` test) are split between them
        hit = ((x == os_) | jnp.isnan(x)) & valid
        ties = _seg_apply(jax.ops.segment_sum, hit.astype(acc), seg, S)
        n = take(jnp.concatenate([ties, jnp.ones((B, 1, R), acc)], 1), seg)
        r = jnp.where(hit, gs, 0)
        r = jnp.where(hit & (n >= 2) & (gs > 0), gs / n, r)
    else:  # prod
        zero = (x == 0) & valid
        nz = _seg_apply(jax.ops.segment_sum, zero.astype(acc), seg, S)
        others = _seg_apply(jax.ops.segment_prod, jnp.where(zero, 1, x), seg, S)
        if initial is not None:
            others = others * jnp.asarray(initial, acc)
        nz_at = take(jnp.concatenate([nz, jnp.zeros((B, 1, R), acc)], 1), seg)
        oth_at = take(jnp.concatenate([others, jnp.zeros((B, 1, R), acc)], 1), seg)
        r = jnp.where(zero, jnp.where(nz_at == 1, gs * oth_at, 0),
                      gs * os_ / jnp.where(x == 0, 1, x))
    r = jnp.where(valid, r, 0)
    return cast(r.reshape(data.shape), dt)




# ---------------------------------------------------------------- hash_tensor
@lower("hash_tensor.default")
def hash_tensor(x, dim=(), *, keepdim=False, mode=0):
    """XOR of every element's bits after widening to its 64-bit kind (float64 / int64 /
    uint64), as uint64."""
    if mode != 0:
        raise RuntimeError(f"Unknown hash_tensor mode: {mode}")
    dt = jnp.dtype(x.dtype)
    if jnp.issubdtype(dt, jnp.complexfloating):
        raise NotImplementedError(
            f"\"xor_sum_cpu\" not implemented for '{scalar_type_name(dt)}'")
    if jnp.issubdtype(dt, jnp.floating):
        bits = lax.bitcast_convert_type(x.astype(jnp.float64), jnp.uint64)
    elif jnp.issubdtype(dt, jnp.signedinteger):
        bits = lax.bitcast_convert_type(x.astype(jnp.int64), jnp.uint64)
    else:  # unsigned, bool
        bits = x.astype(jnp.uint64)
    axes = tuple(d % x.ndim for d in dim) if dim else tuple(range(x.ndim))
    r = lax.reduce(bits, jnp.uint64(0), lax.bitwise_xor, axes) if axes else bits
    if keepdim:
        r = jnp.expand_dims(r, axes) if axes else r
    return r

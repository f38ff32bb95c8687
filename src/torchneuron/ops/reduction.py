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

from .. import runtime
from ..numerics import HALF, cast, is_float, not_implemented, opmath, round_to, scalar_type_name
from ..lowering import LOWERINGS, lower, out_dtype, out_meta


def _is_complex(dt):
    return jnp.issubdtype(dt, jnp.complexfloating)


def _to(x, dt):
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
        return runtime.jdtype(dtype)
    if x.dtype == jnp.bool_ or jnp.issubdtype(x.dtype, jnp.integer):
        return jnp.dtype(jnp.int64)
    return x.dtype


# ---------------------------------------------------------------- sum / mean / prod
@lower("sum.dim_IntList", "sum.default")
def sum_(x, dim=None, keepdim=False, *, dtype=None):
    dt = _sum_dtype(x, dtype)
    axes = _axes(dim, x.ndim)
    xa = _to(x, opmath(dt))
    if xa.dtype == jnp.bool_:
        return jnp.any(xa, axis=axes, keepdims=keepdim)
    return jnp.sum(xa, axis=axes, keepdims=keepdim)


@lower("nansum.default")
def nansum(x, dim=None, keepdim=False, *, dtype=None):
    if _is_complex(x.dtype):
        raise RuntimeError("nansum does not support complex inputs")
    if is_float(x.dtype) and not _is_complex(x.dtype):
        x = jnp.where(jnp.isnan(x), jnp.zeros((), x.dtype), x)
    return sum_(x, dim, keepdim, dtype=dtype)


@lower("mean.default", "mean.dim")
def mean(x, dim=None, keepdim=False, *, dtype=None):
    dt = out_dtype() or (runtime.jdtype(dtype) if dtype is not None else x.dtype)
    axes = _axes(dim, x.ndim)
    xa = _to(x, opmath(dt))
    n = math.prod(x.shape[a] for a in axes)
    s = jnp.sum(xa, axis=axes, keepdims=keepdim)
    return s / jnp.asarray(n, _real_dtype(xa.dtype)) if n else s * jnp.asarray(jnp.nan, _real_dtype(xa.dtype))


@lower("prod.default", "prod.dim_int")
def prod(x, dim=None, keepdim=False, *, dtype=None):
    dt = _sum_dtype(x, dtype)
    axes = _axes(dim, x.ndim)
    xa = _to(x, opmath(dt))
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
        x = _to(x, runtime.jdtype(dtype))
    return _vnorm(x, _ord(ord), _axes(dim, x.ndim), keepdim)


@lower("norm.Scalar", static=("p",))
def norm_scalar(x, p=2):
    return _vnorm(x, _ord(p), _axes(None, x.ndim), False)


@lower("norm.ScalarOpt_dim", static=("p",))
def norm_dim(x, p, dim, keepdim=False):
    return _vnorm(x, _ord(p), _axes(dim, x.ndim), keepdim)


@lower("norm.ScalarOpt_dim_dtype", static=("p",))
def norm_dim_dtype(x, p, dim, keepdim, *, dtype):
    return _vnorm(_to(x, runtime.jdtype(dtype)), _ord(p), _axes(dim, x.ndim), keepdim)


@lower("norm.ScalarOpt_dtype", static=("p",))
def norm_dtype(x, p, *, dtype):
    return _vnorm(_to(x, runtime.jdtype(dtype)), _ord(p), _axes(None, x.ndim), False)


# ---------------------------------------------------------------- logsumexp
@lower("logsumexp.default")
def logsumexp(x, dim, keepdim=False):
    if len(dim) == 0 and x.ndim and not keepdim:
        # CPU: the all-reduced result cannot take the kept-dim max back
        raise RuntimeError(f"output with shape [] doesn't match the broadcast shape {[1] * x.ndim}")
    dt = out_dtype() or (x.dtype if is_float(x.dtype) else jnp.dtype(jnp.float32))
    xa = _to(x, opmath(dt))
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
    xa = _to(x, opmath(dt))
    if x.ndim == 0 or x.size == 0:
        return xa
    if xa.dtype == jnp.bool_:
        xa = xa.astype(jnp.int64)
    return lax.cumsum(xa, axis=_axis(dim, x.ndim))


@lower("cumprod.default")
def cumprod(x, dim, *, dtype=None):
    dt = _sum_dtype(x, dtype)
    xa = _to(x, opmath(dt))
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
    xa = _to(x, opmath(dt))
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
def _search(bd, v, right, sorter):
    """CPU's lower/upper bound binary search (same comparisons, so NaN behaves alike)."""
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
    return _search(sorted_sequence, x, r, sorter)


@lower("bucketize.Tensor", "bucketize.Scalar")
def bucketize(x, boundaries, *, out_int32=False, right=False):
    _no_bool("bucketize", boundaries)
    return _search(boundaries, x, right, None)


# ---------------------------------------------------------------- histc
@lower("histc.default", static=("bins", "min", "max"))
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


def _histc_kernel(entry):
    """histc's eager kernel: integer inputs get CUDA's checks, and CUDA's host read of the
    data's range when min == max, so an invalid range raises as on CUDA."""
    ints = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16,
            torch.uint32, torch.uint64)

    def kernel(self, bins=100, min=0, max=0):
        if self.dtype not in ints or not isinstance(bins, int):
            return entry(self, bins, min, max)
        if bins <= 0:
            raise RuntimeError("bins must be > 0")
        dt = runtime.jdtype(self.dtype)
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
        return entry(self, bins, mn, mx)

    return kernel


# ---------------------------------------------------------------- cdist
def _pdiff(x1, x2):
    return x1[..., :, None, :] - x2[..., None, :, :]


def pnorm_last(a, p):
    """The p-norm over the last axis of non-negative values `a` (|x| or |differences|):
    p = 0 counts non-zeros, p = inf is the max; an empty axis gives 0."""
    if a.shape[-1] == 0:
        return jnp.zeros(a.shape[:-1], a.dtype)
    if p == 0:
        return jnp.sum((a != 0).astype(a.dtype), axis=-1)
    if p == 1:
        return jnp.sum(a, axis=-1)
    if p == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=-1))
    if p == math.inf:
        return jnp.max(a, axis=-1)
    return jnp.power(jnp.sum(jnp.power(a, p), axis=-1), 1.0 / p)


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


# ---------------------------------------------------------------- kernels that read back
def _equal_kernel(self, other):
    if self.device != other.device:
        raise RuntimeError(
            f"Cannot compare two tensors on different devices. Got: {self.device} and {other.device}")
    if self.shape != other.shape:
        return False
    if self.numel() == 0:
        return True
    return bool(torch.eq(self, other).all().item())


# Kernels below run their own small jitted functions over the tensors' cells
# (like ops/indexing.py's data-dependent ops): one for the data-dependent size,
# read back once, then one with that size static.
_k_fns: dict = {}


def _k_jit(key, build):
    f = _k_fns.get(key)
    if f is None:
        if len(_k_fns) > 1024:
            _k_fns.clear()
        f = _k_fns[key] = jax.jit(build())
    return f


def _k_inputs(ts):
    from .. import storage

    cells = [storage.cell_of(t) for t in ts]
    specs = tuple(storage.view_spec(t) for t in ts)
    sig = tuple((c.arr.dtype, c.arr.shape[0]) for c in cells)
    return [c.arr for c in cells], specs, sig


def _k_read(specs):
    from .. import storage

    return lambda arrs: [storage.read_view(a, sp) for a, sp in zip(arrs, specs)]


def _k_tensor(arr, dtype, shape, index):
    """A new contiguous neuron tensor over the jax array `arr`."""
    from .. import storage

    shape = tuple(shape)
    nbytes = math.prod(shape) * dtype.itemsize
    storage.check_room(index, nbytes)
    return storage.make_tensor(arr.reshape(-1), dtype, shape, storage.contiguous_strides(shape), 0,
                               index, nbytes)


def _k_index(t):
    return t.device.index if t.device.index is not None else 0


def _k_check_device(*ts):
    from .. import dispatch

    for t in ts:
        if t is not None and t.device.type != "neuron":
            raise dispatch.device_mismatch("neuron:0", t.device)


def _bincount_kernel(self, weights=None, minlength=0):
    """bincount: the result length depends on max(self), read back once (a sync)."""
    _k_check_device(self, weights)
    if self.dtype == torch.bool or self.dtype.is_floating_point or self.dtype.is_complex:
        raise not_implemented("bincount", self.dtype)
    if self.dim() != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is not None and (weights.dim() != 1 or weights.shape[0] != self.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    index = _k_index(self)
    arrs, specs, sig = _k_inputs([self] if weights is None else [self, weights])
    read = _k_read(specs)
    length = minlength
    if self.numel():
        def build_range():
            def fn(*a):
                v = read(a)[0].astype(jnp.int64)
                return jnp.stack([jnp.min(v), jnp.max(v)])
            return fn

        mn, mx = (int(v) for v in np.asarray(_k_jit(("bc_range", specs, sig), build_range)(*arrs)))
        if mn < 0:
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
        length = max(mx + 1, minlength)
    if weights is None:
        odt = torch.int64
    else:
        odt = torch.float32 if weights.dtype == torch.float32 else torch.float64
    jodt = runtime.jdtype(odt)

    def build_count():
        def fn(*a):
            vals = read(a)
            v = vals[0].astype(jnp.int64)
            w = jnp.ones(v.shape, jodt) if len(vals) == 1 else _to(vals[1], jodt)
            return jnp.zeros((length,), jodt).at[v].add(w)
        return fn

    out = _k_jit(("bc_count", specs, sig, length, odt), build_count)(*arrs)
    return _k_tensor(out, odt, (length,), index)


# ---------------------------------------------------------------- unique
def _rows_sort(rows):
    """Stable lexicographic sort of the rows of (n, m): (sorted rows, permutation)."""
    n, m = rows.shape
    iota = lax.iota(jnp.int64, n)
    keys = rows.astype(jnp.uint8) if rows.dtype == jnp.bool_ else rows
    if n <= 1:
        return rows, iota
    cols = [keys[:, j] for j in range(m)]
    out = lax.sort(tuple(cols) + (iota,), dimension=0, num_keys=max(m, 1), is_stable=True)
    perm = out[-1]
    return jnp.take(rows, perm, axis=0), perm


def _unique_impl(self, dim, sort, return_inverse, return_counts, name):
    """unique / unique_consecutive (dim None: over elements; else over slices along dim)."""
    _k_check_device(self)
    index = _k_index(self)
    shape = tuple(self.shape)
    if self.is_complex():
        cname = "unique_dim" if name == "unique_dim" else "unique"
        raise not_implemented(cname, self.dtype)
    if dim is not None:
        if self.dim() == 0:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        nd = self.dim()
        if not -nd <= dim < nd:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], "
                             f"but got {dim})")
        dim = dim % nd
    if dim is not None:
        zeros = sum(1 for sz in shape if sz == 0)
        if shape[dim] == 0:
            if zeros != 1:
                raise RuntimeError("Number of zero sized dimensions is more than one, so unique cannot be applied ")
            empty = torch.empty(0, dtype=torch.int64, device=self.device)
            return (torch.empty(shape, dtype=self.dtype, device=self.device), empty, empty.clone())
        if zeros:
            raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    numel = self.numel()
    if numel == 0:
        inv = torch.zeros(shape if return_inverse else (0,), dtype=torch.int64, device=self.device)
        return (torch.empty((0,), dtype=self.dtype, device=self.device), inv,
                torch.empty((0,), dtype=torch.int64, device=self.device))
    arrs, specs, sig = _k_inputs([self])
    read = _k_read(specs)

    def rows_of(x):
        if dim is None:
            return x.reshape(-1, 1)
        return jnp.moveaxis(x, dim, 0).reshape(shape[dim], -1)

    def build_a():
        def fn(*a):
            r = rows_of(read(a)[0])
            if sort:
                srt, perm = _rows_sort(r)
            else:
                srt, perm = r, lax.iota(jnp.int64, r.shape[0])
            diff = jnp.any(srt[1:] != srt[:-1], axis=1)
            is_new = jnp.concatenate([jnp.ones((1,), bool), diff])
            return srt, perm, is_new, jnp.sum(is_new.astype(jnp.int64))
        return fn

    srt, perm, is_new, cnt = _k_jit(("uq_a", specs, sig, dim, sort), build_a)(*arrs)
    count = int(np.asarray(cnt))
    n = srt.shape[0]

    def build_b():
        def fn(srt, perm, is_new):
            g = jnp.cumsum(is_new.astype(jnp.int64)) - 1
            (pos,) = jnp.nonzero(is_new, size=count, fill_value=0)
            uniq = jnp.take(srt, pos, axis=0)
            outs = [uniq]
            if return_inverse:
                outs.append(jnp.zeros((n,), jnp.int64).at[perm].set(g))
            if return_counts:
                outs.append(jnp.zeros((count,), jnp.int64).at[g].add(1))
            return outs
        return fn

    res = _k_jit(("uq_b", srt.shape, str(srt.dtype), count, return_inverse, return_counts), build_b)(
        srt, perm, is_new)
    if dim is None:
        out = _k_tensor(res[0], self.dtype, (count,), index)
    else:
        rest = shape[:dim] + shape[dim + 1:]
        u = jnp.moveaxis(res[0].reshape((count,) + rest), 0, dim)
        out = _k_tensor(u, self.dtype, shape[:dim] + (count,) + shape[dim + 1:], index)
    k = 1
    if return_inverse:
        inv_shape = shape if dim is None else (shape[dim],)
        inv = _k_tensor(res[k], torch.int64, inv_shape, index)
        k += 1
    else:
        inv = torch.empty((0,), dtype=torch.int64, device=self.device)
    if return_counts:
        counts = _k_tensor(res[k], torch.int64, (count,), index)
    else:
        counts = torch.empty((0,), dtype=torch.int64, device=self.device)
    return out, inv, counts


def _unique2_kernel(self, sorted=True, return_inverse=False, return_counts=False):
    return _unique_impl(self, None, True, return_inverse, return_counts, "unique")


def _unique_kernel(self, sorted=True, return_inverse=False):
    out, inv, _ = _unique_impl(self, None, True, return_inverse, False, "unique")
    return out, inv


def _unique_dim_kernel(self, dim, sorted=True, return_inverse=False, return_counts=False):
    return _unique_impl(self, dim, True, return_inverse, return_counts, "unique_dim")


def _unique_consecutive_kernel(self, return_inverse=False, return_counts=False, dim=None):
    return _unique_impl(self, dim, False, return_inverse, return_counts, "unique_consecutive")


def _unique_dim_consecutive_kernel(self, dim, return_inverse=False, return_counts=False):
    return _unique_impl(self, dim, False, return_inverse, return_counts, "unique_dim_consecutive")


# ---------------------------------------------------------------- histogram
def _g(v):
    return "%g" % v


_HIST_DTYPES = (torch.float32, torch.float64)


def _hist_checks(self, weight):
    if self.dtype not in _HIST_DTYPES:
        raise not_implemented("histogramdd", self.dtype)
    if weight is not None:
        if tuple(weight.shape) != tuple(self.shape):
            raise RuntimeError(
                "torch.histogramdd: if weight tensor is provided it should have the same shape as the "
                "input tensor excluding its innermost dimension, but got input with shape "
                f"{[self.numel(), 1]} and weight with shape {list(weight.shape)}")
        if weight.dtype != self.dtype:
            raise RuntimeError(
                "torch.histogramdd: if weight tensor is provided, input tensor and weight tensor should "
                f"have the same dtype, but got input({_cname(self.dtype)}), and weight({_cname(weight.dtype)})")


def _cname(dt):
    return {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
            torch.int64: "long int", torch.int32: "int"}.get(dt, str(dt).replace("torch.", ""))


def _hist_run(self, weight, edges_fn, locate, nbins, density, key, extra):
    """Shared histogram body: edges from `edges_fn`, bin of each element from `locate`."""
    index = _k_index(self)
    ts = [self] + ([weight] if weight is not None else []) + list(extra)
    arrs, specs, sig = _k_inputs(ts)
    read = _k_read(specs)
    nw = 1 if weight is not None else 0
    dt = runtime.jdtype(self.dtype)

    def build():
        def fn(lohi, *a):
            vals = read(a)
            x = vals[0].reshape(-1)
            w = vals[1].reshape(-1) if nw else jnp.ones(x.shape, dt)
            edges = edges_fn(lohi, vals[1 + nw:])
            left, right = edges[0], edges[-1]
            valid = (x >= left) & (x <= right)
            pos = locate(x, edges, left, right)
            pos = jnp.where(pos == nbins, nbins - 1, pos)
            pos = jnp.clip(jnp.where(valid, pos, 0), 0, max(nbins - 1, 0))
            hist = jnp.zeros((nbins,), dt).at[pos].add(jnp.where(valid, w, 0))
            if density:
                hist = hist / jnp.sum(hist)
                hist = hist / (edges[1:] - edges[:-1])
            return hist, edges
        return fn

    kind, lohi = key
    f = _k_jit(("hist", kind, specs, sig, nbins, density), build)
    lohi = jax.device_put(np.asarray(lohi, np.float64), runtime.jax_device(index))
    hist, edges = f(lohi, *arrs)
    return _k_tensor(hist, self.dtype, (nbins,), index), _k_tensor(edges, self.dtype, (edges.shape[0],), index)


def _histogram_bin_ct_kernel(self, bins=100, *, range=None, weight=None, density=False):
    _k_check_device(self, weight)
    _hist_checks(self, weight)
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    if range is not None:
        lo, hi = float(range[0]), float(range[1])
    elif self.numel():
        arrs, specs, sig = _k_inputs([self])
        read = _k_read(specs)

        def build():
            def fn(*a):
                x = read(a)[0]
                return jnp.stack([jnp.min(x), jnp.max(x)]).astype(jnp.float64)
            return fn

        lo, hi = (float(v) for v in np.asarray(_k_jit(("hist_range", specs, sig), build)(*arrs)))
    else:
        lo, hi = 0.0, 1.0  # CPU's default outer edges for an empty input
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"torch.histogramdd: dimension 0's range [{_g(lo)}, {_g(hi)}] is not finite")
    if lo > hi:
        raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {_g(lo)} max {_g(hi)} "
                           "for dimension 0")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    dt = runtime.jdtype(self.dtype)
    steps = bins + 1

    def edges_fn(lohi, _):
        # CPU's linspace kernel, in the tensor's dtype
        start, end = lohi[0].astype(dt), lohi[1].astype(dt)
        step = (end - start) / jnp.asarray(steps - 1, dt)
        i = lax.iota(jnp.int64, steps)
        fi = i.astype(dt)
        return jnp.where(i < steps // 2, start + step * fi, end - step * (jnp.asarray(steps - 1, dt) - fi))

    def locate(x, edges, left, right):
        # linear interpolation, then CPU's local upper_bound search in [pos-1, pos+2)
        p = ((x - left) * jnp.asarray(bins, dt) / (right - left))
        p = jnp.clip(jnp.where(jnp.isfinite(p), p, 0), -1, bins + 1).astype(jnp.int64)
        pmin = jnp.maximum(p - 1, 0)
        pmax = jnp.minimum(p + 2, steps)
        cnt = jnp.zeros(x.shape, jnp.int64)
        for k in (0, 1, 2):
            j = pmin + k
            inside = j < pmax
            cnt = cnt + (inside & (jnp.take(edges, jnp.clip(j, 0, steps - 1)) <= x)).astype(jnp.int64)
        return pmin + cnt - 1

    return _hist_run(self, weight, edges_fn, locate, bins, density, ("ct", (lo, hi)), [])


def _histogram_bins_tensor_kernel(self, bins, *, weight=None, density=False):
    _k_check_device(self, weight, bins)
    _hist_checks(self, weight)
    if bins.dtype != self.dtype:
        raise RuntimeError(
            "torch.histogramdd: input tensor and bins tensors should have the same dtype, but got input "
            f"with dtype {_cname(self.dtype)} and bins for dimension 0 with dtype {_cname(bins.dtype)}")
    if bins.dim() != 1:
        raise RuntimeError("torch.histogramdd: bins tensor should have one dimension, but got "
                           f"{bins.dim()} dimensions in the bins tensor for dimension 0")
    if bins.numel() == 0:
        raise RuntimeError("torch.histogramdd: bins tensor should have at least 1 element, but got 0 "
                           "elements in the bins tensor for dimension 0")
    nb = bins.numel() - 1
    if nb <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {nb} for dimension 0")

    def edges_fn(lohi, extra):
        return extra[0]

    def locate(x, edges, left, right):
        return _search(edges, x, True, None) - 1

    return _hist_run(self, weight, edges_fn, locate, nb, density, ("tensor", (0.0, 0.0)), [bins])


def _aminmax_kernel(self):
    return torch.aminmax(self)


def _aminmax_dim_kernel(self, dim, keepdim=False):
    return torch.aminmax(self, dim=dim, keepdim=keepdim)


def _register_kernels():
    from .. import dispatch

    dispatch.declare(torch.ops.aten.equal.default, _equal_kernel)
    aten = torch.ops.aten
    for op, fn in ((aten.bincount.default, _bincount_kernel),
                   (aten._unique2.default, _unique2_kernel),
                   (aten._unique.default, _unique_kernel),
                   (aten.unique_dim.default, _unique_dim_kernel),
                   (aten.unique_consecutive.default, _unique_consecutive_kernel),
                   (aten.unique_dim_consecutive.default, _unique_dim_consecutive_kernel),
                   (aten.histogram.bin_ct, _histogram_bin_ct_kernel),
                   (aten.histogram.bins_tensor, _histogram_bins_tensor_kernel),
                   (aten._aminmax.default, _aminmax_kernel),
                   (aten._aminmax.dim, _aminmax_dim_kernel)):
        dispatch.declare(op, fn)

    # nansum(x, dim=[]) reduces everything on CPU, but PyTorch's meta kernel
    # keeps every dim: normalise [] to None before the executable is chosen
    op = torch.ops.aten.nansum.default
    entry = dispatch.Entry(op, LOWERINGS[op], "functional")

    def nansum_kernel(self, dim=None, keepdim=False, *, dtype=None):
        if dim is not None and len(dim) == 0:
            dim = None
        return entry(self, dim, keepdim, dtype=dtype)

    dispatch.declare(op, nansum_kernel)
    op = torch.ops.aten.histc.default
    dispatch.declare(op, _histc_kernel(dispatch.Entry(op, LOWERINGS[op], "functional")))


_register_kernels()


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


@lower("segment_reduce.default", static=("initial",))
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


def _register_segment_kernel():
    from .. import dispatch

    op = torch.ops.aten.segment_reduce.default
    if dispatch.declared(op):
        return
    entry = dispatch.Entry(op, LOWERINGS[op], "functional")

    def kernel(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False,
               initial=None):
        if reduce not in _SEG_REDUCE:
            raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, "
                               f"got {reduce}")
        if indices is not None:
            raise RuntimeError("segment_reduce(): indices based reduction is not supported yet.")
        if lengths is None and offsets is None:
            raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined.")
        if not unsafe and lengths is not None and offsets is None and data.numel():
            # CPU checks the values (one host read)
            ok = bool((lengths.sum(-1) == data.shape[axis % data.dim()]).all().item())
            if not ok:
                raise RuntimeError("segment_reduce(): Expected all rows of lengths along axis to "
                                   "sum to data.size(lengths.dim()-1) when !unsafe.")
        return entry(data, reduce, lengths=lengths, indices=indices, offsets=offsets, axis=axis,
                     unsafe=unsafe, initial=initial)

    dispatch.declare(op, kernel)


_register_segment_kernel()


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

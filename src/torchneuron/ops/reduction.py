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

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..lowering import call_warning, lower, out_dtype, sum_dtype
from ..numerics import (
    HALF,
    canon_dim,
    cast,
    convert,
    is_complex,
    is_float,
    jdtype,
    need_nonempty_dim,
    no_complex,
    not_implemented,
    opmath,
    real_dtype,
    round_to,
    scalar_type_name,
    to_dtype,
)


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


def _need_numel(name, x):
    if x.size == 0:
        raise RuntimeError(
            f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument.")


# ---------------------------------------------------------------- sum / mean / prod
def _sum_like(x, dim, keepdim, dtype, reduce, reduce_bool):
    """sum/prod: in the opmath of the result dtype (bool stays bool: any/all)."""
    axes = _axes(dim, x.ndim)
    out = sum_dtype(x, dtype)
    if is_complex(x.dtype) and not is_complex(out):
        call_warning("Casting complex values to real discards the imaginary part", once=True)
    if is_float(x.dtype) and not is_complex(x.dtype) and not is_float(out) and out != jnp.bool_:
        x = convert(x, out)  # float -> int as the CPU converts (wrapping for 8 bits), then sum
    xa = to_dtype(x, opmath(out))
    if xa.dtype == jnp.bool_:
        return reduce_bool(xa, axis=axes, keepdims=keepdim)
    return reduce(xa, axis=axes, keepdims=keepdim)


@lower("sum.dim_IntList", "sum.default")
def sum_(x, dim=None, keepdim=False, *, dtype=None):
    return _sum_like(x, dim, keepdim, dtype, jnp.sum, jnp.any)


def _nansum_normalize(self, dim=None, keepdim=False, *, dtype=None):
    """nansum(x, dim=[]) reduces everything on CPU, but PyTorch's meta kernel keeps every
    dim: [] becomes None before the executable is chosen (eager only)."""
    if dim is not None and len(dim) == 0:
        dim = None
    return (self, dim, keepdim), {"dtype": dtype}


_nansum_ok: dict = {}


def _nansum_check(self, dim=None, keepdim=False, *, dtype=None):
    """The dtypes the running release's CPU kernel takes (torch 2.11 refuses integer
    results of floats; an empty stand-in would not tell: the kernel returns early)."""
    key = (self.dtype, dtype)
    if key not in _nansum_ok:
        try:
            torch.nansum(torch.zeros(1, dtype=self.dtype), dtype=dtype)
            _nansum_ok[key] = None
        except NotImplementedError as e:
            _nansum_ok[key] = str(e)
        except RuntimeError:
            _nansum_ok[key] = None
    if _nansum_ok[key] is not None:
        raise NotImplementedError(_nansum_ok[key])


@lower("nansum.default", normalize=_nansum_normalize, check=_nansum_check)
def nansum(x, dim=None, keepdim=False, *, dtype=None):
    if is_complex(x.dtype):
        raise RuntimeError("nansum on neuron does not support complex inputs")
    if dtype is not None and dtype.is_complex:
        raise not_implemented("nansum_cpu", jdtype(dtype))
    if is_float(x.dtype) and not is_complex(x.dtype):
        x = jnp.where(jnp.isnan(x), jnp.zeros((), x.dtype), x)
    return sum_(x, dim, keepdim, dtype=dtype)


@lower("mean.default", "mean.dim")
def mean(x, dim=None, keepdim=False, *, dtype=None):
    dt = out_dtype() or (jdtype(dtype) if dtype is not None else x.dtype)
    axes = _axes(dim, x.ndim)
    xa = to_dtype(x, opmath(dt))
    n = math.prod(x.shape[a] for a in axes)
    s = jnp.sum(xa, axis=axes, keepdims=keepdim)
    return s / jnp.asarray(n, real_dtype(xa.dtype)) if n else s * jnp.asarray(jnp.nan, real_dtype(xa.dtype))


@lower("prod.default", "prod.dim_int")
def prod(x, dim=None, keepdim=False, *, dtype=None):
    return _sum_like(x, dim, keepdim, dtype, jnp.prod, jnp.all)


# ---------------------------------------------------------------- max / min family
def _max(x, axes, keepdim):
    return jnp.max(x, axis=axes, keepdims=keepdim)


def _min(x, axes, keepdim):
    return jnp.min(x, axis=axes, keepdims=keepdim)


@lower("amax.default")
def amax(x, dim=(), keepdim=False):
    no_complex("max_values_cpu", x)  # (CPU's kernel name)
    return _max(x, _axes(dim, x.ndim), keepdim)


@lower("amin.default")
def amin(x, dim=(), keepdim=False):
    no_complex("min_values_cpu", x)
    return _min(x, _axes(dim, x.ndim), keepdim)


@lower("max.default")
def max_all(x):
    no_complex("max_all", x)
    _need_numel("max", x)
    return jnp.max(x)


@lower("min.default")
def min_all(x):
    no_complex("min_all", x)
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
    d = canon_dim(dim, x.ndim)
    idx = jnp.expand_dims(_arg(x, d, largest), d)
    vals = jnp.take_along_axis(x, idx, axis=d)
    if not keepdim:
        vals, idx = jnp.squeeze(vals, d), jnp.squeeze(idx, d)
    return vals, idx


def _no_complex_input(name, x):
    # (CPU's check before its dtype dispatch: a RuntimeError, not the dispatch error)
    if is_complex(x.dtype):
        raise RuntimeError(f"{name}(): does not support complex input")


@lower("max.dim")
def max_dim(x, dim, keepdim=False):
    _no_complex_input("max", x)
    need_nonempty_dim("max", x, dim)
    return _val_idx(x, dim, keepdim, True)


@lower("min.dim")
def min_dim(x, dim, keepdim=False):
    _no_complex_input("min", x)
    need_nonempty_dim("min", x, dim)
    return _val_idx(x, dim, keepdim, False)


def _argmaxmin(x, dim, keepdim, largest):
    _no_complex_input("argmax" if largest else "argmin", x)
    if x.dtype == jnp.bool_:
        raise RuntimeError(f"{'argmax' if largest else 'argmin'}(): does not support bool input")
    if dim is not None:
        need_nonempty_dim("argmax" if largest else "argmin", x, dim)
    if x.ndim == 0:
        return jnp.zeros((), jnp.int64)
    if dim is None:
        r = _arg(x.reshape(-1), 0, largest)
        return r.reshape((1,) * x.ndim) if keepdim else r
    d = canon_dim(dim, x.ndim)
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
    no_complex("aminmax_cpu", x)
    if dim is None:
        axes = tuple(range(x.ndim))
    else:
        axes = _axes([dim], x.ndim)
    mn, mx = _min(x, axes, keepdim), _max(x, axes, keepdim)
    return mn, mx


# ---------------------------------------------------------------- var / std
def _var_mean(x, dim, correction, keepdim, name="var"):
    if not is_float(x.dtype):
        raise RuntimeError("std and var only support floating point and complex dtypes")
    axes = _axes(dim, x.ndim)
    xa = cast(x, opmath(x.dtype))
    if correction is None:
        correction = 1
    n = math.prod(x.shape[a] for a in axes)
    rdt = real_dtype(xa.dtype)
    m = jnp.mean(xa, axis=axes, keepdims=True) if n else \
        jnp.full(tuple(1 if i in axes else s for i, s in enumerate(x.shape)), jnp.nan, xa.dtype)
    d = xa - m
    sq = d.real * d.real + d.imag * d.imag if is_complex(d.dtype) else d * d
    denom = max(n - correction, 0)
    if denom <= 0 or x.size == 0:  # (CPU's degrees of freedom: numel / output numel, 0 if empty)  # CPU warns on every call (so does the executable)
        call_warning(f"{name}(): degrees of freedom is <= 0. Correction should be strictly "
                     "less than the reduction factor (input numel divided by output numel).")
    var = jnp.sum(sq, axis=axes, keepdims=keepdim) / jnp.asarray(denom, rdt)
    if not keepdim:
        m = jnp.squeeze(m, axes) if axes else m
    return var, m


@lower("var.correction", static=("correction",))
def var(x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(x, dim, correction, keepdim)[0]


@lower("std.correction", static=("correction",))
def std(x, dim=None, *, correction=None, keepdim=False):
    return jnp.sqrt(_var_mean(x, dim, correction, keepdim, "std")[0])


@lower("var_mean.correction", static=("correction",))
def var_mean(x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(x, dim, correction, keepdim, "var_mean")


@lower("std_mean.correction", static=("correction",))
def std_mean(x, dim=None, *, correction=None, keepdim=False):
    v, m = _var_mean(x, dim, correction, keepdim, "std_mean")
    return jnp.sqrt(v), m


# ---------------------------------------------------------------- norms
def _vnorm(x, ord, axes, keepdim):
    rdt = real_dtype(opmath(x.dtype))
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
    re = xa.real if is_complex(xa.dtype) else xa
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


# ---------------------------------------------------------------- histc
@lower("histc.default", static=("bins", "min", "max"),
       normalize=lambda *a, **k: _histc_normalize(*a, **k))
def histc(x, bins=100, min=0, max=0):
    if jnp.issubdtype(x.dtype, jnp.integer):
        return _histc_int(x, bins, min, max)
    if not is_float(x.dtype) or is_complex(x.dtype):
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

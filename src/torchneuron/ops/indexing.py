"""Indexing: advanced indexing, index_put, gather/scatter, index_* ops, masks, take/put,
embedding, and the data-dependent ops (nonzero, masked_select, x[mask]).

Lowerings are pure jax and serve eager and compiled execution.  In eager mode
each op that reads indices is wrapped in a kernel that first checks the
indices are in range (one small device reduction read back to the host: a
sync, as CUDA's device-side assert is) and raises PyTorch's error; set
``TORCHNEURON_INDEX_CHECKS=0`` (or :func:`set_index_checks`) to skip the check.
Inside the lowerings out-of-range gathers fill (NaN / the minimum integer) and
out-of-range scatters are dropped, so a compiled graph never reads or writes
outside a buffer.

Data-dependent output shapes (``nonzero``, ``masked_select``, ``x[mask]``)
count on the device, read the count (a sync), then run an executable whose
output size is the count rounded up to a power of two; the result is a view
of the first ``count`` rows.  This keeps the number of compiled executables
logarithmic in the tensor size.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from .. import config, dispatch, storage
from ..numerics import canon_dim, cast, scalar_type_name
from ..lowering import LOWERINGS, lower, out_meta, resolve

aten = torch.ops.aten

_checks = config.get("TORCHNEURON_INDEX_CHECKS")


def set_index_checks(enabled: bool) -> bool:
    """Turn the eager out-of-range index checks on/off; returns the previous setting."""
    global _checks
    prev, _checks = _checks, bool(enabled)
    return prev


def index_checks() -> bool:
    return _checks


# ---------------------------------------------------------------- small helpers
def _as1(x):
    return x.reshape(1) if x.ndim == 0 else x


def _out_shape():
    m = out_meta()
    if isinstance(m, (list, tuple)):
        m = m[0]
    return tuple(m.shape)


def _bool_math(x):
    """Bool tensors are reduced as int8 (add = or, mul = and) and cast back by dispatch."""
    return x.astype(jnp.int8) if x.dtype == jnp.bool_ else x


def _fix_bool(r, dt):
    if dt == jnp.bool_:
        return r != 0
    return r


def _idx_tuple(indices):
    out = []
    for i in indices:
        if i is None:
            out.append(slice(None))
            continue
        i = jnp.asarray(i)
        if i.dtype == jnp.bool_ or i.dtype == jnp.uint8:
            raise RuntimeError(
                "torchneuron: boolean mask indices have a data-dependent shape; they are "
                "converted with nonzero in eager mode but cannot appear inside a compiled graph")
        out.append(i)
    return tuple(out)


def _dim_idx(ndim, dim, index):
    """An index tuple selecting `index` along `dim` and everything along other dims."""
    return (slice(None),) * dim + (index,)


def _scatter_idx(index, dim):
    """Full index tuple addressing, for every element of `index`, the position it names."""
    dt = index.dtype
    return tuple(index if d == dim else lax.broadcasted_iota(dt, index.shape, d)
                 for d in range(index.ndim))


def _identity(reduce, dt):
    if reduce in ("sum", "add", "mean"):
        return jnp.zeros((), dt)
    if reduce in ("prod", "multiply"):
        return jnp.ones((), dt)
    big = jnp.inf if jnp.issubdtype(dt, jnp.inexact) else jnp.iinfo(dt).max
    if reduce == "amax":
        return jnp.asarray(-big if jnp.issubdtype(dt, jnp.inexact) else jnp.iinfo(dt).min, dt)
    return jnp.asarray(big, dt)


def _reduce_into(x, idx, src, reduce, include_self, wrap):
    """x with src reduced into the positions idx (an .at[] index tuple)."""
    dt = x.dtype
    kw = dict(mode="drop", wrap_negative_indices=wrap)
    xm = _bool_math(x)
    sm = _bool_math(cast(src, dt))
    if not include_self:
        xm = xm.at[idx].set(_identity(reduce, xm.dtype), **kw)
    if reduce in ("sum", "add"):
        r = xm.at[idx].add(sm, **kw)
    elif reduce in ("prod", "multiply"):
        r = xm.at[idx].multiply(sm, **kw)
    elif reduce == "amax":
        r = xm.at[idx].max(sm, **kw)
    elif reduce == "amin":
        r = xm.at[idx].min(sm, **kw)
    elif reduce == "mean":
        s = xm.at[idx].add(sm, **kw)
        cnt = jnp.full(x.shape, 1 if include_self else 0, jnp.int64)
        cnt = cnt.at[idx].add(jnp.ones(sm.shape, jnp.int64), **kw)
        cnt = jnp.maximum(cnt, 1)
        if jnp.issubdtype(s.dtype, jnp.inexact):
            r = s / cnt.astype(s.dtype)
        else:
            r = jnp.floor_divide(s, cnt.astype(s.dtype))
    else:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    return _fix_bool(r, dt)


# ---------------------------------------------------------------- advanced indexing
@lower("index.Tensor", "_unsafe_index.Tensor")
def index(x, indices):
    idx = _idx_tuple(indices)
    return x.at[idx].get(mode="fill")


@lower("index_put.default", "_unsafe_index_put.default")
def index_put(x, indices, values, accumulate=False):
    idx = _idx_tuple(indices)
    v = cast(jnp.asarray(values), x.dtype)
    res = jax.eval_shape(lambda a: a[idx], x).shape
    if len(v.shape) > len(res) or any(a != 1 and a != b for a, b in
                                      zip(reversed(v.shape), reversed(res))):
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(v.shape)} cannot be "
                           f"broadcast to indexing result of shape {list(res)}")
    if accumulate:
        r = _bool_math(x).at[idx].add(_bool_math(v), mode="drop")
        return _fix_bool(r, x.dtype)
    return x.at[idx].set(v, mode="drop")


@lower("_index_put_impl_.default")
def _index_put_impl_(x, indices, values, accumulate=False, unsafe=False):
    return index_put(x, indices, values, accumulate)


@lower("_unsafe_masked_index.default")
def _unsafe_masked_index(x, mask, indices, fill):
    idx = tuple(slice(None) if i is None else jnp.asarray(i) for i in indices)
    v = x.at[idx].get(mode="clip")
    return jnp.where(mask, v, cast(jnp.asarray(fill), x.dtype))


@lower("_unsafe_masked_index_put_accumulate.default")
def _unsafe_masked_index_put_accumulate(x, mask, indices, values):
    idx = tuple(slice(None) if i is None else jnp.where(mask, jnp.asarray(i), 0)
                for i in indices)
    v = jnp.where(mask, cast(values, x.dtype), jnp.zeros((), x.dtype))
    return _fix_bool(_bool_math(x).at[idx].add(_bool_math(v), mode="drop"), x.dtype)


# ---------------------------------------------------------------- gather / scatter
@lower("gather.default")
def gather(x, dim, index, *, sparse_grad=False):
    shape = _out_shape()
    x1, i1 = _as1(x), _as1(index)
    dim = canon_dim(dim, x.ndim)
    if i1.size == 0:
        return jnp.zeros(shape, x.dtype)
    # PyTorch allows index to be smaller than self in the other dims
    xs = x1[tuple(slice(0, i1.shape[d]) if d != dim else slice(None) for d in range(x1.ndim))]
    r = xs.at[_scatter_idx(i1, dim)].get(mode="fill", wrap_negative_indices=False)
    return r.reshape(shape)


def _scatter_src(src, index):
    src = _as1(jnp.asarray(src))
    if src.ndim == 0:
        return src
    return src[tuple(slice(0, s) for s in index.shape)]


def _scatter(x, dim, index, src, reduce):
    x1, i1 = _as1(x), _as1(index)
    dim = canon_dim(dim, x.ndim)
    if i1.size == 0:
        return x
    idx = _scatter_idx(i1, dim)
    s = jnp.asarray(src)
    s = _scatter_src(s, i1) if s.ndim else s
    s = jnp.broadcast_to(cast(s, x.dtype), i1.shape)
    if reduce is None:
        r = x1.at[idx].set(s, mode="drop", wrap_negative_indices=False)
    else:
        r = _reduce_into(x1, idx, s, reduce, True, False)
    return r.reshape(x.shape)


@lower("scatter.src", "scatter.value")
def scatter(x, dim, index, src=None, value=None):
    return _scatter(x, dim, index, src if src is not None else value, None)


@lower("scatter.reduce", "scatter.value_reduce")
def scatter_reduce_legacy(x, dim, index, src=None, value=None, *, reduce):
    return _scatter(x, dim, index, src if src is not None else value, reduce)


@lower("scatter_add.default")
def scatter_add(x, dim, index, src):
    return _scatter(x, dim, index, src, "add")


@lower("scatter_reduce.two")
def scatter_reduce(x, dim, index, src, reduce, *, include_self=True):
    x1, i1 = _as1(x), _as1(index)
    dim = canon_dim(dim, x.ndim)
    if i1.size == 0:
        return x
    s = _scatter_src(src, i1)
    r = _reduce_into(x1, _scatter_idx(i1, dim), s, reduce, include_self, False)
    return r.reshape(x.shape)


# ---------------------------------------------------------------- index_* along a dim
@lower("index_select.default")
def index_select(x, dim, index):
    shape = _out_shape()
    x1 = _as1(x)
    dim = canon_dim(dim, x.ndim)
    i = jnp.asarray(index).reshape(-1)
    r = x1.at[_dim_idx(x1.ndim, dim, i)].get(mode="fill", wrap_negative_indices=False)
    return r.reshape(shape)


def _src_along(src, x1, dim, n):
    shape = x1.shape[:dim] + (n,) + x1.shape[dim + 1:]
    return jnp.broadcast_to(jnp.asarray(src).reshape(shape) if jnp.ndim(src) else src, shape)


@lower("index_add.default")
def index_add(x, dim, index, source, *, alpha=1):
    x1 = _as1(x)
    dim = canon_dim(dim, x.ndim)
    i = jnp.asarray(index).reshape(-1)
    s = cast(_src_along(source, x1, dim, i.shape[0]), x.dtype)
    if not (isinstance(alpha, (int, float)) and alpha == 1):
        if x.dtype == jnp.bool_:
            s = s & cast(jnp.asarray(alpha), jnp.bool_)
        else:
            s = s * cast(jnp.asarray(alpha), x.dtype)
    r = _bool_math(x1).at[_dim_idx(x1.ndim, dim, i)].add(
        _bool_math(s), mode="drop", wrap_negative_indices=False)
    return _fix_bool(r, x.dtype).reshape(x.shape)


@lower("index_copy.default")
def index_copy(x, dim, index, source):
    x1 = _as1(x)
    dim = canon_dim(dim, x.ndim)
    i = jnp.asarray(index).reshape(-1)
    s = cast(_src_along(source, x1, dim, i.shape[0]), x.dtype)
    r = x1.at[_dim_idx(x1.ndim, dim, i)].set(s, mode="drop", wrap_negative_indices=False)
    return r.reshape(x.shape)


@lower("index_fill.int_Scalar", "index_fill.int_Tensor")
def index_fill(x, dim, index, value):
    x1 = _as1(x)
    dim = canon_dim(dim, x.ndim)
    i = jnp.asarray(index).reshape(-1)
    v = cast(jnp.asarray(value), x.dtype)
    r = x1.at[_dim_idx(x1.ndim, dim, i)].set(v, mode="drop")
    return r.reshape(x.shape)


@lower("index_reduce.default")
def index_reduce(x, dim, index, source, reduce, *, include_self=True):
    x1 = _as1(x)
    dim = canon_dim(dim, x.ndim)
    i = jnp.asarray(index).reshape(-1)
    s = _src_along(source, x1, dim, i.shape[0])
    r = _reduce_into(x1, _dim_idx(x1.ndim, dim, i), s, reduce, include_self, False)
    return r.reshape(x.shape)


# ---------------------------------------------------------------- masks
@lower("masked_fill.Scalar", "masked_fill.Tensor")
def masked_fill(x, mask, value):
    shape = _out_shape()
    v = cast(jnp.asarray(value), x.dtype)
    return jnp.where(jnp.broadcast_to(mask, shape), v, jnp.broadcast_to(x, shape))


def _masked_positions(m):
    """For a flat bool mask: the rank of each True among the Trues (garbage elsewhere)."""
    return jnp.cumsum(m.astype(jnp.int64)) - 1


@lower("masked_scatter.default")
def masked_scatter(x, mask, source):
    shape = _out_shape()
    xb = jnp.broadcast_to(x, shape).reshape(-1)
    m = jnp.broadcast_to(mask, shape).reshape(-1)
    src = cast(source, x.dtype).reshape(-1)
    if src.shape[0] == 0 or xb.shape[0] == 0:
        return xb.reshape(shape)
    pos = jnp.clip(_masked_positions(m), 0, src.shape[0] - 1)
    return jnp.where(m, src[pos], xb).reshape(shape)


@lower("masked_scatter_backward.default")
def masked_scatter_backward(grad_output, mask, sizes):
    shape = _out_shape()
    n = math.prod(shape)
    g = grad_output.reshape(-1)
    m = jnp.broadcast_to(mask, grad_output.shape).reshape(-1)
    pos = jnp.where(m, _masked_positions(m), n)
    out = jnp.zeros((n,), grad_output.dtype).at[pos].set(g, mode="drop")
    return out.reshape(shape)


# ---------------------------------------------------------------- take / put
@lower("take.default")
def take(x, index):
    return x.reshape(-1).at[index].get(mode="fill")


@lower("put.default")
def put(x, index, source, accumulate=False):
    flat = x.reshape(-1)
    i = jnp.asarray(index).reshape(-1)
    s = cast(source, x.dtype).reshape(-1)
    if accumulate:
        r = _fix_bool(_bool_math(flat).at[i].add(_bool_math(s), mode="drop"), x.dtype)
    else:
        r = flat.at[i].set(s, mode="drop")
    return r.reshape(x.shape)


# ---------------------------------------------------------------- embedding
@lower("embedding.default")
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return weight.at[indices].get(mode="fill", wrap_negative_indices=False)


@lower("embedding_renorm.default")
def embedding_renorm(weight, indices, max_norm, norm_type):
    """F.embedding(max_norm=...): each row that `indices` selects and whose norm exceeds
    max_norm is scaled by max_norm / (norm + 1e-7), as CPU does (the norm in the weight's
    dtype, the scale in double rounded to the weight's dtype, the product in float32)."""
    dt = weight.dtype
    half = jnp.dtype(dt) in (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))
    acc = jnp.float32 if half else dt
    w = weight.astype(acc)
    from .reduction import pnorm_last

    norm = pnorm_last(jnp.abs(w), float(norm_type))
    if half:
        norm = norm.astype(dt)
    norm = norm.astype(jnp.float64)
    used = jnp.zeros(weight.shape[:1], bool).at[jnp.asarray(indices).reshape(-1)].set(
        True, mode="drop", wrap_negative_indices=False)
    scale = jnp.asarray(max_norm, jnp.float64) / (norm + 1e-7)
    # for half weights CPU's `row *= scale` rounds the scale to the weight's dtype first
    scale = (scale.astype(dt) if half else scale).astype(acc)
    hit = (used & (norm > max_norm))[:, None]
    return jnp.where(hit, w * scale[:, None], w).astype(dt)


@lower("embedding_dense_backward.default")
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    d = grad_output.shape[-1] if grad_output.ndim else 1
    i = jnp.asarray(indices).reshape(-1)
    g = grad_output.reshape(i.shape[0], d)
    if padding_idx is not None and padding_idx >= 0:
        g = jnp.where((i == padding_idx)[:, None], jnp.zeros((), g.dtype), g)
    if scale_grad_by_freq:
        cnt = jnp.zeros((num_weights,), jnp.int64).at[i].add(1, mode="drop",
                                                              wrap_negative_indices=False)
        c = cnt.at[i].get(mode="fill", fill_value=1, wrap_negative_indices=False)
        g = g / c[:, None].astype(g.dtype)
    acc = jnp.float32 if g.dtype in (jnp.bfloat16, jnp.float16) else g.dtype
    out = jnp.zeros((num_weights, d), acc).at[i].add(g.astype(acc), mode="drop",
                                                      wrap_negative_indices=False)
    return out.astype(grad_output.dtype)


# embedding_bag: mode 0 sum, 1 mean, 2 max
def _bag_ids(indices, offsets, include_last_offset):
    """offset2bag (bag id of each index) and the number of bags."""
    n = indices.shape[0]
    nb = offsets.shape[0] - (1 if include_last_offset else 0)
    offs = offsets[:nb] if include_last_offset else offsets
    # bag of position p = (number of offsets <= p) - 1
    marks = jnp.zeros((n + 1,), jnp.int64).at[offs].add(1, mode="drop")
    bag = jnp.cumsum(marks)[:n] - 1
    return bag, nb


def _bag_ends(offsets, n, nb, include_last_offset):
    starts = offsets[:nb].astype(jnp.int64)
    if include_last_offset:
        ends = jnp.minimum(offsets[1:nb + 1].astype(jnp.int64), n)
    else:
        ends = jnp.concatenate([offsets[1:].astype(jnp.int64), jnp.array([n], jnp.int64)])
    return starts, ends


@lower("_embedding_bag.default", "_embedding_bag_forward_only.default")
def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    if indices.ndim == 2:  # 2-D input: fixed-size bags
        b, l = indices.shape
        offsets = jnp.arange(b, dtype=jnp.int64) * l
        indices = indices.reshape(-1)
        include_last_offset = False
    n = indices.shape[0]
    d = weight.shape[1]
    bag, nb = _bag_ids(indices, offsets, include_last_offset)
    starts, ends = _bag_ends(offsets, n, nb, include_last_offset)
    valid = (indices != padding_idx) if padding_idx >= 0 else jnp.ones((n,), jnp.bool_)
    # positions past the last bag (include_last_offset) belong to no bag
    inbag = valid & (bag < nb) & (jnp.arange(n) < (ends[-1] if nb else 0))
    bag_size = jnp.zeros((nb,), jnp.int64).at[jnp.where(inbag, bag, nb)].add(1, mode="drop")
    rows = weight.at[indices].get(mode="fill", wrap_negative_indices=False)
    tgt = jnp.where(inbag, bag, nb)
    if mode == 2:
        lowest = _identity("amax", weight.dtype)
        out = jnp.full((nb, d), lowest, weight.dtype).at[tgt].max(rows, mode="drop")
        # argmax per bag and feature: the first index holding the maximum
        hit = inbag[:, None] & (rows == out.at[tgt].get(mode="fill", fill_value=0))
        pos = jnp.where(hit, jnp.arange(n)[:, None], n)
        first = jnp.full((nb, d), n, jnp.int64).at[tgt].min(pos, mode="drop")
        max_idx = jnp.where(first < n, indices.at[jnp.minimum(first, max(n - 1, 0))].get(
            mode="fill", fill_value=-1), -1) if n else jnp.full((nb, d), -1, jnp.int64)
        out = jnp.where((bag_size > 0)[:, None], out, jnp.zeros((), weight.dtype))
        return _bag_outputs(out, bag, bag_size, max_idx)
    if per_sample_weights is not None:
        rows = rows * cast(per_sample_weights, rows.dtype)[:, None]
    rows = jnp.where(inbag[:, None], rows, jnp.zeros((), rows.dtype))
    acc = jnp.float32 if weight.dtype in (jnp.bfloat16, jnp.float16) else weight.dtype
    out = jnp.zeros((nb, d), acc).at[tgt].add(rows.astype(acc), mode="drop")
    if mode == 1:
        out = out / jnp.maximum(bag_size, 1)[:, None].astype(acc)
    return _bag_outputs(out.astype(weight.dtype), bag, bag_size, None)


def _bag_outputs(out, bag, bag_size, max_idx):
    """The four results in the shapes PyTorch's meta kernel gives (the device layout)."""
    metas = out_meta()
    o2b_shape, bs_shape, mi_shape = (tuple(m.shape) for m in metas[1:])
    bs = jnp.zeros(bs_shape, jnp.int64)
    k = min(bs_shape[0], bag_size.shape[0]) if bs_shape else 0
    bs = bs.at[:k].set(bag_size[:k]) if k else bs
    mi = max_idx.astype(jnp.int64) if max_idx is not None and max_idx.shape == mi_shape \
        else jnp.zeros(mi_shape, jnp.int64)
    o2b = bag.astype(jnp.int64).reshape(o2b_shape) if math.prod(o2b_shape) == bag.size \
        else jnp.zeros(o2b_shape, jnp.int64)
    return out, o2b, bs, mi


def _bag_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                  scale_grad_by_freq, mode, per_sample_weights, padding_idx):
    d = grad.shape[1]
    i = indices.reshape(-1)
    n = i.shape[0]
    nb = grad.shape[0]
    acc = jnp.float32 if grad.dtype in (jnp.bfloat16, jnp.float16) else grad.dtype
    g = grad.astype(acc)
    if mode == 2:
        mi = maximum_indices.reshape(nb, d)
        cols = jnp.broadcast_to(jnp.arange(d), (nb, d))
        ok = mi >= 0
        out = jnp.zeros((num_weights, d), acc).at[jnp.where(ok, mi, num_weights), cols].add(
            g, mode="drop")
        return out.astype(grad.dtype)
    bag = offset2bag.reshape(-1)
    valid = (i != padding_idx) if padding_idx >= 0 else jnp.ones((n,), jnp.bool_)
    valid = valid & (bag >= 0) & (bag < nb)
    rows = g.at[bag].get(mode="fill", fill_value=0)
    if mode == 1:
        rows = rows / jnp.maximum(bag_size.at[bag].get(mode="fill", fill_value=1), 1)[:, None].astype(acc)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.reshape(-1)[:, None].astype(acc)
    if scale_grad_by_freq:
        cnt = jnp.zeros((num_weights,), jnp.int64).at[i].add(1, mode="drop")
        rows = rows / cnt.at[i].get(mode="fill", fill_value=1)[:, None].astype(acc)
    rows = jnp.where(valid[:, None], rows, jnp.zeros((), acc))
    out = jnp.zeros((num_weights, d), acc).at[jnp.where(valid, i, num_weights)].add(rows, mode="drop")
    return out.astype(grad.dtype)


@lower("_embedding_bag_backward.default")
def _embedding_bag_backward_(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
                             num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights,
                             padding_idx=-1):
    return _bag_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                         scale_grad_by_freq, mode, per_sample_weights, padding_idx)


@lower("_embedding_bag_dense_backward.default")
def _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
                                  num_weights, scale_grad_by_freq, mode, per_sample_weights,
                                  padding_idx=-1):
    return _bag_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                         scale_grad_by_freq, mode, per_sample_weights, padding_idx)


@lower("_embedding_bag_per_sample_weights_backward.default")
def _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
                                               padding_idx=-1):
    i = indices.reshape(-1)
    bag = offset2bag.reshape(-1)
    acc = jnp.float32 if grad.dtype in (jnp.bfloat16, jnp.float16) else grad.dtype
    g = grad.astype(acc).at[bag].get(mode="fill", fill_value=0)
    w = weight.astype(acc).at[i].get(mode="fill", fill_value=0, wrap_negative_indices=False)
    r = jnp.sum(g * w, axis=1)
    if padding_idx >= 0:
        r = jnp.where(i == padding_idx, jnp.zeros((), acc), r)
    return r.astype(grad.dtype)


# ---------------------------------------------------------------- nonzero_static
@lower("nonzero_static.default")
def nonzero_static(x, *, size, fill_value=-1):
    if x.ndim == 0:
        return jnp.zeros((size, 0), jnp.int64)
    if x.size == 0:  # jnp.nonzero ignores fill_value for an empty input
        return jnp.full((size, x.ndim), fill_value, jnp.int64)
    idx = jnp.nonzero(x, size=size, fill_value=fill_value)
    return jnp.stack([i.astype(jnp.int64) for i in idx], axis=-1)


# ================================================================ eager kernels
# Everything below runs outside the lowerings: bounds checks, bool masks, and
# the data-dependent ops.  Device work is done by small cached jitted functions
# over the cells' flat arrays.
_fns: dict = {}
_FNS_MAX = 4096


def _jit(key, build):
    f = _fns.get(key)
    if f is None:
        if len(_fns) > _FNS_MAX:
            _fns.clear()
        f = _fns[key] = jax.jit(build())
    return f


def _cells(ts):
    cells = [storage.cell_of(t) for t in ts]
    specs = tuple(storage.view_spec(t) for t in ts)
    sig = tuple((c.arr.dtype, c.arr.shape[0]) for c in cells)
    return [c.arr for c in cells], specs, sig


def _idx_of(t):
    return t.device.index if t.device.index is not None else 0


def _bad_on_device(ts, bounds):
    """[(any_bad, first_bad_value)] for neuron index tensors `ts` and (lo, hi) bounds."""
    arrs, specs, sig = _cells(ts)

    def build():
        def fn(*flat):
            rows = []
            for a, spec, (lo, hi) in zip(flat, specs, bounds):
                v = storage.read_view(a, spec).reshape(-1).astype(jnp.int64)
                bad = (v < lo) | (v >= hi)
                j = jnp.argmax(bad)
                rows.append(jnp.stack([bad[j].astype(jnp.int64), v[j]]))
            return jnp.stack(rows)
        return fn

    f = _jit(("bounds", specs, sig, tuple(bounds)), build)
    return np.asarray(f(*arrs)).tolist()


def _first_bad(items):
    """items: [(index tensor, lo, hi, make_error)]; the error for the first bad index or None."""
    dev, dev_b, dev_err = [], [], []
    for t, lo, hi, err in items:
        if t is None or not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        if t.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            continue
        if t.device.type == "neuron":
            dev.append(t)
            dev_b.append((int(lo), int(hi)))
            dev_err.append(err)
        else:
            v = t.reshape(-1).to(torch.int64)
            bad = (v < lo) | (v >= hi)
            if bool(bad.any()):
                return err(int(v[bad.nonzero()[0, 0]]))
    if dev:
        for (anyb, val), err in zip(_bad_on_device(dev, dev_b), dev_err):
            if anyb:
                return err(int(val))
    return None


def _meta_validate(op, args, kwargs):
    dispatch.validate(op, args, kwargs)


def _oob(dim, size, kind=IndexError, prefix=""):
    return lambda v: kind(f"{prefix}index {v} is out of bounds for dimension {dim} with size {size}")


def _range_err(kind=IndexError):
    return lambda v: kind("index out of range in self")


def _guarded(op, low_op, mode, finder):
    """A kernel: check indices with `finder`, then run the lowering of `low_op`."""
    entry = dispatch.Entry(op, LOWERINGS[low_op], mode)
    sch = dispatch.schema(op)
    pos = {n: i for i, n in enumerate(sch.names)}

    def kernel(*args, **kwargs):
        if _checks:
            def arg(name):
                return sch.arg(args, kwargs, pos[name])
            try:
                items = finder(arg)
            except Exception:  # noqa: BLE001  malformed arguments: the meta kernel reports them
                items = None
            if items:
                err = _first_bad(items)
                if err is not None:
                    _meta_validate(op, args, kwargs)
                    raise err
        return entry(*args, **kwargs)

    kernel.__name__ = f"neuron_{op.name().split('::')[1]}"
    return kernel


def _inplace_of(op):
    packet = op._schema.name.split("::")[1]
    ip = getattr(aten, packet + "_", None)
    if ip is None:
        return None
    return getattr(ip, op._overloadname, None)


def _guard(name, finder):
    fop = resolve(name)
    dispatch.declare(fop, _guarded(fop, fop, "functional", finder))
    ip = _inplace_of(fop)
    if ip is not None and dispatch.functional_of(ip) is fop:
        dispatch.declare(ip, _guarded(ip, fop, "inplace", finder))


def _dim_size(t, dim):
    if t.dim() == 0:
        return 1
    return t.shape[dim]


def _gather_like(kind):
    def finder(arg):
        x, dim, index = arg("self"), arg("dim"), arg("index")
        dim = canon_dim(dim, x.dim())
        n = _dim_size(x, dim)
        return [(index, 0, n, _oob(dim, n, kind))]
    return finder


for _n in ("gather.default", "scatter.src", "scatter.value", "scatter.reduce",
           "scatter.value_reduce", "scatter_add.default", "scatter_reduce.two"):
    _guard(_n, _gather_like(RuntimeError))


def _along(lo_wrap, make):
    def finder(arg):
        x, dim, index = arg("self"), arg("dim"), arg("index")
        dim = canon_dim(dim, x.dim())
        n = _dim_size(x, dim)
        return [(index, -n if lo_wrap else 0, n, make(dim, n))]
    return finder


_guard("index_select.default", _along(False, lambda d, n: _range_err()))
_guard("index_add.default", _along(False, lambda d, n: _oob(d, n, RuntimeError)))
_guard("index_copy.default", _along(False, lambda d, n: _oob(d, n, IndexError, "index_copy_(): ")))
_guard("index_fill.int_Scalar", _along(True, lambda d, n: _oob(d, n)))
_guard("index_fill.int_Tensor", _along(True, lambda d, n: _oob(d, n)))
_guard("index_reduce.default", _along(False, lambda d, n: _range_err()))


def _flat_finder(arg):
    x, index = arg("self"), arg("index")
    n = x.numel()
    return [(index, -n, n, lambda v: IndexError(
        f"out of range: tried to access index {v} on a tensor of {n} elements."))]


_guard("take.default", _flat_finder)
_guard("put.default", _flat_finder)


def _emb_finder(arg):
    w, indices = arg("weight"), arg("indices")
    return [(indices, 0, w.shape[0], _range_err())]


_guard("embedding.default", _emb_finder)


def _bag_finder(arg):
    w, indices = arg("weight"), arg("indices")
    n = w.shape[0]
    return [(indices, 0, n, lambda v: IndexError("index out of range in self"))]


_guard("_embedding_bag.default", _bag_finder)
_guard("_embedding_bag_forward_only.default", _bag_finder)


# ---------------------------------------------------------------- counting (sync)
def _count(t):
    """Number of nonzero elements of a neuron tensor (reads one number: a sync)."""
    arrs, specs, sig = _cells([t])

    def build():
        return lambda a: jnp.count_nonzero(storage.read_view(a, specs[0]))

    return int(np.asarray(_jit(("count", specs, sig), build)(*arrs)))


def _bucket(count, cap):
    if count <= 0:
        return 0
    return min(1 << (count - 1).bit_length(), cap)


def _result(arr_flat, dtype, shape, index, bucket_rows_numel):
    """A contiguous tensor `shape` over a (possibly larger) flat buffer."""
    nbytes = max(bucket_rows_numel, 0) * dtype.itemsize
    return storage.make_tensor(arr_flat, dtype, tuple(shape), storage.contiguous_strides(shape),
                               0, index, nbytes)


def _empty(shape, dtype, index):
    return storage.empty(tuple(shape), dtype, index)


def _to_device(t, like):
    if t.device.type == "neuron":
        return t
    return t.to(like.device)


def nonzero(self):
    if self.device.type != "neuron":
        raise dispatch.device_mismatch("neuron:0", self.device)
    index = _idx_of(self)
    nd = self.dim()
    if self.numel() == 0:
        return _empty((0, nd), torch.int64, index)
    count = _count(self)
    if nd == 0:
        return _empty((count, 0), torch.int64, index)
    b = _bucket(count, self.numel())
    if b == 0:
        return _empty((0, nd), torch.int64, index)
    arrs, specs, sig = _cells([self])

    def build():
        def fn(a):
            v = storage.read_view(a, specs[0])
            idx = jnp.nonzero(v, size=b, fill_value=0)
            return jnp.stack([i.astype(jnp.int64) for i in idx], axis=-1).reshape(-1)
        return fn

    flat = _jit(("nonzero", specs, sig, b), build)(*arrs)
    return _result(flat, torch.int64, (count, nd), index, b * nd)


def masked_select(self, mask):
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    for t in (self, mask):
        if t.device.type != "neuron" and t.dim() != 0:
            raise dispatch.device_mismatch("neuron:0", t.device)
    self = _to_device(self, mask) if self.device.type != "neuron" else self
    mask = _to_device(mask, self)
    mb, sb = torch.broadcast_tensors(mask, self)  # views; PyTorch's broadcast errors
    index = _idx_of(self)
    n = sb.numel()
    if n == 0:
        return _empty((0,), self.dtype, index)
    count = _count(mb)
    b = _bucket(count, n)
    if b == 0:
        return _empty((0,), self.dtype, index)
    arrs, specs, sig = _cells([sb, mb])

    def build():
        def fn(a, m):
            v = storage.read_view(a, specs[0]).reshape(-1)
            mm = storage.read_view(m, specs[1]).reshape(-1)
            (i,) = jnp.nonzero(mm, size=b, fill_value=0)
            return v[i]
        return fn

    flat = _jit(("masked_select", specs, sig, b), build)(*arrs)
    return _result(flat, self.dtype, (count,), index, b)


def _masked_scatter_kernel(op, mode):
    entry = dispatch.Entry(op, LOWERINGS[aten.masked_scatter.default], mode)

    def kernel(self, mask, source):
        if _checks and isinstance(mask, torch.Tensor) and mask.dtype == torch.bool \
                and mask.device.type == "neuron":
            try:
                n = math.prod(torch.broadcast_shapes(tuple(self.shape), tuple(mask.shape)))
            except RuntimeError:
                n = None
            if n is not None and source.numel() < n and _count(mask) > source.numel():
                _meta_validate(op, (self, mask, source), {})
                raise RuntimeError("Number of elements of source < number of ones in mask")
        return entry(self, mask, source)

    return kernel


dispatch.declare(aten.masked_scatter.default,
                         _masked_scatter_kernel(aten.masked_scatter.default, "functional"))
dispatch.declare(aten.masked_scatter_.default,
                         _masked_scatter_kernel(aten.masked_scatter_.default, "inplace"))


# ---------------------------------------------------------------- x[indices] with masks
def _is_mask(t):
    return isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)


def _check_index_dtypes(indices):
    for t in indices:
        if t is not None and (t.is_floating_point() or t.is_complex()):
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")


def _mask_positions(self, indices):
    """(position in self's dims) of each index; checks mask shapes like PyTorch."""
    k = 0
    for i, t in enumerate(indices):
        if t is not None and _is_mask(t):
            if k + t.dim() > self.dim():
                raise IndexError(f"too many indices for tensor of dimension {self.dim()}")
            for j in range(t.dim()):
                if t.shape[j] != self.shape[k + j]:
                    raise IndexError(
                        f"The shape of the mask {list(t.shape)} at index {j} does not match the "
                        f"shape of the indexed tensor {list(self.shape)} at index {k + j}")
            k += t.dim()
        else:
            k += 1


def _expand_masks(self, indices):
    """Bool masks -> long index tensors (nonzero: a sync); CPU indices -> the device."""
    out = []
    for t in indices:
        if t is None:
            out.append(None)
        elif _is_mask(t):
            m = t if t.dtype == torch.bool else t.ne(0)
            m = _to_device(m, self)
            if m.dim() == 0:
                continue  # a 0-d mask adds no index (PyTorch's expandTensors)
            nz = nonzero(m)
            out.extend(nz.unbind(1))
        elif t.device.type != "neuron" and t.dim() != 0:
            out.append(t.to(self.device))
        else:
            out.append(t)
    return out


def _index_finder(self, indices):
    # PyTorch names the dimension by its rank among the indexed (non-None) dims
    items = []
    k = 0
    for d, t in enumerate(indices):
        if t is not None and d < self.dim():
            n = self.shape[d]
            items.append((t, -n, n, _oob(k, n)))
            k += 1
    return items


def _check_index_bounds(op, self, indices, args, kwargs):
    if not _checks:
        return
    err = _first_bad(_index_finder(self, indices))
    if err is not None:
        _meta_validate(op, args, kwargs)
        raise err


_INDEX_ENTRY = dispatch.Entry(aten.index.Tensor, LOWERINGS[aten.index.Tensor], "functional")


def _single_leading_mask(indices):
    return (len(indices) >= 1 and _is_mask(indices[0]) and indices[0].dim() > 0
            and all(t is None for t in indices[1:]))


def index_kernel(self, indices):
    indices = list(indices)
    if self.device.type != "neuron":
        raise dispatch.device_mismatch("neuron:0", self.device)
    _check_index_dtypes(indices)
    if any(_is_mask(t) for t in indices if t is not None):
        _mask_positions(self, indices)
        if _single_leading_mask(indices):
            return _index_leading_mask(self, _to_device(indices[0], self))
        indices = _expand_masks(self, indices)
        return _INDEX_ENTRY(self, indices)
    _check_index_bounds(aten.index.Tensor, self, indices, (self, indices), {})
    indices = _expand_masks(self, indices)
    return _INDEX_ENTRY(self, indices)


def _index_leading_mask(self, mask):
    """x[mask] for a mask over x's leading dims: one bucketed executable, no recompiles."""
    if mask.dtype != torch.bool:
        mask = mask.ne(0)
    index = _idx_of(self)
    k = mask.dim()
    rest = tuple(self.shape[k:])
    inner = math.prod(rest)
    if mask.numel() == 0:
        return _empty((0,) + rest, self.dtype, index)
    count = _count(mask)
    b = _bucket(count, mask.numel())
    if b == 0 or inner == 0:
        return _empty((count,) + rest, self.dtype, index)
    arrs, specs, sig = _cells([self, mask])

    def build():
        def fn(a, m):
            v = storage.read_view(a, specs[0])
            mm = storage.read_view(m, specs[1])
            idx = jnp.nonzero(mm, size=b, fill_value=0)
            return v[idx].reshape(-1)
        return fn

    flat = _jit(("index_mask", specs, sig, b), build)(*arrs)
    return _result(flat, self.dtype, (count,) + rest, index, b * inner)


dispatch.declare(aten.index.Tensor, index_kernel)
dispatch.declare(aten.nonzero.default, nonzero)
dispatch.declare(aten.masked_select.default, masked_select)
for _op, _f in ((aten.nonzero.out, aten.nonzero.default),
                (aten.masked_select.out, aten.masked_select.default)):
    dispatch.declare(_op, dispatch.out_kernel(_op, _f))


# ---------------------------------------------------------------- index_put_
def _index_put_kernel(op, low_op, mode):
    entry = dispatch.Entry(op, LOWERINGS[low_op], mode)
    sch = dispatch.schema(op)

    def kernel(*args, **kwargs):
        self = sch.arg(args, kwargs, 0)
        indices = list(sch.arg(args, kwargs, 1))
        values = sch.arg(args, kwargs, 2)
        accumulate = bool(sch.arg(args, kwargs, 3))
        unsafe = bool(sch.arg(args, kwargs, 4)) if len(sch.names) > 4 else False
        if self.device.type != "neuron":
            raise dispatch.device_mismatch("neuron:0", self.device)
        _check_index_dtypes(indices)
        if isinstance(values, torch.Tensor) and values.dtype != self.dtype:
            raise RuntimeError(
                "Index put requires the source and destination dtypes match, got "
                f"{scalar_type_name(self.dtype)} for the destination and "
                f"{scalar_type_name(values.dtype)} for the source.")
        masks = [t for t in indices if t is not None and _is_mask(t)]
        if masks:
            _mask_positions(self, indices)
            fast = (len(masks) == 1 and sum(t is not None for t in indices) == 1
                    and masks[0].dim() > 0 and values.numel() == 1
                    and (values.device.type == "neuron" or values.dim() == 0))
            if fast:  # x[mask] = v with one value: a masked fill, no sync
                return _masked_put(self, indices, values, accumulate, mode)
            indices = _expand_masks(self, indices)
        else:
            if _checks and not unsafe:
                _check_index_bounds(op, self, indices, args, kwargs)
            indices = _expand_masks(self, indices)
        rest = [self, indices, values, accumulate] + ([unsafe] if len(sch.names) > 4 else [])
        return entry(*rest)

    return kernel


def _masked_put(self, indices, values, accumulate, mode):
    p = next(i for i, t in enumerate(indices) if t is not None)
    m = _to_device(indices[p], self)
    if m.dtype != torch.bool:
        m = m.ne(0)
    shape = (1,) * p + tuple(m.shape) + (1,) * (self.dim() - p - m.dim())
    m = m.reshape(shape)
    v = values.reshape(())
    target = self if mode == "inplace" else self.clone()
    if accumulate:
        target.copy_(torch.where(m, target + v, target))
    else:
        target.masked_fill_(m, v)
    return target


dispatch.declare(aten.index_put_.default,
                         _index_put_kernel(aten.index_put_.default, aten.index_put.default, "inplace"))
dispatch.declare(aten.index_put.default,
                         _index_put_kernel(aten.index_put.default, aten.index_put.default, "functional"))
dispatch.declare(aten._index_put_impl_.default,
                         _index_put_kernel(aten._index_put_impl_.default,
                                           aten._index_put_impl_.default, "inplace"))

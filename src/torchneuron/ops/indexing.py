"""Indexing: advanced indexing, index_put, gather/scatter, index_* ops, masks, take/put,
embedding, and the data-dependent ops (nonzero, masked_select, x[mask]).

Lowerings are pure jax and serve eager and compiled execution.  In eager mode
each op that reads indices declares its index arguments (the ``bounds`` extra):
dispatch first checks they are in range (one small device reduction read back
to the host: a sync, as CUDA's device-side assert is) and raises PyTorch's
error; set ``TORCHNEURON_INDEX_CHECKS=0`` (or ``torchneuron.set_index_checks``)
to skip the check.  Inside the lowerings out-of-range gathers fill (NaN / the
minimum integer) and out-of-range scatters are dropped, so a compiled graph
never reads or writes outside a buffer.

The data-dependent ops (``nonzero``, ``masked_select``, ``x[mask]``) and the
mask forms of ``index``/``index_put`` are eager kernels (kernels/indexing.py).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ..lowering import AfterMeta, index_checks, lower, out_meta, out_shape, read_back
from ..numerics import canon_dim, cast, pnorm_last

aten = torch.ops.aten


# ---------------------------------------------------------------- eager extras
# Index bounds: each finder names the index arguments of an op and their [lo, hi)
# (dispatch reads them back once and raises PyTorch's error for the first bad one).
def index_error(dim, size, kind=IndexError, prefix=""):
    """PyTorch's error for an out-of-range index (built once the bad value is known)."""
    return lambda v: kind(f"{prefix}index {v} is out of bounds for dimension {dim} with size {size}")


def _range_err(kind=IndexError):
    return lambda v: kind("index out of range in self")


def _dim_size(t, dim):
    if t.dim() == 0:
        return 1
    return t.shape[dim]


def _gather_like(kind):
    def finder(arg):
        x, dim, index = arg("self"), arg("dim"), arg("index")
        dim = canon_dim(dim, x.dim())
        n = _dim_size(x, dim)
        return [(index, 0, n, index_error(dim, n, kind))]
    return finder


def _along(lo_wrap, make):
    def finder(arg):
        x, dim, index = arg("self"), arg("dim"), arg("index")
        dim = canon_dim(dim, x.dim())
        n = _dim_size(x, dim)
        return [(index, -n if lo_wrap else 0, n, make(dim, n))]
    return finder


def _flat_finder(arg):
    x, index = arg("self"), arg("index")
    n = x.numel()
    return [(index, -n, n, lambda v: IndexError(
        f"out of range: tried to access index {v} on a tensor of {n} elements."))]


def _emb_finder(arg):
    w, indices = arg("weight"), arg("indices")
    return [(indices, 0, w.shape[0], _range_err())]


def _bag_finder(arg):
    w, indices = arg("weight"), arg("indices")
    n = w.shape[0]
    return [(indices, 0, n, lambda v: IndexError("index out of range in self"))]


def _masked_scatter_check(self, mask, source):
    """CPU's error when the mask selects more elements than source has (one host read)."""
    if not index_checks() or not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool \
            or mask.device.type != "neuron":
        return
    try:
        n = math.prod(torch.broadcast_shapes(tuple(self.shape), tuple(mask.shape)))
    except RuntimeError:
        return
    if source.numel() < n and int(read_back(jnp.count_nonzero, mask)) > source.numel():
        raise AfterMeta(RuntimeError("Number of elements of source < number of ones in mask"))


# ---------------------------------------------------------------- small helpers
def _as1(x):
    return x.reshape(1) if x.ndim == 0 else x


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


def _is_mask(i):
    return i is not None and jnp.asarray(i).dtype in (jnp.bool_, jnp.uint8)


def _masked_put(x, indices, values, accumulate):
    """``x[mask] = v`` with a value that does not depend on how many elements are selected
    (one value, or one row broadcast over the dims after the mask): a `where`, whose shape
    is static (a compiled graph cannot hold the nonzero of the mask).  None otherwise."""
    p = 0
    while p < len(indices) and indices[p] is None:
        p += 1
    if p != len(indices) - 1:
        return None  # the mask is not the last index, or several tensor indices
    m = jnp.asarray(indices[p]) != 0
    rest = x.shape[p + m.ndim:]
    v = cast(jnp.asarray(values), x.dtype)
    if v.ndim == len(rest) + 1 and v.shape[0] == 1:
        v = v[0]
    if v.ndim > len(rest) or any(a != 1 and a != b for a, b in zip(reversed(v.shape), reversed(rest))):
        return None
    mb = m.reshape((1,) * p + m.shape + (1,) * len(rest))
    if accumulate:
        r = _bool_math(x) + jnp.where(mb, _bool_math(v), jnp.zeros((), _bool_math(x).dtype))
        return _fix_bool(r, x.dtype)
    return jnp.where(mb, v, x)


@lower("index_put.default", "_unsafe_index_put.default")
def index_put(x, indices, values, accumulate=False):
    if any(_is_mask(i) for i in indices):
        r = _masked_put(x, list(indices), values, accumulate)
        if r is not None:
            return r
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
@lower("gather.default", bounds=_gather_like(RuntimeError))
def gather(x, dim, index, *, sparse_grad=False):
    shape = out_shape()
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


@lower("scatter.src", "scatter.value", bounds=_gather_like(RuntimeError))
def scatter(x, dim, index, src=None, value=None):
    return _scatter(x, dim, index, src if src is not None else value, None)


@lower("scatter.reduce", "scatter.value_reduce", bounds=_gather_like(RuntimeError))
def scatter_reduce_legacy(x, dim, index, src=None, value=None, *, reduce):
    return _scatter(x, dim, index, src if src is not None else value, reduce)


@lower("scatter_add.default", bounds=_gather_like(RuntimeError))
def scatter_add(x, dim, index, src):
    return _scatter(x, dim, index, src, "add")


@lower("scatter_reduce.two", bounds=_gather_like(RuntimeError))
def scatter_reduce(x, dim, index, src, reduce, *, include_self=True):
    x1, i1 = _as1(x), _as1(index)
    dim = canon_dim(dim, x.ndim)
    if i1.size == 0:
        return x
    s = _scatter_src(src, i1)
    r = _reduce_into(x1, _scatter_idx(i1, dim), s, reduce, include_self, False)
    return r.reshape(x.shape)


# ---------------------------------------------------------------- index_* along a dim
@lower("index_select.default", bounds=_along(False, lambda d, n: _range_err()))
def index_select(x, dim, index):
    shape = out_shape()
    x1 = _as1(x)
    dim = canon_dim(dim, x.ndim)
    i = jnp.asarray(index).reshape(-1)
    r = x1.at[_dim_idx(x1.ndim, dim, i)].get(mode="fill", wrap_negative_indices=False)
    return r.reshape(shape)


def _src_along(src, x1, dim, n):
    shape = x1.shape[:dim] + (n,) + x1.shape[dim + 1:]
    return jnp.broadcast_to(jnp.asarray(src).reshape(shape) if jnp.ndim(src) else src, shape)


# CPU's kernel for a 1-d self reports like index_select; more dims name index and dim
def _index_add_bounds(arg):
    x = arg("self")
    return _along(False, lambda d, n: _range_err() if x.dim() <= 1 else
                  index_error(d, n, RuntimeError))(arg)


@lower("index_add.default", bounds=_index_add_bounds)
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


@lower("index_copy.default",
       bounds=_along(False, lambda d, n: index_error(d, n, IndexError, "index_copy_(): ")))
def index_copy(x, dim, index, source):
    x1 = _as1(x)
    dim = canon_dim(dim, x.ndim)
    i = jnp.asarray(index).reshape(-1)
    s = cast(_src_along(source, x1, dim, i.shape[0]), x.dtype)
    r = x1.at[_dim_idx(x1.ndim, dim, i)].set(s, mode="drop", wrap_negative_indices=False)
    return r.reshape(x.shape)


@lower("index_fill.int_Scalar", "index_fill.int_Tensor",
       bounds=_along(True, lambda d, n: index_error(d, n)))
def index_fill(x, dim, index, value):
    x1 = _as1(x)
    dim = canon_dim(dim, x.ndim)
    i = jnp.asarray(index).reshape(-1)
    v = cast(jnp.asarray(value), x.dtype)
    r = x1.at[_dim_idx(x1.ndim, dim, i)].set(v, mode="drop")
    return r.reshape(x.shape)


@lower("index_reduce.default", bounds=_along(False, lambda d, n: _range_err()))
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
    shape = out_shape()
    v = cast(jnp.asarray(value), x.dtype)
    return jnp.where(jnp.broadcast_to(mask, shape), v, jnp.broadcast_to(x, shape))


def _masked_positions(m):
    """For a flat bool mask: the rank of each True among the Trues (garbage elsewhere)."""
    return jnp.cumsum(m.astype(jnp.int64)) - 1


@lower("masked_scatter.default", check=_masked_scatter_check)
def masked_scatter(x, mask, source):
    shape = out_shape()
    xb = jnp.broadcast_to(x, shape).reshape(-1)
    m = jnp.broadcast_to(mask, shape).reshape(-1)
    src = cast(source, x.dtype).reshape(-1)
    if src.shape[0] == 0 or xb.shape[0] == 0:
        return xb.reshape(shape)
    pos = jnp.clip(_masked_positions(m), 0, src.shape[0] - 1)
    return jnp.where(m, src[pos], xb).reshape(shape)


@lower("masked_scatter_backward.default")
def masked_scatter_backward(grad_output, mask, sizes):
    shape = out_shape()
    n = math.prod(shape)
    g = grad_output.reshape(-1)
    m = jnp.broadcast_to(mask, grad_output.shape).reshape(-1)
    pos = jnp.where(m, _masked_positions(m), n)
    out = jnp.zeros((n,), grad_output.dtype).at[pos].set(g, mode="drop")
    return out.reshape(shape)


# ---------------------------------------------------------------- take / put
@lower("take.default", bounds=_flat_finder)
def take(x, index):
    return x.reshape(-1).at[index].get(mode="fill")


@lower("put.default", bounds=_flat_finder)
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
@lower("embedding.default", bounds=_emb_finder)
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


@lower("_embedding_bag.default", "_embedding_bag_forward_only.default", bounds=_bag_finder)
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



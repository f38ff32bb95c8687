"""Eager `cat` into bucket-sized cells: a tensor that grows by one `cat` per step (the
ids and the attention mask of a `generate()` loop, a small key/value cache) costs one
executable per bucket, not one per length.

A lowered op's executable is keyed on its inputs' shapes, so `torch.cat([ids, new], 1)`
compiles again at every length.  Here, once a call signature (everything but the length
along the cat dim) has shown more than ``CHURN`` lengths, a result of at most ``TORCHNEURON_EAGER_BUCKETS`` bytes goes into a
*bucket-sized cell* (storage/cells.py: the true elements first, in order, then unused
room) whose length is the result's element count rounded up to a power of two.  The
executable takes each input's length along the cat dim, strides and storage offset as
runtime values and is keyed on the other sizes, the inputs' cell lengths and the
bucket, so when the result is fed back (its cell the bucket's length) the next `cat`
finds the same executable until the bucket is full.  It copies rows in windows where
each input's rows are contiguous and there are at most ``WINDOW_ROWS`` of them, else
gathers every element; either way the values are exactly the lowering's.  A loop over
fixed shapes keeps the lowered op (a concatenation: faster per call than the bucket's
copies, bench/growing_cat.py).  Everything else takes the lowered op too, which also
gives PyTorch's errors: mixed dtypes or devices, empty or zero-dimensional inputs, lazy
conjugate/negative views, a channels-last result, a result over the limit, fused eager
mode.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax
from torch._prims_common import suggest_memory_format

from .. import config, dispatch, runtime, storage
from ..storage import lazy as _lazy

aten = torch.ops.aten

_cat = dispatch.lazy_entry(aten.cat.default)
LEAST = 16  # the smallest bucket (elements)
LIMIT = config.parse_bytes(config.get("TORCHNEURON_EAGER_BUCKETS"))  # bytes
CHURN = 3  # lengths along the cat dim a call signature shows before its results bucket
_lengths: dict = {}  # call signature -> the lengths seen (True once it churns)


def _churns(sig, n) -> bool:
    """Whether cats of signature `sig` (everything but the length along the cat dim)
    have produced more than CHURN lengths, `n` counted: a growing tensor.  A loop over
    fixed shapes never gets there, and keeps the lowered op (a concatenation, faster per
    call than the bucket's copies)."""
    seen = _lengths.get(sig)
    if seen is True:
        return True
    if seen is None:
        if len(_lengths) >= 4096:
            _lengths.clear()
        seen = _lengths[sig] = set()
    seen.add(n)
    if len(seen) > CHURN:
        _lengths[sig] = True
        return True
    return False


def _plan(tensors, dim):
    """(the inputs that count, the canonical dim, the result's shape) when the call can
    take a bucket-sized result, else None (no storage touched: the hot path of every
    `cat`)."""
    if not isinstance(tensors, (list, tuple)) or len(tensors) < 2 or type(dim) is not int \
            or not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    # PyTorch's legacy rule: 1-d empty tensors are skipped (a cache's first cat)
    kept = [t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)]
    if not kept:
        return None
    first = tensors[0]
    if first.device.type != "neuron" or any(t.dtype != first.dtype or t.device != first.device
                                            for t in tensors):
        return None
    first = kept[0]
    r = first.dim()
    if r == 0 or not -r <= dim < r:
        return None
    d = dim % r
    shape = list(first.shape)
    n = 0
    for t in kept:
        if t.dim() != r or not t.numel() or t.is_conj() or t.is_neg():
            return None
        if any(a != b for i, (a, b) in enumerate(zip(t.shape, shape)) if i != d):
            return None
        n += t.shape[d]
    shape[d] = n
    return kept, d, tuple(shape)


def _cells(kept):
    """The inputs' cells, or None where one is not a plain cell of their dtype or the
    result would be channels-last."""
    jd = runtime.jdtype(kept[0].dtype)
    cells = []
    for t in kept:
        if t.dim() in (4, 5) and suggest_memory_format(t) != torch.contiguous_format:
            return None  # PyTorch's result follows the inputs' channels-last layout
        cell = getattr(t.untyped_storage(), "_tn_cell", None)
        if type(cell) is not storage.Cell or cell.dt != jd:
            return None
        cells.append(cell)
    return cells


def _gather_cat(k, shape, d, cap, it):
    """The executable's function: k flat cells and each input's view as runtime ints
    ((k, r + 2): its size along `d`, its strides, its storage offset) -> the contiguous
    result's elements, then zeros, in a flat array of `cap`.  `shape` is the result's
    shape with None at `d`: the other sizes are static, so a position's coordinates take
    one division by a runtime value (the row length) and the rest by constants, and one
    gather from the inputs' cells laid end to end reads every element."""
    r = len(shape)
    outer, trail = shape[:d], shape[d + 1:]
    inner = math.prod(trail)

    def cat(*a):
        arrs, views = a[:k], a[k]
        along = views[:, 0]
        total = jnp.sum(along, dtype=it)
        p = jnp.arange(cap, dtype=it)
        row = total * inner  # the result's elements per outer position
        o, j = p // row, p % row
        c, t = j // inner, j % inner  # the coordinate along d, the trailing position
        coords = [None] * r
        coords[d] = c
        for q in reversed(range(d + 1, r)):  # constant divisors
            coords[q], t = t % shape[q], t // shape[q]
        for q in reversed(range(d)):
            coords[q], o = o % shape[q], o // shape[q]
        # which input holds position p, and the runtime numbers of that input
        ends = jnp.cumsum(along)
        which = jnp.zeros_like(p)
        for i in range(k - 1):
            which = which + (c >= ends[i]).astype(it)
        v = views[which]  # (cap, r + 2)
        starts = ends - along
        base = np.cumsum([0] + [x.shape[0] for x in arrs[:-1]]).astype(np.int64)
        src = jnp.asarray(base, it)[which] + v[:, r + 1]
        for q in range(r):
            src = src + ((c - starts[which]) if q == d else coords[q]) * v[:, 1 + q]
        flat = arrs[0] if k == 1 else jnp.concatenate(arrs)
        inside = p < row * math.prod(outer)
        return jnp.where(inside, flat[jnp.where(inside, src, 0)], jnp.zeros((), flat.dtype))

    return cat


WINDOW_ROWS = 64  # the most outer positions the windowed copy unrolls


def _rows_packed(t, d):
    """Whether each of t's rows (its elements from dim `d` on, at one outer position) is
    contiguous in its cell."""
    expected = 1
    for q in range(t.dim() - 1, d - 1, -1):
        if t.shape[q] != 1 and t.stride(q) != expected:
            return False
        expected *= t.shape[q]
    return True


def _window_cat(k, shape, d, cap, it):
    """:func:`_gather_cat` for inputs whose rows are contiguous, as copies: for each
    outer position (a static count) and input, a window of static length (the longest
    a row can be) is read at the row's runtime start and written at its runtime place,
    in order, so each window's spill past its row is overwritten by the next row or
    lies past the result (cleared at the end).  Linear in the bucket, as a
    concatenation is."""
    r = len(shape)
    outer, trail = shape[:d], shape[d + 1:]
    inner = math.prod(trail)
    rows = math.prod(outer)
    w = cap // rows  # no row of an input is longer than a row of the result
    ostr = [math.prod(outer[q + 1:]) for q in range(d)]

    def cat(*a):
        arrs, views = a[:k], a[k]
        along = views[:, 0]
        row = jnp.sum(along, dtype=it) * inner
        srcs = [jnp.concatenate([x, jnp.zeros((w,), x.dtype)]) for x in arrs]
        res = jnp.zeros((cap + w,), arrs[0].dtype)
        for o in range(rows):
            at = o * row
            for i in range(k):
                start = views[i, r + 1]
                for q in range(d):
                    start = start + ((o // ostr[q]) % outer[q]) * views[i, 1 + q]
                piece = lax.dynamic_slice(srcs[i], (start,), (w,))
                res = lax.dynamic_update_slice(res, piece, (at,))
                at = at + along[i] * inner
        p = jnp.arange(cap, dtype=it)
        return jnp.where(p < row * rows, res[:cap], jnp.zeros((), res.dtype))

    return cat


@dispatch.kernel("cat.default")
def cat(tensors, dim=0):
    found = None if _lazy.fused or not LIMIT else _plan(tensors, dim)
    if found is None:
        return _cat(tensors, dim)
    kept, d, shape = found
    first = kept[0]
    numel = math.prod(shape)
    static = shape[:d] + (None,) + shape[d + 1:]
    if numel * first.element_size() > LIMIT or not _churns(
            (static, d, len(kept), first.dtype, first.device), shape[d]):
        return _cat(tensors, dim)
    cells = _cells(kept)
    if cells is None:
        return _cat(tensors, dim)
    cap = storage.size_class(numel, LEAST)
    k = len(cells)
    lengths = tuple(c.numel for c in cells)
    it = storage.index_dtype(max(cap, *lengths))
    windows = math.prod(shape[:d]) <= WINDOW_ROWS and all(_rows_packed(t, d) for t in kept)
    key = ("bucket cat", k, static, d, cells[0].dt, lengths, cap, windows)
    f = storage.device_fn(key, lambda: (_window_cat if windows else _gather_cat)(
        k, static, d, cap, it))
    index = first.device.index or 0
    room = cap * first.element_size()
    storage.check_room(index, room)
    views = np.asarray([(t.shape[d], *t.stride(), t.storage_offset()) for t in kept],
                       dtype=it)
    arr = runtime.LAST_DISPATCH[index] = f(*(c.arr for c in cells), views)
    return storage.make_tensor(arr, first.dtype, shape, storage.contiguous_strides(shape), 0,
                               index, numel * first.element_size(), room)

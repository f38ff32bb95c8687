"""Eager `cat` into bucket-sized cells: a tensor that grows by one `cat` per step (the
ids and the attention mask of a `generate()` loop, a small key/value cache) costs one
executable per bucket, not one per length.

A lowered op's executable is keyed on its inputs' shapes, so `torch.cat([ids, new], 1)`
compiles again at every length.  Here a `cat` whose result is at most
``TORCHNEURON_EAGER_BUCKETS`` bytes writes it into a *bucket-sized cell*
(storage/cells.py: the true elements first, in order, then unused room) whose length is
the result's element count rounded up to a power of two.  The executable takes each
input's shape, strides and storage offset as runtime values and is keyed on the inputs'
cell lengths and the bucket, so when the result is fed back (its cell the bucket's
length) the next `cat` finds the same executable until the bucket is full.  Each
element is gathered from its input, so the values are exactly the lowering's.
Everything else takes the lowered op, which also gives PyTorch's errors: mixed dtypes
or devices, empty or zero-dimensional inputs, lazy conjugate/negative views, a
channels-last result, a result over the limit, fused eager mode.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import torch
from torch._prims_common import suggest_memory_format

from .. import config, dispatch, runtime, storage
from ..storage import lazy as _lazy

aten = torch.ops.aten

_cat = dispatch.lazy_entry(aten.cat.default)
LEAST = 16  # the smallest bucket (elements)
LIMIT = config.parse_bytes(config.get("TORCHNEURON_EAGER_BUCKETS"))  # bytes


def _cells(tensors, dim):
    """(the inputs that count, their cells, the canonical dim, the result's shape) when
    the call can take a bucket-sized result, else None."""
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
    jd = runtime.jdtype(first.dtype)
    cells, n = [], 0
    for t in kept:
        if t.dim() != r or not t.numel() or t.is_conj() or t.is_neg():
            return None
        if any(a != b for i, (a, b) in enumerate(zip(t.shape, shape)) if i != d):
            return None
        if r in (4, 5) and suggest_memory_format(t) != torch.contiguous_format:
            return None  # PyTorch's result follows the inputs' channels-last layout
        cell = getattr(t.untyped_storage(), "_tn_cell", None)
        if type(cell) is not storage.Cell or cell.dt != jd:
            return None
        cells.append(cell)
        n += t.shape[d]
    shape[d] = n
    return kept, cells, d, tuple(shape)


def _gather_cat(k, r, d, cap, it):
    """The executable's function: k flat cells and each input's view as runtime ints
    ((k, 2r + 1): shape, strides, storage offset) -> the contiguous result's elements,
    then zeros, in a flat array of `cap`."""

    def cat(*a):
        arrs, views = a[:k], a[k]
        along = views[:, d]
        out = views[0, :r].at[d].set(jnp.sum(along, dtype=it))
        p = jnp.arange(cap, dtype=it)
        coords, rem = [None] * r, p
        for j in reversed(range(r)):  # the result's coordinates of position p
            coords[j] = rem % out[j]
            rem = rem // out[j]
        res = jnp.zeros((cap,), arrs[0].dtype)
        start = jnp.zeros((), it)
        for i in range(k):
            c = coords[d] - start
            mine = (c >= 0) & (c < along[i])
            src = views[i, 2 * r]  # its place in input i's cell
            for j in range(r):
                src = src + (c if j == d else coords[j]) * views[i, r + j]
            res = jnp.where(mine, arrs[i][jnp.where(mine, src, 0)], res)
            start = start + along[i]
        return jnp.where(p < jnp.prod(out), res, jnp.zeros((), res.dtype))

    return cat


@dispatch.kernel("cat.default")
def cat(tensors, dim=0):
    found = None if _lazy.fused or not LIMIT else _cells(tensors, dim)
    if found is None:
        return _cat(tensors, dim)
    kept, cells, d, shape = found
    first = kept[0]
    numel = math.prod(shape)
    if numel * first.element_size() > LIMIT:
        return _cat(tensors, dim)
    cap = storage.size_class(numel, LEAST)
    k, r = len(cells), len(shape)
    lengths = tuple(c.numel for c in cells)
    it = storage.index_dtype(max(cap, *lengths))
    key = ("bucket cat", k, r, d, cells[0].dt, lengths, cap)
    f = storage.device_fn(key, lambda: _gather_cat(k, r, d, cap, it))
    index = first.device.index or 0
    room = cap * first.element_size()
    storage.check_room(index, room)
    views = np.asarray([(*t.shape, *t.stride(), t.storage_offset()) for t in kept],
                       dtype=it)
    arr = runtime.LAST_DISPATCH[index] = f(*(c.arr for c in cells), views)
    return storage.make_tensor(arr, first.dtype, shape, storage.contiguous_strides(shape), 0,
                               index, numel * first.element_size(), room)

"""Views over a cell's flat array, traced inside executables.

A view is (dtype, shape, strides, offset) over the flat jax array of its
storage's cell: a read is a reshape, a slice or a gather; a write is an
update-slice or a scatter into the flat array.  The offset may be a traced
integer, so one executable serves a view at any position.  Views with another
dtype than the cell (``view(dtype)``, ``view_as_real``) reinterpret the bits.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import torch
from jax import lax

from ..numerics import reinterpret  # noqa: F401  (views reinterpret bits)
from ..runtime import jdtype


def view_spec(t: torch.Tensor):
    """Static description of how `t` sits in its storage's cell."""
    return (t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())


def canonical_spec(t: torch.Tensor):
    """:func:`view_spec` with the stride of every size-1 dimension replaced by the one
    a contiguous layout gives it: such a stride never moves the view, so a device
    function keyed on it (a read or write of a view) serves `x[:, -1:]` of a tensor
    that grows along dim 1 at every length of one cell."""
    dtype, shape, strides, off = view_spec(t)
    if 1 in shape:
        st = list(strides)
        for d in reversed(range(len(shape))):
            if shape[d] == 1:
                st[d] = st[d + 1] * max(shape[d + 1], 1) if d + 1 < len(shape) else 1
        strides = tuple(st)
    return dtype, shape, strides, off


def view_flags(t: torch.Tensor) -> int:
    """The lazy conjugate (1) and negative (2) bits of a view: its logical values are
    conj(stored) / -stored.  Ops the Conjugate/Negative fallbacks pass through
    (copy_, clone, mul, add, mm, ...) reach the kernels with these bits set."""
    return (1 if t.is_conj() else 0) | (2 if t.is_neg() else 0)


def apply_flags(v, flags: int):
    """Logical values from stored ones (and, the maps being involutions, back)."""
    if flags & 1:
        v = jnp.conj(v)
    if flags & 2:
        v = -v
    return v


def perm_plan(shape, strides):
    """If the view is a permutation of a dense block, the permutation; else None."""
    nd = len(shape)
    order = sorted(range(nd), key=lambda d: (shape[d] == 1, -strides[d]))
    acc = 1
    for d in reversed(order):
        if shape[d] == 1:
            continue
        if strides[d] != acc:
            return None
        acc *= shape[d]
    return order


def _block_plan(shape, strides):
    """A strided-slice plan for non-overlapping views whose strides divide each other.

    Returns (order, base_shape, limits, block_len) or None.
    """
    dims = [d for d in range(len(shape)) if shape[d] != 1]
    if not dims or any(strides[d] <= 0 for d in dims):
        return None
    order = sorted(dims, key=lambda d: -strides[d])
    st = [strides[d] for d in order]
    sz = [shape[d] for d in order]
    for i in range(1, len(order)):
        if st[i - 1] % st[i] or st[i] * sz[i] > st[i - 1]:
            return None
    base = [sz[0]] + [st[i - 1] // st[i] for i in range(1, len(order))] + [st[-1]]
    limits = sz + [1]
    return order, tuple(base), tuple(limits), sz[0] * st[0]


def _index_array(shape, strides, offset):
    idx = jnp.zeros(shape, dtype=jnp.int64) + offset
    for d, (s, st) in enumerate(zip(shape, strides)):
        if s != 1 and st != 0:
            idx = idx + lax.broadcasted_iota(jnp.int64, shape, d) * st
    return idx


def _static(offset) -> bool:
    return isinstance(offset, int)


def _slice1(flat, offset, size):
    """flat[offset:offset+size] for a static or traced offset."""
    if _static(offset):
        if offset == 0 and size == flat.shape[0]:
            return flat
        return lax.slice(flat, (offset,), (offset + size,))
    return lax.dynamic_slice(flat, (offset,), (size,))


def read_view(flat, spec):
    """Trace: the values of the view `spec` over the flat cell array `flat`.

    spec = (dtype, shape, strides, offset); offset may be a traced integer, so
    one executable serves a view at any position (x[i] in a loop, batches
    sliced out of a device tensor)."""
    dtype, shape, strides, offset = spec
    jd = jdtype(dtype)
    if flat.dtype != jd:
        flat = reinterpret(flat, jd)
    numel = math.prod(shape)
    if numel == 0:
        return jnp.zeros(shape, jd)
    # broadcast (stride-0) dims: read one slice, then broadcast
    if any(st == 0 and s != 1 for s, st in zip(shape, strides)):
        sub_shape = tuple(1 if st == 0 else s for s, st in zip(shape, strides))
        sub = read_view(flat, (dtype, sub_shape, strides, offset))
        return jnp.broadcast_to(sub, shape)
    order = perm_plan(shape, strides)
    if order is not None:
        block = _slice1(flat, offset, numel).reshape([shape[d] for d in order])
        if order != sorted(order):
            inv = [order.index(d) for d in range(len(shape))]
            block = jnp.transpose(block, inv)
        return block
    plan = _block_plan(shape, strides)
    if plan is not None:
        order, base, limits, blen = plan
        # the view's elements lie in [offset, offset + extent); the block read
        # spans blen >= extent elements, so pad the tail by the difference
        extent = 1 + sum((shape[d] - 1) * strides[d] for d in order)
        seg = flat
        pad = blen - extent
        if _static(offset):
            pad = max(0, offset + blen - flat.shape[0])
        if pad > 0:
            seg = jnp.pad(flat, (0, pad))
        seg = _slice1(seg, offset, blen).reshape(base)
        seg = lax.slice(seg, (0,) * len(base), limits).reshape([shape[d] for d in order])
        perm = [order.index(d) for d in sorted(order)]
        out = jnp.transpose(seg, perm) if perm != list(range(len(perm))) else seg
        return out.reshape(shape)
    return flat[_index_array(shape, strides, offset)]


def write_view(flat, spec, values):
    """Trace: the flat cell array with the view `spec` overwritten by `values`."""
    dtype, shape, strides, offset = spec
    jd = jdtype(dtype)
    cell_dt = flat.dtype
    view_flat = flat if cell_dt == jd else reinterpret(flat, jd)
    values = jnp.broadcast_to(values.astype(jd), shape)
    numel = math.prod(shape)
    if numel == 0:
        return flat
    order = perm_plan(shape, strides)
    if order is not None:
        if order != sorted(order):
            values = jnp.transpose(values, order)
        vflat = values.reshape(-1)
        if _static(offset) and offset == 0 and numel == view_flat.shape[0]:
            new = vflat
        else:
            new = lax.dynamic_update_slice(view_flat, vflat, (offset,))
    else:
        idx = _index_array(shape, strides, offset)
        new = view_flat.at[idx.reshape(-1)].set(values.reshape(-1))
    if cell_dt != jd:
        new = reinterpret(new, cell_dt)
    return new


def write_view_overlapping(flat, spec, values):
    """Trace: write_view for a view with internal overlap (stride 0: fill_, index_put_ or
    masked_fill_ on an expanded tensor).  CPU's kernels loop over the view and store, so
    a memory location ends with the value of the last view element written to it; here
    an element writes when its value changes, and the last such element (in the view's
    row-major order) wins for each location."""
    dtype, shape, strides, offset = spec
    jd = jdtype(dtype)
    cell_dt = flat.dtype
    view_flat = flat if cell_dt == jd else reinterpret(flat, jd)
    numel = math.prod(shape)
    if numel == 0:
        return flat
    old = read_view(view_flat, (dtype, shape, strides, offset)).reshape(-1)
    vals = jnp.broadcast_to(values.astype(jd), shape).reshape(-1)
    changed = vals != old
    if jnp.issubdtype(jd, jnp.inexact):
        changed = changed & ~(jnp.isnan(vals) & jnp.isnan(old))
    idx = _index_array(shape, strides, offset).reshape(-1)
    pos = jnp.where(changed, jnp.arange(numel, dtype=jnp.int64), -1)
    winner = jnp.full(view_flat.shape, -1, jnp.int64).at[idx].max(pos)
    new = jnp.where(winner >= 0, vals[jnp.clip(winner, 0)], view_flat)
    if cell_dt != jd:
        new = reinterpret(new, cell_dt)
    return new

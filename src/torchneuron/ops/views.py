"""Compile-only lowerings: view, alias and allocation ops as values.

In eager mode these ops never reach the lowering table: views redispatch to
PyTorch's own CPU kernels (they only change sizes/strides/offset over the same
storage) and allocations talk to ``storage`` directly.  Inside a compiled (or
decomposed) graph every value is a jax array, so a view is just the values it
shows: ``view`` is a reshape, ``t`` a transpose, ``slice`` a slice, and so on.

They are declared ``compile_only``, so that eager registration never turns them
into PrivateUse1 kernels (that would replace the aliasing view kernels).
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import torch
from jax import lax

from .. import numerics
from ..lowering import lower, out_dtype
from ..numerics import jdtype

aten = torch.ops.aten


def _reg(*names, static=()):
    return lower(*names, static=static, compile_only=True)


def _ints(xs):
    return [int(v) for v in xs]


# ---------------------------------------------------------------- identity / aliases
@_reg("alias.default", "detach.default", "lift_fresh.default", "lift_fresh_copy.default",
      "alias_copy.default", "detach_copy.default", "lift.default",
      "contiguous.default", "_conj.default", "resolve_conj.default", "resolve_neg.default",
      "positive.default")
def _identity(x, *args, **kwargs):
    return x


# ---------------------------------------------------------------- reshapes
@_reg("view.default", "_unsafe_view.default", "reshape.default",
      "_reshape_copy.default")
def _view(x, size):
    return jnp.reshape(x, tuple(_ints(size)))


@_reg("_reshape_alias.default", "_reshape_alias_copy.default")
def _reshape_alias(x, size, stride):
    return jnp.reshape(x, tuple(_ints(size)))


@_reg("view.dtype", "view_copy.dtype")
def _view_dtype(x, dtype):
    jd = jdtype(dtype)
    if x.dtype == jd:
        return x
    old, new = jnp.dtype(x.dtype).itemsize, jnp.dtype(jd).itemsize
    shape = tuple(x.shape)
    flat = numerics.reinterpret(x.reshape(-1), jd)
    if x.ndim == 0:
        return flat.reshape(())
    last = shape[-1] * old // new
    return flat.reshape(shape[:-1] + (last,))


@_reg("flatten.using_ints")
def _flatten(x, start_dim=0, end_dim=-1):
    nd = max(x.ndim, 1)
    s, e = numerics.canon_dim(int(start_dim), nd), numerics.canon_dim(int(end_dim), nd)
    if x.ndim == 0:
        return x.reshape(1)
    shape = x.shape[:s] + (math.prod(x.shape[s:e + 1]),) + x.shape[e + 1:]
    return x.reshape(shape)


@_reg("unflatten.int")
def _unflatten(x, dim, sizes):
    d = numerics.canon_dim(int(dim), x.ndim)
    sizes = _ints(sizes)
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = x.shape[d] // max(known, 1)
    return x.reshape(x.shape[:d] + tuple(sizes) + x.shape[d + 1:])


# ---------------------------------------------------------------- permutations
@_reg("t.default", "t_copy.default", "numpy_T.default")
def _t(x):
    if x.ndim < 2:
        return x
    return jnp.swapaxes(x, 0, 1) if x.ndim == 2 else jnp.transpose(x)


@_reg("transpose.int", "transpose_copy.int", "swapaxes.default", "swapdims.default")
def _transpose(x, dim0, dim1):
    if x.ndim == 0:
        return x
    return jnp.swapaxes(x, numerics.canon_dim(int(dim0), x.ndim), numerics.canon_dim(int(dim1), x.ndim))


@_reg("permute.default")
def _permute(x, dims):
    if x.ndim == 0:
        return x
    return jnp.transpose(x, [numerics.canon_dim(int(d), x.ndim) for d in dims])


@_reg("movedim.int")
def _movedim(x, source, destination):
    return jnp.moveaxis(x, numerics.canon_dim(int(source), x.ndim), numerics.canon_dim(int(destination), x.ndim))


@_reg("mT.default", "mH.default", "adjoint.default")
def _mT(x):
    return jnp.swapaxes(x, -1, -2)


# ---------------------------------------------------------------- broadcasts
@_reg("expand.default")
def _expand(x, size, *, implicit=False):
    size = _ints(size)
    lead = len(size) - x.ndim
    shape = []
    for i, s in enumerate(size):
        if s == -1:
            s = x.shape[i - lead]
        shape.append(s)
    return jnp.broadcast_to(x, tuple(shape))


@_reg("expand_as.default")
def _expand_as(x, other):
    return jnp.broadcast_to(x, other.shape)


@_reg("unsqueeze.default", "unsqueeze_copy.default")
def _unsqueeze(x, dim):
    return jnp.expand_dims(x, numerics.canon_dim(int(dim), x.ndim + 1))


@_reg("squeeze.default", "squeeze_copy.default")
def _squeeze(x):
    return jnp.squeeze(x, tuple(i for i, s in enumerate(x.shape) if s == 1))


@_reg("squeeze.dim", "squeeze_copy.dim")
def _squeeze_dim(x, dim):
    if x.ndim == 0:
        return x
    d = numerics.canon_dim(int(dim), x.ndim)
    return jnp.squeeze(x, d) if x.shape[d] == 1 else x


@_reg("squeeze.dims", "squeeze_copy.dims")
def _squeeze_dims(x, dim):
    if x.ndim == 0:
        return x
    ds = sorted({numerics.canon_dim(int(d), x.ndim) for d in dim})
    return jnp.squeeze(x, tuple(d for d in ds if x.shape[d] == 1))


# ---------------------------------------------------------------- indexing views
@_reg("select.int", "select_copy.int")
def _select(x, dim, index):
    d = numerics.canon_dim(int(dim), x.ndim)
    i = int(index)
    if i < 0:
        i += x.shape[d]
    return lax.index_in_dim(x, i, d, keepdims=False)


@_reg("slice.Tensor", "slice_copy.Tensor")
def _slice(x, dim=0, start=None, end=None, step=1):
    d = numerics.canon_dim(int(dim), x.ndim)
    start = None if start is None else int(start)
    end = None if end is None else int(end)
    idx = [slice(None)] * x.ndim
    idx[d] = slice(start, end, int(step))
    return x[tuple(idx)]


@_reg("narrow.default")
def _narrow(x, dim, start, length):
    d = numerics.canon_dim(int(dim), x.ndim)
    s = int(start)
    if s < 0:
        s += x.shape[d]
    return lax.slice_in_dim(x, s, s + int(length), axis=d)


@_reg("split.Tensor", "unsafe_split.Tensor")
def _split(x, split_size, dim=0):
    d = numerics.canon_dim(int(dim), x.ndim)
    n = x.shape[d]
    step = int(split_size)
    if n == 0:
        return [x]
    return [lax.slice_in_dim(x, s, min(s + step, n), axis=d) for s in range(0, n, max(step, 1))]


@_reg("split_with_sizes.default",
      "unsafe_split_with_sizes.default")
def _split_with_sizes(x, split_sizes, dim=0):
    d = numerics.canon_dim(int(dim), x.ndim)
    out, s = [], 0
    for n in _ints(split_sizes):
        out.append(lax.slice_in_dim(x, s, s + n, axis=d))
        s += n
    return out


@_reg("unbind.int")
def _unbind(x, dim=0):
    d = numerics.canon_dim(int(dim), x.ndim)
    return [lax.index_in_dim(x, i, d, keepdims=False) for i in range(x.shape[d])]


@_reg("diagonal.default")
def _diagonal(x, offset=0, dim1=0, dim2=1):
    return jnp.diagonal(x, int(offset), numerics.canon_dim(int(dim1), x.ndim), numerics.canon_dim(int(dim2), x.ndim))


@_reg("unfold.default")
def _unfold(x, dimension, size, step):
    if x.ndim == 0:
        return x.reshape(1)
    d = numerics.canon_dim(int(dimension), x.ndim)
    n = (x.shape[d] - int(size)) // int(step) + 1
    starts = jnp.arange(n) * int(step)
    idx = starts[:, None] + jnp.arange(int(size))[None, :]  # (n, size)
    taken = jnp.take(x, idx.reshape(-1), axis=d)
    shape = x.shape[:d] + (n, int(size)) + x.shape[d + 1:]
    taken = taken.reshape(shape)
    return jnp.moveaxis(taken, d + 1, -1)


@_reg("view_as_real.default", "view_as_real_copy.default")
def _view_as_real(x):
    return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)


@_reg("view_as_complex.default", "view_as_complex_copy.default")
def _view_as_complex(x):
    return lax.complex(x[..., 0], x[..., 1])


# ---------------------------------------------------------------- allocation
def _alloc_dtype(dtype):
    dt = out_dtype()
    if dt is not None:
        return dt
    return jdtype(dtype or torch.get_default_dtype())


@_reg("empty.memory_format")
def _empty(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.zeros(tuple(_ints(size)), _alloc_dtype(dtype))


@_reg("empty_strided.default")
def _empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(tuple(_ints(size)), _alloc_dtype(dtype))


@_reg("empty_like.default")
def _empty_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.zeros(x.shape, _alloc_dtype(dtype) if dtype is not None else x.dtype)


@_reg("new_empty.default", "new_zeros.default")
def _new_empty(x, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    dt = out_dtype() or (jdtype(dtype) if dtype is not None else x.dtype)
    return jnp.zeros(tuple(_ints(size)), dt)


@_reg("new_empty_strided.default")
def _new_empty_strided(x, size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    dt = out_dtype() or (jdtype(dtype) if dtype is not None else x.dtype)
    return jnp.zeros(tuple(_ints(size)), dt)


@_reg("new_ones.default")
def _new_ones(x, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    dt = out_dtype() or (jdtype(dtype) if dtype is not None else x.dtype)
    return jnp.ones(tuple(_ints(size)), dt)


@_reg("new_full.default")
def _new_full(x, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    dt = out_dtype() or (jdtype(dtype) if dtype is not None else x.dtype)
    return jnp.full(tuple(_ints(size)), fill_value, dt)


# ---------------------------------------------------------------- copies
@_reg("copy.default")
def _copy(self, src, non_blocking=False):
    return jnp.broadcast_to(jnp.asarray(src).astype(self.dtype), self.shape)


# ---------------------------------------------------------------- assertions (no-ops)
@_reg("_assert_tensor_metadata.default", "_assert_async.default", "_assert_async.msg",
      "_assert_scalar.default", "_print.default", "record_stream.default")
def _noop(*args, **kwargs):
    return None

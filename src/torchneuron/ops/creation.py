"""Factories and fills: full/zeros/ones, arange/linspace/logspace, eye, fill_, zero_."""
from __future__ import annotations


import jax.numpy as jnp
import numpy as _np
from jax import lax

from ..lowering import cast, lower, out_dtype, out_meta


def _shape():
    return tuple(out_meta().shape)


@lower("fill.Scalar", "fill.Tensor")
def fill(x, value):
    return jnp.broadcast_to(cast(jnp.asarray(value), x.dtype), x.shape)


@lower("zero.default")
def zero(x):
    return jnp.zeros_like(x)


@lower("full.default")
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    dt = out_dtype()
    return jnp.broadcast_to(cast(jnp.asarray(fill_value), dt), _shape())


@lower("zeros.default")
def zeros(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(_shape(), out_dtype())


@lower("ones.default")
def ones(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.ones(_shape(), out_dtype())


@lower("scalar_tensor.default")
def scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None):
    return cast(jnp.asarray(s), out_dtype())


@lower("full_like.default")
def full_like(x, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None):
    return jnp.broadcast_to(cast(jnp.asarray(fill_value), out_dtype()), x.shape)


@lower("zeros_like.default")
def zeros_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.zeros(x.shape, out_dtype())


@lower("ones_like.default")
def ones_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.ones(x.shape, out_dtype())


@lower("arange.start_step", "arange.start", "arange.default", static=("start", "end", "step"))
def arange(start, end=None, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    if end is None:
        start, end = 0, start
    dt = out_dtype()
    n = _shape()[0]
    acc = jnp.float64 if jnp.issubdtype(dt, jnp.inexact) else jnp.int64
    i = lax.iota(acc, n)
    return (jnp.asarray(start, acc) + i * jnp.asarray(step, acc)).astype(dt)


@lower("linspace.default", "linspace.Tensor_Tensor", "linspace.Tensor_Scalar",
       "linspace.Scalar_Tensor", static=("start", "end", "steps"))
def linspace(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    dt = out_dtype()
    acc = jnp.complex128 if jnp.issubdtype(dt, jnp.complexfloating) else jnp.float64
    if steps == 0:
        return jnp.zeros((0,), dt)
    if steps == 1:
        return jnp.full((1,), start, acc).astype(dt)
    start_ = jnp.asarray(start, acc).reshape(())
    end_ = jnp.asarray(end, acc).reshape(())
    step = (end_ - start_) / (steps - 1)
    i = lax.iota(jnp.float64, steps).astype(acc)
    half = steps // 2
    vals = jnp.where(lax.iota(jnp.int64, steps) < half, start_ + step * i,
                     end_ - step * (steps - 1 - i))
    if jnp.issubdtype(dt, jnp.integer):
        return jnp.trunc(vals).astype(dt)
    return vals.astype(dt)


@lower("logspace.default", static=("start", "end", "steps", "base"))
def logspace(start, end, steps, base=10.0, *, dtype=None, layout=None, device=None,
             pin_memory=None):
    dt = out_dtype()
    if steps == 0:
        return jnp.zeros((0,), dt)
    exps = jnp.linspace(float(start), float(end), steps, dtype=jnp.float64)
    return jnp.power(jnp.float64(base), exps).astype(dt)


@lower("eye.default", "eye.m", static=("n", "m"))
def eye(n, m=None, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.eye(n, n if m is None else m, dtype=out_dtype())


@lower("tril.default", static=("diagonal",))
def tril(x, diagonal=0):
    return jnp.tril(x, diagonal) if x.ndim >= 2 else x


@lower("triu.default", static=("diagonal",))
def triu(x, diagonal=0):
    return jnp.triu(x, diagonal) if x.ndim >= 2 else x


def _tri_idx(indices):
    # the index pattern depends only on static arguments: a compile-time constant
    def fn(row, col, offset=0, *, dtype=None, layout=None, device=None, pin_memory=None):
        r, c = indices(row, offset, col)
        return jnp.asarray(_np.stack([r, c]), out_dtype())

    return fn


lower("tril_indices.default", static=("row", "col", "offset"))(_tri_idx(_np.tril_indices))
lower("triu_indices.default", static=("row", "col", "offset"))(_tri_idx(_np.triu_indices))

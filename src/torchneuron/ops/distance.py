"""Distances: cdist, pdist (and their backward), renorm."""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from ..lowering import lower, out_dtype, out_meta
from ..numerics import HALF, cast, opmath, pnorm_last


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

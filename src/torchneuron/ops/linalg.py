"""Matrix products (mm, bmm, addmm, ...) and dense linear algebra (solve, inv, qr, svd, ...).

Products go straight to ``lax.dot_general``: float32 at HIGHEST precision (so a
GPU does not silently use TF32 and results match the CPU's fp32 BLAS), float16
and bfloat16 accumulated in float32 and rounded once (as PyTorch's CPU and CUDA
kernels do), integers in their own type.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ..lowering import cast, lower, out_dtype

HIGHEST = lax.Precision.HIGHEST
_HALF = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))


def acc_dtype(dt):
    """The type a product of `dt` values accumulates in."""
    dt = jnp.dtype(dt)
    return jnp.dtype(jnp.float32) if dt in _HALF else dt


def dot(a, b, contract, batch=((), ()), dt=None):
    """dot_general in the accumulation type of `dt` (default: a's dtype)."""
    dt = jnp.dtype(dt or a.dtype)
    acc = acc_dtype(dt)
    a, b = cast(a, dt), cast(b, dt)
    prec = HIGHEST if jnp.issubdtype(dt, jnp.inexact) else None
    return lax.dot_general(a, b, (contract, batch), precision=prec, preferred_element_type=acc)


def _scaled(v, s, acc):
    """v * s where s is a Scalar (jax value or Python number); skips a multiply by 1."""
    if isinstance(s, (int, float, bool)) and not isinstance(s, bool) and s == 1:
        return v
    if acc == jnp.bool_:
        return v & cast(jnp.asarray(s), jnp.bool_)
    return v * cast(jnp.asarray(s), acc)


def _add_beta(prod, self, beta, alpha, dt):
    """beta * self + alpha * prod (self ignored when beta == 0, as PyTorch does)."""
    acc = prod.dtype
    r = _scaled(prod, alpha, acc)
    if isinstance(beta, (int, float)) and not isinstance(beta, bool) and beta == 0:
        return cast(jnp.broadcast_to(r, jnp.broadcast_shapes(r.shape, jnp.shape(self))), dt)
    s = cast(jnp.asarray(self), acc)
    sb = _scaled(s, beta, acc)
    if not isinstance(beta, (int, float)):  # dynamic: beta == 0 must drop nan/inf of self
        sb = jnp.where(jnp.asarray(beta) == 0, jnp.zeros_like(sb), sb)
    if acc == jnp.bool_:
        return cast(sb | r, dt)
    return cast(sb + r, dt)


_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
          "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
          "bool": "Bool", "complex64": "ComplexFloat", "complex128": "ComplexDouble"}


def _tname(x):
    return _NAMES.get(jnp.dtype(x.dtype).name, jnp.dtype(x.dtype).name)


def _same_dtype(msg, *xs):
    """PyTorch's CPU dtype checks that the meta kernels of these ops skip."""
    if len({jnp.dtype(x.dtype) for x in xs}) > 1:
        raise RuntimeError(msg.format(*[_tname(x) for x in xs]))


@lower("mm.default")
def mm(a, b):
    _same_dtype("expected m1 and m2 to have the same dtype, but got: {} != {}",
                a, b)
    return dot(a, b, ((1,), (0,)), dt=out_dtype())


@lower("mm.dtype")
def mm_dtype(a, b, out_dtype_):
    return cast(dot(a, b, ((1,), (0,))), out_dtype())


@lower("bmm.default")
def bmm(a, b):
    return dot(a, b, ((2,), (1,)), ((0,), (0,)), dt=out_dtype())


@lower("bmm.dtype")
def bmm_dtype(a, b, out_dtype_):
    return cast(dot(a, b, ((2,), (1,)), ((0,), (0,))), out_dtype())


@lower("addmm.default")
def addmm(self, m1, m2, *, beta=1, alpha=1):
    if hasattr(self, "dtype"):
        _same_dtype("self and mat2 must have the same dtype, but got {} and {}", self, m2)
    _same_dtype("self and mat2 must have the same dtype, but got {} and {}", m1, m2)
    dt = out_dtype()
    return _add_beta(dot(m1, m2, ((1,), (0,)), dt=dt), self, beta, alpha, dt)


@lower("addmm.dtype")
def addmm_dtype(self, m1, m2, out_dtype_, *, beta=1, alpha=1):
    dt = out_dtype()
    return _add_beta(cast(dot(m1, m2, ((1,), (0,))), acc_dtype(dt)), self, beta, alpha, dt)


@lower("_addmm_activation.default")
def addmm_activation(self, m1, m2, *, beta=1, alpha=1, use_gelu=False):
    dt = out_dtype()
    r = _add_beta(dot(m1, m2, ((1,), (0,)), dt=dt), self, beta, alpha, dt)
    r = cast(r, acc_dtype(dt))  # PyTorch rounds the addmm result, then activates
    if use_gelu:
        r = jax.nn.gelu(r, approximate=False)
    else:
        r = jnp.maximum(r, jnp.zeros_like(r))
    return cast(r, dt)


@lower("baddbmm.default")
def baddbmm(self, b1, b2, *, beta=1, alpha=1):
    dt = out_dtype()
    return _add_beta(dot(b1, b2, ((2,), (1,)), ((0,), (0,)), dt=dt), self, beta, alpha, dt)


@lower("baddbmm.dtype")
def baddbmm_dtype(self, b1, b2, out_dtype_, *, beta=1, alpha=1):
    dt = out_dtype()
    p = cast(dot(b1, b2, ((2,), (1,)), ((0,), (0,))), acc_dtype(dt))
    return _add_beta(p, self, beta, alpha, dt)


@lower("addbmm.default")
def addbmm(self, b1, b2, *, beta=1, alpha=1):
    if hasattr(self, "dtype"):
        _same_dtype("self and mat2 must have the same dtype, but got {} and {}", self, b2)
    _same_dtype("self and mat2 must have the same dtype, but got {} and {}", b1, b2)
    dt = out_dtype()
    # contract the batch dimension too: one dot instead of bmm + sum
    return _add_beta(dot(b1, b2, ((0, 2), (0, 1)), dt=dt), self, beta, alpha, dt)


@lower("mv.default")
def mv(a, v):
    _same_dtype("addmv input tensors must have the same dtype, but got {}, {}, and {}",
                v, a, v)
    return dot(a, v, ((1,), (0,)), dt=out_dtype())


@lower("addmv.default")
def addmv(self, a, v, *, beta=1, alpha=1):
    dt = out_dtype()
    return _add_beta(dot(a, v, ((1,), (0,)), dt=dt), self, beta, alpha, dt)


@lower("dot.default")
def dot_(a, b):
    return dot(a, b, ((0,), (0,)), dt=out_dtype())


@lower("vdot.default")
def vdot(a, b):
    return dot(jnp.conj(a), b, ((0,), (0,)), dt=out_dtype())


@lower("addr.default")
def addr(self, v1, v2, *, beta=1, alpha=1):
    dt = out_dtype()
    acc = acc_dtype(dt)
    if dt == jnp.bool_:
        prod = cast(v1, jnp.bool_)[:, None] & cast(v2, jnp.bool_)[None, :]
    else:
        prod = cast(v1, acc)[:, None] * cast(v2, acc)[None, :]
    return _add_beta(prod, self, beta, alpha, dt)

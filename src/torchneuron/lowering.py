"""The lowering table: aten overload -> jax function.

One table serves eager dispatch (``dispatch.py``) and ``torch.compile``
(``compile/``).  A lowering is a plain function over jax values that mirrors
the aten schema: tensors arrive as jax arrays, ``Scalar`` arguments as jax
0-d values (weakly typed, so they promote like PyTorch's wrapped numbers),
everything else (ints, int lists, dtypes, bools, strings) as Python values.
It returns jax arrays in the schema's return structure.  The caller casts
every result to the dtype PyTorch's own meta kernel computed, so a lowering
only has to get the values right; it may read the expected outputs with
:func:`out_meta` / :func:`out_dtype` when it needs them to pick a compute type.

Registering a lowering for a functional overload (``add.Tensor``) also makes
its in-place (``add_.Tensor``) and ``out=`` (``add.out``) variants native.
"""
from __future__ import annotations

import contextlib
import threading

import jax
import jax.numpy as jnp
import torch

from . import runtime

aten = torch.ops.aten


class Lowering:
    __slots__ = ("op", "fn", "static", "random", "name")

    def __init__(self, op, fn, static=(), random=False):
        self.op = op
        self.fn = fn
        self.static = frozenset(static)
        self.random = random
        self.name = op.name()


LOWERINGS: dict = {}


def resolve(name):
    """'add.Tensor' / 'aten::add.Tensor' / OpOverload -> OpOverload."""
    if isinstance(name, torch._ops.OpOverload):
        return name
    if isinstance(name, torch._ops.OpOverloadPacket):
        return name.default
    if "::" in name:
        ns, name = name.split("::", 1)
    else:
        ns = "aten"
    base, _, overload = name.partition(".")
    packet = getattr(getattr(torch.ops, ns), base)
    return getattr(packet, overload or "default")


def lower(*names, static=(), random=False):
    """Decorator: register `fn` as the lowering of each named aten overload.

    static: names of Scalar arguments that must be compile-time constants
      (they decide an output shape or a cheaper algorithm).
    random: the lowering draws random numbers with :func:`rng_key`.
    """

    def deco(fn):
        for n in names:
            try:
                op = resolve(n)
            except AttributeError:
                continue  # overload absent in this torch version
            LOWERINGS[op] = Lowering(op, fn, static, random)
        return fn

    return deco


def get(op):
    return LOWERINGS.get(op)


# ---------------------------------------------------------------- trace context
class _Ctx(threading.local):
    def __init__(self):
        self.meta = None
        self.key = None
        self.device = 0
        self.keys_used = 0


_ctx = _Ctx()


@contextlib.contextmanager
def tracing(meta=None, key=None, device=0):
    saved = (_ctx.meta, _ctx.key, _ctx.device, _ctx.keys_used)
    _ctx.meta, _ctx.key, _ctx.device, _ctx.keys_used = meta, key, device, 0
    try:
        yield _ctx
    finally:
        _ctx.meta, _ctx.key, _ctx.device, _ctx.keys_used = saved


def out_meta():
    """The meta tensor(s) PyTorch computed for this op's result (None if unknown)."""
    return _ctx.meta


def out_dtype(i=None):
    """The jax dtype of the (i-th) result, as PyTorch computes it; None if unknown."""
    m = _ctx.meta
    if m is None:
        return None
    if isinstance(m, (list, tuple)):
        m = m[i or 0]
    return runtime.jdtype(m.dtype)


def rng_key():
    """A fresh jax PRNG key for a random op (distinct per call within one trace)."""
    if _ctx.key is None:
        raise RuntimeError("torchneuron: random lowering traced without an RNG key")
    k = jax.random.fold_in(_ctx.key, _ctx.keys_used)
    _ctx.keys_used += 1
    return k


# ---------------------------------------------------------------- shared helpers
def cast(x, dt):
    if dt is None or x.dtype == dt:
        return x
    return x.astype(dt)


_I32_MIN, _I64_MIN = -(1 << 31), -(1 << 63)


def convert(x, dt):
    """x.astype(dt) with the results of PyTorch's CPU kernels (x86-64) where XLA differs:
    float -> int truncates, and a value out of range (or NaN/inf) gives INT_MIN for
    int32/int64 (cvttss2si), while int8/uint8/int16 go through int32 and wrap; float64 and
    integers reach float16/bfloat16 through float32 (c10::Half/BFloat16 take a float)."""
    x = jnp.asarray(x)
    dt = jnp.dtype(dt)
    src = x.dtype
    if src == dt:
        return x
    if jnp.issubdtype(src, jnp.inexact) and jnp.issubdtype(dt, jnp.signedinteger) or \
            (jnp.issubdtype(src, jnp.inexact) and dt == jnp.uint8):
        if jnp.issubdtype(src, jnp.complexfloating):
            x = jnp.real(x)
        cd = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
        t = jnp.trunc(x.astype(cd))
        if dt == jnp.int64:
            ok = (t >= float(_I64_MIN)) & (t < -float(_I64_MIN))
            return jnp.where(ok, t, 0).astype(jnp.int64) | jnp.where(ok, 0, _I64_MIN).astype(jnp.int64)
        ok = (t >= float(_I32_MIN)) & (t < -float(_I32_MIN))
        i32 = jnp.where(ok, jnp.where(ok, t, 0).astype(jnp.int32), jnp.int32(_I32_MIN))
        return i32.astype(dt)
    if dt in (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16)) and (
            src == jnp.float64 or jnp.issubdtype(src, jnp.integer)):
        return x.astype(jnp.float32).astype(dt)
    if dt in (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16)) and src == jnp.complex128:
        return jnp.real(x).astype(jnp.float32).astype(dt)
    return x.astype(dt)


def is_float(dt):
    return jnp.issubdtype(dt, jnp.inexact)


def canon_dim(dim, ndim):
    if ndim == 0:
        ndim = 1
    if dim < 0:
        dim += ndim
    return dim


def default_float():
    return runtime.jdtype(torch.get_default_dtype())

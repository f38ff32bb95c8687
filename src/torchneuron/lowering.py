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
from jax import lax
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


_meta_lib = None


def meta_kernel(name: str, fn, replace: bool = False) -> None:
    """Register fn as the Meta kernel of aten::name (an overload name such as
    "foo" or "foo.out").  The executable builder asks PyTorch's meta kernel for result
    shapes and dtypes; some ops (CUDA-only ones, data-dependent ones) have none, a few
    have a broken one (`replace=True` overrides it for the whole process)."""
    global _meta_lib
    import warnings

    qual = name if "::" in name else f"aten::{name}"
    if not replace and torch._C._dispatch_has_kernel_for_dispatch_key(qual, "Meta"):
        return
    if _meta_lib is None:
        _meta_lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        _meta_lib.impl(qual.split("::", 1)[1], fn, "Meta", allow_override=True)


def lower(*names, static=(), random=False, probe=False):
    """Decorator: register `fn` as the lowering of each named aten overload.

    static: names of Scalar arguments that must be compile-time constants
      (they decide an output shape or a cheaper algorithm).
    random: the lowering draws random numbers with :func:`rng_key`.
    probe: check the argument dtypes against PyTorch's CPU kernel at trace time
      (probe.py), for ops whose meta kernel accepts dtypes the kernels reject.
    """

    def deco(fn):
        for n in names:
            try:
                op = resolve(n)
            except AttributeError:
                continue  # overload absent in this torch version
            if composite_only(op):
                continue
            f = fn
            if probe:
                from .probe import probed

                f = probed(op, fn)
            LOWERINGS[op] = Lowering(op, f, static, random)
        return fn

    return deco


def composite_only(op) -> bool:
    """A CompositeImplicitAutograd op without a CPU kernel of its own (square, ...): it
    runs as its decomposition on every backend, and a backend kernel would hide that
    decomposition from autograd (no gradient), so it is never lowered."""
    name = op.name()
    return (torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")
            and not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU"))


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
_F32, _F64, _BF16, _F16 = (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64), jnp.dtype(jnp.bfloat16),
                           jnp.dtype(jnp.float16))
_UINT_OF = {2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}


def round_to(x, dt):
    """Round float32 values to float16/bfloat16 precision, kept in float32 (other dtypes
    pass through): c10::Half/BFloat16 arithmetic rounds after every operation, where XLA
    would keep float32 between fused ops."""
    dt = jnp.dtype(dt)
    if dt == jnp.dtype(jnp.float16):
        return lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10)
    if dt == jnp.dtype(jnp.bfloat16):
        return lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7)
    return x


def _nonzero_bits(x):
    """x != 0 on the bits: XLA:CPU treats subnormal inputs as zero (DAZ), PyTorch does not."""
    u = _UINT_OF[x.dtype.itemsize]
    b = lax.bitcast_convert_type(x, u)
    return (b & u(~(1 << (8 * x.dtype.itemsize - 1)) & ((1 << (8 * x.dtype.itemsize)) - 1))) != 0


def _to_f64(x):
    """float32/bfloat16 -> float64 keeping subnormals (XLA:CPU flushes them)."""
    if x.dtype == _BF16:
        x = lax.bitcast_convert_type(
            lax.bitcast_convert_type(x, jnp.uint16).astype(jnp.uint32) << 16, jnp.float32)
    b = lax.bitcast_convert_type(x, jnp.uint32)
    sub = ((b & 0x7F800000) == 0) & ((b & 0x007FFFFF) != 0)
    mag = (b & 0x007FFFFF).astype(jnp.float64) * (2.0 ** -149)
    return jnp.where(sub, jnp.where((b >> 31) != 0, -mag, mag), x.astype(jnp.float64))


def _to_f32(x):
    """float64 -> float32 producing subnormal results (XLA:CPU flushes them to zero)."""
    a = jnp.abs(x)
    sub = (a < 2.0 ** -126) & (a > 0)
    m = jnp.round(jnp.where(sub, a, 0.0) * (2.0 ** 149)).astype(jnp.uint32)
    bits = m | jnp.where(jnp.signbit(x), jnp.uint32(0x80000000), jnp.uint32(0))
    return jnp.where(sub, lax.bitcast_convert_type(bits, jnp.float32), x.astype(jnp.float32))


def _real_convert(x, dt):
    """Real float -> real float with CPU's rounding and subnormals."""
    src = x.dtype
    if src == dt:
        return x
    if dt == _F64 and src in (_F32, _BF16):
        return _to_f64(x)
    if src == _F64 and dt in (_F32, _BF16, _F16):
        x32 = _to_f32(x)  # c10::Half/BFloat16 are built from a float
        return x32 if dt == _F32 else x32.astype(dt)
    return x.astype(dt)


def convert(x, dt):
    """x.astype(dt) with the results of PyTorch's CPU kernels (x86-64) where XLA differs:
    float -> int truncates, and a value out of range (or NaN/inf) gives INT_MIN for
    int32/int64 (cvttss2si), while int8/uint8/int16 go through int32 and wrap; float64 and
    integers reach float16/bfloat16 through float32 (c10::Half/BFloat16 take a float);
    subnormal floats survive conversions (XLA:CPU runs with FTZ/DAZ)."""
    x = jnp.asarray(x)
    dt = jnp.dtype(dt)
    src = x.dtype
    if src == dt:
        return x
    src_c = jnp.issubdtype(src, jnp.complexfloating)
    src_f = jnp.issubdtype(src, jnp.floating)
    if dt == jnp.bool_ and (src_f or src_c):
        if src_c:
            return _nonzero_bits(jnp.real(x)) | _nonzero_bits(jnp.imag(x))
        return _nonzero_bits(x)
    if (src_f or src_c) and (jnp.issubdtype(dt, jnp.signedinteger) or dt == jnp.uint8):
        if src_c:
            x = jnp.real(x)
        cd = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
        t = jnp.trunc(x.astype(cd))
        if dt == jnp.int64:
            ok = (t >= float(_I64_MIN)) & (t < -float(_I64_MIN))
            return jnp.where(ok, jnp.where(ok, t, 0).astype(jnp.int64), jnp.int64(_I64_MIN))
        ok = (t >= float(_I32_MIN)) & (t < -float(_I32_MIN))
        i32 = jnp.where(ok, jnp.where(ok, t, 0).astype(jnp.int32), jnp.int32(_I32_MIN))
        return i32.astype(dt)
    dt_c = jnp.issubdtype(dt, jnp.complexfloating)
    dt_f = jnp.issubdtype(dt, jnp.floating)
    if src_c and dt_c:
        part = jnp.dtype(jnp.float64 if dt == jnp.complex128 else jnp.float32)
        return lax.complex(_real_convert(jnp.real(x), part), _real_convert(jnp.imag(x), part))
    if src_c and dt_f:
        return _real_convert(jnp.real(x), dt)
    if src_f and dt_c:
        part = jnp.dtype(jnp.float64 if dt == jnp.complex128 else jnp.float32)
        re = _real_convert(x, part)
        return lax.complex(re, jnp.zeros_like(re))
    if src_f and dt_f:
        return _real_convert(x, dt)
    if jnp.issubdtype(src, jnp.integer) and dt in (_F16, _BF16):
        return x.astype(jnp.float32).astype(dt)
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

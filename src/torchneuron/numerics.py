"""The numerics vocabulary shared by every lowering (as ``torch._prims_common`` is for
``torch/_refs`` and ``torch/_decomp``): compute dtypes, canonical dims, dtype names,
and value conversions with the results of PyTorch's CPU kernels.

Nothing here knows about devices, storages or dispatch; ``ops/`` imports this and
the lowering API only.
"""
from __future__ import annotations

import functools
import math
import warnings

import jax.numpy as jnp
import torch
from jax import lax

from . import runtime
from .runtime import jdtype, tdtype  # noqa: F401  (the dtype maps, for lowerings)

# ---------------------------------------------------------------- dtypes
HALF = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))


def opmath(dt):
    """The dtype PyTorch computes and accumulates `dt` in (its ``opmath_type``):
    float32 for float16/bfloat16, `dt` itself otherwise."""
    dt = jnp.dtype(dt)
    return jnp.dtype(jnp.float32) if dt in HALF else dt


def upcast(*xs):
    """Arrays (None passes through) in their opmath dtype: halves in float32."""
    return [None if x is None else (x.astype(jnp.float32) if x.dtype in HALF else x) for x in xs]


def is_float(dt) -> bool:
    """Floating or complex (``jnp.inexact``)."""
    return jnp.issubdtype(dt, jnp.inexact)


def is_complex(dt) -> bool:
    return jnp.issubdtype(dt, jnp.complexfloating)


def real_dtype(dt):
    """The real dtype of a complex one (its parts); other dtypes as they are."""
    dt = jnp.dtype(dt)
    if dt == jnp.complex64:
        return jnp.dtype(jnp.float32)
    if dt == jnp.complex128:
        return jnp.dtype(jnp.float64)
    return dt


def to_dtype(x, dt):
    """cast, dropping the imaginary part for complex -> real like PyTorch."""
    if dt is not None and is_complex(x.dtype) and not is_complex(jnp.dtype(dt)):
        x = jnp.real(x)
    return cast(x, dt)


def no_complex(name, x):
    """PyTorch's dispatch error for a complex input to a real-only kernel `name`."""
    if is_complex(x.dtype):
        raise not_implemented(name, x.dtype)


def no_bool(name, x):
    if x.dtype == jnp.bool_:
        raise not_implemented(name, x.dtype)


def need_nonempty_dim(name, x, dim):
    """CPU's error for a value-selecting reduction over an empty dimension."""
    if x.ndim and x.shape[canon_dim(dim, x.ndim)] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {canon_dim(dim, x.ndim)} to have "
                         "non-zero size.")


@functools.lru_cache(maxsize=None)
def scalar_type_name(dtype) -> str:
    """c10's ScalarType name of a torch or jax dtype ("Float", "Half", "Long", ...), the
    word PyTorch's own errors use: read off the legacy tensor type ("torch.HalfTensor")."""
    if not isinstance(dtype, torch.dtype):
        dtype = runtime.tdtype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ComplexHalf is experimental
        return torch.empty(0, dtype=dtype).type()[len("torch."):-len("Tensor")]


def not_implemented(kernel: str, dtype):
    """PyTorch's dispatch error for a dtype a kernel does not take."""
    return NotImplementedError(f'"{kernel}" not implemented for \'{scalar_type_name(dtype)}\'')


# ---------------------------------------------------------------- dims
def canon_dim(dim, ndim):
    """A dimension in [0, ndim) (a 0-d tensor has one dimension, as in PyTorch)."""
    if ndim == 0:
        ndim = 1
    if dim < 0:
        dim += ndim
    return dim


# ---------------------------------------------------------------- layouts
def storage_numel(shape, strides, offset=0) -> int:
    """Elements a storage needs for a view of `shape`/`strides` at `offset`."""
    if any(s == 0 for s in shape):
        return offset
    return offset + 1 + sum((s - 1) * st for s, st in zip(shape, strides))



# ---------------------------------------------------------------- norms
def pnorm_last(a, p):
    """The p-norm over the last axis of non-negative values `a` (|x| or |differences|):
    p = 0 counts non-zeros, p = inf is the max; an empty axis gives 0."""
    if a.shape[-1] == 0:
        return jnp.zeros(a.shape[:-1], a.dtype)
    if p == 0:
        return jnp.sum((a != 0).astype(a.dtype), axis=-1)
    if p == 1:
        return jnp.sum(a, axis=-1)
    if p == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=-1))
    if p == math.inf:
        return jnp.max(a, axis=-1)
    return jnp.power(jnp.sum(jnp.power(a, p), axis=-1), 1.0 / p)



# ---------------------------------------------------------------- values
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


# ---------------------------------------------------------------- bits
def _complex_part(dt):
    return {jnp.dtype(jnp.complex64): jnp.dtype(jnp.float32),
            jnp.dtype(jnp.complex128): jnp.dtype(jnp.float64)}.get(jnp.dtype(dt))


def _plain(flat):
    """A flat array as elements of a bitcastable (real, non-bool) dtype, bit for bit:
    bools become uint8, complex values their (real, imag) pairs."""
    dt = flat.dtype
    if dt == jnp.bool_:
        return flat.astype(jnp.uint8)
    if _complex_part(dt) is not None:
        return jnp.stack([jnp.real(flat), jnp.imag(flat)], axis=-1).reshape(-1)
    return flat


def _bitcast_flat(flat, dt):
    """lax.bitcast_convert_type between real dtypes of any sizes, flat in and out (a
    trailing partial element is dropped).  Never arithmetic: XLA:CPU flushes denormals."""
    src = flat.dtype
    if src == dt:
        return flat
    if src.itemsize == dt.itemsize:
        return lax.bitcast_convert_type(flat, dt)
    if src.itemsize > dt.itemsize:  # each element splits into k
        return lax.bitcast_convert_type(flat, dt).reshape(-1)
    k = dt.itemsize // src.itemsize  # k elements make one
    n = flat.shape[0] // k
    if n * k != flat.shape[0]:
        flat = lax.slice(flat, (0,), (n * k,))
    return lax.bitcast_convert_type(flat.reshape(n, k), dt)


def reinterpret(flat, dt):
    """The flat array's bytes as elements of dtype `dt` (view(dtype), view_as_real...),
    exact for every pair of dtypes (NaN payloads and denormals included)."""
    dt = jnp.dtype(dt)
    if flat.dtype == dt:
        return flat
    plain = _plain(flat)
    if dt == jnp.bool_:
        return _bitcast_flat(plain, jnp.dtype(jnp.uint8)).astype(jnp.bool_)
    part = _complex_part(dt)
    if part is not None:
        f = _bitcast_flat(plain, part)
        if f.shape[0] % 2:
            f = lax.slice(f, (0,), (f.shape[0] - 1,))
        f = f.reshape(-1, 2)
        return lax.complex(f[:, 0], f[:, 1])
    return _bitcast_flat(plain, dt)

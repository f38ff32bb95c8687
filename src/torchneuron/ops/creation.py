"""Factories and fills: full/zeros/ones, arange/linspace/logspace, eye, fill_, zero_."""
from __future__ import annotations

import math


import jax.numpy as jnp
import torch
import numpy as _np
from jax import lax

from ..numerics import cast, convert, not_implemented, round_to
from ..lowering import lower, out_dtype, out_shape


# ---------------------------------------------------------------- fill value checks (eager)
# PyTorch converts a fill value with c10::checked_convert: an integer result type refuses a
# value it cannot hold ("value cannot be converted to type uint8_t without overflow"), a
# real type refuses a complex value with an imaginary part, ...  The check runs on the
# Python value before the executable (once per distinct value and dtype).
_fill_ok: dict = {}


def _check_fill_value(value, dtype, numel):
    if isinstance(value, torch.Tensor) or value is None:
        return
    n = min(int(numel), 2)  # CPU fills one element through a path without the float checks
    key = (type(value), repr(value), dtype, n)
    if key in _fill_ok:
        return
    torch.empty(n, dtype=dtype).fill_(value)  # raises PyTorch's own error
    if len(_fill_ok) > 4096:
        _fill_ok.clear()
    _fill_ok[key] = True


def _fill_check(self, value):
    _check_fill_value(value, self.dtype, self.numel())


def _full_check(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    if not isinstance(fill_value, torch.Tensor):
        _check_fill_value(fill_value, dtype or torch.tensor(fill_value).dtype, math.prod(size))


def _full_like_check(self, fill_value, *, dtype=None, **kwargs):
    _check_fill_value(fill_value, dtype or self.dtype, self.numel())


def _scalar_tensor_check(s, *, dtype=None, **kwargs):
    _check_fill_value(s, dtype or torch.get_default_dtype(), 1)


_TORCH_214 = torch.torch_version.TorchVersion(torch.__version__) >= (2, 14)
_TORCH_215 = torch.torch_version.TorchVersion(torch.__version__) >= (2, 15)


def _arange_check(*args, dtype=None, **kwargs):
    """int64 truncates the arguments before the length is computed; a step that truncates
    to 0 is refused like torch 2.13's CPU does (torch 2.11's meta kernel divides by it;
    its CPU kernel dies of SIGFPE).  From torch 2.14 the CPU takes the length from the
    untruncated step and fills start + 0 * i: so does the device there (the meta kernel's
    length)."""
    if dtype is not None and (dtype.is_complex or dtype == torch.bool):
        raise not_implemented("arange_cpu", dtype)
    if _TORCH_214:
        return
    start, end, step = (0, args[0], 1) if len(args) == 1 else (tuple(args) + (1,))[:3]
    vals = [v.item() if isinstance(v, torch.Tensor) else v for v in (start, end, step)]
    ints = all(isinstance(v, int) for v in vals)
    if (dtype == torch.int64 or ints) and isinstance(vals[2], (int, float)) \
            and math.isfinite(vals[2]) and vals[2] != 0 and int(vals[2]) == 0:
        raise ValueError("step must be nonzero")


@lower("fill.Scalar", "fill.Tensor", check=_fill_check)
def fill(x, value):
    return jnp.broadcast_to(cast(jnp.asarray(value), x.dtype), x.shape)


@lower("zero.default")
def zero(x):
    return jnp.zeros_like(x)


@lower("full.default", check=_full_check)
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    dt = out_dtype()
    return jnp.broadcast_to(cast(jnp.asarray(fill_value), dt), out_shape())


@lower("zeros.default")
def zeros(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(out_shape(), out_dtype())


@lower("_efficientzerotensor.default")
def efficientzerotensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    # autograd's zero gradients (e.g. sgn's backward on real inputs): plain zeros here
    return jnp.zeros(out_shape(), out_dtype())


@lower("ones.default")
def ones(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.ones(out_shape(), out_dtype())


@lower("scalar_tensor.default", check=_scalar_tensor_check)
def scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None):
    return cast(jnp.asarray(s), out_dtype())


@lower("full_like.default", check=_full_like_check)
def full_like(x, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None):
    return jnp.broadcast_to(cast(jnp.asarray(fill_value), out_dtype()), x.shape)


@lower("zeros_like.default")
def zeros_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.zeros(x.shape, out_dtype())


@lower("ones_like.default")
def ones_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.ones(x.shape, out_dtype())


_F16, _BF16 = jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16)


@lower("arange.start_step", "arange.start", "arange.default", static=("start", "end", "step"),
       check=_arange_check)
def arange(start, end=None, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    # PyTorch's CPU kernel: start + step * i in acc_type (double for float/double, float for
    # half/bfloat16, int64 for integers), rounded once to the result type
    if end is None:
        start, end = 0, start
    dt = out_dtype()
    n = out_shape()[0]
    if dt in (_F16, _BF16):
        acc = jnp.float32
    elif jnp.issubdtype(dt, jnp.inexact):
        acc = jnp.float64
    else:
        acc = jnp.int64
    i = lax.iota(acc, n)
    return (jnp.asarray(start, acc) + i * jnp.asarray(step, acc)).astype(dt)


def _linspace_check(start, end, steps, *, dtype=None, **kwargs):
    """CPU's conversion checks of start and end into the result type ("value cannot be
    converted to type uint8_t without overflow"): the CPU kernel on at most 2 steps."""
    if isinstance(start, torch.Tensor) or isinstance(end, torch.Tensor) or steps < 0:
        return
    key = ("linspace", type(start), repr(start), type(end), repr(end), dtype, min(steps, 2))
    if key in _fill_ok:
        return
    torch.linspace(start, end, min(steps, 2), dtype=dtype)  # raises PyTorch's own error
    if len(_fill_ok) > 4096:
        _fill_ok.clear()
    _fill_ok[key] = True


@lower("linspace.default", "linspace.Tensor_Tensor", "linspace.Tensor_Scalar",
       "linspace.Scalar_Tensor", static=("start", "end", "steps"), check=_linspace_check)
def linspace(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    # PyTorch's CPU kernel, element by element: start + step * i below the halfway point,
    # end - step * (steps - 1 - i) above it, in the result type's own arithmetic (double
    # for integers, float for half/bfloat16 rounded after each operation)
    dt = out_dtype()
    if steps == 0:
        return jnp.zeros((0,), dt)
    start_ = jnp.asarray(start).reshape(())
    end_ = jnp.asarray(end).reshape(())
    i = lax.iota(jnp.int64, steps)
    lower_half = i < steps // 2
    if jnp.issubdtype(dt, jnp.integer) or dt == jnp.bool_:
        s = jnp.trunc(start_.real if jnp.iscomplexobj(start_) else start_).astype(jnp.float64)
        e = jnp.trunc(end_.real if jnp.iscomplexobj(end_) else end_).astype(jnp.float64)
        # start.to<scalar_t>(): the CPU's conversion (wrapping: -1 -> 255 in uint8)
        s, e = convert(s, dt).astype(jnp.float64), convert(e, dt).astype(jnp.float64)
        if steps == 1:
            return convert(jnp.broadcast_to(s, (1,)), dt)
        step = (e - s) / (steps - 1)
        fi = i.astype(jnp.float64)
        vals = jnp.where(lower_half, s + step * fi, e - step * (steps - 1 - fi))
        return convert(jnp.trunc(vals), dt)
    if jnp.issubdtype(dt, jnp.complexfloating):
        part = jnp.float64 if dt == jnp.complex128 else jnp.float32
        s, e = start_.astype(dt), end_.astype(dt)
        if steps == 1:
            return jnp.broadcast_to(s, (1,))
        d = jnp.asarray(steps - 1, part)
        sre, sim = jnp.real(s), jnp.imag(s)
        ere, eim = jnp.real(e), jnp.imag(e)
        stre, stim = (ere - sre) / d, (eim - sim) / d
        fi = i.astype(part)
        ri = (steps - 1 - i).astype(part)
        re = jnp.where(lower_half, sre + stre * fi, ere - stre * ri)
        im = jnp.where(lower_half, sim + stim * fi, eim - stim * ri)
        return lax.complex(re, im)
    half = dt in (_F16, _BF16)
    cd = jnp.float32 if half else dt
    # torch < 2.15 rounds half/bfloat16 after each operation; 2.15 rounds the endpoints to
    # the result type, computes in float and rounds once (the cast below)
    r = (lambda v: round_to(v, dt)) if half else (lambda v: v)
    s = r(start_.real.astype(jnp.float64).astype(cd) if jnp.iscomplexobj(start_) else start_.astype(cd))
    e = r(end_.real.astype(jnp.float64).astype(cd) if jnp.iscomplexobj(end_) else end_.astype(cd))
    if _TORCH_215:
        r = lambda v: v  # noqa: E731
    if steps == 1:
        return jnp.broadcast_to(s, (1,)).astype(dt)
    step = r(r(e - s) / r(jnp.asarray(steps - 1, cd)))
    fi = r(i.astype(cd))
    ri = r((steps - 1 - i).astype(cd))
    vals = jnp.where(lower_half, r(s + r(step * fi)), r(e - r(step * ri)))
    return vals.astype(dt)


@lower("logspace.default", "logspace.Tensor_Tensor", "logspace.Tensor_Scalar",
       "logspace.Scalar_Tensor", static=("start", "end", "steps", "base"))
def logspace(start, end, steps, base=10.0, *, dtype=None, layout=None, device=None,
             pin_memory=None):
    # PyTorch's CPU kernel: start/end converted to the result type, step and exponents in
    # double, pow(base, exponent) in double (float base for integer results)
    dt = out_dtype()
    if steps == 0:
        return jnp.zeros((0,), dt)
    start_ = jnp.asarray(start).reshape(())
    end_ = jnp.asarray(end).reshape(())
    if jnp.issubdtype(dt, jnp.complexfloating):
        s = start_.astype(jnp.complex128)
        e = end_.astype(jnp.complex128)
        if steps == 1:
            return jnp.broadcast_to(jnp.power(jnp.complex128(base), s), (1,)).astype(dt)
        v = linspace_values_c(s, e, steps)
        return jnp.power(jnp.complex128(base), v).astype(dt)
    if jnp.iscomplexobj(start_):
        start_ = start_.real
    if jnp.iscomplexobj(end_):
        end_ = end_.real
    if steps == 1:
        return jnp.broadcast_to(jnp.power(jnp.float64(base), start_.astype(jnp.float64)),
                                (1,)).astype(dt)
    integral = jnp.issubdtype(dt, jnp.integer)
    if integral:
        s = jnp.trunc(start_.astype(jnp.float64)).astype(dt).astype(jnp.float64)
        e = jnp.trunc(end_.astype(jnp.float64)).astype(dt).astype(jnp.float64)
        b = jnp.float64(float(_np.float32(base)))
    else:
        s = _cast_through(start_, dt)
        e = _cast_through(end_, dt)
        b = jnp.float64(base)
    step = (e - s) / (steps - 1)
    i = lax.iota(jnp.int64, steps)
    fi = i.astype(jnp.float64)
    expo = jnp.where(i < steps // 2, s + step * fi, e - step * (steps - 1 - fi))
    vals = jnp.power(b, expo)
    if integral:
        return convert(vals, dt)
    return vals.astype(dt)


def _cast_through(v, dt):
    """A start/end value rounded to the result type, back in float64."""
    if dt in (_F16, _BF16):
        return v.astype(jnp.float64).astype(jnp.float32).astype(dt).astype(jnp.float64)
    return v.astype(jnp.float64).astype(dt).astype(jnp.float64)


def linspace_values_c(s, e, steps):
    step = (e - s) / (steps - 1)
    i = lax.iota(jnp.int64, steps)
    fi = i.astype(jnp.float64)
    return jnp.where(i < steps // 2, s + step * fi, e - step * (steps - 1 - fi))


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



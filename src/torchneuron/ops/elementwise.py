"""Elementwise math, comparisons, logical and bitwise ops, where, clamp, special functions.

The result dtype comes from PyTorch's meta kernel (``out_dtype()``); casting the
operands to it reproduces PyTorch's type promotion, including wrapped-number
scalars.  Half-precision values (float16 / bfloat16) are computed in float32
and rounded once, as PyTorch's kernels do (their "opmath" type), wherever an op
is more than one rounding step.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch
import jax.scipy.special as jsp
from jax import lax

from ..lowering import lower as _lower_plain
from ..lowering import in_compute_dtype, in_result_dtype, out_dtype
from ..numerics import HALF, cast, is_complex, is_float, round_to, upcast


# Every elementwise lowering checks PyTorch's dtype support at trace time (probe.py).
def lower(*names, static=(), check=None, compute=None):
    return _lower_plain(*names, static=static, probe=True, check=check, compute=compute)


def _scalar_opmath(*xs):
    """Operands for mul/div: for half results, a Python-number operand goes to float32
    directly (PyTorch's CPU kernels read its original value as opmath, never rounding
    it to the half dtype first; add/sub do round it first); others as `_compute`.  None if not a half
    result (then `_compute` is exact)."""
    dt = out_dtype()
    if dt not in HALF:
        return None
    out = []
    for x in xs:
        x = jnp.asarray(x)
        if x.ndim == 0 and getattr(x, "weak_type", False) and not is_complex(x.dtype):
            out.append(x.astype(jnp.float32))
        else:
            out.append(cast(x, dt).astype(jnp.float32))
    return out


def _cmp_dtype(a, b):
    """The dtype PyTorch compares in: the promoted type of the operands."""
    return jnp.result_type(jnp.asarray(a), jnp.asarray(b))


def _is_int(dt):
    return jnp.issubdtype(dt, jnp.integer)


def _is_one(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == 1


# ---------------------------------------------------------------- arithmetic
def _complex_axpy(x, y, alpha):
    """x + alpha * y for complex results as PyTorch's CPU and CUDA kernels compute it: alpha
    is a complex number, multiplied out in full even when it is 1 or -1 (so an infinite part
    of y meets a zero part of alpha: inf * 0 = nan), which XLA would otherwise simplify."""
    x, y = in_result_dtype(x, y)
    a = complex(alpha)
    yr, yi = jnp.real(y), jnp.imag(y)
    ar, ai = (jnp.asarray(v, yr.dtype) for v in (a.real, a.imag))
    return x + lax.complex(yr * ar - yi * ai, yr * ai + yi * ar)


@lower("add.Tensor", "add.Scalar")
def add(x, y, alpha=1):
    if is_complex(out_dtype()) and not isinstance(alpha, jax.Array):
        return _complex_axpy(x, y, alpha)
    if _is_one(alpha):
        x, y = in_result_dtype(x, y)
        return x + y if x.dtype != jnp.bool_ else x | y
    x, y = in_compute_dtype(x, y)
    if x.dtype == jnp.bool_:
        return x | (y & cast(jnp.asarray(alpha), jnp.bool_))
    return x + y * cast(jnp.asarray(alpha), y.dtype)


@lower("sub.Tensor", "sub.Scalar")
def sub(x, y, alpha=1):
    if is_complex(out_dtype()) and not isinstance(alpha, jax.Array):
        return _complex_axpy(x, y, -complex(alpha))
    if _is_one(alpha):
        x, y = in_result_dtype(x, y)
        return x - y
    x, y = in_compute_dtype(x, y)
    return x - y * cast(jnp.asarray(alpha), y.dtype)


@lower("rsub.Tensor", "rsub.Scalar")
def rsub(x, y, alpha=1):
    return sub(y, x, alpha)


@lower("mul.Tensor", "mul.Scalar")
def mul(x, y):
    h = _scalar_opmath(x, y)
    if h is not None:
        return h[0] * h[1]
    x, y = in_result_dtype(x, y)
    return x * y if x.dtype != jnp.bool_ else x & y


def true_divide(x, y):
    """x / y correctly rounded, as PyTorch's CPU kernel divides.  XLA's simplifier turns a
    division by a broadcast divisor (a scalar, a (n, 1) column) into a multiplication by
    its reciprocal, one ulp off for about 70% of float32 quotients (torchao's int8 scales,
    amax / 127.5, then gave other codes than the CPU): the divisor is broadcast behind an
    optimization barrier, which the simplifier does not look through."""
    x, y = _exact_divisor(x, y)
    return x / y


def _exact_divisor(x, y):
    """(x, y) broadcast to one shape; a floating divisor that needed broadcasting behind
    an optimization barrier (see true_divide)."""
    x, y = jnp.asarray(x), jnp.asarray(y)
    shape = jnp.broadcast_shapes(x.shape, y.shape)
    if y.shape != shape and jnp.issubdtype(jnp.result_type(x, y), jnp.floating):
        y = lax.optimization_barrier(jnp.broadcast_to(y, shape))
    return jnp.broadcast_to(x, shape), y


@lower("div.Tensor", "div.Scalar")
def div(x, y):
    h = _scalar_opmath(x, y)
    if h is not None:
        return true_divide(*h)
    x, y = in_result_dtype(x, y)
    return true_divide(x, y)


def _div_floor_float(x, y):
    # PyTorch's div_floor_floating, elementwise
    q = x / y
    mod = jnp.fmod(x, y)
    d = (x - mod) / y
    d = jnp.where((mod != 0) & ((y < 0) != (mod < 0)), d - 1, d)
    fl = jnp.floor(d)
    fl = jnp.where(d - fl > 0.5, fl + 1, fl)
    res = jnp.where(d == 0, jnp.copysign(jnp.zeros_like(q), q), fl)
    return jnp.where(y == 0, q, res)


def _div_floor_int(x, y):
    # truncating division, minus one where the signs differ and it is inexact
    # (division by zero gives what XLA gives; PyTorch's CPU raises ZeroDivisionError)
    safe = jnp.where(y == 0, jnp.ones_like(y), y)
    q = lax.div(x, safe)
    r = lax.rem(x, safe)
    q = jnp.where((r != 0) & ((r < 0) != (safe < 0)), q - 1, q)
    return jnp.where(y == 0, lax.div(x, y), q)


def _int_zero_divisor_check(x, y, *rest, rounding_mode="trunc", **kwargs):
    """Integer division by a Python (or 0-dim CPU) zero: CPU's ZeroDivisionError, known
    without reading the device (a zero inside a device divisor is docs/limitations.md)."""
    if isinstance(y, torch.Tensor):
        if y.device.type != "cpu" or y.dim() != 0:
            return
        y = y.item()
    if rounding_mode is None or isinstance(y, (float, complex)) or y != 0:
        return
    if isinstance(x, torch.Tensor) and not (x.is_floating_point() or x.is_complex()):
        raise RuntimeError("ZeroDivisionError")


@lower("div.Tensor_mode", "div.Scalar_mode", check=_int_zero_divisor_check)
def div_mode(x, y, *, rounding_mode=None):
    dt = out_dtype()
    if rounding_mode is None:
        return true_divide(*in_result_dtype(x, y, dt=dt))
    x, y = _exact_divisor(*in_result_dtype(x, y, dt=dt))
    if _is_int(dt):
        x, y = jnp.broadcast_arrays(x, y)  # lax.div and lax.rem do not broadcast
        if rounding_mode == "trunc":
            return lax.div(x, y)
        return _div_floor_int(x, y)
    if dt == jnp.bool_:
        return x
    x, y = upcast(x, y)
    if rounding_mode == "trunc":
        return jnp.trunc(x / y)
    return _div_floor_float(x, y)


@lower("floor_divide.default", "floor_divide.Scalar", check=_int_zero_divisor_check)
def floor_divide(x, y):
    return div_mode(x, y, rounding_mode="floor")


@lower("remainder.Tensor", "remainder.Scalar", "remainder.Scalar_Tensor", check=_int_zero_divisor_check)
def remainder(x, y):
    x, y = jnp.broadcast_arrays(*in_compute_dtype(x, y))
    if _is_int(x.dtype):
        r = lax.rem(x, y)
        return jnp.where((r != 0) & ((r < 0) != (y < 0)), r + y, r)
    r = jnp.fmod(x, y)
    return jnp.where((r != 0) & ((r < 0) != (y < 0)), r + y, r)


@lower("fmod.Tensor", "fmod.Scalar", check=_int_zero_divisor_check)
def fmod(x, y):
    x, y = jnp.broadcast_arrays(*in_compute_dtype(x, y))
    if _is_int(x.dtype):
        return lax.rem(x, y)
    return jnp.fmod(x, y)


@lower("neg.default")
def neg(x):
    return -x


def _ipow(a, b):
    """Integer power like PyTorch's powi: negative exponents give 1, -1 or 0."""
    a, b = jnp.broadcast_arrays(a, b)
    if a.dtype == jnp.bool_:
        return a | ~b
    bits = jnp.iinfo(a.dtype).bits
    signed = jnp.issubdtype(a.dtype, jnp.signedinteger)
    e = jnp.where(b < 0, jnp.zeros_like(b), b) if signed else b
    res = jnp.ones_like(a)
    base = a
    for _ in range(bits):
        res = jnp.where((e & 1) == 1, res * base, res)
        base = base * base
        e = lax.shift_right_logical(e, jnp.ones_like(e))
    if not signed:
        return res
    odd = (b & 1) == 1
    neg_res = jnp.where(a == 1, jnp.ones_like(a),
                        jnp.where(a == -1, jnp.where(odd, -jnp.ones_like(a), jnp.ones_like(a)),
                                  jnp.zeros_like(a)))
    return jnp.where(b < 0, neg_res, res)


# ---------------------------------------------------------------- complex pow
# CPU's complex pow is std::pow(complex, complex) (c10/util/complex_math.h), which
# libstdc++ hands to glibc's cpow: cexp(y * clog(x)), with C99 Annex G multiplication
# and glibc's special cases (0 ** y is cexp(y * (-inf + i arg)): 0 for Re y > 0, NaN
# for 0 ** 0).  complex64 follows cpowf, whose clogf/cexpf/sincosf are accurate float
# routines: each step is computed in float64 and rounded to float32, the products in
# float32.
def _clog_real(re, im, part):
    """glibc's clog real part (s_clog_template.c): log1p forms near |x| = 1, else
    log(hypot); the branch tests and the cheap arithmetic in the part's precision."""
    hi = jnp.float64
    fi = jnp.finfo(part)
    ax, ay = jnp.abs(re), jnp.abs(im)
    absx, absy = jnp.maximum(ax, ay), jnp.minimum(ax, ay)
    unscaled = ~(absx > fi.max / 2) & ~((absx < fi.tiny) & (absy < fi.tiny))
    one = jnp.ones_like(absx)
    b1 = unscaled & (absx == 1)
    b2 = unscaled & ~b1 & (absx > 1) & (absx < 2) & (absy < 1)
    b3 = unscaled & ~b1 & ~b2 & (absx < 1) & (absx >= 0.5) & (absy < fi.eps / 2)
    b4 = (unscaled & ~b1 & ~b2 & ~b3 & (absx < 1) & (absx >= 0.5)
          & (absx * absx + absy * absy >= 0.5))
    dm = (absx - one) * (absx + one)
    d2 = jnp.where(absy >= fi.eps, dm + absy * absy, dm)
    xh, yh = absx.astype(hi), absy.astype(hi)
    d4 = ((xh - 1) * (xh + 1) + yh * yh).astype(part)
    d2m1 = jnp.where(b1, absy * absy, jnp.where(b2, d2, jnp.where(b3, dm, d4)))
    near = b1 | b2 | b3 | b4
    l1p = jnp.log1p(jnp.where(near, d2m1, 0).astype(hi)).astype(part) / 2
    general = jnp.log(jnp.hypot(re.astype(hi), im.astype(hi))).astype(part)
    return jnp.where(near, l1p, general)


def _clog(x, part):
    re, im = jnp.real(x), jnp.imag(x)
    hi = jnp.float64
    r64, i64 = re.astype(hi), im.astype(hi)
    real = _clog_real(re, im, part)
    imag = jnp.arctan2(i64, r64).astype(part)
    zero = (re == 0) & (im == 0)
    nan_in = jnp.isnan(re) | jnp.isnan(im)
    inf_in = jnp.isinf(re) | jnp.isinf(im)
    pi = jnp.asarray(math.pi, part)
    zimag = jnp.copysign(jnp.where(jnp.signbit(re), pi, jnp.zeros_like(pi)), im)
    inf = jnp.asarray(jnp.inf, part)
    nan = jnp.asarray(jnp.nan, part)
    real = jnp.where(zero, -inf, jnp.where(nan_in, jnp.where(inf_in, inf, nan), real))
    imag = jnp.where(zero, zimag, jnp.where(nan_in, nan, imag))
    return real, imag


def _annex_g_mul(a, b, c, d):
    """(a + bi)(c + di) like libgcc's __mulsc3/__muldc3 (infinities recovered from NaN)."""
    ac, bd, ad, bc = a * c, b * d, a * d, b * c
    x, y = ac - bd, ad + bc
    both_nan = jnp.isnan(x) & jnp.isnan(y)
    one, zero = jnp.ones_like(a), jnp.zeros_like(a)

    def box(v):  # an infinite part -> +-1, a finite one -> +-0
        return jnp.copysign(jnp.where(jnp.isinf(v), one, zero), v)

    def nan0(v):
        return jnp.where(jnp.isnan(v), jnp.copysign(zero, v), v)

    ab_inf = jnp.isinf(a) | jnp.isinf(b)
    a1, b1 = jnp.where(ab_inf, box(a), a), jnp.where(ab_inf, box(b), b)
    c1, d1 = jnp.where(ab_inf, nan0(c), c), jnp.where(ab_inf, nan0(d), d)
    cd_inf = jnp.isinf(c1) | jnp.isinf(d1)
    c2, d2 = jnp.where(cd_inf, box(c1), c1), jnp.where(cd_inf, box(d1), d1)
    a2, b2 = jnp.where(cd_inf, nan0(a1), a1), jnp.where(cd_inf, nan0(b1), b1)
    recalc = ab_inf | cd_inf
    prod_inf = ~recalc & (jnp.isinf(ac) | jnp.isinf(bd) | jnp.isinf(ad) | jnp.isinf(bc))
    a3, b3 = jnp.where(prod_inf, nan0(a2), a2), jnp.where(prod_inf, nan0(b2), b2)
    c3, d3 = jnp.where(prod_inf, nan0(c2), c2), jnp.where(prod_inf, nan0(d2), d2)
    recalc = recalc | prod_inf
    inf = jnp.asarray(jnp.inf, a.dtype)
    xr = inf * (a3 * c3 - b3 * d3)
    yr = inf * (a3 * d3 + b3 * c3)
    use = both_nan & recalc
    return jnp.where(use, xr, x), jnp.where(use, yr, y)


def _cexp(re, im, part):
    """glibc's cexp (s_cexp_template.c), special cases and overflow scaling included."""
    hi = jnp.float64
    single = part == jnp.float32
    t = 88 if single else 709
    tiny = jnp.finfo(part).tiny
    big = jnp.finfo(part).max
    rnd = (lambda v: v.astype(part)) if single else (lambda v: v)
    i64 = im.astype(hi)
    small_im = ~(jnp.abs(im) > tiny)
    sin = jnp.where(small_im, im, rnd(jnp.sin(i64)))
    cos = jnp.where(small_im, jnp.ones_like(im), rnd(jnp.cos(i64)))
    exp_t = jnp.asarray(math.exp(t), hi).astype(part)
    r = re
    s1 = r > t
    sin, cos = jnp.where(s1, sin * exp_t, sin), jnp.where(s1, cos * exp_t, cos)
    r = jnp.where(s1, r - t, r)
    s2 = r > t
    sin, cos = jnp.where(s2, sin * exp_t, sin), jnp.where(s2, cos * exp_t, cos)
    r = jnp.where(s2, r - t, r)
    over = r > t
    ev = rnd(jnp.exp(r.astype(hi)))
    fin_re = jnp.where(over, big * cos, ev * cos)
    fin_im = jnp.where(over, big * sin, ev * sin)
    nan = jnp.full_like(re, jnp.nan)
    zero = jnp.zeros_like(re)
    inf = jnp.full_like(re, jnp.inf)
    re_fin, im_fin = jnp.isfinite(re), jnp.isfinite(im)
    # real part infinite
    value = jnp.where(jnp.signbit(re), zero, inf)
    sin_full, cos_full = rnd(jnp.sin(i64)), rnd(jnp.cos(i64))
    inf_fin_re = jnp.where(im == 0, value, jnp.copysign(value, cos_full))
    inf_fin_im = jnp.where(im == 0, im, jnp.copysign(value, sin_full))
    inf_re = jnp.where(im_fin, inf_fin_re, jnp.where(jnp.signbit(re), zero, inf))
    inf_im = jnp.where(im_fin, inf_fin_im,
                       jnp.where(jnp.signbit(re), jnp.copysign(zero, im), im - im))
    out_re = jnp.where(re_fin, jnp.where(im_fin, fin_re, nan),
                       jnp.where(jnp.isinf(re), inf_re, nan))
    out_im = jnp.where(re_fin, jnp.where(im_fin, fin_im, nan),
                       jnp.where(jnp.isinf(re), inf_im, jnp.where(im == 0, im, nan)))
    return out_re, out_im


def _cpow(x, y):
    """glibc cpow(x, y) = cexp(y * clog(x)) (see above)."""
    part = jnp.float32 if x.dtype == jnp.complex64 else jnp.float64
    x, y = jnp.broadcast_arrays(x, y)
    lr, li = _clog(x, part)
    er, ei = _annex_g_mul(jnp.real(y), jnp.imag(y), lr, li)
    re, im = _cexp(er, ei, part)
    return lax.complex(re, im)


def _pow(x, y):
    if _is_int(x.dtype) or x.dtype == jnp.bool_:
        return _ipow(x, y)
    x, y = upcast(x, y)
    if is_complex(x.dtype):
        return _cpow(x, cast(y, x.dtype))
    return jnp.power(x, y)


@lower("pow.Tensor_Tensor")
def pow_tt(x, y):
    x, y = in_result_dtype(x, y)
    return _pow(x, y)


@lower("pow.Tensor_Scalar", static=("exponent",))
def pow_ts(x, exponent):
    dt = out_dtype()
    x = cast(x, dt)
    e = exponent
    if isinstance(e, bool):
        e = int(e)
    if _is_int(dt) or dt == jnp.bool_:
        if isinstance(e, int) and e < 0 and dt != jnp.bool_:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        if isinstance(e, int) and 0 <= e <= 64:
            return lax.integer_pow(x, e) if e != 0 else jnp.ones_like(x)
        return _pow(x, cast(jnp.asarray(e), dt))
    (x,) = upcast(x)
    # PyTorch's special cases (exact products / sqrt / rsqrt / reciprocal)
    if isinstance(e, (int, float)) and not isinstance(e, complex):
        if e == 0:
            return jnp.ones_like(x)
        if e == 1:
            return x
        if e in (2, 3, -1, -2):
            return lax.integer_pow(x, int(e))
        # (float16: CPU calls std::pow there, no sqrt shortcut; bfloat16 takes it)
        if e == 0.5 and not is_complex(x.dtype) and dt != jnp.float16:
            return jnp.sqrt(x)
        if e == -0.5 and not is_complex(x.dtype) and dt != jnp.float16:
            return lax.rsqrt(x)
    if is_complex(x.dtype):
        return _cpow(x, cast(jnp.asarray(e), x.dtype))
    return jnp.power(x, cast(jnp.asarray(e), x.dtype))


@lower("pow.Scalar")
def pow_st(self, exponent):
    dt = out_dtype()
    return _pow(cast(jnp.asarray(self), dt), cast(exponent, dt))


@lower("float_power.Tensor_Tensor", "float_power.Tensor_Scalar", "float_power.Scalar")
def float_power(x, y):
    x, y = in_result_dtype(x, y)
    return jnp.power(x, y)


@lower("reciprocal.default")
def reciprocal(x):
    (x,) = in_result_dtype(x)
    return 1 / x


@lower("abs.default")
def abs_(x):
    if x.dtype == jnp.bool_:
        return x
    return jnp.abs(x)


@lower("sgn.default", "sign.default")
def sign(x):
    if x.dtype == jnp.bool_:
        return x
    if is_complex(x.dtype):
        a = jnp.abs(x)
        return jnp.where(a == 0, jnp.zeros_like(x), x / jnp.where(a == 0, 1, a).astype(x.dtype))
    if is_float(x.dtype):  # (0 < x) - (x < 0): NaN gives 0
        return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)
    return jnp.sign(x)


@lower("signbit.default")
def signbit(x):
    if not is_float(x.dtype):
        return x < 0 if jnp.issubdtype(x.dtype, jnp.signedinteger) else jnp.zeros(x.shape, bool)
    return jnp.signbit(x)


@lower("copysign.Tensor", "copysign.Scalar")
def copysign(x, y):
    x, y = in_result_dtype(x, y)
    return jnp.copysign(x, y)


@lower("lerp.Scalar", "lerp.Tensor")
def lerp(x, end, weight):
    x, end, weight = in_compute_dtype(x, end, weight)
    diff = end - x
    return jnp.where(jnp.abs(weight) < 0.5, x + weight * diff, end - diff * (1 - weight))


@lower("addcmul.default", compute=in_compute_dtype)
def addcmul(x, t1, t2, *, value=1):
    if x.dtype == jnp.bool_:
        return x | (t1 & t2 & cast(jnp.asarray(value), jnp.bool_))
    return x + cast(jnp.asarray(value), x.dtype) * t1 * t2


@lower("addcdiv.default", compute=in_compute_dtype)
def addcdiv(x, t1, t2, *, value=1):
    return x + cast(jnp.asarray(value), x.dtype) * (t1 / t2)


@lower("square.default")
def square(x):
    (x,) = in_result_dtype(x)
    return x * x if x.dtype != jnp.bool_ else x


# ---------------------------------------------------------------- unary float math
def _unary(name, f):
    @lower(name)
    def fn(x):
        (x,) = in_compute_dtype(x)
        return f(x)

    return fn


def _digamma(x):
    # PyTorch: digamma(+-0) = -+inf, negative integers give NaN
    d = jsp.digamma(x)
    return jnp.where(x == 0, jnp.copysign(jnp.full_like(x, jnp.inf), -x), d)


def _trigamma(x):
    # PyTorch's trigamma (reflection for x < 0.5, recurrence, asymptotic series)
    sign = jnp.where(x < 0.5, -1.0, 1.0).astype(x.dtype)
    s = jnp.sin(jnp.pi * x)
    result = jnp.where(x < 0.5, -(jnp.pi * jnp.pi) / (s * s), 0).astype(x.dtype)
    xx = jnp.where(x < 0.5, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (xx * xx)
        xx = xx + 1
    ixx2 = 1 / (xx * xx)
    result = result + (1 + 1 / (2 * xx) + ixx2 * (1.0 / 6 - ixx2 * (1.0 / 30 - ixx2 * (1.0 / 42)))) / xx
    return sign * result


def _entr(x):
    return jnp.where(jnp.isnan(x), x, jnp.where(x > 0, -x * jnp.log(jnp.where(x > 0, x, 1)),
                                                 jnp.where(x == 0, 0, -jnp.inf))).astype(x.dtype)


def _sinc(x):
    # sin(pi x) / (pi x), computed as PyTorch does (in the compute type)
    px = x * jnp.pi
    return jnp.where(x == 0, jnp.ones_like(x), jnp.sin(px) / jnp.where(x == 0, 1, px))


def _sqrt(x):
    r = jnp.sqrt(x)
    if not is_complex(x.dtype):
        return r
    # the principal root's imaginary part has the sign of the input's, -0.0 included
    # (sqrt(-3 - 0j) = -1.732j, as CPU and C99's csqrt; XLA gives +1.732j)
    return lax.complex(jnp.real(r), jnp.copysign(jnp.imag(r), jnp.imag(x)))


def _rsqrt(x):
    if not is_complex(x.dtype):
        return lax.rsqrt(x)
    return 1 / _sqrt(x)


for _n, _f in {
    "exp.default": jnp.exp, "exp2.default": jnp.exp2, "expm1.default": jnp.expm1,
    "log.default": jnp.log, "log2.default": jnp.log2, "log10.default": jnp.log10,
    "log1p.default": jnp.log1p, "sqrt.default": _sqrt, "rsqrt.default": _rsqrt,
    "sin.default": jnp.sin, "cos.default": jnp.cos, "tan.default": jnp.tan,
    "asin.default": jnp.arcsin, "acos.default": jnp.arccos, "atan.default": jnp.arctan,
    "sinh.default": jnp.sinh, "cosh.default": jnp.cosh, "tanh.default": jnp.tanh,
    "asinh.default": jnp.arcsinh, "acosh.default": jnp.arccosh, "atanh.default": jnp.arctanh,
    "erf.default": jsp.erf, "erfc.default": jsp.erfc, "special_erfcx.default": jsp.erfcx,
    "erfinv.default": jsp.erfinv, "lgamma.default": jsp.gammaln,
    "digamma.default": _digamma,
    "sinc.default": _sinc, "deg2rad.default": jnp.deg2rad, "rad2deg.default": jnp.rad2deg,
    "i0.default": jsp.i0, "special_i0e.default": jsp.i0e, "special_i1.default": jsp.i1,
    "special_i1e.default": jsp.i1e, "special_ndtri.default": jsp.ndtri,
    "special_log_ndtr.default": jsp.log_ndtr, "special_ndtr.default": jsp.ndtr,
    "special_entr.default": _entr,
}.items():
    _unary(_n, _f)


@lower("sigmoid.default", compute=in_compute_dtype)
def sigmoid(x):
    if is_complex(x.dtype):
        return 1 / (1 + jnp.exp(-x))
    return jax.nn.sigmoid(x)


@lower("polygamma.default", static=("n",), compute=in_compute_dtype)
def polygamma(n, x):
    if n == 0:
        return _digamma(x)
    if n == 1:
        return _trigamma(x)
    sign = 1.0 if n % 2 else -1.0
    return sign * math.factorial(n) * _zeta(jnp.asarray(n + 1.0, x.dtype), x)


@lower("mvlgamma.default", static=("p",))
def mvlgamma(x, p):
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    (x,) = in_compute_dtype(x)
    # PyTorch checks `all(x > (p-1)/2)` on the host; that needs a sync, so
    # out-of-domain inputs give NaN/inf here instead of an error
    offs = jnp.asarray([-(p - 1) / 2 + i / 2 for i in range(p)], x.dtype)
    s = jnp.sum(jsp.gammaln(x[..., None] + offs), axis=-1)
    return s + jnp.asarray(p * (p - 1) * math.log(math.pi) / 4, x.dtype)


@lower("logit.default", static=("eps",), compute=in_compute_dtype)
def logit(x, eps=None):
    """PyTorch's CPU kernel: 1 - x and the ratio x / (1 - x) in c10::Half / BFloat16
    arithmetic (rounded after each operation), the log in float32."""
    dt = out_dtype()
    if eps is not None:  # lo = eps and hi = 1 - eps in the result dtype too
        lo = round_to(jnp.asarray(eps, x.dtype), dt)
        hi = round_to(1 - lo, dt)
        x = jnp.where(x < lo, lo, jnp.where(x > hi, hi, x)).astype(x.dtype)
    return jnp.log(round_to(x / round_to(1 - x, dt), dt))


def _int_passthrough(name, f):
    @lower(name)
    def fn(x):
        if not is_float(x.dtype):
            return x
        return f(x)

    return fn


for _n, _f in {"floor.default": jnp.floor, "ceil.default": jnp.ceil, "trunc.default": jnp.trunc,
               "round.default": jnp.round, "fix.default": jnp.trunc}.items():
    _int_passthrough(_n, _f)


@lower("round.decimals", static=("decimals",))
def round_decimals(x, *, decimals=0):
    if not is_float(x.dtype):
        return x
    (x,) = upcast(x)
    ten = jnp.asarray(10.0 ** abs(decimals), x.dtype)
    if decimals < 0:
        return jnp.round(x / ten) * ten
    return jnp.round(x * ten) / ten


@lower("frac.default")
def frac(x):
    return x - jnp.trunc(x)


@lower("atan2.default", compute=in_compute_dtype)
def atan2(x, y):
    return jnp.arctan2(x, y)


@lower("hypot.default", compute=in_compute_dtype)
def hypot(x, y):
    return jnp.hypot(x, y)


def _logaddexp_complex(x, y):
    # PyTorch's _log_add_exp_helper: order by real part, NaN and infinity cases
    xr, yr = x.real, y.real
    x_min = jnp.where(jnp.isnan(xr) | jnp.isnan(yr), jnp.isnan(xr), xr < yr)
    mn = jnp.where(x_min, x, y)
    mx = jnp.where(x_min, y, x)
    mnr, mxr = mn.real, mx.real
    nan = jnp.full_like(x, complex(jnp.nan, jnp.nan))
    general = jnp.log1p(jnp.exp(mn - mx)) + mx
    inf_case = jnp.where(mnr < 0, mn, jnp.log(jnp.exp(mn) + jnp.exp(mx)))
    r = jnp.where(~jnp.isfinite(mnr) & (mnr == mxr), inf_case, general)
    return jnp.where(jnp.isnan(mnr) | jnp.isnan(mn.imag), nan, r)


@lower("logaddexp.default", compute=in_compute_dtype)
def logaddexp(x, y):
    if is_complex(x.dtype):
        return _logaddexp_complex(x, y)
    return jnp.logaddexp(x, y)


@lower("logaddexp2.default", compute=in_compute_dtype)
def logaddexp2(x, y):
    return jnp.logaddexp2(x, y)


@lower("xlogy.Tensor", "xlogy.Scalar_Self", "xlogy.Scalar_Other")
def xlogy(x, y):
    x, y = in_compute_dtype(x, y)
    return jnp.where(jnp.isnan(y), jnp.nan, jnp.where(x == 0, 0, x * jnp.log(y))).astype(x.dtype)


@lower("special_xlog1py.default", "special_xlog1py.self_scalar", "special_xlog1py.other_scalar")
def xlog1py(x, y):
    x, y = in_compute_dtype(x, y)
    return jnp.where(jnp.isnan(y), jnp.nan, jnp.where(x == 0, 0, x * jnp.log1p(y))).astype(x.dtype)


@lower("special_zeta.default", "special_zeta.self_scalar", "special_zeta.other_scalar")
def zeta(x, q):
    x, q = in_compute_dtype(x, q)
    return _zeta(x, q)


def _zeta(x, q):
    """Hurwitz zeta with PyTorch's (Cephes') edge cases."""
    x, q = jnp.broadcast_arrays(x, q)
    # jax's zeta needs q > 0: for q < 0 (integer x), shift with
    # zeta(x, q) = q^-x + zeta(x, q + 1) until q > 0 (as exact as the series)
    shift = (q < 0) & jnp.isfinite(q) & (x == jnp.floor(x)) & (q != jnp.floor(q))

    def cond(c):
        return jnp.any(c[0] < 0)

    def body(c):
        qq, acc = c
        m = qq < 0
        return jnp.where(m, qq + 1, qq), acc + jnp.where(m, jnp.power(qq, -x), 0)

    q0, acc = lax.while_loop(cond, body, (jnp.where(shift, q, 1), jnp.zeros_like(q)))
    z = jnp.where(shift, acc + jsp.zeta(x, q0), jsp.zeta(x, q))
    inf = jnp.full_like(z, jnp.inf)
    nan = jnp.full_like(z, jnp.nan)
    qneg = q <= 0
    z = jnp.where(qneg & (x != jnp.floor(x)), nan, z)
    z = jnp.where(qneg & (q == jnp.floor(q)), inf, z)
    # x = +inf: Cephes' series gives inf (q < 1), 1 (q == 1) or NaN (q > 1: 0 * inf)
    z = jnp.where((x == jnp.inf) & ~jnp.isnan(q),
                  jnp.where(q > 1, jnp.nan, jnp.where(q == 1, 1, jnp.inf)).astype(z.dtype), z)
    z = jnp.where(x < 1, nan, z)
    return jnp.where(x == 1, inf, z)


def _igamma_edges(a, x, val, upper):
    nan = jnp.full_like(val, jnp.nan)
    one, zero = jnp.ones_like(val), jnp.zeros_like(val)
    lo, hi = (one, zero) if upper else (zero, one)
    r = jnp.where(jnp.isinf(x), hi, val)
    r = jnp.where(jnp.isinf(a), jnp.where(jnp.isinf(x), nan, lo), r)
    r = jnp.where(x == 0, lo, r)
    r = jnp.where(a == 0, jnp.where(x > 0, hi, nan), r)
    return jnp.where((x < 0) | (a < 0), nan, r)


@lower("igamma.default", compute=in_compute_dtype)
def igamma(a, x):
    return _igamma_edges(a, x, jsp.gammainc(a, x), upper=False)


@lower("igammac.default", compute=in_compute_dtype)
def igammac(a, x):
    return _igamma_edges(a, x, jsp.gammaincc(a, x), upper=True)


@lower("nextafter.default")
def nextafter(x, y):
    x, y = in_result_dtype(x, y)
    return jnp.nextafter(x, y)


@lower("nan_to_num.default")
def nan_to_num(x, nan=None, posinf=None, neginf=None):
    if not is_float(x.dtype):
        return x
    return jnp.nan_to_num(x, nan=0.0 if nan is None else nan, posinf=posinf, neginf=neginf)


@lower("heaviside.default")
def heaviside(x, values):
    x, values = in_result_dtype(x, values)
    return jnp.where(x == 0, values, (x > 0).astype(x.dtype))


# conj_physical itself is CompositeImplicitAutograd (-> _conj_physical for complex)
@lower("_conj_physical.default", "conj_physical_.default")
def conj_physical(x):
    return jnp.conj(x) if is_complex(x.dtype) else x


@lower("angle.default")
def angle(x):
    if is_complex(x.dtype):
        return jnp.angle(x)
    (x,) = in_result_dtype(x)
    return jnp.where(x < 0, jnp.pi, 0).astype(x.dtype) + jnp.where(jnp.isnan(x), x, 0)


@lower("complex.default")
def complex_(real, imag):
    dt = out_dtype()
    part = jnp.float64 if dt == jnp.complex128 else jnp.float32
    return lax.complex(*jnp.broadcast_arrays(cast(real, part), cast(imag, part)))


@lower("polar.default")
def polar(abs, angle):
    dt = out_dtype()
    part = jnp.float64 if dt == jnp.complex128 else jnp.float32
    r, t = jnp.broadcast_arrays(cast(abs, part), cast(angle, part))
    return lax.complex(r * jnp.cos(t), r * jnp.sin(t))


_FREXP_LAYOUT = {  # float dtype -> (uint dtype, mantissa bits, exponent bias)
    jnp.dtype(jnp.float32): (jnp.uint32, 23, 127),
    jnp.dtype(jnp.float64): (jnp.uint64, 52, 1023),
}


@lower("frexp.Tensor")
def frexp(x):
    dt = x.dtype
    xf = x.astype(jnp.float32) if dt in HALF else x
    udt, mbits, bias = _FREXP_LAYOUT[jnp.dtype(xf.dtype)]
    nbits = jnp.iinfo(udt).bits
    # from the bits (XLA:CPU flushes subnormals in arithmetic; PyTorch does not)
    b = lax.bitcast_convert_type(xf, udt)
    sign = b & udt(1 << (nbits - 1))
    ebits = (b >> udt(mbits)) & udt((1 << (nbits - 1 - mbits)) - 1)
    mant = b & udt((1 << mbits) - 1)
    emax = (1 << (nbits - 1 - mbits)) - 1
    # subnormals: normalise the mantissa
    lz = lax.clz(mant).astype(jnp.int32) - (nbits - mbits)  # leading zeros inside the field
    sub_shift = (lz + 1).astype(udt)
    sub_mant = (mant << sub_shift) & udt((1 << mbits) - 1)
    is_sub = ebits == 0
    e = jnp.where(is_sub, -bias + 2 - (lz + 1), ebits.astype(jnp.int32) - bias + 1)
    m = jnp.where(is_sub, sub_mant, mant)
    mbits_out = sign | (udt(bias - 1) << udt(mbits)) | m
    mantissa = lax.bitcast_convert_type(mbits_out, xf.dtype)
    special = (mant == 0) & (ebits == 0) | (ebits == emax)  # zeros (bits: DAZ), inf, nan
    mantissa = jnp.where(special, xf, mantissa)
    e = jnp.where(special, 0, e).astype(jnp.int32)
    return mantissa.astype(dt), e


@lower("gcd.default")
def gcd(x, y):
    x, y = in_result_dtype(x, y)
    return jnp.gcd(x, y)


@lower("lcm.default")
def lcm(x, y):
    x, y = in_result_dtype(x, y)
    g = jnp.gcd(x, y)
    safe = jnp.where(g == 0, jnp.ones_like(g), g)
    return jnp.where(g == 0, jnp.zeros_like(g), jnp.abs(x // safe * y))


# ---------------------------------------------------------------- comparisons
def _cmp(name, f):
    @lower(name)
    def fn(x, y):
        dt = _cmp_dtype(x, y)
        return f(cast(jnp.asarray(x), dt), cast(jnp.asarray(y), dt))

    return fn


for _n, _f in {"eq": jnp.equal, "ne": jnp.not_equal, "lt": jnp.less, "le": jnp.less_equal,
               "gt": jnp.greater, "ge": jnp.greater_equal}.items():
    _cmp(f"{_n}.Tensor", _f)
    _cmp(f"{_n}.Scalar", _f)


def _binary(f):
    def fn(x, y):
        x, y = in_result_dtype(x, y)
        return f(x, y)
    return fn


for _n, _f in {"maximum.default": jnp.maximum, "minimum.default": jnp.minimum,
               "fmax.default": jnp.fmax, "fmin.default": jnp.fmin}.items():
    lower(_n)(_binary(_f))


@lower("isnan.default")
def isnan(x):
    return jnp.isnan(x) if is_float(x.dtype) else jnp.zeros(x.shape, bool)


@lower("isinf.default")
def isinf(x):
    return jnp.isinf(x) if is_float(x.dtype) else jnp.zeros(x.shape, bool)


@lower("isfinite.default")
def isfinite(x):
    return jnp.isfinite(x) if is_float(x.dtype) else jnp.ones(x.shape, bool)


@lower("isposinf.default")
def isposinf(x):
    return jnp.isposinf(x) if is_float(x.dtype) else jnp.zeros(x.shape, bool)


@lower("isneginf.default")
def isneginf(x):
    return jnp.isneginf(x) if is_float(x.dtype) else jnp.zeros(x.shape, bool)


# ---------------------------------------------------------------- logical / bitwise
@lower("logical_not.default")
def logical_not(x):
    return jnp.logical_not(x.astype(bool) if x.dtype != bool else x)


for _n, _f in {"logical_and": jnp.logical_and, "logical_or": jnp.logical_or,
               "logical_xor": jnp.logical_xor}.items():
    def _mk(f):
        def fn(x, y):
            return f(jnp.asarray(x) != 0, jnp.asarray(y) != 0)
        return fn
    lower(f"{_n}.default")(_mk(_f))


def _shift_left(x, y):
    # PyTorch: shifts by a negative amount or by >= the bit width give 0 (XLA agrees)
    return lax.shift_left(*jnp.broadcast_arrays(x, y))


def _shift_right(x, y):
    x, y = jnp.broadcast_arrays(x, y)
    if jnp.issubdtype(x.dtype, jnp.signedinteger):
        return lax.shift_right_arithmetic(x, y)
    return lax.shift_right_logical(x, y)


for _n, _f in {"bitwise_and": jnp.bitwise_and, "bitwise_or": jnp.bitwise_or,
               "bitwise_xor": jnp.bitwise_xor, "bitwise_left_shift": _shift_left,
               "bitwise_right_shift": _shift_right}.items():
    lower(f"{_n}.Tensor", f"{_n}.Scalar", f"{_n}.Tensor_Scalar", f"{_n}.Scalar_Tensor")(_binary(_f))

lower("__and__.Tensor", "__and__.Scalar")(_binary(jnp.bitwise_and))
lower("__or__.Tensor", "__or__.Scalar")(_binary(jnp.bitwise_or))
lower("__xor__.Tensor", "__xor__.Scalar")(_binary(jnp.bitwise_xor))
lower("__lshift__.Tensor", "__lshift__.Scalar")(_binary(_shift_left))
lower("__rshift__.Tensor", "__rshift__.Scalar")(_binary(_shift_right))


@lower("bitwise_not.default")
def bitwise_not(x):
    return jnp.logical_not(x) if x.dtype == jnp.bool_ else jnp.invert(x)


# ---------------------------------------------------------------- where / clamp
@lower("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar")
def where(cond, x, y):
    x, y = in_result_dtype(x, y)
    return jnp.where(cond, x, y)


@lower("clamp.default", "clamp.Tensor")
def clamp(x, min=None, max=None):
    dt = out_dtype()
    x = cast(x, dt)
    fl = is_float(dt)
    if min is not None:
        lo = cast(jnp.asarray(min), dt)
        # NaN in x or in the bound propagates
        x = jnp.maximum(x, lo) if fl else jnp.where(x < lo, lo, x)
    if max is not None:
        hi = cast(jnp.asarray(max), dt)
        x = jnp.minimum(x, hi) if fl else jnp.where(x > hi, hi, x)
    return x


@lower("clamp_min.default", "clamp_min.Tensor")
def clamp_min(x, min):
    return clamp(x, min, None)


@lower("clamp_max.default", "clamp_max.Tensor")
def clamp_max(x, max):
    return clamp(x, None, max)



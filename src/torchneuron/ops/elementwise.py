"""Elementwise math, comparisons, logical and bitwise ops, where, clamp."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ..lowering import cast, is_float, lower, out_dtype

# The result dtype comes from PyTorch's meta kernel (out_dtype()); computing in
# it reproduces PyTorch's type promotion, including wrapped-number scalars.


def _compute(*xs):
    dt = out_dtype()
    return [cast(jnp.asarray(x), dt) for x in xs]


def _cmp_dtype(a, b):
    """The dtype PyTorch compares in: the promoted type of the operands."""
    a = jnp.asarray(a)
    b = jnp.asarray(b)
    return jnp.result_type(a, b)


# ---------------------------------------------------------------- arithmetic
@lower("add.Tensor", "add.Scalar")
def add(x, y, alpha=1):
    x, y = _compute(x, y)
    if not (isinstance(alpha, (int, float)) and alpha == 1):
        y = y * cast(jnp.asarray(alpha), y.dtype)
    return x + y if x.dtype != jnp.bool_ else x | y


@lower("sub.Tensor", "sub.Scalar")
def sub(x, y, alpha=1):
    x, y = _compute(x, y)
    if not (isinstance(alpha, (int, float)) and alpha == 1):
        y = y * cast(jnp.asarray(alpha), y.dtype)
    return x - y


@lower("rsub.Tensor", "rsub.Scalar")
def rsub(x, y, alpha=1):
    return sub(y, x, alpha)


@lower("mul.Tensor", "mul.Scalar")
def mul(x, y):
    x, y = _compute(x, y)
    return x * y if x.dtype != jnp.bool_ else x & y


@lower("div.Tensor", "div.Scalar")
def div(x, y):
    x, y = _compute(x, y)
    return x / y


@lower("div.Tensor_mode", "div.Scalar_mode")
def div_mode(x, y, *, rounding_mode=None):
    dt = out_dtype()
    x, y = jnp.asarray(x), jnp.asarray(y)
    if rounding_mode is None:
        return cast(x, dt) / cast(y, dt)
    x, y = cast(x, dt), cast(y, dt)
    if jnp.issubdtype(dt, jnp.integer):
        if rounding_mode == "trunc":
            q = lax.div(x, y)
            return q
        return jnp.floor_divide(x, y)
    q = x / y
    if rounding_mode == "trunc":
        return jnp.trunc(q)
    # floor: PyTorch computes floor((x - fmod(x, y)) / y) with sign fix-ups
    mod = jnp.fmod(x, y)
    div_ = (x - mod) / y
    div_ = jnp.where((mod != 0) & ((y < 0) != (mod < 0)), div_ - 1, div_)
    fl = jnp.floor(div_)
    fl = jnp.where(div_ - fl > 0.5, fl + 1, fl)
    return jnp.where(div_ == 0, jnp.copysign(jnp.zeros_like(q), q), jnp.where(y == 0, q, fl))


@lower("floor_divide.default", "floor_divide.Scalar")
def floor_divide(x, y):
    return div_mode(x, y, rounding_mode="floor")


@lower("remainder.Tensor", "remainder.Scalar", "remainder.Scalar_Tensor")
def remainder(x, y):
    x, y = _compute(x, y)
    if jnp.issubdtype(x.dtype, jnp.integer):
        return jnp.remainder(x, y)
    r = jnp.fmod(x, y)
    return jnp.where((r != 0) & ((r < 0) != (y < 0)), r + y, r)


@lower("fmod.Tensor", "fmod.Scalar")
def fmod(x, y):
    x, y = _compute(x, y)
    if jnp.issubdtype(x.dtype, jnp.integer):
        return lax.rem(x, y)
    return jnp.fmod(x, y)


@lower("neg.default")
def neg(x):
    return -x


@lower("pow.Tensor_Tensor")
def pow_tt(x, y):
    x, y = _compute(x, y)
    return _pow(x, y)


@lower("pow.Tensor_Scalar", static=("exponent",))
def pow_ts(x, exponent):
    dt = out_dtype()
    x = cast(x, dt)
    if isinstance(exponent, bool):
        exponent = int(exponent)
    if isinstance(exponent, int) and not isinstance(exponent, bool) and abs(exponent) <= 64:
        if exponent >= 0 or is_float(dt):
            return lax.integer_pow(x, exponent) if exponent != 0 else jnp.ones_like(x)
    if isinstance(exponent, float) and exponent == 0.5 and is_float(dt) and not jnp.issubdtype(dt, jnp.complexfloating):
        return jnp.sqrt(x)
    return _pow(x, cast(jnp.asarray(exponent), dt))


@lower("pow.Scalar", static=("self",))
def pow_st(self, exponent):
    dt = out_dtype()
    return _pow(cast(jnp.asarray(self), dt), cast(exponent, dt))


def _pow(x, y):
    if jnp.issubdtype(x.dtype, jnp.integer):
        return jnp.power(x, y)
    return lax.pow(x, y)


@lower("float_power.Tensor_Tensor", "float_power.Tensor_Scalar", "float_power.Scalar")
def float_power(x, y):
    x, y = _compute(x, y)
    return lax.pow(x, y)


@lower("reciprocal.default")
def reciprocal(x):
    (x,) = _compute(x)
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
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        a = jnp.abs(x)
        return jnp.where(a == 0, jnp.zeros_like(x), x / jnp.where(a == 0, 1, a).astype(x.dtype))
    return jnp.sign(x)


@lower("signbit.default")
def signbit(x):
    if not is_float(x.dtype):
        return x < 0 if jnp.issubdtype(x.dtype, jnp.signedinteger) else jnp.zeros(x.shape, bool)
    return jnp.signbit(x)


@lower("copysign.Tensor", "copysign.Scalar")
def copysign(x, y):
    x, y = _compute(x, y)
    return jnp.copysign(x, y)


@lower("lerp.Scalar", "lerp.Tensor")
def lerp(x, end, weight):
    dt = out_dtype()
    x, end, weight = cast(x, dt), cast(jnp.asarray(end), dt), cast(jnp.asarray(weight), dt)
    diff = end - x
    return jnp.where(jnp.abs(weight) < 0.5, x + weight * diff, end - diff * (1 - weight))


@lower("addcmul.default")
def addcmul(x, t1, t2, *, value=1):
    x, t1, t2 = _compute(x, t1, t2)
    return x + cast(jnp.asarray(value), x.dtype) * t1 * t2


@lower("addcdiv.default")
def addcdiv(x, t1, t2, *, value=1):
    x, t1, t2 = _compute(x, t1, t2)
    return x + cast(jnp.asarray(value), x.dtype) * (t1 / t2)


# ---------------------------------------------------------------- unary float math
def _unary(name, f):
    @lower(name)
    def fn(x):
        (x,) = _compute(x)
        return f(x)

    return fn


for _n, _f in {
    "exp.default": jnp.exp, "exp2.default": jnp.exp2, "expm1.default": jnp.expm1,
    "log.default": jnp.log, "log2.default": jnp.log2, "log10.default": jnp.log10,
    "log1p.default": jnp.log1p, "sqrt.default": jnp.sqrt, "rsqrt.default": lax.rsqrt,
    "sin.default": jnp.sin, "cos.default": jnp.cos, "tan.default": jnp.tan,
    "asin.default": jnp.arcsin, "acos.default": jnp.arccos, "atan.default": jnp.arctan,
    "sinh.default": jnp.sinh, "cosh.default": jnp.cosh, "tanh.default": jnp.tanh,
    "asinh.default": jnp.arcsinh, "acosh.default": jnp.arccosh, "atanh.default": jnp.arctanh,
    "erf.default": jax.scipy.special.erf, "erfc.default": jax.scipy.special.erfc,
    "erfinv.default": jax.scipy.special.erfinv, "lgamma.default": jax.scipy.special.gammaln,
    "digamma.default": jax.scipy.special.digamma, "sigmoid.default": jax.nn.sigmoid,
    "sinc.default": jnp.sinc, "deg2rad.default": jnp.deg2rad, "rad2deg.default": jnp.rad2deg,
    "i0.default": jax.scipy.special.i0,
}.items():
    _unary(_n, _f)


@lower("square.default")
def square(x):
    (x,) = _compute(x)
    return x * x


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
    ten = jnp.asarray(10.0, x.dtype) ** decimals
    return jnp.round(x * ten) / ten if decimals >= 0 else jnp.round(x / (1 / ten)) * (1 / ten)


@lower("frac.default")
def frac(x):
    return x - jnp.trunc(x)


@lower("atan2.default")
def atan2(x, y):
    x, y = _compute(x, y)
    return jnp.arctan2(x, y)


@lower("hypot.default")
def hypot(x, y):
    x, y = _compute(x, y)
    return jnp.hypot(x, y)


@lower("logaddexp.default")
def logaddexp(x, y):
    x, y = _compute(x, y)
    return jnp.logaddexp(x, y)


@lower("logaddexp2.default")
def logaddexp2(x, y):
    x, y = _compute(x, y)
    return jnp.logaddexp2(x, y)


@lower("xlogy.Tensor", "xlogy.Scalar_Self", "xlogy.Scalar_Other")
def xlogy(x, y):
    x, y = _compute(x, y)
    return jnp.where(jnp.isnan(y), jnp.nan, jnp.where(x == 0, 0, x * jnp.log(y))).astype(x.dtype)


@lower("nan_to_num.default")
def nan_to_num(x, nan=None, posinf=None, neginf=None):
    if not is_float(x.dtype):
        return x
    return jnp.nan_to_num(x, nan=0.0 if nan is None else nan, posinf=posinf, neginf=neginf)


@lower("logit.default", static=("eps",))
def logit(x, eps=None):
    (x,) = _compute(x)
    if eps is not None:
        x = jnp.clip(x, eps, 1 - eps)
    return jnp.log(x / (1 - x))


@lower("heaviside.default")
def heaviside(x, values):
    return jnp.where(x == 0, values, (x > 0).astype(x.dtype)).astype(out_dtype())


@lower("conj_physical.default")
def conj_physical(x):
    return jnp.conj(x) if jnp.issubdtype(x.dtype, jnp.complexfloating) else x


@lower("angle.default")
def angle(x):
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return jnp.angle(x)
    (x,) = _compute(x)
    return jnp.where(x < 0, jnp.pi, 0).astype(x.dtype) + jnp.where(jnp.isnan(x), x, 0)


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

for _n, _f in {"maximum.default": jnp.maximum, "minimum.default": jnp.minimum,
               "fmax.default": jnp.fmax, "fmin.default": jnp.fmin}.items():
    def _mk(f):
        def fn(x, y):
            x, y = _compute(x, y)
            return f(x, y)
        return fn
    lower(_n)(_mk(_f))


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

for _n, _f in {"bitwise_and": jnp.bitwise_and, "bitwise_or": jnp.bitwise_or,
               "bitwise_xor": jnp.bitwise_xor, "bitwise_left_shift": jnp.left_shift,
               "bitwise_right_shift": jnp.right_shift}.items():
    def _mk(f):
        def fn(x, y):
            x, y = _compute(x, y)
            return f(x, y)
        return fn
    lower(f"{_n}.Tensor", f"{_n}.Scalar", f"{_n}.Scalar_Tensor")(_mk(_f))

lower("__and__.Tensor", "__and__.Scalar")(lambda x, y: jnp.bitwise_and(*_compute(x, y)))
lower("__or__.Tensor", "__or__.Scalar")(lambda x, y: jnp.bitwise_or(*_compute(x, y)))
lower("__xor__.Tensor", "__xor__.Scalar")(lambda x, y: jnp.bitwise_xor(*_compute(x, y)))
lower("__lshift__.Tensor", "__lshift__.Scalar")(lambda x, y: jnp.left_shift(*_compute(x, y)))
lower("__rshift__.Tensor", "__rshift__.Scalar")(lambda x, y: jnp.right_shift(*_compute(x, y)))


@lower("bitwise_not.default")
def bitwise_not(x):
    return jnp.logical_not(x) if x.dtype == jnp.bool_ else jnp.invert(x)


# ---------------------------------------------------------------- where / clamp
@lower("where.self")
def where(cond, x, y):
    x, y = _compute(x, y)
    return jnp.where(cond, x, y)


@lower("clamp.default", "clamp.Tensor")
def clamp(x, min=None, max=None):
    dt = out_dtype()
    x = cast(x, dt)
    if min is not None:
        x = jnp.maximum(x, cast(jnp.asarray(min), dt)) if not is_float(dt) else \
            jnp.where(jnp.isnan(x), x, jnp.maximum(x, cast(jnp.asarray(min), dt)))
    if max is not None:
        x = jnp.minimum(x, cast(jnp.asarray(max), dt)) if not is_float(dt) else \
            jnp.where(jnp.isnan(x), x, jnp.minimum(x, cast(jnp.asarray(max), dt)))
    return x


@lower("clamp_min.default", "clamp_min.Tensor")
def clamp_min(x, min):
    return clamp(x, min, None)


@lower("clamp_max.default", "clamp_max.Tensor")
def clamp_max(x, max):
    return clamp(x, None, max)

"""Elementwise math against PyTorch's CPU kernels: every dtype PyTorch's CPU supports,
special values (inf, nan, -0, domain edges), broadcasting, 0-d / empty / non-contiguous
inputs, in-place and out= variants, and gradients."""
import pytest
import torch

from helpers import DEV, check, check_or_raises, rand, tol


def seeded(shape, dtype, low=-5, high=5, seed=0):
    """helpers.rand from a fresh generator (seed 0 unless given): the same values every run."""
    return rand(shape, dtype, low, high, seed=seed)

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.bfloat16, torch.float16]
ALL = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
       torch.int16, torch.int8, torch.uint8, torch.bool]
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]

SPECIAL = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 0.5, -0.5, 1.0, -1.0, 2.0,
           -2.0, 1e-3, -3.0, 100.0, 0.25, 1.5, -1.5, 7.0]


def _values(dtype, n=24, low=-5, high=5, seed=0):
    """Random values plus, for floats, the special values."""
    x = seeded((n,), dtype, low, high, seed)
    if dtype.is_floating_point:
        x = torch.cat([x, torch.tensor(SPECIAL, dtype=dtype)])
    return x


# ---------------------------------------------------------------- unary
UNARY = ["abs", "neg", "sign", "sgn", "signbit", "exp", "exp2", "expm1", "log", "log2", "log10",
         "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
         "tanh", "asinh", "acosh", "atanh", "sigmoid", "erf", "erfc", "erfinv", "lgamma",
         "digamma", "i0", "sinc", "deg2rad", "rad2deg", "floor", "ceil", "round", "trunc", "fix",
         "frac", "reciprocal", "square", "bitwise_not", "logical_not", "isnan", "isinf",
         "isfinite", "isposinf", "isneginf", "nan_to_num", "positive", "angle", "logit",
         "special.erfcx", "special.i0e", "special.i1", "special.i1e", "special.ndtri",
         "special.ndtr", "special.log_ndtr", "special.entr", "special.expit", "special.exp2",
         "special.gammaln", "special.psi", "special.sinc", "special.round", "special.log1p"]

# ops with loose agreement in low precision (range reduction, series)
_LOOSE = {"lgamma": 4, "digamma": 20, "special.gammaln": 4, "special.psi": 20, "tan": 4,
          "erfinv": 4, "special.ndtri": 4, "i0": 2, "special.i1": 2, "special.erfcx": 4,
          "acosh": 4, "special.log_ndtr": 4, "sinc": 4, "special.sinc": 4}


def _op(name):
    mod = torch
    for part in name.split("."):
        mod = getattr(mod, part)
    return mod


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("name", UNARY)
def test_unary(name, dtype):
    fn = _op(name)
    x = _values(dtype)
    if name in ("log", "log2", "log10", "sqrt", "rsqrt", "lgamma", "digamma", "acosh"):
        x = torch.cat([x, seeded((12,), dtype, 0, 9, seed=1)]) if dtype != torch.bool else x
    if name in ("asin", "acos", "atanh", "erfinv", "logit", "special.ndtri"):
        x = torch.cat([x, seeded((12,), dtype, -1, 1, seed=2)]) if dtype.is_floating_point else x
    check_or_raises(fn, x, **tol(dtype, "elementwise", _LOOSE.get(name, 1)))


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "tanh", "sigmoid", "abs", "neg",
                                  "floor", "special.i1"])
def test_unary_layouts(name):
    fn = _op(name)
    x = seeded((6, 8), torch.float32, 0.1, 4)
    check(fn, x.t(), atol=1e-5, rtol=1e-5)  # non-contiguous
    check(fn, x[::2, 1::3], atol=1e-5, rtol=1e-5)  # strided slice
    check(fn, torch.tensor(0.7), atol=1e-5, rtol=1e-5)  # 0-d
    check(fn, torch.zeros(0, 3), atol=1e-5, rtol=1e-5)  # empty
    # in-place on a view and out=
    if name not in ("special.i1",):
        inplace = getattr(torch.Tensor, name + "_")

        def f(a):
            inplace(a[1:, ::2])
            return a

        check(f, x.clone(), atol=1e-5, rtol=1e-5)
    check(lambda a, o: fn(a, out=o), x, torch.empty(6, 8), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("decimals", [0, 1, 3, -1, -2])
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64], ids=str)
def test_round_decimals(decimals, dtype):
    x = _values(dtype, low=-500, high=500) if dtype.is_floating_point else _values(dtype)
    x = torch.cat([x, torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 0.125, 12.5, 250.0]).to(dtype)])
    check_or_raises(lambda a: torch.round(a, decimals=decimals), x, **tol(dtype, "elementwise"))


def test_round_half_to_even():
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 4.5])
    check(torch.round, x)
    check(torch.round, x.double())


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_nan_to_num(dtype):
    x = _values(dtype)
    check(torch.nan_to_num, x)
    check(lambda a: torch.nan_to_num(a, nan=1.5, posinf=9.0, neginf=-9.0), x)


@pytest.mark.parametrize("eps", [None, 0.1])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_logit(eps, dtype):
    x = torch.cat([seeded((20,), dtype, -0.2, 1.2), torch.tensor([0.0, 1.0, 0.5], dtype=dtype)])
    check(lambda a: torch.logit(a, eps), x, **tol(dtype, "elementwise", 4))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_polygamma(n, dtype):
    x = torch.cat([seeded((20,), dtype, 0.1, 10), torch.tensor([1.0, 2.5, 0.0, -1.5, -2.5, 30.0,
                                                               -8.478, -0.3, -7.2, -3.7],
                                                              dtype=dtype)])
    # float32: PyTorch sums the zeta series in float32; at negative x both are approximate
    rtol = (1e-5 if n < 2 else 1e-3) if dtype == torch.float32 else 1e-9
    check(lambda a: torch.polygamma(n, a), x, atol=1e-5, rtol=rtol)
    check(lambda a: torch.special.polygamma(n, a), x, atol=1e-5, rtol=rtol)


@pytest.mark.parametrize("p", [1, 2, 3, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_mvlgamma(p, dtype):
    x = seeded((3, 4), dtype, (p - 1) / 2 + 0.1, 10)
    check(lambda a: torch.mvlgamma(a, p), x, **tol(dtype, "elementwise", 10))
    check(lambda a: torch.special.multigammaln(a, p), x, **tol(dtype, "elementwise", 10))


def test_mvlgamma_bad_p():
    for dev in ("cpu", DEV):
        with pytest.raises(RuntimeError, match="p has to be greater than or equal to 1"):
            torch.mvlgamma(torch.ones(3, device=dev) * 3, 0)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_frexp(dtype):
    x = torch.cat([_values(dtype, low=-1e4, high=1e4), torch.tensor(
        [1e-30, -3e-20, 6e4, 1.0, 0.75], dtype=torch.float64).to(dtype)])
    check(torch.frexp, x)
    m, e = torch.empty(0, dtype=dtype), torch.empty(0, dtype=torch.int32)
    check(lambda a, m, e: torch.frexp(a, out=(m, e)), x, m, e)


def test_frexp_subnormal():
    # read from the bits: XLA:CPU flushes subnormals in arithmetic, PyTorch does not
    x = torch.tensor([1e-40, -3e-42, 1.2e-38])
    check(torch.frexp, x)
    check(torch.frexp, torch.tensor([4e-320, 1e-310], dtype=torch.float64))


# ---------------------------------------------------------------- binary
BINARY = [
    ("add", lambda a, b: a + b),
    ("add_alpha", lambda a, b: torch.add(a, b, alpha=2)),
    ("sub", lambda a, b: a - b),
    ("sub_alpha", lambda a, b: torch.sub(a, b, alpha=3)),
    ("rsub", lambda a, b: torch.rsub(a, b)),
    ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b),
    ("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc")),
    ("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor")),
    ("floor_divide", torch.floor_divide),
    ("remainder", torch.remainder),
    ("fmod", torch.fmod),
    ("pow", torch.pow),
    ("float_power", torch.float_power),
    ("atan2", torch.atan2),
    ("hypot", torch.hypot),
    ("logaddexp", torch.logaddexp),
    ("logaddexp2", torch.logaddexp2),
    ("xlogy", torch.xlogy),
    ("xlog1py", torch.special.xlog1py),
    ("zeta", torch.special.zeta),
    ("copysign", torch.copysign),
    ("nextafter", torch.nextafter),
    ("maximum", torch.maximum),
    ("minimum", torch.minimum),
    ("fmax", torch.fmax),
    ("fmin", torch.fmin),
    ("eq", torch.eq), ("ne", torch.ne), ("lt", torch.lt), ("le", torch.le), ("gt", torch.gt),
    ("ge", torch.ge),
    ("logical_and", torch.logical_and),
    ("logical_or", torch.logical_or),
    ("logical_xor", torch.logical_xor),
    ("bitwise_and", torch.bitwise_and),
    ("bitwise_or", torch.bitwise_or),
    ("bitwise_xor", torch.bitwise_xor),
    ("lshift", torch.bitwise_left_shift),
    ("rshift", torch.bitwise_right_shift),
    ("gcd", torch.gcd),
    ("lcm", torch.lcm),
    ("heaviside", torch.heaviside),
    ("igamma", torch.igamma),
    ("igammac", torch.igammac),
    ("ldexp", torch.ldexp),
    ("isclose", torch.isclose),
]
# integer division by zero raises ZeroDivisionError on the CPU (a limitation here)
_NONZERO = {"div_trunc", "div_floor", "floor_divide", "remainder", "fmod"}
_LOOSE_BIN = {"zeta": 10, "igamma": 10, "igammac": 10, "float_power": 1, "pow": 2}


def _binary_inputs(name, dtype):
    a = _values(dtype)
    b = _values(dtype, seed=3)
    if dtype.is_floating_point:
        # every special value against every other
        s = torch.tensor(SPECIAL, dtype=dtype)
        a = torch.cat([a, s.repeat_interleave(len(SPECIAL))])
        b = torch.cat([b, s.repeat(len(SPECIAL))])
    elif name in _NONZERO:
        b = torch.where(b == 0, torch.ones_like(b), b)
    if name in ("lshift", "rshift") and dtype != torch.bool:
        b = torch.cat([b, torch.tensor([0, 1, 7, 8, 15, 16, 31, 33, 63, 64, -1],
                                       dtype=torch.int64).to(dtype)])
        a = torch.cat([a, torch.tensor([1, -1, 3, -8, 5, 1, -1, 1, 1, -3, 9],
                                       dtype=torch.int64).to(dtype)])
    return a, b


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("name,fn", BINARY, ids=[b[0] for b in BINARY])
def test_binary(name, fn, dtype):
    a, b = _binary_inputs(name, dtype)
    check_or_raises(fn, a, b, **tol(dtype, "elementwise", _LOOSE_BIN.get(name, 1)))


@pytest.mark.parametrize("name,fn", BINARY, ids=[b[0] for b in BINARY])
def test_binary_broadcast_and_scalars(name, fn):
    dt = torch.float32 if name not in ("lshift", "rshift", "bitwise_and", "bitwise_or",
                                       "bitwise_xor", "gcd", "lcm") else torch.int32
    low = 1 if name in ("zeta", "igamma", "igammac") else -5
    a = seeded((4, 1, 5), dt, low, 5)
    b = seeded((3, 1), dt, 1, 5, seed=4)
    tols = tol(dt, "elementwise", _LOOSE_BIN.get(name, 1))
    check_or_raises(fn, a, b, **tols)  # broadcast
    check_or_raises(fn, a.transpose(0, 2), b[:1], **tols)  # non-contiguous
    check_or_raises(fn, torch.tensor(3, dtype=dt), torch.tensor(2, dtype=dt), **tols)  # 0-d
    check_or_raises(fn, torch.zeros(0, 5, dtype=dt), b[:1].reshape(1, 1), **tols)  # empty
    if name in _NONZERO:  # integer division broadcasts too (lax.div and lax.rem do not)
        for idt in (torch.int64, torch.int8):
            ai, bi = seeded((4, 1, 5), idt, -9, 9), seeded((3, 1), idt, 1, 5, seed=4)
            check_or_raises(fn, ai, bi)
            check_or_raises(fn, bi, ai.abs() + 1)
            check_or_raises(fn, ai, bi[0, 0])  # 0-d divisor
    # Python scalars on either side (wrapped numbers)
    check_or_raises(lambda x: fn(x, 2), a, **tols)
    if name not in ("isclose", "ldexp", "xlog1py", "zeta", "igamma", "igammac", "nextafter",
                    "heaviside", "gcd", "lcm", "float_power"):
        check_or_raises(lambda x: fn(3, x) if name != "rsub" else fn(x, 3), b, **tols)


PROMO = [b for b in BINARY if b[0] in ("add", "sub", "mul", "div", "pow", "atan2", "maximum",
                                       "minimum", "remainder", "fmod", "copysign", "hypot")]


@pytest.mark.parametrize("name,fn", PROMO, ids=[b[0] for b in PROMO])
def test_binary_promotion(name, fn):
    check_or_raises(fn, seeded((5,), torch.int32, 1, 5), seeded((5,), torch.float16, 1, 3))
    check_or_raises(fn, seeded((5,), torch.int64, 1, 5), torch.tensor(2.5, dtype=torch.float64))
    check_or_raises(fn, seeded((5,), torch.float32, 1, 5), torch.tensor(2.0, dtype=torch.float64))
    check_or_raises(fn, seeded((5,), torch.bfloat16, 1, 5), seeded((5,), torch.float16, 1, 3),
                    atol=1e-2, rtol=1e-2)
    check_or_raises(fn, seeded((5,), torch.uint8, 1, 9), seeded((5,), torch.int8, 1, 5))
    check_or_raises(lambda x: fn(x, 1.5), seeded((5,), torch.int64, 1, 5))
    check_or_raises(lambda x: fn(x, True), seeded((5,), torch.int16, 1, 5))


@pytest.mark.parametrize("name", ["add_", "mul_", "sub_", "div_", "pow_", "remainder_", "fmod_",
                                  "atan2_", "clamp_", "maximum", "lerp_"])
def test_inplace_and_out(name):
    a = seeded((4, 6), torch.float32, 1, 3)
    b = seeded((3,), torch.float32, 1, 3, seed=5)
    if name == "clamp_":
        def f(x, y):
            x[1:, ::2].clamp_(y - 1, y)
            return x
    elif name == "lerp_":
        def f(x, y):
            x[1:, ::2].lerp_(y, 0.3)
            return x
    elif name == "maximum":
        def f(x, y):
            return torch.maximum(x[1:, ::2], y, out=torch.empty(0, device=x.device))
    else:
        def f(x, y):
            getattr(x[1:, ::2], name)(y)
            return x
    check(f, a, b, atol=1e-5, rtol=1e-5)
    # out= with a dtype it can be cast to, and one it can't
    base = name.rstrip("_") if name != "maximum" else name
    if base in ("clamp", "lerp"):
        return
    op = getattr(torch, base)
    b6 = seeded((6,), torch.float32, 1, 3, seed=6)
    check(lambda x, y, o: op(x, y, out=o), a, b6, torch.empty(4, 6, dtype=torch.float64),
          atol=1e-5, rtol=1e-5)
    for dev in ("cpu", DEV):
        with pytest.raises(RuntimeError, match="can't be cast"):
            op(a.to(dev), b6.to(dev), out=torch.empty(4, 6, dtype=torch.int64, device=dev))


def test_inplace_integer_result_error():
    # an in-place op whose result type can't be cast back to self raises like the CPU
    for dev in ("cpu", DEV):
        with pytest.raises(RuntimeError):
            torch.ones(3, dtype=torch.int64, device=dev).div_(torch.ones(3, device=dev) * 2)


# ---------------------------------------------------------------- pow specifics
@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_integer_pow(dtype):
    low = 0 if dtype == torch.uint8 else -4
    base = seeded((40,), dtype, low, 5)
    exp = seeded((40,), dtype, 0 if dtype == torch.uint8 else -3, 8, seed=6)
    check(torch.pow, base, exp)  # negative exponents: 1, -1 or 0 like PyTorch
    check(lambda a: a ** 3, base)
    check(lambda a: a ** 0, base)
    check(lambda a: torch.pow(2, a), exp)
    check(lambda a: torch.pow(-1, a), exp)
    check(lambda a: a ** 2.5, base.abs(), atol=1e-4, rtol=1e-5)


def test_integer_pow_negative_scalar_raises():
    for dev in ("cpu", DEV):
        with pytest.raises(RuntimeError, match="Integers to negative integer powers"):
            torch.pow(torch.tensor([2, 3], device=dev), -1)


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, -1, -2, 0.5, -0.5, 1.7, -2.3, 10, 2.0])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_pow_scalar_exponents(exponent, dtype):
    x = _values(dtype, low=0.1, high=4)
    check(lambda a: a ** exponent, x, **tol(dtype, "elementwise", 2))
    check(lambda a: torch.pow(exponent, a), x, **tol(dtype, "elementwise", 2))


# ---------------------------------------------------------------- ternary, clamp, where
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_clamp(dtype):
    x = _values(dtype)
    lo = seeded((x.numel(),), dtype, -3, 0, seed=7)
    hi = seeded((x.numel(),), dtype, 0, 3, seed=8)
    check(lambda a: a.clamp(-1, 1), x)
    check(lambda a: a.clamp(min=0), x)
    check(lambda a: a.clamp(max=2), x)
    check(lambda a: a.clamp(3, 1), x)  # min > max gives max
    check(lambda a, lo, hi: a.clamp(lo, hi), x, lo, hi)
    check(lambda a, lo: torch.clamp_min(a, lo), x, lo)
    check(lambda a, hi: torch.clamp_max(a, hi), x, hi)
    check(lambda a, lo: torch.clamp(a, min=lo), x, lo)
    if dtype.is_floating_point:  # NaN bounds propagate
        nb = torch.tensor([float("nan")] * x.numel(), dtype=dtype)
        check(lambda a, lo: a.clamp(lo, None), x, nb)
        check(lambda a: a.clamp(-1.5, 0.5), x)  # float bounds on ints promote


@pytest.mark.parametrize("bdtype", [torch.float32, torch.float64, torch.int64, torch.int8],
                         ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.float16], ids=str)
def test_clamp_mixed_rank_tensor_bounds(dtype, bdtype):
    """A 1-d and a 0-d tensor bound of any dtypes promote like CPU (the trace-time dtype
    probe turned a 0-d `Tensor?` bound into a Python number and aten::clamp refused it)."""
    x = seeded((6,), dtype, -4, 4)
    lo = seeded((6,), bdtype, -3, 0, seed=3)
    hi = torch.tensor(2, dtype=bdtype)
    check(lambda a, lo, hi: torch.clamp(a, min=lo, max=hi), x, lo, hi)
    check(lambda a, lo, hi: torch.clamp(a, min=hi, max=lo), x, lo, hi)
    check(lambda a, hi: torch.clamp(a, min=hi), x, hi)


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool], ids=str)
def test_where(dtype):
    x = _values(dtype)
    y = _values(dtype, seed=9)
    c = seeded((x.numel(),), torch.bool)
    check(torch.where, c, x, y)
    check(lambda c, x: torch.where(c, x, 0), c, x)
    check(lambda c, y: torch.where(c, 1.5, y), c, y)
    check(lambda c, x, y: torch.where(c[:, None], x[None, :5], y[:4, None]), c[:4], x, y)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_ternary(dtype):
    x, t1, t2 = seeded((4, 5), dtype), seeded((5,), dtype, seed=1), seeded((4, 1), dtype, 1, 3, 2)
    tols = tol(dtype, "elementwise", 2)
    check(lambda a, b, c: torch.addcmul(a, b, c, value=0.7), x, t1, t2, **tols)
    check(lambda a, b, c: torch.addcdiv(a, b, c, value=-1.3), x, t1, t2, **tols)
    check(lambda a, b: torch.lerp(a, b, 0.3), x, t1, **tols)
    check(lambda a, b: torch.lerp(a, b, 0.8), x, t1, **tols)
    check(lambda a, b, w: torch.lerp(a, b, w), x, t1, torch.rand(4, 5).to(dtype) * 1.5 - 0.2,
          **tols)


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_ternary_int(dtype):
    x, t1, t2 = seeded((4, 5), dtype), seeded((5,), dtype, seed=1), seeded((4, 1), dtype, 1, 3, 2)
    check(lambda a, b, c: torch.addcmul(a, b, c, value=2), x, t1, t2)


# ---------------------------------------------------------------- complex
def test_complex_ops():
    re, im = seeded((4, 5), torch.float32), seeded((5,), torch.float32, seed=1)
    check(torch.complex, re, im)
    check(torch.complex, re.double(), im.double())
    check(torch.polar, re.abs(), im)
    z = torch.complex(re, seeded((4, 5), torch.float32, seed=2))
    for fn in (torch.abs, torch.sgn, torch.angle, torch.exp, torch.log, torch.sqrt, torch.sigmoid,
               torch.tanh, torch.conj_physical, torch.reciprocal, torch.square):
        check(fn, z, atol=1e-5, rtol=1e-5)
    check(lambda a, b: a * b + a / b - a, z, z.flip(0), atol=1e-5, rtol=1e-5)
    check(torch.logaddexp, z, z.flip(1), atol=1e-5, rtol=1e-5)
    check(lambda a: a ** 2, z, atol=1e-5, rtol=1e-5)
    check(lambda a: a.pow(0.5), z, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- gradients
GRAD_UNARY = ["exp", "log", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "sigmoid", "abs", "neg",
              "reciprocal", "square", "erf", "erfc", "erfinv", "lgamma", "digamma", "asin",
              "acos", "atan", "sinh", "cosh", "asinh", "atanh", "expm1", "log1p", "log2",
              "log10", "exp2", "sinc", "i0", "special.i0e", "special.i1", "special.i1e",
              "special.ndtri", "special.log_ndtr", "special.entr", "special.erfcx", "logit",
              "trunc", "floor", "round", "frac", "sign", "sgn", "deg2rad", "angle"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", GRAD_UNARY)
def test_unary_grad(name, dtype):
    fn = _op(name)
    lo, hi = (0.1, 0.9) if name in ("asin", "acos", "atanh", "erfinv", "logit",
                                    "special.ndtri") else (0.2, 3)
    x = seeded((3, 4), dtype, lo, hi).requires_grad_()
    check(fn, x, grad=True, atol=1e-5, rtol=1e-5)


GRAD_BINARY = [
    ("add", lambda a, b: torch.add(a, b, alpha=1.5)), ("sub", lambda a, b: a - b),
    ("mul", lambda a, b: a * b), ("div", lambda a, b: a / b), ("pow", torch.pow),
    ("maximum", torch.maximum), ("minimum", torch.minimum), ("fmax", torch.fmax),
    ("atan2", torch.atan2), ("hypot", torch.hypot), ("logaddexp", torch.logaddexp),
    ("xlogy", torch.xlogy), ("copysign", torch.copysign), ("remainder", torch.remainder),
    ("fmod", torch.fmod), ("where", lambda a, b: torch.where(a > b, a, b * 2)),
    ("clamp", lambda a, b: torch.clamp(a, min=b - 0.5, max=b + 0.5)),
    ("lerp", lambda a, b: torch.lerp(a, b, 0.3)), ("addcmul", lambda a, b: torch.addcmul(
        a, a, b, value=0.5)), ("addcdiv", lambda a, b: torch.addcdiv(a, a, b, value=0.5)),
    ("float_power", torch.float_power), ("logaddexp2", torch.logaddexp2),
    ("xlog1py", torch.special.xlog1py),
]


@pytest.mark.parametrize("name,fn", GRAD_BINARY, ids=[g[0] for g in GRAD_BINARY])
def test_binary_grad(name, fn):
    a = seeded((3, 4), torch.float64, 0.5, 3).requires_grad_()
    b = seeded((4,), torch.float64, 0.5, 3, seed=3).requires_grad_()  # broadcast: grads sum
    check(fn, a, b, grad=True)
    a32 = seeded((3, 4), torch.float32, 0.5, 3).requires_grad_()
    b32 = seeded((3, 4), torch.float32, 0.5, 3, seed=3).requires_grad_()
    check(fn, a32, b32, grad=True, atol=1e-5, rtol=1e-5)


def test_grad_scalar_ops():
    x = seeded((3, 4), torch.float32, 0.5, 3).requires_grad_()
    for fn in (lambda a: a ** 2, lambda a: a ** 0.5, lambda a: a ** -1.5, lambda a: 2 ** a,
               lambda a: a.clamp(1, 2), lambda a: a.clamp(min=1), lambda a: 3 - a,
               lambda a: a / 3, lambda a: torch.abs(a - 1.5), lambda a: a.nan_to_num()):
        check(fn, x, grad=True, atol=1e-5, rtol=1e-5)


def test_grad_half():
    x = seeded((3, 4), torch.bfloat16, 0.5, 3).requires_grad_()
    y = seeded((3, 4), torch.bfloat16, 0.5, 3, seed=1).requires_grad_()
    check(lambda a, b: (a * b).exp() / b, x, y, grad=True, atol=5e-2, rtol=3e-2)


# ---------------------------------------------------------------- Bessel, Airy, polynomials
BESSEL = ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0",
          "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1",
          "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "airy_ai",
          "spherical_bessel_j0"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64], ids=str)
@pytest.mark.parametrize("name", BESSEL)
def test_bessel(name, dtype):
    fn = getattr(torch.special, name)
    x = torch.cat([torch.linspace(-30, 30, 241, dtype=torch.float64),
                   torch.tensor([0.0, 1e-6, 0.3, 1.0, 2.0, 2.09, 5.0, 8.0, 8.33, 24.9, 25.1, 60.0,
                                 103.0, 110.0, -0.3, float("inf"), -float("inf"),
                                 float("nan")], dtype=torch.float64)])
    if dtype == torch.int64:
        x = torch.arange(-20, 21)
    else:
        x = x.to(dtype)
    # PyTorch's own (Cephes) values are good to ~1e-7 here; these are closer to exact
    tol = dict(atol=3e-6, rtol=2e-5) if dtype != torch.float32 else dict(atol=1e-5, rtol=1e-4)
    check_or_raises(fn, x, **tol)


POLY = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
        "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
        "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
        "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
        "laguerre_polynomial_l", "legendre_polynomial_p"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", POLY)
def test_polynomials(name, dtype):
    fn = getattr(torch.special, name)
    xv = torch.tensor([-2.0, -1.0, -0.7, -0.3, 0.0, 0.2, 0.5, 0.9, 1.0, 1.5, 3.0],
                      dtype=torch.float64)
    nv = torch.tensor([-1.0, 0.0, 1.0, 2.0, 3.0, 5.0, 7.0, 9.0, 12.0, 2.7, 600.0],
                      dtype=torch.float64)
    x = xv[:, None].expand(-1, len(nv)).reshape(-1).to(dtype)
    n = nv[None, :].expand(len(xv), -1).reshape(-1).to(dtype)
    tols = tol(dtype, "elementwise", 10)
    check(fn, x, n, **tols)  # a different n per element
    check(lambda a: fn(a, 4), x, **tols)  # Scalar n
    check(lambda a: fn(a, 11), xv.to(dtype), **tols)
    check(lambda nn: fn(0.4, nn), nv.to(dtype), **tols)  # Scalar x
    check(fn, torch.zeros(0, dtype=dtype), torch.zeros(0, dtype=dtype))
    check(fn, x, torch.tensor([3, 1, 0, 7]).repeat(31)[:x.numel()], **tols)  # integer n


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_mul_div_by_python_scalar_bit_exact(dtype):
    # CPU multiplies/divides by the scalar's float32 value (not the scalar rounded to the
    # half dtype first): bit-exact agreement is expected
    x = (torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    for f in (lambda a: a * 0.1, lambda a: 0.3 * a, lambda a: a / 3.3, lambda a: 1.7 / a):
        assert torch.equal(f(x.to(DEV)).cpu(), f(x))


OUT_DTYPE_ROWS = [
    ("neg_f64_into_c64", torch.neg, (torch.float64,), torch.complex64),  # Found dtype ...
    ("neg_i32_into_i64", torch.neg, (torch.int32,), torch.int64),
    ("abs_c64_into_c64", torch.abs, (torch.complex64,), torch.complex64),
    ("abs_c64_into_f32", torch.abs, (torch.complex64,), torch.float32),
    ("sin_i64_into_i64", torch.sin, (torch.int64,), torch.int64),
    ("sin_i64_into_f64", torch.sin, (torch.int64,), torch.float64),
    ("exp_f64_into_c128", torch.exp, (torch.float64,), torch.complex128),
    ("add_f64_into_i64", torch.add, (torch.float64, torch.float64), torch.int64),
    ("add_i32_into_f16", torch.add, (torch.int32, torch.int32), torch.float16),
    ("mul_f32_into_bool", torch.mul, (torch.float32, torch.float32), torch.bool),
    ("bitwise_and_i8_into_bool", torch.bitwise_and, (torch.int8, torch.int8), torch.bool),
    ("where_into_i64", lambda c, out: torch.where(c > 0, c, c, out=out), (torch.float32,),
     torch.int64),
]


@pytest.mark.parametrize("name,fn,dts,odt", OUT_DTYPE_ROWS, ids=[r[0] for r in OUT_DTYPE_ROWS])
def test_out_dtype_checked_like_cpu(name, fn, dts, odt):
    """out= takes what CPU's out= kernel takes for these dtypes and refuses the rest with
    its message (was: anything can_cast allowed, e.g. neg(float64, out=complex64))."""
    args = [seeded((2, 3), dt, 1, 4, seed=i) for i, dt in enumerate(dts)]
    check_or_raises(lambda *a: fn(*a[:-1], out=a[-1]), *args, torch.zeros((2, 3), dtype=odt),
                    exact=True)


_POW_PARTS = [-3, -2, -1, -0.5, -0.25, -0.1, -0.001, -0.0, 0.0, 0.001, 0.1, 0.25, 0.5, 1, 2, 3]
_POW_SPECIAL = [-float("inf"), -2, -0.5, -0.0, 0.0, 1e-30, 0.5, 1, 3, float("inf"),
                float("nan")]


def _complex_grid(parts, dtype):
    v = torch.tensor(parts, dtype=torch.float64)
    n = v.numel()
    z = torch.complex(v[:, None].expand(n, n), v[None, :].expand(n, n)).reshape(-1).to(dtype)
    m = z.numel()
    return (z[:, None].expand(m, m).reshape(-1).contiguous(),
            z[None, :].expand(m, m).reshape(-1).contiguous())


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_pow_matches_cpu_cpow(dtype):
    """Complex pow is glibc's cpow on CPU, cexp(y * clog(x)) with Annex G products and
    its special cases: 0 ** (0.001-0.001j) is 0 (was NaN), 0 ** 0 is NaN in complex128.
    Every pair of a 256-value grid of small values (65,536 pairs; 458 differed), the
    Tensor_Scalar and Scalar overloads, and for complex128 infinities and NaN too."""
    x, y = _complex_grid(_POW_PARTS, dtype)
    check(torch.pow, x, y)
    z = x[::256].clone()
    for e in (0.001 - 0.001j, 2.5, -1.5, 1j, 0.5):
        check(lambda a, e=e: torch.pow(a, e), z)
    check(lambda b: torch.pow(2 + 1j, b), z)
    zero = torch.zeros((), dtype=dtype)
    check(torch.pow, zero, torch.tensor(0.001 - 0.001j, dtype=dtype))
    if dtype == torch.complex128:
        xs, ys = _complex_grid(_POW_SPECIAL, dtype)
        check(torch.pow, xs, ys)

import pytest
import torch

from helpers import check

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.bfloat16, torch.float16]


def _rand(shape, dtype, low=-5, high=5):
    if dtype.is_floating_point:
        return (torch.rand(shape, dtype=torch.float64) * (high - low) + low).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    return torch.randint(low, high, shape, dtype=dtype)


BINARY = [
    ("add", lambda a, b: a + b),
    ("add_alpha", lambda a, b: torch.add(a, b, alpha=2)),
    ("sub", lambda a, b: a - b),
    ("mul", lambda a, b: a * b),
    ("maximum", torch.maximum),
    ("minimum", torch.minimum),
    ("eq", torch.eq), ("ne", torch.ne), ("lt", torch.lt), ("le", torch.le), ("gt", torch.gt), ("ge", torch.ge),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name,fn", BINARY, ids=[b[0] for b in BINARY])
def test_binary(name, fn, dtype):
    a, b = _rand((4, 5), dtype), _rand((5,), dtype)
    check(fn, a, b)


SCALAR_OK = [b for b in BINARY if b[0] not in ("maximum", "minimum")]


@pytest.mark.parametrize("name,fn", SCALAR_OK, ids=[b[0] for b in SCALAR_OK])
def test_binary_scalar(name, fn):
    a = _rand((3, 4), torch.float32)
    check(lambda x: fn(x, 2.5), a)
    check(lambda x: fn(x, 2), _rand((3, 4), torch.int32))


def test_promotion():
    check(lambda a, b: a + b, _rand((3,), torch.int32), _rand((3,), torch.float16))
    check(lambda a: a * 1.5, _rand((3,), torch.int64))
    check(lambda a, b: a + b, _rand((3,), torch.float32), torch.tensor(2.0, dtype=torch.float64))
    check(lambda a, b: a / b, _rand((3,), torch.int64), _rand((3,), torch.int64, 1, 5))


UNARY = ["exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "abs", "neg", "floor", "ceil",
         "round", "trunc", "reciprocal", "rsqrt", "expm1", "log1p", "erf", "sign"]


@pytest.mark.parametrize("name", UNARY)
def test_unary(name):
    x = _rand((6, 7), torch.float32, 0.1, 4)
    check(getattr(torch, name), x, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["add_", "mul_", "sub_", "div_"])
def test_inplace_on_view(name):
    def f(a, b):
        getattr(a[1:, ::2], name)(b)
        return a

    check(f, _rand((4, 6), torch.float32), _rand((3,), torch.float32, 1, 3))


def test_where_clamp():
    x = _rand((5, 5), torch.float32)
    check(lambda x: torch.where(x > 0, x, -x), x)
    check(lambda x: x.clamp(-1, 1), x)
    check(lambda x: x.clamp(min=0.5), x)


def test_div_modes():
    a = _rand((20,), torch.float32)
    b = _rand((20,), torch.float32, 1, 3)
    check(lambda a, b: torch.div(a, b, rounding_mode="floor"), a, b)
    check(lambda a, b: torch.div(a, b, rounding_mode="trunc"), a, b)
    ai = _rand((20,), torch.int64)
    bi = _rand((20,), torch.int64, 1, 4)
    check(lambda a, b: torch.div(a, b, rounding_mode="floor"), ai, bi)
    check(lambda a, b: torch.remainder(a, b), ai, -bi)
    check(lambda a, b: torch.remainder(a, b), a, -b, atol=1e-5, rtol=1e-5)

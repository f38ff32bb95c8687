"""FP8 `torch._scaled_mm` and int8 `torch._int_mm` on the device, natively, against the CPU.

The CPU kernel defines the numbers: fp8 inputs widened to float32 and scaled (tensor-wise
or row-wise), one float32 product, the bias added, fp8 results divided by scale_result,
one rounding to the result type.  Results are compared bit for bit where the product is
exact in float32 (small fp8 values), else at float32 matmul tolerance before the final
rounding.
"""
from __future__ import annotations

import pytest
import torch

from helpers import DEV, assert_same, native_only, raises_like, to_dev

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


@pytest.fixture(autouse=True)
def _cpu_reference_kernel():
    """PyTorch's CPU `_scaled_mm` takes a oneDNN path on CPUs with AMX (different numerics,
    errors, and garbage for an empty inner dimension) and its reference emulation elsewhere:
    the CPU reference is the emulation on every machine."""
    with torch.backends.mkldnn.flags(enabled=False):
        yield
FNUZ = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)


def _fp8(shape, dtype, seed, scale=4.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype)


def _run(fn, *args, **kwargs):
    """fn on the CPU and on device copies (no fallback allowed); both results on the CPU."""
    expected = fn(*args, **kwargs)
    with native_only():
        actual = fn(*to_dev(args), **to_dev(kwargs))
    assert actual.device.type == "neuron"
    return actual.cpu(), expected


def _same_bits(actual, expected):
    """Bit-equal, except float32 results: the CPU's float32 product is MKL's sgemm, whose
    summation order follows the CPU's vector width (bit-equal to ours on AVX2 machines,
    within 1e-6 relative on AVX-512 ones); narrower outputs round that difference away."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    if expected.dtype.itemsize == 1 and expected.dtype.is_floating_point:
        assert torch.equal(actual.view(torch.uint8), expected.view(torch.uint8))
    elif expected.dtype == torch.float32:
        scale = expected.abs().max().item() if expected.numel() else 0.0
        assert_same(actual, expected, atol=1e-6 * scale, rtol=1e-6)
    else:
        assert_same(actual, expected, atol=0, rtol=0)


OUT_DTYPES = [None, torch.float32, torch.bfloat16, torch.float16, E4M3, E5M2]


@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("a_dt,b_dt", [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3)], ids=str)
def test_scaled_mm_tensorwise(a_dt, b_dt, out_dtype):
    a = _fp8((32, 64), a_dt, 0)
    b = _fp8((48, 64), b_dt, 1).t()  # column-major, as CUDA wants it
    actual, expected = _run(torch._scaled_mm, a, b, torch.tensor(0.25), torch.tensor(1.5),
                            out_dtype=out_dtype)
    _same_bits(actual, expected)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16], ids=str)
def test_scaled_mm_rowwise(out_dtype):
    a = _fp8((16, 32), E4M3, 2)
    b = _fp8((32, 24), E4M3, 3)
    g = torch.Generator().manual_seed(4)
    sa, sb = torch.rand(16, 1, generator=g) + 0.5, torch.rand(1, 24, generator=g) + 0.5
    try:
        expected = torch._scaled_mm(a, b, sa, sb, out_dtype=out_dtype)
    except RuntimeError:  # torch 2.11's CPU kernel is tensor-wise only: its formula
        expected = ((a.float() * sa) @ (b.float() * sb)).to(out_dtype)
    with native_only():
        actual = torch._scaled_mm(*to_dev((a, b, sa, sb)), out_dtype=out_dtype).cpu()
    assert_same(actual, expected, atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize("bias_dtype", [torch.float32, torch.bfloat16, torch.float16,
                                        torch.float64, torch.int64], ids=str)
@pytest.mark.parametrize("bias_shape", [(24,), (1, 24)], ids=str)
def test_scaled_mm_bias(bias_dtype, bias_shape):
    a, b = _fp8((16, 32), E4M3, 5), _fp8((32, 24), E4M3, 6)
    bias = (torch.randn(bias_shape, generator=torch.Generator().manual_seed(7)) * 8).to(bias_dtype)
    for out_dtype in (torch.float32, torch.bfloat16):
        actual, expected = _run(torch._scaled_mm, a, b, torch.tensor(0.5), torch.tensor(2.0),
                                bias=bias, out_dtype=out_dtype)
        _same_bits(actual, expected)


@pytest.mark.parametrize("out_dtype", [None, E4M3, E5M2, torch.float32], ids=str)
def test_scaled_mm_scale_result(out_dtype):
    # CPU divides by scale_result only for an explicit e4m3fn/e5m2 out_dtype
    a, b = _fp8((16, 32), E4M3, 8, scale=1.0), _fp8((32, 16), E4M3, 9, scale=1.0)
    actual, expected = _run(torch._scaled_mm, a, b, torch.tensor(1.0), torch.tensor(1.0),
                            scale_result=torch.tensor(8.0), out_dtype=out_dtype)
    _same_bits(actual, expected)


def test_scaled_mm_values_are_the_scaled_product():
    """Independent of the CPU kernel: small integers are exact in fp8 and float32."""
    a = torch.randint(-4, 5, (16, 32)).to(E4M3)
    b = torch.randint(-4, 5, (32, 16)).to(E4M3)
    with native_only():
        r = torch._scaled_mm(a.to(DEV), b.to(DEV), torch.tensor(0.5, device=DEV),
                             torch.tensor(4.0, device=DEV), out_dtype=torch.float32).cpu()
    assert torch.equal(r, (a.float() @ b.float()) * 2.0)


@pytest.mark.parametrize("shape", [(16, 0, 24), (0, 32, 24), (16, 32, 0)], ids=str)
def test_scaled_mm_empty(shape):
    m, k, n = shape
    actual, expected = _run(torch._scaled_mm, _fp8((m, k), E4M3, 0), _fp8((k, n), E4M3, 1),
                            torch.tensor(1.0), torch.tensor(1.0), out_dtype=torch.float32)
    _same_bits(actual, expected)


def test_scaled_mm_any_layout_and_size():
    """No CUDA alignment rules (sizes not divisible by 16, a column-major a): as CPU."""
    a = _fp8((20, 36), E4M3, 3).t().contiguous().t()
    b = _fp8((36, 10), E5M2, 4)
    actual, expected = _run(torch._scaled_mm, a, b, torch.tensor(1.0), torch.tensor(1.0),
                            out_dtype=torch.float32)
    _same_bits(actual, expected)


@pytest.mark.parametrize("dtype", FNUZ, ids=str)
def test_scaled_mm_fnuz(dtype):
    a, b = _fp8((16, 32), dtype, 0), _fp8((32, 16), dtype, 1)
    actual, expected = _run(torch._scaled_mm, a, b, torch.tensor(1.0), torch.tensor(0.5),
                            out_dtype=torch.float32)
    _same_bits(actual, expected)


def test_scaled_mm_out():
    a, b = _fp8((16, 32), E4M3, 0), _fp8((32, 24), E4M3, 1)
    sa, sb = torch.tensor(1.0), torch.tensor(2.0)
    out = torch.empty(3, dtype=torch.bfloat16)
    expected = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, out=out)
    dout = torch.empty(3, dtype=torch.bfloat16, device=DEV)
    with native_only():
        actual = torch._scaled_mm(*to_dev((a, b, sa, sb)), out_dtype=torch.bfloat16, out=dout)
    assert actual is dout
    _same_bits(dout.cpu(), expected)


_A, _B = _fp8((16, 32), E4M3, 0), _fp8((32, 24), E4M3, 1)
_ONE = torch.tensor(1.0)
BAD = {
    "float64 scale": dict(scale_a=_ONE.double()),
    "tensor-wise with row-wise": dict(scale_b=torch.ones(1, 24)),
    "row-wise scale_a not unit stride": dict(scale_a=torch.ones(1, 16).t(),
                                             scale_b=torch.ones(1, 24)),
    "row-wise scale_b wrong shape": dict(scale_a=torch.ones(16, 1), scale_b=torch.ones(24)),
    "inner sizes": dict(b=_fp8((31, 24), E4M3, 1)),
    "bias size": dict(bias=torch.ones(23)),
    "bias broadcast": dict(bias=torch.ones(24, 1)),
    "bias rank": dict(bias=torch.ones(1, 1, 24)),
    "scale_result dtype": dict(scale_result=_ONE.double()),
    "3-d input": dict(a=_A[None]),
    "float32 input": dict(a=_A.float()),
    "out dtype": dict(out=torch.empty(16, 24), out_dtype=torch.bfloat16),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_scaled_mm_errors(case):
    kw = dict(a=_A, b=_B, scale_a=_ONE, scale_b=_ONE, out_dtype=torch.float32)
    kw.update(BAD[case])

    def call(args):
        args = dict(args)
        return torch._scaled_mm(args.pop("a"), args.pop("b"), args.pop("scale_a"),
                                args.pop("scale_b"), **args)

    raises_like(lambda: call(kw), lambda: call(to_dev(kw)))


def test_scaled_mm_compiled():
    a, b = _fp8((32, 64), E4M3, 0), _fp8((64, 48), E4M3, 1)
    sa, sb = torch.tensor(0.5), torch.tensor(0.25)
    bias = torch.randn(48, dtype=torch.bfloat16)

    def f(a, b, sa, sb, bias):
        return torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16).relu()

    expected = f(a, b, sa, sb, bias)
    torch._dynamo.reset()
    with native_only():
        actual = torch.compile(f, backend="neuron")(*to_dev((a, b, sa, sb, bias))).cpu()
    _same_bits(actual, expected)


# ---------------------------------------------------------------- _int_mm
@pytest.mark.parametrize("a_dt", [torch.int8, torch.uint8], ids=str)
@pytest.mark.parametrize("shape", [(32, 64, 16), (17, 63, 5), (1, 1, 1), (4, 0, 3)], ids=str)
def test_int_mm(a_dt, shape):
    m, k, n = shape
    g = torch.Generator().manual_seed(0)
    lo = 0 if a_dt == torch.uint8 else -128
    a = torch.randint(lo, lo + 256, (m, k), generator=g).to(a_dt)
    b = torch.randint(-128, 128, (k, n), generator=g).to(torch.int8)
    actual, expected = _run(torch._int_mm, a, b)
    _same_bits(actual, expected)
    assert torch.equal(actual.long(), a.long() @ b.long())


def test_int_mm_transposed_and_compiled():
    g = torch.Generator().manual_seed(1)
    a = torch.randint(-128, 128, (24, 32), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (16, 32), generator=g, dtype=torch.int8).t()
    actual, expected = _run(torch._int_mm, a, b)
    _same_bits(actual, expected)
    torch._dynamo.reset()
    with native_only():
        c = torch.compile(lambda x, y: torch._int_mm(x, y) * 2, backend="neuron")(*to_dev((a, b)))
    _same_bits(c.cpu(), expected * 2)


@pytest.mark.parametrize("case", ["float input", "uint8 mat2", "inner sizes", "3-d"])
def test_int_mm_errors(case):
    a = torch.zeros(8, 16, dtype=torch.int8)
    b = torch.zeros(16, 4, dtype=torch.int8)
    args = {"float input": (a.float(), b), "uint8 mat2": (a, b.to(torch.uint8)),
            "inner sizes": (a, b[:8]), "3-d": (a[None], b)}[case]
    # the device's message is PyTorch's meta kernel's (CUDA's wording differs from CPU's
    # "int_mm_out_cpu: ..." too); the type is the same
    raises_like(lambda: torch._int_mm(*args), lambda: torch._int_mm(*to_dev(args)), exact=False)

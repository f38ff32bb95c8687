"""Factories, *_like / new_* methods, host<->device construction and dtype conversions,
compared with PyTorch's CPU results (natively: fallback policy "error")."""
import math

import numpy as np
import pytest
import torch

from helpers import DEV, assert_same, check, native_only, raises_like


def same(fn, atol=None, rtol=None, check_stride=False):
    """fn(device) on CPU and on the neuron device give the same tensor (or the same error)."""
    try:
        expected = fn(torch.device("cpu"))
    except Exception as e:  # noqa: BLE001
        raises_like(None, lambda: fn(DEV), expected=e)
        return None
    with native_only():
        actual = fn(DEV)
    if isinstance(actual, torch.Tensor):
        assert actual.device.type == "neuron"
    assert_same(actual, expected, atol, rtol, check_stride=check_stride)
    return actual


def ulp_close(actual, expected, ulps=1, scale=None):
    """Within `ulps` units in the last place of the expected value (or of `scale`, the
    largest magnitude involved, where CPU's blocked kernels round a far base value)."""
    a, e = actual.cpu().double(), expected.double()
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    fi = torch.finfo(expected.dtype)
    mag = e.abs() if scale is None else torch.full_like(e, float(scale))
    spacing = torch.clamp(mag, min=fi.tiny) * fi.eps
    assert ((a - e).abs() <= ulps * spacing).all(), (a - e).abs().max()


FACTORIES = [
    ("zeros", lambda d: torch.zeros(2, 3, device=d)),
    ("zeros_0d", lambda d: torch.zeros((), device=d)),
    ("zeros_empty", lambda d: torch.zeros(0, 4, device=d)),
    ("zeros_int", lambda d: torch.zeros(4, dtype=torch.int32, device=d)),
    ("zeros_c64", lambda d: torch.zeros(3, dtype=torch.complex64, device=d)),
    ("ones", lambda d: torch.ones(2, 3, device=d)),
    ("ones_bool", lambda d: torch.ones(5, dtype=torch.bool, device=d)),
    ("ones_c128", lambda d: torch.ones(2, dtype=torch.complex128, device=d)),
    ("ones_bf16", lambda d: torch.ones(2, 2, dtype=torch.bfloat16, device=d)),
    ("full_int", lambda d: torch.full((2, 3), 7, device=d)),
    ("full_float", lambda d: torch.full((2, 3), 1.5, device=d)),
    ("full_bool", lambda d: torch.full((3,), True, device=d)),
    ("full_complex", lambda d: torch.full((2,), 1 + 2j, device=d)),
    ("full_trunc", lambda d: torch.full((2,), 3.7, dtype=torch.int32, device=d)),
    ("full_neg_uint8", lambda d: torch.full((2,), -1, dtype=torch.uint8, device=d)),
    ("full_f16", lambda d: torch.full((2,), 1 / 3, dtype=torch.float16, device=d)),
    ("full_inf_f16", lambda d: torch.full((2,), float("inf"), dtype=torch.float16, device=d)),
    ("full_nan", lambda d: torch.full((2,), float("nan"), device=d)),
    ("full_0d", lambda d: torch.full((), 2.5, device=d)),
    ("full_int64_max", lambda d: torch.full((2,), 2**63 - 1, device=d)),
    ("scalar_tensor", lambda d: torch.scalar_tensor(3.5, device=d)),
    ("scalar_tensor_int", lambda d: torch.scalar_tensor(3, dtype=torch.int64, device=d)),
    ("scalar_tensor_bool", lambda d: torch.scalar_tensor(True, device=d)),
    ("eye", lambda d: torch.eye(3, device=d)),
    ("eye_rect", lambda d: torch.eye(3, 5, dtype=torch.int32, device=d)),
    ("eye_tall", lambda d: torch.eye(5, 2, device=d)),
    ("eye_bool", lambda d: torch.eye(4, dtype=torch.bool, device=d)),
    ("eye_complex", lambda d: torch.eye(2, dtype=torch.complex64, device=d)),
    ("eye_0", lambda d: torch.eye(0, device=d)),
    ("tril_indices", lambda d: torch.tril_indices(4, 3, device=d)),
    ("tril_indices_off", lambda d: torch.tril_indices(4, 6, 2, device=d)),
    ("tril_indices_neg", lambda d: torch.tril_indices(5, 5, -2, device=d, dtype=torch.int32)),
    ("triu_indices", lambda d: torch.triu_indices(4, 5, 1, device=d)),
    ("triu_indices_neg", lambda d: torch.triu_indices(3, 3, -1, device=d)),
    ("triu_indices_empty", lambda d: torch.triu_indices(0, 3, device=d)),
    ("tril_indices_big_off", lambda d: torch.tril_indices(3, 3, 10, device=d)),
    # errors with PyTorch's wording
    ("full_overflow_uint8", lambda d: torch.full((2,), 300, dtype=torch.uint8, device=d)),
    ("full_overflow_int8", lambda d: torch.full((2,), -129, dtype=torch.int8, device=d)),
    ("full_overflow_f16", lambda d: torch.full((2,), 1e6, dtype=torch.float16, device=d)),
    ("full_nan_int", lambda d: torch.full((2,), float("nan"), dtype=torch.int32, device=d)),
    ("full_complex_to_real", lambda d: torch.full((2,), 1 + 1j, dtype=torch.float32, device=d)),
    ("full_negative_size", lambda d: torch.full((-1,), 1.0, device=d)),
    ("zeros_negative_size", lambda d: torch.zeros(2, -3, device=d)),
    ("scalar_tensor_overflow", lambda d: torch.scalar_tensor(1000, dtype=torch.int8, device=d)),
    ("eye_negative", lambda d: torch.eye(-1, device=d)),
    ("tril_indices_neg_row", lambda d: torch.tril_indices(-1, 3, device=d)),
]


@pytest.mark.parametrize("name,fn", FACTORIES, ids=[f[0] for f in FACTORIES])
def test_factories(name, fn):
    same(fn)


def test_empty():
    with native_only():
        for dt in (torch.float32, torch.int64, torch.bool, torch.complex64, torch.bfloat16):
            x = torch.empty(2, 3, dtype=dt, device=DEV)
            assert x.shape == (2, 3) and x.dtype == dt and x.device.type == "neuron"
        y = torch.empty_strided((2, 3), (1, 2), device=DEV)
        assert y.stride() == (1, 2)
        z = torch.empty(2, 3, 4, 5, device=DEV, memory_format=torch.channels_last)
        assert z.stride() == torch.empty(2, 3, 4, 5, memory_format=torch.channels_last).stride()


# ---------------------------------------------------------------- arange
ARANGE = [
    ("int", lambda d: torch.arange(10, device=d)),
    ("start_end", lambda d: torch.arange(-3, 7, device=d)),
    ("int_step", lambda d: torch.arange(1, 20, 3, device=d)),
    ("neg_int_step", lambda d: torch.arange(10, 0, -3, device=d)),
    ("float_end", lambda d: torch.arange(5.0, device=d)),
    ("float_step", lambda d: torch.arange(0, 1, 0.25, device=d)),
    ("neg_float_step", lambda d: torch.arange(5, -3, -0.5, device=d)),
    ("dtype_int32", lambda d: torch.arange(0, 9, 2, dtype=torch.int32, device=d)),
    ("dtype_uint8", lambda d: torch.arange(0, 200, 7, dtype=torch.uint8, device=d)),
    ("dtype_f64", lambda d: torch.arange(0.5, 4, dtype=torch.float64, device=d)),
    ("dtype_f16", lambda d: torch.arange(0, 8, 0.5, dtype=torch.float16, device=d)),
    ("dtype_bf16", lambda d: torch.arange(0, 300, 1, dtype=torch.bfloat16, device=d)),
    ("big_int64", lambda d: torch.arange(2**40, 2**40 + 5, device=d)),
    ("tensor_args", lambda d: torch.arange(torch.tensor(2), torch.tensor(9), device=d)),
    ("empty", lambda d: torch.arange(3, 3, device=d)),
    ("out", lambda d: torch.arange(0, 6, out=torch.empty(6, dtype=torch.int64, device=d))),
    # errors
    ("bad_sign", lambda d: torch.arange(0, 10, -1, device=d)),
    ("zero_step", lambda d: torch.arange(0, 10, 0, device=d)),
    ("inf", lambda d: torch.arange(0, float("inf"), device=d)),
]


@pytest.fixture
def fill_uninitialized():
    """torch.use_deterministic_algorithms(True) with fill_uninitialized_memory, restored."""
    det = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(det, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill


ALL_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
              torch.complex128]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_deterministic_empty_is_filled_like_cpu(dtype, fill_uninitialized):
    """NaN for floating/complex, the max for integers, True for bool (was: zeros)."""
    base = torch.zeros(2, dtype=dtype)
    for fn in (lambda d: torch.empty(2, 3, dtype=dtype, device=d),
               lambda d: torch.empty_strided((2, 3), (1, 2), dtype=dtype, device=d),
               lambda d: torch.empty_like(base.to(d)),
               lambda d: base.to(d).new_empty((4,))):
        expected = fn("cpu")
        with native_only():
            actual = fn(DEV)
        assert_same(actual, expected)  # NaN == NaN here


@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.bool, torch.complex64],
                         ids=str)
@pytest.mark.parametrize("size,stride,new", [
    ((10,), (1,), (5,)), ((10,), (0,), (10,)), ((10,), (1,), (20,)), ((2, 3, 4), None, (3, 4, 5)),
    ((2, 3, 4), (1, 4, 12), (4, 3, 4)), ((2, 3, 4), (1, 0, 1), (2, 4, 5))])
def test_deterministic_resize_fills_the_new_storage(dtype, size, stride, new,
                                                   fill_uninitialized):
    """PyTorch's test_deterministic_resize: the grown part of the storage is filled, the
    old part kept; an overlapping (stride 0) tensor can be fill_-ed (was: raised)."""
    def prog(d):
        if stride is None:
            a = torch.zeros(size, dtype=dtype, device=d)
        else:
            a = torch.empty_strided(size, stride, dtype=dtype, device=d).fill_(0)
        old = torch.tensor(a.untyped_storage().clone().cpu(), dtype=dtype)
        a.resize_(new)
        grown = torch.tensor(a.untyped_storage().cpu(), dtype=dtype)
        n = min(old.numel(), grown.numel())
        # the old bytes are kept (gaps of a strided tensor hold garbage on CPU: compare
        # them per device); the grown part is filled and compared with CPU's
        kept = torch.equal(grown[:n].view(torch.uint8), old[:n].view(torch.uint8))
        return old.numel(), grown.numel(), kept, grown[n:], a.shape, a.stride()

    expected = prog("cpu")
    with native_only():
        actual = prog(DEV)
    assert_same(actual, expected)


@pytest.mark.parametrize("name,fn", ARANGE, ids=[a[0] for a in ARANGE])
def test_arange(name, fn):
    same(fn)


def test_arange_int64_step_truncating_to_zero():
    # int64 truncates the arguments first, so step 0.5 becomes 0: torch 2.13's CPU raises
    # ValueError; torch 2.11's CPU kernel dies of SIGFPE (so it is not run there)
    if torch.torch_version.TorchVersion(torch.__version__) >= (2, 14):
        # torch >= 2.14's CPU: the length from the untruncated step, values start + 0 * i
        with native_only():
            assert_same(torch.arange(0, 5, 0.5, dtype=torch.int64, device=DEV),
                        torch.arange(0, 5, 0.5, dtype=torch.int64))
    else:
        if torch.torch_version.TorchVersion(torch.__version__) >= (2, 13):
            with pytest.raises(ValueError, match="step must be nonzero"):
                torch.arange(0, 5, 0.5, dtype=torch.int64)
        with native_only(), pytest.raises(ValueError, match="step must be nonzero"):
            torch.arange(0, 5, 0.5, dtype=torch.int64, device=DEV)
    with native_only():  # a step that does not truncate to 0 still works
        assert_same(torch.arange(0, 5, 1.5, dtype=torch.int64, device=DEV),
                    torch.arange(0, 5, 1.5, dtype=torch.int64))


def test_arange_dtype_inference():
    with native_only():
        assert torch.arange(5, device=DEV).dtype == torch.int64
        assert torch.arange(5.0, device=DEV).dtype == torch.float32
        assert torch.arange(0, 5, 1.0, device=DEV).dtype == torch.float32
        torch.set_default_dtype(torch.float64)
        try:
            assert torch.arange(0, 1, 0.1, device=DEV).dtype == torch.float64
            same(lambda d: torch.arange(0, 1, 0.1, device=d))
        finally:
            torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("dtype,start,end,step", [
    (torch.float32, -1e3, 1e3, 0.37), (torch.float32, 0.1, 50, 0.013),
    (torch.float16, 0, 100, 0.3), (torch.bfloat16, -20, 20, 0.7), (torch.float64, -1, 1, 1e-4)])
def test_arange_float_steps(dtype, start, end, step):
    """CPU's vectorized kernel rounds blocks of elements differently (and differently on AVX2
    and AVX512 machines); the device gives start + i*step correctly rounded: within 1 ulp."""
    e = torch.arange(start, end, step, dtype=dtype)
    with native_only():
        a = torch.arange(start, end, step, dtype=dtype, device=DEV)
    ulp_close(a, e, 1, scale=max(abs(start), abs(end)))


# ---------------------------------------------------------------- linspace / logspace
LINSPACE = [
    ("basic", lambda d: torch.linspace(0, 1, 7, device=d)),
    ("neg", lambda d: torch.linspace(3, -2, 5, device=d)),
    ("f64", lambda d: torch.linspace(-1, 1, 7, dtype=torch.float64, device=d)),
    ("f16", lambda d: torch.linspace(-3, 5, 11, dtype=torch.float16, device=d)),
    ("bf16", lambda d: torch.linspace(-3, 5, 11, dtype=torch.bfloat16, device=d)),
    ("int", lambda d: torch.linspace(0, 10, 7, dtype=torch.int64, device=d)),
    ("int_neg", lambda d: torch.linspace(-10, 10, 6, dtype=torch.int32, device=d)),
    ("int_frac_ends", lambda d: torch.linspace(0.7, 9.9, 5, dtype=torch.int64, device=d)),
    ("uint8", lambda d: torch.linspace(0, 255, 4, dtype=torch.uint8, device=d)),
    ("complex", lambda d: torch.linspace(0, 1 + 1j, 3, device=d)),
    ("complex128", lambda d: torch.linspace(-1j, 2 + 1j, 3, dtype=torch.complex128, device=d)),
    ("one", lambda d: torch.linspace(3, 5, 1, device=d)),
    ("zero", lambda d: torch.linspace(3, 5, 0, device=d)),
    ("tensor_ends", lambda d: torch.linspace(torch.tensor(1.0), torch.tensor(3.0), 5, device=d)),
    ("tensor_start", lambda d: torch.linspace(torch.tensor(-2.0), 3.0, 6, device=d)),
    ("negative_steps", lambda d: torch.linspace(0, 1, -1, device=d)),
    ("logspace", lambda d: torch.logspace(0, 2, 5, device=d)),
    ("logspace_base2", lambda d: torch.logspace(0, 10, 11, base=2, device=d)),
    ("logspace_int", lambda d: torch.logspace(0, 3, 4, dtype=torch.int64, device=d)),
    ("logspace_f64", lambda d: torch.logspace(-2, 2, 9, device=d, dtype=torch.float64)),
    ("logspace_one", lambda d: torch.logspace(2, 3, 1, device=d)),
    ("logspace_f16", lambda d: torch.logspace(-1, 1, 5, dtype=torch.float16, device=d)),
]


@pytest.mark.parametrize("name,fn", LINSPACE, ids=[a[0] for a in LINSPACE])
def test_linspace_logspace(name, fn):
    same(fn)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_linspace_large(dtype):
    """Large outputs: CPU's vectorized path rounds in blocks; within 2 ulps."""
    e = torch.linspace(-7.3, 11.1, 1001, dtype=dtype)
    with native_only():
        a = torch.linspace(-7.3, 11.1, 1001, dtype=dtype, device=DEV)
    ulp_close(a, e, 2, scale=11.1)


# ---------------------------------------------------------------- *_like and new_*
def _base(d, dtype=torch.float32):
    return torch.arange(12, dtype=dtype).reshape(3, 4).to(d)


LIKE = [
    ("zeros_like", lambda d: torch.zeros_like(_base(d))),
    ("ones_like_int", lambda d: torch.ones_like(_base(d, torch.int16))),
    ("ones_like_t", lambda d: torch.ones_like(_base(d).t())),
    ("full_like", lambda d: torch.full_like(_base(d), 4)),
    ("full_like_dtype", lambda d: torch.full_like(_base(d), 4.6, dtype=torch.int8)),
    ("full_like_overflow", lambda d: torch.full_like(_base(d, torch.uint8), 256)),
    ("zeros_like_dtype", lambda d: torch.zeros_like(_base(d), dtype=torch.complex64)),
    ("new_full", lambda d: _base(d).new_full((3,), 2)),
    ("new_zeros", lambda d: _base(d, torch.int32).new_zeros((3, 2))),
    ("new_ones", lambda d: _base(d).new_ones(3, dtype=torch.float64)),
    ("new_tensor", lambda d: _base(d).new_tensor([1, 2, 3])),
    ("new_tensor_f", lambda d: _base(d, torch.int64).new_tensor([1.5, 2.5])),
    ("tensor_2d", lambda d: torch.tensor([[1, 2], [3, 4]], device=d)),
    ("tensor_float", lambda d: torch.tensor([1.5, 2], device=d)),
    ("tensor_complex", lambda d: torch.tensor([1 + 2j, -1j], device=d)),
    ("tensor_bool", lambda d: torch.tensor([True, False], device=d)),
    ("tensor_0d", lambda d: torch.tensor(3.0, device=d)),
    ("tensor_dtype", lambda d: torch.tensor([1, 2], dtype=torch.float16, device=d)),
    ("tensor_empty", lambda d: torch.tensor([], device=d)),
    ("as_tensor", lambda d: torch.as_tensor([1, 2, 3], device=d)),
    ("as_tensor_np", lambda d: torch.as_tensor(np.arange(4.0), device=d)),
    ("as_tensor_dtype", lambda d: torch.as_tensor(np.arange(4), dtype=torch.float32, device=d)),
    ("from_numpy", lambda d: torch.from_numpy(np.arange(6, dtype=np.int16).reshape(2, 3)).to(d)),
    ("from_numpy_bool", lambda d: torch.from_numpy(np.array([True, False])).to(d)),
    ("from_numpy_c64", lambda d: torch.from_numpy(np.array([1 + 1j], dtype=np.complex64)).to(d)),
    ("from_numpy_f16_t", lambda d: torch.from_numpy(np.arange(6, dtype=np.float16).reshape(2, 3).T.copy()).to(d)),
]


@pytest.mark.parametrize("name,fn", LIKE, ids=[a[0] for a in LIKE])
def test_like_and_host(name, fn):
    same(fn)


def test_empty_like_and_rand_like_layout():
    with native_only():
        x = torch.empty(3, 4, device=DEV).t()
        assert torch.empty_like(x).stride() == torch.empty_like(torch.empty(3, 4).t()).stride()
        assert torch.zeros_like(x).stride() == x.stride() or torch.zeros_like(x).is_contiguous()
        y = torch.empty(2, 3, 4, 5, device=DEV, memory_format=torch.channels_last)
        assert torch.empty_like(y).is_contiguous(memory_format=torch.channels_last)
        assert torch.rand_like(y).shape == y.shape and torch.randn_like(x).shape == x.shape
        r = torch.randint_like(x, 10)
        assert r.dtype == x.dtype and ((r.cpu() >= 0) & (r.cpu() < 10)).all()
        assert x.new_empty((2, 2)).shape == (2, 2) and x.new_empty((2,)).device.type == "neuron"


# ---------------------------------------------------------------- dtype conversions
DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
          torch.complex128]

FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, -1.5, 2.5, 127.9, 128.0, -129.0, 255.0, 256.0, 300.7,
          -300.7, 65504.0, 65520.0, 70000.0, 1e10, -1e10, 3e9, 2.0**31, -2.0**31, 2.0**63, 1e38,
          3.4e38, 1e300, 1e-5, 3e-7, 1e-39, -1e-40, 1e-45, 1e-8, float("nan"), float("inf"),
          -float("inf"), 16777217.0, 2.0**53 + 1]
INTS = [0, 1, -1, 127, 128, 255, 256, -129, 32767, 32768, -32769, 2**31 - 1, 2**31, -2**31 - 1,
        2**53 + 1, 2**62 + 12345, -2**63, 2**63 - 1, 16777217, 65535, 65520]


def _source(dtype):
    if dtype == torch.bool:
        return torch.tensor([True, False, True, False])
    if dtype.is_floating_point or dtype.is_complex:
        base = torch.tensor(FLOATS, dtype=torch.float64)
        if dtype.is_complex:
            base = torch.complex(base, base.flip(0))
        return base.to(dtype)
    return torch.tensor(INTS, dtype=torch.int64).to(dtype)


@pytest.mark.parametrize("src", DTYPES, ids=str)
def test_to_dtype_matrix(src):
    """x.to(dtype) for every pair: bit-exact with CPU (float->int truncation and x86
    out-of-range results, NaN, inf, subnormals, rounding to half/bfloat16)."""
    x = _source(src)
    xd = x.to(DEV)
    for dst in DTYPES:
        e = x.to(dst)
        with native_only():
            a = xd.to(dst)
        assert a.dtype == dst and a.device.type == "neuron"
        a = a.cpu()
        if dst.is_complex:
            a, e = torch.view_as_real(a), torch.view_as_real(e)
        if dst.is_floating_point or dst.is_complex:
            # NaN sign bits are not compared: CPU's own conversions flip them inconsistently
            ok = ((a == e) & (torch.signbit(a) == torch.signbit(e))) | (a.isnan() & e.isnan())
        else:
            ok = a == e
        assert ok.all(), f"{src}->{dst}: src {x[~ok.reshape(x.shape[0], -1).all(1)].tolist()[:4]} " \
                         f"cpu {e[~ok].tolist()[:4]} dev {a[~ok].tolist()[:4]}"


CONVERSIONS = [
    ("double", lambda x: x.double()),
    ("half", lambda x: x.half()),
    ("bfloat16", lambda x: x.bfloat16()),
    ("float", lambda x: x.float()),
    ("int", lambda x: x.int()),
    ("long", lambda x: x.long()),
    ("bool", lambda x: x.bool()),
    ("byte", lambda x: x.byte()),
    ("char", lambda x: x.char()),
    ("short", lambda x: x.short()),
    ("type_as", lambda x: x.type_as(torch.empty(0, dtype=torch.int16, device=x.device))),
    ("type_str", lambda x: x.type(torch.float64)),
    ("to_same", lambda x: x.to(torch.float32)),
    ("noncontig", lambda x: x.t().to(torch.int32)),
    ("view", lambda x: x[1:, ::2].to(torch.float16)),
    ("copy_into_int", lambda x: torch.zeros(x.shape, dtype=torch.int64, device=x.device).copy_(x)),
    ("copy_into_view", lambda x: torch.zeros(4, 6, dtype=torch.int8, device=x.device)[:, 1:4].copy_(x[:, :3])),
    ("copy_broadcast", lambda x: torch.zeros(3, 4, 6, dtype=torch.float64, device=x.device).copy_(x)),
]


@pytest.mark.parametrize("name,fn", CONVERSIONS, ids=[c[0] for c in CONVERSIONS])
def test_conversion_methods(name, fn):
    x = torch.tensor([[0.5, -1.7, 300.2, float("nan"), 1e-40, -0.0],
                      [2.5, 1e10, -3.5, float("inf"), 7.9, 65519.0],
                      [-129.5, 127.5, 0.0, -float("inf"), 1.0, 3.0],
                      [1e-8, -1e-8, 255.5, 256.0, 42.0, -42.0]])
    check(fn, x)


def test_to_device_and_dtype_from_cpu():
    x = torch.tensor([1.7, -2.5, 300.0])
    with native_only():
        a = x.to(DEV, torch.int8)
        b = x.to(DEV, torch.float16)
        c = a.to("cpu", torch.float64)
    assert_same(a, x.to(torch.int8))
    assert_same(b, x.to(torch.float16))
    assert_same(c, x.to(torch.int8).to(torch.float64))


def test_complex_real_imag_roundtrip():
    z = torch.tensor([1 + 2j, -3.5 + 0.25j], dtype=torch.complex64)
    check(lambda t: (t.real.clone(), t.imag.clone(), t.to(torch.complex128)), z)
    check(lambda t: torch.view_as_real(t).clone(), z)


def test_conversion_is_math_exact_for_ints():
    # every int16 value through every narrower or wider type
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    for dt in (torch.uint8, torch.int8, torch.int32, torch.float16, torch.bfloat16, torch.float32):
        check(lambda t: t.to(dt), x)
    assert math.isfinite(1.0)

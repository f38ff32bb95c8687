"""Convolution and pooling: neuron vs CPU, forward and gradients."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import check, check_raises, tol


def _r(shape, dtype=torch.float32, grad=False):
    return torch.randn(shape, dtype=torch.float64).to(dtype).requires_grad_(grad)


# (id, fn(x, w, b), x shape, w shape, has bias)
CONVS = [
    ("1d", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), (2, 4, 9), (6, 4, 3), True),
    ("1d_same_dil", lambda x, w, b: F.conv1d(x, w, b, padding="same", dilation=2), (2, 4, 9), (6, 4, 3), True),
    ("2d", lambda x, w, b: F.conv2d(x, w, b), (2, 3, 7, 6), (5, 3, 3, 3), True),
    ("2d_stride_pad_dil", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(2, 1)),
     (2, 3, 9, 8), (4, 3, 3, 2), True),
    ("2d_groups", lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=2), (2, 4, 6, 6), (6, 2, 3, 3), True),
    ("2d_depthwise", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=4), (2, 4, 7, 7), (8, 1, 3, 3), True),
    ("2d_same_even", lambda x, w, b: F.conv2d(x, w, b, padding="same"), (1, 2, 6, 5), (3, 2, 4, 2), True),
    ("2d_valid_nobias", lambda x, w: F.conv2d(x, w, padding="valid"), (2, 3, 5, 5), (4, 3, 2, 2), False),
    ("2d_1x1", lambda x, w, b: F.conv2d(x, w, b), (2, 8, 4, 4), (5, 8, 1, 1), True),
    ("2d_unbatched", lambda x, w, b: F.conv2d(x, w, b, padding=1), (3, 5, 5), (4, 3, 3, 3), True),
    ("3d", lambda x, w, b: F.conv3d(x, w, b, stride=2, padding=1), (1, 2, 5, 6, 5), (3, 2, 3, 3, 3), True),
    ("3d_groups_dil", lambda x, w, b: F.conv3d(x, w, b, dilation=(1, 2, 1), groups=2), (1, 4, 4, 6, 4), (4, 2, 2, 2, 2), True),
    ("t1d", lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1), (2, 4, 5), (4, 3, 3), True),
    ("t2d", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1), (2, 4, 5, 4), (4, 3, 3, 3), True),
    ("t2d_groups_dil", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(2, 3), padding=(0, 1), output_padding=(1, 0),
                                                           groups=2, dilation=(1, 2)), (2, 4, 4, 3), (4, 3, 3, 2), True),
    ("t2d_bigpad", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=1, padding=3), (1, 2, 8, 8), (2, 3, 3, 3), True),
    # output_padding >= stride is allowed when < dilation
    ("t2d_outpad_dil", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=1, padding=1, dilation=2, output_padding=1), (2, 2, 4, 5), (2, 2, 3, 3), True),
    ("t3d_outpad_dil", lambda x, w, b: F.conv_transpose3d(x, w, b, stride=(1, 2, 1), dilation=2, output_padding=(1, 1, 0)), (1, 2, 3, 4, 3), (2, 2, 2, 2, 2), True),
    ("t3d", lambda x, w, b: F.conv_transpose3d(x, w, b, stride=2, padding=1, output_padding=(1, 0, 1)), (1, 2, 3, 4, 3), (2, 3, 3, 3, 3), True),
]


def _conv_args(xs, ws, has_bias, dtype, grad=False):
    args = [_r(xs, dtype, grad), _r(ws, dtype, grad)]
    if has_bias:
        nout = ws[0] if True else None
        args.append(_r((nout,), dtype, grad))
    return args


def _fix_bias(name, args):
    # transposed convs: out channels = w.shape[1] * groups
    if name.startswith("t") and len(args) == 3:
        groups = 2 if "groups" in name else 1
        args[2] = _r((args[1].shape[1] * groups,), args[2].dtype, args[2].requires_grad)
    return args


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,fn,xs,ws,has_bias", CONVS, ids=[c[0] for c in CONVS])
def test_conv_forward(name, fn, xs, ws, has_bias, dtype):
    args = _fix_bias(name, _conv_args(xs, ws, has_bias, dtype))
    check(fn, *args, **tol(dtype, "conv_pool"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name,fn,xs,ws,has_bias", CONVS, ids=[c[0] for c in CONVS])
def test_conv_grad(name, fn, xs, ws, has_bias, dtype):
    args = _fix_bias(name, _conv_args(xs, ws, has_bias, dtype, grad=True))
    check(fn, *args, grad=True, **tol(dtype, "conv_pool"))


def test_conv_bf16_grad():
    x, w, b = _r((2, 8, 6, 6), torch.bfloat16, True), _r((4, 8, 3, 3), torch.bfloat16, True), _r((4,), torch.bfloat16, True)
    check(lambda x, w, b: F.conv2d(x, w, b, padding=1), x, w, b, grad=True, atol=0.1, rtol=5e-2)


def test_conv_half_forward():
    x, w = _r((1, 3, 6, 6), torch.float16), _r((4, 3, 3, 3), torch.float16)
    try:
        F.conv2d(x, w)
    except RuntimeError:
        pytest.skip("CPU has no float16 convolution")
    check(lambda x, w: F.conv2d(x, w, padding=1), x, w, **tol(torch.float16, "conv_pool"))


@pytest.mark.parametrize("mask", [(False, True, True), (True, False, False), (False, True, False)])
def test_conv_grad_partial(mask):
    x, w, b = _r((2, 3, 6, 6), grad=mask[0]), _r((4, 3, 3, 3), grad=mask[1]), _r((4,), grad=mask[2])
    check(lambda x, w, b: F.conv2d(x, w, b, stride=2), x, w, b, grad=True, **tol(torch.float32, "conv_pool"))


def test_conv_channels_last():
    x = _r((2, 3, 7, 7), grad=True)
    xc = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    w = _r((4, 3, 3, 3), grad=True).detach().to(memory_format=torch.channels_last).requires_grad_()
    # values only: PyTorch's meta kernel (which lays out results here) keeps channels-last
    # outputs for CPU/CUDA inputs only
    check(lambda x, w: F.conv2d(x, w, padding=1), xc, w, grad=True, **tol(torch.float32, "conv_pool"))


def test_conv_noncontiguous():
    x = _r((2, 7, 3, 7), grad=True).detach().transpose(1, 2).requires_grad_()
    w = _r((3, 4, 3, 3)).transpose(0, 1).requires_grad_()
    check(lambda x, w: F.conv2d(x, w, padding=1), x, w, grad=True, **tol(torch.float32, "conv_pool"))


def test_conv_empty_batch():
    check(lambda x, w, b: F.conv2d(x, w, b, padding=1), _r((0, 3, 5, 5)), _r((4, 3, 3, 3)), _r((4,)))
    check(lambda x, w: F.conv_transpose2d(x, w, stride=2), _r((0, 3, 5, 5)), _r((3, 4, 3, 3)))


def test_conv_modules_train_step():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 4, 3, stride=2, groups=4), nn.ConvTranspose2d(4, 2, 2, stride=2))
    params = [p.detach().clone().requires_grad_() for p in net.parameters()]
    names = [n for n, _ in net.named_parameters()]

    def f(x, *ps):
        return torch.func.functional_call(net, dict(zip(names, ps)), (x,))

    check(f, _r((2, 3, 12, 12), grad=True), *params, grad=True, atol=1e-4, rtol=1e-4)


def test_conv_errors():
    x = torch.randn(1, 3, 5, 5, device="neuron")
    with pytest.raises(RuntimeError):
        F.conv2d(x, torch.randn(4, 2, 3, 3, device="neuron"))  # channel mismatch
    with pytest.raises(RuntimeError):
        F.conv2d(x, torch.randn(4, 3, 7, 7, device="neuron"))  # kernel larger than input


# ---------------------------------------------------------------- pooling
POOLS = [
    ("max1d", lambda x: F.max_pool1d(x, 3, 2, 1), (2, 3, 10)),
    ("max1d_ceil_dil", lambda x: F.max_pool1d(x, 2, 2, 1, dilation=2, ceil_mode=True), (2, 3, 10)),
    ("max2d", lambda x: F.max_pool2d(x, 2), (2, 3, 8, 8)),
    ("max2d_pad_stride", lambda x: F.max_pool2d(x, 3, 2, 1), (2, 3, 9, 7)),
    ("max2d_ceil", lambda x: F.max_pool2d(x, (3, 2), (2, 2), (1, 0), ceil_mode=True), (2, 3, 8, 7)),
    ("max2d_dil", lambda x: F.max_pool2d(x, 2, 1, 1, dilation=2), (2, 3, 7, 7)),
    ("max2d_indices", lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), (2, 3, 9, 7)),
    ("max2d_unbatched", lambda x: F.max_pool2d(x, 2), (3, 6, 6)),
    ("max3d", lambda x: F.max_pool3d(x, 2, 2, 1, ceil_mode=True), (1, 2, 5, 6, 5)),
    ("max3d_indices_dil", lambda x: F.max_pool3d(x, 2, 1, 0, dilation=(1, 2, 1), return_indices=True), (1, 2, 5, 6, 5)),
    ("avg1d", lambda x: F.avg_pool1d(x, 3, 2, 1), (2, 3, 10)),
    ("avg1d_ceil_nopad", lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), (2, 3, 10)),
    ("avg2d", lambda x: F.avg_pool2d(x, 2), (2, 3, 8, 8)),
    ("avg2d_pad", lambda x: F.avg_pool2d(x, 3, 2, 1), (2, 3, 9, 7)),
    ("avg2d_ceil_nopad", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), (2, 3, 8, 7)),
    ("avg2d_ceil_pad", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True), (2, 3, 8, 7)),
    ("avg2d_divisor", lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=4), (2, 3, 8, 7)),
    ("avg3d", lambda x: F.avg_pool3d(x, 2, 2, 1, ceil_mode=True, count_include_pad=False), (1, 2, 5, 6, 5)),
    ("avg3d_divisor", lambda x: F.avg_pool3d(x, 3, 1, 1, divisor_override=7), (1, 2, 4, 4, 4)),
    ("aavg1d", lambda x: F.adaptive_avg_pool1d(x, 4), (2, 3, 10)),
    ("aavg2d", lambda x: F.adaptive_avg_pool2d(x, (3, 5)), (2, 3, 8, 7)),
    ("aavg2d_global", lambda x: F.adaptive_avg_pool2d(x, 1), (2, 3, 8, 7)),
    ("aavg2d_up", lambda x: F.adaptive_avg_pool2d(x, (10, 9)), (2, 3, 4, 5)),
    ("aavg3d", lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)), (1, 2, 5, 6, 7)),
    ("amax1d", lambda x: F.adaptive_max_pool1d(x, 4), (2, 3, 10)),
    ("amax2d", lambda x: F.adaptive_max_pool2d(x, (3, 5), return_indices=True), (2, 3, 8, 7)),
    ("amax2d_even", lambda x: F.adaptive_max_pool2d(x, (4, 2)), (2, 3, 8, 8)),
    ("amax3d", lambda x: F.adaptive_max_pool3d(x, (2, 3, 4), return_indices=True), (1, 2, 5, 6, 7)),
    ("lp1d", lambda x: F.lp_pool1d(x, 2, 3, 2), (2, 3, 10)),
    ("lp2d", lambda x: F.lp_pool2d(x, 3, 2), (2, 3, 8, 8)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,fn,shape", POOLS, ids=[p[0] for p in POOLS])
def test_pool_forward(name, fn, shape, dtype):
    x = _r(shape, dtype)
    if name.startswith("lp"):
        x = x.abs() + 0.1
    try:
        fn(x)
    except NotImplementedError:
        pytest.skip(f"CPU has no {dtype} kernel")
    check(fn, x, **tol(dtype, "conv_pool"))


@pytest.mark.parametrize("name,fn,shape", POOLS, ids=[p[0] for p in POOLS])
def test_pool_grad(name, fn, shape):
    x = _r(shape, torch.float64)
    if name.startswith("lp"):
        x = x.abs() + 0.1
    check(fn, x.requires_grad_(), grad=True, **tol(torch.float64, "conv_pool"))


@pytest.mark.parametrize("name", ["max2d_pad_stride", "avg2d_ceil_nopad", "aavg2d", "amax2d"])
def test_pool_noncontiguous_and_channels_last(name):
    _, fn, shape = next(p for p in POOLS if p[0] == name)
    x = _r(shape, torch.float32)
    check(fn, x.to(memory_format=torch.channels_last).requires_grad_(), grad=True, **tol(torch.float32, "conv_pool"))
    check(fn, x.transpose(2, 3).requires_grad_(), grad=True, **tol(torch.float32, "conv_pool"))


def test_max_pool_ties_and_nan():
    # integer-valued data: many ties, the index must be the first maximum in scan order
    x = torch.randint(0, 3, (2, 3, 9, 9)).float()
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), x)
    check(lambda x: F.max_pool2d(x, 3, 1, 1), x.clone().requires_grad_(), grad=True)
    check(lambda x: F.adaptive_max_pool2d(x, (4, 5), return_indices=True), x)
    x = _r((1, 2, 6, 6))
    x[0, 0, 1, 1] = float("nan")
    x[0, 1, 2, 2] = float("nan")
    x[0, 1, 2, 3] = float("nan")
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), x)
    check(lambda x: F.adaptive_max_pool2d(x, (4, 5), return_indices=True), x)
    x = torch.full((1, 1, 4, 4), float("-inf"))
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), x)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8], ids=str)
def test_max_pool_integer(dtype):
    x = torch.randint(0, 100, (2, 3, 7, 7)).to(dtype)
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), x)


def test_avg_pool_integer():
    x = torch.randint(0, 100, (2, 3, 7, 7))
    check(lambda x: F.avg_pool2d(x, 3, 2, 1), x)


def test_pool_empty():
    check(lambda x: F.max_pool2d(x, 2), _r((0, 3, 4, 4)))
    check(lambda x: F.avg_pool2d(x, 2), _r((0, 3, 4, 4)))
    check(lambda x: F.adaptive_avg_pool2d(x, 2), _r((0, 3, 4, 4)))
    check(lambda x: F.adaptive_max_pool2d(x, 2), _r((0, 3, 4, 4)))


def test_pool_modules():
    torch.manual_seed(0)
    for m in [nn.MaxPool2d(3, 2, 1), nn.AvgPool2d(3, 2, 1), nn.AdaptiveAvgPool2d((2, 3)),
              nn.AdaptiveMaxPool2d(3), nn.MaxPool1d(2), nn.AvgPool3d(2), nn.LPPool2d(2, 2)]:
        shape = (2, 3, 8) if isinstance(m, nn.MaxPool1d) else (1, 2, 4, 6, 6) if isinstance(m, nn.AvgPool3d) \
            else (2, 3, 8, 8)
        x = _r(shape).abs() + 0.1
        check(m, x.requires_grad_(), grad=True, **tol(torch.float32, "conv_pool"))


def test_pool_errors():
    x = torch.randn(1, 3, 4, 4, device="neuron")
    with pytest.raises(RuntimeError):
        F.max_pool2d(x, 2, padding=2)  # pad should be at most half of kernel
    with pytest.raises(RuntimeError):
        F.avg_pool2d(x, 5)  # output size too small


# ---------------------------------------------------------------- max unpooling
UNPOOL = [
    ("1d", F.max_pool1d, F.max_unpool1d, (2, 3, 8), dict(kernel_size=2)),
    ("1d_stride_pad", F.max_pool1d, F.max_unpool1d, (2, 3, 9), dict(kernel_size=3, stride=2, padding=1)),
    ("2d", F.max_pool2d, F.max_unpool2d, (2, 3, 8, 6), dict(kernel_size=2)),
    ("2d_unbatched_overlap", F.max_pool2d, F.max_unpool2d, (3, 7, 7), dict(kernel_size=3, stride=2)),
    ("3d", F.max_pool3d, F.max_unpool3d, (1, 2, 4, 6, 4), dict(kernel_size=2)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,pool,unpool,shape,kw", UNPOOL, ids=[u[0] for u in UNPOOL])
def test_max_unpool(name, pool, unpool, shape, kw, dtype):
    y, idx = pool(_r(shape), return_indices=True, **kw)
    grad = dtype != torch.bfloat16
    y = y.to(dtype).detach().requires_grad_(grad)
    check(lambda v, i: unpool(v, i, **kw), y, idx, grad=grad)
    # an explicit (larger) output size
    out = [s + 1 for s in shape[-(len(shape) - 2 if name != "2d_unbatched_overlap" else 2):]]
    check(lambda v, i: unpool(v, i, output_size=out, **kw), y.detach(), idx)


def test_max_unpool_errors():
    # CPU's messages (the meta kernels check nothing), including its out-of-range index error
    x = torch.randn(1, 2, 2, 2)
    i = torch.tensor([[[[0, 1], [2, 16]], [[0, 1], [2, 3]]]])
    cases = [lambda x, i: F.max_unpool2d(x, i, 2), lambda x, i: F.max_unpool2d(x, i.int(), 2),
             lambda x, i: F.max_unpool2d(x, i[..., :1], 2), lambda x, i: F.max_unpool2d(x[0, 0], i[0, 0], 2),
             lambda x, i: torch.ops.aten.max_unpool2d(x, i % 4, [4, 4, 4]),
             lambda x, i: F.max_unpool3d(x[None], (i % 8)[None].int(), 2),
             lambda x, i: torch.ops.aten.max_unpool3d(x[None], (i % 8)[None], [4, 4], [2, 2, 2], [0, 0, 0]),
             lambda x, i: F.max_unpool3d(x[None], i[None] + 60, 2)]
    for fn in cases:
        check_raises(fn, x, i, native=False)


# ---------------------------------------------------------------- fractional max pooling
FRACTIONAL = [
    ("2d", F.fractional_max_pool2d, (2, 3, 9, 8), (2, 3), (4, 3)),
    ("2d_unbatched", F.fractional_max_pool2d, (3, 7, 7), (3, 3), (3, 3)),
    ("2d_dense", F.fractional_max_pool2d, (1, 2, 10, 10), (2, 2), (9, 9)),
    ("2d_one_output", F.fractional_max_pool2d, (1, 1, 5, 5), (2, 2), (1, 1)),
    ("3d", F.fractional_max_pool3d, (2, 3, 7, 8, 9), (2, 3, 2), (3, 4, 5)),
    ("3d_unbatched", F.fractional_max_pool3d, (2, 6, 6, 5), (2, 2, 2), (3, 4, 2)),
    ("3d_empty_batch", F.fractional_max_pool3d, (0, 1, 4, 5, 4), (2, 2, 1), (2, 2, 2)),
    ("2d_empty_batch", F.fractional_max_pool2d, (0, 2, 5, 4), (2, 2), (2, 2)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16],
                         ids=str)
@pytest.mark.parametrize("name,fn,shape,k,out", FRACTIONAL, ids=[f[0] for f in FRACTIONAL])
def test_fractional_max_pool(name, fn, shape, k, out, dtype):
    nd = len(k)
    n = shape[0] if len(shape) == nd + 2 else 1
    samples = torch.rand(n, shape[-nd - 1], nd, dtype=dtype)  # the same pooling regions
    grad = dtype in (torch.float32, torch.float64)
    x = _r(shape, dtype, grad)
    # values and indices must be identical (both sides pick the same element)
    check(lambda x, s: fn(x, k, output_size=out, return_indices=True, _random_samples=s), x, samples,
          grad=grad)


def test_fractional_max_pool_nan_and_ties():
    x = torch.tensor([[[[1.0, 1.0, 0.0, 2.0], [1.0, float("nan"), 2.0, 2.0],
                        [float("nan"), 0.0, 3.0, 3.0], [0.0, 0.0, 3.0, float("nan")]]]])
    s = torch.tensor([[[0.3, 0.7]]])
    check(lambda x, s: F.fractional_max_pool2d(x, 2, output_size=3, return_indices=True,
                                               _random_samples=s), x, s)


@pytest.mark.parametrize("name,fn,xs,ws", [
    ("conv1d", F.conv1d, (2, 3, 7), (4, 3, 3)),
    ("conv2d", F.conv2d, (2, 3, 5, 5), (4, 3, 3, 3)),
    ("conv_transpose1d", F.conv_transpose1d, (1, 3, 4), (3, 3, 3)),
    ("conv_transpose2d", F.conv_transpose2d, (2, 4, 4, 4), (4, 3, 3, 3)),
    ("conv_transpose3d", F.conv_transpose3d, (1, 3, 4, 4, 4), (3, 2, 3, 3, 3)),
])
def test_integer_convolution(name, fn, xs, ws):
    # int64 convolutions are exact integer results on CPU (transposed ones were all-bias here)
    x = torch.randint(-5, 6, xs)
    w = torch.randint(-5, 6, ws)
    nout = ws[1] if "transpose" in name else ws[0]
    b = torch.randint(-5, 6, (nout,))
    kw = dict(stride=2, padding=1, output_padding=1) if "transpose" in name else dict(stride=2, padding=1)
    check(lambda x, w, b: fn(x, w, b, **kw), x, w, b)


# A convolution's (and reflection / replication padding's) output memory format follows its
# input's or weight's (channels-last in, channels-last out), as the CPU's oneDNN and CUDA's
# cuDNN kernels return (found by the module_db sweep's channels_last check).
_CL, _CL3 = torch.channels_last, torch.channels_last_3d
CONV_FORMATS = {
    "input channels-last": lambda d: F.conv2d(torch.randn(2, 3, 5, 5).to(d).to(memory_format=_CL),
                                              torch.randn(4, 3, 3, 3).to(d)),
    "weight channels-last": lambda d: F.conv2d(torch.randn(2, 3, 5, 5).to(d),
                                               torch.randn(4, 3, 3, 3).to(d).to(memory_format=_CL)),
    "both, with bias": lambda d: F.conv2d(torch.randn(2, 3, 5, 5).to(d).to(memory_format=_CL),
                                          torch.randn(4, 3, 3, 3).to(d).to(memory_format=_CL),
                                          torch.randn(4).to(d), padding=1),
    "contiguous": lambda d: F.conv2d(torch.randn(2, 3, 5, 5).to(d), torch.randn(4, 3, 3, 3).to(d)),
    "one channel": lambda d: F.conv2d(torch.randn(2, 1, 5, 5).to(d).to(memory_format=_CL),
                                      torch.randn(4, 1, 3, 3).to(d)),
    "1x1 output": lambda d: F.conv2d(torch.randn(2, 3, 1, 1).to(d).to(memory_format=_CL),
                                     torch.randn(4, 3, 1, 1).to(d)),
    "3-d channels-last": lambda d: F.conv3d(torch.randn(2, 3, 4, 4, 4).to(d).to(memory_format=_CL3),
                                            torch.randn(4, 3, 3, 3, 3).to(d)),
    "transposed": lambda d: F.conv_transpose2d(torch.randn(2, 3, 5, 5).to(d).to(memory_format=_CL),
                                               torch.randn(3, 4, 3, 3).to(d)),
    "groups": lambda d: F.conv2d(torch.randn(2, 4, 5, 5).to(d).to(memory_format=_CL),
                                 torch.randn(4, 2, 3, 3).to(d), groups=2),
    "conv1d": lambda d: F.conv1d(torch.randn(2, 3, 5).to(d), torch.randn(4, 3, 3).to(d)),
    "unbatched conv3d of a channels-last 4-d input": lambda d: F.conv3d(
        torch.randn(3, 4, 5, 5).to(d).to(memory_format=_CL), torch.randn(2, 3, 2, 2, 2).to(d)),
    # reflection / replication padding keeps a channels-last input's format too
    "reflect pad 2-d": lambda d: F.pad(torch.randn(2, 3, 5, 5).to(d).to(memory_format=_CL),
                                       (1, 2, 3, 4), mode="reflect"),
    "replicate pad 3-d": lambda d: F.pad(torch.randn(2, 3, 4, 5, 5).to(d).to(memory_format=_CL3),
                                         (1, 1, 1, 1, 1, 1), mode="replicate"),
    "reflect pad 3-d, unbatched": lambda d: F.pad(torch.randn(3, 4, 5, 5).to(d).to(memory_format=_CL),
                                                  (1, 1, 1, 1, 1, 1), mode="reflect"),
    "reflect pad 1-d": lambda d: F.pad(torch.randn(2, 3, 5).to(d), (1, 2), mode="reflect"),
}


@pytest.mark.parametrize("name", list(CONV_FORMATS))
def test_output_memory_format_matches_cpu(name):
    from helpers import DEV

    torch.manual_seed(0)
    want = CONV_FORMATS[name]("cpu")
    torch.manual_seed(0)
    got = CONV_FORMATS[name](DEV)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)

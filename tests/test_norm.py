"""Normalization layers: neuron vs CPU, forward, running statistics, gradients."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import check, tol


def _r(shape, dtype=torch.float32, grad=False, scale=1.0, shift=0.0):
    return (torch.randn(shape, dtype=torch.float64) * scale + shift).to(dtype).requires_grad_(grad)


def _functional(module):
    """module as f(x, *params_and_buffers); buffers are passed too (and compared after)."""
    names = [n for n, _ in module.named_parameters()] + [n for n, _ in module.named_buffers()]
    params = [p.detach().clone().requires_grad_() for p in module.parameters()] + \
        [b.detach().clone() for b in module.buffers()]

    def f(x, *ps):
        return torch.func.functional_call(module, dict(zip(names, ps)), (x,))

    return f, params


# ---------------------------------------------------------------- batch norm
BN_SHAPES = [(4, 3), (4, 3, 5), (2, 3, 4, 5), (2, 3, 2, 3, 4)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("shape", BN_SHAPES, ids=str)
def test_batch_norm_functional(shape, training, dtype):
    C = shape[1]
    pdt = torch.float32 if dtype == torch.bfloat16 else dtype  # mixed precision params
    x = _r(shape, dtype, scale=2, shift=1)
    w, b = _r((C,), pdt), _r((C,), pdt)
    rm, rv = _r((C,), pdt), _r((C,), pdt).abs() + 0.5

    def f(x, w, b, rm, rv):
        return F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.3, eps=1e-3)

    # running stats are compared after the call: the in-place update is checked
    check(f, x, w, b, rm, rv, **tol(dtype, "norm"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("shape", BN_SHAPES, ids=str)
def test_batch_norm_grad(shape, training, dtype):
    C = shape[1]
    x = _r(shape, dtype, grad=True, scale=2, shift=1)
    w, b = _r((C,), dtype, grad=True), _r((C,), dtype, grad=True)
    rm, rv = _r((C,), dtype), _r((C,), dtype).abs() + 0.5

    def f(x, w, b, rm, rv):
        return F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.1, eps=1e-5)

    check(f, x, w, b, rm, rv, grad=True, **tol(dtype, "norm"))


def test_batch_norm_no_affine_no_stats():
    x = _r((4, 3, 5, 5), grad=True)
    check(lambda x: F.batch_norm(x, None, None, training=True), x, grad=True, **tol(torch.float32, "norm"))
    check(lambda x: F.instance_norm(x), x, grad=True, **tol(torch.float32, "norm"))


@pytest.mark.parametrize("cls,shape", [(nn.BatchNorm1d, (8, 4)), (nn.BatchNorm1d, (8, 4, 6)),
                                       (nn.BatchNorm2d, (4, 3, 5, 5)), (nn.BatchNorm3d, (2, 3, 3, 4, 3))],
                         ids=["1d", "1d_seq", "2d", "3d"])
def test_batch_norm_modules(cls, shape):
    torch.manual_seed(0)
    cpu = cls(shape[1], momentum=0.2)
    dev = cls(shape[1], momentum=0.2).to("neuron")
    dev.load_state_dict(cpu.state_dict())
    import torchneuron
    for step in range(3):  # train steps update running stats and num_batches_tracked
        x = _r(shape, scale=3, shift=2)
        with torchneuron.fallback_policy("error"):
            dev(x.to("neuron")).sum().backward()
        cpu(x).sum().backward()
    for k, v in cpu.state_dict().items():
        torch.testing.assert_close(dev.state_dict()[k].cpu(), v, atol=1e-5, rtol=1e-5, msg=k)
    torch.testing.assert_close(dev.weight.grad.cpu(), cpu.weight.grad, atol=1e-4, rtol=1e-4)
    cpu.eval()
    dev.eval()
    x = _r(shape)
    with torchneuron.fallback_policy("error"):
        y = dev(x.to("neuron"))
    torch.testing.assert_close(y.cpu(), cpu(x), atol=1e-5, rtol=1e-5)


def test_batch_norm_momentum_none():
    # cumulative moving average: momentum=None uses 1/num_batches_tracked
    f, params = _functional(nn.BatchNorm2d(3, momentum=None))
    check(lambda x, rm, rv: F.batch_norm(x, rm, rv, training=True, momentum=0.5),
          _r((2, 3, 4, 4)), torch.zeros(3), torch.ones(3), **tol(torch.float32, "norm"))


def test_batch_norm_noncontiguous_channels_last():
    x = _r((4, 3, 5, 6)).to(memory_format=torch.channels_last).requires_grad_()
    w, b = _r((3,), grad=True), _r((3,), grad=True)
    rm, rv = torch.zeros(3), torch.ones(3)
    check(lambda x, w, b, rm, rv: F.batch_norm(x, rm, rv, w, b, training=True), x, w, b, rm, rv,
          grad=True, **tol(torch.float32, "norm"))
    x = _r((4, 5, 3)).transpose(1, 2).requires_grad_()
    check(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, w, b, grad=True,
          **tol(torch.float32, "norm"))


def test_batch_norm_running_stats_on_view():
    # running stats that are views into a bigger buffer: the update writes through
    def f(x, buf):
        F.batch_norm(x, buf[0], buf[1], training=True, momentum=0.5)
        return buf

    check(f, _r((4, 3, 2)), torch.stack([torch.zeros(3), torch.ones(3)]), **tol(torch.float32, "norm"))


@pytest.mark.parametrize("track", [False, True])
def test_instance_norm_modules(track):
    torch.manual_seed(0)
    m = nn.InstanceNorm2d(3, affine=True, track_running_stats=track)
    f, params = _functional(m)
    check(f, _r((2, 3, 5, 5), grad=True), *params, grad=True, **tol(torch.float32, "norm"))
    m1 = nn.InstanceNorm1d(4, affine=False)
    check(m1, _r((2, 4, 7), grad=True), grad=True, **tol(torch.float32, "norm"))


# ---------------------------------------------------------------- layer norm
LN = [((4, 6), (6,)), ((2, 3, 5), (5,)), ((2, 3, 5), (3, 5)), ((2, 3, 4, 5), (4, 5)), ((0, 5), (5,))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("xs,ns", LN, ids=[str(c) for c in LN])
def test_layer_norm(xs, ns, dtype):
    x = _r(xs, dtype, scale=3, shift=2)
    w, b = _r(ns, dtype), _r(ns, dtype)
    check(lambda x, w, b: F.layer_norm(x, ns, w, b, eps=1e-4), x, w, b, **tol(dtype, "norm"))
    check(lambda x: F.layer_norm(x, ns), x, **tol(dtype, "norm"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("xs,ns", LN, ids=[str(c) for c in LN])
def test_layer_norm_grad(xs, ns, dtype):
    x = _r(xs, dtype, grad=True, scale=3, shift=2)
    w, b = _r(ns, dtype, grad=True), _r(ns, dtype, grad=True)
    check(lambda x, w, b: F.layer_norm(x, ns, w, b), x, w, b, grad=True, **tol(dtype, "norm"))
    check(lambda x: F.layer_norm(x, ns), x, grad=True, **tol(dtype, "norm"))
    check(lambda x, w: F.layer_norm(x, ns, w), x, w, grad=True, **tol(dtype, "norm"))


def test_layer_norm_bf16_grad_and_noncontiguous():
    x = _r((3, 8, 5), torch.bfloat16).transpose(1, 2).requires_grad_()
    w, b = _r((8,), torch.bfloat16, grad=True), _r((8,), torch.bfloat16, grad=True)
    check(lambda x, w, b: F.layer_norm(x, (8,), w, b), x, w, b, grad=True, atol=0.1, rtol=5e-2)


def test_layer_norm_module():
    m = nn.LayerNorm((4, 5), elementwise_affine=True, bias=True)
    f, params = _functional(m)
    check(f, _r((2, 3, 4, 5), grad=True), *params, grad=True, **tol(torch.float32, "norm"))


# ---------------------------------------------------------------- group norm
GN = [((2, 6, 5), 3), ((2, 6, 4, 4), 2), ((3, 4, 2, 3, 2), 4), ((2, 6), 3), ((0, 6, 3), 2)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("xs,g", GN, ids=[str(c) for c in GN])
def test_group_norm(xs, g, dtype):
    x = _r(xs, dtype, scale=2, shift=1)
    w, b = _r((xs[1],), dtype), _r((xs[1],), dtype)
    check(lambda x, w, b: F.group_norm(x, g, w, b, eps=1e-4), x, w, b, **tol(dtype, "norm"))


@pytest.mark.parametrize("xs,g", GN, ids=[str(c) for c in GN])
def test_group_norm_grad(xs, g):
    dtype = torch.float64
    x = _r(xs, dtype, grad=True, scale=2, shift=1)
    w, b = _r((xs[1],), dtype, grad=True), _r((xs[1],), dtype, grad=True)
    check(lambda x, w, b: F.group_norm(x, g, w, b), x, w, b, grad=True, **tol(dtype, "norm"))
    check(lambda x: F.group_norm(x, g), x, grad=True, **tol(dtype, "norm"))


def test_group_norm_module_noncontiguous():
    m = nn.GroupNorm(2, 4)
    f, params = _functional(m)
    x = _r((2, 5, 4, 3)).transpose(1, 2).requires_grad_()
    check(f, x, *params, grad=True, **tol(torch.float32, "norm"))


# ---------------------------------------------------------------- rms norm, lrn, weight norm
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_rms_norm(dtype):
    x = _r((2, 3, 8), dtype, grad=dtype != torch.bfloat16)
    w = _r((8,), dtype, grad=dtype != torch.bfloat16)
    tols = tol(dtype, "norm")
    check(lambda x, w: F.rms_norm(x, (8,), w, eps=1e-5), x, w, grad=x.requires_grad, **tols)
    check(lambda x: F.rms_norm(x, (3, 8)), x, grad=x.requires_grad, **tols)
    m = nn.RMSNorm(8)
    f, params = _functional(m.to(dtype))
    check(f, x, *params, grad=x.requires_grad, **tols)


def test_local_response_norm():
    check(lambda x: F.local_response_norm(x, 3), _r((2, 6, 5, 5), grad=True), grad=True, **tol(torch.float32, "norm"))
    check(lambda x: F.local_response_norm(x, 2, alpha=1e-2, k=2.0), _r((2, 5, 7), grad=True), grad=True,
          **tol(torch.float32, "norm"))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_weight_norm_interface(dim):
    v = _r((4, 3, 2), grad=True)
    gshape = [1, 1, 1]
    if dim != -1:
        gshape[dim] = v.shape[dim]
    g = _r(gshape, grad=True)
    check(lambda v, g: torch._weight_norm(v, g, dim), v, g, grad=True, **tol(torch.float32, "norm"))
    if dim != 1:  # CPU's fused kernel takes the first or last dim only
        d = dim if dim != -1 else 2
        gi = _r([4, 1, 1] if d == 0 else [1, 1, 2], grad=True)
        check(lambda v, g: torch._weight_norm_interface(v, g, d), v, gi, grad=True,
              **tol(torch.float32, "norm"))


def test_weight_norm_module():
    lin = nn.utils.parametrizations.weight_norm(nn.Linear(5, 3))
    f, params = _functional(lin)
    check(f, _r((4, 5), grad=True), *params, grad=True, **tol(torch.float32, "norm"))


def test_norm_errors():
    x = torch.randn(2, 3, 4, device="neuron")
    with pytest.raises(RuntimeError):
        F.layer_norm(x, (5,))
    with pytest.raises(RuntimeError):
        F.group_norm(x, 2)  # 3 channels not divisible by 2 groups
    with pytest.raises(ValueError):
        F.batch_norm(torch.randn(1, 3, device="neuron"), None, None, training=True)

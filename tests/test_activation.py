"""Activations, softmax family: forward and backward against PyTorch's CPU kernels."""
import pytest
import torch
import torch.nn.functional as F

from helpers import DEV, assert_same, check, native_only, tol

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def _x(shape, dtype, scale=4.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _noncontig(shape, dtype, scale=4.0):
    """A non-contiguous view of the given shape (transpose of a wider tensor)."""
    big = _x(tuple(reversed(shape))[:-1] + (shape[0] * 2,), dtype, scale) if len(shape) > 1 else \
        _x((shape[0] * 2,), dtype, scale)
    if len(shape) > 1:
        return big[..., ::2].permute(*reversed(range(len(shape))))
    return big[::2]


ACTS = [
    ("relu", F.relu),
    ("relu6", F.relu6),
    ("gelu", F.gelu),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    ("silu", F.silu),
    ("tanh", torch.tanh),
    ("sigmoid", torch.sigmoid),
    ("softplus", F.softplus),
    ("softplus_beta", lambda x: F.softplus(x, beta=2.0, threshold=3.0)),
    ("leaky_relu", F.leaky_relu),
    ("leaky_relu_neg", lambda x: F.leaky_relu(x, -0.3)),
    ("hardswish", F.hardswish),
    ("hardsigmoid", F.hardsigmoid),
    ("mish", F.mish),
    ("elu", F.elu),
    ("elu_alpha", lambda x: F.elu(x, alpha=0.7)),
    ("selu", F.selu),
    ("celu", lambda x: F.celu(x, alpha=1.3)),
    ("hardtanh", F.hardtanh),
    ("hardtanh_range", lambda x: F.hardtanh(x, -2.0, 0.5)),
    ("threshold", lambda x: F.threshold(x, 0.5, -2.0)),
    ("logsigmoid", F.logsigmoid),
    ("softshrink", F.softshrink),
    ("softshrink_l", lambda x: F.softshrink(x, 1.5)),
    ("hardshrink", F.hardshrink),
    ("hardshrink_l", lambda x: F.hardshrink(x, 1.5)),
    ("tanhshrink", F.tanhshrink),
    ("softsign", F.softsign),
    ("rrelu_eval", lambda x: F.rrelu(x, training=False)),
    ("glu", F.glu),
    ("glu_dim0", lambda x: F.glu(x, 0)),
    ("logit", lambda x: torch.logit(torch.sigmoid(x))),
    ("logit_eps", lambda x: torch.logit(torch.sigmoid(x), eps=0.1)),
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name,fn", ACTS, ids=[a[0] for a in ACTS])
def test_activation(name, fn, dtype):
    x = _x((6, 8), dtype).requires_grad_()
    check(fn, x, grad=True, **tol(dtype, "activation"))


@pytest.mark.parametrize("name,fn", ACTS, ids=[a[0] for a in ACTS])
def test_activation_noncontig_and_edge(name, fn):
    x = _noncontig((4, 6), torch.float32)
    assert not x.is_contiguous()
    check(fn, x.requires_grad_(), grad=True, **tol(torch.float32, "activation"))
    # 0-d and empty inputs (glu needs an even, non-empty dim)
    if not name.startswith("glu"):
        check(fn, torch.tensor(-0.7).requires_grad_(), grad=True, **tol(torch.float32, "activation"))
        check(fn, torch.zeros(0, 3).requires_grad_(), grad=True)
    # special values: inf / nan, exact thresholds
    y = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.5, -0.5, 1.0, -1.0,
                      3.0, -3.0, 20.0, 6.0, 1.5, -1.5, 100.0, -100.0, 1e-8])
    if name == "glu":
        y = y.reshape(9, 2)
    elif name == "glu_dim0":
        y = y.reshape(2, 9)
    if name == "gelu":
        # CPU's float32 GELU gives NaN at +inf in its AVX512 kernel and inf in its AVX2,
        # scalar and float64 ones (so the CPU result depends on the machine): compare
        # with the float64 result, which is the scalar formula's
        with native_only():
            got = fn(y.to(DEV))
        assert_same(got, fn(y.double()).float(), **tol(torch.float32, "activation"))
        return
    check(fn, y, **tol(torch.float32, "activation"))


def test_inplace_activations():
    x = _x((5, 6), torch.float32)

    def f(fn):
        def g(t):
            fn(t[1:, ::2])
            return t
        return g

    check(f(lambda v: v.relu_()), x)
    check(f(lambda v: F.relu(v, inplace=True)), x)
    check(f(lambda v: F.leaky_relu_(v, 0.2)), x)
    check(f(lambda v: F.elu_(v)), x)
    check(f(lambda v: F.hardtanh_(v)), x)
    check(f(lambda v: F.hardswish(v, inplace=True)), x)
    check(f(lambda v: F.silu(v, inplace=True)), x)
    check(f(lambda v: F.threshold_(v, 0.1, 9.0)), x)
    check(f(lambda v: F.celu_(v)), x)
    check(f(lambda v: F.selu_(v)), x)


def test_inplace_grad():
    # relu_ / leaky_relu_ on a non-leaf: backward goes through threshold_backward
    # and leaky_relu_backward with self_is_result=True
    x = _x((4, 5), torch.float32).requires_grad_()
    check(lambda t: F.relu(t * 2, inplace=True), x, grad=True)
    check(lambda t: F.leaky_relu(t * 2, 0.1, inplace=True), x, grad=True)
    check(lambda t: F.elu(t * 2, inplace=True), x, grad=True)
    check(lambda t: F.hardtanh(t * 2, inplace=True), x, grad=True)


def test_leaky_relu_inplace_negative_slope_raises():
    import torchneuron  # noqa: F401

    for dev in ("cpu", "neuron"):
        x = _x((3,), torch.float32).to(dev).requires_grad_()
        y = F.leaky_relu(x * 1, -0.5, inplace=True)
        with pytest.raises(RuntimeError, match="negative slope"):
            y.sum().backward() if dev == "cpu" else y.backward(torch.ones(3, device=dev))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8], ids=str)
def test_int_relu_family(dtype):
    x = torch.randint(-5 if dtype != torch.uint8 else 0, 9, (4, 5), dtype=dtype)
    check(F.relu, x)
    check(lambda t: F.threshold(t, 2, 7), x)
    check(lambda t: F.hardtanh(t, 1, 4), x)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_prelu(dtype):
    x = _x((3, 4, 5), dtype).requires_grad_()
    w = (torch.rand(4, dtype=torch.float64) * 0.5).to(dtype).requires_grad_()
    check(F.prelu, x, w, grad=True, **tol(dtype, "activation"))
    w1 = torch.tensor([0.25], dtype=dtype).requires_grad_()
    check(F.prelu, x, w1, grad=True, **tol(dtype, "activation"))
    check(F.prelu, _x((7,), dtype).requires_grad_(), w1, grad=True, **tol(dtype, "activation"))


# ---------------------------------------------------------------- softmax
SOFT = [
    ("softmax", lambda x, d: torch.softmax(x, d)),
    ("log_softmax", lambda x, d: torch.log_softmax(x, d)),
    ("softmin", lambda x, d: F.softmin(x, d)),
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("name,fn", SOFT, ids=[s[0] for s in SOFT])
def test_softmax(name, fn, dim, dtype):
    x = _x((3, 5, 7), dtype, scale=10).requires_grad_()
    check(lambda t: fn(t, dim), x, grad=True, **tol(dtype, "activation"))


@pytest.mark.parametrize("name,fn", SOFT, ids=[s[0] for s in SOFT])
def test_softmax_edge(name, fn):
    check(lambda t: fn(t, 1), _noncontig((4, 6), torch.float32).requires_grad_(), grad=True,
          **tol(torch.float32, "activation"))
    check(lambda t: fn(t, 0), torch.tensor(1.5).requires_grad_(), grad=True)
    check(lambda t: fn(t, -1), torch.tensor(1.5).requires_grad_(), grad=True)
    check(lambda t: fn(t, 1), torch.zeros(3, 0).requires_grad_(), grad=True)
    check(lambda t: fn(t, 0), torch.zeros(3, 0).requires_grad_(), grad=True)
    # large magnitudes (stability), infinities, a row of -inf
    big = torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -1e30, 0.0],
                        [-float("inf"), 0.0, 1.0], [-float("inf")] * 3,
                        [float("inf"), 0.0, 1.0]])
    check(lambda t: fn(t, 1), big)
    # 0-d: one row of one element (masked.softmax with a False mask gives a 0-d -inf)
    for v in (-float("inf"), float("inf"), float("nan"), -3.0):
        check(lambda t: fn(t, 0), torch.tensor(v).requires_grad_(), grad=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_softmax_half_to_float(dtype):
    x = _x((4, 9), dtype, scale=5).requires_grad_()
    check(lambda t: torch.softmax(t, 1, dtype=torch.float32), x, grad=True, **tol(torch.float32, "activation"))
    check(lambda t: torch.log_softmax(t, 0, dtype=torch.float32), x, grad=True,
          **tol(torch.float32, "activation"))
    # half_to_float=True (what CUDA's autocast path uses; CPU refuses it): compare with
    # the float32 computation, and the backward's result comes back in the half dtype
    import torchneuron
    from helpers import DEV, assert_same

    if dtype != torch.float16:  # like CUDA, half_to_float is for float16 only
        return
    xd = x.detach()
    g = torch.randn(4, 9)
    for op, bop, ref in [
        (torch.ops.aten._softmax, torch.ops.aten._softmax_backward_data, torch.softmax),
        (torch.ops.aten._log_softmax, torch.ops.aten._log_softmax_backward_data,
         torch.log_softmax),
    ]:
        with torchneuron.fallback_policy("error"):
            out = op(xd.to(DEV), 1, True)
            gin = bop(g.to(DEV), out, 1, dtype)
        exp = ref(xd.float(), 1)
        assert_same(out, exp, **tol(torch.float32, "activation"))
        assert_same(gin, bop(g, exp, 1, torch.float32).to(dtype), **tol(dtype, "activation"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_softmax_upcast_dtype(dtype):
    x = _x((4, 9), torch.float32, scale=3).requires_grad_()
    check(lambda t: torch.softmax(t, 1, dtype=torch.float64), x, grad=True)
    check(lambda t: torch.log_softmax(t, -1, dtype=dtype), x, grad=True)


def test_rrelu_training():
    import torchneuron
    from helpers import DEV

    x = _x((50, 40), torch.float32).to(DEV).requires_grad_()
    with torchneuron.fallback_policy("error"):
        y = F.rrelu(x, 0.1, 0.3, training=True)
        y.backward(torch.ones_like(y))
    x, y, g = x.detach().cpu(), y.detach().cpu(), x.grad.cpu()
    pos = x > 0
    assert torch.equal(y[pos], x[pos]) and torch.equal(g[pos], torch.ones_like(g[pos]))
    slope = y[~pos] / x[~pos]
    assert slope.min() >= 0.1 - 1e-6 and slope.max() <= 0.3 + 1e-6
    assert slope.std() > 0.03  # really random per element
    torch.testing.assert_close(g[~pos], slope)


def test_native_lowerings_used():
    """The activations run through their own lowerings, not decompositions."""
    import torchneuron

    torchneuron.reset_fallback_stats()
    x = _x((4, 4), torch.float32).requires_grad_()
    for _, fn in ACTS:
        check(fn, x, grad=True, **tol(torch.float32, "activation"))
    for _, fn in SOFT:
        check(lambda t: fn(t, 1), x, grad=True, **tol(torch.float32, "activation"))
    assert torchneuron.decomposition_stats() == {}

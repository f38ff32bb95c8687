"""Loss functions: forward and gradients against PyTorch's CPU kernels."""
import pytest
import torch
import torch.nn.functional as F

from helpers import check, check_raises, tol

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
REDS = ["none", "mean", "sum"]


def _x(shape, dtype=torch.float32, scale=2.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _t(shape, c, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, c, shape, generator=g)


# ---------------------------------------------------------------- nll / cross entropy
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weight"])
@pytest.mark.parametrize("ignore", [False, True], ids=["all", "ignore"])
def test_nll_loss(dtype, reduction, weighted, ignore):
    x = torch.log_softmax(_x((6, 5)), 1).to(dtype).requires_grad_()
    t = _t((6,), 5)
    kw = dict(reduction=reduction)
    if weighted:
        kw["weight"] = torch.rand(5, dtype=torch.float64).to(dtype) + 0.1
    if ignore:
        t[1] = t[4] = 2
        kw["ignore_index"] = 2
    w = kw.pop("weight", None)
    check(lambda a, t, w: F.nll_loss(a, t, weight=w, **kw), x, t, w, grad=True, **tol(dtype, "loss"))


@pytest.mark.parametrize("reduction", REDS)
def test_nll_loss_shapes(reduction):
    w = torch.rand(4) + 0.1

    def f(a, t, w=None):
        return F.nll_loss(a, t, weight=w, reduction=reduction)

    # 1-D input with a 0-d target
    check(f, _x((4,)).requires_grad_(), torch.tensor(2), grad=True)
    check(f, _x((4,)).requires_grad_(), torch.tensor(1), w, grad=True)
    # spatial (nll_loss2d) and higher-dimensional targets
    t2 = _t((2, 3, 5), 4)
    t2[0, 1, 2] = -100
    check(f, _x((2, 4, 3, 5)).requires_grad_(), t2, w, grad=True)
    check(f, _x((2, 4, 3, 2, 2)).requires_grad_(), _t((2, 3, 2, 2), 4), grad=True)
    # non-contiguous input and target, empty batch
    check(f, _x((4, 6)).t().requires_grad_(), _t((12,), 4)[::2], grad=True)
    check(f, _x((0, 4)).requires_grad_(), torch.zeros(0, dtype=torch.long), grad=True)


def test_nll_loss_all_ignored():
    x = _x((3, 4)).requires_grad_()
    t = torch.full((3,), -100)
    check(lambda a, t: F.nll_loss(a, t), x, t, grad=True)
    check(lambda a, t: F.nll_loss(a, t, reduction="sum"), x, t, grad=True)


def test_nll_loss_errors():
    import torchneuron  # noqa: F401

    for dev in ("cpu", "neuron"):
        with pytest.raises((RuntimeError, ValueError)):
            F.nll_loss(torch.randn(3, 4, device=dev), torch.zeros(4, dtype=torch.long, device=dev))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_indices(dtype, reduction, smoothing):
    x = _x((6, 5), dtype).requires_grad_()
    t = _t((6,), 5)
    t[2] = -100
    w = (torch.rand(5, dtype=torch.float64) + 0.2).to(dtype)
    check(lambda a, t: F.cross_entropy(a, t, reduction=reduction, label_smoothing=smoothing),
          x, t, grad=True, **tol(dtype, "loss"))
    check(lambda a, t, w: F.cross_entropy(a, t, weight=w, reduction=reduction,
                                          label_smoothing=smoothing), x, t, w, grad=True,
          **tol(dtype, "loss"))


@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_probs(reduction, smoothing):
    x = _x((4, 6)).requires_grad_()
    p = torch.softmax(_x((4, 6), seed=3), 1).requires_grad_()
    w = torch.rand(6) + 0.2
    check(lambda a, b: F.cross_entropy(a, b, reduction=reduction, label_smoothing=smoothing),
          x, p, grad=True)
    check(lambda a, b, w: F.cross_entropy(a, b, weight=w, reduction=reduction,
                                          label_smoothing=smoothing), x, p, w, grad=True)


def test_cross_entropy_spatial():
    x = _x((2, 3, 4, 5)).requires_grad_()
    t = _t((2, 4, 5), 3)
    check(lambda a, t: F.cross_entropy(a, t), x, t, grad=True)
    check(lambda a, t: F.cross_entropy(a, t, label_smoothing=0.1, reduction="none"), x, t,
          grad=True)


def test_nn_modules():
    x = _x((5, 7)).requires_grad_()
    t = _t((5,), 7)
    check(lambda a, t: torch.nn.CrossEntropyLoss(label_smoothing=0.05)(a, t), x, t, grad=True)
    check(lambda a, t: torch.nn.NLLLoss()(torch.log_softmax(a, 1), t), x, t, grad=True)


# ---------------------------------------------------------------- regression losses
REG = [
    ("mse", F.mse_loss),
    ("l1", F.l1_loss),
    ("smooth_l1", F.smooth_l1_loss),
    ("smooth_l1_beta", lambda a, b, **k: F.smooth_l1_loss(a, b, beta=0.5, **k)),
    ("smooth_l1_beta0", lambda a, b, **k: F.smooth_l1_loss(a, b, beta=0.0, **k)),
    ("huber", F.huber_loss),
    ("huber_delta", lambda a, b, **k: F.huber_loss(a, b, delta=0.3, **k)),
    ("soft_margin", lambda a, b, **k: F.soft_margin_loss(a, torch.sign(b.detach()), **k)),
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("name,fn", REG, ids=[r[0] for r in REG])
def test_regression(name, fn, reduction, dtype):
    a = _x((5, 6), dtype).requires_grad_()
    b = _x((5, 6), dtype, seed=2).requires_grad_()
    check(lambda x, y: fn(x, y, reduction=reduction), a, b, grad=True, **tol(dtype, "loss"))


@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("name,fn", REG, ids=[r[0] for r in REG])
def test_regression_edge(name, fn, reduction):
    # non-contiguous, 0-d, empty
    a = _x((6, 4)).t().requires_grad_()
    b = _x((4, 6), seed=2).requires_grad_()
    check(lambda x, y: fn(x, y, reduction=reduction), a, b, grad=True)
    check(lambda x, y: fn(x, y, reduction=reduction), torch.tensor(0.7).requires_grad_(),
          torch.tensor(-0.2).requires_grad_(), grad=True)
    # (PyTorch's meta kernels of these backward ops divide by numel: no empty 'mean' backward)
    empty_grad = not (reduction == "mean" and name.startswith(("mse", "smooth_l1", "huber")))
    check(lambda x, y: fn(x, y, reduction=reduction), torch.zeros(0, 3).requires_grad_(),
          torch.zeros(0, 3).requires_grad_(), grad=empty_grad)
    # exact kink points
    x = torch.tensor([0.0, 1.0, -1.0, 0.5, -0.5, 0.3, 2.0]).requires_grad_()
    check(lambda x, y: fn(x, y, reduction=reduction), x, torch.zeros(7), grad=True)
    check(lambda x, y: fn(x, y, reduction=reduction), x, torch.full((7,), 0.5), grad=True)


# ---------------------------------------------------------------- binary cross entropy
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", REDS)
def test_bce(dtype, reduction):
    p = torch.sigmoid(_x((4, 5))).to(dtype).requires_grad_()
    t = torch.rand(4, 5, dtype=torch.float64).to(dtype)
    w = torch.rand(5, dtype=torch.float64).to(dtype)
    check(lambda a, t: F.binary_cross_entropy(a, t, reduction=reduction), p, t, grad=True,
          **tol(dtype, "loss"))
    check(lambda a, t, w: F.binary_cross_entropy(a, t, weight=w, reduction=reduction), p, t, w,
          grad=True, **tol(dtype, "loss"))
    check(lambda a, t: F.binary_cross_entropy(a, t, reduction=reduction), p, t.requires_grad_(),
          grad=True, **tol(dtype, "loss"))
    # saturated probabilities: log clamped at -100
    q = torch.tensor([0.0, 1.0, 1e-30, 1 - 1e-7, 0.5], dtype=torch.float64).to(dtype)
    check(lambda a, t: F.binary_cross_entropy(a, t, reduction=reduction), q,
          torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0], dtype=dtype), **tol(dtype, "loss"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", REDS)
def test_bce_with_logits(dtype, reduction):
    x = _x((4, 5), dtype, scale=5).requires_grad_()
    t = torch.rand(4, 5, dtype=torch.float64).to(dtype).requires_grad_()
    w = torch.rand(5, dtype=torch.float64).to(dtype)
    pw = (torch.rand(5, dtype=torch.float64) * 3).to(dtype)
    tols = tol(dtype, "loss")
    check(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction=reduction), x, t,
          grad=True, **tols)
    check(lambda a, b, w, pw: F.binary_cross_entropy_with_logits(
        a, b, weight=w, pos_weight=pw, reduction=reduction), x, t, w, pw, grad=True, **tols)
    check(lambda a, b, pw: F.binary_cross_entropy_with_logits(
        a, b, pos_weight=pw, reduction=reduction), x, t, pw, grad=True, **tols)
    big = torch.tensor([100.0, -100.0, 0.0, 30.0, -30.0], dtype=dtype)
    check(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction=reduction), big,
          torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0], dtype=dtype), **tols)


# ---------------------------------------------------------------- kl_div and composites
@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum", "batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(dtype, reduction, log_target):
    x = torch.log_softmax(_x((4, 5), dtype), 1).requires_grad_()
    p = torch.softmax(_x((4, 5), dtype, seed=4), 1)
    p[0, 0] = 0.0
    t = (p.log() if log_target else p).requires_grad_()
    check(lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=log_target), x, t,
          grad=True, **tol(dtype, "loss"))


COMPOSITE = [
    ("margin_ranking", lambda a, b, y, **k: F.margin_ranking_loss(a, b, y, margin=0.2, **k)),
    ("hinge_embedding", lambda a, b, y, **k: F.hinge_embedding_loss(a, y, margin=0.5, **k)),
    ("poisson_nll", lambda a, b, y, **k: F.poisson_nll_loss(a, b.abs(), **k)),
    ("poisson_nll_full", lambda a, b, y, **k: F.poisson_nll_loss(a.exp(), b.abs() + 1,
                                                                 log_input=False, full=True, **k)),
    ("gaussian_nll", lambda a, b, y, **k: F.gaussian_nll_loss(a, b, a.abs() + 0.5, **k)),
    ("multilabel_soft_margin", lambda a, b, y, **k: F.multilabel_soft_margin_loss(
        a, (y > 0).float(), **k)),
]


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("name,fn", COMPOSITE, ids=[c[0] for c in COMPOSITE])
def test_composite_losses(name, fn, reduction):
    a = _x((6, 3)).requires_grad_()
    b = _x((6, 3), seed=2).requires_grad_()
    y = torch.sign(_x((6, 3), seed=5))
    check(lambda x1, x2, y: fn(x1, x2, y, reduction=reduction), a, b, y, grad=True, atol=1e-5,
          rtol=1e-5)


# ---------------------------------------------------------------- margin losses
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin(dtype, reduction, p):
    x = _x((5, 4), dtype, scale=0.5).requires_grad_()
    t = _t((5,), 4)
    w = torch.rand(4, dtype=dtype) + 0.5
    check(lambda a, t: F.multi_margin_loss(a, t, p=p, reduction=reduction), x, t, grad=True,
          **tol(dtype, "loss"))
    check(lambda a, t, w: F.multi_margin_loss(a, t, p=p, margin=0.7, weight=w,
                                              reduction=reduction), x, t, w, grad=True,
          **tol(dtype, "loss"))
    # 1-D and 0-D inputs: PyTorch's meta kernel gives shape [1] for reduction='none' where
    # the CPU kernel gives [] (the device gives the CPU's: each check compares shapes)
    for shape, target in (((4,), torch.tensor(2)), ((), torch.tensor(0))):
        check(lambda a, t: F.multi_margin_loss(a, t, p=p, reduction=reduction),
              _x(shape, dtype, scale=0.5).requires_grad_(), target, grad=True,
              **tol(dtype, "loss"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("reduction", REDS)
def test_multilabel_margin(dtype, reduction):
    x = _x((4, 5), dtype, scale=0.5).requires_grad_()
    t = torch.tensor([[3, 0, -1, 1, 2], [1, 2, 3, 4, 0], [-1, 0, 0, 0, 0], [2, 2, -1, 4, 4]])
    check(lambda a, t: F.multilabel_margin_loss(a, t, reduction=reduction), x, t, grad=True,
          **tol(dtype, "loss"))
    for shape, target in (((4,), torch.tensor([1, 3, -1, 0])), ((), torch.tensor(0))):
        check(lambda a, t: F.multilabel_margin_loss(a, t, reduction=reduction),  # see above
              _x(shape, dtype, scale=0.5).requires_grad_(), target, grad=True,
              **tol(dtype, "loss"))


# ---------------------------------------------------------------- ctc_loss
def _ctc_case(T=14, N=4, C=6, S=5, dtype=torch.float32, seed=0):
    lp = torch.log_softmax(_x((T, N, C), torch.float64, seed=seed), -1).to(dtype).requires_grad_()
    g = torch.Generator().manual_seed(seed + 7)
    targets = torch.randint(1, C, (N, S), generator=g)
    targets[0, 1] = targets[0, 0]  # a repeated label: no skip transition between them
    input_lengths = [T, T - 3, 6, 0][:N]
    target_lengths = [S, 3, 0, 0][:N]
    return lp, targets, input_lengths, target_lengths


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("zero_infinity", [False, True], ids=["inf", "zero_inf"])
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
@pytest.mark.parametrize("lengths_as", ["tensor", "list"])
def test_ctc_loss(dtype, reduction, zero_infinity, layout, lengths_as):
    lp, targets, il, tl = _ctc_case(dtype=dtype)
    if layout == "concatenated":
        targets = torch.cat([targets[b, :n] for b, n in enumerate(tl)])
    if lengths_as == "tensor":
        il, tl = torch.tensor(il), torch.tensor(tl)
    check(lambda lp, t, il, tl: F.ctc_loss(lp, t, il, tl, reduction=reduction,
                                           zero_infinity=zero_infinity),
          lp, targets, il, tl, grad=True, **tol(dtype, "loss"))


def test_ctc_loss_impossible_alignment_and_empty_inputs():
    # a target longer than its input: infinite loss (zero with zero_infinity), and the
    # gradient of that element is NaN/garbage-free exactly as CPU's
    lp = torch.log_softmax(_x((3, 3, 4)), -1).requires_grad_()
    targets = torch.tensor([[1, 2, 1, 2], [1, 1, 0, 0], [3, 0, 0, 0]])
    for zi in (False, True):
        check(lambda lp, t: F.ctc_loss(lp, t, [3, 3, 0], [4, 2, 1], reduction="none",
                                       zero_infinity=zi), lp, targets, grad=True, **tol(torch.float32, "loss"))
    check(lambda lp, t: torch.ops.aten._ctc_loss(lp, t, [3, 2, 1], [2, 1, 0], 0, False)[0],
          lp, targets.int(), grad=True, **tol(torch.float32, "loss"))


def test_ctc_loss_other_blank_and_unbatched():
    lp, targets, il, tl = _ctc_case(N=3)
    targets = targets.clamp(max=4)  # labels 1..4, blank 5
    check(lambda lp, t: F.ctc_loss(lp, t, il[:3], tl[:3], blank=5), lp, targets, grad=True,
          **tol(torch.float32, "loss"))
    one = torch.log_softmax(_x((9, 5)), -1).requires_grad_()
    check(lambda lp, t: F.ctc_loss(lp, t, torch.tensor(9), torch.tensor(3)), one,
          torch.tensor([2, 2, 4]), grad=True, **tol(torch.float32, "loss"))


def test_ctc_loss_module_training_step_natively():
    # wav2vec2-style: a linear head over frames, CTCLoss, a few SGD steps
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 6)
    frames = torch.randn(10, 2, 8)
    targets, il, tl = torch.tensor([[1, 2, 3], [4, 4, 0]]), torch.tensor([10, 8]), torch.tensor([3, 2])

    def train(model, dev):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for _ in range(3):
            loss = torch.nn.CTCLoss(zero_infinity=True)(
                model(frames.to(dev)).log_softmax(-1), targets.to(dev), il.to(dev), tl.to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    import copy

    from helpers import native_only
    ref = train(copy.deepcopy(head), "cpu")
    with native_only():
        got = train(copy.deepcopy(head).to("neuron"), "neuron")
    assert got == pytest.approx(ref, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("case", ["half", "short_targets", "blank", "too_long_input",
                                  "lengths_size", "float_lengths"])
def test_ctc_loss_errors_like_cpu(case):
    lp = torch.log_softmax(_x((5, 2, 4)), -1)
    t = torch.tensor([[1, 2], [1, 1]])
    call = {
        "half": lambda lp, t: F.ctc_loss(lp.half(), t, [5, 5], [2, 2]),
        "short_targets": lambda lp, t: torch.ops.aten._ctc_loss(lp, t.short(), [5, 5], [2, 2]),
        "blank": lambda lp, t: F.ctc_loss(lp, t, [5, 5], [2, 2], blank=4),
        "too_long_input": lambda lp, t: F.ctc_loss(lp, t, [6, 5], [2, 2]),
        "lengths_size": lambda lp, t: F.ctc_loss(lp, t, [5], [2, 2]),
        "float_lengths": lambda lp, t: torch.ops.aten._ctc_loss.Tensor(
            lp, t, torch.tensor([5.0, 5.0]), torch.tensor([2, 2])),
    }[case]
    check_raises(call, lp, t, native=False)


@pytest.mark.parametrize("weight_dtype", [torch.float16, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4, 4), (0, 0)])
def test_nll_loss_weight_of_another_dtype_raises_like_cpu(shape, weight_dtype):
    """The CPU reads the class weights as the input's scalar type: "expected scalar type
    Float but found Half" (module_db's nn.NLLLoss error input; the meta kernel accepts it)."""
    c = shape[1]
    x = torch.randn(*shape)
    t = torch.zeros((shape[0],) + shape[2:], dtype=torch.long)
    check_raises(torch.nn.functional.nll_loss, x, t, weight=torch.ones(c, dtype=weight_dtype))

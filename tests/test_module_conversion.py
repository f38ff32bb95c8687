"""Moving modules to the device keeps Parameter objects, so weight ties and optimizers
built before `.to("neuron")` survive, exactly as CPU -> CUDA does (nn.Module._apply
assigns `param.data` when `torch._has_compatible_shallow_copy_type` holds).

Every test runs the same program with the target "cpu" (what CUDA's documented
behaviour amounts to: the conversion is in place) and with "neuron", and compares."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize

from helpers import DEV, assert_same, native_only

TARGETS = ["cpu", "neuron"]


class TiedLM(nn.Module):
    """GPT-2's wte/lm_head tie."""

    def __init__(self, vocab=17, dim=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.mix(self.emb(ids))))


def _ids(n=12, vocab=17):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(1))


def _train(model, opt, target, steps=4):
    ids = _ids().to(target)
    losses = []
    for _ in range(steps):
        logits = model(ids[:-1])
        loss = F.cross_entropy(logits, ids[1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_shallow_copy_rule_matches_cuda():
    # CUDA's rule: any two dense strided tensors on dense backends are compatible
    cpu, dev = torch.zeros(2), torch.zeros(2, device=DEV)
    assert torch._has_compatible_shallow_copy_type(cpu, dev)
    assert torch._has_compatible_shallow_copy_type(dev, cpu)
    assert torch._has_compatible_shallow_copy_type(dev, torch.zeros(3, 4, device=DEV,
                                                                    dtype=torch.float64))
    # meta and sparse are not dense backends (CUDA converts those into new Parameters too)
    meta = torch.zeros(2, device="meta")
    assert torch._has_compatible_shallow_copy_type(meta, dev) == \
        torch._has_compatible_shallow_copy_type(meta, cpu) == False  # noqa: E712
    sparse = torch.zeros(2).to_sparse()
    assert torch._has_compatible_shallow_copy_type(sparse, dev) == \
        torch._has_compatible_shallow_copy_type(sparse, cpu) == False  # noqa: E712
    # `.data =` across the two devices
    p = nn.Parameter(torch.ones(3))
    p.data = torch.full((3,), 2.0, device=DEV)
    assert p.device == DEV and isinstance(p, nn.Parameter)
    assert_same(p, torch.full((3,), 2.0))


@pytest.mark.parametrize("target", TARGETS)
def test_tied_weights_survive_to_and_train_like_cpu(target):
    torch.manual_seed(0)
    model = TiedLM()
    ref = copy.deepcopy(model)
    params_before = [id(p) for p in model.parameters()]
    model.to(target)
    assert model.head.weight is model.emb.weight
    assert [id(p) for p in model.parameters()] == params_before
    assert len(list(model.parameters())) == 3  # emb (= head), mix.weight, mix.bias
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.05)
    with native_only(target == "neuron"):
        losses = _train(model, opt, target)
    ref_losses = _train(ref, ref_opt, "cpu")
    assert losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    assert model.head.weight is model.emb.weight
    for (n, p), (_, rp) in zip(model.named_parameters(), ref.named_parameters()):
        assert_same(p, rp.detach(), atol=1e-5, rtol=1e-5, msg=n)


@pytest.mark.parametrize("target", TARGETS)
def test_parameter_shared_by_three_modules(target):
    shared = nn.Parameter(torch.randn(4, 4))
    mods = nn.ModuleList(nn.Linear(4, 4, bias=False) for _ in range(3))
    for m in mods:
        m.weight = shared
    mods.to(target)
    assert all(m.weight is shared for m in mods)
    assert shared.device.type == target
    x = torch.randn(2, 4)
    y = x.to(target)
    for m in mods:
        y = m(y)
    y.sum().backward()
    w = shared.detach().cpu().clone().requires_grad_(True)
    yr = x
    for _ in range(3):
        yr = yr @ w.t()
    yr.sum().backward()
    assert_same(y, yr.detach(), atol=1e-5, rtol=1e-5)
    assert_same(shared.grad, w.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_optimizer_built_before_to(target):
    torch.manual_seed(0)
    model = TiedLM()
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    model.to(target)  # after the optimizer: it must hold the moved parameters
    held = opt.param_groups[0]["params"]
    assert all(a is b for a, b in zip(held, model.parameters()))
    assert all(p.device.type == target for p in held)
    losses = _train(model, opt, target)
    ref_losses = _train(ref, torch.optim.SGD(ref.parameters(), lr=0.5, momentum=0.9), "cpu")
    assert losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    assert losses[-1] < losses[0]


def test_neuron_method_dtype_and_back_keep_identity():
    model = TiedLM()
    ids = [id(p) for p in model.parameters()]
    model.neuron()
    assert model.emb.weight.device == DEV
    model.to(torch.float64)
    assert model.emb.weight.dtype == torch.float64 and model.head.weight is model.emb.weight
    model.half()
    assert model.mix.weight.dtype == torch.float16
    model.cpu().float()
    assert model.emb.weight.device.type == "cpu"
    assert [id(p) for p in model.parameters()] == ids
    assert model.head.weight is model.emb.weight


@pytest.mark.parametrize("target", TARGETS)
def test_gradients_move_with_their_parameters(target):
    model = TiedLM()
    model(_ids()).sum().backward()
    grads = {n: (id(p.grad), p.grad.clone()) for n, p in model.named_parameters()}
    model.to(target)
    for n, p in model.named_parameters():
        assert p.grad.device.type == target
        assert id(p.grad) == grads[n][0]
        assert_same(p.grad, grads[n][1])


@pytest.mark.parametrize("target", TARGETS)
def test_to_empty_from_cpu_keeps_ties(target):
    model = TiedLM()
    ids = [id(p) for p in model.parameters()]
    model.to_empty(device=target)
    assert model.head.weight is model.emb.weight
    assert [id(p) for p in model.parameters()] == ids
    assert model.emb.weight.device.type == target


def test_to_empty_from_meta_matches_cpu_target():
    # meta is not a dense backend: CPU and CUDA build new Parameters (the tie must be
    # restored by the caller, e.g. transformers' tie_weights); neuron does the same
    def build():
        with torch.device("meta"):
            return TiedLM()

    results = {}
    for target in TARGETS:
        m = build()
        before = [id(p) for p in m.parameters()]
        m.to_empty(device=target)
        results[target] = ([id(p) for p in m.parameters()] == before,
                           m.head.weight is m.emb.weight,
                           m.emb.weight.device.type)
    assert results["neuron"][:2] == results["cpu"][:2]
    assert results["neuron"][2] == "neuron"


@pytest.mark.parametrize("target", TARGETS)
def test_swap_tensors_conversion(target):
    # torch.__future__'s swap path (what wrapper subclasses use): same objects, moved
    prev = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        lin = nn.Linear(3, 2)
        w = lin.weight
        ref = w.detach().clone()
        lin.to(target)
        assert lin.weight is w and w.device.type == target
        assert_same(lin.weight.detach(), ref)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(prev)


def test_state_dict_round_trip():
    torch.manual_seed(0)
    src = TiedLM()
    dev = TiedLM().to(DEV)
    missing = dev.load_state_dict(src.state_dict())
    assert not missing.missing_keys and not missing.unexpected_keys
    assert dev.head.weight is dev.emb.weight
    sd = dev.state_dict()
    assert sd["emb.weight"].device == DEV
    assert sd["emb.weight"].data_ptr() == sd["head.weight"].data_ptr()
    back = TiedLM()
    back.load_state_dict({k: v.cpu() for k, v in sd.items()})
    ids = _ids()
    assert_same(dev(ids.to(DEV)), src(ids).detach(), atol=1e-5, rtol=1e-5)
    assert_same(back(ids).detach(), src(ids).detach())


class _Symmetric(nn.Module):
    def forward(self, w):
        return w.triu() + w.triu(1).transpose(0, 1)


@pytest.mark.parametrize("target", TARGETS)
def test_parametrize_survives_to(target):
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    parametrize.register_parametrization(lin, "weight", _Symmetric())
    ref = copy.deepcopy(lin)
    original = lin.parametrizations.weight.original
    lin.to(target)
    assert lin.parametrizations.weight.original is original
    assert original.device.type == target
    x = torch.randn(3, 4)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):
        for m, o, xx in ((lin, opt, x.to(target)), (ref, ref_opt, x)):
            o.zero_grad()
            m(xx).pow(2).sum().backward()
            o.step()
    assert_same(lin.weight.detach(), ref.weight.detach(), atol=1e-5, rtol=1e-5)
    w = lin.weight.detach().cpu()
    assert_same(w, w.t())


LAZY = {
    "LazyLinear": (lambda: torch.nn.LazyLinear(3), (2, 4)),
    "LazyConv1d": (lambda: torch.nn.LazyConv1d(4, 3), (2, 3, 9)),
    "LazyConvTranspose2d": (lambda: torch.nn.LazyConvTranspose2d(2, 3), (1, 3, 5, 5)),
    "LazyBatchNorm1d": (lambda: torch.nn.LazyBatchNorm1d(), (4, 5)),  # buffers too
    "Sequential": (lambda: torch.nn.Sequential(torch.nn.LazyConv2d(2, 3), torch.nn.Flatten(),
                                               torch.nn.LazyLinear(2)), (1, 3, 6, 6)),
}


@pytest.mark.parametrize("name", list(LAZY))
def test_lazy_modules_move_and_initialize_on_the_device(name):
    """.to("neuron") moves uninitialized parameters and buffers (was: their `shape`
    raised inside the copy kernel, and buffers failed as_subclass); the first forward
    materializes them on the device with CPU's shapes and dtypes, the same seed gives the
    same values, and with CPU's values the module computes what CPU computes."""
    make, shape = LAZY[name]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    ref = make()
    expected_first = ref(x)
    inits = []
    for _ in range(2):
        torch.manual_seed(7)
        m = make().to(DEV)
        assert all(p.device == DEV for p in m.parameters())
        y = m(x.to(DEV))
        assert y.device == DEV and y.shape == expected_first.shape
        inits.append({k: v.cpu() for k, v in m.state_dict().items()})
    cpu_sd = ref.state_dict()
    assert inits[0].keys() == cpu_sd.keys()
    for k, v in cpu_sd.items():
        assert inits[0][k].shape == v.shape and inits[0][k].dtype == v.dtype, k
        assert torch.equal(inits[0][k], inits[1][k]), k
    m.load_state_dict(cpu_sd)
    ref2 = make()
    ref2(x)
    ref2.load_state_dict(cpu_sd)
    assert_same(m(x.to(DEV)), ref2(x), atol=1e-5, rtol=1e-5)


def test_tensor_subclass_moves_to_the_device():
    """A tensor subclass keeps its class through .to("neuron") (torch's __torch_function__
    re-wraps the result with as_subclass, whose alias must not be a Python-made tensor)."""
    class Tagged(torch.Tensor):
        pass

    t = torch.arange(4.0).as_subclass(Tagged)
    d = t.to(DEV)
    assert type(d) is Tagged and d.device == DEV
    assert type(d + 1) is Tagged and torch.equal((d + 1).cpu(), (t + 1).as_subclass(torch.Tensor))

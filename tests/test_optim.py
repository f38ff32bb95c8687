"""Training on the neuron device matches CPU step for step, natively.

A Linear+ReLU MLP with MSE loss is trained on CPU and on the device from the
same initial weights and data; after every optimizer step the parameters (and
optimizer state) must agree within float32 round-off.  Everything on the device
runs under fallback policy "error".
"""
import copy

import pytest
import torch
import torch.nn.functional as F

from torchneuron import dispatch
from helpers import DEV, native_only

STEPS = 20
ATOL, RTOL = 2e-5, 2e-4


def _model():
    g = torch.Generator().manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return m


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(32, 6, generator=g), torch.randn(32, 3, generator=g)


def _close(dev_params, cpu_params, msg):
    for i, (a, b) in enumerate(zip(dev_params, cpu_params)):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), atol=ATOL, rtol=RTOL,
                                   msg=lambda m: f"{msg} param {i}: {m}")


CONFIGS = [
    ("SGD", dict(lr=0.05)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.1)),
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=1e-2, weight_decay=1e-2, amsgrad=True, maximize=True)),
    ("AdamW", dict(lr=1e-2)),
    ("AdamW", dict(lr=1e-2, amsgrad=True, betas=(0.8, 0.95))),
    ("RMSprop", dict(lr=1e-2)),
    ("RMSprop", dict(lr=2e-3, momentum=0.5, centered=True, weight_decay=1e-3)),  # chaotic at 1e-2
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=1e-2, weight_decay=1e-2)),
]
MODES = ["foreach", "default", "forloop", "fused"]
FUSED = {"SGD", "Adam", "AdamW", "Adagrad"}


def _train(name, kw, mode, clip=None):
    if mode == "fused" and name not in FUSED:
        pytest.skip(f"{name} has no fused implementation")
    extra = {"foreach": dict(foreach=True), "default": {}, "forloop": dict(foreach=False),
             "fused": dict(fused=True)}[mode]
    m_cpu = _model()
    m_dev = copy.deepcopy(m_cpu).to(DEV)
    o_cpu = getattr(torch.optim, name)(m_cpu.parameters(), **kw, **extra)
    o_dev = getattr(torch.optim, name)(m_dev.parameters(), **kw, **extra)
    x, y = _data()
    xd, yd = x.to(DEV), y.to(DEV)
    for step in range(STEPS):
        for m, o, xx, yy, dev in ((m_cpu, o_cpu, x, y, False), (m_dev, o_dev, xd, yd, True)):
            with native_only(dev):
                o.zero_grad()
                loss = F.mse_loss(m(xx), yy)
                loss.backward()
                if clip == "norm":
                    torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
                elif clip == "value":
                    torch.nn.utils.clip_grad_value_(m.parameters(), 0.05)
                o.step()
        _close(m_dev.parameters(), m_cpu.parameters(), f"{name} {kw} {mode} step {step}")
    # optimizer state too
    for (pc, sc), (pd, sd) in zip(o_cpu.state.items(), o_dev.state.items()):
        for k, v in sc.items():
            if isinstance(v, torch.Tensor):
                torch.testing.assert_close(sd[k].detach().cpu(), v, atol=ATOL, rtol=RTOL,
                                           msg=lambda m: f"state {k}: {m}")
    return m_dev, o_dev


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,kw", CONFIGS, ids=[f"{c[0]}-{i}" for i, c in enumerate(CONFIGS)])
def test_optimizer_matches_cpu(name, kw, mode):
    _train(name, kw, mode)


@pytest.mark.parametrize("clip", ["norm", "value"])
def test_clip_grad(clip):
    _train("SGD", dict(lr=0.1, momentum=0.9), "foreach", clip=clip)


def test_clip_grad_norm_value():
    m_cpu = _model()
    m_dev = copy.deepcopy(m_cpu).to(DEV)
    x, y = _data()
    F.mse_loss(m_cpu(x), y).backward()
    with native_only():
        F.mse_loss(m_dev(x.to(DEV)), y.to(DEV)).backward()
        for norm_type in (2.0, 1.0, float("inf")):
            for foreach in (True, False):
                pc, pd = [], []
                for a, b in zip(m_cpu.parameters(), m_dev.parameters()):
                    pc.append(a.detach().clone().requires_grad_())
                    pc[-1].grad = a.grad.clone()
                    pd.append(b.detach().clone().requires_grad_())
                    pd[-1].grad = b.grad.clone()
                tc = torch.nn.utils.clip_grad_norm_(pc, 0.1, norm_type=norm_type, foreach=foreach)
                td = torch.nn.utils.clip_grad_norm_(pd, 0.1, norm_type=norm_type, foreach=foreach)
                assert td.device.type == "neuron"
                torch.testing.assert_close(td.cpu(), tc, atol=1e-6, rtol=1e-5)
                _close([p.grad for p in pd], [p.grad for p in pc], f"clip_grad_norm_ {norm_type} {foreach}")
                torch.nn.utils.clip_grad_value_(pc, 0.01, foreach=foreach)
                torch.nn.utils.clip_grad_value_(pd, 0.01, foreach=foreach)
                _close([p.grad for p in pd], [p.grad for p in pc], f"clip_grad_value_ {foreach}")


def test_foreach_is_default_and_one_call_per_line():
    """On the device, Adam's default path is the foreach one: a step is a handful of
    executable calls, independent of the number of parameters."""
    m = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(8)]).to(DEV)
    o = torch.optim.Adam(m.parameters(), lr=1e-3)
    x = torch.randn(2, 4, device=DEV)
    with native_only():
        for _ in range(2):
            o.zero_grad()
            m(x).sum().backward()
            o.step()
        hits0 = dict(dispatch.cache_hits)
        o.step()
    calls = {k: v - hits0.get(k, 0) for k, v in dispatch.cache_hits.items() if v != hits0.get(k, 0)}
    assert any(k.startswith("aten::_foreach_") for k in calls), calls
    assert sum(calls.values()) <= 12, calls  # one call per line of the optimizer, not per parameter


def test_lr_change_does_not_recompile():
    m_dev = _model().to(DEV)
    o = torch.optim.SGD(m_dev.parameters(), lr=0.1, momentum=0.9)
    x, y = _data()
    xd, yd = x.to(DEV), y.to(DEV)
    with native_only():
        for step in range(4):
            o.zero_grad()
            F.mse_loss(m_dev(xd), yd).backward()
            o.step()
            if step == 1:
                misses = sum(dispatch.cache_misses.values())
            for g in o.param_groups:
                g["lr"] *= 0.5
    assert sum(dispatch.cache_misses.values()) == misses


# ---------------------------------------------------------------- GradScaler
@pytest.mark.parametrize("opt", ["SGD", "Adam"])
@pytest.mark.parametrize("fused", [False, True])
def test_grad_scaler(opt, fused):
    """GradScaler alone (no autocast): scale, unscale, skip the step on an inf gradient,
    back off and grow the scale, exactly as on CPU."""
    m_cpu = _model()
    m_dev = copy.deepcopy(m_cpu).to(DEV)
    kw = dict(lr=0.01) if opt == "Adam" else dict(lr=0.05, momentum=0.9)
    if fused:
        kw["fused"] = True
    o_cpu = getattr(torch.optim, opt)(m_cpu.parameters(), **kw)
    o_dev = getattr(torch.optim, opt)(m_dev.parameters(), **kw)
    s_cpu = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12, growth_interval=3)
    s_dev = torch.amp.GradScaler(DEV.type, init_scale=2.0 ** 12, growth_interval=3)
    x, y = _data()
    xd, yd = x.to(DEV), y.to(DEV)
    scales = []
    for step in range(10):
        before = [p.detach().cpu().clone() for p in m_dev.parameters()]
        for m, o, s, xx, yy, dev in ((m_cpu, o_cpu, s_cpu, x, y, False),
                                     (m_dev, o_dev, s_dev, xd, yd, True)):
            with native_only(dev):
                o.zero_grad()
                s.scale(F.mse_loss(m(xx), yy)).backward()
                if step in (4, 5):
                    with torch.no_grad():
                        m[0].weight.grad[0, 0] = float("inf") if step == 4 else float("nan")
                s.step(o)
                s.update()
        scales.append(s_dev.get_scale())
        assert s_dev.get_scale() == s_cpu.get_scale(), (step, s_dev.get_scale(), s_cpu.get_scale())
        _close(m_dev.parameters(), m_cpu.parameters(), f"scaler step {step}")
        if step in (4, 5):  # skipped
            for b, p in zip(before, m_dev.parameters()):
                assert torch.equal(b, p.detach().cpu())
    assert scales[4] == scales[3] / 2 and scales[5] == scales[4] / 2
    assert max(scales) > 2.0 ** 12  # grew after growth_interval clean steps
    assert s_dev.state_dict()["_growth_tracker"] == s_cpu.state_dict()["_growth_tracker"]


def test_grad_scaler_unscale_and_clip():
    m_cpu = _model()
    m_dev = copy.deepcopy(m_cpu).to(DEV)
    o_cpu = torch.optim.SGD(m_cpu.parameters(), lr=0.1)
    o_dev = torch.optim.SGD(m_dev.parameters(), lr=0.1)
    s_cpu = torch.amp.GradScaler("cpu", init_scale=1024.0)
    s_dev = torch.amp.GradScaler(DEV.type, init_scale=1024.0)
    x, y = _data()
    for m, o, s, xx, yy, dev in ((m_cpu, o_cpu, s_cpu, x, y, False),
                                 (m_dev, o_dev, s_dev, x.to(DEV), y.to(DEV), True)):
        with native_only(dev):
            s.scale(F.mse_loss(m(xx), yy)).backward()
            s.unscale_(o)
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.1)
            s.step(o)
            s.update()
    _close(m_dev.parameters(), m_cpu.parameters(), "unscale+clip")


OTHERS = [
    ("NAdam", dict(lr=1e-2), None), ("RAdam", dict(lr=1e-2), None),
    ("Adamax", dict(lr=1e-2), None), ("ASGD", dict(lr=1e-2), None),
    ("Adadelta", dict(lr=1.0), None), ("Rprop", dict(lr=1e-2), None),
    # capturable: the step count lives on the device; CPU runs the same math uncapturable
    ("Adam", dict(lr=1e-2, capturable=True), dict(lr=1e-2)),
    ("AdamW", dict(lr=1e-2, capturable=True, amsgrad=True), dict(lr=1e-2, amsgrad=True)),
]


@pytest.mark.parametrize("name,kw,cpu_kw", OTHERS,
                         ids=[f"{o[0]}{'-capturable' if o[2] else ''}" for o in OTHERS])
def test_other_optimizers(name, kw, cpu_kw):
    m_cpu = _model()
    m_dev = copy.deepcopy(m_cpu).to(DEV)
    o_cpu = getattr(torch.optim, name)(m_cpu.parameters(), **(cpu_kw or kw))
    o_dev = getattr(torch.optim, name)(m_dev.parameters(), **kw)
    x, y = _data()
    xd, yd = x.to(DEV), y.to(DEV)
    for step in range(10):
        for m, o, xx, yy, dev in ((m_cpu, o_cpu, x, y, False), (m_dev, o_dev, xd, yd, True)):
            with native_only(dev):
                o.zero_grad()
                F.mse_loss(m(xx), yy).backward()
                o.step()
        _close(m_dev.parameters(), m_cpu.parameters(), f"{name} {kw} step {step}")


# LBFGS runs up to 20 inner iterations per step, with a line search: float32 rounding
# grows over a few steps, so the device is judged against a float64 run, next to the
# CPU's float32 run (issue 35 saw parameters 1.4e-2 away from the CPU's float32 run).
@pytest.mark.parametrize("kwargs", [{}, {"lr": 0.1}, {"tolerance_grad": 1e-5},
                                    {"line_search_fn": "strong_wolfe"}],
                         ids=["default", "lr", "tolerance_grad", "strong_wolfe"])
def test_lbfgs_is_as_close_to_float64_as_the_cpu(kwargs):
    def run(device, dtype):
        g = torch.Generator().manual_seed(0)
        w, b, x, v = (torch.randn(s, generator=g, dtype=torch.float64).to(dtype).to(device)
                      for s in ((10, 5), (10,), (8, 5), (10,)))
        w.requires_grad_()
        b.requires_grad_()
        opt = torch.optim.LBFGS([w, b], **kwargs)

        def closure():
            opt.zero_grad()
            loss = (torch.tanh(x @ w.t() + b) @ v - 1).pow(2).sum()
            loss.backward()
            return loss

        for _ in range(4):
            opt.step(closure)
        return torch.cat([w.detach().cpu().double().flatten(), b.detach().cpu().double()])

    exact = run("cpu", torch.float64)
    cpu_err = (run("cpu", torch.float32) - exact).abs().max().item()
    dev_err = (run(DEV, torch.float32) - exact).abs().max().item()
    assert dev_err <= 8 * max(cpu_err, 1e-6), (dev_err, cpu_err)

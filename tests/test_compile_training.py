"""Compiled training steps (forward, backward, optimizer.step in one torch.compile)
against the same steps run eagerly on the neuron device, same seed (dropout included)."""
import torch

from helpers import DEV, assert_same, native_only
from torchneuron import compile as tnc


def _run(make_model, step, batches, compiled, lr=2e-3):
    torch.manual_seed(0)
    model = make_model().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    fn = torch.compile(step, backend="neuron") if compiled else step
    losses = []
    with native_only():
        for x, y in batches:
            losses.append(fn(model, opt, x.to(DEV), y.to(DEV)).item())
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return losses, state


def _compare(eager, comp, loss_tol, param_tol, noise_only=()):
    le, se = eager
    lc, sc = comp
    for a, b in zip(lc, le):
        assert abs(a - b) <= loss_tol * max(1.0, abs(b)), (lc, le)
    assert se.keys() == sc.keys()
    for k in se:
        if k in noise_only:
            continue
        assert_same(sc[k], se[k], atol=param_tol, rtol=param_tol, msg=k)


def test_digits_cnn_training_step_matches_eager():
    from torchneuron.demo import DigitsCNN, _step

    g = torch.Generator().manual_seed(1)
    batches = [(torch.rand(32, 1, 8, 8, generator=g), torch.randint(0, 10, (32,), generator=g))
               for _ in range(6)]
    tnc.reset_stats()
    comp = _run(DigitsCNN, _step, batches, compiled=True)
    eager = _run(DigitsCNN, _step, batches, compiled=False)
    # dropout masks, BatchNorm statistics and AdamW's state all follow eager.  conv1's
    # bias feeds a BatchNorm, which cancels it: its gradient is rounding noise, which
    # Adam normalises to steps of +-lr, so it is not comparable between any two backends
    _compare(eager, comp, loss_tol=1e-4, param_tol=2e-3, noise_only={"conv1.bias"})
    assert comp[0][-1] < comp[0][0]
    s = tnc.stats()
    assert s["compilations"] >= 3  # forward, backward, optimizer step
    assert s["recompilations"] == 0
    assert s["split_graphs"] == 0


def test_small_gpt_training_step_matches_eager():
    from torchneuron.models.gpt import GPT, GPTConfig, synthetic_batches, train_step

    cfg = GPTConfig(vocab_size=32, block_size=16, n_layer=1, n_head=2, n_embd=32, dropout=0.1)
    batches = synthetic_batches(8, 4, 16, 32, seed=3)
    tnc.reset_stats()
    comp = _run(lambda: GPT(cfg), train_step, batches, compiled=True, lr=3e-3)
    eager = _run(lambda: GPT(cfg), train_step, batches, compiled=False, lr=3e-3)
    _compare(eager, comp, loss_tol=1e-4, param_tol=2e-3)
    assert comp[0][-1] < comp[0][0] - 0.05  # it learns
    s = tnc.stats()
    assert s["recompilations"] == 0 and s["split_graphs"] == 0


def test_demo_compile_flag_trains_natively():
    from torchneuron.demo import train

    r = train(epochs=1, compile=True, progress=False, batch_size=128)
    assert r["fallback_ops"] == 0, r["fallback_detail"]
    assert r["test_accuracy"] > 0.6
    assert tnc.stats()["compilations"] >= 3


def _adamw_steps(device, compiled, steps=4):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    m = m.to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=1e-2)
    x = torch.randn(4, 8).to(device)
    step = torch.compile(opt.step, backend="neuron" if device == DEV else "eager") \
        if compiled else opt.step
    for _ in range(steps):
        opt.zero_grad()
        m(x).square().mean().backward()
        step()
    p = next(m.parameters())
    return (opt.param_groups[0]["capturable"], opt.state[p]["step"].device.type,
            {k: v.detach().cpu() for k, v in m.state_dict().items()})


def test_compiled_optimizer_on_neuron_is_capturable_like_cuda():
    """Dynamo makes a fresh optimizer capturable when its parameters are on a GPU; neuron
    parameters get the same (step counters on the device, inside the graph).  CPU
    parameters and eager steps keep capturable=False; the trained weights equal the CPU's."""
    cpu_eager = _adamw_steps("cpu", False)
    cpu_compiled = _adamw_steps("cpu", True)
    with native_only():
        dev_compiled = _adamw_steps(DEV, True)
        dev_eager = _adamw_steps(DEV, False)
    assert cpu_eager[:2] == (False, "cpu") and cpu_compiled[:2] == (False, "cpu")
    assert dev_eager[:2] == (False, "cpu")
    assert dev_compiled[:2] == (True, "neuron")
    for k, v in cpu_eager[2].items():
        assert_same(dev_compiled[2][k], v, atol=1e-6, rtol=1e-5, msg=k)
        assert_same(dev_eager[2][k], v, atol=1e-6, rtol=1e-5, msg=k)

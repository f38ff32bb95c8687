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

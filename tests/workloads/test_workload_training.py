"""Workloads (tools/workloads.py, issue 31), the reduced run CI makes: training loops with
AdamW, clipping, an LR schedule and gradient accumulation against the CPU's losses, with no
device-memory growth and no XLA compile in the steady state; a DataLoader whose batch size
and sequence length change every step, training then evaluation."""
from __future__ import annotations

import pytest

from torchneuron.tools import workloads as W


# known CPU fallbacks (docs/limitations.md): eval of nn.TransformerEncoderLayer takes
# PyTorch's inference fast path, which has no lowering
KNOWN_FALLBACK = {"varying_shapes": ["aten::_transformer_encoder_layer_fwd"]}


@pytest.mark.parametrize("name", ["train_cnn", "train_gpt2", "varying_shapes"])
def test_training_matches_cpu(name):
    rec = W.run(name, "ci")
    want = "FALLBACK" if name in KNOWN_FALLBACK else "PASS"
    assert rec["status"] == want, rec
    assert rec.get("fallback") == KNOWN_FALLBACK.get(name), rec


def test_training_fused_eager():
    rec = W.run("train_cnn", "ci", mode="fused")
    assert rec["status"] == "PASS" and rec["eager"] == "fused", rec


def test_leak_is_reported(monkeypatch):
    """The judge can fail: a loop that keeps a device tensor per step grows memory."""
    kept = []
    real = W._schedule

    def leaky(opt, total):
        import torch

        sched = real(opt, total)
        step = sched.step

        def keep():
            kept.append(torch.ones(4, device="neuron"))
            step()

        sched.step = keep
        return sched

    monkeypatch.setattr(W, "_schedule", leaky)
    rec = W.run("train_cnn", "ci")
    assert rec["status"] == "MISMATCH" and "a leak" in rec["detail"], rec

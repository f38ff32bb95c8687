"""Dynamo never traces torchneuron's own kernels.

A graph break inside a loop makes Dynamo run the frame eagerly; the eager ops then
call our Python kernels from the dispatcher while Dynamo's frame hook is active.
Those frames (and the jax/numpy frames they start) must run as plain Python, with
every backend, as CUDA's C++ kernels do.  Each program is compared with the same
program run eagerly on the CPU."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from helpers import DEV, assert_same, to_dev
from torchneuron import dynamo_skip

BACKENDS = ["eager", "aot_eager", "neuron"]


def _run(backend, fn, *args):
    torch._dynamo.reset()
    return torch.compile(fn, backend=backend)(*args)


class _Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.w = nn.Parameter(torch.randn(8))

    def forward(self, ids):
        h = self.emb(ids)
        for _ in range(2):
            h = h * self.w
            if h.sum() > 1e9:  # data-dependent branch: a graph break inside the loop
                h = h + 1
        return h


class _Generator(nn.Module):
    """A generate()-style loop: argmax, .item() (a graph break), cat."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 16)
        self.head = nn.Linear(16, 20)

    def forward(self, ids):
        for _ in range(4):
            nxt = self.head(self.emb(ids).mean(0)).argmax()
            if nxt.item() == 999:
                break
            ids = torch.cat([ids, nxt.view(1)])
        return ids


class _MoE(nn.Module):
    """Top-2 routing with data-dependent token selection per expert."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(16, 4)
        self.experts = nn.ModuleList(nn.Linear(16, 16) for _ in range(4))

    def forward(self, x):
        w, idx = self.gate(x).softmax(-1).topk(2, dim=-1)
        out = torch.zeros_like(x)
        counts = torch.histc(idx.float(), bins=4, min=0, max=3)
        for e in range(4):
            if counts[e] == 0:
                continue
            tok, k = torch.where(idx == e)
            out[tok] += self.experts[e](x[tok]) * w[tok, k, None]
        return out


PROGRAMS = {
    "loop_break": (_Tower, lambda: (torch.tensor([1, 2, 3]),)),
    "generate": (_Generator, lambda: (torch.tensor([1, 2]),)),
    "moe": (_MoE, lambda: (torch.randn(6, 16),)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_graph_break_programs_match_cpu(name, backend):
    torch.manual_seed(0)
    cls, make_args = PROGRAMS[name]
    model = cls()
    args = make_args()
    expected = model(*args)
    dev_model = copy.deepcopy(model).to(DEV)
    got = _run(backend, dev_model, *to_dev(args))
    assert_same(got.detach() if got.dtype.is_floating_point else got,
                expected.detach() if expected.dtype.is_floating_point else expected,
                atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_through_a_broken_graph(backend):
    torch.manual_seed(0)
    model = _Tower()
    ids = torch.tensor([3, 1, 4])
    model(ids).pow(2).sum().backward()
    dev = copy.deepcopy(model).to(DEV)
    dev.zero_grad()
    _run(backend, dev, ids.to(DEV)).pow(2).sum().backward()
    for (n, p), (_, q) in zip(model.named_parameters(), dev.named_parameters()):
        assert_same(q.grad, p.grad, atol=1e-5, rtol=1e-5, msg=n)


def test_runtime_code_is_marked_and_user_models_are_not():
    import torchneuron.models.gpt as gpt
    from torchneuron.dispatch import entry, fallback

    assert id(entry.Entry.__call__.__code__) in {id(c) for c in dynamo_skip.runtime_codes(entry)}
    assert id(fallback._boxed_fallback.__code__) in {
        id(c) for c in dynamo_skip.runtime_codes(fallback)}
    dynamo_skip.skip_loaded_modules()
    assert not dynamo_skip.is_skipped(gpt.GPT.forward.__code__)
    assert dynamo_skip.is_skipped(entry.Entry.__call__.__code__)
    assert dynamo_skip.is_skipped(fallback._boxed_fallback.__code__)
    # a model of ours that users compile is still compiled: one graph, not skipped
    from torchneuron import compile as tnc

    tnc.reset_stats()
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = gpt.GPT(gpt.GPTConfig(vocab_size=32, block_size=8, n_layer=1, n_head=2, n_embd=16)).to(DEV)
    ids = torch.randint(0, 32, (2, 8), device=DEV)
    torch.compile(m, backend="neuron")(ids)
    assert tnc.stats()["graphs"] >= 1

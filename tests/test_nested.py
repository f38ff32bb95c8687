"""Nested tensors with the jagged layout (NJT) on the device, against the same program on
the CPU, natively (fallback policy "error").

NJT is PyTorch's own Python subclass over a dense `values` buffer and `offsets`: its ops
become dense ops on the buffer (ours), plus the two jagged <-> padded conversions that
to_padded_tensor, softmax over the ragged dimension and their gradients use (lowered in
ops/shape.py).  SDPA over jagged batches pads, masks and gathers (upstream_hooks.py);
torch.compile(backend="neuron") takes NJTs too (their ragged size reaches the compiled graph as
an input no computation reads).  The gradient of a mean over the ragged dimension is
PyTorch's own gap (docs/limitations.md).
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from helpers import DEV, native_only

LENGTHS = (2, 5, 3)


def _njt(device, width=8, lengths=LENGTHS, grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    parts = [torch.randn(n, width, generator=g).to(device) for n in lengths]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "nested tensors are in prototype stage"
        return torch.nested.nested_tensor(parts, layout=torch.jagged, requires_grad=grad)


def _padded(t, value=0.0):
    return torch.nested.to_padded_tensor(t, value) if t.is_nested else t


def _same(fn, atol=1e-6, grad=False, compiled=False, **kw):
    """fn(njt, device) on the CPU and on the device (through torch.compile(backend="neuron")
    with `compiled`): equal padded results (and input gradients of the sum of the padded
    result)."""
    out = {}
    for device in ("cpu", DEV):
        x = _njt(device, grad=grad, **kw)
        ctx = native_only() if device == DEV else warnings.catch_warnings()
        run = fn
        if compiled and device == DEV:
            run = torch.compile(lambda x, d: fn(x, d), backend="neuron")
        with ctx:
            r = run(x, device)
            p = _padded(r)
            if grad:
                p.sum().backward()
        if device == DEV:
            assert r.device.type == "neuron"
        out[device] = (p.detach().cpu(), _padded(x.grad).cpu() if grad else None)
    (e, eg), (a, ag) = out["cpu"], out[DEV]
    torch.testing.assert_close(a, e, atol=atol, rtol=1e-5)
    if grad:
        torch.testing.assert_close(ag, eg, atol=atol, rtol=1e-5)


_W = torch.randn(6, 8, generator=torch.Generator().manual_seed(5))
_B = torch.randn(6, generator=torch.Generator().manual_seed(6))

CASES = {
    "sin": lambda x, d: x.sin(),
    "relu * scalar + scalar": lambda x, d: x.relu() * 3 + 1,
    "mul with itself": lambda x, d: x * x,
    "linear": lambda x, d: F.linear(x, _W.to(d), _B.to(d)),
    "softmax last dim": lambda x, d: x.softmax(-1),
    "softmax ragged dim": lambda x, d: x.softmax(1),
    "layer_norm": lambda x, d: F.layer_norm(x, (8,)),
    "sum last dim": lambda x, d: x.sum(-1),
    "mean ragged dim": lambda x, d: x.mean(1),
    "to_padded_tensor": lambda x, d: torch.nested.to_padded_tensor(x, -1.5),
    "to_padded_tensor cut": lambda x, d: torch.nested.to_padded_tensor(x, 0.0, (3, 4, 8)),
    "gelu(linear)": lambda x, d: F.gelu(F.linear(x, _W.to(d))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_njt_forward(case):
    _same(CASES[case])


@pytest.mark.parametrize("case", ["linear", "softmax ragged dim", "layer_norm", "gelu(linear)",
                                  "relu * scalar + scalar"])
def test_njt_backward(case):
    _same(CASES[case], grad=True)


@pytest.mark.parametrize("case", list(CASES))
def test_njt_compiled_forward(case):
    from torchneuron.compile import stats

    torch._dynamo.reset()
    before = stats()
    _same(CASES[case], compiled=True)
    after = stats()
    assert after["compilations"] > before["compilations"]  # it did go through the backend
    assert after["split_graphs"] == before["split_graphs"]  # whole graphs, no eager nodes


@pytest.mark.parametrize("case", ["linear", "softmax ragged dim", "layer_norm", "gelu(linear)"])
def test_njt_compiled_backward(case):
    torch._dynamo.reset()
    _same(CASES[case], grad=True, compiled=True)


def test_njt_compiled_new_lengths_reuse_the_executable():
    """The ragged size is not part of an executable's key: a batch with other sequence
    lengths but the same total, shortest and longest length (NJT keeps the last two as
    shapes of cached tensors) runs the executable compiled for the first; values follow
    each batch's offsets (against the CPU)."""
    from torchneuron.compile import stats

    torch._dynamo.reset()
    fn = torch.compile(lambda x: F.layer_norm(x, (8,)).sin() * x, backend="neuron")
    for i, lengths in enumerate([(2, 5, 3), (3, 5, 2), (5, 2, 3)]):
        x, xd = _njt("cpu", lengths=lengths, seed=i), _njt(DEV, lengths=lengths, seed=i)
        with native_only():
            r = fn(xd)
        torch.testing.assert_close(_padded(r).cpu(), _padded(F.layer_norm(x, (8,)).sin() * x),
                                   atol=1e-6, rtol=1e-5)
        assert r.offsets().cpu().tolist() == x.offsets().tolist()
        if i == 0:
            builds = stats()["compilations"]
    assert stats()["compilations"] == builds


def test_njt_compiled_sdpa_matches_cpu():
    def attend(q, d):
        return F.scaled_dot_product_attention(_heads(q), _heads(q), _heads(q * 0.5))\
            .transpose(1, 2).flatten(-2)

    torch._dynamo.reset()
    _same(attend, grad=True, compiled=True)


def test_njt_from_padded_round_trip():
    """to_padded_tensor, then back to a jagged tensor over the same offsets."""
    def fn(x, d):
        padded = torch.nested.to_padded_tensor(x, 0.0)
        return torch.nested.nested_tensor_from_jagged(padded.reshape(-1, 8)[_rows(d)],
                                                      x.offsets())
    _same(fn)


def _rows(device):
    idx = [b * max(LENGTHS) + s for b, n in enumerate(LENGTHS) for s in range(n)]
    return torch.tensor(idx, device=device)


@pytest.mark.parametrize("total,lengths", [(10, (2, 5, 3)), (7, (0, 4, 3)), (0, (0, 0))])
def test_padded_dense_to_jagged_op(total, lengths):
    """The aten op directly: rows past a sequence's padded length or the last offset are 0."""
    b, s = len(lengths), 6
    dense = torch.randn(b, s, 3, generator=torch.Generator().manual_seed(2))
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    expected = torch.ops.aten._padded_dense_to_jagged_forward(dense, [offsets], total)
    with native_only():
        actual = torch.ops.aten._padded_dense_to_jagged_forward(dense.to(DEV), [offsets.to(DEV)],
                                                                total)
        unsized = torch.ops.aten._padded_dense_to_jagged_forward(dense.to(DEV), [offsets.to(DEV)])
    assert torch.equal(actual.cpu(), expected)
    assert torch.equal(unsized.cpu(), torch.ops.aten._padded_dense_to_jagged_forward(
        dense, [offsets]))


@pytest.mark.parametrize("max_len,pad", [(5, 0.0), (3, -7.0), (0, 1.0)])
def test_jagged_to_padded_dense_op(max_len, pad):
    values = torch.randn(10, 3, generator=torch.Generator().manual_seed(3))
    offsets = torch.tensor([0, 2, 7, 10])
    expected = torch.ops.aten._jagged_to_padded_dense_forward(values, [offsets], [max_len], pad)
    with native_only():
        actual = torch.ops.aten._jagged_to_padded_dense_forward(values.to(DEV), [offsets.to(DEV)],
                                                                [max_len], pad)
    assert torch.equal(actual.cpu(), expected)


def _heads(t, h=2):
    """(B, j, 8) -> (B, h, j, 8 // h): the layout attention modules hand to SDPA."""
    return t.unflatten(-1, (h, -1)).transpose(1, 2)


@pytest.mark.parametrize("kv_lengths", [LENGTHS, (4, 1, 6)], ids=["self", "cross"])
def test_njt_sdpa_matches_cpu(kv_lengths):
    """scaled_dot_product_attention over jagged batches (each sequence attends to its own
    keys only), forward and gradients of query, key and value, against PyTorch's CPU path."""
    out = {}
    for device in ("cpu", DEV):
        q = _njt(device, grad=True)
        kv = _njt(device, lengths=kv_lengths, grad=True, seed=1)
        ctx = native_only() if device == DEV else warnings.catch_warnings()
        with ctx:
            r = F.scaled_dot_product_attention(_heads(q), _heads(kv), _heads(kv * 0.5))
            p = _padded(r.transpose(1, 2).flatten(-2))
            w = torch.arange(1.0, 1 + p.numel()).reshape(p.shape).to(device) / p.numel()
            (p * w).sum().backward()
        out[device] = [p.detach().cpu(), _padded(q.grad).cpu(), _padded(kv.grad).cpu()]
    for a, e in zip(out[DEV], out["cpu"]):
        torch.testing.assert_close(a, e, atol=1e-6, rtol=1e-5)


def test_njt_causal_sdpa_raises_like_cpu():
    errors = []
    for device in ("cpu", DEV):
        q = _njt(device)
        with pytest.raises(RuntimeError) as e:
            F.scaled_dot_product_attention(_heads(q), _heads(q), _heads(q), is_causal=True)
        errors.append(str(e.value))
    assert errors[0] == errors[1]


def test_padded_dense_to_jagged_wrong_total_raises_like_cpu():
    """A total_L that is not the last offset raises CPU's error (instead of gathering rows
    of the wrong sequences): PyTorch's to_padded_tensor backward passes one for transposed
    NestedTensors."""
    dense = torch.randn(2, 4, 3)
    offsets = torch.tensor([0, 3, 5])
    with pytest.raises(RuntimeError) as cpu_err:
        torch.ops.aten._padded_dense_to_jagged_forward(dense, [offsets], 4)
    with native_only(), pytest.raises(RuntimeError) as dev_err:
        torch.ops.aten._padded_dense_to_jagged_forward(dense.to(DEV), [offsets.to(DEV)], 4)
    assert str(dev_err.value) == str(cpu_err.value)

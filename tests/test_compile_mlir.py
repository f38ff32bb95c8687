"""The torch-mlir frontend: torch.compile(backend="neuron", options={"frontend": "torch-mlir"}).

Parity with the default frontend (and PyTorch CPU) where torch-mlir can lower
the graph; an op it cannot lower is named in the error.  Where torch-mlir is
not installed, the same calls must raise an ImportError naming the extra.
"""
import importlib.util
import sys

import pytest
import torch
import torch.nn as nn

from helpers import DEV, assert_same
from torchneuron import compile as tnc

HAVE_TORCH_MLIR = importlib.util.find_spec("torch_mlir") is not None
MLIR = {"frontend": "torch-mlir"}


def _mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))


def _expect_missing(fn):
    """An ImportError naming the extra (Dynamo wraps backend errors: look inside)."""
    with pytest.raises(Exception) as ei:
        fn()
    e = ei.value
    inner = getattr(e, "inner_exception", None) or e.__cause__ or e
    assert isinstance(inner, ImportError), repr(e)
    assert "torchneuron[torch-mlir]" in str(inner)


def test_forward_and_backward_match_the_default_frontend():
    torch.manual_seed(0)
    cpu = _mlp()
    a, b = _mlp().to(DEV), _mlp().to(DEV)
    a.load_state_dict(cpu.state_dict())
    b.load_state_dict(cpu.state_dict())
    x = torch.randn(5, 8)
    ca = torch.compile(a, backend="neuron", options=MLIR)
    if not HAVE_TORCH_MLIR:
        _expect_missing(lambda: ca(x.to(DEV)))
        return
    ya = ca(x.to(DEV))
    yb = torch.compile(b, backend="neuron")(x.to(DEV))
    yc = cpu(x)
    assert_same(ya, yb.detach().cpu(), atol=1e-5, rtol=1e-5)
    assert_same(ya, yc.detach(), atol=1e-5, rtol=1e-5)
    ya.pow(2).sum().backward()
    yb.pow(2).sum().backward()
    yc.pow(2).sum().backward()
    for pa, pb, pc in zip(a.parameters(), b.parameters(), cpu.parameters()):
        assert_same(pa.grad, pb.grad.cpu(), atol=1e-5, rtol=1e-5)
        assert_same(pa.grad, pc.grad, atol=1e-5, rtol=1e-5)


def test_function_with_views_and_reductions():
    def f(x, y):
        h = (x @ y.t()).softmax(-1)
        return h.sum(0), h[1:].max(1).values, torch.where(h > 0.2, h, -h)

    x, y = torch.randn(4, 6), torch.randn(3, 6)
    cf = torch.compile(f, backend="neuron", options=MLIR)
    if not HAVE_TORCH_MLIR:
        _expect_missing(lambda: cf(x.to(DEV), y.to(DEV)))
        return
    got = cf(x.to(DEV), y.to(DEV))
    assert_same(got, f(x, y), atol=1e-5, rtol=1e-5)
    default = torch.compile(f, backend="neuron")(x.to(DEV), y.to(DEV))
    assert_same(got, [t.cpu() for t in default], atol=1e-6, rtol=1e-6)


def test_an_op_torch_mlir_cannot_lower_is_named():
    def f(x):
        return torch.erfinv(x) * 2

    cf = torch.compile(f, backend="neuron", options=MLIR)
    x = torch.rand(4).to(DEV)
    if not HAVE_TORCH_MLIR:
        _expect_missing(lambda: cf(x))
        return
    with pytest.raises(Exception, match=r"torch-mlir cannot lower aten::erfinv"):
        cf(x)


def test_missing_torch_mlir_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_mlir", None)  # import torch_mlir -> ImportError

    def f(x):
        return x * 3

    _expect_missing(lambda: torch.compile(f, backend="neuron", options=MLIR)(torch.ones(2).to(DEV)))


def test_unknown_frontend_is_refused():
    def f(x):
        return x * 3

    with pytest.raises(Exception, match="unknown frontend"):
        torch.compile(f, backend="neuron", options={"frontend": "tvm"})(torch.ones(2).to(DEV))


def test_stats_count_torch_mlir_compilations():
    tnc.reset_stats()

    def f(x):
        return torch.tanh(x) + 1

    cf = torch.compile(f, backend="neuron", options=MLIR)
    if not HAVE_TORCH_MLIR:
        _expect_missing(lambda: cf(torch.ones(3).to(DEV)))
        return
    for n in (3, 3, 5):
        x = torch.randn(n)
        assert_same(cf(x.to(DEV)), f(x), atol=1e-6, rtol=1e-6)
    s = tnc.stats()
    assert s["compilations"] >= 2 and s["cache_hits"] >= 1

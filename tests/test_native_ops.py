"""The registry: every native overload with why it is native, and the page generated
from it (docs/native-ops.md) kept true."""
from __future__ import annotations

import pathlib

import pytest
import torch

import torchneuron
from torchneuron import dispatch, lowering
from torchneuron.tools import native_ops

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_page_is_up_to_date():
    text = native_ops.render(torchneuron.native_ops(), dispatch.layout_kernels())
    assert (ROOT / "docs" / "native-ops.md").read_text() == text, \
        "docs/native-ops.md is out of date: run `torchneuron ops`"


@pytest.mark.parametrize("op,kind,family", [
    ("aten::add.Tensor", "lowered", "elementwise"),
    ("aten::add_.Tensor", "variant", "elementwise"),
    ("aten::add.out", "variant", "elementwise"),
    ("aten::nonzero", "eager", "indexing"),
    ("aten::_to_copy", "eager", "memory"),
    ("aten::view", "eager", "memory"),
    ("aten::transpose.int", "compile-only", "views"),
    ("aten::cumsum", "lowered", "scans"),
    ("aten::scaled_dot_product_attention", "eager", "attention"),
])
def test_kinds_and_families(op, kind, family):
    n = torchneuron.native_ops()[op]
    assert (n.kind, n.family) == (kind, family)
    assert ":" in n.where


def test_sparse_layout_kernels_are_listed():
    layouts = dispatch.layout_kernels()
    assert "aten::_coalesce" in layouts["SparsePrivateUse1"]
    assert "aten::mm" in layouts["SparseCsrPrivateUse1"]


def test_a_decomposition_is_recorded_when_first_used():
    op = torch.ops.aten.trace.default  # no lowering: PyTorch's decomposition, traced
    assert op not in lowering.LOWERINGS
    x = torch.arange(9.0).reshape(3, 3)
    with torchneuron.fallback_policy("error"):
        r = torch.trace(x.to("neuron"))
    assert r.item() == torch.trace(x).item()
    assert torchneuron.decomposition_stats().get("aten::trace", 0) >= 1
    assert torchneuron.native_ops()["aten::trace"].kind == "decomposed"


def test_second_declaration_raises_naming_both_places():
    def first(x):
        return x

    def second(x):
        return x

    name = "_test_dup_op.default"
    with pytest.raises(AttributeError):  # not an operator: lower() skips absent overloads
        lowering.resolve(name)
    op = torch.ops.aten.sinc.default  # lowered already
    with pytest.raises(lowering.DuplicateRegistration) as info:
        lowering.lower("sinc.default")(first)
    assert "sinc" in str(info.value) and "ops/elementwise.py" in str(info.value)
    assert "tests/test_native_ops.py" in str(info.value) or "test_native_ops.py" in str(info.value)
    with pytest.raises(lowering.DuplicateRegistration) as info:
        dispatch.declare(torch.ops.aten.nonzero.default, second)
    assert "kernels/indexing.py" in str(info.value) and "test_native_ops.py" in str(info.value)
    assert lowering.LOWERINGS[op].fn is not first

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


def _module_level_calls(path, names):
    """Calls of `names` (attribute or plain) that run when the module at `path` is
    imported: outside every function body."""
    import ast

    tree = ast.parse(pathlib.Path(path).read_text())
    found = []

    def visit(node, in_function):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function = True
        if isinstance(node, ast.Call) and not in_function:
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name in names:
                found.append((name, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, in_function)

    visit(tree, False)
    return found


def test_kernel_modules_do_not_depend_on_import_order():
    """An eager kernel module runs nothing at import that needs the lowering table (or any
    other module) loaded first: module-level entries are dispatch.lazy_entry, resolved at
    the first call (issue 33)."""
    import torchneuron.kernels as kernels

    root = pathlib.Path(kernels.__file__).parent
    bad = {p.name: _module_level_calls(p, {"entry_for", "load_all"})
           for p in sorted(root.glob("*.py"))}
    assert not {k: v for k, v in bad.items() if v}, bad


def test_the_import_order_check_can_fail(tmp_path):
    p = tmp_path / "k.py"
    p.write_text("from torchneuron import dispatch\n_e = dispatch.entry_for(1)\n"
                 "def f():\n    return dispatch.entry_for(2)\n")
    assert _module_level_calls(p, {"entry_for"}) == [("entry_for", 2)]


def test_lazy_entry_is_the_shared_entry():
    e = dispatch.lazy_entry(torch.ops.aten.abs.default)
    x = torch.tensor([-1.5, 2.0])
    assert torch.equal(e(x.to("neuron")).cpu(), x.abs())
    assert e.entry is dispatch.entry_for(torch.ops.aten.abs.default)


def test_compute_policy_applies_to_the_tensor_arguments_only():
    """@lower(..., compute=combinator): the combinator gets the Tensor arguments (by the
    schema: positional or by keyword, None passed through), nothing else."""
    seen = []

    def mark(*xs):
        seen.append(xs)
        return [("c", x) for x in xs]

    def body(*args, **kwargs):
        return args, kwargs

    f = lowering._computing(body, mark, ["native_layer_norm.default"])
    # native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps)
    assert f("x", [4], None, "b", 1e-5) == ((("c", "x"), [4], None, ("c", "b"), 1e-5), {})
    g = lowering._computing(lambda self, tensor1, tensor2, value=1: (self, tensor1, tensor2, value),
                            mark, ["addcmul.default"])
    assert g("a", tensor2="t2", tensor1="t1", value=3) == (("c", "a"), ("c", "t1"), ("c", "t2"), 3)
    assert seen[-1] == ("a", "t2", "t1")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("name", ["gelu", "silu", "leaky_relu", "sigmoid", "logaddexp", "addcmul",
                                  "atan2", "hypot", "softmax", "logit", "logit_eps"])
def test_ops_with_a_declared_compute_policy_match_the_cpu(name, dtype):
    """Ops whose compute-dtype policy is declared on @lower (compute=in_opmath /
    in_compute_dtype) compute in opmath for halves, exactly as the CPU."""
    import torch.nn.functional as F

    fns = {
        "gelu": lambda a, b: F.gelu(a), "silu": lambda a, b: F.silu(a),
        "leaky_relu": lambda a, b: F.leaky_relu(a, 0.3), "sigmoid": lambda a, b: a.sigmoid(),
        "logaddexp": lambda a, b: a.logaddexp(b),
        # logit: 1 - x and x / (1 - x) rounded in the half dtype, as the CPU's kernel
        "logit": lambda a, b: a.sigmoid().logit(), "logit_eps": lambda a, b: a.sigmoid().logit(0.2),
        "addcmul": lambda a, b: a.addcmul(b, a, value=0.7),
        "atan2": lambda a, b: a.atan2(b), "hypot": lambda a, b: a.hypot(b),
        "softmax": lambda a, b: a.softmax(-1),
    }
    g = torch.Generator().manual_seed(3)
    a, b = (torch.randn(6, 7, generator=g).to(dtype) for _ in range(2))
    want = fns[name](a, b)
    got = fns[name](a.to("neuron"), b.to("neuron")).cpu()
    torch.testing.assert_close(got, want, atol=0, rtol=0) if dtype != torch.float32 else \
        torch.testing.assert_close(got, want)
    ops = {"gelu": "gelu.default", "silu": "silu.default", "leaky_relu": "leaky_relu.default",
           "sigmoid": "sigmoid.default", "logaddexp": "logaddexp.default",
           "logit": "logit.default", "logit_eps": "logit.default", "addcmul": "addcmul.default",
           "atan2": "atan2.default", "hypot": "hypot.default", "softmax": "_softmax.default"}
    assert lowering.LOWERINGS[lowering.resolve(ops[name])].compute is not None

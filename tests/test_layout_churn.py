"""Layout churn: an op called over many layouts of one shape (the last column of a growing
buffer, as every generate() step slices it) stops compiling per layout after
LAYOUT_VARIANTS layouts and runs on dense copies of its strided inputs.  The copies are
made without any op's kernel, so the ops that make copies themselves (clone, contiguous,
_to_copy, copy_) never re-enter that path (issue 31: it recursed forever).

Every row runs LAYOUT_VARIANTS + 52 layouts (past the point where the mechanism starts),
in op-by-op and fused eager, and compares each result with the CPU's."""
from __future__ import annotations

import pytest
import torch

import torchneuron
from torchneuron.dispatch import entry, layouts

DEV = torch.device("neuron:0")
N_LAYOUTS = layouts.LAYOUT_VARIANTS + 52


@pytest.fixture(params=["op", "fused"])
def mode(request):
    with torchneuron.eager_mode(request.param):
        yield request.param


def _columns():
    """(cpu, neuron) pairs of the last column of a growing (1, n) buffer: one shape (1, 1),
    a new layout (stride n, offset n - 1, buffer length n) each time."""
    g = torch.Generator().manual_seed(0)
    for n in range(8, 8 + N_LAYOUTS):
        ids = torch.randint(0, 10, (1, n), generator=g)
        yield ids[:, -1:], ids.to(DEV)[:, -1:]


def _blocks(cols=4):
    """(cpu, neuron) pairs of a (3, cols) block at the left of a growing (3, n) buffer
    (stride n), float32."""
    g = torch.Generator().manual_seed(1)
    for n in range(cols + 1, cols + 1 + N_LAYOUTS):
        buf = torch.randn(3, n, generator=g)
        yield buf[:, :cols], buf.to(DEV)[:, :cols]


def test_generate_stopping_criterion_repro(mode):
    """The issue's repro: transformers' EOS check over the growing sequence."""
    eos_cpu = torch.tensor([5])
    eos = eos_cpu.to(DEV)
    for cpu, dev in _columns():
        want = torch.isin(cpu, eos_cpu).any(dim=-1)
        got = torch.isin(dev, eos).any(dim=-1)
        assert torch.equal(got.cpu(), want)


CASES = {
    "clone": lambda v: v.clone(memory_format=torch.contiguous_format),
    "clone_preserve": lambda v: v.clone(),
    "contiguous": lambda v: v.contiguous(),
    "to_dtype": lambda v: v.to(torch.float64),
    "isin": lambda v: torch.isin(v, torch.tensor([1, 5], device=v.device)),
    "add": lambda v: v + 1,
    "mul_tensor": lambda v: v * v,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_ops_over_many_layouts_of_one_shape(name, mode):
    fn = CASES[name]
    for cpu, dev in _columns():
        want = fn(cpu)
        got = fn(dev)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.stride() == want.stride(), (name, got.stride(), want.stride())
        assert torch.equal(got.cpu(), want), name


def test_matmul_over_many_layouts(mode):
    w_cpu = torch.randn(4, 5, generator=torch.Generator().manual_seed(2))
    w = w_cpu.to(DEV)
    for cpu, dev in _blocks():
        torch.testing.assert_close((dev @ w).cpu(), cpu @ w_cpu)


def test_copy_out_and_inplace_over_many_layouts(mode):
    """copy_ into a fresh tensor, an out= variant and an in-place op on the strided view
    (its buffer sees the write, as on the CPU)."""
    for cpu, dev in _blocks():
        dst = torch.empty(3, 4, device=DEV)
        dst.copy_(dev)
        assert torch.equal(dst.cpu(), cpu)
        out = torch.empty(3, 4, device=DEV)
        torch.add(dev, 2.0, out=out)
        assert torch.equal(out.cpu(), cpu + 2.0)
        dev.mul_(3.0)
        cpu.mul_(3.0)
        assert torch.equal(dev.cpu(), cpu)
        assert torch.equal(dev._base.cpu(), cpu._base)


def test_clone_stops_compiling_per_layout():
    """Past LAYOUT_VARIANTS layouts clone builds no executable of its own per layout: the
    dense copy's read function and clone's one dense executable serve the rest."""
    name = "aten::clone"
    before = entry.cache_misses[name]
    for cpu, dev in _columns():
        assert torch.equal(dev.clone(memory_format=torch.contiguous_format).cpu(), cpu)
    built = entry.cache_misses[name] - before
    assert built <= layouts.LAYOUT_VARIANTS + 1, built


def _key(*tensors):
    """The part of an entry's cache key the layout policy reads (the tensors' tokens)."""
    from torchneuron import storage
    from torchneuron.dispatch.executable import Walk

    w = Walk()
    return tuple(w.cell_token(t, storage.cell_of(t)) for t in tensors)


def _policy_answers(op, views):
    """The layout policy's answers for `op` called on each view in turn (one argument)."""
    policy = layouts.LayoutPolicy(op, cap=64)
    return [policy.dense(_key(v), (v,), {}) for v in views]


def test_layout_policy_densifies_after_the_variants_when_results_keep_their_layout():
    """abs of a column view (its result is dense (3, 1) either way): compiled for the first
    LAYOUT_VARIANTS layouts, then run on dense copies; each layout counted once."""
    views = [torch.randn(3, n).to(DEV)[:, :1] for n in range(2, 2 + layouts.LAYOUT_VARIANTS + 3)]
    got = _policy_answers(torch.ops.aten.abs.default, views)
    assert got == [False] * layouts.LAYOUT_VARIANTS + [True] * 3


def test_layout_policy_keeps_compiling_where_results_follow_the_input_layout():
    """clone (preserve_format) of the 24 permutations of a (3, 3, 3, 3) tensor (one shape,
    24 layouts) returns each permutation's strides: dense copies would change what the
    caller sees, so every layout compiles."""
    import itertools

    base = torch.randn(3, 3, 3, 3).to(DEV)
    views = [base.permute(p) for p in itertools.permutations(range(4))]
    assert not any(_policy_answers(torch.ops.aten.clone.default, views))
    # the same layouts through abs, whose results also follow them: never densified
    assert not any(_policy_answers(torch.ops.aten.abs.default, views))


def test_layout_policy_never_densifies_dense_inputs():
    views = [torch.randn(3, 1).to(DEV) for _ in range(layouts.LAYOUT_VARIANTS + 3)]
    assert not any(_policy_answers(torch.ops.aten.abs.default, views))


def test_layout_policy_dense_ok_false_always_compiles():
    """The second run of a densified call (dense_ok False) compiles: it never densifies
    again (the recursion of issue 31)."""
    policy = layouts.LayoutPolicy(torch.ops.aten.abs.default, cap=64)
    views = [torch.randn(3, n).to(DEV)[:, :1] for n in range(2, 2 + layouts.LAYOUT_VARIANTS + 3)]
    assert not any(policy.dense(_key(v), (v,), {}, dense_ok=False) for v in views)

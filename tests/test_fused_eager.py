"""Fused eager (TORCHNEURON_EAGER=fused, storage/lazy.py): recorded ops run as one
cached program when a value is needed, with op-by-op semantics and bits.

Every test runs the same program op by op and fused (and on the CPU where the values
are compared with PyTorch's), and checks through the program counters that fusion
really happened."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch

import torchneuron
from torchneuron.storage import lazy

DEV = "neuron"


@pytest.fixture(autouse=True)
def _mode_restored():
    """Each test starts op by op; the process's mode (TORCHNEURON_EAGER) comes back after."""
    prev = torchneuron.set_eager_mode("op")
    yield
    torchneuron.set_eager_mode(prev)


def run_both(fn, *args, reps=3):
    """fn's results op by op, then fused `reps` times (the structure compiles as one
    program from its second run): (op results, [fused results per run], stats)."""
    torchneuron.set_eager_mode("op")
    ref = fn(*args)
    lazy.reset_stats()
    outs = []
    with torchneuron.eager_mode("fused"):
        for _ in range(reps):
            outs.append(fn(*args))
    st = (lazy.STATS.recorded, lazy.STATS.flushes, lazy.STATS.fused_runs)
    return ref, outs, st


def _cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    return [_cpu(v) for v in x]


def bits_equal(a, b):
    a, b = _cpu(a), _cpu(b)
    if isinstance(a, list):
        return all(bits_equal(x, y) for x, y in zip(a, b))
    if a.dtype.is_floating_point:
        return torch.equal(a.view(torch.uint8) if a.dtype.itemsize == 1 else
                           a.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[a.dtype.itemsize]),
                           b.view({1: torch.uint8, 2: torch.int16, 4: torch.int32,
                                   8: torch.int64}[b.dtype.itemsize]))
    return torch.equal(a, b)


# ops pairs that XLA:CPU rounds differently when fused into one kernel (an FMA from
# mul+add, a/b/c rewritten as a/(b*c), erf's approximation inlined): each must keep the
# op-by-op bits
CHAINS = {
    "mul_add": lambda x, y: x * y + x,
    "mul_sub": lambda x, y: x * y - y,
    "div_div": lambda x, y: x / (y.abs() + 1) / (x.abs() + 2),
    "sigmoid_div": lambda x, y: torch.sigmoid(x) / (y.abs() + 0.5),
    "erf_mul": lambda x, y: torch.erf(x * y) * y,
    "addcmul_exp": lambda x, y: torch.addcmul(x, x, y, value=0.3).exp(),
    "tanh_log1p": lambda x, y: (x.tanh() * 3).abs().log1p() - y,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_chain_bits_equal_op_by_op(name, dtype):
    g = torch.Generator().manual_seed(hash(name) % 1000)
    x = torch.randn(257, 129, generator=g).to(dtype)
    y = torch.randn(257, 129, generator=g).to(dtype)
    xn, yn = x.to(DEV), y.to(DEV)
    fn = CHAINS[name]
    ref, outs, (recorded, flushes, fused_runs) = run_both(lambda: fn(xn, yn).cpu())
    for o in outs:
        assert bits_equal(o, ref)
    assert fused_runs >= 1, "the chain never ran as one program"
    assert recorded >= 3 * 2
    cpu = fn(x, y)
    tol = {torch.float16: 2e-2, torch.bfloat16: 8e-2}.get(dtype, 1e-5)
    torch.testing.assert_close(outs[-1], cpu, rtol=tol, atol=tol)


def test_values_stay_pending_until_read():
    x = torch.randn(8, 8, device=DEV)
    with torchneuron.eager_mode("fused"):
        y = (x * 2).sin()
        z = y + 1
        cell = y.untyped_storage()._tn_cell
        assert type(cell) is torchneuron.storage.PendingCell
        assert lazy.pending_ops(0) == 3
        assert z.sum().item() == pytest.approx(((x.cpu() * 2).sin() + 1).sum().item(), rel=1e-5)
        assert lazy.pending_ops(0) == 0
        cell.arr  # a computed Pending: the cell takes its array
        assert type(cell) is torchneuron.storage.Cell
        torch.testing.assert_close(y.cpu(), (x.cpu() * 2).sin())


@pytest.mark.parametrize("read", ["item", "cpu", "tolist", "bool", "repr", "numpy", "sync",
                                  "nonzero", "to_other_dtype_cpu"])
def test_reads_flush(read):
    x0 = torch.arange(12.0).reshape(3, 4) - 5
    x = x0.to(DEV)
    with torchneuron.eager_mode("fused"):
        y = (x * 3).relu()
        exp = (x0 * 3).relu()
        if read == "item":
            assert y.sum().item() == exp.sum().item()
        elif read == "cpu":
            assert torch.equal(y.cpu(), exp)
        elif read == "tolist":
            assert y.tolist() == exp.tolist()
        elif read == "bool":
            assert bool((y > 100).any()) is False and bool((y > 1).any()) is True
        elif read == "repr":
            assert repr(y).replace(", device='neuron:0'", "") == repr(exp)
        elif read == "numpy":
            assert (y.cpu().numpy() == exp.numpy()).all()
        elif read == "sync":
            torch.neuron.synchronize()
            assert lazy.pending_ops() == 0
            assert torch.equal(y.cpu(), exp)
        elif read == "nonzero":
            assert torch.equal(y.nonzero().cpu(), exp.nonzero())
        else:
            assert torch.equal(y.to("cpu", torch.float64), exp.double())


def test_views_inplace_and_aliasing():
    def prog(base):
        x = base.clone()
        v = x[1:, ::2]  # a view taken before the writes sees them
        v.mul_(2)
        x.add_(1)
        w = x.t()
        w[0].sub_(v.sum())
        d = x.diagonal()
        d.copy_(torch.arange(4.0, device=x.device))
        return x, v, w, d

    base = torch.randn(4, 6)
    cpu = prog(base)
    ref, outs, (_, _, fused_runs) = run_both(lambda: _cpu(prog(base.to(DEV))))
    assert fused_runs >= 1
    for o in outs:
        assert bits_equal(o, ref)
    for a, b in zip(outs[-1], cpu):
        torch.testing.assert_close(a, b)


def test_errors_raised_at_the_op():
    x = torch.randn(3, 4, device=DEV)
    with torchneuron.eager_mode("fused"):
        y = x * 2
        with pytest.raises(RuntimeError, match=r"The size of tensor a \(4\) must match the size "
                                               r"of tensor b \(5\) at non-singleton dimension 1"):
            y + torch.randn(3, 5, device=DEV)
        with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
            y @ torch.randn(3, 3, device=DEV)
        # the program holding y is intact
        torch.testing.assert_close(y.cpu(), x.cpu() * 2)


def test_warnings_at_the_op():
    x = torch.randn(5, device=DEV)
    out = torch.empty(2, device=DEV)
    with torchneuron.eager_mode("fused"), warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        torch.neg(x, out=out)
        assert any("was resized" in str(r.message) for r in rec)
        assert lazy.pending_ops() > 0  # warned while recording, before anything ran
    torch.testing.assert_close(out.cpu(), -x.cpu())


def test_out_of_memory_at_the_op():
    x = torch.randn(64, 64, device=DEV)
    prev = torchneuron.storage.stats(0).limit
    used = torch.neuron.memory_allocated()
    torch.neuron.set_memory_limit(used + 64 * 64 * 4 * 2)
    try:
        with torchneuron.eager_mode("fused"):
            keep = [x + 1, x + 2]
            with pytest.raises(torch.OutOfMemoryError, match="NEURON out of memory"):
                keep.append(x + 3)
            torch.testing.assert_close(keep[1].cpu(), x.cpu() + 2)
    finally:
        torch.neuron.set_memory_limit(prev)


def test_random_numbers_match_op_by_op():
    def prog():
        torch.manual_seed(123)
        a = torch.randn(16, 16, device=DEV)
        b = torch.nn.functional.dropout(a, 0.3, training=True)
        c = torch.rand(16, device=DEV) + b.sum(0)
        d = torch.randint(0, 10, (5,), device=DEV)
        return _cpu([a, b, c, d])

    ref, outs, (_, _, fused_runs) = run_both(prog)
    assert fused_runs >= 1
    for o in outs:
        assert bits_equal(o, ref)
    # and what the CPU computes from the same draws: dropout keeps a / 0.7 or zeroes it
    a, b, c, d = outs[-1]
    kept = b != 0
    torch.testing.assert_close(b[kept], a[kept] / 0.7)
    assert 0.5 < kept.float().mean().item() < 0.9
    assert ((c - b.sum(0)) >= 0).all() and ((c - b.sum(0)) < 1 + 1e-4).all()
    assert ((d >= 0) & (d < 10)).all()


def _train(steps, opt_name, dev=DEV):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)).to(dev)
    opt = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
           "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2)}[opt_name](model.parameters())
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 16, generator=g).to(dev)
    y = torch.randint(0, 4, (32,), generator=g).to(dev)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        assert lazy.pending_ops() == 0  # the optimizer step ran the program
        losses.append(loss.detach())
    return _cpu(losses + [p for p in model.parameters()])


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_training_bits_equal_op_by_op(opt_name):
    torchneuron.set_eager_mode("op")
    ref = _train(4, opt_name)
    lazy.reset_stats()
    with torchneuron.eager_mode("fused"):
        got = _train(4, opt_name)
    assert lazy.STATS.fused_runs >= 2
    assert bits_equal(got, ref)
    assert got[3] < got[0]  # it trains
    for a, b in zip(got, _train(4, opt_name, "cpu")):  # as on the CPU
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_size_bound_runs_the_program(monkeypatch):
    monkeypatch.setattr(lazy, "MAX_OPS", 5)
    x = torch.randn(4, device=DEV)
    with torchneuron.eager_mode("fused"):
        y = x
        for _ in range(12):
            y = y * 1.5
        assert lazy.pending_ops() == 2
        torch.testing.assert_close(y.cpu(), x.cpu() * 1.5 ** 12)


def test_dead_temporaries_are_not_outputs():
    x = torch.randn(32, 32, device=DEV)
    with torchneuron.eager_mode("fused"):
        for _ in range(2):
            lazy.reset_stats()
            y = x
            for _ in range(6):
                y = (y * 0.5).cos()
            out = y.sum()
            assert out.item() == pytest.approx(_loop_cpu(x.cpu()).sum().item(), rel=1e-5)
            # 13 ops ran; only y and out left the program: the 11 temporaries died unread
            assert (lazy.STATS.recorded, lazy.STATS.flushes, lazy.STATS.outputs) == (13, 1, 2)
        assert lazy.STATS.fused_runs == 1


def _loop_cpu(x):
    for _ in range(6):
        x = (x * 0.5).cos()
    return x


def test_autograd_and_backward_thread():
    g = torch.Generator().manual_seed(0)
    w0, x0 = torch.randn(8, 8, generator=g), torch.randn(4, 8, generator=g)

    def prog(dev=DEV):
        w = w0.to(dev).requires_grad_()
        x = x0.to(dev)
        h = torch.tanh(x @ w).pow(2)
        loss = (h * h.detach().flip(0)).mean()
        gw, = torch.autograd.grad(loss, w, create_graph=True)
        g2, = torch.autograd.grad(gw.sum(), w)
        return _cpu([loss, gw, g2])

    ref, outs, (_, _, fused_runs) = run_both(prog)
    assert fused_runs >= 1
    for o in outs:
        assert bits_equal(o, ref)
    for a, b in zip(outs[-1], prog("cpu")):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_compiled_graph_and_host_copy_read_pending_values():
    x = torch.randn(6, 6, device=DEV)
    f = torch.compile(lambda a: a.sin() * 2, backend="neuron")
    with torchneuron.eager_mode("fused"):
        y = x + 1  # pending
        z = f(y)
        y.copy_(torch.ones(6, 6))  # a host copy into a pending tensor
        torch.testing.assert_close(z.cpu(), (x.cpu() + 1).sin() * 2)
        torch.testing.assert_close(y.cpu(), torch.ones(6, 6))


def test_switch():
    assert torchneuron.get_eager_mode() == "op"
    with torchneuron.eager_mode("fused"):
        assert torchneuron.get_eager_mode() == "fused"
        x = torch.ones(3, device=DEV) * 2
        assert lazy.pending_ops() == 2
    assert lazy.pending_ops() == 0  # leaving fused mode runs what is pending
    assert torchneuron.get_eager_mode() == "op"
    assert x.cpu().tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="eager mode must be 'op' or 'fused', got 'lazy'"):
        torchneuron.set_eager_mode("lazy")


def test_environment_variable_turns_it_on():
    code = ("import torch, torchneuron\n"
            "from torchneuron.storage import lazy\n"
            "x = torch.arange(4.0, device='neuron')\n"
            "y = (x * 2 + 1).exp()\n"
            "assert lazy.pending_ops() == 4, lazy.pending_ops()  # arange too\n"
            "assert torch.equal(y.cpu(), (torch.arange(4.0) * 2 + 1).exp())\n"
            "print(torchneuron.get_eager_mode())\n")
    env = dict(os.environ, TORCHNEURON_EAGER="fused")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "fused"


def test_convolutions_run_between_programs():
    """A convolution runs on its own (XLA:CPU runs it ~8x slower inside a program); the
    ops around it still fuse, and a CNN training step keeps op-by-op bits."""
    from torchneuron.demo import DigitsCNN, _step

    def prog(dev=DEV):
        torch.manual_seed(0)
        m = DigitsCNN().to(dev).eval()  # (no dropout: its draws differ on the CPU)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(16, 1, 8, 8, generator=g).to(dev)
        y = torch.randint(0, 10, (16,), generator=g).to(dev)
        losses = [_step(m, opt, x, y) for _ in range(3)]
        return _cpu(losses + list(m.parameters()))

    ref, outs, (_, flushes, fused_runs) = run_both(prog, reps=2)
    for o in outs:
        assert bits_equal(o, ref)
    assert fused_runs >= 3
    for a, b in zip(outs[-1], prog("cpu")):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    conv = torch.nn.Conv2d(1, 2, 3).to(DEV)
    with torchneuron.eager_mode("fused"):
        a = torch.ones(1, 1, 5, 5, device=DEV) * 2  # pending
        b = conv(a)  # runs the program, then the convolution
        assert lazy.pending_ops() == 0
        assert type(b.untyped_storage()._tn_cell) is torchneuron.storage.Cell
        # an executable's first call always runs alone (the executable store); its second
        # is where a convolution is told apart from what gets recorded
        a2 = torch.ones(1, 1, 5, 5, device=DEV) * 3  # pending
        b2 = conv(a2)
        assert lazy.pending_ops() == 0
        assert type(b2.untyped_storage()._tn_cell) is torchneuron.storage.Cell
        torch.testing.assert_close(b.cpu(), conv.cpu()(torch.ones(1, 1, 5, 5) * 2))
        torch.testing.assert_close(b2.cpu(), conv.cpu()(torch.ones(1, 1, 5, 5) * 3))


_STORE_CHILD = r"""
import json, torch, torchneuron
from torchneuron.dispatch import store
from torchneuron.storage import lazy
ref = torch.nn.Conv2d(1, 2, 3)
conv = torch.nn.Conv2d(1, 2, 3).to("neuron")
conv.load_state_dict(ref.state_dict())
seen = []
with torchneuron.eager_mode("fused"):
    for k in (2.0, 3.0, 4.0):
        a = torch.ones(1, 1, 5, 5, device="neuron") * k
        b = conv(a)
        seen.append([lazy.pending_ops(), type(b.untyped_storage()._tn_cell).__name__,
                     torch.allclose(b.cpu(), ref(torch.ones(1, 1, 5, 5) * k), atol=1e-6)])
print(json.dumps({"store": store.folder() is not None, "seen": seen,
                  "writes": store.STATS.writes, "recorded": lazy.STATS.recorded}))
"""


def test_fused_with_the_executable_store_runs_convolutions_alone(tmp_path):
    """With the executable store on, an executable is told apart for recording from its
    compiled HLO (no trace): a convolution still runs alone, after the pending program,
    and the ops around it are recorded."""
    import json

    env = {**os.environ, "TORCHNEURON_COMPILE_CACHE_DIR": str(tmp_path / "xla")}
    p = subprocess.run([sys.executable, "-c", _STORE_CHILD], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["store"] and out["writes"] > 0
    assert out["seen"] == [[0, "Cell", True]] * 3
    assert out["recorded"] >= 2  # the later multiplications were recorded


def test_program_cache_past_its_cap_keeps_computing_right():
    """Fused programs over cap + 50 structures (each run twice, so each is compiled) with a
    small cap: the cache stays at the cap, the oldest programs go, results equal the CPU's."""
    cap = 4
    saved, lazy._compiled.cap = lazy._compiled.cap, cap
    evicted, compiled = lazy._compiled.evictions, lazy.STATS.compiles
    try:
        with torchneuron.eager_mode("fused"):
            for n in range(2, 2 + cap + 50):
                x = torch.arange(float(n))
                for _ in range(2):
                    got = ((x.to("neuron") * 2 + 1).sin() - 0.5).cpu()
                    torch.testing.assert_close(got, (x * 2 + 1).sin() - 0.5)
                assert len(lazy._compiled) <= cap
    finally:
        lazy._compiled.cap = saved
    assert lazy._compiled.evictions - evicted >= 50
    assert lazy.STATS.compiles - compiled >= cap + 50

"""torch.compile(backend="neuron"): results against PyTorch CPU and eager neuron."""
import json
import logging
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import DEV, assert_same, native_only
from torchneuron import compile as tnc


def _compile(fn, **kw):
    return torch.compile(fn, backend="neuron", **kw)


@pytest.fixture(autouse=True)
def _fresh_stats():
    tnc.reset_stats()
    yield


# ---------------------------------------------------------------- registration
def test_backend_is_listed():
    assert "neuron" in torch._dynamo.list_backends()


def test_unknown_option_is_refused():
    def f(x):
        return x + 1

    with pytest.raises(Exception, match="unknown option"):
        torch.compile(f, backend="neuron", options={"bogus": 1})(torch.ones(2, device=DEV))


# ---------------------------------------------------------------- values
def test_function_matches_cpu():
    def f(x, y):
        h = torch.relu(x @ y) * 2 - 1
        return h.sum(1), h.softmax(-1), (h > 0).sum()

    x, y = torch.randn(6, 5), torch.randn(5, 4)
    expected = f(x, y)
    with native_only():
        got = _compile(f)(x.to(DEV), y.to(DEV))
    assert_same(got, expected, atol=1e-5, rtol=1e-5)
    s = tnc.stats()
    assert s["compilations"] == 1 and s["graphs"] == 1


def test_module_forward_and_backward_match_cpu():
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))
    dev = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3)).to(DEV)
    dev.load_state_dict(cpu.state_dict())
    x = torch.randn(5, 8)
    y = cpu(x)
    y.pow(2).sum().backward()
    cdev = _compile(dev)
    with native_only():
        yd = cdev(x.to(DEV))
        yd.pow(2).sum().backward()
    assert_same(yd, y.detach(), atol=1e-5, rtol=1e-5)
    for pc, pd in zip(cpu.parameters(), dev.parameters()):
        assert_same(pd.grad, pc.grad, atol=1e-5, rtol=1e-5)
    s = tnc.stats()
    assert s["graphs"] == 2  # forward and backward
    assert s["compilations"] == 2


def test_noncontiguous_and_offset_inputs():
    def f(a, b):
        return a * 2 + b

    base = torch.randn(6, 8)
    a, b = base.t()[2:7], torch.randn(6, 5).t()
    dbase = base.to(DEV)
    da = dbase.t()[2:7]
    db = b.to(DEV)
    assert not da.is_contiguous() and da.storage_offset() == 2
    cf = _compile(f)
    with native_only():
        got = cf(da, db)
    assert_same(got, f(a, b))
    # another storage offset of the same view reuses the executable
    a2 = base.t()[1:6]
    with native_only():
        got2 = cf(dbase.t()[1:6], db)
    assert_same(got2, f(a2, b))
    assert tnc.stats()["compilations"] == 1


# ---------------------------------------------------------------- mutation and aliasing
@pytest.mark.parametrize("offset", [None, 1])
def test_as_strided_with_and_without_storage_offset(offset):
    """as_strided's storage_offset is optional (the FX node then has three arguments)."""
    def f(x):
        kw = {} if offset is None else {"storage_offset": offset}
        return torch.as_strided(x * 2, (3, 2), (1, 3), **kw) + 1

    x = torch.randn(12)
    assert_same(_compile(f)(x.to(DEV)), f(x))


def _put_scalar(x, m, r):
    y = x.clone()
    y[m[..., 0]] = 0.5
    return y * 2


def _put_row(x, m, r):
    y = x.clone()
    y[m[..., 0]] = r
    return y


def _put_after_slice(x, m, r):
    y = x.clone()
    y[:, m[0, :, 0]] = -1.0
    return y


def _put_full_mask(x, m, r):
    y = x.clone()
    y[m] = 7.0
    return y


def _put_accumulate(x, m, r):
    return x.clone().index_put_((m[..., 0],), r[:1], accumulate=True)


def _put_bool(x, m, r):
    y = m.clone()
    y[m[..., 0]] = True
    return y


@pytest.mark.parametrize("fn", [_put_scalar, _put_row, _put_after_slice, _put_full_mask,
                                _put_accumulate, _put_bool])
def test_boolean_mask_assignment_compiles(fn):
    """x[mask] = v with v independent of the mask's count has a static shape: it compiles
    (a where) instead of raising (found by the model scan: t5gemma2)."""
    x = torch.randn(4, 5, 3)
    m, r = x > 0, torch.tensor([1.0, 2.0, 3.0])
    got = _compile(fn)(x.to(DEV), m.to(DEV), r.to(DEV))
    assert_same(got, fn(x, m, r))


def test_boolean_mask_assignment_of_per_element_values_still_explains():
    def f(x, m, v):
        y = x.clone()
        y[m] = v
        return y

    x = torch.randn(6)
    m = x > 0
    v = torch.arange(int(m.sum()), dtype=torch.float32)
    with pytest.raises(Exception, match="boolean mask indices have a data-dependent shape"):
        _compile(f)(x.to(DEV), m.to(DEV), v.to(DEV))


def test_input_mutation_is_written_back():
    def f(x, buf):
        buf.add_(x)
        buf[0].mul_(3)
        return buf.sum()

    x, buf = torch.randn(3, 4), torch.randn(3, 4)
    dx, dbuf = x.to(DEV), buf.to(DEV)
    expected = f(x, buf)
    cf = _compile(f)
    with native_only():
        got = cf(dx, dbuf)
    assert_same(got, expected, atol=1e-5, rtol=1e-5)
    assert_same(dbuf, buf, atol=1e-6, rtol=1e-6)
    # steady state: buf's old buffer goes to XLA (the first call, which traces and
    # compiles, may leave a transient reference behind and skip donating once)
    skipped = tnc.stats()["donations_skipped"]
    expected2 = f(x, buf)
    with native_only():
        got2 = cf(dx, dbuf)
    assert_same(got2, expected2, atol=1e-4, rtol=1e-5)
    assert_same(dbuf, buf, atol=1e-5, rtol=1e-6)
    assert tnc.stats()["donations_skipped"] == skipped


def test_mutation_of_a_view_input_updates_its_base():
    def f(v):
        v.mul_(2)

    base = torch.arange(12.0).reshape(3, 4)
    dbase = base.to(DEV)
    with native_only():
        _compile(f)(dbase[1])
    base[1].mul_(2)
    assert_same(dbase, base)


def test_batchnorm_running_stats_match_cpu():
    torch.manual_seed(0)
    cpu = nn.BatchNorm2d(3)
    dev = nn.BatchNorm2d(3).to(DEV)
    x = torch.randn(4, 3, 5, 5)
    ccpu = cpu(x)
    cdev = _compile(dev)
    with native_only():
        out = cdev(x.to(DEV))
    assert_same(out, ccpu.detach(), atol=1e-5, rtol=1e-5)
    assert_same(dev.running_mean, cpu.running_mean, atol=1e-6, rtol=1e-5)
    assert_same(dev.running_var, cpu.running_var, atol=1e-6, rtol=1e-5)
    assert dev.num_batches_tracked.item() == 1


def test_outputs_that_alias_inputs_stay_aliases():
    def f(x):
        return x.view(-1), x.t(), x

    x = torch.randn(3, 4)
    dx = x.to(DEV)
    with native_only():
        flat, t, same = _compile(f)(dx)
    assert same is dx
    assert flat.untyped_storage().data_ptr() == dx.untyped_storage().data_ptr()
    assert t.untyped_storage().data_ptr() == dx.untyped_storage().data_ptr()
    assert_same(flat, x.view(-1))
    assert_same(t, x.t())
    flat[0] = 100.0  # a write through the output is seen by the input
    assert dx[0, 0].item() == 100.0


def test_donated_buffer_shared_by_another_tensor_is_not_clobbered():
    def f(x):
        x.add_(1)

    from torchneuron import storage

    x = torch.randn(8).to(DEV)
    alias = x.detach()  # same storage: sees the update
    # another storage over the very same jax buffer (as when jit forwards an input)
    other = storage.from_array(x.untyped_storage()._tn_cell.arr, 0)
    shared = other.untyped_storage()._tn_cell.arr is x.untyped_storage()._tn_cell.arr
    assert shared
    before = other.cpu()
    cf = _compile(f)
    with native_only():
        cf(x)
        cf(x)
    assert_same(alias, x.cpu())
    assert_same(other, before)
    assert_same(x, before + 2)
    # the first call could not donate x's buffer; the second could
    assert tnc.stats()["donations_skipped"] == 1


# ---------------------------------------------------------------- RNG
def test_dropout_matches_eager_under_the_same_seed():
    def f(x):
        return F.dropout(x, 0.5, training=True) * 2, torch.rand(3, device=x.device)

    x = torch.randn(64, 8).to(DEV)
    torch.manual_seed(123)
    eager = f(x)
    eager_next = torch.rand(4, device=DEV)
    torch.manual_seed(123)
    with native_only():
        comp = _compile(f)(x)
    comp_next = torch.rand(4, device=DEV)
    assert_same(comp, [t.cpu() for t in eager])
    # the compiled graph consumed the generator like the two eager random ops
    assert_same(comp_next, eager_next.cpu())
    # and different seeds give different masks
    torch.manual_seed(7)
    other = _compile(f)(x)
    assert not torch.equal(other[0].cpu(), comp[0].cpu())


# ---------------------------------------------------------------- graph breaks and shapes
def test_graph_breaks_run_the_rest_eagerly(capsys):
    def f(x):
        y = torch.sin(x) * 2
        print("between graphs")
        if y.sum() > 0:  # data-dependent control flow
            return y + 1
        return y - 1

    x = torch.randn(5, 5)
    with native_only():
        got = _compile(f)(x.to(DEV))
    assert_same(got, f(x), atol=1e-6, rtol=1e-6)
    assert "between graphs" in capsys.readouterr().out
    assert tnc.stats()["dynamo_graphs"] >= 2


def test_new_shapes_recompile_with_a_log_line(caplog):
    def f(x):
        return (x * x).sum(0)

    cf = _compile(f, dynamic=False)
    with caplog.at_level(logging.INFO, logger="torchneuron.compile"):
        for n in (3, 5, 3):
            x = torch.randn(n, 4)
            assert_same(cf(x.to(DEV)), f(x), atol=1e-6, rtol=1e-6)
    assert any("compiled" in r.getMessage() for r in caplog.records)
    assert tnc.stats()["compilations"] == 2


def test_dynamic_shapes_give_correct_results_for_every_shape(caplog):
    def f(x, w):
        return torch.tanh(x @ w).mean(0) + x.shape[0]

    w = torch.randn(4, 3)
    cf = _compile(f, dynamic=True)
    with caplog.at_level(logging.INFO, logger="torchneuron.compile"):
        for n in (2, 3, 7, 3):
            x = torch.randn(n, 4)
            assert_same(cf(x.to(DEV), w.to(DEV)), f(x, w), atol=1e-5, rtol=1e-5)
    s = tnc.stats()
    assert s["dynamo_graphs"] == 1  # one symbolic graph ...
    assert s["compilations"] == 3  # ... specialised per concrete shape
    assert s["recompilations"] == 2
    assert any("recompiling" in r.getMessage() for r in caplog.records)


def test_mark_dynamic():
    def f(x):
        return x.cumsum(1) * 2

    cf = _compile(f)
    for n in (4, 6):
        x = torch.randn(3, n)
        dx = x.to(DEV)
        torch._dynamo.mark_dynamic(dx, 1)
        assert_same(cf(dx), f(x), atol=1e-5, rtol=1e-5)
    assert tnc.stats()["dynamo_graphs"] == 1


def test_executable_cache_is_bounded(monkeypatch):
    from torchneuron.compile import graph

    monkeypatch.setenv("TORCHNEURON_COMPILE_BUCKETS", "0")  # one executable per shape
    monkeypatch.setattr(graph, "CACHE_SIZE", 2)

    def f(x):
        return x + 1

    cf = _compile(f, dynamic=True)
    for n in (2, 3, 4, 2):
        x = torch.randn(n)
        assert_same(cf(x.to(DEV)), f(x))
    s = tnc.stats()
    assert s["evictions"] == 2 and s["compilations"] == 4


def test_twenty_lengths_twice_compile_twenty_times(monkeypatch):
    """A loop over 20 sequence lengths, twice, under dynamic=True without shape buckets:
    one executable per length, the second pass all hits (a 16-entry cache compiled all
    40).  (With buckets: tests/test_compile_buckets.py.)"""
    monkeypatch.setenv("TORCHNEURON_COMPILE_BUCKETS", "0")
    def f(x):
        return (x * 2).cumsum(-1)

    cf = _compile(f, dynamic=True)
    tnc.reset_stats()
    for _ in range(2):
        for n in range(2, 22):
            x = torch.arange(float(n)).reshape(1, n)
            assert_same(cf(x.to(DEV)), f(x))
    s = tnc.stats()
    assert s["compilations"] == 20 and s["evictions"] == 0, s


def test_a_graph_past_its_executable_cap_keeps_computing_right(monkeypatch):
    """cap + 50 shapes of one dynamic graph with a small cap: the least recently used
    executables go (a shape used every round stays), every result equals the CPU's."""
    from torchneuron.compile import graph

    monkeypatch.setenv("TORCHNEURON_COMPILE_BUCKETS", "0")  # one executable per shape
    cap = 4
    monkeypatch.setattr(graph, "CACHE_SIZE", cap)

    def f(x):
        return (x * 2).cumsum(-1)

    cf = _compile(f, dynamic=True)
    hot = torch.arange(5.0).reshape(1, 5)
    assert_same(cf(hot.to(DEV)), f(hot))
    for n in range(6, 6 + cap + 50):
        x = torch.arange(float(n)).reshape(1, n)
        assert_same(cf(x.to(DEV)), f(x))
        assert_same(cf(hot.to(DEV)), f(hot))  # a hit: the most recent again
    s = tnc.stats()
    # the hot shape never compiled again (first in, first out would have evicted it)
    assert s["compilations"] == 1 + cap + 50 and s["evictions"] == 1 + 50, s


# ---------------------------------------------------------------- unlowerable ops
@torch.library.custom_op("tn_compile_test::twice_plus", mutates_args=())
def _twice_plus(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


@_twice_plus.register_fake
def _(x):
    return torch.empty_like(x)


def test_op_without_lowering_splits_the_graph():
    def f(x):
        a = torch.cos(x) + 1
        b = torch.ops.tn_compile_test.twice_plus(a)
        return torch.exp(b).sum(0)

    x = torch.randn(4, 3)
    got = _compile(f)(x.to(DEV))
    assert_same(got, f(x), atol=1e-5, rtol=1e-5)
    s = tnc.stats()
    assert s["split_graphs"] == 1
    assert "tn_compile_test::twice_plus" in s["eager_nodes"]
    assert s["compilations"] == 2  # the lowerable pieces before and after it


# ---------------------------------------------------------------- StableHLO
def test_export_stablehlo():
    m = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).to(DEV)
    text = tnc.export_stablehlo(m, torch.randn(2, 4).to(DEV))
    assert "func.func public @main" in text
    assert "stablehlo.dot_general" in text
    assert "stablehlo.maximum" in text
    text2 = tnc.export_stablehlo(lambda a: torch.sin(a) * 2, torch.randn(3).to(DEV))
    assert "stablehlo.sine" in text2


def test_dump_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))

    def f(x):
        return torch.exp(x).sum()

    _compile(f)(torch.randn(3).to(DEV))
    mlir = list(tmp_path.glob("*.mlir"))
    assert len(mlir) == 1 and "stablehlo.exponential" in mlir[0].read_text()
    lines = (tmp_path / "summary.txt").read_text().splitlines()
    assert len(lines) == 1
    assert "ops=" in lines[0] and "inputs=1" in lines[0] and "compile_s=" in lines[0]


# ---------------------------------------------------------------- persistent cache
_CHILD = r"""
import json, sys, time
import torch  # no other import: the entry points load torchneuron and the backend

def f(x):
    return (torch.sin(x) @ x.t()).relu().sum(0)

x = torch.arange(12.0).reshape(3, 4).to("neuron")
t = time.perf_counter()
y = torch.compile(f, backend="neuron")(x)
dt = time.perf_counter() - t
import torchneuron.compile as tnc
print(json.dumps({"stats": tnc.stats(), "y": y.cpu().tolist(), "dir": tnc.cache_dir(), "s": dt}))
"""


def test_persistent_cache_across_processes(tmp_path):
    env = dict(os.environ, TORCHNEURON_COMPILE_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["dir"] == str(tmp_path / "cache")
    assert first["stats"]["disk_cache_hits"] == 0
    assert second["stats"]["disk_cache_hits"] >= 1
    assert any((tmp_path / "cache").iterdir())
    x = torch.arange(12.0).reshape(3, 4)
    expected = (torch.sin(x) @ x.t()).relu().sum(0)
    assert_same(torch.tensor(second["y"]), expected, atol=1e-4, rtol=1e-5)
    assert first["y"] == second["y"]


def test_graph_returning_a_value_twice_beside_new_results():
    """An output leaf returned twice (an in-place op's result and the view it wrote) beside
    a new result: each new result is laid out from its own leaf (a duplicated leaf once
    shifted every later new result onto the wrong value: found by the fuzzer)."""
    def program(v0):
        v1 = v0.t()
        v2 = v1.add_(1)
        v3 = torch.sum(v0, 0)
        v4 = v3 * 2
        return [v0, v1, v2, v3, v4]

    x = torch.tensor([3.0, 1.5, -2.0, 0.25]).reshape(2, 2)
    want = program(x.clone())
    got = torch.compile(program, backend="neuron")(x.clone().to("neuron"))
    for w, g in zip(want, got):
        assert g.shape == w.shape and g.stride() == w.stride()
        assert torch.equal(g.cpu(), w)

"""Executable memory: a long process releases XLA executables before it runs out of
memory mappings (vm.max_map_count), and everything keeps computing correctly after."""
import pytest
import torch

from torchneuron import runtime
from helpers import DEV


def _distinct_ops(n, start):
    """n eager ops with shapes never used before: n new executables."""
    outs = []
    for i in range(n):
        x = torch.arange(start + i, dtype=torch.float32)
        outs.append((x, (x.to(DEV) * 3.0 - 1.0)))
    return outs


def test_compiles_are_counted():
    before = runtime.EXE_STATS.compiles
    _distinct_ops(3, 7001)
    assert runtime.EXE_STATS.compiles >= before + 3


@pytest.mark.skipif(runtime.map_count() is None, reason="needs /proc/self/maps (Linux)")
def test_release_frees_mappings_and_results_stay_right():
    pairs = _distinct_ops(40, 7100)
    before = runtime.map_count()
    runtime.release_executables(reason="test")
    after = runtime.map_count()
    assert after < before - 40, (before, after)  # each executable held mappings
    # the same ops (cached jitted functions, now without executables) recompile
    for x, _ in pairs:
        torch.testing.assert_close((x.to(DEV) * 3.0 - 1.0).cpu(), x * 3.0 - 1.0)
    # and tensors made before the release are intact
    for x, y in pairs:
        torch.testing.assert_close(y.cpu(), x * 3.0 - 1.0)


def test_watchdog_releases_past_the_mapping_limit(monkeypatch):
    st = runtime.EXE_STATS
    releases = st.releases
    if runtime.map_count() is not None:
        monkeypatch.setattr(runtime, "MAPS_FRACTION", 0.0)  # any mapping count is too many
    else:
        monkeypatch.setattr(runtime, "MAX_LIVE_EXECUTABLES", 0)
    monkeypatch.setattr(st, "next_check", st.compiles)  # check at the next build
    pairs = _distinct_ops(2, 7300)
    assert st.releases == releases + 1  # one release; the next check is CHECK_EVERY later
    for x, y in pairs:
        torch.testing.assert_close(y.cpu(), x * 3.0 - 1.0)


def test_watchdog_by_compile_count_without_proc(monkeypatch):
    st = runtime.EXE_STATS
    monkeypatch.setattr(runtime, "_map_limit", None)
    monkeypatch.setattr(runtime, "MAX_LIVE_EXECUTABLES", 5)
    monkeypatch.setattr(st, "next_check", st.compiles)
    monkeypatch.setattr(st, "since_release", 6)
    releases = st.releases
    pairs = _distinct_ops(1, 7400)
    assert st.releases == releases + 1 and st.since_release <= 4
    x, y = pairs[0]
    torch.testing.assert_close(y.cpu(), x * 3.0 - 1.0)


def test_compiled_graph_survives_release():
    def f(a, b):
        return torch.sin(a) * b + a.sum()

    cf = torch.compile(f, backend="neuron")
    a, b = torch.randn(5, 3), torch.randn(5, 3)
    torch.testing.assert_close(cf(a.to(DEV), b.to(DEV)).cpu(), f(a, b))
    runtime.release_executables(reason="test")
    torch.testing.assert_close(cf(a.to(DEV), b.to(DEV)).cpu(), f(a, b))

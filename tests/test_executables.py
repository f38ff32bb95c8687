"""Executable memory: a long process releases XLA executables before it runs out of
memory mappings (vm.max_map_count), and everything keeps computing correctly after."""
import itertools

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
    torch.neuron.synchronize()  # fused eager compiles when its program runs
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


@pytest.mark.skipif(runtime.map_count() is None, reason="needs /proc/self/maps (Linux)")
def test_release_leaves_the_programs_own_jax_functions_alone():
    """Only torchneuron's executables are released: a jax function of the program's own
    keeps its compiled executable (jax.clear_caches() would drop it), unless releasing
    torchneuron's own is not enough (then every cache goes, counted)."""
    import jax
    import jax.numpy as jnp

    user = jax.jit(lambda a: a * 2 + 1)
    user(jnp.arange(3.0))
    pairs = _distinct_ops(30, 7200)
    global_before = runtime.EXE_STATS.global_releases
    before = runtime.map_count()
    runtime.release_executables(reason="test")
    assert runtime.map_count() < before - 30
    assert user._cache_size() == 1
    assert runtime.EXE_STATS.global_releases == global_before
    for x, y in pairs:
        torch.testing.assert_close(y.cpu(), x * 3.0 - 1.0)


def test_release_falls_back_to_every_jax_cache(monkeypatch):
    import jax
    import jax.numpy as jnp

    if runtime.map_count() is None:
        pytest.skip("needs /proc/self/maps (Linux)")
    user = jax.jit(lambda a: a - 1)
    user(jnp.arange(3.0))
    monkeypatch.setattr(runtime, "MAPS_FRACTION", 0.0)  # still too many after our own
    global_before = runtime.EXE_STATS.global_releases
    runtime.release_executables(reason="test")
    assert runtime.EXE_STATS.global_releases == global_before + 1
    assert user._cache_size() == 0
    x = torch.arange(5.0)
    torch.testing.assert_close((x.to(DEV) + 2).cpu(), x + 2)


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
    releases, trims = st.releases, st.trims
    pairs = _distinct_ops(1, 7400)
    # without /proc the least recently used half goes, and the count restarts there
    assert st.trims == trims + 1 and st.releases == releases and st.since_release <= 4
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


@pytest.fixture
def default_dtype():
    old = torch.get_default_dtype()
    yield
    torch.set_default_dtype(old)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int64, torch.bool])
def test_default_dtype_is_part_of_the_executable_key(dtype, default_dtype):
    """An int/int true division computes in the default dtype: an executable cached
    under float32 must not serve the same call under float64 (was: float32 results)."""
    from helpers import assert_same
    a = torch.tensor([3, 4, 7], dtype=dtype)
    b = torch.tensor([2, 1, 2], dtype=dtype)
    for dd in (torch.float32, torch.float64, torch.float32, torch.float64):
        torch.set_default_dtype(dd)
        assert_same(torch.div(a.to(DEV), b.to(DEV)), torch.div(a, b))
        assert_same(a.to(DEV) / 2, a / 2)
        assert_same(torch.sqrt(a.to(DEV)), torch.sqrt(a))
        assert_same(torch.full((2,), 1.5, device=DEV), torch.full((2,), 1.5))
        assert_same(torch.arange(3.0, device=DEV), torch.arange(3.0))


def test_deterministic_mode_is_part_of_the_executable_key():
    """The deterministic-algorithms flags are a part of every key (a cached executable
    built outside the mode must not serve a call inside it, and back)."""
    from torchneuron.dispatch.executable import global_state
    det = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    plain = global_state()
    try:
        torch.use_deterministic_algorithms(True)
        inside = global_state()
        torch.utils.deterministic.fill_uninitialized_memory = not fill
        other_fill = global_state()
    finally:
        torch.use_deterministic_algorithms(det)
        torch.utils.deterministic.fill_uninitialized_memory = fill
    assert len({plain, inside, other_fill}) == 3
    assert global_state() == plain


def _perm_view(t, perm):
    """`t`'s values in a buffer laid out in the memory order `perm` (a strided view)."""
    inv = [perm.index(i) for i in range(len(perm))]
    return t.permute(perm).contiguous().permute(inv)


PERMS = list(itertools.permutations(range(3)))


def test_layout_sweep_compiles_the_op_once_per_shape():
    """PyTorch's test_baddbmm sweeps 216 memory layouts of its three inputs: past
    LAYOUT_VARIANTS layouts of one shape the op runs on dense copies (one more executable)
    instead of compiling per layout; every result equals the CPU's."""
    from torchneuron.dispatch import entry, layouts

    g = torch.Generator().manual_seed(0)
    x, b1, b2 = (torch.randn(s, generator=g) for s in ((4, 5, 7), (4, 5, 3), (4, 3, 7)))
    expected = torch.baddbmm(x, b1, b2, beta=0.5, alpha=1.5)
    before = entry.cache_misses["aten::baddbmm"]
    for p1, p2, p3 in itertools.product(PERMS, repeat=3):
        args = [_perm_view(t.to(DEV), p) for t, p in ((x, p1), (b1, p2), (b2, p3))]
        r = torch.baddbmm(*args, beta=0.5, alpha=1.5)
        assert r.stride() == expected.stride()
        torch.testing.assert_close(r.cpu(), expected, atol=1e-5, rtol=1e-5)
    built = entry.cache_misses["aten::baddbmm"] - before
    assert built <= layouts.LAYOUT_VARIANTS + 1, built


@pytest.mark.parametrize("op", [torch.add, torch.mul, torch.maximum])
def test_layout_sweep_keeps_the_layouts_results_follow(op):
    """Elementwise results follow their inputs' memory order (TensorIterator): where the
    dense copies would change the result's strides, each layout keeps its own executable,
    and strides and values stay the CPU's."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(3, 4, 5, generator=g), torch.randn(3, 4, 5, generator=g)
    for p1, p2 in itertools.product(PERMS, repeat=2):
        ca, cb = _perm_view(a, p1), _perm_view(b, p2)
        expected = op(ca, cb)
        r = op(_perm_view(a.to(DEV), p1), _perm_view(b.to(DEV), p2))
        assert r.stride() == expected.stride(), (p1, p2)
        torch.testing.assert_close(r.cpu(), expected)


# ---------------------------------------------------------------- one capped cache mechanism
def test_jit_cache_keeps_at_most_its_cap():
    c = runtime.JitCache("test cache", 8)
    for i in range(8 + 50):
        assert c.put(("k", i), i) == i
        assert len(c) <= 8
    assert list(c) == [("k", i) for i in range(50, 58)] and c.evictions == 50
    c.put(("k", 57), -1)  # an existing key: replaced, nothing evicted
    assert len(c) == 8 and c.evictions == 50 and c[("k", 57)] == -1
    assert runtime.jit_caches()["test cache"]["evictions"] >= 50


def test_every_executable_cache_is_capped():
    """Eager executables, compiled graphs, fused programs and storage's small device
    functions all live in JitCaches with a finite cap (one mechanism)."""
    import torchneuron

    x = torch.randn(4, 4).to(DEV)
    (x + 1).cpu()
    torch.zeros(3, device=DEV).cpu()
    x.untyped_storage().resize_(x.untyped_storage().nbytes() + 4)
    with torchneuron.eager_mode("fused"):
        for _ in range(2):
            y = x * 2 + 1
        y.cpu()
    torch.compile(lambda a: a.sin() + 1, backend="neuron")(x).cpu()
    caches = runtime.jit_caches()
    for name in ("eager executables", "compiled graphs", "fused programs", "storage zeros",
                 "storage resize", "storage device functions"):
        assert name in caches, (name, sorted(caches))
    for name, c in caches.items():
        assert 0 < c["cap"] < 10**7 and c["entries"] <= c["caches"] * c["cap"], (name, c)


def test_an_entry_past_its_cap_keeps_computing_right():
    """One op over cap + 50 shapes with a small cap: the cache stays at the cap (the
    oldest executables go) and every result equals the CPU's."""
    from torchneuron.dispatch import registry

    kern = registry.registered(torch.ops.aten.neg.default)
    entry = getattr(kern, "entry", kern)
    cap = 6
    saved, entry.cache.cap = entry.cache.cap, cap
    try:
        for n in range(1, cap + 51):
            x = torch.arange(float(n)) - 3.5
            assert torch.equal((-x.to(DEV)).cpu(), -x)
            assert len(entry.cache) <= cap
        x = torch.arange(1.0) - 3.5  # the first shape again: evicted, built once more
        assert torch.equal((-x.to(DEV)).cpu(), -x)
    finally:
        entry.cache.cap = saved


def test_jit_cache_evicts_the_least_recently_used():
    """A hit makes an entry the most recent: a key read every round survives cap + 50
    puts of new keys, and trim() drops the least recently used part first."""
    c = runtime.JitCache("test lru", 8)
    c.put("hot", 0)
    for i in range(8 + 50):
        c.put(("k", i), i)
        assert c.get("hot") == 0  # read every round: never the least recently used
        assert len(c) <= 8
    assert "hot" in c and c.evictions == 51
    assert c.get("missing", "default") == "default"
    assert list(c)[:3] == [("k", 51), ("k", 52), ("k", 53)]
    c.get(("k", 51))  # now the most recent
    assert c.trim(0.5) == 4 and c.trimmed == 4
    assert list(c) == [("k", 56), ("k", 57), "hot", ("k", 51)]
    assert c.trim(0.3) == 1 and list(c)[0] == ("k", 57)  # rounded down
    one = runtime.JitCache("test lru", 8)
    one.put("only", 1)
    assert one.trim(0.5) == 0 and "only" in one  # a cache of one keeps it


def test_pressure_drops_the_cold_half_and_keeps_the_hot_executables(monkeypatch):
    """Past the mapping limit the least recently used half of every cache goes: an op
    used every step keeps its executable (no rebuild) while cap + 50 new shapes churn,
    the cold shapes' executables are freed, and every result equals the CPU's."""
    from torchneuron.dispatch import entry as _entry
    from torchneuron.dispatch import registry

    kern = registry.registered(torch.ops.aten.neg.default)
    neg = getattr(kern, "entry", kern)
    st = runtime.EXE_STATS
    hot = torch.arange(12.0).reshape(3, 4) - 5
    hot_d = hot.to(DEV)
    trims, releases = st.trims, st.releases
    built = _entry.cache_misses["aten::exp"]
    monkeypatch.setattr(runtime, "CHECK_EVERY", 16)
    # every check finds the process full, and the trim enough
    checks = itertools.count()
    monkeypatch.setattr(runtime, "_map_limit", 65530)
    monkeypatch.setattr(runtime, "_full", lambda s: (next(checks) % 2 == 0, "test"))
    monkeypatch.setattr(st, "next_check", st.compiles)
    for n in range(1, 8 + 50):
        x = torch.arange(float(n)) + 0.5
        assert torch.equal((-x.to(DEV)).cpu(), -x)
        torch.testing.assert_close(torch.exp(hot_d).cpu(), torch.exp(hot))
    assert st.trims > trims and st.releases == releases
    assert _entry.cache_misses["aten::exp"] - built <= 1  # built once, never again
    assert len(neg.cache) < 8 + 50  # the cold shapes went


@pytest.mark.skipif(runtime.map_count() is None, reason="needs /proc/self/maps (Linux)")
def test_trim_frees_the_mappings_of_the_dropped_executables():
    _distinct_ops(60, 7500)
    before = runtime.map_count()
    runtime.trim_executables(1.0)
    assert runtime.map_count() < before - 60, (before, runtime.map_count())

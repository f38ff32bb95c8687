"""The persistent XLA compilation cache for eager ops: a second process running the same
program loads every executable from disk (no XLA compile) and computes the same bits; the
cache is configured only when the device is first used, respects jax's own setting, can
be turned off, and keeps under its size cap."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

_CHILD = r"""
import json, os
import torch  # the entry point loads torchneuron
from jax import monitoring
hits = []
monitoring.register_event_listener(
    lambda ev, **kw: hits.append(ev) if ev == "/jax/compilation_cache/cache_hits" else None)
import warnings
from torchneuron import persist, runtime
from torchneuron.dispatch import store
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
m = m.to("neuron")
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x = torch.randn(4, 6).to("neuron")
loss = m(x).square().mean()
loss.backward()
opt.step()
with warnings.catch_warnings(record=True) as caught:  # a warning given by the op's trace
    warnings.simplefilter("always")
    std = torch.ones(1).to("neuron").std()
torch.manual_seed(1)
rand = torch.nn.functional.dropout(torch.ones(8, device="neuron"), 0.5)  # a random input
print(json.dumps({"hits": len(hits), "compiles": runtime.EXE_STATS.compiles,
                  "dir": persist.persistent_cache(), "loss": loss.item(),
                  "w": m[0].weight.detach().cpu().flatten().tolist(),
                  "loads": store.STATS.loads, "writes": store.STATS.writes,
                  "unstorable": store.STATS.unstorable, "jax_served": store.STATS.jax_served,
                  "discarded": store.STATS.discarded, "std": str(std.item()),
                  "rand": rand.cpu().tolist(),
                  "warned": [str(w.message) for w in caught]}))
"""


def _run(env_extra, code=_CHILD):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHNEURON_COMPILE_CACHE")}
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _expected():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(4, 6)
    loss = m(x).square().mean()
    loss.backward()
    opt.step()
    return loss.item(), m[0].weight.detach().flatten()


def test_second_process_loads_every_executable_from_disk(tmp_path):
    """Warm: every eager executable comes from the eager executable store (no trace, no
    XLA compile), the others (transfers) from jax's cache; same bits, same warnings."""
    env = {"TORCHNEURON_CACHE_DIR": str(tmp_path)}
    first, second = _run(env), _run(env)
    assert first["dir"] == str(tmp_path / "xla")
    assert first["hits"] == 0 and first["loads"] == 0
    assert first["writes"] > 5 and first["unstorable"] == 0
    assert second["writes"] == 0 and second["loads"] == first["writes"]
    # each executable of the first process is loaded in the second, from one cache or the other
    assert second["compiles"] == first["compiles"] == second["loads"] + second["hits"]
    for k in ("loss", "w", "rand", "std"):
        assert second[k] == first[k], k
    # the warning the op's trace gave (the second process does not trace) is still given
    assert len(first["warned"]) == 1 and "degrees of freedom is <= 0" in first["warned"][0]
    assert second["warned"] == first["warned"] and first["std"] == "nan"
    assert sorted(set(first["rand"])) == [0.0, 2.0]
    loss, w = _expected()
    assert abs(first["loss"] - loss) <= 1e-5 * abs(loss)
    torch.testing.assert_close(torch.tensor(first["w"]), w, atol=1e-6, rtol=1e-5)

    # anything that configures XLA, jax or torchneuron is part of the store's key: a process
    # with another setting does not load these entries (jax's cache, keyed by the lowered
    # module, still serves the XLA executables)
    other = _run({**env, "XLA_FLAGS": "--xla_cpu_enable_fast_math=false"})
    assert other["loads"] == 0 and other["writes"] == first["writes"]
    assert other["loss"] == first["loss"] and other["w"] == first["w"]


def test_executables_jax_served_are_compiled_again_for_the_store(tmp_path):
    """Store entries gone (another torchneuron version wrote the folder): jax's cache serves
    the executables after their trace; each is compiled once more past jax's cache to be
    stored (XLA:CPU writes one it loaded without its kernels: the next process's first
    call would fail), so the next process loads every one without a trace."""
    env = {"TORCHNEURON_CACHE_DIR": str(tmp_path)}
    first = _run(env)
    for f in (tmp_path / "xla").iterdir():
        if f.name.startswith("tn-eager-"):
            f.unlink()
    second, third = _run(env), _run(env)
    assert second["loads"] == 0 and second["jax_served"] == first["writes"]
    assert second["writes"] == first["writes"]
    assert third["loads"] == first["writes"] and third["discarded"] == 0
    assert third["jax_served"] == 0 and third["writes"] == 0
    for k in ("loss", "w", "rand", "std", "warned"):
        assert second[k] == first[k] == third[k], k


def test_released_executables_reload_from_the_store(tmp_path):
    """Releasing every executable (the memory-mapping guard) drops the store's loaded ones
    too; their next call loads them again instead of tracing."""
    code = r"""
import json, torch
from torchneuron import runtime
from torchneuron.dispatch import store
x = torch.arange(6.).to("neuron")
a = (x * 2 + 1).tanh().cpu().tolist()
writes, loads = store.STATS.writes, store.STATS.loads
runtime.release_executables()
b = (x * 2 + 1).tanh().cpu().tolist()
print(json.dumps({"a": a, "b": b, "writes": writes, "loads": loads,
                  "loads_after": store.STATS.loads - loads,
                  "writes_after": store.STATS.writes - writes}))
"""
    out = _run({"TORCHNEURON_CACHE_DIR": str(tmp_path)}, code)
    assert out["writes"] >= 3 and out["loads"] == 0
    assert out["loads_after"] == out["writes"] and out["writes_after"] == 0
    expected = (torch.arange(6.) * 2 + 1).tanh().tolist()
    assert out["a"] == out["b"]
    torch.testing.assert_close(torch.tensor(out["a"]), torch.tensor(expected))


def test_cache_off_writes_nothing(tmp_path):
    out = _run({"TORCHNEURON_CACHE_DIR": str(tmp_path), "TORCHNEURON_COMPILE_CACHE_DIR": "off"})
    assert out["dir"] is None and out["hits"] == 0
    assert not (tmp_path / "xla").exists()


def _entries(folder):
    return [f for f in folder.iterdir() if f.name.endswith("-cache")]


def test_explicit_folder_and_size_cap(tmp_path):
    """A process that starts using the device trims the folder to the cap, oldest-written
    entries first."""
    cache = tmp_path / "c"
    out = _run({"TORCHNEURON_COMPILE_CACHE_DIR": str(cache),
                "TORCHNEURON_COMPILE_CACHE_MAX_SIZE": "-1"})
    assert out["dir"] == str(cache)
    entries = sorted(_entries(cache), key=lambda f: f.stat().st_mtime)
    sizes = [f.stat().st_size for f in entries]
    assert len(entries) >= 4
    keep = len(entries) // 2
    cap = sum(sizes[-keep:])
    _run({"TORCHNEURON_COMPILE_CACHE_DIR": str(cache),
          "TORCHNEURON_COMPILE_CACHE_MAX_SIZE": str(cap)},
         "import torch; torch.ones(2).to('neuron'); print('{}')")
    left = _entries(cache)
    assert sum(f.stat().st_size for f in left) <= cap
    assert {f.name for f in left} == {f.name for f in entries[-keep:]}  # the newest kept


def test_unused_device_leaves_jax_alone_and_jax_setting_wins(tmp_path):
    code = r"""
import json, torch, jax
before = jax.config.jax_compilation_cache_dir
jax.config.update("jax_compilation_cache_dir", %r)
torch.ones(2).to("neuron").add(1).cpu()
from torchneuron import persist
print(json.dumps({"before": before, "dir": persist.persistent_cache(),
                  "jax": jax.config.jax_compilation_cache_dir}))
""" % str(tmp_path / "mine")
    out = _run({"TORCHNEURON_CACHE_DIR": str(tmp_path)}, code)
    assert out["before"] is None  # importing torch (and so torchneuron) changed nothing
    assert out["dir"] == out["jax"] == str(tmp_path / "mine")
    assert not (tmp_path / "xla").exists()


def test_cache_entries_are_written_whole(tmp_path):
    """Entries are written under a temporary name and renamed, so a process sharing the
    folder never reads half an entry; the cache reads back what was put."""
    from jax._src import lru_cache

    from torchneuron import persist

    persist._atomic_cache_writes()
    assert getattr(lru_cache.LRUCache.put, "_torchneuron", False)
    cache = lru_cache.LRUCache(str(tmp_path), max_size=-1)
    cache.put("k1", b"x" * 1000)
    cache.put("k1", b"y")  # an existing entry is kept, as jax does
    assert sorted(f.name for f in tmp_path.iterdir()) == ["k1-cache"]
    assert cache.get("k1") == b"x" * 1000

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
from torchneuron import runtime
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
m = m.to("neuron")
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x = torch.randn(4, 6).to("neuron")
loss = m(x).square().mean()
loss.backward()
opt.step()
print(json.dumps({"hits": len(hits), "compiles": runtime.EXE_STATS.compiles,
                  "dir": runtime.persistent_cache(), "loss": loss.item(),
                  "w": m[0].weight.detach().cpu().flatten().tolist()}))
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


def test_second_process_loads_every_eager_executable_from_disk(tmp_path):
    env = {"TORCHNEURON_CACHE_DIR": str(tmp_path)}
    first, second = _run(env), _run(env)
    assert first["dir"] == str(tmp_path / "xla")
    assert first["hits"] == 0 and first["compiles"] > 5
    # warm: every executable the first process compiled comes from the disk
    assert second["hits"] == first["compiles"] == second["compiles"]
    assert second["loss"] == first["loss"] and second["w"] == first["w"]
    loss, w = _expected()
    assert abs(first["loss"] - loss) <= 1e-5 * abs(loss)
    torch.testing.assert_close(torch.tensor(first["w"]), w, atol=1e-6, rtol=1e-5)


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
from torchneuron import runtime
print(json.dumps({"before": before, "dir": runtime.persistent_cache(),
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

    from torchneuron import runtime

    runtime._atomic_cache_writes()
    assert getattr(lru_cache.LRUCache.put, "_torchneuron", False)
    cache = lru_cache.LRUCache(str(tmp_path), max_size=-1)
    cache.put("k1", b"x" * 1000)
    cache.put("k1", b"y")  # an existing entry is kept, as jax does
    assert sorted(f.name for f in tmp_path.iterdir()) == ["k1-cache"]
    assert cache.get("k1") == b"x" * 1000

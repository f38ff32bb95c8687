"""Safe on-disk caches (torchneuron.persist): private folders, signed entries; the eager
executable store reads a tampered or foreign entry as a miss, never unpickling it."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from torchneuron import persist


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_private_dir_creates_owner_only(tmp_path):
    d = tmp_path / "a" / "b" / "cache"
    got = persist.private_dir(str(d))
    assert got == str(d) and d.is_dir()
    assert _mode(d) == 0o700 and os.stat(d).st_uid == os.getuid()
    assert persist.private_dir(str(d)) == str(d)  # again: unchanged


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o770, 0o777, 0o1777])
def test_private_dir_tightens_our_loose_folder(tmp_path, mode):
    d = tmp_path / "loose"
    d.mkdir()
    os.chmod(d, mode)
    assert persist.private_dir(str(d)) == str(d)
    assert _mode(d) == 0o700


def test_private_dir_refuses_what_it_cannot_make_private(tmp_path, monkeypatch):
    """A folder others can write that cannot be tightened (chmod fails: as for another
    user's folder) is refused, with the path, its owner and mode and what to do."""
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)

    def no_chmod(path, mode):
        raise PermissionError(1, "Operation not permitted", path)

    monkeypatch.setattr(persist.os, "chmod", no_chmod)
    with pytest.raises(PermissionError) as e:
        persist.private_dir(str(d))
    msg = str(e.value)
    assert str(d) in msg and "0o777" in msg and "uid" in msg and "chmod 700" in msg


def test_private_dir_refuses_another_users_folder(tmp_path, monkeypatch):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    monkeypatch.setattr(persist.os, "getuid", lambda: os.stat(d).st_uid + 1)
    with pytest.raises(PermissionError, match="belongs to another user") as e:
        persist.private_dir(str(d))
    assert str(d) in str(e.value) and "0o700" in str(e.value)


def test_private_dir_refuses_a_symlink(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(PermissionError, match="symbolic link"):
        persist.private_dir(str(link))


def test_secret_is_made_once_owner_only(tmp_path):
    root = tmp_path / "root"
    k = persist.secret(str(root))
    assert len(k) == 32 and _mode(root) == 0o700
    f = root / ".persist-key"
    assert _mode(f) == 0o600 and f.read_bytes() == k
    persist._secrets.clear()
    assert persist.secret(str(root)) == k  # read back, not made again
    assert [p.name for p in root.iterdir()] == [".persist-key"]  # no temporary left
    persist._secrets.clear()
    os.chmod(f, 0o644)
    with pytest.raises(PermissionError, match="0o600"):
        persist.secret(str(root))
    persist._secrets.clear()


def test_verified_round_trip(tmp_path):
    key = os.urandom(32)
    p = str(tmp_path / "e-cache")
    payload = bytes(range(256)) * 10
    assert persist.verified_write(p, key, payload)
    assert _mode(p) == 0o600
    assert persist.verified_read(p, key) == payload
    assert persist.verified_read(p, os.urandom(32)) is None  # another user's key
    assert persist.verified_read(str(tmp_path / "missing"), key) is None
    assert persist.verified_write(p, key, b"")  # replaced whole; empty payload is fine
    assert persist.verified_read(p, key) == b""
    assert sorted(f.name for f in tmp_path.iterdir()) == ["e-cache"]  # no temporary left


def test_verified_read_rejects_tampering(tmp_path):
    key = os.urandom(32)
    p = tmp_path / "e-cache"
    persist.verified_write(str(p), key, b"payload" * 100)
    blob = bytearray(p.read_bytes())
    for i in (0, persist.TAG - 1, persist.TAG, len(blob) - 1):  # tag bytes and payload bytes
        bad = bytearray(blob)
        bad[i] ^= 1
        p.write_bytes(bytes(bad))
        assert persist.verified_read(str(p), key) is None, i
    p.write_bytes(bytes(blob[:-1]))  # torn
    assert persist.verified_read(str(p), key) is None
    p.write_bytes(bytes(blob[:10]))  # shorter than a tag
    assert persist.verified_read(str(p), key) is None
    # an entry copied under another name (another cache key) does not verify there
    p.write_bytes(bytes(blob))
    other = tmp_path / "f-cache"
    other.write_bytes(bytes(blob))
    assert persist.verified_read(str(p), key) == b"payload" * 100
    assert persist.verified_read(str(other), key) is None


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_verified_read_rejects_writable_by_others(tmp_path, mode):
    key = os.urandom(32)
    p = tmp_path / "e-cache"
    persist.verified_write(str(p), key, b"x")
    os.chmod(p, mode)
    assert persist.verified_read(str(p), key) is None
    os.chmod(p, 0o644)  # others may read, not write: fine
    assert persist.verified_read(str(p), key) == b"x"


def test_verified_read_rejects_not_ours_and_links(tmp_path, monkeypatch):
    key = os.urandom(32)
    p = tmp_path / "e-cache"
    persist.verified_write(str(p), key, b"x")
    link = tmp_path / "l-cache"
    link.symlink_to(p)
    assert persist.verified_read(str(link), key) is None
    monkeypatch.setattr(persist.os, "getuid", lambda: os.stat(p).st_uid + 1)
    assert persist.verified_read(str(p), key) is None


# ---------------------------------------------------------------- the eager executable store
_STORE_CHILD = r"""
import json, torch
from torchneuron import runtime
from torchneuron.dispatch import store
x = torch.arange(6.).to("neuron")
y = (x * 2 + 1).tanh().cpu().tolist()
print(json.dumps({"y": y, "loads": store.STATS.loads, "writes": store.STATS.writes,
                  "rejected": store.STATS.rejected, "dir": store.folder()}))
"""


def _run_store(env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHNEURON_COMPILE_CACHE")}
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-c", _STORE_CHILD], env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_store_treats_tampered_or_foreign_entries_as_misses(tmp_path):
    """Entries are signed; a flipped byte or an entry others can write is a miss (counted
    as rejected, compiled and written again), never unpickled; the folders are private."""
    env = {"TORCHNEURON_CACHE_DIR": str(tmp_path / "root")}
    first = _run_store(env)
    folder = tmp_path / "root" / "xla"
    assert first["dir"] == str(folder) and first["writes"] >= 3 and first["rejected"] == 0
    assert _mode(folder) == 0o700 and _mode(tmp_path / "root") == 0o700
    entries = sorted(f for f in folder.iterdir() if f.name.startswith("tn-eager-"))
    assert len(entries) == first["writes"]
    assert all(_mode(f) == 0o600 for f in entries)
    assert _mode(tmp_path / "root" / ".persist-key") == 0o600

    # (the untouched entries load below: loads == writes - 3)
    # tamper: the first entry gets a flipped payload byte, the second one a flipped tag
    # byte, the third one becomes writable by others
    for f, i in ((entries[0], -1), (entries[1], 0)):
        blob = bytearray(f.read_bytes())
        blob[i] ^= 0xFF
        f.write_bytes(bytes(blob))
    os.chmod(entries[2], 0o666)
    second = _run_store(env)
    assert second["rejected"] == 3 and second["writes"] == 3
    assert second["loads"] == first["writes"] - 3
    assert second["y"] == first["y"]
    third = _run_store(env)  # rewritten, signed again: all loaded
    assert third["loads"] == first["writes"] and third["rejected"] == 0
    assert third["y"] == first["y"]


def test_store_is_off_in_a_folder_it_cannot_make_private(tmp_path):
    """jax's own cache folder set to another user's: the store stays off (a warning) and
    the program still runs."""
    code = r"""
import json, os, warnings, torch, jax
from torchneuron import persist
jax.config.update("jax_compilation_cache_dir", %r)
real = os.getuid
persist.os.getuid = lambda: real() + 1  # as if the folder were another user's
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y = (torch.arange(4.).to("neuron") + 1).cpu().tolist()
from torchneuron.dispatch import store
print(json.dumps({"y": y, "dir": store.folder(), "writes": store.STATS.writes,
                  "warned": [str(w.message) for w in caught if "store is off" in str(w.message)]}))
""" % str(tmp_path / "jaxdir")
    os.makedirs(tmp_path / "jaxdir")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHNEURON_COMPILE_CACHE")}
    env["TORCHNEURON_CACHE_DIR"] = str(tmp_path / "root")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["y"] == [1.0, 2.0, 3.0, 4.0] and out["dir"] is None and out["writes"] == 0
    assert len(out["warned"]) == 1 and "another user" in out["warned"][0]
    assert not [f for f in (tmp_path / "jaxdir").iterdir() if f.name.startswith("tn-eager-")]


def test_scan_xla_cache_is_private_under_the_cache_root(tmp_path, monkeypatch):
    from torchneuron.tools import model_scan

    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(tmp_path / "root"))
    monkeypatch.delenv("TORCHNEURON_SCAN_XLA_CACHE", raising=False)
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    env = model_scan.scan_env()
    d = tmp_path / "root" / "scan-xla"
    assert env["JAX_COMPILATION_CACHE_DIR"] == str(d) and _mode(d) == 0o700
    monkeypatch.setenv("TORCHNEURON_SCAN_XLA_CACHE", "off")
    assert "JAX_COMPILATION_CACHE_DIR" not in model_scan.scan_env()

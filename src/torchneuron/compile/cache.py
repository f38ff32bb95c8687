"""The persistent (on-disk) compilation cache: jax's, pointed at a torchneuron folder.

A second process that compiles the same graphs loads the XLA executables from
disk instead of compiling them again (Dynamo, AOTAutograd and the jax trace
still run; only the XLA compile is skipped).

TORCHNEURON_COMPILE_CACHE_DIR=path   where executables go (default
    $XDG_CACHE_HOME/torchneuron/xla, else ~/.cache/torchneuron/xla);
    "0", "off" or "" turns the cache off.  If jax's own
    jax_compilation_cache_dir is already set, that one is used.
TORCHNEURON_COMPILE_CACHE_MIN_SECS=s  only compiled graphs that took at least s
    seconds are written (default 0: all of them).  Eager per-op executables
    keep jax's own threshold (1 s), so they rarely reach the disk.
"""
from __future__ import annotations

import contextlib
import os

import jax

from .. import config

_configured = False
_dir = None


def _default_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torchneuron", "xla")


def cache_dir():
    """The folder of the persistent compilation cache (None when off)."""
    setup()
    return _dir


def setup():
    """Point jax's compilation cache at our folder (once; before the first compile)."""
    global _configured, _dir
    if _configured:
        return
    _configured = True
    try:
        from jax import monitoring

        monitoring.register_event_listener(_on_event)
    except Exception:  # noqa: BLE001
        pass
    current = jax.config.jax_compilation_cache_dir
    if current:
        _dir = current
        return
    env = config.get("TORCHNEURON_COMPILE_CACHE_DIR")
    if env is not None and env.strip().lower() in ("", "0", "off", "none", "false"):
        _dir = None
        return
    path = os.path.abspath(os.path.expanduser(env)) if env else _default_dir()
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        _dir = None
        return
    jax.config.update("jax_compilation_cache_dir", path)
    _dir = path


def _on_event(event, **kwargs):
    if event == "/jax/compilation_cache/cache_hits" and _compiling_depth[0]:
        from .counters import STATS

        STATS.disk_cache_hits += 1


_compiling_depth = [0]


@contextlib.contextmanager
def compiling():
    """Around a graph's lower+compile: write it to the disk cache whatever its compile time."""
    setup()
    secs = config.get("TORCHNEURON_COMPILE_CACHE_MIN_SECS")
    _compiling_depth[0] += 1
    try:
        state = _min_time_state()
        if state is not None:
            with state(secs):
                yield
        else:
            yield
    finally:
        _compiling_depth[0] -= 1


def _min_time_state():
    try:
        from jax._src import config as jcfg

        return jcfg.persistent_cache_min_compile_time_secs
    except Exception:  # noqa: BLE001
        return None

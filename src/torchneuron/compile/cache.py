"""The persistent (on-disk) compilation cache, as torch.compile uses it.

The cache itself is jax's, configured by :func:`torchneuron.persist.persistent_cache` when
the device is first used (TORCHNEURON_COMPILE_CACHE_DIR, default
``$TORCHNEURON_CACHE_DIR/xla``; ``off`` turns it off; a folder set with jax's own
``jax_compilation_cache_dir`` wins).  A second process that compiles the same graphs loads
the XLA executables from disk instead of compiling them again (Dynamo, AOTAutograd and the
jax trace still run).  Here: counting disk hits of graph compiles, and writing every graph
whatever its compile time (TORCHNEURON_COMPILE_CACHE_MIN_SECS, default 0).
"""
from __future__ import annotations

import contextlib

from .. import config, persist, runtime


def cache_dir():
    """The folder of the persistent compilation cache (None when off)."""
    setup()
    return persist.persistent_cache()


def setup():
    """Configure the cache (once; before the first compile)."""
    persist.persistent_cache()


_compiling_depth = [0]


@contextlib.contextmanager
def compiling():
    """Around a graph's lower+compile: write it to the disk cache whatever its compile time;
    count the graph executables jax's cache served."""
    setup()
    secs = config.get("TORCHNEURON_COMPILE_CACHE_MIN_SECS")
    outer = not _compiling_depth[0]
    hits = runtime.jax_cache_hits()
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
        if outer:
            from .counters import STATS

            STATS.disk_cache_hits += runtime.jax_cache_hits() - hits


def _min_time_state():
    try:
        from jax._src import config as jcfg

        return jcfg.persistent_cache_min_compile_time_secs
    except Exception:  # noqa: BLE001
        return None

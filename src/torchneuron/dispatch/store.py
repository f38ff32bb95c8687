"""The eager executable store: compiled eager executables on disk, keyed by the eager
cache key itself.

jax's persistent compilation cache (persist.persistent_cache) is keyed by the lowered
module, so a warm process still traces every op's lowering to a jaxpr and lowers it to
StableHLO before it finds the executable on disk: for the first ``generate()`` of a tiny
GPT-2 that trace and lowering were 3.5 of 4.7 s.  This store is keyed by what the eager
entry already knows before any trace: the op, its lowering, the entry's cache key
(dtypes, shapes, strides, static arguments, aliasing, device, global state) and a code
version (a hash of torchneuron's sources, the jax/jaxlib/torch versions, the device kind
and the environment variables that configure XLA, jax and torchneuron).  A hit
deserializes the XLA executable and the warnings its trace gave, with no trace at all.

It lives in the persistent cache's folder (entries ``tn-eager-<sha256>-cache``, under the
same size cap) and is on exactly when that cache is.  Executables whose key cannot be
written stably (an object printed by address), or that call back into Python (host
callbacks) or hold constants, are not stored: they compile as before.  An executable
jax's own cache served (an entry of another code version) is compiled once more, past
jax's cache, to be stored (see :func:`jax_cache_hits`).

A hit unpickles what the entry holds, so nothing is read that another user could have
written: the folder must be ours and private (:func:`torchneuron.persist.private_dir`
makes it mode 0o700; a folder of another user, or one others can write that cannot be
tightened, turns the store off with a warning), and every entry carries an HMAC-SHA256
tag under a per-user key (:mod:`torchneuron.persist`).  An entry whose tag does not
match, that is not ours or that others can write is a miss (counted in
``STATS.rejected``), never unpickled; the executable is compiled and the entry written
again.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import weakref

import jax

from .. import persist, runtime
from . import tiers
from .plan import COMPILED, FIRST_CALL, JIT

PREFIX = "tn-eager-"
SUFFIX = "-cache"


class _Stats:
    loads = 0       # executables read from the store (no trace, no compile)
    writes = 0      # executables written to it
    unstorable = 0  # executables that compiled but could not be stored
    jax_served = 0  # executables jax's persistent cache served (compiled again to store)
    discarded = 0   # entries that loaded but did not run (removed, built again)
    rejected = 0    # entries present that failed verification (a miss, never unpickled)


STATS = _Stats()
_version = None
_loaded = weakref.WeakSet()  # executables whose fn is a loaded/compiled jax executable
_hooked = False


def folder():
    """The store's folder (the persistent cache's, made private), or None when it is
    off (persist.store_folder)."""
    got = persist.store_folder()
    return got[0] if got is not None else None


def _key():
    return persist.store_folder()[1]


def code_version() -> str:
    """What an executable depends on beyond its key (computed once per process)."""
    global _version
    if _version is None:
        import jaxlib
        import torch

        h = hashlib.sha256()
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    h.update(os.path.relpath(path, root).encode())
                    with open(path, "rb") as f:
                        h.update(f.read())
        env = sorted((k, v) for k, v in os.environ.items()
                     if k.startswith(("TORCHNEURON_", "XLA_", "JAX_"))
                     and not k.startswith(("TORCHNEURON_COMPILE_CACHE", "TORCHNEURON_CACHE_DIR")))
        h.update(repr((jax.__version__, jaxlib.__version__, torch.__version__, env,
                       jax.config.jax_enable_x64,
                       jax.config.jax_default_matmul_precision)).encode())
        _version = h.hexdigest()
    return _version


def key_of(parts, device):
    """The store key of an executable (None when `parts` do not print stably)."""
    text = repr(parts)
    if " at 0x" in text:
        return None
    h = hashlib.sha256(code_version().encode())
    h.update(repr((device.platform, device.device_kind, device.id)).encode())
    h.update(text.encode())
    return h.hexdigest()


def jax_cache_hits() -> int:
    """How many executables jax's persistent cache has served in this process.  An
    executable jax loaded from its cache is not stored as it is: XLA:CPU serializes such an
    executable without its compiled kernels, and loading that fails at the first call
    ("Function ... not found"); it is compiled again past jax's cache for the store."""
    return runtime.jax_cache_hits()


@contextlib.contextmanager
def jax_cache_bypassed():
    """Compiles inside skip jax's persistent cache (yields False where this jax keeps its
    cache switch elsewhere: then nothing is bypassed)."""
    try:
        from jax._src import compilation_cache as cc

        saved = (cc._cache_checked, cc._cache_used)
    except (ImportError, AttributeError):
        yield False
        return
    cc._cache_checked, cc._cache_used = True, False
    try:
        yield True
    finally:
        cc._cache_checked, cc._cache_used = saved


def _path(key):
    return os.path.join(folder(), PREFIX + key + SUFFIX)


def load(key, device):
    """(compiled executable, warnings) stored under `key`, or None (a missing entry,
    or one that fails verification: persist.verified_read)."""
    if folder() is None:
        return None
    path = _path(key)
    blob = persist.verified_read(path, _key())
    if blob is None:
        if os.path.lexists(path):
            STATS.rejected += 1
        return None
    try:
        from jax.experimental import serialize_executable

        payload, in_tree, out_tree, warn = pickle.loads(blob)
        compiled = serialize_executable.deserialize_and_load(
            payload, in_tree, out_tree, backend=device.client, execution_devices=[device])
    except Exception:  # noqa: BLE001  an entry of another jax: compile instead
        return None
    STATS.loads += 1
    # a loaded executable maps memory like a compiled one: count it for the release check
    runtime.EXE_STATS.compiles += 1
    runtime.EXE_STATS.since_release += 1
    return compiled, list(warn)


def discard(key) -> None:
    """Remove an entry that loaded but did not run."""
    STATS.discarded += 1
    try:
        os.remove(_path(key))
    except OSError:
        pass


def save(key, compiled, warn) -> bool:
    """Write `compiled` (and its trace's warnings) under `key`, signed
    (persist.verified_write); False when it cannot be."""
    if folder() is None:
        return False
    try:
        call = compiled._executable.unsafe_call
        if getattr(call, "has_host_callbacks", True) or \
                getattr(call, "has_unordered_effects", True):
            raise ValueError("host callbacks or effects")
        from jax.experimental import serialize_executable

        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
        blob = pickle.dumps((payload, in_tree, out_tree, [(str(m), bool(o)) for m, o in warn]))
    except Exception:  # noqa: BLE001  not serializable: it stays in memory only
        STATS.unstorable += 1
        return False
    if not persist.verified_write(_path(key), _key(), blob):  # written whole, mode 0o600
        return False
    STATS.writes += 1
    return True


def attach(exe, parts, device) -> None:
    """Put the eager executable `exe` under the store (when it is on and `parts`, its
    name and cache key, can be written stably): its first call loads it or builds
    and stores it (:func:`first_call`).  Otherwise it is reached through jax.jit
    (stage JIT), tiered where tiering applies (dispatch/tiers.py)."""
    if folder() is not None:
        exe.store_key = key_of(parts, device)
    if exe.store_key is not None:
        exe.fn = functools.partial(first_call, exe)
        exe.stage = FIRST_CALL
    elif tiers.tiered(device):  # the store off: lowered and compiled at the first call
        _jit_tier(exe, device)


def _jit_tier(exe, device) -> None:
    """An executable reached through jax.jit with the store off (stage JIT, so fused eager
    records it without a first call): its first call lowers and compiles it, tier 1 where
    it applies (dispatch/tiers.py)."""
    exe.fn = functools.partial(_jit_first, exe, device)


def _jit_first(exe, device, *inputs):
    compiled = tiers.first_compile(exe, exe.jit.trace(*inputs).lower(), device, inputs)
    exe.fn = compiled
    track(exe)
    return compiled(*inputs)


def _store_tier_up(exe, compiled, served):
    if exe.store_key is not None and not served:  # (see jax_cache_hits)
        save(exe.store_key, compiled, exe.warn)


tiers.on_tier_up(_store_tier_up)


def first_call(exe, *inputs):
    """An executable's first call with the store on: load it from the store (no trace,
    no compile; its trace's warnings come with it), else trace, compile and store it.
    Later calls go straight to the jax executable."""
    device = runtime.jax_device(exe.index)
    got = load(exe.store_key, device)
    if got is not None:
        compiled, warn = got
        try:
            res = compiled(*inputs)
        except Exception:  # noqa: BLE001  an entry that does not run here: build it again
            discard(exe.store_key)
        else:
            exe.fn, exe.warn, exe.stage = compiled, warn, COMPILED
            track(exe)
            return res
    hits = jax_cache_hits()
    # the trace fills exe.warn; tiers: a fast compile first where it applies
    compiled = tiers.first_compile(exe, exe.jit.trace(*inputs).lower(), device, inputs)
    if jax_cache_hits() != hits:
        # jax's cache served it (written under another code version): XLA:CPU cannot
        # serialize again an executable it loaded (its kernels are missing), so compile it
        # once more past jax's cache (a new function: jit's own caches miss) for the store
        STATS.jax_served += 1
        with jax_cache_bypassed() as bypassed:
            if bypassed:
                fresh = runtime.jit(functools.partial(exe.jit.__wrapped__),
                                    out_shardings=jax.sharding.SingleDeviceSharding(device))
                compiled = tiers.first_compile(exe, fresh.trace(*inputs).lower(), device,
                                               inputs)
        hits = jax_cache_hits() if bypassed else None
    if jax_cache_hits() == hits:
        save(exe.store_key, compiled, exe.warn)
    exe.fn, exe.stage = compiled, COMPILED
    track(exe)
    return compiled(*inputs)


def _unload(exe):
    """Releasing every executable: drop this one's (the next call loads or builds it
    again)."""
    tiers.forget(exe)
    if exe.stage == JIT:  # the store off
        _jit_tier(exe, runtime.jax_device(exe.index))
        return
    exe.fn = functools.partial(first_call, exe)
    exe.stage = FIRST_CALL


def track(exe) -> None:
    """Remember an executable holding a jax executable of its own, so that releasing every
    executable (runtime.release_executables) unloads it."""
    global _hooked
    if not _hooked:
        _hooked = True
        runtime.on_release(_release)
    _loaded.add(exe)


def _release():
    for exe in list(_loaded):
        _unload(exe)
    _loaded.clear()

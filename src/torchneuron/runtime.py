"""The PJRT side: which jax platform backs the neuron device, and dtype maps.

Importing this module turns on jax's x64 mode, so int64/float64/complex128
tensors are never narrowed.
"""
from __future__ import annotations


import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import torch

from . import config, persist

jax.config.update("jax_enable_x64", True)

_devices = None
_platform = None


def _pick_platform() -> str:
    want = config.get("TORCHNEURON_PLATFORM").strip().lower()
    if want:
        return want
    for gpu in ("cuda", "rocm", "gpu"):
        try:
            if jax.local_devices(backend=gpu):
                return gpu
        except RuntimeError:
            continue
    return "cpu"


# ---------------------------------------------------------------- one device per process
# Under torchrun (LOCAL_RANK / LOCAL_WORLD_SIZE set, more than one process on the node)
# each process sees exactly one device, LOCAL_RANK's, as neuron:0: the Python device
# guard always reports device 0 (autograd's engine asserts on neuron:1), and jax must
# not claim every GPU in every process.
def torchrun_local() -> tuple[int, int] | None:
    """(LOCAL_RANK, LOCAL_WORLD_SIZE) when launched by torchrun with >1 local process."""
    import os

    try:
        rank = int(os.environ["LOCAL_RANK"])
        size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except (KeyError, ValueError):
        return None
    return (rank, size) if size > 1 else None


def _restrict_gpus() -> None:
    local = torchrun_local()
    if local is None or config.get("TORCHNEURON_PLATFORM").strip().lower() == "cpu":
        return
    if config.get("TORCHNEURON_COLLECTIVES") == "xla":
        return  # jax.distributed.initialize(local_device_ids=...) picks the device
    try:
        jax.config.update("jax_cuda_visible_devices", str(local[0]))
    except (AttributeError, KeyError, ValueError, RuntimeError):
        pass  # a jax without the option (or backends already up): devices() picks one


_restrict_gpus()


# ---------------------------------------------------------------- XLA collectives
_multiprocess = False


def _init_multiprocess() -> None:
    """TORCHNEURON_COLLECTIVES=xla under torchrun: start jax.distributed (before any jax
    backend exists), so XLA programs can run collectives across the processes."""
    global _multiprocess
    import os

    if config.get("TORCHNEURON_COLLECTIVES") != "xla":
        return
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return
    if world < 2:
        return
    coord = config.get("TORCHNEURON_XLA_COORDINATOR").strip()
    if not coord:
        try:
            coord = f"{os.environ['MASTER_ADDR']}:{int(os.environ['MASTER_PORT']) + 1}"
        except (KeyError, ValueError):
            raise RuntimeError(
                "TORCHNEURON_COLLECTIVES=xla needs torchrun's MASTER_ADDR/MASTER_PORT or "
                "TORCHNEURON_XLA_COORDINATOR=host:port") from None
    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except (AttributeError, KeyError, ValueError):
        pass
    local = torchrun_local()
    kw = {}
    if local is not None and config.get("TORCHNEURON_PLATFORM").strip().lower() != "cpu":
        kw["local_device_ids"] = [local[0]]
    jax.distributed.initialize(coordinator_address=coord, num_processes=world,
                               process_id=rank, **kw)
    _multiprocess = True


def multiprocess() -> bool:
    """Whether jax.distributed is up (TORCHNEURON_COLLECTIVES=xla under torchrun)."""
    return _multiprocess


_init_multiprocess()


def local_alias() -> int | None:
    """The device index that means this process's device (neuron:0) besides 0 under
    torchrun (LOCAL_RANK, so ``torch.neuron.set_device(LOCAL_RANK)`` works)."""
    local = torchrun_local()
    if local is None or local[0] == 0 or device_count() != 1:
        return None
    return local[0]


def platform() -> str:
    if _platform is None:
        devices()
    return _platform


def devices() -> list:
    """The PJRT devices that neuron:0..N-1 map to."""
    global _devices, _platform
    if _devices is None:
        persist.persistent_cache()  # before the device's first compile
        plat = _pick_platform()
        try:
            devs = jax.local_devices(backend=plat)  # (this process's, under jax.distributed)
        except RuntimeError as e:
            raise RuntimeError(
                f"torchneuron: TORCHNEURON_PLATFORM={plat!r} is not available to jax ({e})"
            ) from None
        _platform = devs[0].platform
        local = torchrun_local()
        if local is not None and len(devs) > 1:
            devs = [devs[local[0] % len(devs)]]  # one device per process
        _devices = list(devs)
    return _devices


def device_count() -> int:
    try:
        return len(devices())
    except RuntimeError:
        return 0


def jax_device(index: int):
    devs = devices()
    if index is None:
        index = 0
    if not 0 <= index < len(devs):
        raise RuntimeError(
            f"Invalid device ordinal: neuron:{index} requested but only {len(devs)} "
            f"neuron device(s) are available (PJRT platform {_platform!r})"
        )
    return devs[index]


# torch dtype <-> jax/numpy dtype
TORCH_TO_JAX = {
    torch.bool: jnp.dtype(jnp.bool_),
    torch.uint8: jnp.dtype(jnp.uint8),
    torch.int8: jnp.dtype(jnp.int8),
    torch.int16: jnp.dtype(jnp.int16),
    torch.int32: jnp.dtype(jnp.int32),
    torch.int64: jnp.dtype(jnp.int64),
    torch.uint16: jnp.dtype(jnp.uint16),
    torch.uint32: jnp.dtype(jnp.uint32),
    torch.uint64: jnp.dtype(jnp.uint64),
    torch.float16: jnp.dtype(jnp.float16),
    torch.bfloat16: jnp.dtype(jnp.bfloat16),
    torch.float32: jnp.dtype(jnp.float32),
    torch.float64: jnp.dtype(jnp.float64),
    torch.complex64: jnp.dtype(jnp.complex64),
    torch.complex128: jnp.dtype(jnp.complex128),
    torch.float8_e4m3fn: jnp.dtype(ml_dtypes.float8_e4m3fn),
    torch.float8_e5m2: jnp.dtype(ml_dtypes.float8_e5m2),
    torch.float8_e4m3fnuz: jnp.dtype(ml_dtypes.float8_e4m3fnuz),
    torch.float8_e5m2fnuz: jnp.dtype(ml_dtypes.float8_e5m2fnuz),
}
JAX_TO_TORCH = {v: k for k, v in TORCH_TO_JAX.items()}

# numpy cannot hold these torch dtypes: move them through an integer of the same width
_HOST_VIA = {
    torch.bfloat16: torch.int16,
    torch.float8_e4m3fn: torch.int8,
    torch.float8_e5m2: torch.int8,
    torch.float8_e4m3fnuz: torch.int8,
    torch.float8_e5m2fnuz: torch.int8,
    torch.uint16: torch.int16,
    torch.uint32: torch.int32,
    torch.uint64: torch.int64,
}


def jdtype(dtype: torch.dtype):
    try:
        return TORCH_TO_JAX[dtype]
    except KeyError:
        raise TypeError(f"torchneuron: dtype {dtype} is not supported on the neuron device") from None


def tdtype(dtype) -> torch.dtype:
    return JAX_TO_TORCH[jnp.dtype(dtype)]


def torch_to_numpy(t: torch.Tensor) -> np.ndarray:
    """A contiguous CPU tensor as a numpy array of the matching (ml_)dtype, sharing memory."""
    if t.requires_grad:  # an upload of a leaf that requires grad (autograd is above us)
        t = t.detach()
    via = _HOST_VIA.get(t.dtype)
    if via is not None:
        return t.view(via).numpy().view(TORCH_TO_JAX[t.dtype])
    return t.numpy()


def numpy_to_torch(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A writable numpy array as a CPU tensor of `dtype`, sharing memory."""
    via = _HOST_VIA.get(dtype)
    if via is not None:
        return torch.from_numpy(a.view(TORCH_TO_JAX[via])).view(dtype)
    return torch.from_numpy(a)


# ---------------------------------------------------------------- executable memory
# Every XLA executable that jax keeps alive holds a few memory mappings (XLA:CPU
# JITs each kernel into mappings of its own: about 3 for a small elementwise op,
# more for bigger ones).  jax's caches, and the jitted functions that the eager
# executable caches hold, keep thousands of them alive; past the kernel's
# vm.max_map_count (65530 by default) LLVM's next allocation fails and the process
# dies with a segmentation fault inside the XLA compiler.  So every XLA compile is
# counted (jax's monitoring event), and every CHECK_EVERY compiles a safe point
# (the start of an eager executable build or a graph compile) reads the process's
# mapping count; past MAPS_FRACTION of the limit, all executables are released
# with jax.clear_caches() (the jitted functions stay valid and recompile on their
# next call).  Where /proc is not readable, a plain count of compiles since the
# last release (TORCHNEURON_MAX_LIVE_EXECUTABLES) decides instead.
#
# Only torchneuron's own executables are released: every function torchneuron jits is
# made by jit() below and remembered (weakly); a release clears those functions' caches
# (jax's per-function clear_cache: the C++ executable cache and the function's traces,
# after which jax's lowering and compilation caches, weakly keyed, let the executables
# go).  A program's own jax functions keep their compiled executables.  Only where that
# is not enough (the mappings stay above the limit: something else holds them, such as
# jax's op-by-op primitive cache) does the release fall back to jax.clear_caches(),
# logged as such.
import collections
import logging as _logging
import weakref as _weakref

_jitted: "_weakref.WeakSet" = _weakref.WeakSet()


def jit(fn, **kwargs):
    """jax.jit for torchneuron's own functions: the executables it makes are released by
    release_executables()."""
    f = jax.jit(fn, **kwargs)
    _jitted.add(f)
    return f


_caches: "_weakref.WeakValueDictionary" = _weakref.WeakValueDictionary()
SMALL_FNS_MAX = 4096  # the cap of each cache of small device functions


class JitCache(collections.OrderedDict):
    """A cache of jitted functions or executables with a cap, the one mechanism that
    bounds them all: eager entries' executables, compiled graphs' executables, fused
    eager's programs, storage's small device functions.  Least recently used first out:
    a hit moves its entry to the end; past `cap` entries the least recently used goes
    (its executables with it, once nothing else holds them), and under memory pressure
    :func:`trim_executables` drops the least recently used part of every cache.
    :func:`jit_caches` lists every cache."""

    def __init__(self, name: str, cap: int):
        super().__init__()
        self.name = name
        self.cap = cap
        self.evictions = 0
        self.trimmed = 0  # of the evictions, those of trim()
        _caches[id(self)] = self

    def get(self, key, default=None):
        """The entry of `key` (now the most recently used), or `default`."""
        try:
            self.move_to_end(key)
        except KeyError:
            return default
        return self[key]

    def put(self, key, value):
        """Add `key` (evicting the least recently used entry when full); returns
        `value`."""
        if key not in self:
            while len(self) >= self.cap:  # (a loop: the cap may have been lowered)
                self.popitem(last=False)
                self.evictions += 1
        self[key] = value
        return value

    def trim(self, fraction: float) -> int:
        """Drop the least recently used `fraction` of the entries (rounded down: a cache
        of one entry keeps it); returns how many went."""
        n = int(len(self) * fraction)
        for _ in range(n):
            self.popitem(last=False)
        self.evictions += n
        self.trimmed += n
        return n


def jit_caches() -> dict:
    """name -> {caches, entries, cap, evictions} over every live JitCache."""
    out = {}
    for c in list(_caches.values()):
        r = out.setdefault(c.name, {"caches": 0, "entries": 0, "cap": c.cap, "evictions": 0,
                                    "trimmed": 0})
        r["caches"] += 1
        r["entries"] += len(c)
        r["evictions"] += c.evictions
        r["trimmed"] += c.trimmed
    return out


def trim_executables(fraction: float = 0.5) -> int:
    """Drop the least recently used `fraction` of every JitCache's entries (their
    executables go once nothing else holds them; eager ops rebuild theirs, or load them
    from the eager executable store, when next used); returns how many entries went."""
    import gc

    n = sum(c.trim(fraction) for c in list(_caches.values()))
    gc.collect()
    EXE_STATS.trims += 1
    EXE_STATS.since_release = 0
    return n

_log = _logging.getLogger("torchneuron")
CHECK_EVERY = 128
MAPS_FRACTION = config.get("TORCHNEURON_MAPS_FRACTION")
MAX_LIVE_EXECUTABLES = config.get("TORCHNEURON_MAX_LIVE_EXECUTABLES")


# The most recent work dispatched to each device (its result arrays).  A device runs its
# executables in dispatch order (PJRT's CPU client and a GPU's compute stream alike), so
# waiting for these waits for everything queued before them, whoever holds (or dropped)
# those results: torch.neuron.synchronize() waits for a timing loop that drops its
# outputs, as CUDA's does.  Holds one op's results per device.
LAST_DISPATCH: dict = {}


class _ExeStats:
    compiles = 0        # XLA compiles seen (jax's backend_compile events)
    jax_cache_hits = 0  # of those, executables jax's persistent cache served
    since_release = 0   # compiles since the last release
    next_check = CHECK_EVERY
    trims = 0           # times the least recently used half of every cache was dropped
    releases = 0        # times torchneuron's executables were released
    global_releases = 0  # of those, times jax's every cache had to be cleared as well
    last_maps = None    # mapping count at the last check


EXE_STATS = _ExeStats()
_listening = False


def _on_duration(event, duration_secs=None, **kwargs):
    # an executable compiled, or loaded from the persistent cache (jax times both as the
    # backend compile; either maps memory)
    if event.endswith("backend_compile_duration"):
        EXE_STATS.compiles += 1
        EXE_STATS.since_release += 1


def _on_event(event, **kwargs):
    if event == "/jax/compilation_cache/cache_hits":
        EXE_STATS.jax_cache_hits += 1


def jax_cache_hits() -> int:
    """How many executables jax's persistent cache has served in this process (read it
    before and after a compile: the difference says whether that compile was a disk
    hit)."""
    watch_compiles()
    return EXE_STATS.jax_cache_hits


def watch_compiles() -> None:
    """Count XLA compiles and jax's persistent-cache hits (once per process)."""
    global _listening
    if _listening:
        return
    _listening = True
    try:
        from jax import monitoring

        monitoring.register_event_duration_secs_listener(_on_duration)
        monitoring.register_event_listener(_on_event)
    except Exception:  # noqa: BLE001  (an old jax without the hook: no counting)
        pass


def _read_int(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


_map_limit = _read_int("/proc/sys/vm/max_map_count")


def map_count():
    """This process's memory mappings (None where /proc is not readable)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def _full(st):
    n = map_count() if _map_limit else None
    st.last_maps = n
    if n is not None:
        return n > MAPS_FRACTION * _map_limit, f"{n} memory mappings of {_map_limit}"
    return st.since_release > MAX_LIVE_EXECUTABLES, f"{st.since_release} compiles"


def maybe_release_executables() -> bool:
    """At a safe point, when the process nears its limits: drop the least recently used
    half of every executable cache (the executables in use stay), and only if that is not
    enough release every executable."""
    st = EXE_STATS
    if st.compiles < st.next_check:
        return False
    st.next_check = st.compiles + CHECK_EVERY
    full, why = _full(st)
    if not full:
        return False
    n = trim_executables(0.5)
    _log.info("torchneuron: dropped the %d least recently used cached executables (%s)",
              n, why)
    if _map_limit:  # (without /proc the compile count restarts at the trim)
        full, why = _full(st)
        if full:
            release_executables(reason=why)
    return True


_release_hooks = []


def on_release(fn) -> None:
    """Call `fn()` whenever every executable is released (holders of their own jax
    executables drop them there)."""
    _release_hooks.append(fn)


def release_executables(reason: str = "asked") -> None:
    """Drop every compiled executable jax holds (eager ones recompile, or reload from the
    eager executable store, when next used; torch.compile graphs keep their own)."""
    import gc

    for f in list(_jitted):
        f.clear_cache()
    for fn in _release_hooks:
        fn()
    gc.collect()
    EXE_STATS.releases += 1
    EXE_STATS.since_release = 0
    n = map_count() if _map_limit else None
    if n is not None and n > MAPS_FRACTION * _map_limit:
        # torchneuron's own executables were not enough: release jax's every cache
        jax.clear_caches()
        gc.collect()
        EXE_STATS.global_releases += 1
        _log.warning("torchneuron: released every cached jax executable, the program's own "
                     "included (%s; %s memory mappings after releasing torchneuron's own)",
                     reason, n)
    else:
        _log.info("torchneuron: released torchneuron's cached XLA executables (%s)", reason)

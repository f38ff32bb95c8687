"""The ``torch.neuron`` module: devices, streams, events, memory, RNG.

Mirrors ``torch.cuda`` where the concept carries over.  Registered with
``torch._register_device_module("neuron", ...)`` by ``torchneuron._register``.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

import numpy as np
import torch

from . import runtime, storage

_current = 0


# ---------------------------------------------------------------- devices
def is_available() -> bool:
    return runtime.device_count() > 0


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return runtime.device_count()


def _index(device=None) -> int:
    if device is None:
        return _current
    if isinstance(device, int):
        idx = device
    else:
        if isinstance(device, str):
            device = torch.device(device)
        if device.type != "neuron":
            raise ValueError(f"Expected a neuron device, but got: {device}")
        idx = _current if device.index is None else device.index
    if idx != 0 and idx == runtime.local_alias():
        idx = 0  # under torchrun, LOCAL_RANK names this process's one device
    if not 0 <= idx < device_count():
        raise RuntimeError(
            f"Invalid device ordinal: neuron:{idx} requested but only {device_count()} neuron "
            "device(s) are available"
            + (" (under torchrun each process sees one device, neuron:0, which "
               "LOCAL_RANK also names)" if runtime.torchrun_local() else ""))
    return idx


def current_device() -> int:
    return _current


def index_of(device) -> int:
    """The device index a `device=` argument of a factory or copy means (None: current)."""
    if device is None:
        return _current
    if isinstance(device, str):
        device = torch.device(device)
    idx = device.index if device.index is not None else _current
    runtime.jax_device(idx)  # validates the ordinal
    return idx


def set_device(device) -> None:
    global _current
    _current = _index(device)


class device:
    """Context manager that changes the current neuron device."""

    def __init__(self, device):
        self.idx = _index(device) if device is not None and device != -1 else -1
        self.prev = -1

    def __enter__(self):
        global _current
        if self.idx != -1:
            self.prev = _current
            _current = self.idx

    def __exit__(self, *exc):
        global _current
        if self.idx != -1:
            _current = self.prev
        return False


class device_of(device):
    def __init__(self, obj):
        idx = obj.get_device() if obj.device.type == "neuron" else -1
        super().__init__(idx)


def get_device_name(device=None) -> str:
    d = runtime.jax_device(_index(device))
    kind = getattr(d, "device_kind", d.platform)
    return f"neuron ({runtime.platform()}: {kind})"


@dataclass
class _DeviceProperties:
    name: str
    platform: str
    device_kind: str
    total_memory: int
    index: int

    def __repr__(self):
        return (f"_NeuronDeviceProperties(name='{self.name}', platform='{self.platform}', "
                f"total_memory={self.total_memory // (1 << 20)}MB)")


def _total_memory(idx: int) -> int:
    d = runtime.jax_device(idx)
    try:
        ms = d.memory_stats()
    except Exception:  # noqa: BLE001
        ms = None
    if ms and ms.get("bytes_limit"):
        return int(ms["bytes_limit"])
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def get_device_properties(device=None) -> _DeviceProperties:
    idx = _index(device)
    d = runtime.jax_device(idx)
    return _DeviceProperties(name=get_device_name(idx), platform=runtime.platform(),
                             device_kind=getattr(d, "device_kind", d.platform),
                             total_memory=_total_memory(idx), index=idx)


def get_device_capability(device=None):
    return (0, 0)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


# ---------------------------------------------------------------- sync, streams, events
def synchronize(device=None) -> None:
    """Wait until all work queued on the device has finished.

    The device runs its work in dispatch order, so waiting for the most recent
    dispatch (runtime.LAST_DISPATCH) waits for everything queued, whoever holds (or
    dropped) the results; every live storage's current buffer is waited for too."""
    idx = _index(device)
    storage.lazy.flush(idx)  # fused eager: run what is pending
    last = runtime.LAST_DISPATCH.pop(idx, None)
    for a in (last if isinstance(last, (list, tuple)) else [last] if last is not None else []):
        try:
            a.block_until_ready()
        except Exception:  # noqa: BLE001  (a buffer donated meanwhile)
            pass
    for cell in list(storage.live_cells()):
        if cell.index != idx:
            continue
        try:
            cell.arr.block_until_ready()
        except Exception:  # noqa: BLE001  (a buffer donated meanwhile)
            pass


class Stream:
    """A neuron stream.  PJRT orders work per device; streams are ordering hints."""

    def __init__(self, device=None, priority: int = 0, **kwargs):
        self.device = torch.device("neuron", _index(device))
        self.priority = priority
        self.stream_id = id(self)
        self.device_index = self.device.index
        self.device_type = 20  # DeviceType.PrivateUse1

    def synchronize(self) -> None:
        synchronize(self.device)

    def wait_event(self, event) -> None:
        event.synchronize()

    def wait_stream(self, stream) -> None:
        stream.synchronize()

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def __eq__(self, other):
        return isinstance(other, Stream) and other.stream_id == self.stream_id

    def __hash__(self):
        return hash(self.stream_id)

    def __repr__(self):
        return f"<torch.neuron.Stream device={self.device} id={self.stream_id:#x}>"


_default_streams: dict = {}
_current_stream: dict = {}


def default_stream(device=None) -> Stream:
    idx = _index(device)
    s = _default_streams.get(idx)
    if s is None:
        s = _default_streams[idx] = Stream(idx)
    return s


def current_stream(device=None) -> Stream:
    idx = _index(device)
    return _current_stream.get(idx) or default_stream(idx)


def set_stream(stream: Stream) -> None:
    _current_stream[stream.device.index] = stream


@contextlib.contextmanager
def stream(s: Stream | None):
    if s is None:
        yield
        return
    idx = s.device.index
    prev = _current_stream.get(idx)
    _current_stream[idx] = s
    try:
        yield s
    finally:
        if prev is None:
            _current_stream.pop(idx, None)
        else:
            _current_stream[idx] = prev


class StreamContext:
    def __init__(self, s):
        self._cm = stream(s)

    def __enter__(self):
        return self._cm.__enter__()

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


class Event:
    """A neuron event: record() marks the work queued so far; elapsed_time in ms."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self._time = None
        self._recorded = False

    def record(self, stream=None) -> None:
        if self.enable_timing:
            synchronize()
            self._time = time.perf_counter()
        self._recorded = True

    def synchronize(self) -> None:
        synchronize()

    def wait(self, stream=None) -> None:
        self.synchronize()

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: "Event") -> float:
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._time is None or end._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end._time - self._time) * 1000.0


# ---------------------------------------------------------------- memory
def memory_allocated(device=None) -> int:
    return storage.stats(_index(device)).allocated


def max_memory_allocated(device=None) -> int:
    return storage.stats(_index(device)).peak


def memory_reserved(device=None) -> int:
    return memory_allocated(device)


def max_memory_reserved(device=None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device=None) -> None:
    s = storage.stats(_index(device))
    s.peak = s.allocated
    s.peak_count = s.count


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None) -> None:
    s = storage.stats(_index(device))
    s.total_allocs = s.total_frees = s.oom_count = 0


def memory_stats(device=None) -> dict:
    idx = _index(device)
    s = storage.stats(idx)
    out = {
        "allocated_bytes.all.current": s.allocated,
        "allocated_bytes.all.peak": s.peak,
        "active_bytes.all.current": s.allocated,
        "active_bytes.all.peak": s.peak,
        "reserved_bytes.all.current": s.allocated,
        "reserved_bytes.all.peak": s.peak,
        "allocation.all.current": s.count,
        "allocation.all.peak": s.peak_count,
        "allocation.all.allocated": s.total_allocs,
        "allocation.all.freed": s.total_frees,
        "num_ooms": s.oom_count,
    }
    try:
        pj = runtime.jax_device(idx).memory_stats()
    except Exception:  # noqa: BLE001
        pj = None
    if pj:
        for k, v in pj.items():
            out[f"pjrt.{k}"] = v
    return out


def memory_summary(device=None, abbreviated: bool = False) -> str:
    st = memory_stats(device)
    lines = [f"neuron memory summary, device {_index(device)}"]
    for k, v in st.items():
        lines.append(f"  {k:40s} {v}")
    return "\n".join(lines)


def empty_cache() -> None:
    """Release cached device memory.  Freed storages return memory at once; this
    also drops executables' cached constants held by jax."""
    import gc

    gc.collect()


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    idx = _index(device)
    storage.stats(idx).limit = int(_total_memory(idx) * fraction)


def set_memory_limit(nbytes: int | None, device=None) -> None:
    """Cap the bytes torchneuron may hold on a device (None removes the cap)."""
    storage.stats(_index(device)).limit = nbytes


def mem_get_info(device=None):
    idx = _index(device)
    total = storage.stats(idx).limit or _total_memory(idx)
    return (max(total - memory_allocated(idx), 0), total)


# ---------------------------------------------------------------- RNG
_DEFAULT_SEED = 67280421310721


class _Gen:
    __slots__ = ("seed", "offset")

    def __init__(self, seed=_DEFAULT_SEED):
        self.seed = seed
        self.offset = 0


_gens: dict = {}


def _gen(idx) -> _Gen:
    g = _gens.get(idx)
    if g is None:
        g = _gens[idx] = _Gen()
    return g


def next_rng_input(idx: int, n: int = 1):
    """[seed, offset] for the next random op on device idx (consumes `n` offsets)."""
    g = _gen(idx)
    off = g.offset
    g.offset += n
    return np.array([g.seed & 0xFFFFFFFFFFFFFFFF, off], dtype=np.uint64)


def manual_seed(seed: int) -> None:
    seed = int(seed)
    g = _gen(current_device())
    g.seed = seed & 0xFFFFFFFFFFFFFFFF
    g.offset = 0


def manual_seed_all(seed: int) -> None:
    seed = int(seed)
    for i in range(max(device_count(), 1)):
        g = _gen(i)
        g.seed = seed & 0xFFFFFFFFFFFFFFFF
        g.offset = 0


def seed() -> None:
    manual_seed(int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1))


def seed_all() -> None:
    manual_seed_all(int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1))


def initial_seed() -> int:
    return _gen(current_device()).seed


def get_rng_state(device="neuron") -> torch.Tensor:
    idx = _index(device)
    g = _gen(idx)
    return torch.tensor(np.array([g.seed, g.offset], dtype=np.uint64).view(np.uint8))


def set_rng_state(new_state: torch.Tensor, device="neuron") -> None:
    idx = _index(device)
    a = new_state.detach().cpu().contiguous().to(torch.uint8).numpy()
    if a.size != 16:
        raise RuntimeError(f"Expected a neuron RNG state of 16 bytes, got {a.size}")
    seed, off = a.view(np.uint64)
    g = _gen(idx)
    g.seed, g.offset = int(seed), int(off)


def get_rng_state_all() -> list:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


# ---------------------------------------------------------------- misc torch.cuda-alikes
def _lazy_init() -> None:
    return None


def init() -> None:
    return None


def get_arch_list() -> list:
    return [runtime.platform()]


class amp:  # torch.neuron.amp.autocast, like torch.cuda.amp
    @staticmethod
    def autocast(enabled=True, dtype=torch.bfloat16, cache_enabled=True):
        return torch.autocast("neuron", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)

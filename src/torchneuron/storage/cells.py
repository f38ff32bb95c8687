"""Device memory: cells, fake addresses, accounting, and the tensors over them.

A neuron tensor is a real PrivateUse1 ``torch.Tensor`` whose storage was made by
``torch._C._construct_storage_from_data_pointer`` at a fake address (in a window
no real mapping can meet, reused only after its storage is gone: see "addresses"
below).  The storage's Python object carries a :class:`Cell`: one flat jax array on
the PJRT device, holding the storage's bytes as elements of the cell's dtype.  Every view of the storage shares the cell, so a write through
any view (which replaces ``cell.arr``) is seen by all of them.

How a view reads and writes its cell is ``views``; host transfer is ``transfer``.
"""
from __future__ import annotations

import collections
import math
import sys
import threading
import weakref

import jax
import jax.numpy as jnp
import torch
from torch._C import DispatchKey, DispatchKeySet

from .. import config, runtime
from ..runtime import jdtype
from ..numerics import reinterpret, storage_numel

CPU_KEYS = DispatchKeySet(DispatchKey.CPU)
_SET_STORAGE = torch.ops.aten.set_.source_Storage_storage_offset._handle
_create_empty = torch._C._acc.create_empty_tensor
_construct_storage = torch._C._construct_storage_from_data_pointer

# ---------------------------------------------------------------- addresses
# Fake device addresses.  A storage's data pointer is an address of a window of this
# process's address space that no real mapping can ever occupy:
#
# * On Linux (the usual case) the window is *reserved*: an anonymous PROT_NONE,
#   MAP_NORESERVE mapping of 4 TiB (smaller where the address space is smaller: 1 TiB,
#   256 GiB, 64 GiB), made once and never unmapped.  The kernel never places another
#   mapping over an existing one (only a MAP_FIXED call aimed at it could, which would
#   break any program), so no host allocation, file mapping, thread stack or library can
#   ever meet a fake address, however long the process runs; a stray host read of one
#   faults at once instead of reading someone's memory.  The reservation costs no memory
#   and no commit charge (nothing in it is readable or writable), one line in
#   /proc/self/maps.
# * Elsewhere, or where RLIMIT_AS is finite (a reservation would count against it), the
#   window is a fixed 1 TiB range, the first of _FALLBACK_BASES that /proc/self/maps
#   shows unmapped at start-up (the old base 0x7E00_0000_0000 first, 2 TiB below the top
#   of x86-64's 47-bit user space).  That is checked, not proven: a later mapping could in
#   principle be placed there.
#
# Addresses are handed out inside the window and reused once their storage is gone (its
# Cell released): two live storages never share an address, so comparing data_ptr()s
# of live storages still compares storages, and any amount can be allocated over a
# process's life.  Live storages that together fill the window raise
# torch.OutOfMemoryError.  Each allocation takes (nbytes // 512 + 2) * 512 bytes of the
# window, 512-aligned: at least 512 bytes of guard after its end, so one storage's
# one-past-the-end pointer is never another's start, and zero-byte storages get distinct
# addresses too.
_ADDR_ALIGN = 512
_WINDOW_SIZES = (4 << 40, 1 << 40, 256 << 30, 64 << 30)
_FALLBACK_SIZE = 1 << 40
_FALLBACK_BASES = (0x7E00_0000_0000, 0x7C00_0000_0000, 0x6000_0000_0000, 0x1000_0000_0000)
_released = collections.deque()  # addresses of released cells, reused at the next alloc


def _span(nbytes: int) -> int:
    """The window bytes an allocation of `nbytes` takes (its guard included)."""
    return (nbytes // _ADDR_ALIGN + 2) * _ADDR_ALIGN


class AddressWindow:
    """Fake addresses in [base, base + size): exact-size reuse of released ranges (the
    common case: the same shapes again), else a bump pointer; when that reaches the end,
    released ranges are merged and the smallest that fits is split.  `release` only
    queues the address (it runs in Cell.__del__, which the garbage collector may call
    inside `alloc`): the queue is drained under the lock at the next `alloc`."""

    def __init__(self, base: int, size: int, reserved: bool = False, released=None):
        if base % _ADDR_ALIGN or size < 4 * _ADDR_ALIGN:
            raise ValueError("torchneuron: a fake address window must be 512-aligned")
        self.base = base
        self.end = base + size - size % _ADDR_ALIGN
        self.reserved = reserved
        self.scratch = base  # zero-byte storages no cell owns (shells, swaps): one address
        self.next = base + 2 * _ADDR_ALIGN
        self.spans: dict = {}  # live address -> its span
        self.free: dict = {}   # span -> [released addresses of that span]
        self.free_bytes = 0
        self.merged = True     # nothing released since the last merge
        self.lock = threading.Lock()
        self.released = collections.deque() if released is None else released

    @property
    def size(self) -> int:
        return self.end - self.base

    def live_bytes(self) -> int:
        """Window bytes held by live allocations (guards included)."""
        return self.next - self.base - 2 * _ADDR_ALIGN - self.free_bytes - sum(
            self.spans.get(a, 0) for a in self.released)

    def alloc(self, nbytes: int) -> int:
        span = (nbytes // _ADDR_ALIGN + 2) * _ADDR_ALIGN
        with self.lock:
            if self.released:
                self._drain()
            lst = self.free.get(span)
            if lst:
                a = lst.pop()
                if not lst:
                    del self.free[span]
                self.free_bytes -= span
            else:
                a = self.next
                if a + span <= self.end:
                    self.next = a + span
                else:
                    a = self._fit(span, nbytes)
            self.spans[a] = span
        return a

    def release(self, addr: int) -> None:
        self.released.append(addr)

    def _drain(self) -> None:
        spans, free, pop = self.spans, self.free, self.released.popleft
        while self.released:
            a = pop()
            span = spans.pop(a, None)
            if span is None:  # not ours (or released twice)
                continue
            lst = free.get(span)
            if lst is None:
                free[span] = [a]
            else:
                lst.append(a)
            self.free_bytes += span
            self.merged = False

    def _merge(self) -> None:
        """Merge adjacent released ranges; a range reaching the bump pointer returns to it."""
        ranges = sorted((a, s) for s, lst in self.free.items() for a in lst)
        merged: list = []
        for a, s in ranges:
            if merged and merged[-1][0] + merged[-1][1] == a:
                merged[-1][1] += s
            else:
                merged.append([a, s])
        if merged and merged[-1][0] + merged[-1][1] == self.next:
            self.next = merged.pop()[0]
        self.free = {}
        for a, s in merged:
            self.free.setdefault(s, []).append(a)
        self.free_bytes = sum(s for _, s in merged)
        self.merged = True

    def _fit(self, span: int, nbytes: int) -> int:
        if not self.merged:
            self._merge()
            a = self.next
            if a + span <= self.end:
                self.next = a + span
                return a
        best = None
        for s, lst in self.free.items():
            if s >= span and (best is None or s < best):
                best = s
        if best is None:
            raise torch.OutOfMemoryError(
                f"NEURON out of fake address space: tried to allocate {fmt_bytes(nbytes)}, "
                f"but live storages hold {fmt_bytes(self.live_bytes())} of the "
                f"{fmt_bytes(self.size)} address window at {self.base:#x} (each storage "
                f"takes its size plus a guard of 512 to 1024 bytes; the largest free range "
                f"is {fmt_bytes(max(self.free, default=0))}). Free tensors that are no "
                f"longer needed.")
        lst = self.free[best]
        a = lst.pop()
        if not lst:
            del self.free[best]
        self.free_bytes -= best
        rest = best - span
        if rest:
            self.free.setdefault(rest, []).append(a + span)
            self.free_bytes += rest
        return a


def _reserve(size: int):
    """The start of a fresh PROT_NONE reservation of `size` bytes, or None."""
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        import mmap
        import resource

        if resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY:
            return None
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.mmap
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0x4000)
        p = fn(None, size, 0, flags, -1, 0)  # PROT_NONE
    except Exception:  # noqa: BLE001  no libc mmap: the fixed window
        return None
    if not p or p == ctypes.c_void_p(-1).value or p % _ADDR_ALIGN:
        return None
    return p


def _mapped_ranges():
    """[(start, end)] of this process's mappings (/proc/self/maps), or None."""
    try:
        with open("/proc/self/maps") as f:
            out = []
            for line in f:
                lo, hi = line.split(None, 1)[0].split("-")
                out.append((int(lo, 16), int(hi, 16)))
            return out
    except (OSError, ValueError):
        return None


def _open_window() -> AddressWindow:
    for size in _WINDOW_SIZES:
        base = _reserve(size)
        if base is not None:
            return AddressWindow(base, size, reserved=True, released=_released)
        if not sys.platform.startswith("linux"):
            break
    maps = _mapped_ranges() or []
    for base in _FALLBACK_BASES:
        if not any(lo < base + _FALLBACK_SIZE and base < hi for lo, hi in maps):
            return AddressWindow(base, _FALLBACK_SIZE, released=_released)
    raise RuntimeError("torchneuron: no free range of the address space for fake device "
                       "addresses")


_window = None
_window_lock = threading.Lock()


def address_window() -> AddressWindow:
    """The process's fake address window (opened at the first allocation)."""
    global _window
    if _window is None:
        with _window_lock:
            if _window is None:
                _window = _open_window()
    return _window


def _alloc_addr(nbytes: int) -> int:
    """A fake address for a storage of `nbytes` bytes, distinct from every live one."""
    return (_window or address_window()).alloc(nbytes)


def _scratch_addr() -> int:
    """The address of zero-byte storages no cell owns (never looked up, never released)."""
    return address_window().scratch


# ---------------------------------------------------------------- accounting
class _Stats:
    __slots__ = ("allocated", "peak", "count", "peak_count", "total_allocs", "total_frees",
                 "limit", "oom_count")

    def __init__(self):
        self.allocated = 0
        self.peak = 0
        self.count = 0
        self.peak_count = 0
        self.total_allocs = 0
        self.total_frees = 0
        self.limit = None  # bytes, or None for "what the platform has"
        self.oom_count = 0


_stats: dict[int, _Stats] = {}
# fake address -> weakref(cell): finds the cell when PyTorch wraps our memory in a
# storage of its own (at::from_blob in storage serialization)
_by_addr: dict = {}


def live_cells():
    """The cells of all live storages."""
    out = []
    for r in list(_by_addr.values()):
        c = r()
        if c is not None:
            out.append(c)
    return out


def stats(index: int) -> _Stats:
    s = _stats.get(index)
    if s is None:
        s = _stats[index] = _Stats()
        env = config.get("TORCHNEURON_MEMORY_LIMIT")
        if env:
            s.limit = parse_bytes(env)
    return s


parse_bytes = config.parse_bytes


def fmt_bytes(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.2f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.2f} KiB"
    return f"{n} bytes"


def check_room(index: int, nbytes: int) -> None:
    """Raise torch.OutOfMemoryError if allocating nbytes more would pass the cap."""
    s = stats(index)
    if s.limit is not None and s.allocated + nbytes > s.limit:
        s.oom_count += 1
        raise torch.OutOfMemoryError(
            f"NEURON out of memory. Tried to allocate {fmt_bytes(nbytes)}. Device {index} "
            f"has a memory limit of {fmt_bytes(s.limit)} of which {fmt_bytes(max(s.limit - s.allocated, 0))} "
            f"is free. {fmt_bytes(s.allocated)} is allocated by tensors. (The limit comes from "
            f"TORCHNEURON_MEMORY_LIMIT or torch.neuron.set_per_process_memory_fraction.)"
        )


class Cell:
    """The device buffer behind one storage: a flat jax array."""

    __slots__ = ("arr", "nbytes", "index", "dt", "numel", "raw", "addr", "held",
                 "__weakref__")

    def __init__(self, arr, nbytes: int, index: int, room: int = 0):
        """`nbytes`: the storage's size; `room`: the bytes the flat array holds when it
        is longer (a shape bucket's cell: compile/buckets.py), which is what the
        device's memory statistics count."""
        self.arr = arr
        if type(arr) is Pending:  # a result of fused eager's pending program
            self.__class__ = PendingCell
        self.nbytes = nbytes
        self.index = index
        self.dt = arr.dtype  # the flat array's dtype and length never change
        self.numel = arr.shape[0]
        self.raw = False
        self.addr = None
        self.held = max(nbytes, room)
        s = stats(index)
        s.allocated += self.held
        s.count += 1
        s.total_allocs += 1
        if s.allocated > s.peak:
            s.peak = s.allocated
        if s.count > s.peak_count:
            s.peak_count = s.count

    def __del__(self):
        try:
            s = _stats[self.index]
        except (KeyError, TypeError):  # interpreter shutdown
            return
        s.allocated -= self.held
        s.count -= 1
        s.total_frees += 1
        if self.addr is not None:
            _by_addr.pop(self.addr, None)
            try:
                _released.append(self.addr)  # reusable from the next allocation on
            except AttributeError:  # interpreter shutdown
                pass


# ---------------------------------------------------------------- fused eager
_ARR = Cell.__dict__["arr"]  # the slot itself: read or written without flushing
raw_arr = _ARR.__get__


class Pending:
    """A value of fused eager's pending program (storage/lazy.py): a flat array that
    the program will compute.  `value` is set when the program has run; `error` when
    it failed."""

    __slots__ = ("prog", "k", "dtype", "shape", "value", "error")

    def __init__(self, prog, k, dtype, shape):
        self.prog = prog
        self.k = k
        self.dtype = dtype
        self.shape = shape
        self.value = None
        self.error = None

    def result(self):
        """The computed array, running the pending program first if needed."""
        v = self.value
        if v is None:
            if self.error is None:
                self.prog.flush()
                v = self.value
            if v is None:
                raise RuntimeError(
                    "torchneuron: this tensor's value was lost: the fused eager program "
                    f"that computed it failed ({self.error})")
        return v


class PendingCell(Cell):
    """A cell whose array is still :class:`Pending`: reading ``arr`` runs the device's
    pending program (so every host read, copy, collective and compiled graph sees a
    computed value) and turns the cell back into a plain :class:`Cell`."""

    __slots__ = ()

    @property
    def arr(self):
        v = _ARR.__get__(self)
        if type(v) is Pending:
            v = v.result()
            _ARR.__set__(self, v)
            self.__class__ = Cell
        return v

    @arr.setter
    def arr(self, v):
        _ARR.__set__(self, v)
        if type(v) is not Pending:
            self.__class__ = Cell


def put(cell: Cell, v) -> None:
    """Replace a cell's array with `v`, an array or a :class:`Pending`."""
    cell.arr = v
    if type(v) is Pending:
        cell.__class__ = PendingCell


def translate_runtime_error(e, index):
    """An XLA runtime failure as PyTorch reports it (out of memory: torch.OutOfMemoryError)."""
    msg = str(e)
    if "RESOURCE_EXHAUSTED" in msg or "Out of memory" in msg or "out of memory" in msg:
        stats(index).oom_count += 1
        return torch.OutOfMemoryError(f"NEURON out of memory on device {index}: {msg.splitlines()[0]}")
    return e


# ---------------------------------------------------------------- tensors
_devices: dict[int, torch.device] = {}


def torch_device(index: int) -> torch.device:
    d = _devices.get(index)
    if d is None:
        d = _devices[index] = torch.device("neuron", index)
    return d


def contiguous_strides(shape) -> tuple:
    st = []
    acc = 1
    for s in reversed(shape):
        st.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(st))


def size_class(v: int, least: int) -> int:
    """The bucket of size `v`: `least` doubled until it holds `v` (powers of two for
    16); sizes under half of `least` stay exact (a batch of 2 is not padded to 16).  The
    size classes of compiled graphs' shape buckets and of bucket-sized cells."""
    if v * 2 < least:
        return v
    c = least
    while c < v:
        c *= 2
    return c


def index_dtype(n: int):
    """The integer dtype of positions in a flat array of `n` elements."""
    return jnp.int32 if n < 2 ** 31 else jnp.int64


def new_storage(cell: Cell) -> torch.UntypedStorage:
    """A new storage at a fresh fake address whose device buffer is `cell`."""
    addr = _alloc_addr(cell.nbytes)
    st = _construct_storage(addr, torch_device(cell.index), cell.nbytes)
    st._tn_cell = cell
    cell.addr = addr
    _by_addr[addr] = weakref.ref(cell)
    return st


def raw_storage(nbytes: int, index: int) -> torch.UntypedStorage:
    """A zero-filled storage of nbytes bytes whose cell will take the dtype of its first user."""
    check_room(index, nbytes)
    cell = Cell(zeros_flat(nbytes, torch.uint8, index), nbytes, index)
    cell.raw = True
    return new_storage(cell)


def retype(cell: "Cell", dtype: torch.dtype) -> None:
    """Give a raw (uint8) cell the element type of the tensors that use it."""
    cell.raw = False
    itemsize = dtype.itemsize
    if dtype == torch.uint8 or cell.nbytes % itemsize:
        return
    jd = jdtype(dtype)
    f = _retype_fns.get((cell.numel, jd))
    if f is None:
        f = _retype_fns.put((cell.numel, jd), runtime.jit(lambda a: reinterpret(a, jd)))
    cell.arr = f(cell.arr)
    cell.dt = cell.arr.dtype
    cell.numel = cell.arr.shape[0]


_retype_fns = runtime.JitCache("storage retype", runtime.SMALL_FNS_MAX)


def make_tensor(arr, dtype: torch.dtype, shape, strides, offset: int, index: int, nbytes: int,
                room: int = 0):
    """A neuron tensor over a new storage whose cell holds the flat array `arr` (`room`:
    its bytes, when it is longer than the storage's `nbytes`)."""
    addr = _alloc_addr(nbytes)
    cell = Cell(arr, nbytes, index, room)
    cell.addr = addr
    _by_addr[addr] = weakref.ref(cell)
    if index == 0 and not offset and nbytes and type(shape) is tuple \
            and (_dense_shell or _dense_shell is None and check_dense_shell()):
        c = _contiguous.get(shape)
        if c is None:
            if len(_contiguous) >= 4096:
                _contiguous.clear()
            c = _contiguous[shape] = contiguous_strides(shape)
        if strides == c:
            # the common result, dense on device 0: a tensor made with its sizes, whose
            # empty storage takes the fake address (half the time of set_, which
            # re-checks and restrides the tensor)
            t = _create_empty(shape, dtype)
            st = t.untyped_storage()
            st._swap_data_ptr_(_construct_storage(addr, _devices[0], nbytes))
            st._tn_cell = cell
            return t
    st = _construct_storage(addr, torch_device(index), nbytes)
    st._tn_cell = cell
    t = new_shell(index, dtype)
    _SET_STORAGE.redispatch_boxed(CPU_KEYS, t, st, offset, shape, strides)
    return t


_contiguous: dict = {}  # shape -> its contiguous strides


def check_dense_shell() -> bool:
    """Whether this torch makes a device-0 tensor with sizes over an empty storage (no
    allocator call) and swaps a storage's memory in place (torch >= 2.13): then
    :func:`make_tensor` skips ``set_`` for dense results.  Checked at the first result."""
    global _dense_shell
    ok = False
    if hasattr(torch.UntypedStorage, "_swap_data_ptr_"):
        try:
            t = _create_empty((2, 3), torch.float32)
            ok = (t.device == torch_device(0) and t.untyped_storage().nbytes() == 0
                  and t.stride() == (3, 1))
        except Exception:  # noqa: BLE001  (an older torch: set_ for every result)
            ok = False
    _dense_shell = ok
    return ok


_dense_shell = None  # unknown until the first result tensor


def new_shell(index: int, dtype: torch.dtype) -> torch.Tensor:
    """A tensor on neuron:index with no data yet (set_ it onto a storage)."""
    return _create_empty([0], dtype) if index == 0 else empty_shell(index, dtype)


_shells: dict = {}
_ALIAS = torch.ops.aten.alias.default._handle
_VIEW_DTYPE = torch.ops.aten.view.dtype._handle


def empty_shell(index: int, dtype: torch.dtype) -> torch.Tensor:
    """A fresh TensorImpl on neuron:index, ready for set_ onto a storage of that device.

    PyTorch's Python backend hook makes every new tensor on device 0 (and set_
    refuses a storage of another device), so tensors for devices >= 1 start as
    aliases of a per-device template, which is bootstrapped once through DLPack
    (kDLExtDev maps to PrivateUse1)."""
    tmpl = _shells.get(index)
    if tmpl is None:
        tmpl = _shells[index] = _dlpack_template(index)
    t = _ALIAS.redispatch_boxed(CPU_KEYS, tmpl)
    if dtype != torch.uint8:
        t = _VIEW_DTYPE.redispatch_boxed(CPU_KEYS, t, dtype)
    return t


def _dlpack_template(index: int) -> torch.Tensor:
    import ctypes

    class DLDevice(ctypes.Structure):
        _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

    class DLDataType(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                    ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]

    class DLManagedTensor(ctypes.Structure):
        pass

    deleter_t = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
    DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                                ("deleter", deleter_t)]
    keep = _dlpack_keep  # the structs must outlive the tensor: keep them for the process
    shape = (ctypes.c_int64 * 1)(0)
    strides = (ctypes.c_int64 * 1)(1)
    m = DLManagedTensor()
    m.dl_tensor.data = _scratch_addr()
    m.dl_tensor.device = DLDevice(12, index)  # kDLExtDev -> PrivateUse1
    m.dl_tensor.ndim = 1
    m.dl_tensor.dtype = DLDataType(1, 8, 1)  # uint8
    m.dl_tensor.shape = shape
    m.dl_tensor.strides = strides
    m.deleter = deleter_t(0)
    keep.extend([shape, strides, m])
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    cap = new_capsule(ctypes.addressof(m), b"dltensor", None)
    t = torch.utils.dlpack.from_dlpack(cap)
    if t.device != torch_device(index):
        raise RuntimeError(f"torchneuron: could not create a tensor on neuron:{index}")
    return t


_dlpack_keep: list = []


def set_metadata(t: torch.Tensor, storage, offset, shape, strides) -> torch.Tensor:
    _SET_STORAGE.redispatch_boxed(CPU_KEYS, t, storage, offset, shape, strides)
    return t


def from_array(arr, index: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A contiguous neuron tensor holding the jax array `arr` (already on the device)."""
    if dtype is None:
        dtype = runtime.tdtype(arr.dtype)
    shape = tuple(arr.shape)
    n = math.prod(shape)
    return make_tensor(arr.reshape(-1) if arr.ndim != 1 else arr, dtype, shape,
                       contiguous_strides(shape), 0, index, n * dtype.itemsize)


def cell_of(t: torch.Tensor) -> Cell:
    """The device buffer behind a neuron tensor's storage."""
    cell = cell_of_storage(t.untyped_storage())
    if cell is None:
        raise RuntimeError(
            "torchneuron: this neuron tensor has no device buffer (its storage was not "
            "allocated by torchneuron)")
    if cell.raw:
        retype(cell, t.dtype)
    return cell


def cell_at(addr: int):
    """The live cell whose storage starts at fake address `addr` (or None)."""
    r = _by_addr.get(addr)
    return r() if r is not None else None


def empty(shape, dtype: torch.dtype, index: int, strides=None) -> torch.Tensor:
    """A new tensor; its memory is zero-filled (PJRT buffers are never uninitialised)."""
    shape = tuple(int(s) for s in shape)
    if strides is None:
        strides = contiguous_strides(shape)
    else:
        strides = tuple(int(s) for s in strides)
    if any(s < 0 for s in shape):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(shape)}: {list(shape)}")
    n = storage_numel(shape, strides)
    nbytes = n * dtype.itemsize
    check_room(index, nbytes)
    arr = zeros_flat(n, dtype, index)
    return make_tensor(arr, dtype, shape, strides, 0, index, nbytes)


_zeros_cache = runtime.JitCache("storage zeros", runtime.SMALL_FNS_MAX)


def zeros_flat(n: int, dtype: torch.dtype, index: int):
    key = (n, dtype, index)
    fn = _zeros_cache.get(key)
    if fn is None:
        jd = jdtype(dtype)
        sharding = jax.sharding.SingleDeviceSharding(runtime.jax_device(index))
        fn = _zeros_cache.put(key, runtime.jit(lambda: jnp.zeros((n,), jd),
                                               out_shardings=sharding))
    return fn()




# ---------------------------------------------------------------- storage resize
def resize_storage(st: torch.UntypedStorage, nbytes: int) -> None:
    """``UntypedStorage.resize_(nbytes)`` for a neuron storage, in place: every tensor
    over `st` sees the new size (FSDP2 frees and refills parameter storage this way).

    The storage gets a new cell at a new fake address holding the old bytes (cut or
    zero-padded); the StorageImpl's data pointer and size are replaced in place (the
    native helper, else torch's ``_swap_data_ptr_``)."""
    if nbytes < 0:
        raise RuntimeError(f"resize_: new size must be non-negative, got {nbytes}")
    old = cell_of_storage(st)
    index = st.device.index or 0
    if nbytes == st.nbytes():
        return
    grow = nbytes - (old.nbytes if old is not None else 0)
    if grow > 0:
        check_room(index, grow)
    if old is None or old.nbytes == 0 or nbytes == 0:
        flat = zeros_flat(nbytes, torch.uint8, index)
    else:
        key = (old.dt, old.numel, nbytes)
        f = _resize_fns.get(key)
        if f is None:
            keep = min(old.nbytes, nbytes)

            def f(a):
                b = reinterpret(a, jnp.uint8)[:keep]
                return jnp.pad(b, (0, nbytes - keep)) if nbytes > keep else b

            f = _resize_fns.put(key, runtime.jit(f))
        flat = f(old.arr)
    cell = Cell(flat, nbytes, index)
    cell.raw = True
    addr = _alloc_addr(nbytes)
    _set_storage_memory(st, addr, nbytes, index)
    st._tn_cell = cell
    cell.addr = addr
    _by_addr[addr] = weakref.ref(cell)


_resize_fns = runtime.JitCache("storage resize", runtime.SMALL_FNS_MAX)


def cell_of_storage(st):
    """The cell of a neuron storage (found by its fake address when PyTorch made the
    storage object: at::from_blob in serialization), or None."""
    cell = getattr(st, "_tn_cell", None)
    return cell if cell is not None else cell_at(st.data_ptr())


def _set_storage_memory(st, addr: int, nbytes: int, index: int) -> None:
    from .. import native

    if native.set_storage_memory(st._cdata, addr, nbytes, index):
        return
    swap = getattr(st, "_swap_data_ptr_", None)
    if swap is None:
        raise NotImplementedError(
            "resize_ of a neuron storage needs torchneuron's native helper (a C++ compiler at "
            f"first import; {native.error()}) or torch >= 2.13 (UntypedStorage._swap_data_ptr_)")
    dev = torch_device(index)
    if nbytes == 0:  # (st is not empty: same sizes return early)
        st._swap_data_ptr_(_construct_storage(addr, dev, 0))
        return
    if st.nbytes() != 0:  # torch swaps only when one side is empty: empty st first
        st._swap_data_ptr_(_construct_storage(_scratch_addr(), dev, 0))
    st._swap_data_ptr_(_construct_storage(addr, dev, nbytes))

"""Device memory: cells, fake addresses, accounting, and the tensors over them.

A neuron tensor is a real PrivateUse1 ``torch.Tensor`` whose storage was made by
``torch._C._construct_storage_from_data_pointer`` at a fake, never reused
address.  The storage's Python object carries a :class:`Cell`: one flat jax
array on the PJRT device, holding the storage's bytes as elements of the
cell's dtype.  Every view of the storage shares the cell, so a write through
any view (which replaces ``cell.arr``) is seen by all of them.

How a view reads and writes its cell is ``views``; host transfer is ``transfer``.
"""
from __future__ import annotations

import math
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
# Fake device addresses: a bump pointer in a range no host allocation uses.
# Never reused, so data_ptr() identity means storage identity.
_ADDR_ALIGN = 512
_addr_lock = threading.Lock()
_next_addr = 0x7E00_0000_0000


def _alloc_addr(nbytes: int) -> int:
    global _next_addr
    with _addr_lock:
        a = _next_addr
        _next_addr = a + (nbytes // _ADDR_ALIGN + 2) * _ADDR_ALIGN
    return a


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

    __slots__ = ("arr", "nbytes", "index", "dt", "numel", "raw", "addr", "__weakref__")

    def __init__(self, arr, nbytes: int, index: int):
        self.arr = arr
        if type(arr) is Pending:  # a result of fused eager's pending program
            self.__class__ = PendingCell
        self.nbytes = nbytes
        self.index = index
        self.dt = arr.dtype  # the flat array's dtype and length never change
        self.numel = arr.shape[0]
        self.raw = False
        self.addr = None
        s = stats(index)
        s.allocated += nbytes
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
        s.allocated -= self.nbytes
        s.count -= 1
        s.total_frees += 1
        if self.addr is not None:
            _by_addr.pop(self.addr, None)


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
        f = _retype_fns[(cell.numel, jd)] = jax.jit(lambda a: reinterpret(a, jd))
    cell.arr = f(cell.arr)
    cell.dt = cell.arr.dtype
    cell.numel = cell.arr.shape[0]


_retype_fns: dict = {}


def make_tensor(arr, dtype: torch.dtype, shape, strides, offset: int, index: int, nbytes: int):
    """A neuron tensor over a new storage whose cell holds the flat array `arr`."""
    addr = _alloc_addr(nbytes)
    cell = Cell(arr, nbytes, index)
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
    m.dl_tensor.data = _alloc_addr(0)
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


_zeros_cache: dict = {}


def zeros_flat(n: int, dtype: torch.dtype, index: int):
    key = (n, dtype, index)
    fn = _zeros_cache.get(key)
    if fn is None:
        jd = jdtype(dtype)
        sharding = jax.sharding.SingleDeviceSharding(runtime.jax_device(index))
        fn = _zeros_cache[key] = jax.jit(lambda: jnp.zeros((n,), jd), out_shardings=sharding)
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

            f = _resize_fns[key] = jax.jit(f)
        flat = f(old.arr)
    cell = Cell(flat, nbytes, index)
    cell.raw = True
    addr = _alloc_addr(nbytes)
    _set_storage_memory(st, addr, nbytes, index)
    st._tn_cell = cell
    cell.addr = addr
    _by_addr[addr] = weakref.ref(cell)


_resize_fns: dict = {}


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
        st._swap_data_ptr_(_construct_storage(_alloc_addr(0), dev, 0))
    st._swap_data_ptr_(_construct_storage(addr, dev, nbytes))

"""Allocation, views, copies and host transfer: the kernels every backend needs.

View and metadata ops redispatch to PyTorch's CPU kernels (they only touch sizes,
strides and offset over the same storage); allocation and copies talk to
``storage``; same-device copies run the ``ops/memory.py`` lowerings.
"""
from __future__ import annotations


import jax
import jax.numpy as jnp
import torch

from .. import dispatch, runtime, storage
from ..device import index_of as _index_of
from ..dispatch import kernel

aten = torch.ops.aten
CPU = storage.CPU_KEYS


# ---------------------------------------------------------------- allocation
def _strides_for(size, memory_format):
    if memory_format in (None, torch.contiguous_format, torch.preserve_format):
        return None
    return torch.empty(size, device="meta", memory_format=memory_format).stride()


def _fill_deterministic() -> bool:
    """torch.use_deterministic_algorithms(True) with
    torch.utils.deterministic.fill_uninitialized_memory: new memory is NaN / max int."""
    return (torch._C._get_deterministic_algorithms()
            and torch._C._get_deterministic_fill_uninitialized_memory())


def _fill_empty_deterministic(t: torch.Tensor) -> torch.Tensor:
    """at::native::fill_empty_deterministic_: NaN for floating and complex dtypes (a
    complex NaN is NaN+0j), the dtype's max for integers and True for bool."""
    if t.numel():
        if t.dtype.is_floating_point or t.dtype.is_complex:
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.fill_(True)
        else:
            t.fill_(torch.iinfo(t.dtype).max)
    return t


@kernel('empty.memory_format')
def empty_memory_format(size, *, dtype=None, layout=None, device=None, pin_memory=None,
                        memory_format=None):
    dtype = dtype or torch.get_default_dtype()
    runtime.jdtype(dtype)
    t = storage.empty(size, dtype, _index_of(device), _strides_for(size, memory_format))
    return _fill_empty_deterministic(t) if _fill_deterministic() else t


@kernel('empty_strided.default')
def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    runtime.jdtype(dtype)
    t = storage.empty(size, dtype, _index_of(device), stride)
    return _fill_empty_deterministic(t) if _fill_deterministic() else t


# ---------------------------------------------------------------- views (CPU redispatch)
_VIEW_OPS = [
    aten.view.default, aten.as_strided.default, aten._reshape_alias.default,
    aten.unfold.default, aten.view_as_real.default, aten.view_as_complex.default,
    aten.set_.source_Storage_storage_offset, aten.set_.source_Storage,
    aten.set_.source_Tensor, aten.as_strided_.default, aten.is_set_to.default,
    aten._unsafe_view.default, aten.view.dtype,
]


@kernel('set_.default')
def set_empty(self):
    idx = self.device.index
    cell_t = storage.empty((0,), self.dtype, idx)
    return storage.set_metadata(self, cell_t.untyped_storage(), 0, (0,), (1,))


@kernel('resize_.default')
def resize_(self, size, memory_format=None):
    size = tuple(int(s) for s in size)
    if any(s < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(size)}: {list(size)}")
    if size == tuple(self.shape) and memory_format in (None, torch.preserve_format):
        return self  # resize_impl_cpu_: same sizes keep the strides (an expanded tensor too)
    if memory_format in (None, torch.preserve_format, torch.contiguous_format):
        strides = storage.contiguous_strides(size)
    else:
        strides = torch.empty(size, device="meta", memory_format=memory_format).stride()
    offset = self.storage_offset()
    need = storage.storage_numel(size, strides, offset) * self.element_size()
    st = self.untyped_storage()
    if need > st.nbytes():
        # grow the storage in place (the old bytes, then zeros), so every view of it sees the
        # new size as on CPU; without a way to repoint a StorageImpl (no native helper and
        # torch < 2.13), a new storage for this tensor only (docs/limitations.md)
        cell = storage.cell_of(self)
        old = cell.arr
        itemsize = old.dtype.itemsize
        n = -(-need // itemsize)
        old_nbytes = st.nbytes()
        try:
            storage.resize_storage(st, n * itemsize)
        except NotImplementedError:
            storage.check_room(self.device.index, n * itemsize - cell.nbytes)
            grown = _grow(old, n)
            st = storage.new_storage(storage.Cell(grown, n * itemsize, self.device.index))
        if _fill_deterministic():
            _fill_resize_deterministic(self, st, old_nbytes)
    return storage.set_metadata(self, st, offset, size, strides)


def _fill_resize_deterministic(t, st, old_nbytes):
    """at::native::fill_resize_deterministic_: the storage's elements past the old size."""
    itemsize = t.element_size()
    old_numel, new_numel = old_nbytes // itemsize, st.nbytes() // itemsize
    if new_numel > old_numel:
        tail = storage.new_shell(t.device.index, t.dtype)
        storage.set_metadata(tail, st, old_numel, (new_numel - old_numel,), (1,))
        _fill_empty_deterministic(tail)


def _grow(arr, n):
    f = storage.device_fn(("grow", arr.shape[0], arr.dtype, n),
                          lambda: lambda a: jnp.pad(a, (0, n - a.shape[0])))
    return f(arr)


@kernel('_local_scalar_dense.default')
def local_scalar_dense(self):
    if self.numel() != 1:
        raise RuntimeError(
            f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
    v = storage.to_cpu_tensor(self)
    return v.item()


# ---------------------------------------------------------------- copies


def assign(dst: torch.Tensor, values) -> None:
    """Write the jax array `values` (broadcastable to dst) into dst's view, cast."""
    cell = storage.cell_of(dst)
    if torch._debug_has_internal_overlap(dst) == 1:
        raise RuntimeError(
            "unsupported operation: more than one element of the written-to tensor refers to a "
            "single memory location. Please clone() the tensor before performing the operation.")
    arr = cell.arr
    dtype, shape, strides, off = storage.canonical_spec(dst)
    flags = storage.view_flags(dst)
    key = ("assign", dtype, shape, strides, off != 0, arr.dtype, arr.shape[0], values.shape,
           values.dtype, flags)

    def build():
        if off:
            return lambda a, v, o: storage.write_view(
                a, (dtype, shape, strides, o), storage.apply_flags(v, flags))
        return lambda a, v: storage.write_view(
            a, (dtype, shape, strides, 0), storage.apply_flags(v, flags))

    f = storage.device_fn(key, build)
    if off:
        cell.arr = f(arr, values, storage.dyn_scalar(off, cell.index))
    else:
        cell.arr = f(arr, values)


def _upload(src: torch.Tensor, index: int):
    return storage.to_device_array(src, index)


@kernel('copy_.default')
def copy_(self, src, non_blocking=False):
    if src.is_complex() and not self.is_complex():  # (CPU's copy_ warns, once)
        dispatch.warn_once("Casting complex values to real discards the imaginary part")
        src = src.real  # (and no second warning from the host copy or from jax)
    if self.device.type == "neuron":
        if src.device.type == "neuron":
            if src.device.index != self.device.index:
                values = jax.device_put(storage.materialize(src), runtime.jax_device(self.device.index))
            else:
                return _copy_same_device(self, src)
        else:
            if src.is_conj() or src.is_neg():
                src = src.resolve_conj().resolve_neg()
            values = _upload(src, self.device.index)
        _check_broadcast(self, src)
        assign(self, values)
        return self
    # neuron -> cpu (or another device through cpu)
    host = storage.to_cpu_tensor(src)
    self.copy_(host, non_blocking)
    return self


def _check_broadcast(dst, src):
    try:
        torch.broadcast_shapes(tuple(src.shape), tuple(dst.shape))
    except RuntimeError:
        raise RuntimeError(
            f"The size of tensor a ({dst.shape[-1] if dst.dim() else 1}) must match the size of "
            f"tensor b ({src.shape[-1] if src.dim() else 1}) at non-singleton dimension "
            f"{dst.dim() - 1}") from None
    if torch.broadcast_shapes(tuple(src.shape), tuple(dst.shape)) != tuple(dst.shape):
        raise RuntimeError(
            f"output with shape {list(dst.shape)} doesn't match the broadcast shape "
            f"{list(torch.broadcast_shapes(tuple(src.shape), tuple(dst.shape)))}")


def _copy_same_device(self, src):
    return _copy_entry(self, src)


_copy_entry = dispatch.lazy_entry(aten.copy_.default)


_to_copy_entry = dispatch.lazy_entry(aten._to_copy.default)


@kernel('_to_copy.default')
def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):
    if type(self) is not torch.Tensor:
        self = _plain(self)
    target = device if device is not None else self.device
    if isinstance(target, str):
        target = torch.device(target)
    dtype = dtype or self.dtype
    if self.device.type == "neuron" and target.type == "neuron":
        if self.is_complex() and not dtype.is_complex:
            dispatch.warn_once("Casting complex values to real discards the imaginary part")
        tidx = _index_of(target)
        if tidx == self.device.index:
            return _to_copy_entry(self, dtype=dtype, memory_format=memory_format)
        same = _to_copy_entry(self, dtype=dtype, memory_format=memory_format)
        cell = storage.cell_of(same)
        arr = jax.device_put(cell.arr, runtime.jax_device(tidx))
        return storage.make_tensor(arr, same.dtype, tuple(same.shape), same.stride(), 0, tidx,
                                   cell.nbytes)
    if self.device.type == "neuron":  # -> cpu
        host = storage.to_cpu_tensor(self)
        if host.dtype != dtype:
            host = host.to(dtype)
        if memory_format not in (None, torch.preserve_format, torch.contiguous_format):
            host = host.contiguous(memory_format=memory_format)
        elif memory_format in (None, torch.preserve_format) and _strided(self):
            strided = torch.empty_like(self, device="cpu", dtype=dtype)
            strided.copy_(host)
            host = strided
        if pin_memory:
            host = host.pin_memory()
        return host
    # cpu -> neuron
    idx = _index_of(target)
    src = self
    if src.dtype != dtype:
        src = src.to(dtype)
    if memory_format in (None, torch.preserve_format):
        if _strided(src) and storage.perm_plan(tuple(src.shape), src.stride()) is not None:
            strides = src.stride()
            out = storage.empty(tuple(src.shape), dtype, idx, strides)
            assign(out, _upload(src, idx))
            return out
    elif memory_format != torch.contiguous_format:
        out = storage.empty(tuple(src.shape), dtype, idx,
                            _strides_for(tuple(src.shape), memory_format))
        assign(out, _upload(src, idx))
        return out
    return storage.to_neuron(src, idx)


def _strided(t):
    """Whether a preserve_format copy must lay `t` out with strides of its own: they differ
    from the contiguous ones (also only on size-1 dims, which `is_contiguous` ignores but
    CUDA's copies keep, as empty_like does)."""
    return t.numel() > 0 and tuple(t.stride()) != storage.contiguous_strides(tuple(t.shape))


def _plain(t):
    """A plain-Tensor alias of a Tensor subclass: a kernel sees the TensorImpl, not the
    subclass's Python overrides (UninitializedParameter's `shape` raises; lazy modules'
    `.to("neuron")` moves those empty placeholders)."""
    with torch._C.DisableTorchFunctionSubclass():
        return torch.Tensor._make_subclass(torch.Tensor, t)


@kernel('_copy_from.default')
def _copy_from(self, dst, non_blocking=False):
    dst.copy_(self, non_blocking)
    return dst


@kernel('_copy_from_and_resize.default')
def _copy_from_and_resize(self, dst):
    dispatch.resize_output(dst, self.shape)
    dst.copy_(self)
    return dst


@kernel('is_pinned.default')
def is_pinned(self, device=None):
    return False


@kernel('record_stream.default')
def record_stream(self, s):
    return None


# the dense backends of TensorImpl::has_compatible_shallow_copy_type, plus neuron
_DENSE_DEVICES = frozenset({"cpu", "cuda", "mps", "hip", "xpu", "hpu", "mtia", "neuron"})


def _dense(t) -> bool:
    return (t.layout == torch.strided and not t.is_quantized and not t.is_nested
            and t.device.type in _DENSE_DEVICES)


@kernel('_has_compatible_shallow_copy_type.default')
def has_compatible_shallow_copy_type(self, src) -> bool:
    """PyTorch's rule for `var.data = tensor` (and so for `nn.Module._apply`) with neuron
    counted among the dense backends, as CUDA is: converting a module keeps its Parameter
    objects, hence weight ties and optimizers built before `.to("neuron")`.  PyTorch's
    C++ rule lists only its own backends and asks PrivateUse1 backends to register this
    overload (OpenRegMinimal.cpp does the same)."""
    if torch._C._dispatch_keys(self) == torch._C._dispatch_keys(src):
        return True
    return _dense(self) and _dense(src)


dispatch.redispatch(_VIEW_OPS, CPU)

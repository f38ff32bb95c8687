"""Allocation, views, copies and host transfer: the kernels every backend needs.

These are kernels rather than lowerings: view and metadata ops redispatch to
PyTorch's CPU kernels (they only touch sizes, strides and offset over the same
storage); allocation and copies talk to ``storage`` directly.
"""
from __future__ import annotations


import jax
import jax.numpy as jnp
import torch

from .. import dispatch, runtime, storage
from .. import numerics
from ..lowering import lower, out_dtype

aten = torch.ops.aten
CPU = storage.CPU_KEYS


def _index_of(device) -> int:
    from .. import device as _dev

    if device is None:
        return _dev.current_device()
    if isinstance(device, str):
        device = torch.device(device)
    idx = device.index if device.index is not None else _dev.current_device()
    runtime.jax_device(idx)  # validates the ordinal
    return idx


# ---------------------------------------------------------------- allocation
def _strides_for(size, memory_format):
    if memory_format in (None, torch.contiguous_format, torch.preserve_format):
        return None
    return torch.empty(size, device="meta", memory_format=memory_format).stride()


def empty_memory_format(size, *, dtype=None, layout=None, device=None, pin_memory=None,
                        memory_format=None):
    dtype = dtype or torch.get_default_dtype()
    runtime.jdtype(dtype)
    return storage.empty(size, dtype, _index_of(device), _strides_for(size, memory_format))


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    runtime.jdtype(dtype)
    return storage.empty(size, dtype, _index_of(device), stride)


# ---------------------------------------------------------------- views (CPU redispatch)
def _redispatch(op):
    h = op._handle

    def kernel(*args, **kwargs):
        return h.redispatch_boxed(CPU, *args, **kwargs)

    return kernel


_VIEW_OPS = [
    aten.view.default, aten.as_strided.default, aten._reshape_alias.default,
    aten.unfold.default, aten.view_as_real.default, aten.view_as_complex.default,
    aten.set_.source_Storage_storage_offset, aten.set_.source_Storage,
    aten.set_.source_Tensor, aten.as_strided_.default, aten.is_set_to.default,
    aten._unsafe_view.default, aten.alias.default, aten.view.dtype,
]


def set_empty(self):
    idx = self.device.index
    cell_t = storage.empty((0,), self.dtype, idx)
    return storage.set_metadata(self, cell_t.untyped_storage(), 0, (0,), (1,))


def resize_(self, size, memory_format=None):
    size = tuple(int(s) for s in size)
    if any(s < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(size)}: {list(size)}")
    if memory_format in (None, torch.preserve_format, torch.contiguous_format):
        strides = storage.contiguous_strides(size)
    else:
        strides = torch.empty(size, device="meta", memory_format=memory_format).stride()
    offset = self.storage_offset()
    need = storage.storage_numel(size, strides, offset) * self.element_size()
    st = self.untyped_storage()
    if need > st.nbytes():
        # grow: a new storage holding the old bytes followed by zeros
        cell = storage.cell_of(self)
        old = cell.arr
        itemsize = old.dtype.itemsize
        n = -(-need // itemsize)
        storage.check_room(self.device.index, n * itemsize - cell.nbytes)
        grown = _grow(old, n)
        st = storage.new_storage(storage.Cell(grown, n * itemsize, self.device.index))
    return storage.set_metadata(self, st, offset, size, strides)


_grow_fns: dict = {}


def _grow(arr, n):
    key = (arr.shape[0], arr.dtype, n)
    f = _grow_fns.get(key)
    if f is None:
        f = _grow_fns[key] = jax.jit(lambda a: jnp.pad(a, (0, n - a.shape[0])))
    return f(arr)


def local_scalar_dense(self):
    if self.numel() != 1:
        raise RuntimeError(
            f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
    v = storage.to_cpu_tensor(self)
    return v.item()


# ---------------------------------------------------------------- copies
_assign_fns: dict = {}


def assign(dst: torch.Tensor, values) -> None:
    """Write the jax array `values` (broadcastable to dst) into dst's view, cast."""
    cell = storage.cell_of(dst)
    if torch._debug_has_internal_overlap(dst) == 1:
        raise RuntimeError(
            "unsupported operation: more than one element of the written-to tensor refers to a "
            "single memory location. Please clone() the tensor before performing the operation.")
    arr = cell.arr
    dtype, shape, strides, off = storage.view_spec(dst)
    flags = storage.view_flags(dst)
    key = (dtype, shape, strides, off != 0, arr.dtype, arr.shape[0], values.shape, values.dtype,
           flags)
    f = _assign_fns.get(key)
    if f is None:
        if off:
            f = jax.jit(lambda a, v, o: storage.write_view(
                a, (dtype, shape, strides, o), storage.apply_flags(v, flags)))
        else:
            f = jax.jit(lambda a, v: storage.write_view(
                a, (dtype, shape, strides, 0), storage.apply_flags(v, flags)))
        _assign_fns[key] = f
    if off:
        cell.arr = f(arr, values, storage.dyn_scalar(off, cell.index))
    else:
        cell.arr = f(arr, values)


def _upload(src: torch.Tensor, index: int):
    return storage.to_device_array(src, index)


def copy_(self, src, non_blocking=False):
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


@lower("copy_.default")
def _copy_lowering(self, src, non_blocking=False):
    return numerics.convert(src, self.dtype)


def _copy_same_device(self, src):
    return _COPY_ENTRY(self, src)


_COPY_ENTRY = None


def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):
    target = device if device is not None else self.device
    if isinstance(target, str):
        target = torch.device(target)
    dtype = dtype or self.dtype
    if self.device.type == "neuron" and target.type == "neuron":
        tidx = _index_of(target)
        if tidx == self.device.index:
            return _TO_COPY_ENTRY(self, dtype=dtype, memory_format=memory_format)
        same = _TO_COPY_ENTRY(self, dtype=dtype, memory_format=memory_format)
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
        elif memory_format in (None, torch.preserve_format) and not self.is_contiguous():
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
        if not src.is_contiguous() and storage.perm_plan(tuple(src.shape), src.stride()) is not None:
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


@lower("_to_copy.default")
def _to_copy_lowering(x, *, dtype=None, layout=None, device=None, pin_memory=None,
                      non_blocking=False, memory_format=None):
    return numerics.convert(x, out_dtype())


@lower("clone.default")
def clone(x, *, memory_format=None):
    return x


_TO_COPY_ENTRY = None


def _copy_from(self, dst, non_blocking=False):
    dst.copy_(self, non_blocking)
    return dst


def _copy_from_and_resize(self, dst):
    dispatch.resize_output(dst, self.shape)
    dst.copy_(self)
    return dst


def _pin_memory(self, device=None):
    return self


def is_pinned(self, device=None):
    return False


def record_stream(self, s):
    return None


# the dense backends of TensorImpl::has_compatible_shallow_copy_type, plus neuron
_DENSE_DEVICES = frozenset({"cpu", "cuda", "mps", "hip", "xpu", "hpu", "mtia", "neuron"})


def _dense(t) -> bool:
    return (t.layout == torch.strided and not t.is_quantized and not t.is_nested
            and t.device.type in _DENSE_DEVICES)


def has_compatible_shallow_copy_type(self, src) -> bool:
    """PyTorch's rule for `var.data = tensor` (and so for `nn.Module._apply`) with neuron
    counted among the dense backends, as CUDA is: converting a module keeps its Parameter
    objects, hence weight ties and optimizers built before `.to("neuron")`.  PyTorch's
    C++ rule lists only its own backends and asks PrivateUse1 backends to register this
    overload (OpenRegMinimal.cpp does the same)."""
    if torch._C._dispatch_keys(self) == torch._C._dispatch_keys(src):
        return True
    return _dense(self) and _dense(src)


def register():
    global _COPY_ENTRY, _TO_COPY_ENTRY
    from ..lowering import LOWERINGS

    for op in _VIEW_OPS:
        dispatch.declare(op, _redispatch(op))
    dispatch.declare(aten.empty.memory_format, empty_memory_format)
    dispatch.declare(aten.empty_strided.default, empty_strided)
    dispatch.declare(aten.set_.default, set_empty)
    dispatch.declare(aten.resize_.default, resize_)
    dispatch.declare(aten._local_scalar_dense.default, local_scalar_dense)
    _COPY_ENTRY = dispatch.Entry(aten.copy_.default, LOWERINGS[aten.copy_.default], "inplace")
    _TO_COPY_ENTRY = dispatch.Entry(aten._to_copy.default, LOWERINGS[aten._to_copy.default],
                                    "functional")
    dispatch.declare(aten.copy_.default, copy_)
    dispatch.declare(aten._to_copy.default, _to_copy)
    dispatch.declare(aten._copy_from.default, _copy_from)
    dispatch.declare(aten._copy_from_and_resize.default, _copy_from_and_resize)
    dispatch.declare(aten.is_pinned.default, is_pinned)
    dispatch.declare(aten.record_stream.default, record_stream)
    dispatch.declare(aten._has_compatible_shallow_copy_type.default,
                     has_compatible_shallow_copy_type)

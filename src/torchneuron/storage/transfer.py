"""Moving values between the host and the device: CPU tensors to cells and back,
a tensor's values as a jax array, and the cached device scalars that carry Python
numbers into executables."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import runtime
from .cells import cell_of, check_room, contiguous_strides, from_array, make_tensor
from .views import apply_flags, canonical_spec, read_view, view_flags, view_spec


def to_device_array(cpu: torch.Tensor, index: int):
    """Copy a CPU tensor's values (any layout) to the device as a jax array of its shape."""
    if cpu.dtype == torch.bool or cpu.dtype in runtime._HOST_VIA or not cpu.is_contiguous():
        cpu = cpu.contiguous()
    a = runtime.torch_to_numpy(cpu.resolve_conj().resolve_neg())
    if runtime.platform() == "cpu":
        # XLA:CPU keeps a numpy array's memory as the device buffer (may_alias=False or
        # not, jax 0.10), so the CPU tensor's later writes would show on the device
        a = a.copy()
    arr = runtime.LAST_DISPATCH[index] = jax.device_put(a, runtime.jax_device(index),
                                                        may_alias=False)
    return arr


def to_host(arr, dtype: torch.dtype) -> torch.Tensor:
    """A jax array as a new contiguous CPU tensor (one copy)."""
    a = np.array(arr, copy=True)
    if not a.flags.writeable:
        a = a.copy()
    return runtime.numpy_to_torch(a, dtype)




# ---------------------------------------------------------------- a tensor's values
def materialize(t: torch.Tensor):
    """The tensor's values as a jax array of its shape (on the device).  One small read
    function per view layout, in the capped cache of :func:`device_fn`; the storage offset
    is an argument, so a view at any position shares it."""
    cell = cell_of(t)
    arr = cell.arr
    dtype, shape, strides, off = canonical_spec(t)
    flags = view_flags(t)
    key = ("materialize", dtype, shape, strides, off != 0, arr.dtype, arr.shape[0], flags)
    if off:
        f = device_fn(key, lambda: lambda a, o: apply_flags(
            read_view(a, (dtype, shape, strides, o)), flags))
        return f(arr, dyn_scalar(off, cell.index))
    f = device_fn(key, lambda: lambda a: apply_flags(
        read_view(a, (dtype, shape, strides, 0)), flags))
    return f(arr)


def dense_copy(t: torch.Tensor) -> torch.Tensor:
    """A new contiguous neuron tensor with t's values, made without any op's kernel (so a
    kernel can call it for its own inputs without ever re-entering itself)."""
    index = cell_of(t).index
    check_room(index, t.numel() * t.element_size())
    arr = runtime.LAST_DISPATCH[index] = materialize(t)
    return from_array(arr, index, t.dtype)


def to_cpu_tensor(t: torch.Tensor) -> torch.Tensor:
    """A new contiguous CPU tensor with t's values."""
    n = t.numel()
    if n == 0:
        return torch.empty(tuple(t.shape), dtype=t.dtype)
    cell = whole_cell(t, prefix=True)
    if cell is not None and cell.numel <= 2 * n:
        # the flat buffer itself (an exact or a bucket-sized cell): no read function,
        # which would compile per shape
        host = to_host(cell.arr, t.dtype)
        return (host[:n].clone() if cell.numel != n else host).reshape(tuple(t.shape))
    arr = materialize(t)
    return to_host(arr, t.dtype).reshape(tuple(t.shape))


# ---------------------------------------------------------------- dynamic scalars
_scalar_cache: dict = {}
_SCALAR_CACHE_MAX = 4096


def number_key(v):
    """A hashable key that tells apart numbers Python counts equal: -0.0 == 0.0 (and
    complex zeros with either sign), which are different values to the device."""
    if type(v) is float:
        return (v, math.copysign(1.0, v))
    if type(v) is complex:
        return (v, math.copysign(1.0, v.real), math.copysign(1.0, v.imag))
    return v


def dyn_scalar(v, index: int):
    """A weakly typed device scalar for a Python number (cached per value)."""
    key = (type(v), number_key(v), index)
    a = _scalar_cache.get(key)
    if a is None:
        if len(_scalar_cache) > _SCALAR_CACHE_MAX:
            _scalar_cache.clear()
        a = jax.device_put(jnp.asarray(v), runtime.jax_device(index))
        _scalar_cache[key] = a
    return a


def typed_scalar(t: torch.Tensor, index: int):
    """A device 0-d array for a CPU 0-d tensor (strongly typed, like a tensor)."""
    v = t.item()
    key = (t.dtype, number_key(v), index, "t")
    a = _scalar_cache.get(key)
    if a is None:
        if len(_scalar_cache) > _SCALAR_CACHE_MAX:
            _scalar_cache.clear()
        a = jax.device_put(np.asarray(v, dtype=runtime.jdtype(t.dtype)), runtime.jax_device(index))
        _scalar_cache[key] = a
    return a


# ---------------------------------------------------------------- CPU tensors to the device
def host_storage_to_device(cv: torch.Tensor, index: int) -> torch.Tensor:
    st = cv.untyped_storage()
    raw = torch.empty(0, dtype=cv.dtype)
    n = st.nbytes() // cv.dtype.itemsize
    raw.set_(st, 0, (n,), (1,))
    arr = to_device_array(raw, index)
    return make_tensor(arr, cv.dtype, (n,), (1,), 0, index, st.nbytes())


def to_neuron(cpu: torch.Tensor, index: int) -> torch.Tensor:
    """A CPU tensor's values as a new neuron tensor with the same shape (contiguous)."""
    nbytes = cpu.numel() * cpu.element_size()
    check_room(index, nbytes)
    # flattened on the host: a reshape of the device array would compile per shape
    arr = to_device_array(cpu.reshape(-1), index)
    return make_tensor(arr, cpu.dtype, tuple(cpu.shape),
                               contiguous_strides(cpu.shape), 0, index, nbytes)


# ---------------------------------------------------------------- small device functions
# Eager kernels and checks that need device values (host reads, data-dependent
# shapes) run small jitted functions over cells' flat arrays: one cache, one cap.
_device_fns = runtime.JitCache("storage device functions", runtime.SMALL_FNS_MAX)


def device_fn(key, build):
    """The jitted function for `key`, built by `build()` on first use."""
    f = _device_fns.get(key)
    if f is None:
        f = _device_fns.put(key, runtime.jit(build()))
    return f


def cells_of(tensors):
    """(flat arrays, view specs, cell signature) of device tensors: a device function's
    inputs and the part of its key they decide."""
    cells = [cell_of(t) for t in tensors]
    specs = tuple(view_spec(t) + (view_flags(t),) for t in tensors)
    sig = tuple((c.arr.dtype, c.arr.shape[0]) for c in cells)
    return [c.arr for c in cells], specs, sig


def view_values(flat, spec):
    """Inside a device function: a tensor's logical values from its cell (spec from
    :func:`cells_of`)."""
    v = read_view(flat, spec[:4])
    return apply_flags(v, spec[4]) if spec[4] else v


def read_back(fn, *tensors, static=()):
    """`fn(*values, *static)` over device tensors' values, read to the host as numpy
    (pytrees of arrays come back as the same structure of numpy arrays)."""
    arrs, specs, sig = cells_of(tensors)
    key = ("read_back", fn, specs, sig, static)
    f = _device_fns.get(key)
    if f is None:
        def build():
            def run(*flat):
                return fn(*[view_values(a, sp) for a, sp in zip(flat, specs)], *static)
            return run

        f = device_fn(key, build)
    out = f(*arrs)
    return np.asarray(out) if isinstance(out, jax.Array) else jax.device_get(out)


# ---------------------------------------------------------------- host aliases (collectives)
_ALIAS_DTYPES = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                 torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
                 torch.complex64, torch.complex128}


def whole_cell(t: torch.Tensor, host_memory: bool = False, prefix: bool = False):
    """t's cell when t is exactly its cell's flat array (contiguous, offset 0, the cell's
    dtype and length, no lazy conj/neg), else None; with `host_memory`, only on XLA:CPU,
    where device memory is host memory; with `prefix`, also when t is the start of a
    longer array (a shape bucket's cell: t's elements are its first t.numel())."""
    if (not isinstance(t, torch.Tensor) or t.device.type != "neuron" or t.storage_offset()
            or not t.is_contiguous() or t.is_conj() or t.is_neg()
            or (host_memory and (t.dtype not in _ALIAS_DTYPES or runtime.platform() != "cpu"))):
        return None
    cell = cell_of(t)
    if (cell.numel < t.numel() if prefix else cell.numel != t.numel()) \
            or cell.dt != runtime.jdtype(t.dtype):
        return None
    return cell


def host_alias(t: torch.Tensor):
    """A CPU tensor sharing memory with t's device buffer (DLPack, zero-copy), or None.
    Read it only: jax buffers are immutable and may be shared by other cells."""
    cell = whole_cell(t, host_memory=True)
    if cell is None:
        return None
    try:
        return torch.from_dlpack(cell.arr).view(tuple(t.shape))
    except (RuntimeError, TypeError, BufferError):
        return None


def adopt_host(t: torch.Tensor, host: torch.Tensor) -> None:
    """Make the contiguous CPU tensor `host` (t's shape and dtype, not used by the caller
    afterwards) t's new values: zero-copy where t is its whole cell on XLA:CPU, else a copy."""
    cell = whole_cell(t, host_memory=True)
    if cell is not None and host.is_contiguous() and host.dtype == t.dtype:
        try:
            arr = jnp.from_dlpack(host.reshape(-1))
        except (RuntimeError, TypeError, BufferError):
            arr = None
        if arr is not None and arr.dtype == cell.dt and arr.shape[0] == cell.numel:
            cell.arr = arr
            return
    with torch.no_grad():
        t.copy_(host)

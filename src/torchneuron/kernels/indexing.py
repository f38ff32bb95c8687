"""Indexing kernels that need the device: the data-dependent ops (``nonzero``,
``masked_select``, ``x[mask]``) and the mask forms of ``index`` / ``index_put``.

Data-dependent output shapes count on the device, read the count (a sync), then
run a device function whose output size is the count rounded up to a power of
two; the result is a view of the first ``count`` rows.  This keeps the number
of compiled functions logarithmic in the tensor size.  Masks in ``index`` and
``index_put`` become long indices through ``nonzero``; index tensors are
bounds-checked like the lowerings' ``bounds`` extra.
"""
from __future__ import annotations

import math
import warnings

import jax.numpy as jnp
import numpy as np
import torch

from .. import dispatch, storage
from ..dispatch.bounds import first_bad
from ..lowering import index_checks
from ..numerics import scalar_type_name
from ..ops.indexing import index_error

aten = torch.ops.aten


def _idx_of(t):
    return t.device.index if t.device.index is not None else 0


# ---------------------------------------------------------------- counting (sync)
def _count(t):
    """Number of nonzero elements of a neuron tensor (reads one number: a sync)."""
    arrs, specs, sig = storage.cells_of([t])

    def build():
        return lambda a: jnp.count_nonzero(storage.view_values(a, specs[0]))

    return int(np.asarray(storage.device_fn(("count", specs, sig), build)(*arrs)))


def _bucket(count, cap):
    if count <= 0:
        return 0
    return min(1 << (count - 1).bit_length(), cap)


def _result(arr_flat, dtype, shape, index, bucket_rows_numel):
    """A contiguous tensor `shape` over a (possibly larger) flat buffer."""
    nbytes = max(bucket_rows_numel, 0) * dtype.itemsize
    return storage.make_tensor(arr_flat, dtype, tuple(shape), storage.contiguous_strides(shape),
                               0, index, nbytes)


def _empty(shape, dtype, index):
    return storage.empty(tuple(shape), dtype, index)


def _to_device(t, like):
    if t.device.type == "neuron":
        return t
    return t.to(like.device)


def nonzero(self):
    if self.device.type != "neuron":
        raise dispatch.device_mismatch("neuron:0", self.device)
    index = _idx_of(self)
    nd = self.dim()
    if self.numel() == 0:
        return _empty((0, nd), torch.int64, index)
    count = _count(self)
    if nd == 0:
        return _empty((count, 0), torch.int64, index)
    b = _bucket(count, self.numel())
    if b == 0:
        return _empty((0, nd), torch.int64, index)
    arrs, specs, sig = storage.cells_of([self])

    def build():
        def fn(a):
            v = storage.view_values(a, specs[0])
            idx = jnp.nonzero(v, size=b, fill_value=0)
            return jnp.stack([i.astype(jnp.int64) for i in idx], axis=0).reshape(-1)
        return fn

    # column-major like CPU's and CUDA's result (strides (1, rows)); the rows are padded to
    # the size bucket, so the column stride is the bucket's (docs/limitations.md)
    flat = storage.device_fn(("nonzero_t", specs, sig, b), build)(*arrs)
    return storage.make_tensor(flat, torch.int64, (count, nd), (1, b), 0, index,
                               b * nd * torch.int64.itemsize)


def masked_select(self, mask):
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    for t in (self, mask):
        if t.device.type != "neuron" and t.dim() != 0:
            raise dispatch.device_mismatch("neuron:0", t.device)
    self = _to_device(self, mask) if self.device.type != "neuron" else self
    mask = _to_device(mask, self)
    mb, sb = torch.broadcast_tensors(mask, self)  # views; PyTorch's broadcast errors
    index = _idx_of(self)
    n = sb.numel()
    if n == 0:
        return _empty((0,), self.dtype, index)
    count = _count(mb)
    b = _bucket(count, n)
    if b == 0:
        return _empty((0,), self.dtype, index)
    arrs, specs, sig = storage.cells_of([sb, mb])

    def build():
        def fn(a, m):
            v = storage.view_values(a, specs[0]).reshape(-1)
            mm = storage.view_values(m, specs[1]).reshape(-1)
            (i,) = jnp.nonzero(mm, size=b, fill_value=0)
            return v[i]
        return fn

    flat = storage.device_fn(("masked_select", specs, sig, b), build)(*arrs)
    return _result(flat, self.dtype, (count,), index, b)


# ---------------------------------------------------------------- x[indices] with masks
def _is_mask(t):
    return isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)


def _warn_uint8_masks(indices):
    """expandTensors' TORCH_WARN, once per uint8 mask of the call."""
    for t in indices:
        if t is not None and isinstance(t, torch.Tensor) and t.dtype == torch.uint8:
            warnings.warn("indexing with dtype torch.uint8 is now deprecated, please use a "
                          "dtype torch.bool instead.", UserWarning, stacklevel=3)


def _check_index_dtypes(indices):
    for t in indices:
        if t is not None and (t.is_floating_point() or t.is_complex()):
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")


def _mask_positions(self, indices):
    """(position in self's dims) of each index; checks mask shapes like PyTorch."""
    k = 0
    for i, t in enumerate(indices):
        if t is not None and _is_mask(t):
            if k + t.dim() > self.dim():
                raise IndexError(f"too many indices for tensor of dimension {self.dim()}")
            for j in range(t.dim()):
                if t.shape[j] != self.shape[k + j]:
                    raise IndexError(
                        f"The shape of the mask {list(t.shape)} at index {j} does not match the "
                        f"shape of the indexed tensor {list(self.shape)} at index {k + j}")
            k += t.dim()
        else:
            k += 1


def _expand_masks(self, indices):
    """Bool masks -> long index tensors (nonzero: a sync); CPU indices -> the device."""
    out = []
    for t in indices:
        if t is None:
            out.append(None)
        elif _is_mask(t):
            m = t if t.dtype == torch.bool else t.ne(0)
            m = _to_device(m, self)
            if m.dim() == 0:
                continue  # a 0-d mask adds no index (PyTorch's expandTensors)
            nz = nonzero(m)
            out.extend(nz.unbind(1))
        elif t.device.type != "neuron" and t.dim() != 0:
            out.append(t.to(self.device))
        else:
            out.append(t)
    return out


def _index_finder(self, indices):
    # PyTorch names the dimension by its rank among the indexed (non-None) dims
    items = []
    k = 0
    for d, t in enumerate(indices):
        if t is not None and d < self.dim():
            n = self.shape[d]
            items.append((t, -n, n, index_error(k, n)))
            k += 1
    return items


def _check_index_bounds(op, self, indices, args, kwargs):
    if not index_checks():
        return
    err = first_bad(_index_finder(self, indices))
    if err is not None:
        dispatch.validate(op, args, kwargs)
        raise err


_INDEX_ENTRY = dispatch.lazy_entry(aten.index.Tensor)


def _single_leading_mask(indices):
    return (len(indices) >= 1 and _is_mask(indices[0]) and indices[0].dim() > 0
            and all(t is None for t in indices[1:]))


def index_kernel(self, indices):
    indices = list(indices)
    if self.device.type != "neuron":
        raise dispatch.device_mismatch("neuron:0", self.device)
    _check_index_dtypes(indices)
    if any(_is_mask(t) for t in indices if t is not None):
        _mask_positions(self, indices)
        _warn_uint8_masks(indices)
        if _single_leading_mask(indices):
            return _index_leading_mask(self, _to_device(indices[0], self))
        indices = _expand_masks(self, indices)
        return _INDEX_ENTRY(self, indices)
    _check_index_bounds(aten.index.Tensor, self, indices, (self, indices), {})
    indices = _expand_masks(self, indices)
    return _INDEX_ENTRY(self, indices)


def _index_leading_mask(self, mask):
    """x[mask] for a mask over x's leading dims: one bucketed executable, no recompiles."""
    if mask.dtype != torch.bool:
        mask = mask.ne(0)
    index = _idx_of(self)
    k = mask.dim()
    rest = tuple(self.shape[k:])
    inner = math.prod(rest)
    if mask.numel() == 0:
        return _empty((0,) + rest, self.dtype, index)
    count = _count(mask)
    b = _bucket(count, mask.numel())
    if b == 0 or inner == 0:
        return _empty((count,) + rest, self.dtype, index)
    arrs, specs, sig = storage.cells_of([self, mask])

    def build():
        def fn(a, m):
            v = storage.view_values(a, specs[0])
            mm = storage.view_values(m, specs[1])
            idx = jnp.nonzero(mm, size=b, fill_value=0)
            return v[idx].reshape(-1)
        return fn

    flat = storage.device_fn(("index_mask", specs, sig, b), build)(*arrs)
    return _result(flat, self.dtype, (count,) + rest, index, b * inner)


dispatch.declare(aten.index.Tensor, index_kernel)
dispatch.declare(aten.nonzero.default, nonzero)
dispatch.declare(aten.masked_select.default, masked_select)
for _op, _f in ((aten.nonzero.out, aten.nonzero.default),
                (aten.masked_select.out, aten.masked_select.default)):
    dispatch.declare(_op, dispatch.out_kernel(_op, _f))


# ---------------------------------------------------------------- index_put_
def _index_put_kernel(op, low_op, mode):
    entry = dispatch.entry_for(op, low_op, mode)
    sch = dispatch.schema(op)

    def kernel(*args, **kwargs):
        self = sch.arg(args, kwargs, 0)
        indices = list(sch.arg(args, kwargs, 1))
        values = sch.arg(args, kwargs, 2)
        accumulate = bool(sch.arg(args, kwargs, 3))
        unsafe = bool(sch.arg(args, kwargs, 4)) if len(sch.names) > 4 else False
        if self.device.type != "neuron":
            raise dispatch.device_mismatch("neuron:0", self.device)
        if mode == "inplace":  # CPU's index_put_: self must not overlap values or indices
            for t in [values] + [i for i in indices if i is not None]:
                if isinstance(t, torch.Tensor) and t.device.type == "neuron":
                    dispatch.check_no_overlap(self, t)
        _check_index_dtypes(indices)
        if isinstance(values, torch.Tensor) and values.dtype != self.dtype:
            # the shapes are checked first (PyTorch's meta kernel, with matching dtypes)
            margs, mkw = dispatch.to_meta((self, indices, torch.empty(
                values.shape, dtype=self.dtype, device="meta")) + tuple(args[3:]), kwargs)
            err = dispatch.cpu_error(op, list(margs), mkw)
            if err is not None and "shape" in str(err):
                raise err
            raise RuntimeError(
                "Index put requires the source and destination dtypes match, got "
                f"{scalar_type_name(self.dtype)} for the destination and "
                f"{scalar_type_name(values.dtype)} for the source.")
        masks = [t for t in indices if t is not None and _is_mask(t)]
        if masks:
            _mask_positions(self, indices)
            fast = (len(masks) == 1 and sum(t is not None for t in indices) == 1
                    and masks[0].dim() > 0 and values.numel() == 1
                    and (values.device.type == "neuron" or values.dim() == 0))
            if fast and not accumulate and masks[0].dtype == torch.uint8:
                # CPU's canDispatchToMaskedFill takes a byte mask too; masked_fill_ refuses it
                raise RuntimeError("masked_fill_ only supports boolean masks, but got mask "
                                   "with dtype unsigned char")
            _warn_uint8_masks(indices)
            if fast:  # x[mask] = v with one value: a masked fill, no sync
                if mode == "inplace" and torch._debug_has_internal_overlap(self) == 1:
                    # CPU's index_put_ warns before its masked_fill_ route warns again
                    warnings.warn(dispatch.OVERLAP_WRITES["aten::index_put_"],
                                  UserWarning, stacklevel=2)
                return _masked_put(self, indices, values, accumulate, mode)
            indices = _expand_masks(self, indices)
        else:
            if index_checks() and not unsafe:
                _check_index_bounds(op, self, indices, args, kwargs)
            indices = _expand_masks(self, indices)
        rest = [self, indices, values, accumulate] + ([unsafe] if len(sch.names) > 4 else [])
        return entry(*rest)

    return kernel


def _masked_put(self, indices, values, accumulate, mode):
    p = next(i for i, t in enumerate(indices) if t is not None)
    m = _to_device(indices[p], self)
    if m.dtype != torch.bool:
        m = m.ne(0)
    shape = (1,) * p + tuple(m.shape) + (1,) * (self.dim() - p - m.dim())
    m = m.reshape(shape)
    v = values.reshape(())
    target = self if mode == "inplace" else self.clone()
    if accumulate:
        target.copy_(torch.where(m, target + v, target))
    else:
        target.masked_fill_(m, v)
    return target


for _op, _low, _mode in ((aten.index_put_.default, aten.index_put.default, "inplace"),
                         (aten.index_put.default, aten.index_put.default, "functional"),
                         (aten._index_put_impl_.default, aten._index_put_impl_.default,
                          "inplace")):
    dispatch.declare(_op, _index_put_kernel(_op, _low, _mode))

"""Reduction kernels that read values back: ``equal``, ``bincount``, ``unique*`` and
``histogram`` (data-dependent result sizes or ranges, read once, as CUDA does), and
``aminmax`` routed to its public form."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from .. import dispatch, runtime, storage
from ..numerics import not_implemented
from ..numerics import to_dtype
from ..ops.sorting import search_sorted

aten = torch.ops.aten


def _equal_kernel(self, other):
    if self.device != other.device:
        raise RuntimeError(
            f"Cannot compare two tensors on different devices. Got: {self.device} and {other.device}")
    if self.shape != other.shape:
        return False
    if self.numel() == 0:
        return True
    return bool(torch.eq(self, other).all().item())


# The kernels below run small device functions over the tensors' cells: one for the
# data-dependent size, read back once, then one with that size static.
def _k_jit(key, build):
    return storage.device_fn(key, build)


def _k_inputs(ts):
    return storage.cells_of(ts)


def _k_read(specs):
    return lambda arrs: [storage.view_values(a, sp) for a, sp in zip(arrs, specs)]


def _k_tensor(arr, dtype, shape, index):
    """A new contiguous neuron tensor over the jax array `arr`."""
    shape = tuple(shape)
    nbytes = math.prod(shape) * dtype.itemsize
    storage.check_room(index, nbytes)
    return storage.make_tensor(arr.reshape(-1), dtype, shape, storage.contiguous_strides(shape), 0,
                               index, nbytes)


def _k_index(t):
    return t.device.index if t.device.index is not None else 0


def _k_check_device(*ts):
    for t in ts:
        if t is not None and t.device.type != "neuron":
            raise dispatch.device_mismatch("neuron:0", t.device)


def _bincount_kernel(self, weights=None, minlength=0):
    """bincount: the result length depends on max(self), read back once (a sync)."""
    _k_check_device(self, weights)
    if self.dtype == torch.bool or self.dtype.is_floating_point or self.dtype.is_complex:
        raise not_implemented("bincount", self.dtype)
    if self.dim() != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is not None and (weights.dim() != 1 or weights.shape[0] != self.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    index = _k_index(self)
    arrs, specs, sig = _k_inputs([self] if weights is None else [self, weights])
    read = _k_read(specs)
    length = minlength
    if self.numel():
        def build_range():
            def fn(*a):
                v = read(a)[0].astype(jnp.int64)
                return jnp.stack([jnp.min(v), jnp.max(v)])
            return fn

        mn, mx = (int(v) for v in np.asarray(_k_jit(("bc_range", specs, sig), build_range)(*arrs)))
        if mn < 0:
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
        length = max(mx + 1, minlength)
    if weights is None:
        odt = torch.int64
    else:
        odt = torch.float32 if weights.dtype == torch.float32 else torch.float64
    jodt = runtime.jdtype(odt)

    def build_count():
        def fn(*a):
            vals = read(a)
            v = vals[0].astype(jnp.int64)
            w = jnp.ones(v.shape, jodt) if len(vals) == 1 else to_dtype(vals[1], jodt)
            return jnp.zeros((length,), jodt).at[v].add(w)
        return fn

    out = _k_jit(("bc_count", specs, sig, length, odt), build_count)(*arrs)
    return _k_tensor(out, odt, (length,), index)


# ---------------------------------------------------------------- unique
def _rows_sort(rows):
    """Stable lexicographic sort of the rows of (n, m): (sorted rows, permutation)."""
    n, m = rows.shape
    iota = lax.iota(jnp.int64, n)
    keys = rows.astype(jnp.uint8) if rows.dtype == jnp.bool_ else rows
    if n <= 1:
        return rows, iota
    cols = [keys[:, j] for j in range(m)]
    out = lax.sort(tuple(cols) + (iota,), dimension=0, num_keys=max(m, 1), is_stable=True)
    perm = out[-1]
    return jnp.take(rows, perm, axis=0), perm


def _unique_impl(self, dim, sort, return_inverse, return_counts, name):
    """unique / unique_consecutive (dim None: over elements; else over slices along dim)."""
    _k_check_device(self)
    index = _k_index(self)
    shape = tuple(self.shape)
    if self.is_complex():
        cname = "unique_dim" if name == "unique_dim" else "unique"
        raise not_implemented(cname, self.dtype)
    if dim is not None:
        if self.dim() == 0:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        nd = self.dim()
        if not -nd <= dim < nd:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], "
                             f"but got {dim})")
        dim = dim % nd
    if dim is not None:
        zeros = sum(1 for sz in shape if sz == 0)
        if shape[dim] == 0:
            if zeros != 1:
                raise RuntimeError("Number of zero sized dimensions is more than one, so unique cannot be applied ")
            empty = torch.empty(0, dtype=torch.int64, device=self.device)
            return (torch.empty(shape, dtype=self.dtype, device=self.device), empty, empty.clone())
        if zeros:
            raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    numel = self.numel()
    if numel == 0:
        inv = torch.zeros(shape if return_inverse else (0,), dtype=torch.int64, device=self.device)
        return (torch.empty((0,), dtype=self.dtype, device=self.device), inv,
                torch.empty((0,), dtype=torch.int64, device=self.device))
    arrs, specs, sig = _k_inputs([self])
    read = _k_read(specs)

    def rows_of(x):
        if dim is None:
            return x.reshape(-1, 1)
        return jnp.moveaxis(x, dim, 0).reshape(shape[dim], -1)

    def build_a():
        def fn(*a):
            r = rows_of(read(a)[0])
            if sort:
                srt, perm = _rows_sort(r)
            else:
                srt, perm = r, lax.iota(jnp.int64, r.shape[0])
            diff = jnp.any(srt[1:] != srt[:-1], axis=1)
            is_new = jnp.concatenate([jnp.ones((1,), bool), diff])
            cnt = jnp.sum(is_new.astype(jnp.int64))
            if nan_fallback:  # the count and the NaN flag come back in one read
                cnt = jnp.stack([cnt, jnp.any(jnp.isnan(r)).astype(jnp.int64)])
            return srt, perm, is_new, cnt
        return fn

    # unique_dim sorts slices with std::sort and a lexicographic `<` that NaN breaks (not
    # a strict weak order), then merges neighbours with at::equal: with NaNs the result
    # is whatever libstdc++'s introsort does with that comparator, so such inputs run on
    # CPU's kernel (the fallback: counted, policy-controlled)
    nan_fallback = sort and dim is not None and (self.is_floating_point())
    srt, perm, is_new, cnt = _k_jit(("uq_a", specs, sig, dim, sort, nan_fallback), build_a)(*arrs)
    cnt = np.asarray(cnt)
    if nan_fallback and int(cnt[1]):
        return dispatch.cpu_fallback(aten.unique_dim.default, self, dim, True, return_inverse,
                                     return_counts)
    count = int(cnt[0]) if nan_fallback else int(cnt)
    n = srt.shape[0]

    def build_b():
        def fn(srt, perm, is_new):
            g = jnp.cumsum(is_new.astype(jnp.int64)) - 1
            (pos,) = jnp.nonzero(is_new, size=count, fill_value=0)
            uniq = jnp.take(srt, pos, axis=0)
            outs = [uniq]
            if return_inverse:
                outs.append(jnp.zeros((n,), jnp.int64).at[perm].set(g))
            if return_counts:
                outs.append(jnp.zeros((count,), jnp.int64).at[g].add(1))
            return outs
        return fn

    res = _k_jit(("uq_b", srt.shape, str(srt.dtype), count, return_inverse, return_counts), build_b)(
        srt, perm, is_new)
    if dim is None:
        out = _k_tensor(res[0], self.dtype, (count,), index)
    else:
        rest = shape[:dim] + shape[dim + 1:]
        u = jnp.moveaxis(res[0].reshape((count,) + rest), 0, dim)
        out = _k_tensor(u, self.dtype, shape[:dim] + (count,) + shape[dim + 1:], index)
    k = 1
    if return_inverse:
        inv_shape = shape if dim is None else (shape[dim],)
        inv = _k_tensor(res[k], torch.int64, inv_shape, index)
        k += 1
    else:
        inv = torch.empty((0,), dtype=torch.int64, device=self.device)
    if return_counts:
        counts = _k_tensor(res[k], torch.int64, (count,), index)
    else:
        counts = torch.empty((0,), dtype=torch.int64, device=self.device)
    return out, inv, counts


def _unique2_kernel(self, sorted=True, return_inverse=False, return_counts=False):
    return _unique_impl(self, None, True, return_inverse, return_counts, "unique")


def _unique_kernel(self, sorted=True, return_inverse=False):
    out, inv, _ = _unique_impl(self, None, True, return_inverse, False, "unique")
    return out, inv


def _unique_dim_kernel(self, dim, sorted=True, return_inverse=False, return_counts=False):
    return _unique_impl(self, dim, True, return_inverse, return_counts, "unique_dim")


def _unique_consecutive_kernel(self, return_inverse=False, return_counts=False, dim=None):
    return _unique_impl(self, dim, False, return_inverse, return_counts, "unique_consecutive")


def _unique_dim_consecutive_kernel(self, dim, return_inverse=False, return_counts=False):
    return _unique_impl(self, dim, False, return_inverse, return_counts, "unique_dim_consecutive")


# ---------------------------------------------------------------- histogram
def _g(v):
    return "%g" % v


_HIST_DTYPES = (torch.float32, torch.float64)


def _hist_checks(self, weight):
    if self.dtype not in _HIST_DTYPES:
        raise not_implemented("histogramdd", self.dtype)
    if weight is not None:
        if tuple(weight.shape) != tuple(self.shape):
            raise RuntimeError(
                "torch.histogramdd: if weight tensor is provided it should have the same shape as the "
                "input tensor excluding its innermost dimension, but got input with shape "
                f"{[self.numel(), 1]} and weight with shape {list(weight.shape)}")
        if weight.dtype != self.dtype:
            raise RuntimeError(
                "torch.histogramdd: if weight tensor is provided, input tensor and weight tensor should "
                f"have the same dtype, but got input({_cname(self.dtype)}), and weight({_cname(weight.dtype)})")


def _cname(dt):
    return {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
            torch.int64: "long int", torch.int32: "int"}.get(dt, str(dt).replace("torch.", ""))


def _hist_run(self, weight, edges_fn, locate, nbins, density, key, extra):
    """Shared histogram body: edges from `edges_fn`, bin of each element from `locate`."""
    index = _k_index(self)
    ts = [self] + ([weight] if weight is not None else []) + list(extra)
    arrs, specs, sig = _k_inputs(ts)
    read = _k_read(specs)
    nw = 1 if weight is not None else 0
    dt = runtime.jdtype(self.dtype)

    def build():
        def fn(lohi, *a):
            vals = read(a)
            x = vals[0].reshape(-1)
            w = vals[1].reshape(-1) if nw else jnp.ones(x.shape, dt)
            edges = edges_fn(lohi, vals[1 + nw:])
            left, right = edges[0], edges[-1]
            valid = (x >= left) & (x <= right)
            pos = locate(x, edges, left, right)
            pos = jnp.where(pos == nbins, nbins - 1, pos)
            pos = jnp.clip(jnp.where(valid, pos, 0), 0, max(nbins - 1, 0))
            hist = jnp.zeros((nbins,), dt).at[pos].add(jnp.where(valid, w, 0))
            if density:
                hist = hist / jnp.sum(hist)
                hist = hist / (edges[1:] - edges[:-1])
            return hist, edges
        return fn

    kind, lohi = key
    f = _k_jit(("hist", kind, specs, sig, nbins, density), build)
    lohi = jax.device_put(np.asarray(lohi, np.float64), runtime.jax_device(index))
    hist, edges = f(lohi, *arrs)
    return _k_tensor(hist, self.dtype, (nbins,), index), _k_tensor(edges, self.dtype, (edges.shape[0],), index)


def _histogram_bin_ct_kernel(self, bins=100, *, range=None, weight=None, density=False):
    _k_check_device(self, weight)
    _hist_checks(self, weight)
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    if range is not None:
        lo, hi = float(range[0]), float(range[1])
    elif self.numel():
        arrs, specs, sig = _k_inputs([self])
        read = _k_read(specs)

        def build():
            def fn(*a):
                x = read(a)[0]
                return jnp.stack([jnp.min(x), jnp.max(x)]).astype(jnp.float64)
            return fn

        lo, hi = (float(v) for v in np.asarray(_k_jit(("hist_range", specs, sig), build)(*arrs)))
    else:
        lo, hi = 0.0, 1.0  # CPU's default outer edges for an empty input
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"torch.histogramdd: dimension 0's range [{_g(lo)}, {_g(hi)}] is not finite")
    if lo > hi:
        raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {_g(lo)} max {_g(hi)} "
                           "for dimension 0")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    dt = runtime.jdtype(self.dtype)
    steps = bins + 1

    def edges_fn(lohi, _):
        # CPU's linspace kernel, in the tensor's dtype
        start, end = lohi[0].astype(dt), lohi[1].astype(dt)
        step = (end - start) / jnp.asarray(steps - 1, dt)
        i = lax.iota(jnp.int64, steps)
        fi = i.astype(dt)
        return jnp.where(i < steps // 2, start + step * fi, end - step * (jnp.asarray(steps - 1, dt) - fi))

    def locate(x, edges, left, right):
        # linear interpolation, then CPU's local upper_bound search in [pos-1, pos+2)
        p = ((x - left) * jnp.asarray(bins, dt) / (right - left))
        p = jnp.clip(jnp.where(jnp.isfinite(p), p, 0), -1, bins + 1).astype(jnp.int64)
        pmin = jnp.maximum(p - 1, 0)
        pmax = jnp.minimum(p + 2, steps)
        cnt = jnp.zeros(x.shape, jnp.int64)
        for k in (0, 1, 2):
            j = pmin + k
            inside = j < pmax
            cnt = cnt + (inside & (jnp.take(edges, jnp.clip(j, 0, steps - 1)) <= x)).astype(jnp.int64)
        return pmin + cnt - 1

    return _hist_run(self, weight, edges_fn, locate, bins, density, ("ct", (lo, hi)), [])


def _histogram_bins_tensor_kernel(self, bins, *, weight=None, density=False):
    _k_check_device(self, weight, bins)
    _hist_checks(self, weight)
    if bins.dtype != self.dtype:
        raise RuntimeError(
            "torch.histogramdd: input tensor and bins tensors should have the same dtype, but got input "
            f"with dtype {_cname(self.dtype)} and bins for dimension 0 with dtype {_cname(bins.dtype)}")
    if bins.dim() != 1:
        raise RuntimeError("torch.histogramdd: bins tensor should have one dimension, but got "
                           f"{bins.dim()} dimensions in the bins tensor for dimension 0")
    if bins.numel() == 0:
        raise RuntimeError("torch.histogramdd: bins tensor should have at least 1 element, but got 0 "
                           "elements in the bins tensor for dimension 0")
    nb = bins.numel() - 1
    if nb <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {nb} for dimension 0")

    def edges_fn(lohi, extra):
        return extra[0]

    def locate(x, edges, left, right):
        return search_sorted(edges, x, True, None) - 1

    return _hist_run(self, weight, edges_fn, locate, nb, density, ("tensor", (0.0, 0.0)), [bins])


def _aminmax_kernel(self):
    return torch.aminmax(self)


def _aminmax_dim_kernel(self, dim, keepdim=False):
    return torch.aminmax(self, dim=dim, keepdim=keepdim)


for _op, _fn in ((aten.equal.default, _equal_kernel),
                 (aten.bincount.default, _bincount_kernel),
                 (aten._unique2.default, _unique2_kernel),
                 (aten._unique.default, _unique_kernel),
                 (aten.unique_dim.default, _unique_dim_kernel),
                 (aten.unique_consecutive.default, _unique_consecutive_kernel),
                 (aten.unique_dim_consecutive.default, _unique_dim_consecutive_kernel),
                 (aten.histogram.bin_ct, _histogram_bin_ct_kernel),
                 (aten.histogram.bins_tensor, _histogram_bins_tensor_kernel),
                 (aten._aminmax.default, _aminmax_kernel),
                 (aten._aminmax.dim, _aminmax_dim_kernel)):
    dispatch.declare(_op, _fn)

"""Sorting and searching: sort, topk, kthvalue, median, mode, searchsorted, bucketize."""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..lowering import lower
from ..numerics import (
    canon_dim,
    cast,
    convert,
    is_complex,
    is_float,
    need_nonempty_dim,
    no_bool,
    no_complex,
)


# ---------------------------------------------------------------- sorting
def _sort_last(x, descending):
    """Stable sort along the last axis: (values, int64 indices); NaN is largest."""
    n = x.shape[-1]
    iota = lax.broadcasted_iota(jnp.int64, x.shape, x.ndim - 1)
    k = x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x
    if n <= 1:
        return x, iota
    if not descending:
        sk, si = lax.sort((k, iota), dimension=x.ndim - 1, num_keys=1, is_stable=True)
    else:
        # ascending by (value, -index), reversed: descending values, ties by index
        sk, sneg = lax.sort((k, -iota), dimension=x.ndim - 1, num_keys=2)
        sk, si = jnp.flip(sk, -1), -jnp.flip(sneg, -1)
    return sk.astype(x.dtype), si


def _sort(x, dim, descending):
    if is_complex(x.dtype):
        raise RuntimeError("Sort does not support complex dtypes on neuron")
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = canon_dim(dim, x.ndim)
    v, i = _sort_last(jnp.moveaxis(x, d, -1), descending)
    return jnp.moveaxis(v, -1, d), jnp.moveaxis(i, -1, d)


@lower("sort.default")
def sort(x, dim=-1, descending=False):
    return _sort(x, dim, descending)


@lower("sort.stable")
def sort_stable(x, *, stable=None, dim=-1, descending=False):
    return _sort(x, dim, descending)


@lower("topk.default")
def topk(x, k, dim=-1, largest=True, sorted=True):
    # (CPU's and CUDA's messages name the device)
    if is_complex(x.dtype):
        raise RuntimeError("topk does not support complex dtypes on neuron")
    if x.dtype == jnp.bool_:
        raise RuntimeError("topk does not support bool dtypes on neuron")
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = canon_dim(dim, x.ndim)
    xm = jnp.moveaxis(x, d, -1)
    if k == 0 or xm.shape[-1] == 0:
        v, i = xm[..., :0], jnp.zeros(xm.shape[:-1] + (0,), jnp.int64)
    else:
        # lax.top_k orders -NaN lowest and -0.0 below 0.0; PyTorch has every NaN
        # largest and -0.0 == 0.0: rank a canonical key, gather the original values
        key = xm
        if is_float(key.dtype):
            key = jnp.where(jnp.isnan(key), jnp.asarray(jnp.nan, key.dtype),
                            jnp.where(key == 0, jnp.zeros((), key.dtype), key))
            if not largest:
                key = -key
        elif not largest:
            key = ~key
        _, i = lax.top_k(key, k)
        v = jnp.take_along_axis(xm, i, axis=-1)
    return jnp.moveaxis(v, -1, d), jnp.moveaxis(i, -1, d)


def _select(v, i, pos, d, keepdim):
    """Pick sorted position `pos` (array over the leading dims, or int) along last axis."""
    pos = jnp.asarray(pos)
    if pos.ndim == 0:
        pos = jnp.broadcast_to(pos, v.shape[:-1])
    pos = pos[..., None]
    rv = jnp.take_along_axis(v, pos, axis=-1)
    ri = jnp.take_along_axis(i, pos, axis=-1)
    rv, ri = jnp.moveaxis(rv, -1, d), jnp.moveaxis(ri, -1, d)
    if not keepdim:
        rv, ri = jnp.squeeze(rv, d), jnp.squeeze(ri, d)
    return rv, ri


@lower("kthvalue.default")
def kthvalue(x, k, dim=-1, keepdim=False):
    no_complex("kthvalue", x)
    no_bool("kthvalue", x)
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = canon_dim(dim, x.ndim)
    v, i = _sort_last(jnp.moveaxis(x, d, -1), False)
    return _select(v, i, k - 1, d, keepdim)


def _median_last(x, ignore_nan):
    """Median along the last axis of a non-empty x: (values, indices) over leading dims."""
    n = x.shape[-1]
    v, i = _sort_last(x, False)
    if not is_float(x.dtype):
        pos = jnp.full(x.shape[:-1], (n - 1) // 2, jnp.int64)
        return v, i, pos
    nan = jnp.isnan(x)
    if ignore_nan:
        m = jnp.sum(~nan, axis=-1)
        pos = jnp.maximum((m - 1) // 2, 0)
        return v, i, pos
    # any NaN: the first NaN (sorted stably after all numbers, at position n - #nan)
    cnt = jnp.sum(nan, axis=-1)
    pos = jnp.where(cnt > 0, n - cnt, (n - 1) // 2)
    return v, i, pos


def _median_all(x, ignore_nan):
    # CPU's kernels name themselves "median_cpu" (whole tensor) and "median_out" (along a
    # dim), for nanmedian too
    if x.size == 0:  # CPU fills NaN before any dtype check (INT64_MIN for int64, True for bool)
        return convert(jnp.full((), jnp.nan, jnp.float64), x.dtype) if not is_float(x.dtype) \
            else jnp.full((), jnp.nan, x.dtype)
    no_complex("median_cpu", x)
    no_bool("median_cpu", x)
    v, i, pos = _median_last(x.reshape(-1), ignore_nan)
    return jnp.take(v, pos)


@lower("median.default")
def median(x):
    return _median_all(x, False)


@lower("nanmedian.default")
def nanmedian(x):
    return _median_all(x, True)


def _median_dim(x, dim, keepdim, ignore_nan):
    name = "nanmedian" if ignore_nan else "median"
    no_complex("median_out", x)
    no_bool("median_out", x)
    need_nonempty_dim(name, x, dim)
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = canon_dim(dim, x.ndim)
    v, i, pos = _median_last(jnp.moveaxis(x, d, -1), ignore_nan)
    return _select(v, i, pos, d, keepdim)


@lower("median.dim")
def median_dim(x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, False)


@lower("nanmedian.dim")
def nanmedian_dim(x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, True)


@lower("mode.default")
def mode(x, dim=-1, keepdim=False):
    no_complex("mode", x)
    need_nonempty_dim("mode", x, dim)
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = canon_dim(dim, x.ndim)
    xm = jnp.moveaxis(x, d, -1)
    n = xm.shape[-1]
    v, i = _sort_last(xm, False)
    if n == 0:
        return _select(v, i, 0, d, keepdim)
    if n == 1:
        return _select(v, i, 0, d, keepdim)
    same = v[..., 1:] == v[..., :-1]
    if is_float(v.dtype):
        same = same | (jnp.isnan(v[..., 1:]) & jnp.isnan(v[..., :-1]))
    shape = v.shape[:-1] + (1,)
    is_start = jnp.concatenate([jnp.ones(shape, bool), ~same], axis=-1)
    is_end = jnp.concatenate([~same, jnp.ones(shape, bool)], axis=-1)
    j = lax.broadcasted_iota(jnp.int64, v.shape, v.ndim - 1)
    start = lax.cummax(jnp.where(is_start, j, 0), axis=v.ndim - 1)
    count = jnp.where(is_end, j - start + 1, 0)
    best = jnp.argmax(count, axis=-1)  # the smallest value among the most frequent
    return _select(v, i, best, d, keepdim)


# ---------------------------------------------------------------- searching
def search_sorted(bd, v, right, sorter):
    """searchsorted's positions of `v` in the sorted last axis of `bd`: CPU's lower/upper
    bound binary search (same comparisons, so NaN behaves alike); shared with the
    histogram kernels."""
    if sorter is not None:
        bd = jnp.take_along_axis(bd, sorter.astype(jnp.int64), axis=-1)
    n = bd.shape[-1]
    v = jnp.asarray(v)
    ct = jnp.result_type(bd, v)
    bd = cast(bd, ct)
    v = cast(v, ct)
    start = jnp.zeros(v.shape, jnp.int64)
    if n == 0:
        return start
    end = jnp.full(v.shape, n, jnp.int64)
    one_d = bd.ndim == 1

    def body(_, se):
        s, e = se
        active = s < e
        mid = (s + e) // 2
        midc = jnp.minimum(mid, n - 1)
        mv = jnp.take(bd, midc) if one_d else jnp.take_along_axis(bd, midc, axis=-1)
        go = ~(mv > v) if right else ~(mv >= v)
        s = jnp.where(active & go, mid + 1, s)
        e = jnp.where(active & ~go, mid, e)
        return s, e

    s, _ = lax.fori_loop(0, int(n).bit_length() + 1, body, (start, end))
    return s


@lower("searchsorted.Tensor", "searchsorted.Scalar")
def searchsorted(sorted_sequence, x, *, out_int32=False, right=False, side=None, sorter=None):
    no_bool("searchsorted", sorted_sequence)
    r = right or side == "right"
    return search_sorted(sorted_sequence, x, r, sorter)


@lower("bucketize.Tensor", "bucketize.Scalar")
def bucketize(x, boundaries, *, out_int32=False, right=False):
    no_bool("bucketize", boundaries)
    return search_sorted(boundaries, x, right, None)

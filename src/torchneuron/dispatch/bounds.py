"""Index bounds checks (a lowering's ``bounds`` extra): CPU and CUDA raise for an
out-of-range index, which needs the index values on the host: one read of
(any bad, first bad value) per index tensor, computed on the device.

A device buffer never changes (a write replaces its cell's array), so an index view
found in range once stays in range while its cell holds the same array: the check is
remembered per array (a position-ids buffer, an index reused every step) and not
read again."""
from __future__ import annotations

import weakref

import jax.numpy as jnp
import numpy as np
import torch

from .. import storage

_INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _scan_bounds(*args):
    """Inside a device function: per index tensor, (any out of [lo, hi), first bad)."""
    *values, bounds = args
    rows = []
    for v, (lo, hi) in zip(values, bounds):
        v = v.reshape(-1).astype(jnp.int64)
        bad = (v < lo) | (v >= hi)
        j = jnp.argmax(bad)
        rows.append(jnp.stack([bad[j].astype(jnp.int64), v[j]]))
    return jnp.stack(rows)


def _bad_on_device(ts, bounds):
    """[(any_bad, first_bad_value)] for neuron index tensors `ts` and (lo, hi) bounds."""
    return np.asarray(storage.read_back(_scan_bounds, *ts, static=(tuple(bounds),))).tolist()


# id(array) -> (weakref to the array, {(view, lo, hi) found in range})
_in_range: dict = {}
_IN_RANGE_MAX = 4096


def _checked_key(t, lo, hi):
    """(array, key) under which `t`'s check is remembered; (None, None) for a value its
    device program has not computed yet (fused eager)."""
    arr = storage.raw_arr(storage.cell_of(t))
    if type(arr) is storage.Pending:
        return None, None
    return arr, (t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.is_neg(), lo, hi)


def _forget(ref, k):
    got = _in_range.get(k)
    if got is not None and got[0] is ref:
        del _in_range[k]


def _remember(arr, key):
    k = id(arr)
    got = _in_range.get(k)
    if got is None or got[0]() is not arr:
        if len(_in_range) >= _IN_RANGE_MAX:
            _in_range.clear()
        got = _in_range[k] = (weakref.ref(arr, lambda r, k=k: _forget(r, k)), set())
    got[1].add(key)


def first_bad(items):
    """items: [(index tensor, lo, hi, make_error)]; the error for the first bad index or None."""
    dev, dev_b, dev_err, dev_keys = [], [], [], []
    for t, lo, hi, err in items:
        if t is None or not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        if t.dtype not in _INDEX_DTYPES:
            continue
        if t.device.type == "neuron":
            lo, hi = int(lo), int(hi)
            arr, key = _checked_key(t, lo, hi)
            if arr is not None:
                got = _in_range.get(id(arr))
                if got is not None and got[0]() is arr and key in got[1]:
                    continue  # this very array was found in range before
            dev.append(t)
            dev_b.append((lo, hi))
            dev_err.append(err)
            dev_keys.append((arr, key))
        else:
            v = t.reshape(-1).to(torch.int64)
            bad = (v < lo) | (v >= hi)
            if bool(bad.any()):
                return err(int(v[bad.nonzero()[0, 0]]))
    if dev:
        for (anyb, val), err, (arr, key) in zip(_bad_on_device(dev, dev_b), dev_err, dev_keys):
            if anyb:
                return err(int(val))
            if arr is not None:
                _remember(arr, key)
    return None

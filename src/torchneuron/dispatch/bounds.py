"""Index bounds checks (a lowering's ``bounds`` extra): CPU and CUDA raise for an
out-of-range index, which needs the index values on the host: one read of
(any bad, first bad value) per index tensor, computed on the device."""
from __future__ import annotations

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


def first_bad(items):
    """items: [(index tensor, lo, hi, make_error)]; the error for the first bad index or None."""
    dev, dev_b, dev_err = [], [], []
    for t, lo, hi, err in items:
        if t is None or not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        if t.dtype not in _INDEX_DTYPES:
            continue
        if t.device.type == "neuron":
            dev.append(t)
            dev_b.append((int(lo), int(hi)))
            dev_err.append(err)
        else:
            v = t.reshape(-1).to(torch.int64)
            bad = (v < lo) | (v >= hi)
            if bool(bad.any()):
                return err(int(v[bad.nonzero()[0, 0]]))
    if dev:
        for (anyb, val), err in zip(_bad_on_device(dev, dev_b), dev_err):
            if anyb:
                return err(int(val))
    return None

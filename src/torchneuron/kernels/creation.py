"""Creation kernels: the out= forms of the range factories, computed in out's dtype;
out is resized only when its number of elements differs (PyTorch's CPU kernels keep
a same-numel shape)."""
from __future__ import annotations

import torch

from .. import dispatch

aten = torch.ops.aten


def _into(out, r, keep_shape=True):
    if out.device.type != "neuron":
        raise dispatch.device_mismatch("neuron:0", out.device)
    if not keep_shape or out.numel() != r.numel():
        out.resize_(tuple(r.shape))
    out.copy_(r.reshape(out.shape))
    return out


@dispatch.kernel("arange.start_out", "arange.out")
def arange_out(*args, out):
    start, end, step = (0, args[0], 1) if len(args) == 1 else (tuple(args) + (1,))[:3]
    r = aten.arange.start_step(start, end, step, dtype=out.dtype, device=out.device)
    return _into(out, r)


@dispatch.kernel("linspace.out")
def linspace_out(start, end, steps, *, out):
    r = aten.linspace.default(start, end, steps, dtype=out.dtype, device=out.device)
    return _into(out, r)


@dispatch.kernel("logspace.out")
def logspace_out(start, end, steps, base=10.0, *, out):
    r = aten.logspace.default(start, end, steps, base, dtype=out.dtype, device=out.device)
    return _into(out, r)


@dispatch.kernel("eye.out", "eye.m_out")
def eye_out(n, m=None, *, out):
    r = aten.eye.m(n, n if m is None else m, dtype=out.dtype, device=out.device)
    return _into(out, r, keep_shape=False)

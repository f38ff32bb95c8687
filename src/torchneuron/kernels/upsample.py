"""Upsampling kernels: CPU's size check (the meta kernels divide by zero or mis-check
instead) and empty batches (PyTorch's nearest meta kernels raise a TypeError on
them), around the lowerings of ops/upsample.py."""
from __future__ import annotations

import math

import torch

from .. import dispatch
from ..lowering import LOWERINGS, resolve

_AXES = {1: ("W",), 2: ("H", "W"), 3: ("D", "H", "W")}


def _size_error(in_sp, out_sp):
    names = _AXES[len(in_sp)]
    fmt = lambda v: ", ".join(f"{n}: {int(x)}" for n, x in zip(names, v))  # noqa: E731
    return RuntimeError(f"Input and output sizes should be greater than 0, but got input "
                        f"({fmt(in_sp)}) output ({fmt(out_sp)})")


def _declare():
    """CPU's size check (the meta kernels divide by zero or mis-check instead) and empty
    batches (PyTorch's nearest meta kernels raise a TypeError on them)."""
    names = [f"upsample_nearest{n}d" for n in (1, 2, 3)] + \
        [f"_upsample_nearest_exact{n}d" for n in (1, 2, 3)] + \
        ["upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d", "upsample_bicubic2d",
         "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa"]
    for name in names:
        try:
            op = resolve(name + ".default")
        except AttributeError:
            continue
        if op not in LOWERINGS:
            continue
        nd = int(name.rstrip("_a").rstrip("d")[-1])
        entry = dispatch.entry_for(op)

        def kernel(x, output_size, *args, _entry=entry, _nd=nd, **kwargs):
            in_sp = tuple(x.shape[-_nd:])
            out_sp = tuple(int(v) for v in output_size)
            if len(out_sp) == _nd and x.dim() >= _nd + 1:
                if min(in_sp) <= 0 or min(out_sp) <= 0:
                    raise _size_error(in_sp, out_sp)
                if x.numel() == 0 and math.prod(x.shape[1:]) == 0:
                    raise RuntimeError(f"Non-empty {x.dim()}D data tensor expected but got a "
                                       f"tensor with sizes {list(x.shape)}")
                if x.numel() == 0:
                    return torch.empty(tuple(x.shape[:-_nd]) + out_sp, dtype=x.dtype,
                                       device=x.device)
            return _entry(x, output_size, *args, **kwargs)

        dispatch.declare(op, kernel)


_declare()

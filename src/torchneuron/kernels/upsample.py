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


_dtype_checked: dict = {}


def _check_dtype(op, x, nd, args, kwargs):
    """Raise the NotImplementedError PyTorch's CPU kernel raises for x's dtype ("compute_
    indices_weights_nearest" not implemented for 'Short': the meta kernels take every
    dtype), found once per (op, dtype, layout) on a tiny stand-in with x's layout (the
    message names the kernel the layout selects)."""
    cl = {4: torch.channels_last, 5: torch.channels_last_3d}.get(x.dim())
    layout = (x.is_contiguous(), cl is not None and x.is_contiguous(memory_format=cl),
              x.dim() >= 2 and x.shape[1] == 1)
    key = (op, x.dtype, x.dim(), layout)
    err = _dtype_checked.get(key, 0)
    if err == 0:
        err = None
        if x.dim() == nd + 2:
            shape = (1, 1 if layout[2] else 2) + (2,) * nd
            fmt = cl if (layout[1] and not layout[0]) or (layout[1] and layout[2]) else None
            stand = torch.zeros(shape, dtype=x.dtype)
            if fmt is not None:
                stand = stand.contiguous(memory_format=fmt)
            scales = [None] * (len(args) - (1 if args and isinstance(args[0], bool) else 0))
            sargs = ([args[0]] if args and isinstance(args[0], bool) else []) + scales
            try:
                op(stand, (2,) * nd, *sargs)
            except NotImplementedError as e:
                err = NotImplementedError(str(e).split("\n")[0])
            except Exception:  # noqa: BLE001, S110  (not a dtype question)
                pass
        _dtype_checked[key] = err
    if err is not None:
        raise NotImplementedError(str(err))


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

        def kernel(x, output_size, *args, _entry=entry, _nd=nd, _op=op, **kwargs):
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
            _check_dtype(_op, x, _nd, args, kwargs)
            return _entry(x, output_size, *args, **kwargs)

        dispatch.declare(op, kernel)


_declare()

"""Random kernels: ``native_dropout`` of an empty input (CPU's mask has the input's
dtype, which PyTorch's meta kernel does not say) and ``randperm``'s out= forms."""
from __future__ import annotations

import torch

from .. import dispatch
from ..ops.random import no_generator

aten = torch.ops.aten
_dropout = dispatch.lazy_entry(aten.native_dropout.default)


@dispatch.kernel("native_dropout.default")
def native_dropout(input, p, train=None):
    if input.numel() == 0:  # CPU: the mask of an empty input has the input's dtype
        return torch.empty_like(input), torch.empty_like(input)
    return _dropout(input, p, train)


def _randperm_out(n, out):
    r = aten.randperm.default(n, dtype=out.dtype, device=out.device)
    dispatch.resize_output(out, r.shape)
    out.copy_(r)
    return out


@dispatch.kernel("randperm.generator_out")
def randperm_generator_out(n, *, generator=None, out):
    no_generator(generator)
    return _randperm_out(n, out)


@dispatch.kernel("randperm.out")
def randperm_out(n, *, out):
    return _randperm_out(n, out)

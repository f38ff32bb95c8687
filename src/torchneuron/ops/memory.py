"""Copy lowerings: what ``copy_``, ``_to_copy`` and ``clone`` compute on device values.

Their eager kernels (copies across devices, allocation, views, host transfer) are
in ``kernels/memory.py``; inside compiled graphs these lowerings are used directly.
"""
from __future__ import annotations

from .. import numerics
from ..lowering import lower, out_dtype


@lower("copy_.default")
def copy_(self, src, non_blocking=False):
    return numerics.convert(src, self.dtype)


@lower("_to_copy.default")
def to_copy(x, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
            memory_format=None):
    return numerics.convert(x, out_dtype())


@lower("clone.default")
def clone(x, *, memory_format=None):
    return x

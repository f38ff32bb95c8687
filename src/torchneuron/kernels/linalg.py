"""Linear algebra kernels: ``linalg_lstsq``'s residuals, which CPU returns only when
every matrix has full rank (one host read after the lowering)."""
from __future__ import annotations

import torch

from .. import dispatch

aten = torch.ops.aten
_lstsq = dispatch.lazy_entry(aten.linalg_lstsq.default)


@dispatch.kernel("linalg_lstsq.default")
def linalg_lstsq(A, B, rcond=None, *, driver=None):
    sol, res, rank, sv = _lstsq(A, B, rcond, driver=driver)
    if driver in ("gelsd", "gelss") and res.numel() and rank.numel():
        # residuals only when every matrix has full rank: one host read
        if not bool((rank == A.shape[-1]).all().item()):
            res = res.new_empty((0,))
    return sol, res, rank, sv

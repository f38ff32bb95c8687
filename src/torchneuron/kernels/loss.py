"""Loss kernels: ``ctc_loss`` with Tensor lengths, read to the host (one read each)
and run as the int[] overload, as PyTorch's own kernels do (LossCTC.cpp)."""
from __future__ import annotations

import torch

from .. import dispatch

aten = torch.ops.aten


def _lengths(t, what):
    if isinstance(t, torch.Tensor):
        if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
            raise RuntimeError(f"{what} must be integral")
        return [int(v) for v in t.to("cpu", torch.int64).reshape(-1).tolist()]
    return list(t)


@dispatch.kernel("_ctc_loss.Tensor")
def ctc_loss_tensor(log_probs, targets, input_lengths, target_lengths, blank=0,
                    zero_infinity=False):
    """The Tensor-length overload: the lengths read to the host (one read), then the int[]
    overload, as PyTorch's kernel does (LossCTC.cpp, ctc_loss_tensor)."""
    il = _lengths(input_lengths, "input_lengths")
    tl = _lengths(target_lengths, "target_lengths")
    return torch.ops.aten._ctc_loss.default(log_probs, targets, il, tl, blank, zero_infinity)


@dispatch.kernel("_ctc_loss_backward.Tensor")
def ctc_loss_backward_tensor(grad, log_probs, targets, input_lengths, target_lengths,
                             neg_log_likelihood, log_alpha, blank, zero_infinity=False):
    il = _lengths(input_lengths, "input_lengths")
    tl = _lengths(target_lengths, "target_lengths")
    return torch.ops.aten._ctc_loss_backward.default(grad, log_probs, targets, il, tl,
                                                     neg_log_likelihood, log_alpha, blank,
                                                     zero_infinity)

"""Normalization kernels: ``native_batch_norm`` routed to the ops whose schemas say
what they mutate."""
from __future__ import annotations

import torch

from ..dispatch import kernel

aten = torch.ops.aten


@kernel("native_batch_norm.default")
def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum,
                              eps):
    """native_batch_norm mutates running_mean/var without saying so in its schema:
    route it to the annotated ops."""
    if running_mean is not None and running_var is not None:
        if training:
            return aten._native_batch_norm_legit.default(input, weight, bias, running_mean,
                                                         running_var, True, momentum, eps)
        return aten._native_batch_norm_legit_no_training.default(input, weight, bias,
                                                                 running_mean, running_var,
                                                                 momentum, eps)
    if not training:
        raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
    if running_mean is not None or running_var is not None:
        raise RuntimeError("running_mean and running_var must either both be None or neither "
                           "be None")
    return aten._native_batch_norm_legit.no_stats(input, weight, bias, True, momentum, eps)

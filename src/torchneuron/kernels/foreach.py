"""Foreach kernels: ``_foreach_addc{mul,div}.Tensor``, whose packed scalars are a CPU
tensor that PyTorch reads on the host before running the ScalarList overload; so do
we.  (The ``_foreach_*_out`` overloads are out= variants, built by dispatch.)"""
from __future__ import annotations

import torch

from .. import dispatch

aten = torch.ops.aten


def _tensor_scalars_kernel(target):
    def kernel(self, tensor1, tensor2, scalars):
        if scalars.device.type != "cpu":
            raise RuntimeError(f"Expected scalars to be on CPU, got {scalars.device} instead.")
        if not scalars.is_contiguous():
            raise RuntimeError("Expected scalars to be contiguous.")
        if scalars.dim() != 1:
            raise RuntimeError(f"Expected packed scalar Tensor to be of dimension 1. Got "
                               f"{scalars.dim()} instead.")
        if scalars.size(0) != len(self):
            raise RuntimeError(f"Expected length of scalars to match input of length {len(self)} "
                               f"but got {scalars.size(0)} instead.")
        return target(self, tensor1, tensor2, scalars.tolist())

    return kernel


for _name in ("addcmul", "addcdiv"):
    for _suffix in ("", "_"):
        _packet = getattr(aten, f"_foreach_{_name}{_suffix}")
        dispatch.declare(_packet.Tensor, _tensor_scalars_kernel(_packet.ScalarList))

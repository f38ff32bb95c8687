"""Attention kernels: ``scaled_dot_product_attention`` routed (on its autograd key,
as CUDA's kernel choice is) to the fused lowering when it applies, else to
PyTorch's math decomposition; the fused forward's undefined outputs as empty
tensors."""
from __future__ import annotations

import torch

from .. import config, dispatch

aten = torch.ops.aten

_MODE = config.get("TORCHNEURON_SDPA")


def _forward_ad_active():
    """A dual level is open (torch.autograd.forward_ad or torch.func.jvp): the fused op has
    no forward-mode formula, the math decomposition's ops all do."""
    from torch.autograd import forward_ad

    return getattr(forward_ad, "_current_level", -1) >= 0


def _fusable(q, k, v, attn_mask, dropout_p, enable_gqa):
    if _MODE == "math" or dropout_p > 0.0 or _forward_ad_active():
        return False
    if q.is_nested or k.is_nested or v.is_nested:
        return False
    if q.dim() not in (3, 4) or k.dim() != q.dim() or v.dim() != q.dim():
        return False
    if not (q.dtype == k.dtype == v.dtype) or not q.dtype.is_floating_point:
        return False
    if q.shape[:-3] != k.shape[:-3] or k.shape[:-1] != v.shape[:-1]:
        return False
    hq, hk = q.shape[-3], k.shape[-3]
    if hq != hk and not (enable_gqa and hk > 0 and hq % hk == 0):
        return False
    if k.shape[-1] != q.shape[-1] or q.shape[-2] == 0 or k.shape[-2] == 0:
        return False
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool and attn_mask.dtype != q.dtype:
            return False
        try:
            torch.broadcast_shapes(attn_mask.shape, q.shape[:-1] + (k.shape[-2],))
        except RuntimeError:
            return False
    return True


def _sdpa_autograd(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                   scale=None, enable_gqa=False):
    if is_causal and attn_mask is not None:  # as PyTorch's CPU and math kernels
        raise RuntimeError(
            "_scaled_dot_product_attention: Explicit attn_mask should not be set when "
            "is_causal=True")
    if not _fusable(query, key, value, attn_mask, dropout_p, enable_gqa):
        return aten.scaled_dot_product_attention.default.decompose(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
            enable_gqa=enable_gqa)
    return aten._scaled_dot_product_fused_attention_overrideable.default(
        query, key, value, attn_mask, dropout_p, is_causal, False, scale=scale)[0]


_fused = dispatch.lazy_entry(aten._scaled_dot_product_fused_attention_overrideable.default)


@dispatch.kernel("_scaled_dot_product_fused_attention_overrideable.default")
def fused_attention(*args, **kwargs):
    """The forward's meta kernel returns undefined tensors for cum_seq_q/k and the debug
    mask, which a Python kernel cannot return for a `Tensor` result: hand back empty
    tensors there instead."""
    res = _fused(*args, **kwargs)
    dev = res[0].device
    return tuple(torch.empty(0, device=dev, dtype=res[0].dtype)
                 if r is None and i in (2, 3, 8) else r for i, r in enumerate(res))


dispatch.declare(aten.scaled_dot_product_attention.default, _sdpa_autograd,
                 key="AutogradPrivateUse1")

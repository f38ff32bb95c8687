"""Scaled dot-product attention: one fused executable forward, one backward.

On a PrivateUse1 device ``scaled_dot_product_attention`` would pick its kernel
through a C++ dispatch stub (``_fused_sdp_choice_stub``) that Python cannot
register, so it always decomposes into the math path (about ten ops forward,
more backward).  Here its AutogradPrivateUse1 kernel sends the common cases
(3-d/4-d inputs, no dropout, optional bool/float mask, causal, scale, GQA) to
``_scaled_dot_product_fused_attention_overrideable``, the op PyTorch reserves
for out-of-tree backends: lowered below as one jax computation, with its own
backward op (which autograd already knows).  Everything else (dropout > 0,
other ranks, broadcast batch dims, nested tensors) runs PyTorch's own math
decomposition, natively op by op, and so does everything under forward-mode AD
(the fused op has no forward-mode formula; CPU's flash kernel has none either).
``TORCHNEURON_SDPA=math`` turns the fused path off.

Numerics follow PyTorch's CPU flash kernel: scores and softmax in float32 for
half types (the probabilities rounded to the input type for the second
product), fully masked rows give zeros.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import torch
from jax import lax

from ..numerics import cast, opmath
from ..lowering import lower, meta_kernel

HIGHEST = lax.Precision.HIGHEST
aten = torch.ops.aten


def _dot(a, b, contract, batch, acc):
    prec = HIGHEST if jnp.issubdtype(a.dtype, jnp.inexact) else None
    return lax.dot_general(a, b, (contract, batch), precision=prec, preferred_element_type=acc)


def _to5(q, k, v):
    """(B?, H, L, E) -> q (B, Hk, G, L, E), k/v (B, Hk, S, E): G query heads per kv head."""
    if q.ndim == 3:
        q, k, v = q[None], k[None], v[None]
    B, Hq, L, E = q.shape
    Hk = k.shape[1]
    G = Hq // Hk
    return q.reshape(B, Hk, G, L, E), k, v


def _scores(q5, k, bias, is_causal, scale, acc, hq_shape):
    """Scaled, masked scores (B, Hk, G, L, S) in acc, and the per-row max."""
    B, Hk, G, L, E = q5.shape
    S = k.shape[2]
    s = _dot(q5, k, ((4,), (3,)), ((0, 1), (0, 1)), acc)  # (B, Hk, G, L, S)
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    s = s * jnp.asarray(sc, acc)
    neg = jnp.asarray(-jnp.inf, acc)
    if bias is not None:
        b = jnp.broadcast_to(bias, hq_shape[:-2] + (L, S))
        if b.ndim == 3:
            b = b[None]
        b = b.reshape(B, Hk, G, L, S)
        s = jnp.where(b, s, neg) if b.dtype == jnp.bool_ else s + cast(b, acc)
    if is_causal:
        keep = lax.broadcasted_iota(jnp.int32, (L, S), 1) <= lax.broadcasted_iota(jnp.int32, (L, S), 0)
        s = jnp.where(keep, s, neg)
    return s


def _softmax(s):
    m = jnp.max(s, axis=-1, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, jnp.zeros_like(m))
    e = jnp.exp(s - m)
    den = jnp.sum(e, axis=-1, keepdims=True)
    safe = jnp.where(den == 0, jnp.ones_like(den), den)
    p = jnp.where(den == 0, jnp.zeros_like(e), e / safe)
    lse = m + jnp.log(den)  # -inf on fully masked rows
    return p, lse[..., 0]


def _fused_meta(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False,
                return_debug_mask=False, *, scale=None):
    # 3-D (H, L, E) and 4-D (B, H, L, E) queries, as torch 2.13's meta kernel does
    if query.dim() not in (3, 4):
        raise RuntimeError("query must be 3D or 4D")
    B, H, L = (1,) + tuple(query.shape[:2]) if query.dim() == 3 else tuple(query.shape[:3])
    out = torch.empty(tuple(query.shape[:-1]) + (value.shape[-1],), dtype=query.dtype,
                      device="meta")
    lse = torch.empty((B, H, L), dtype=torch.float32, device="meta")
    seed = torch.empty((), dtype=torch.long, device="meta")
    offset = torch.empty((), dtype=torch.long, device="meta")
    return out, lse, None, None, L, key.shape[-2], seed, offset, None


def _fused_backward_meta(grad_out, query, key, value, attn_bias, grad_input_mask, out,
                         logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                         philox_seed, philox_offset, *, scale=None):
    return (torch.empty_like(query), torch.empty_like(key), torch.empty_like(value),
            torch.empty_like(attn_bias) if attn_bias is not None else None)


if torch.torch_version.TorchVersion(torch.__version__) < (2, 13):
    # torch 2.11's meta kernel takes 4-D queries only, and its backward has none
    meta_kernel("_scaled_dot_product_fused_attention_overrideable", _fused_meta, replace=True)
    meta_kernel("_scaled_dot_product_fused_attention_overrideable_backward",
                _fused_backward_meta, replace=True)


@lower("_scaled_dot_product_fused_attention_overrideable.default")
def sdpa_fused(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False,
               return_debug_mask=False, *, scale=None):
    dt = jnp.dtype(query.dtype)
    acc = opmath(dt)
    q5, k, v = _to5(query, key, value)
    B, Hk, G, L, E = q5.shape
    s = _scores(q5, k, attn_bias, is_causal, scale, acc, tuple(query.shape))
    p, lse = _softmax(s)
    out = _dot(cast(p, dt), v, ((4,), (2,)), ((0, 1), (0, 1)), acc)  # (B, Hk, G, L, Dv)
    out = out.reshape(query.shape[:-1] + (v.shape[-1],))
    lse = lse.reshape(B, Hk * G, L)
    seed = jnp.zeros((), jnp.int64)
    # cum_seq_q/k, max_q/max_k and the debug mask come from the meta kernel (constants)
    return out, lse, None, None, None, None, seed, seed, None


@lower("_scaled_dot_product_fused_attention_overrideable_backward.default")
def sdpa_fused_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp,
                        cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
                        philox_offset, *, scale=None):
    dt = jnp.dtype(query.dtype)
    acc = opmath(dt)
    q5, k, v = _to5(query, key, value)
    B, Hk, G, L, E = q5.shape
    S = k.shape[2]
    s = _scores(q5, k, attn_bias, is_causal, scale, acc, tuple(query.shape))
    p, _ = _softmax(s)
    if grad_out is None:
        # an undefined incoming gradient (autograd passes one when no gradient reaches
        # the attention output, e.g. gradcheck's vjp of another output): CPU's and
        # CUDA's fused backward kernels return undefined gradients there; zeros are the
        # same to every consumer and keep the meta kernel's result structure
        grad_out = jnp.zeros(tuple(query.shape[:-1]) + (value.shape[-1],), dt)
    go = cast(grad_out, dt).reshape(B, Hk, G, L, -1)
    # dV = P^T dO (summed over the query heads sharing a kv head)
    gv = _dot(cast(p, dt), go, ((2, 3), (2, 3)), ((0, 1), (0, 1)), acc)  # (B, Hk, S, Dv)
    dp = _dot(go, v, ((4,), (3,)), ((0, 1), (0, 1)), acc)  # (B, Hk, G, L, S)
    ds = p * (dp - jnp.sum(dp * p, axis=-1, keepdims=True))
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    dss = cast(ds * jnp.asarray(sc, acc), dt)
    gq = _dot(dss, k, ((4,), (2,)), ((0, 1), (0, 1)), acc).reshape(query.shape)
    gk = _dot(dss, q5, ((2, 3), (2, 3)), ((0, 1), (0, 1)), acc)  # (B, Hk, S, E)
    if query.ndim == 3:
        gk, gv = gk[0], gv[0]
    gb = None
    if attn_bias is not None and grad_input_mask[3] and attn_bias.dtype != jnp.bool_:
        full = ds.reshape(tuple(query.shape[:-2]) + (L, S))
        bshape = tuple(attn_bias.shape)
        lead = full.ndim - len(bshape)
        axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(bshape)
                                          if n == 1 and full.shape[i + lead] != 1)
        gb = jnp.sum(full, axis=axes, keepdims=False) if axes else full
        gb = gb.reshape(bshape)
    elif attn_bias is not None:
        gb = jnp.zeros(attn_bias.shape, acc if attn_bias.dtype != jnp.bool_ else jnp.bool_)
    return (gq if grad_input_mask[0] else None, gk if grad_input_mask[1] else None,
            gv if grad_input_mask[2] else None, gb)

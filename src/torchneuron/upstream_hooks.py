"""PyTorch's Python internals that name the GPUs, extended to neuron tensors.

Two places in PyTorch's Python code decide by device type where a PrivateUse1
device should be treated as CUDA is; each extension applies to neuron tensors
only and leaves every other device as PyTorch has it:

* **Capturable optimizers under torch.compile.**  When Dynamo first traces
  ``optimizer.step()`` it sets ``capturable=True`` on every param group whose
  parameters are all on a GPU (``p.is_cuda or p.is_xpu``) and have no state yet:
  the step counters become device tensors updated inside the compiled graph
  instead of host numbers uploaded at every step.  PyTorch's optimizers accept
  ``capturable`` on PrivateUse1 (``_get_capturable_supported_devices``); only
  Dynamo's check names the GPUs.  Neuron param groups get the same.
* **SDPA over jagged NestedTensors.**  PyTorch's jagged SDPA has fused kernels
  for CUDA only; its math path converts to the strided NestedTensor layout,
  whose kernels are C++ ones registered per device (NestedTensorCPU/CUDA).  For
  neuron tensors the batch is padded (``to_padded_tensor``), attended with a
  key-length mask by the device's dense SDPA, and gathered back to the jagged
  layout, all native ops with gradients.  ``is_causal``, an ``attn_mask`` and
  other ragged layouts go to PyTorch's own code (which raises as on the CPU).

Installed when torchneuron registers, without importing the patched modules (Dynamo
is a heavy import): a module not imported yet is patched when it is.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

# ---------------------------------------------------------------- capturable optimizers
_DYNAMO_OPTIMIZER = "torch._dynamo.variables.optimizer"


def _neuron_groups_capturable(optimizer) -> None:
    for group in optimizer.param_groups:
        params = group.get("params", [])
        if ("capturable" in group and params
                and all(getattr(p, "device", None) is not None and p.device.type == "neuron"
                        for p in params)
                and all(p not in optimizer.state for p in params)):
            group["capturable"] = True


def _patch_dynamo_optimizer(mod) -> None:
    cls = getattr(mod, "OptimizerVariable", None)
    orig = getattr(cls, "_set_capturable", None)
    if orig is None or getattr(orig, "_torchneuron", False):
        return  # another torch: nothing to extend

    def _set_capturable(self, tx):
        _neuron_groups_capturable(self.value)
        return orig(self, tx)

    _set_capturable._torchneuron = True
    _set_capturable.__wrapped__ = orig
    cls._set_capturable = _set_capturable


# ---------------------------------------------------------------- jagged SDPA
_NESTED_OPS = "torch.nested._internal.ops"


def _key_mask(q_len, k_len, lq, lk, is_causal):
    """(B, 1, Lq, Lk) boolean: key j of sequence b is visible to query i."""
    import torch

    dev = k_len.device
    keys = torch.arange(lk, device=dev)
    mask = (keys[None, :] < k_len[:, None])[:, None, None, :].expand(-1, 1, lq, lk)
    if is_causal:
        mask = mask & torch.ones(lq, lk, dtype=torch.bool, device=dev).tril()
    return mask


def _padded_jagged_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale,
                        enable_gqa):
    import torch
    import torch.nn.functional as F
    from torch.nested._internal.nested_tensor import nested_view_from_values_offsets_lengths

    q_off, k_off = query.offsets(), key.offsets()
    q_len, k_len = q_off.diff(), k_off.diff()
    # pad the (B, j, H, D) views (ragged dimension 1: PyTorch's to_padded_tensor backward
    # is wrong for ragged dimension 2), then (B, H, L, D)
    q, k, v = (t.transpose(1, 2).to_padded_tensor(0.0).transpose(1, 2)
               for t in (query, key, value))
    mask = _key_mask(q_len, k_len, q.shape[-2], k.shape[-2], is_causal)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                         scale=scale, enable_gqa=enable_gqa)
    # back to the jagged layout: a gather of each token's row (differentiable)
    tok = torch.arange(query._values.shape[query._ragged_idx - 1], device=q_off.device)
    seq = torch.searchsorted(q_off[1:], tok, right=True)
    values = out.transpose(1, 2)[seq, tok - q_off[seq]]  # (total, H, Dv)
    return nested_view_from_values_offsets_lengths(
        values, q_off, None, min_seqlen=query._maybe_min_seqlen,
        max_seqlen=query._maybe_max_seqlen).transpose(1, 2)


def _patch_nested_ops(mod) -> None:
    orig = getattr(mod, "jagged_scaled_dot_product_attention", None)
    if orig is None or getattr(orig, "_torchneuron", False):
        return

    def jagged_scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                            is_causal=False, scale=None, enable_gqa=False):
        nested = all(getattr(t, "is_nested", False) for t in (query, key, value))
        if (nested and query.device.type == "neuron" and attn_mask is None
                and not is_causal  # (PyTorch's CPU path has none either; CUDA's flash has)
                and query.dim() == 4 and key.dim() == 4 and value.dim() == 4
                and all(getattr(t, "_ragged_idx", None) == 2 for t in (query, key, value))
                and all(t.lengths() is None for t in (query, key, value))):
            from torch.nested._internal import sdpa

            query, key, value, attn_mask = sdpa._autocast(query, key, value, attn_mask)
            sdpa._validate_sdpa_input(query, key, value, attn_mask, dropout_p, is_causal, scale)
            return _padded_jagged_sdpa(query, key, value, attn_mask, dropout_p, is_causal,
                                       scale, enable_gqa)
        return orig(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                    is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)

    jagged_scaled_dot_product_attention._torchneuron = True
    jagged_scaled_dot_product_attention.__wrapped__ = orig
    mod.jagged_scaled_dot_product_attention = jagged_scaled_dot_product_attention


# ---------------------------------------------------------------- patch on import
_PATCHES = {_DYNAMO_OPTIMIZER: _patch_dynamo_optimizer, _NESTED_OPS: _patch_nested_ops}


class _Finder(importlib.abc.MetaPathFinder):
    """Patches a listed module right after its first import."""

    def find_spec(self, name, path=None, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def install() -> None:
    for name, patch in _PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())

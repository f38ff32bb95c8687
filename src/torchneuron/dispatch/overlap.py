"""PyTorch's memory-overlap and casting rules for ops that write their arguments
(TensorIterator's checks: internal overlap, partial overlap between a written and a
read tensor, result dtypes an in-place or out= write can take).  Per call where the
cache key cannot know the answer (where views lie in a shared buffer), once per
executable otherwise."""
from __future__ import annotations

import torch

from .. import storage
from ..numerics import scalar_type_name

Tensor = torch.Tensor


def _expanded_warning(op, example):
    return (f"Use of {op} on expanded tensors is deprecated. Please clone() the tensor before "
            f"performing this operation. This also applies to advanced indexing e.g. {example}")


# In-place ops whose CPU kernels write through a view with internal overlap (an expanded
# tensor) instead of refusing it: fill_ and zero_ silently (every element gets the same
# value), these with a deprecation warning (TensorAdvancedIndexing.cpp's TORCH_WARNs).
OVERLAP_WRITES = {
    "aten::fill_": None,
    "aten::zero_": None,
    "aten::index_put_": _expanded_warning("index_put_", "tensor[indices] = tensor"),
    "aten::_index_put_impl_": _expanded_warning("index_put_", "tensor[indices] = tensor"),
    "aten::masked_fill_": _expanded_warning("masked_fill_", "tensor[mask] = scalar"),
    "aten::index_fill_": _expanded_warning("index_fill_", "tensor[mask] = scalar"),
}


def aliased_pairs(op, sch, args):
    """(written position, input position) of a pointwise in-place op's tensor arguments that
    share a buffer: TensorIterator's partial-overlap check applies to them (per call: the
    cache key knows which arguments share a buffer, not where their views lie)."""
    if torch.Tag.pointwise not in op.tags and torch.Tag.pointwise not in getattr(
            _functional_of(op), "tags", ()):
        return ()
    pairs = []
    for i in sch.mutated:
        t = args[i] if i < len(args) else None
        if not isinstance(t, Tensor) or t.device.type != "neuron":
            continue
        cell = storage.cell_of(t)
        for j, a in enumerate(args):
            if j != i and isinstance(a, Tensor) and a.device.type == "neuron" \
                    and storage.cell_of(a) is cell:
                pairs.append((i, j))
    return tuple(pairs)


def _functional_of(op):
    """aten::gt_.Tensor -> aten::gt.Tensor (in-place overloads lack the pointwise tag)."""
    pkt = op._schema.name.split("::")[1]
    if not pkt.endswith("_"):
        return None
    try:
        return getattr(getattr(torch.ops.aten, pkt[:-1]), op._overloadname)
    except AttributeError:
        return None


def check_partial_overlaps(pairs, args):
    for i, j in pairs:
        check_partial_overlap(args[i], args[j])


def overlap_status(a, b) -> str:
    """PyTorch's get_overlap_status for two tensors: full | partial | no | too_hard."""
    if a is b:
        return "full"
    if a.numel() == 0 or b.numel() == 0:
        return "no"
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return "no"  # (checked first here: the cheap test, and too_hard is as harmless)
    from torch._prims_common import is_non_overlapping_and_dense_or_false as dense

    if not dense(a) or not dense(b):
        return "too_hard"
    a0 = a.storage_offset() * a.element_size()
    b0 = b.storage_offset() * b.element_size()
    a1, b1 = a0 + a.numel() * a.element_size(), b0 + b.numel() * b.element_size()
    if a0 == b0 and a1 == b1:
        return "full" if a.stride() == b.stride() else "partial"
    return "partial" if a0 < b1 and b0 < a1 else "no"


def check_partial_overlap(written, read) -> None:
    """TensorIterator's assert_no_partial_overlap."""
    if overlap_status(written, read) == "partial":
        _raise_partial()


def check_no_overlap(written, read) -> None:
    """TensorIterator's assert_no_overlap (index_put_ and its kin: not even a full overlap)."""
    if isinstance(read, Tensor) and overlap_status(written, read) in ("full", "partial"):
        _raise_partial()


def _raise_partial():
    raise RuntimeError(
        "unsupported operation: some elements of the input tensor and the written-to tensor "
        "refer to a single memory location. Please clone() the tensor before performing the "
        "operation.")


def check_overlap(t, allowed=False) -> bool:
    """Whether the written-to tensor `t` has internal overlap; raises TensorIterator's
    error unless the op writes through overlap (`allowed`)."""
    if not isinstance(t, Tensor) or torch._debug_has_internal_overlap(t) != 1:
        return False
    if allowed:
        return True
    raise RuntimeError(
        "unsupported operation: more than one element of the written-to tensor refers to a "
        "single memory location. Please clone() the tensor before performing the operation."
    )


def check_cast(result_dtype, out_dtype) -> None:
    """TensorIterator's rule for in-place and out= results."""
    if not torch.can_cast(result_dtype, out_dtype):
        raise RuntimeError(f"result type {scalar_type_name(result_dtype)} can't be cast to the "
                           f"desired output type {scalar_type_name(out_dtype)}")


def check_inplace_shape(result, self_) -> None:
    """A pointwise in-place op cannot grow self to the broadcast shape (TensorIterator's
    check, which comes before the dtype checks; some Python meta references skip it)."""
    if isinstance(result, (tuple, list)):
        result = result[0] if result else None
    if isinstance(result, Tensor) and isinstance(self_, Tensor) and result.shape != self_.shape:
        raise RuntimeError(f"output with shape {list(self_.shape)} doesn't match the broadcast "
                           f"shape {list(result.shape)}")


def check_inplace_cast(result, self_) -> None:
    """An in-place op computed through its functional form must be able to cast the
    result back into self (some releases' meta kernels for the in-place overload do not
    check: torch 2.11's div_ accepts an int64 self)."""
    if isinstance(self_, (tuple, list)):  # a foreach op: every result into its self
        if isinstance(result, (tuple, list)):
            for r, t in zip(result, self_):
                check_inplace_cast(r, t)
        return
    if isinstance(result, (tuple, list)):
        result = result[0] if result else None
    if isinstance(result, Tensor) and isinstance(self_, Tensor):
        check_cast(result.dtype, self_.dtype)

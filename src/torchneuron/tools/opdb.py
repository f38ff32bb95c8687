"""PyTorch's OpInfo database as the conformance sweep sees it: ids, dtypes, families.

``torch.testing._internal`` parses ``sys.argv`` when it is imported (unittest
flags such as ``--seed``); :func:`load_op_db` imports it with a clean argv so
our own command-line options never reach that parser.
"""
from __future__ import annotations

import contextlib
import sys

import torch

# The dtypes the sweep covers, by the names used in reports and on the command line.
DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
    "complex64": torch.complex64,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

# What each status means (reports and the baseline use these codes).
STATUSES = {
    "PASS": "ran natively (lowering or traced decomposition) and matched the CPU",
    "MISMATCH": "ran, but the values (or shape/dtype) differ from the CPU beyond tolerance",
    "ERROR": "raised on the neuron device (or crashed the worker) while the CPU did not",
    "FALLBACK": "matched the CPU, but at least one aten op ran through the CPU fallback",
    "TIMEOUT": "did not finish within the per-unit time limit",
    "UNSUPPORTED_DTYPE": "the OpInfo does not list this dtype for the CPU: nothing to compare with",
    "SKIP": "the CPU itself rejects every sample, or the op has no samples for this dtype",
}
FAILED = ("MISMATCH", "ERROR", "TIMEOUT")


@contextlib.contextmanager
def _clean_argv():
    saved = sys.argv
    sys.argv = [saved[0] if saved else "torchneuron"]
    try:
        yield
    finally:
        sys.argv = saved


def load_op_db():
    """``common_methods_invocations.op_db`` (imports torchneuron first, so the device
    generic test machinery sees the PrivateUse1 backend)."""
    import torchneuron  # noqa: F401

    with _clean_argv():
        from torch.testing._internal.common_methods_invocations import op_db
    return op_db


def op_id(op) -> str:
    """``name`` or ``name.variant`` (e.g. ``div.trunc_rounding``), as in PyTorch's test names."""
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def cpu_dtypes(op) -> set:
    try:
        return set(op.supported_dtypes("cpu"))
    except Exception:
        return set()


def has_backward(op) -> bool:
    """Whether the sweep checks gradients for this op (float32 backward on the CPU)."""
    try:
        return bool(op.supports_autograd) and torch.float32 in op.supported_backward_dtypes("cpu")
    except Exception:
        return False


# ---------------------------------------------------------------------------
# op families, from the OpInfo class and name

FAMILIES = [
    "elementwise unary",
    "elementwise binary/n-ary",
    "reduction",
    "indexing",
    "linalg",
    "conv/pool",
    "norm",
    "random",
    "shape/view",
    "loss/activation",
    "other",
]

_RANDOM = {
    "bernoulli", "normal", "uniform", "cauchy", "exponential", "geometric", "log_normal",
    "multinomial", "rand_like", "randn_like", "randint_like", "randn", "randint",
    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "nn.functional.rrelu",
    "native_dropout_backward", "svd_lowrank", "pca_lowrank",
}
_ACTIVATION = {
    "relu", "relu6", "elu", "selu", "celu", "gelu", "silu", "mish", "prelu", "rrelu",
    "leaky_relu", "hardtanh", "hardswish", "hardsigmoid", "hardshrink", "softshrink",
    "tanhshrink", "threshold", "logsigmoid", "softsign", "softplus", "glu", "softmin",
    "softmax", "log_softmax", "sigmoid", "logit",
}
_LINALG = {
    "mm", "bmm", "matmul", "addmm", "addbmm", "baddbmm", "addmv", "addr", "mv", "dot", "vdot",
    "inner", "outer", "kron", "tensordot", "einsum", "cholesky", "cholesky_inverse",
    "cholesky_solve", "lu", "lu_solve", "lu_unpack", "qr", "svd", "pinverse", "inverse", "det",
    "logdet", "slogdet", "triangular_solve", "ormqr", "geqrf", "matrix_exp", "__rmatmul__",
    "cross", "trace", "cdist", "dist", "chain_matmul", "nn.functional.linear",
    "nn.functional.bilinear", "torch._scaled_mm", "torch._scaled_mm_v2", "sparse.sampled_addmm",
    "sparse.mm", "corrcoef", "cov", "nn.functional.scaled_dot_product_attention",
    "torch.ops.aten._flash_attention_forward", "torch.ops.aten._efficient_attention_forward",
    "nn.functional.multi_head_attention_forward", "nn.functional.pdist",
    "nn.functional.pairwise_distance", "nn.functional.cosine_similarity",
}
_CONV_POOL = (
    "conv", "pool", "nn.functional.unfold", "nn.functional.fold", "interpolate", "upsample",
    "grid_sample", "grid_sampler", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle",
)
_INDEXING = {
    "gather", "scatter", "scatter_add", "take", "take_along_dim", "put", "masked_fill",
    "masked_scatter", "masked_select", "nonzero", "nonzero_static", "argwhere", "__getitem__",
    "index_put", "index_add", "index_copy", "index_fill", "index_select", "index_reduce",
    "nn.functional.embedding", "nn.functional.embedding_bag", "nn.functional.one_hot",
    "searchsorted", "bucketize", "_unsafe_masked_index", "_unsafe_masked_index_put_accumulate",
    "scatter_reduce", "diagonal_scatter", "select_scatter", "slice_scatter", "as_strided_scatter",
    "unravel_index", "isin", "where", "tril_indices", "triu_indices",
}
_REDUCTION = {
    "sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "std", "var",
    "var_mean", "std_mean", "logsumexp", "norm", "cumsum", "cumprod", "cummax", "cummin",
    "logcumsumexp", "sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode",
    "quantile", "nanquantile", "all", "any", "count_nonzero", "histc", "histogram", "histogramdd",
    "bincount", "unique", "unique_consecutive", "aminmax", "nansum", "nanmean", "trapz",
    "trapezoid", "cumulative_trapezoid", "equal", "allclose", "hash_tensor", "renorm", "diff",
    "gradient", "_segment_reduce",
}
_SHAPE = {
    "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "T", "H", "mT", "mH",
    "expand", "expand_as", "squeeze", "unsqueeze", "flatten", "unflatten", "cat", "stack", "hstack",
    "vstack", "dstack", "column_stack", "split", "split_with_sizes", "unsafe_split", "chunk",
    "unsafe_chunk", "tensor_split", "hsplit", "vsplit", "dsplit", "unbind", "narrow", "select",
    "slice", "movedim", "flip", "fliplr", "flipud", "rot90", "roll", "repeat", "tile",
    "repeat_interleave", "tril", "triu", "diag", "diag_embed", "diagonal", "diagflat", "as_strided",
    "contiguous", "clone", "resize_", "resize_as_", "broadcast_to", "broadcast_tensors",
    "broadcast_shapes", "atleast_1d", "atleast_2d", "atleast_3d", "meshgrid", "block_diag",
    "cartesian_prod", "combinations", "ravel", "nn.functional.pad", "constant_pad_nd", "unfold",
    "view_as_real", "view_as_complex", "sum_to_size", "_chunk_cat", "alias", "linalg.diagonal",
    "fft.fftshift", "fft.ifftshift",
}
_CREATION_OR_OTHER = {"item", "to", "to_sparse", "zero_", "fill"}


def _base(name: str) -> str:
    for suffix in ("_copy",):
        if name.endswith(suffix) and name[: -len(suffix)] in _SHAPE:
            return name[: -len(suffix)]
    return name


def family(op) -> str:
    name = op.name
    short = name.rsplit(".", 1)[-1] if name.startswith("nn.functional.") else name
    cls = type(op).__name__
    base = _base(name)
    if name in _RANDOM:
        return "random"
    if name.startswith("masked."):
        short = name[len("masked."):]
        if short in _REDUCTION:
            return "reduction"
        if short in _ACTIVATION:
            return "loss/activation"
        return "other"
    if name.startswith("nn.functional.") and ("loss" in name or "entropy" in name or "kl_div" in name):
        return "loss/activation"
    if short in _ACTIVATION or name in ("_softmax_backward_data", "torch.ops.aten._safe_softmax.default"):
        return "loss/activation"
    if "norm" in name and not name.startswith("linalg.") and name not in ("norm", "renorm"):
        return "norm"
    if name in _LINALG or name.startswith("linalg."):
        return "linalg" if name != "linalg.diagonal" else "shape/view"
    if any(k in name for k in _CONV_POOL) and name != "unfold" and name != "unfold_copy":
        return "conv/pool"
    if base in _INDEXING or name in _INDEXING:
        return "indexing"
    if cls == "ReductionOpInfo" or base in _REDUCTION:
        return "reduction"
    if cls == "ShapeFuncInfo" or base in _SHAPE or name.startswith("nn.functional.pad"):
        return "shape/view"
    if cls == "UnaryUfuncInfo":
        return "elementwise unary"
    if cls == "BinaryUfuncInfo" or name in ("clamp", "lerp", "addcmul", "addcdiv", "logaddexp2",
                                            "polar", "complex"):
        return "elementwise binary/n-ary"
    return "other"

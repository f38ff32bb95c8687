"""torch.autocast("neuron"): CUDA's autocast op lists on the AutocastPrivateUse1 key.

Every op not listed falls through (runs in the dtypes it was given).  Listed
ops get a kernel on ``AutocastPrivateUse1`` that casts their floating-point
neuron tensor arguments and re-calls the op with the autocast key excluded,
exactly like ``aten/src/ATen/autocast_mode.cpp`` does for CUDA:

- lower precision (matmul, conv, linear, attention, ...): inputs to the
  autocast dtype (float16 or bfloat16);
- fp32 (exp, log, pow, norms, losses, ...): float16/bfloat16 inputs to float32;
- fp32 with optional dtype (softmax, sum, cumsum, ...): run with dtype=float32
  unless the caller gave a dtype;
- promote (addcmul, cat, stack, index_put, ...): inputs to the widest input type.
"""
from __future__ import annotations

import torch
from torch._C import DispatchKey, DispatchKeySet

_KEY = "AutocastPrivateUse1"
_EXCLUDE = DispatchKeySet(DispatchKey.AutocastPrivateUse1)

LOWER_PRECISION = [
    "_convolution.deprecated", "_convolution.default", "conv1d.default", "conv2d.default",
    "conv3d.default", "conv1d.padding", "conv2d.padding", "conv3d.padding", "conv_tbc.default",
    "conv_transpose1d.default", "conv_transpose2d.input", "conv_transpose3d.input",
    "convolution.default", "prelu.default", "addmm.default", "addmv.default", "addr.default",
    "matmul.default", "einsum.default", "mm.default", "mv.default", "linalg_vecdot.default",
    "linear.default", "addbmm.default", "baddbmm.default", "bmm.default", "chain_matmul.default",
    "linalg_multi_dot.default", "_thnn_fused_lstm_cell.default", "_thnn_fused_gru_cell.default",
    "lstm_cell.default", "gru_cell.default", "rnn_tanh_cell.default", "rnn_relu_cell.default",
    "scaled_dot_product_attention.default", "_scaled_dot_product_flash_attention.default",
]

FP32 = [
    "acos.default", "asin.default", "cosh.default", "erfinv.default", "exp.default",
    "expm1.default", "log.default", "log10.default", "log2.default", "log1p.default",
    "reciprocal.default", "rsqrt.default", "sinh.default", "tan.default",
    "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus.default",
    "layer_norm.default", "native_layer_norm.default", "group_norm.default",
    "frobenius_norm.dim", "nuclear_norm.default", "nuclear_norm.dim",
    "cosine_similarity.default", "poisson_nll_loss.default", "cosine_embedding_loss.default",
    "nll_loss.default", "nll_loss2d.default", "hinge_embedding_loss.default", "kl_div.default",
    "l1_loss.default", "smooth_l1_loss.default", "huber_loss.default", "mse_loss.default",
    "margin_ranking_loss.default", "multilabel_margin_loss.default", "soft_margin_loss.default",
    "triplet_margin_loss.default", "multi_margin_loss.default",
    "binary_cross_entropy_with_logits.default", "dist.default", "pdist.default",
    "cdist.default", "renorm.default", "logsumexp.default", "upsample_nearest1d.vec",
    "_upsample_nearest_exact1d.vec", "upsample_nearest2d.vec", "_upsample_nearest_exact2d.vec",
    "upsample_nearest3d.vec", "_upsample_nearest_exact3d.vec", "upsample_linear1d.vec",
    "upsample_bilinear2d.vec", "_upsample_bilinear2d_aa.vec", "upsample_trilinear3d.vec",
    "upsample_bicubic2d.vec", "_upsample_bicubic2d_aa.vec", "rms_norm.default",
]

FP32_SET_OPT_DTYPE = [
    "prod.default", "prod.dim_int", "prod.dim_Dimname", "softmax.int", "softmax.Dimname",
    "log_softmax.int", "log_softmax.Dimname", "cumprod.default", "cumprod.dimname",
    "cumsum.default", "cumsum.dimname", "linalg_vector_norm.default",
    "linalg_matrix_norm.default", "linalg_matrix_norm.str_ord", "sum.default",
    "sum.dim_IntList", "sum.dim_DimnameList",
]

PROMOTE = [
    "addcdiv.default", "addcmul.default", "atan2.default", "bilinear.default", "cross.default",
    "dot.default", "vdot.default", "grid_sampler.default", "index_put.default",
    "scatter_add.default", "tensordot.default", "cat.default", "stack.default",
]

_LOW = (torch.float16, torch.bfloat16)


def _is_neuron_float(t) -> bool:
    return (isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64
            and t.device.type == "neuron")


def _map(fn, v):
    if isinstance(v, torch.Tensor):
        return fn(v)
    if isinstance(v, (list, tuple)):
        return type(v)(_map(fn, x) for x in v)
    return v


def _call(op, args, kwargs):
    with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
        return op(*args, **kwargs)


def _lower_kernel(op):
    def kernel(*args, **kwargs):
        dt = torch.get_autocast_dtype("neuron")

        def cast(t):
            return t.to(dt) if _is_neuron_float(t) and t.dtype != dt else t

        return _call(op, _map(cast, args), {k: _map(cast, v) for k, v in kwargs.items()})

    return kernel


def _fp32_kernel(op):
    def kernel(*args, **kwargs):
        def cast(t):
            return t.float() if _is_neuron_float(t) and t.dtype in _LOW else t

        return _call(op, _map(cast, args), {k: _map(cast, v) for k, v in kwargs.items()})

    return kernel


def _fp32_opt_dtype_kernel(op):
    names = [a.name for a in op._schema.arguments]
    pos = names.index("dtype") if "dtype" in names else None
    kw_only = pos is not None and op._schema.arguments[pos].kwarg_only

    def kernel(*args, **kwargs):
        given = kwargs.get("dtype")
        if given is None and pos is not None and not kw_only and len(args) > pos:
            given = args[pos]
        if given is None and any(_is_neuron_float(a) and a.dtype in _LOW for a in args
                                 if isinstance(a, torch.Tensor)):
            if kw_only or pos is None or len(args) <= pos:
                kwargs = dict(kwargs, dtype=torch.float32)
            else:
                args = list(args)
                args[pos] = torch.float32
        return _call(op, args, kwargs)

    return kernel


def _promote_kernel(op):
    def kernel(*args, **kwargs):
        ts = []

        def collect(t):
            if _is_neuron_float(t):
                ts.append(t)
            return t

        _map(collect, args)
        _map(collect, list(kwargs.values()))
        if ts:
            widest = ts[0].dtype
            for t in ts[1:]:
                widest = torch.promote_types(widest, t.dtype)

            def cast(t):
                return t.to(widest) if _is_neuron_float(t) and t.dtype != widest else t

            args = _map(cast, args)
            kwargs = {k: _map(cast, v) for k, v in kwargs.items()}
        return _call(op, args, kwargs)

    return kernel


def declare() -> None:
    """Declare the autocast kernels (dispatch.install registers them)."""
    from . import dispatch
    from .lowering import resolve

    dispatch.fallthrough(_KEY)  # ops on no list run as they are
    for names, make in ((LOWER_PRECISION, _lower_kernel), (FP32, _fp32_kernel),
                        (FP32_SET_OPT_DTYPE, _fp32_opt_dtype_kernel), (PROMOTE, _promote_kernel)):
        for n in names:
            try:
                op = resolve(n)
            except AttributeError:
                continue
            dispatch.declare(op, make(op), key=_KEY)


declare()

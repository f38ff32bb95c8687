"""Foreach ops (``_foreach_*``), the fused optimizers and the AMP grad-scaler ops.

A foreach op over N tensors is ONE executable: the lowering applies the
per-tensor op's own lowering (found in the table, e.g. ``add.Tensor`` for
``_foreach_add.List``) to each tensor inside the same trace.  That is also
how PyTorch's CPU backend defines them (a loop of the per-tensor ops), so the
results match CPU's foreach path op for op, including type promotion.  The
in-place (``_foreach_add_``) variants come for free from the functional ones.

Fused optimizer steps (``_fused_adam_``, ``_fused_adamw_``, ``_fused_sgd_``,
``_fused_adagrad_``) follow PyTorch's CPU fused kernels: math in opmath
(float32 for half/bfloat16), ``grad_scale`` unscales the grads in place, and a
set ``found_inf`` skips the whole update.
"""
from __future__ import annotations

import jax.numpy as jnp
import torch

from .. import lowering
from ..numerics import convert, jdtype, opmath
from ..lowering import LOWERINGS, lower, meta_kernel, out_meta, resolve, trace_device

aten = torch.ops.aten


# ---------------------------------------------------------------- per-tensor delegation
def _metas():
    m = out_meta()
    if m is None:
        return None
    return list(m) if isinstance(m, (list, tuple)) else [m]


def _each(op_name, n, make_args, kwargs=None):
    """[op(*make_args(i), **kwargs) for i in range(n)], each traced with its own meta."""
    low = LOWERINGS.get(resolve(op_name))
    if low is None:
        raise NotImplementedError(f"torchneuron: foreach needs a lowering of aten::{op_name}")
    metas = _metas()
    dev = trace_device()
    out = []
    for i in range(n):
        with lowering.tracing(meta=None if metas is None else metas[i], key=None, device=dev):
            out.append(low.fn(*make_args(i), **(kwargs or {})))
    return out


def _unary(foreach_name, op_name):
    @lower(f"{foreach_name}.default")
    def fn(self):
        return _each(op_name, len(self), lambda i: (self[i],))

    return fn


for _n in ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
           "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal",
           "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc"]:
    _unary(f"_foreach_{_n}", f"{_n}.default")


@lower("_foreach_zero.default")
def foreach_zero(self):
    return [jnp.zeros_like(x) for x in self]


@lower("_foreach_clone.default")
def foreach_clone(self, *, memory_format=None):
    return list(self)


@lower("_foreach_copy.default")
def foreach_copy(self, src, non_blocking=False):
    return [jnp.broadcast_to(convert(s, x.dtype), x.shape) for x, s in zip(self, src)]


@lower("_foreach_max.default")
def foreach_max(self):
    return _each("max.default", len(self), lambda i: (self[i],))


@lower("_foreach_norm.Scalar", static=("ord",))
def foreach_norm(self, ord=2, dtype=None):
    return _each("linalg_vector_norm.default", len(self), lambda i: (self[i], ord, None, False),
                 {"dtype": dtype})


@lower("_foreach_powsum.Scalar", static=("ord",))
def foreach_powsum(self, ord=2, dtype=None):
    def one(x):
        if dtype is not None:
            x = x.astype(jdtype(dtype))
        a = jnp.abs(x)
        if ord == 0:
            return jnp.sum((a != 0).astype(a.dtype))
        return jnp.sum(a ** ord)

    return [one(x) for x in self]


@lower("_foreach_mm.default")
def foreach_mm(self, mat2):
    return _each("mm.default", len(self), lambda i: (self[i], mat2[i]))


# ---------------------------------------------------------------- binary
def _binary(name, op_tensor, op_scalar=None, alpha=False):
    """_foreach_<name>.{List, Scalar, ScalarList, Tensor} -> the per-tensor op."""
    op_scalar = op_scalar or op_tensor

    def _kw(a):
        return {"alpha": a} if alpha else {}

    @lower(f"_foreach_{name}.List")
    def lst(self, other, *, alpha=1):
        if len(self) != len(other):
            raise RuntimeError(f"Tensor lists must have the same number of tensors, got "
                               f"{len(self)} and {len(other)}")
        return _each(op_tensor, len(self), lambda i: (self[i], other[i]), _kw(alpha))

    @lower(f"_foreach_{name}.Scalar")
    def sca(self, scalar):
        return _each(op_scalar, len(self), lambda i: (self[i], scalar))

    @lower(f"_foreach_{name}.ScalarList")
    def scl(self, scalars):
        if len(self) != len(scalars):
            raise RuntimeError(f"Tensor list must have same number of elements as scalar list, "
                               f"got {len(self)} and {len(scalars)}")
        return _each(op_scalar, len(self), lambda i: (self[i], scalars[i]))

    @lower(f"_foreach_{name}.Tensor")
    def ten(self, other, *, alpha=1):
        return _each(op_tensor, len(self), lambda i: (self[i], other), _kw(alpha))


_binary("add", "add.Tensor", alpha=True)
_binary("sub", "sub.Tensor", alpha=True)
_binary("mul", "mul.Tensor")
_binary("div", "div.Tensor")
# PyTorch's CPU kernels: maximum/minimum with a scalar are clamp_min/clamp_max
_binary("clamp_min", "clamp_min.Tensor", "clamp_min.default")
_binary("clamp_max", "clamp_max.Tensor", "clamp_max.default")
_binary("maximum", "maximum.default", "clamp_min.default")
_binary("minimum", "minimum.default", "clamp_max.default")


@lower("_foreach_pow.List")
def foreach_pow_list(self, exponent):
    return _each("pow.Tensor_Tensor", len(self), lambda i: (self[i], exponent[i]))


@lower("_foreach_pow.Scalar", static=("exponent",))
def foreach_pow_scalar(self, exponent):
    return _each("pow.Tensor_Scalar", len(self), lambda i: (self[i], exponent))


@lower("_foreach_pow.ScalarList", static=("exponent",))
def foreach_pow_scalarlist(self, exponent):
    return _each("pow.Tensor_Scalar", len(self), lambda i: (self[i], exponent[i]))


@lower("_foreach_pow.ScalarAndTensor", static=("self",))
def foreach_pow_scalar_and_tensor(self, exponent):
    return _each("pow.Scalar", len(exponent), lambda i: (self, exponent[i]))


# ---------------------------------------------------------------- ternary
@lower("_foreach_lerp.List")
def foreach_lerp_list(self, tensors1, weights):
    return _each("lerp.Tensor", len(self), lambda i: (self[i], tensors1[i], weights[i]))


@lower("_foreach_lerp.Scalar")
def foreach_lerp_scalar(self, tensors1, weight):
    return _each("lerp.Scalar", len(self), lambda i: (self[i], tensors1[i], weight))


@lower("_foreach_lerp.ScalarList")
def foreach_lerp_scalarlist(self, tensors1, weight):
    return _each("lerp.Scalar", len(self), lambda i: (self[i], tensors1[i], weight[i]))


def _addc(name):
    op = f"{name}.default"

    @lower(f"_foreach_{name}.Scalar")
    def sca(self, tensor1, tensor2, value=1):
        return _each(op, len(self), lambda i: (self[i], tensor1[i], tensor2[i]), {"value": value})

    @lower(f"_foreach_{name}.ScalarList")
    def scl(self, tensor1, tensor2, scalars):
        if len(self) != len(scalars):
            raise RuntimeError(f"Tensor list must have same number of elements as scalar list, "
                               f"got {len(self)} and {len(scalars)}")
        out = []
        metas = _metas()
        low = LOWERINGS[resolve(op)]
        for i in range(len(self)):
            with lowering.tracing(meta=None if metas is None else metas[i], key=None,
                                  device=trace_device()):
                out.append(low.fn(self[i], tensor1[i], tensor2[i], value=scalars[i]))
        return out


_addc("addcmul")
_addc("addcdiv")


# ---------------------------------------------------------------- AMP grad scaler

@lower("_amp_foreach_non_finite_check_and_unscale_.default")
def amp_unscale(self, found_inf, inv_scale):
    if inv_scale.size != 1:
        raise RuntimeError("inv_scale must be a 1-element tensor.")
    if found_inf.size != 1:
        raise RuntimeError("found_inf must be a 1-element tensor.")
    if inv_scale.dtype != jnp.float32:
        raise RuntimeError("inv_scale must be a float tensor.")
    if found_inf.dtype != jnp.float32:
        raise RuntimeError("found_inf must be a float tensor.")
    inv = jnp.asarray(inv_scale).reshape(())
    bad = jnp.zeros((), jnp.bool_)
    out = []
    for g in self:
        cd = opmath(g.dtype)
        gv = g.astype(cd)
        bad = bad | ~jnp.all(jnp.isfinite(gv))
        scaled = jnp.where(inv == 1.0, gv, gv * inv.astype(cd))
        out.append(scaled.astype(g.dtype))
    fi = jnp.where(bad, jnp.ones_like(found_inf), found_inf)
    return [out, fi]


@lower("_amp_update_scale_.default")
def amp_update_scale(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor,
                     growth_interval):
    for name, t in (("growth_tracker", growth_tracker), ("current_scale", self),
                    ("found_inf", found_inf)):
        if t.size != 1:
            raise RuntimeError(f"{name} must be a 1-element tensor.")
    for name, t, want, word in (("growth_tracker", growth_tracker, jnp.int32, "an int"),
                                ("current_scale", self, jnp.float32, "a float"),
                                ("found_inf", found_inf, jnp.float32, "a float")):
        if t.dtype != want:
            raise RuntimeError(f"{name} must be {word} tensor.")
    scale = self.reshape(())
    tracker = growth_tracker.reshape(())
    inf = found_inf.reshape(()) != 0
    backoff = (scale.astype(jnp.float64) * scale_backoff_factor).astype(scale.dtype)
    successful = tracker + 1
    grow = successful == growth_interval
    grown = (scale.astype(jnp.float64) * scale_growth_factor).astype(jnp.float32)
    grown_scale = jnp.where(jnp.isfinite(grown), grown.astype(scale.dtype), scale)
    new_scale = jnp.where(inf, backoff, jnp.where(grow, grown_scale, scale))
    new_tracker = jnp.where(inf | grow, jnp.zeros_like(tracker), successful.astype(tracker.dtype))
    return [new_scale.reshape(self.shape), new_tracker.reshape(growth_tracker.shape)]


# ---------------------------------------------------------------- fused optimizers
def _unscale(grads, grad_scale, found_inf):
    """grads / grad_scale in opmath (the fused kernels write the unscaled grads back, unless
    found_inf is set: then nothing at all is written)."""
    if grad_scale is None:
        return [g.astype(opmath(g.dtype)) for g in grads], None
    gs = jnp.asarray(grad_scale).reshape(())
    vals = [g.astype(opmath(g.dtype)) / gs.astype(opmath(g.dtype)) for g in grads]
    return vals, [_skip(found_inf, v.astype(g.dtype), g) for v, g in zip(vals, grads)]


def _skip(found_inf, new, old):
    """Keep `old` when found_inf is set (the fused kernels return before updating)."""
    if found_inf is None:
        return new
    inf = jnp.asarray(found_inf).reshape(()) == 1.0
    return jnp.where(inf, old, new)


def _lr(lr, cd):
    return jnp.asarray(lr).reshape(()).astype(jnp.float64).astype(cd) if hasattr(lr, "shape") \
        else jnp.asarray(lr, cd)


def _step_operands(p, g, maximize):
    """An optimizer step's compute dtype, gradient (negated to maximize) and parameter."""
    cd = opmath(p.dtype)
    return cd, (-g if maximize else g), p.astype(cd)


def _adam(adamw, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1,
          beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf):
    gvals, new_grads = _unscale(grads, grad_scale, found_inf)
    new_p, new_m, new_v, new_mx = [], [], [], []
    for i, p in enumerate(self):
        cd, g, pv = _step_operands(p, gvals[i], maximize)
        lr_c = _lr(lr, cd)
        if weight_decay != 0:
            if adamw:
                pv = pv * (1 - lr_c * jnp.asarray(weight_decay, cd))
            else:
                g = g + pv * jnp.asarray(weight_decay, cd)
        step = jnp.asarray(state_steps[i]).reshape(()).astype(jnp.float32).astype(jnp.float64)
        bc1 = 1 - jnp.power(jnp.float64(beta1), step)
        bc2 = 1 - jnp.power(jnp.float64(beta2), step)
        step_size = (_lr(lr, jnp.float64) / bc1).astype(cd)
        bc2_sqrt = jnp.sqrt(bc2).astype(cd)
        m = exp_avgs[i].astype(cd)
        m = m + jnp.asarray(1 - beta1, cd) * (g - m)
        v = exp_avg_sqs[i].astype(cd) * jnp.asarray(beta2, cd)
        v = v + jnp.asarray(1 - beta2, cd) * g * g
        if amsgrad:
            mx = jnp.maximum(max_exp_avg_sqs[i].astype(cd), v)
            denom = jnp.sqrt(mx) / bc2_sqrt + jnp.asarray(eps, cd)
            new_mx.append(_skip(found_inf, mx.astype(max_exp_avg_sqs[i].dtype), max_exp_avg_sqs[i]))
        else:
            denom = jnp.sqrt(v) / bc2_sqrt + jnp.asarray(eps, cd)
        pn = pv - step_size * m / denom
        new_p.append(_skip(found_inf, pn.astype(p.dtype), p))
        new_m.append(_skip(found_inf, m.astype(exp_avgs[i].dtype), exp_avgs[i]))
        new_v.append(_skip(found_inf, v.astype(exp_avg_sqs[i].dtype), exp_avg_sqs[i]))
    return [new_p, new_grads, new_m, new_v, new_mx if amsgrad else None]


@lower("_fused_adam_.default", "_fused_adam_.tensor_lr")
def fused_adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1,
               beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    return _adam(False, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr,
                 beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)


@lower("_fused_adamw_.default", "_fused_adamw_.tensor_lr")
def fused_adamw(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1,
                beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    return _adam(True, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr,
                 beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)


@lower("_fused_sgd_.default", "_fused_sgd_.tensor_lr")
def fused_sgd(self, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
              nesterov, maximize, is_first_step, grad_scale=None, found_inf=None):
    gvals, new_grads = _unscale(grads, grad_scale, found_inf)
    new_p, new_buf = [], []
    for i, p in enumerate(self):
        cd, g, pv = _step_operands(p, gvals[i], maximize)
        if weight_decay != 0:
            g = g + jnp.asarray(weight_decay, cd) * pv
        if momentum != 0:
            b_old = momentum_buffer_list[i]
            if is_first_step:
                b = g
            else:
                b = jnp.asarray(momentum, cd) * b_old.astype(cd) + jnp.asarray(1 - dampening, cd) * g
            new_buf.append(_skip(found_inf, b.astype(b_old.dtype), b_old))
            g = g + jnp.asarray(momentum, cd) * b if nesterov else b
        pn = pv - _lr(lr, cd) * g
        new_p.append(_skip(found_inf, pn.astype(p.dtype), p))
    return [new_p, new_grads, new_buf if momentum != 0 else None]


@lower("_fused_adagrad_.default", "_fused_adagrad_.tensor_lr")
def fused_adagrad(self, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps,
                  maximize, grad_scale=None, found_inf=None):
    gvals, new_grads = _unscale(grads, grad_scale, found_inf)
    new_p, new_s = [], []
    for i, p in enumerate(self):
        cd, g, pv = _step_operands(p, gvals[i], maximize)
        if weight_decay != 0:
            g = g + pv * jnp.asarray(weight_decay, cd)
        step = jnp.asarray(state_steps[i]).reshape(()).astype(jnp.float64)
        clr = (_lr(lr, jnp.float64) / (1 + (step - 1) * lr_decay)).astype(cd)
        s = state_sums[i].astype(cd) + g * g
        std = jnp.sqrt(s) + jnp.asarray(eps, cd)
        pn = pv - clr * (g / std)
        new_p.append(_skip(found_inf, pn.astype(p.dtype), p))
        new_s.append(_skip(found_inf, s.astype(state_sums[i].dtype), state_sums[i]))
    # (state_steps, mutable in the default overload, is left unchanged)
    return [new_p, new_grads, new_s]


# ---------------------------------------------------------------- meta kernels
def _noop_meta(*args, **kwargs):
    return None


# fused in-place optimizer ops without a Meta kernel: a no-op one (they return nothing),
# so the executable builder (and FakeTensor tracing) can run them
for _name in ("_fused_sgd_.default", "_fused_sgd_.tensor_lr", "_fused_adagrad_.default",
              "_fused_adagrad_.tensor_lr", "_fused_adamw_.default", "_fused_adamw_.tensor_lr",
              "_fused_adam_.default", "_fused_adam_.tensor_lr"):
    try:
        resolve(_name)
    except AttributeError:
        continue
    meta_kernel(_name.removesuffix(".default"), _noop_meta)

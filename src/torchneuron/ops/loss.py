"""Loss functions and their backward ops.

``reduction`` follows aten: 0 = none, 1 = mean, 2 = sum.  Half-precision inputs
are computed (and reduced) in float32 and rounded once.  PyTorch's CPU kernels
raise on out-of-range class targets and on BCE inputs outside [0, 1]; those
checks need the values on the host, so here an out-of-range target gives a NaN
loss (and a zero gradient) instead.
"""
from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ..numerics import cast, not_implemented, scalar_type_name
from ..lowering import in_opmath, lower, meta_kernel, out_dtype

NONE, MEAN, SUM = 0, 1, 2


def _reduce(loss, reduction):
    if reduction == MEAN:
        return jnp.mean(loss) if loss.size else jnp.full((), jnp.nan, loss.dtype)
    if reduction == SUM:
        return jnp.sum(loss)
    return loss


def _norm(x, reduction):
    """The factor a mean reduction puts on each element's gradient."""
    if reduction == MEAN:
        return 1.0 / x.size if x.size else jnp.nan
    return 1.0


# ---------------------------------------------------------------- nll_loss
def _nll_pick(x, target, weight, ignore_index, cdim):
    """(picked log-prob, per-element weight, valid mask, in-range mask, safe target)."""
    c = x.shape[cdim]
    t = target.astype(jnp.int64)
    valid = t != ignore_index
    in_range = (t >= 0) & (t < c)
    ts = jnp.where(valid & in_range, t, 0)
    picked = jnp.take_along_axis(x, jnp.expand_dims(ts, cdim), axis=cdim)
    picked = jnp.squeeze(picked, cdim)
    if weight is not None:
        wt = jnp.take(weight, ts)
    else:
        wt = jnp.ones(ts.shape, x.dtype)
    wt = jnp.where(valid, wt, jnp.zeros_like(wt))
    return picked, wt, valid, in_range, ts


def _nll_forward(x, target, weight, reduction, ignore_index):
    dt = out_dtype(0)
    x, weight = in_opmath(x, weight, dt=dt)
    cdim = 0 if x.ndim == 1 else 1
    picked, wt, valid, in_range, _ = _nll_pick(x, target, weight, ignore_index, cdim)
    loss = -picked * wt
    # PyTorch raises for an out-of-range target; a NaN marks it here
    loss = jnp.where(valid & ~in_range, jnp.nan, loss)
    if reduction == NONE and x.ndim >= 2:
        return loss, jnp.zeros((), x.dtype)
    total = jnp.sum(wt)
    out = jnp.sum(loss)
    if reduction == MEAN:
        out = out / total
    return out, total


def _nll_backward(grad_output, x, target, weight, reduction, ignore_index, total_weight):
    dt = out_dtype()
    g, xx, weight, tw = in_opmath(grad_output, x, weight, total_weight, dt=dt)
    cdim = 0 if xx.ndim == 1 else 1
    _, wt, valid, in_range, ts = _nll_pick(xx, target, weight, ignore_index, cdim)
    if reduction == MEAN:
        g = g / tw
    val = jnp.where(valid & in_range, -wt * g, jnp.zeros_like(wt))
    cls = lax.broadcasted_iota(jnp.int64, xx.shape, cdim)
    hot = cls == jnp.expand_dims(ts, cdim)
    return jnp.where(hot, jnp.expand_dims(val, cdim), jnp.zeros_like(xx))


def _nll_check(self, target, weight, *rest):
    """The CPU's and CUDA's kernels read the weight as the input's scalar type (PyTorch's
    meta kernel does not check it)."""
    if weight is not None and weight.dtype != self.dtype:
        raise RuntimeError(f"expected scalar type {scalar_type_name(self.dtype)} but found "
                           f"{scalar_type_name(weight.dtype)}")


lower("nll_loss_forward.default", "nll_loss2d_forward.default", check=_nll_check)(_nll_forward)
lower("nll_loss_backward.default", "nll_loss2d_backward.default")(_nll_backward)


# ---------------------------------------------------------------- regression losses
@lower("mse_loss.default")
def mse_loss(x, target, reduction=MEAN):
    x, t = in_opmath(x, target)
    d = x - t
    return _reduce(d * d, reduction)


@lower("mse_loss_backward.default")
def mse_loss_backward(grad_output, x, target, reduction):
    g, xx, t = in_opmath(grad_output, x, target)
    return 2 * (xx - t) * g * _norm(xx, reduction)


@lower("smooth_l1_loss.default")
def smooth_l1_loss(x, target, reduction=MEAN, beta=1.0):
    x, t = in_opmath(x, target)
    z = jnp.abs(x - t)
    if beta == 0:
        return _reduce(z, reduction)
    loss = jnp.where(z < beta, 0.5 * z * z / beta, z - 0.5 * beta)
    return _reduce(loss, reduction)


@lower("smooth_l1_loss_backward.default")
def smooth_l1_loss_backward(grad_output, x, target, reduction, beta):
    g, xx, t = in_opmath(grad_output, x, target)
    d = xx - t
    n = _norm(d, reduction)
    inner = n * d * g / beta if beta != 0 else jnp.zeros_like(d)
    return jnp.where(d <= -beta, -n * g, jnp.where(d >= beta, n * g, inner))


@lower("huber_loss.default")
def huber_loss(x, target, reduction=MEAN, delta=1.0):
    x, t = in_opmath(x, target)
    z = jnp.abs(x - t)
    loss = jnp.where(z < delta, 0.5 * z * z, delta * (z - 0.5 * delta))
    return _reduce(loss, reduction)


@lower("huber_loss_backward.default")
def huber_loss_backward(grad_output, x, target, reduction, delta):
    g, xx, t = in_opmath(grad_output, x, target)
    d = xx - t
    n = _norm(d, reduction)
    return jnp.where(d <= -delta, -n * g * delta, jnp.where(d >= delta, n * g * delta, n * d * g))


# ---------------------------------------------------------------- classification losses
@lower("binary_cross_entropy.default")
def binary_cross_entropy(x, target, weight=None, reduction=MEAN):
    x, t, w = in_opmath(x, target, weight)
    # PyTorch's CPU kernel checks 0 <= x <= 1 on the host; out-of-range x gives NaN here
    loss = (t - 1) * jnp.maximum(jnp.log1p(-x), -100.0) - t * jnp.maximum(jnp.log(x), -100.0)
    if w is not None:
        loss = loss * w
    return _reduce(loss, reduction)


@lower("binary_cross_entropy_backward.default")
def binary_cross_entropy_backward(grad_output, x, target, weight=None, reduction=MEAN):
    g, xx, t, w = in_opmath(grad_output, x, target, weight)
    r = g * (xx - t) / jnp.maximum(xx * (1 - xx), 1e-12)
    if w is not None:
        r = r * w
    return r * _norm(xx, reduction)


def _log_sigmoid(x):
    return jnp.minimum(x, 0) - jnp.log1p(jnp.exp(-jnp.abs(x)))


@lower("binary_cross_entropy_with_logits.default")
def binary_cross_entropy_with_logits(x, target, weight=None, pos_weight=None, reduction=MEAN):
    x, t, w, pw = in_opmath(x, target, weight, pos_weight)
    ls = _log_sigmoid(x)
    if pw is not None:
        ls = ls * ((pw - 1) * t + 1)
    loss = (1 - t) * x - ls
    if w is not None:
        loss = loss * w
    return _reduce(loss, reduction)


@lower("soft_margin_loss.default")
def soft_margin_loss(x, target, reduction=MEAN):
    x, t = in_opmath(x, target)
    return _reduce(jnp.log1p(jnp.exp(-t * x)), reduction)


@lower("soft_margin_loss_backward.default")
def soft_margin_loss_backward(grad_output, x, target, reduction):
    g, xx, t = in_opmath(grad_output, x, target)
    z = jnp.exp(-t * xx)
    return -_norm(xx, reduction) * t * z / (1 + z) * g


def _multi_margin_meta(self, target, p=1, margin=1, weight=None, reduction=MEAN):
    """PyTorch's meta kernel gives a 1-D (or 0-D) input's unreduced loss the shape (1,);
    its CPU (and CUDA) kernels give ()."""
    import torch

    loss = torch.ops.aten.multi_margin_loss.default(self, target, p, margin, weight, reduction)
    return loss.new_empty(()) if reduction == NONE and self.dim() <= 1 else loss


@lower("multi_margin_loss.default", static=("p",), device_meta=_multi_margin_meta)
def multi_margin_loss(x, target, p=1, margin=1, weight=None, reduction=MEAN):
    x, w = in_opmath(x, weight)
    x2 = x.reshape(1, -1) if x.ndim <= 1 else x
    n, c = x2.shape
    t = target.reshape(-1).astype(jnp.int64)
    ts = jnp.clip(t, 0, c - 1)
    xy = jnp.take_along_axis(x2, ts[:, None], axis=1)
    z = jnp.maximum(cast(jnp.asarray(margin), x.dtype) - xy + x2, 0)
    if p == 2:
        z = z * z
    if w is not None:
        z = z * jnp.take(w, ts)[:, None]
    not_y = lax.broadcasted_iota(jnp.int64, x2.shape, 1) != ts[:, None]
    loss = jnp.sum(jnp.where(not_y, z, 0), axis=1) / c
    loss = jnp.where((t >= 0) & (t < c), loss, jnp.nan)
    if reduction == NONE:
        return loss.reshape(target.shape) if x.ndim > 1 else loss.reshape(())
    return _reduce(loss, reduction)


@lower("multi_margin_loss_backward.default", static=("p",))
def multi_margin_loss_backward(grad_output, x, target, p, margin, weight=None, reduction=MEAN):
    g, xx, w = in_opmath(grad_output, x, weight)
    x2 = xx.reshape(1, -1) if xx.ndim <= 1 else xx
    n, c = x2.shape
    t = target.reshape(-1).astype(jnp.int64)
    ts = jnp.clip(t, 0, c - 1)
    xy = jnp.take_along_axis(x2, ts[:, None], axis=1)
    z = cast(jnp.asarray(margin), xx.dtype) - xy + x2
    not_y = lax.broadcasted_iota(jnp.int64, x2.shape, 1) != ts[:, None]
    active = (z > 0) & not_y
    h = (2 * z if p == 2 else jnp.ones_like(z)) / c
    if w is not None:
        h = h * jnp.take(w, ts)[:, None]
    h = jnp.where(active, h, 0)
    gi = h - jnp.where(~not_y, jnp.sum(h, axis=1, keepdims=True), 0)
    if reduction == NONE:
        gs = g.reshape(-1, 1) if g.ndim else g
    else:
        gs = g / n if reduction == MEAN else g
    return (gi * gs).reshape(xx.shape)


def _multilabel_targets(target, c):
    t = target.astype(jnp.int64)
    # the targets of a row stop at its first -1
    live = jnp.cumprod((t >= 0).astype(jnp.int32), axis=-1).astype(bool)
    cls = lax.broadcasted_iota(jnp.int64, t.shape + (c,), t.ndim)
    hits = (t[..., None] == cls) & live[..., None]
    return jnp.any(hits, axis=-2), hits


def _multilabel_margin_forward_meta(self, target, reduction):
    """PyTorch's meta kernel gives a 1-D (or 0-D) input's unreduced loss the shape (1,);
    its CPU (and CUDA) kernels give ()."""
    import torch

    loss, is_target = torch.ops.aten.multilabel_margin_loss_forward.default(
        self, target, reduction)
    if reduction == NONE and self.dim() <= 1:
        loss = loss.new_empty(())
    return loss, is_target


@lower("multilabel_margin_loss_forward.default", device_meta=_multilabel_margin_forward_meta)
def multilabel_margin_loss_forward(x, target, reduction):
    dt = out_dtype(0)
    (xx,) = in_opmath(x, dt=dt)
    x2 = xx.reshape(1, -1) if xx.ndim <= 1 else xx
    t2 = target.reshape(x2.shape)
    c = x2.shape[1]
    is_t, hits = _multilabel_targets(t2, c)
    xj = jnp.sum(jnp.where(hits, x2[:, None, :], 0), axis=-1)  # x at each target slot
    any_hit = jnp.any(hits, axis=-1)  # live target slots
    # sum over target slots j and non-target classes i of max(0, 1 - (x_j - x_i))
    z = jnp.maximum(1 - (xj[:, :, None] - x2[:, None, :]), 0)
    z = jnp.where(any_hit[:, :, None] & ~is_t[:, None, :], z, 0)
    loss = jnp.sum(z, axis=(1, 2)) / c
    if reduction == NONE:
        loss = loss if xx.ndim > 1 else loss.reshape(())
    else:
        loss = _reduce(loss, reduction)
    return loss, is_t.reshape(target.shape)


@lower("multilabel_margin_loss_backward.default")
def multilabel_margin_loss_backward(grad_output, x, target, reduction, is_target):
    g, xx = in_opmath(grad_output, x)
    x2 = xx.reshape(1, -1) if xx.ndim <= 1 else xx
    n, c = x2.shape
    t2 = target.reshape(x2.shape)
    is_t, hits = _multilabel_targets(t2, c)
    xj = jnp.sum(jnp.where(hits, x2[:, None, :], 0), axis=-1)
    any_hit = jnp.any(hits, axis=-1)
    z = 1 - (xj[:, :, None] - x2[:, None, :])
    act = ((z > 0) & any_hit[:, :, None] & ~is_t[:, None, :]).astype(xx.dtype) / c
    gi = jnp.sum(act, axis=1)  # +1/c for each (j, i) on x_i
    gj = -jnp.sum(act, axis=2)  # -1/c on x_j, per target slot
    gi = gi + jnp.sum(jnp.where(hits, gj[:, :, None], 0), axis=1)
    if reduction == NONE:
        gs = g.reshape(-1, 1) if g.ndim else g
    else:
        gs = g / n if reduction == MEAN else g
    return (gi * gs).reshape(xx.shape)


# ---------------------------------------------------------------- meta kernels
# PyTorch has no meta kernel for these two backward ops; the dispatcher needs
# one to learn the result's dtype and shape (the gradient has self's).
def _grad_like_self_meta(name):
    def meta(grad_output, self, *args, **kwargs):
        return torch.empty_like(self, memory_format=torch.contiguous_format)

    meta_kernel(name, meta)


_grad_like_self_meta("multi_margin_loss_backward")
_grad_like_self_meta("multilabel_margin_loss_backward")


# ---------------------------------------------------------------- ctc_loss
# Graves et al.'s forward-backward algorithm in log space, as PyTorch's CPU kernel
# (LossCTC.cpp) computes it: alpha over time with lax.scan, every batch element and
# every position of the blank-extended target at once (padded to the longest target).
# Lengths are static (the int[] overloads); the Tensor-length overloads read them to the
# host first, as PyTorch's own kernels do (ops/loss_kernels).
def _ctc_layout(log_probs, targets, input_lengths, target_lengths, blank):
    T, N, C = log_probs.shape
    tl = jnp.asarray(target_lengths, jnp.int64).reshape(N)
    il = jnp.asarray(input_lengths, jnp.int64).reshape(N)
    L = max([int(v) for v in target_lengths], default=0)
    S = 2 * L + 1
    s = jnp.arange(S)
    if L == 0:
        ext = jnp.full((N, S), blank, jnp.int64)
    else:
        k = jnp.clip((s - 1) // 2, 0, L - 1)
        if targets.ndim == 1:  # concatenated targets
            offs = [0]
            for v in target_lengths[:-1]:
                offs.append(offs[-1] + int(v))
            pos = jnp.asarray(offs, jnp.int64)[:, None] + k[None, :]
            lab = jnp.take(targets.reshape(-1), jnp.clip(pos, 0, max(targets.shape[0] - 1, 0)))
        else:
            lab = targets[:, :L][:, k]
        ext = jnp.where((s % 2 == 0)[None, :], blank, lab.astype(jnp.int64))
    ext = jnp.clip(ext, 0, C - 1)
    valid = s[None, :] < (2 * tl + 1)[:, None]  # (N, S)
    # the s-2 transition: s > 1 and a different label two positions back
    skip = (s[None, :] > 1) & (ext != jnp.roll(ext, 2, axis=1))
    lp_ext = jnp.take_along_axis(log_probs, jnp.broadcast_to(ext[None], (T, N, S)), axis=2)
    return T, N, C, S, s, tl, il, ext, valid, skip, lp_ext


def _logadd3(a, b, c):
    m = jnp.maximum(jnp.maximum(a, b), c)
    m = jnp.where(m == -jnp.inf, jnp.zeros_like(m), m)
    return jnp.log(jnp.exp(a - m) + jnp.exp(b - m) + jnp.exp(c - m)) + m


def _shift(x, k, fill):
    """x[..., s - k] (k > 0) or x[..., s + |k|] (k < 0) along the last axis, `fill` outside."""
    pad = jnp.full(x.shape[:-1] + (abs(k),), fill, x.dtype)
    if k > 0:
        return jnp.concatenate([pad, x[..., :-k]], axis=-1)
    return jnp.concatenate([x[..., -k:], pad], axis=-1)


def _ctc_float_only(log_probs):
    if jnp.dtype(log_probs.dtype) not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise not_implemented("ctc_loss_cpu", log_probs.dtype)


@lower("_ctc_loss.default")
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    _ctc_float_only(log_probs)
    T, N, C, S, s, tl, il, ext, valid, skip, lp_ext = _ctc_layout(
        log_probs, targets, input_lengths, target_lengths, blank)
    dt = log_probs.dtype
    ninf = jnp.asarray(-jnp.inf, dt)
    alpha0 = jnp.where(valid & (s[None, :] < 2), lp_ext[0], ninf)

    def step(prev, lpt):
        la2 = _shift(prev, 1, -jnp.inf)
        la3 = jnp.where(skip, _shift(prev, 2, -jnp.inf), ninf)
        cur = jnp.where(valid, _logadd3(prev, la2, la3) + lpt, ninf)
        return cur, cur

    if T > 1:
        _, rest = lax.scan(step, alpha0, lp_ext[1:])
        alpha = jnp.concatenate([alpha0[None], rest], axis=0)  # (T, N, S)
    else:
        alpha = alpha0[None]
    t = jnp.arange(T)
    alpha = jnp.where((t[:, None, None] < il[None, :, None]), alpha, ninf)
    last = alpha[jnp.clip(il - 1, 0, T - 1), jnp.arange(N)]  # (N, S): alpha at t = il - 1
    l1 = jnp.take_along_axis(last, jnp.clip(2 * tl, 0, S - 1)[:, None], 1)[:, 0]
    l2 = jnp.take_along_axis(last, jnp.clip(2 * tl - 1, 0, S - 1)[:, None], 1)[:, 0]
    m = jnp.maximum(l1, l2)
    m = jnp.where(m == -jnp.inf, jnp.zeros_like(m), m)
    ll = jnp.where(tl == 0, last[:, 0], jnp.log(jnp.exp(l1 - m) + jnp.exp(l2 - m)) + m)
    empty = jnp.where(tl == 0, jnp.zeros((), dt), jnp.asarray(jnp.inf, dt))
    nll = jnp.where(il == 0, empty, -ll)
    return nll, jnp.transpose(alpha, (1, 0, 2))


@lower("_ctc_loss_backward.default")
def ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood,
                      log_alpha, blank, zero_infinity=False):
    T, N, C, S, s, tl, il, ext, valid, skip, lp_ext = _ctc_layout(
        log_probs, targets, input_lengths, target_lengths, blank)
    dt = log_probs.dtype
    ninf = jnp.asarray(-jnp.inf, dt)
    # beta's first row (t = il - 1): the final blank and the final label
    start = valid & ((s[None, :] == 2 * tl[:, None]) | (s[None, :] == 2 * tl[:, None] - 1))
    skip_b = (s[None, :] < 2 * tl[:, None] - 1) & (ext != jnp.roll(ext, -2, axis=1))
    more = s[None, :] < 2 * tl[:, None]

    def step(nxt, xs):
        t, lpt = xs
        lb2 = jnp.where(more, _shift(nxt, -1, -jnp.inf), ninf)
        lb3 = jnp.where(skip_b, _shift(nxt, -2, -jnp.inf), ninf)
        rec = jnp.where(valid, _logadd3(nxt, lb2, lb3) + lpt, ninf)
        first = jnp.where(start, lpt, ninf)
        tt = t[None, None]
        cur = jnp.where(tt == (il - 1)[:, None], first, jnp.where(tt < (il - 1)[:, None], rec, ninf))
        return cur, cur

    init = jnp.full((N, S), -jnp.inf, dt)
    _, beta = lax.scan(step, init, (jnp.arange(T), lp_ext), reverse=True)  # (T, N, S)
    alpha = jnp.transpose(log_alpha, (1, 0, 2))
    ab = jnp.where(valid[None], alpha + beta, ninf)
    # log-sum of alpha*beta over the positions of each label: eq. (16)
    onehot = ext[:, :, None] == jnp.arange(C)[None, None, :]  # (N, S, C)
    mx = jnp.max(jnp.where(onehot[None], ab[..., None], ninf), axis=2)  # (T, N, C), fused
    safe = jnp.where(mx == -jnp.inf, jnp.zeros_like(mx), mx)
    m_s = jnp.take_along_axis(safe, jnp.broadcast_to(ext[None], (T, N, S)), axis=2)
    total = jnp.einsum("tns,nsc->tnc", jnp.exp(ab - m_s), onehot.astype(dt),
                       precision=lax.Precision.HIGHEST)
    lcab = jnp.where(mx == -jnp.inf, ninf, jnp.log(total) + safe)
    nll = neg_log_likelihood.astype(dt)
    g = (jnp.exp(log_probs) - jnp.exp(lcab + nll[None, :, None] - log_probs)) \
        * grad.astype(dt)[None, :, None]
    t = jnp.arange(T)
    keep = t[:, None] < il[None, :]
    if zero_infinity:
        keep = keep & (nll != jnp.inf)[None, :]
    return jnp.where(keep[..., None], g, jnp.zeros((), dt))


def _ctc_backward_meta(grad, log_probs, *args, **kwargs):
    return torch.empty_like(log_probs, memory_format=torch.contiguous_format)


meta_kernel("_ctc_loss_backward", _ctc_backward_meta)

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

from ..lowering import cast, lower, meta_kernel, out_dtype

_HALF = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))
NONE, MEAN, SUM = 0, 1, 2


def _acc(dt):
    dt = jnp.dtype(dt)
    return jnp.dtype(jnp.float32) if dt in _HALF else dt


def _up(*xs, dt=None):
    dt = _acc(out_dtype() if dt is None else dt)
    return [None if x is None else cast(jnp.asarray(x), dt) for x in xs]


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
    x, weight = _up(x, weight, dt=dt)
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
    g, xx, weight, tw = _up(grad_output, x, weight, total_weight, dt=dt)
    cdim = 0 if xx.ndim == 1 else 1
    _, wt, valid, in_range, ts = _nll_pick(xx, target, weight, ignore_index, cdim)
    if reduction == MEAN:
        g = g / tw
    val = jnp.where(valid & in_range, -wt * g, jnp.zeros_like(wt))
    cls = lax.broadcasted_iota(jnp.int64, xx.shape, cdim)
    hot = cls == jnp.expand_dims(ts, cdim)
    return jnp.where(hot, jnp.expand_dims(val, cdim), jnp.zeros_like(xx))


lower("nll_loss_forward.default", "nll_loss2d_forward.default")(_nll_forward)
lower("nll_loss_backward.default", "nll_loss2d_backward.default")(_nll_backward)


# ---------------------------------------------------------------- regression losses
@lower("mse_loss.default")
def mse_loss(x, target, reduction=MEAN):
    x, t = _up(x, target)
    d = x - t
    return _reduce(d * d, reduction)


@lower("mse_loss_backward.default")
def mse_loss_backward(grad_output, x, target, reduction):
    g, xx, t = _up(grad_output, x, target)
    return 2 * (xx - t) * g * _norm(xx, reduction)


@lower("smooth_l1_loss.default")
def smooth_l1_loss(x, target, reduction=MEAN, beta=1.0):
    x, t = _up(x, target)
    z = jnp.abs(x - t)
    if beta == 0:
        return _reduce(z, reduction)
    loss = jnp.where(z < beta, 0.5 * z * z / beta, z - 0.5 * beta)
    return _reduce(loss, reduction)


@lower("smooth_l1_loss_backward.default")
def smooth_l1_loss_backward(grad_output, x, target, reduction, beta):
    g, xx, t = _up(grad_output, x, target)
    d = xx - t
    n = _norm(d, reduction)
    inner = n * d * g / beta if beta != 0 else jnp.zeros_like(d)
    return jnp.where(d <= -beta, -n * g, jnp.where(d >= beta, n * g, inner))


@lower("huber_loss.default")
def huber_loss(x, target, reduction=MEAN, delta=1.0):
    x, t = _up(x, target)
    z = jnp.abs(x - t)
    loss = jnp.where(z < delta, 0.5 * z * z, delta * (z - 0.5 * delta))
    return _reduce(loss, reduction)


@lower("huber_loss_backward.default")
def huber_loss_backward(grad_output, x, target, reduction, delta):
    g, xx, t = _up(grad_output, x, target)
    d = xx - t
    n = _norm(d, reduction)
    return jnp.where(d <= -delta, -n * g * delta, jnp.where(d >= delta, n * g * delta, n * d * g))


# ---------------------------------------------------------------- classification losses
@lower("binary_cross_entropy.default")
def binary_cross_entropy(x, target, weight=None, reduction=MEAN):
    x, t, w = _up(x, target, weight)
    # PyTorch's CPU kernel checks 0 <= x <= 1 on the host; out-of-range x gives NaN here
    loss = (t - 1) * jnp.maximum(jnp.log1p(-x), -100.0) - t * jnp.maximum(jnp.log(x), -100.0)
    if w is not None:
        loss = loss * w
    return _reduce(loss, reduction)


@lower("binary_cross_entropy_backward.default")
def binary_cross_entropy_backward(grad_output, x, target, weight=None, reduction=MEAN):
    g, xx, t, w = _up(grad_output, x, target, weight)
    r = g * (xx - t) / jnp.maximum(xx * (1 - xx), 1e-12)
    if w is not None:
        r = r * w
    return r * _norm(xx, reduction)


def _log_sigmoid(x):
    return jnp.minimum(x, 0) - jnp.log1p(jnp.exp(-jnp.abs(x)))


@lower("binary_cross_entropy_with_logits.default")
def binary_cross_entropy_with_logits(x, target, weight=None, pos_weight=None, reduction=MEAN):
    x, t, w, pw = _up(x, target, weight, pos_weight)
    ls = _log_sigmoid(x)
    if pw is not None:
        ls = ls * ((pw - 1) * t + 1)
    loss = (1 - t) * x - ls
    if w is not None:
        loss = loss * w
    return _reduce(loss, reduction)


@lower("soft_margin_loss.default")
def soft_margin_loss(x, target, reduction=MEAN):
    x, t = _up(x, target)
    return _reduce(jnp.log1p(jnp.exp(-t * x)), reduction)


@lower("soft_margin_loss_backward.default")
def soft_margin_loss_backward(grad_output, x, target, reduction):
    g, xx, t = _up(grad_output, x, target)
    z = jnp.exp(-t * xx)
    return -_norm(xx, reduction) * t * z / (1 + z) * g


@lower("multi_margin_loss.default", static=("p",))
def multi_margin_loss(x, target, p=1, margin=1, weight=None, reduction=MEAN):
    x, w = _up(x, weight)
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
    g, xx, w = _up(grad_output, x, weight)
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


@lower("multilabel_margin_loss_forward.default")
def multilabel_margin_loss_forward(x, target, reduction):
    dt = out_dtype(0)
    (xx,) = _up(x, dt=dt)
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
    g, xx = _up(grad_output, x)
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

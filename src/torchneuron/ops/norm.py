"""Normalization: batch norm (train/eval, running stats), layer norm, group norm,
weight norm, each with its backward.

Statistics are computed in float32 for float16/bfloat16 inputs (as PyTorch's
kernels do) and in the input type otherwise; variances are biased for the
normalization and unbiased for the running-variance update.

``native_batch_norm`` updates its running statistics in place although its
schema does not say so; it gets a small kernel that routes to the annotated
``_native_batch_norm_legit`` family (whose lowerings return the new running
statistics as mutated arguments) instead of a plain lowering.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import torch
from jax import lax

from ..numerics import cast, opmath
from ..lowering import lower, out_dtype, out_meta

aten = torch.ops.aten


def _like_meta(results):
    """None where PyTorch's meta kernel returns an undefined tensor, zeros where it
    returns a tensor the lowering had no value for."""
    m = out_meta()
    if not isinstance(m, (list, tuple)):
        return results
    out = []
    for i, r in enumerate(results):
        mi = m[i] if i < len(m) else None
        if mi is None:
            out.append(None)
        elif r is None:
            out.append(jnp.zeros(tuple(mi.shape), out_dtype(i)))
        else:
            out.append(r)
    return tuple(out)


def _chan_shape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


# ---------------------------------------------------------------- batch norm
def _bn_axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _bn_stats(x, eps):
    axes = _bn_axes(x)
    mean = jnp.mean(x, axis=axes)
    cs = _chan_shape(x)
    var = jnp.mean(jnp.square(x - mean.reshape(cs)), axis=axes)
    return mean, var, lax.rsqrt(var + jnp.asarray(eps, x.dtype))


def _bn_apply(x, mean, invstd, weight, bias, acc):
    cs = _chan_shape(x)
    y = (x - mean.reshape(cs)) * invstd.reshape(cs)
    if weight is not None:
        y = y * cast(weight, acc).reshape(cs)
    if bias is not None:
        y = y + cast(bias, acc).reshape(cs)
    return y


def _bn_train(input, weight, bias, running_mean, running_var, momentum, eps):
    acc = opmath(input.dtype)
    x = cast(input, acc)
    n = math.prod(x.shape) // max(x.shape[1], 1) if x.ndim > 1 else x.shape[0]
    mean, var, invstd = _bn_stats(x, eps)
    y = _bn_apply(x, mean, invstd, weight, bias, acc)
    new_rm = new_rv = None
    if running_mean is not None:
        m = jnp.asarray(momentum, acc)
        rm = cast(running_mean, acc)
        new_rm = cast((1 - m) * rm + m * mean, running_mean.dtype)
    if running_var is not None:
        m = jnp.asarray(momentum, acc)
        unbiased = var * (jnp.asarray(n, acc) / jnp.asarray(n - 1, acc))
        new_rv = cast((1 - m) * cast(running_var, acc) + m * unbiased, running_var.dtype)
    return (y, mean, invstd), new_rm, new_rv


def _bn_eval(input, weight, bias, running_mean, running_var, eps):
    acc = opmath(input.dtype)
    x = cast(input, acc)
    mean = cast(running_mean, acc)
    invstd = lax.rsqrt(cast(running_var, acc) + jnp.asarray(eps, acc))
    return _bn_apply(x, mean, invstd, weight, bias, acc)


def _empty_stats(i):
    m = out_meta()[i]
    return jnp.zeros(tuple(m.shape), out_dtype(i))


@lower("_native_batch_norm_legit.default")
def native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum,
                            eps):
    if training:
        outs, rm, rv = _bn_train(input, weight, bias, running_mean, running_var, momentum, eps)
        return outs, [rm, rv]
    y = _bn_eval(input, weight, bias, running_mean, running_var, eps)
    return (y, _empty_stats(1), _empty_stats(2)), [None, None]


@lower("_native_batch_norm_legit.no_stats")
def native_batch_norm_legit_no_stats(input, weight, bias, training, momentum, eps):
    outs, _, _ = _bn_train(input, weight, bias, None, None, momentum, eps)
    return outs


@lower("_native_batch_norm_legit_no_training.default")
def native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var,
                                        momentum, eps):
    y = _bn_eval(input, weight, bias, running_mean, running_var, eps)
    return y, _empty_stats(1), _empty_stats(2)


@lower("_native_batch_norm_legit_functional.default")
def native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var,
                                       training, momentum, eps):
    if training:
        (y, mean, invstd), rm, rv = _bn_train(input, weight, bias, running_mean, running_var,
                                              momentum, eps)
        return y, mean, invstd, rm, rv
    y = _bn_eval(input, weight, bias, running_mean, running_var, eps)
    return y, _empty_stats(1), _empty_stats(2), running_mean, running_var


@lower("_batch_norm_with_update.default")
def batch_norm_with_update(input, weight, bias, running_mean, running_var, momentum, eps):
    (y, mean, invstd), rm, rv = _bn_train(input, weight, bias, running_mean, running_var,
                                          momentum, eps)
    return (y, mean, invstd, _empty_stats(3)), [rm, rv]


@lower("_batch_norm_with_update_functional.default")
def batch_norm_with_update_functional(input, weight, bias, running_mean, running_var, momentum,
                                      eps):
    (y, mean, invstd), rm, rv = _bn_train(input, weight, bias, running_mean, running_var,
                                          momentum, eps)
    return y, mean, invstd, _empty_stats(3), rm, rv


@lower("_batch_norm_no_update.default")
def batch_norm_no_update(input, weight, bias, running_mean, running_var, momentum, eps):
    if running_mean is None or running_var is None:
        (y, mean, invstd), _, _ = _bn_train(input, weight, bias, None, None, momentum, eps)
        return y, mean, invstd, _empty_stats(3)
    y = _bn_eval(input, weight, bias, running_mean, running_var, eps)
    return y, _empty_stats(1), _empty_stats(2), _empty_stats(3)


def _bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
                 train, eps, output_mask):
    acc = opmath(input.dtype)
    x = cast(input, acc)
    g = cast(grad_out, acc)
    cs = _chan_shape(x)
    axes = _bn_axes(x)
    if train:
        mean, invstd = cast(save_mean, acc), cast(save_invstd, acc)
    else:
        mean = cast(running_mean, acc)
        invstd = lax.rsqrt(cast(running_var, acc) + jnp.asarray(eps, acc))
    w = cast(weight, acc) if weight is not None else jnp.ones(x.shape[1:2], acc)
    xhat = (x - mean.reshape(cs)) * invstd.reshape(cs)
    sum_dy = jnp.sum(g, axis=axes)
    sum_dy_xhat = jnp.sum(g * xhat, axis=axes)
    gi = None
    if output_mask[0]:
        scale = (w * invstd).reshape(cs)
        if train:
            n = math.prod(x.shape) // max(x.shape[1], 1)
            inv_n = jnp.asarray(1.0 / n if n else 0.0, acc)
            gi = scale * (g - (sum_dy * inv_n).reshape(cs) - xhat * (sum_dy_xhat * inv_n).reshape(cs))
        else:
            gi = g * scale
    gw = sum_dy_xhat if output_mask[1] else None
    gb = sum_dy if output_mask[2] else None
    return _like_meta((gi, gw, gb))


@lower("native_batch_norm_backward.default")
def native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean,
                               save_invstd, train, eps, output_mask):
    return _bn_backward(grad_out, input, weight, running_mean, running_var, save_mean,
                        save_invstd, train, eps, output_mask)


@lower("batch_norm_backward.default")
def batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var,
                        update, eps, output_mask, reserve):
    return _bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var,
                        update, eps, output_mask)




# ---------------------------------------------------------------- layer norm
@lower("native_layer_norm.default")
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    acc = opmath(input.dtype)
    x = cast(input, acc)
    k = len(normalized_shape)
    axes = tuple(range(x.ndim - k, x.ndim))
    if x.size == 0:
        stat_shape = x.shape[: x.ndim - k] + (1,) * k
        return (jnp.zeros(x.shape, acc), jnp.zeros(stat_shape, acc), jnp.zeros(stat_shape, acc))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    rstd = lax.rsqrt(var + jnp.asarray(eps, acc))
    y = (x - mean) * rstd
    if weight is not None:
        y = y * cast(weight, acc)
    if bias is not None:
        y = y + cast(bias, acc)
    return y, mean, rstd


@lower("native_layer_norm_backward.default")
def native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
                               output_mask):
    acc = opmath(input.dtype)
    x = cast(input, acc)
    g = cast(grad_out, acc)
    k = len(normalized_shape)
    axes = tuple(range(x.ndim - k, x.ndim))
    batch_axes = tuple(range(x.ndim - k))
    mean, rstd = cast(mean, acc), cast(rstd, acc)
    xhat = (x - mean) * rstd
    gi = gw = gb = None
    if output_mask[0]:
        gx = g * cast(weight, acc) if weight is not None else g
        if x.size == 0:
            gi = jnp.zeros(x.shape, acc)
        else:
            gi = rstd * (gx - jnp.mean(gx, axis=axes, keepdims=True)
                         - xhat * jnp.mean(gx * xhat, axis=axes, keepdims=True))
    if output_mask[1]:
        gw = jnp.sum(g * xhat, axis=batch_axes)
    if output_mask[2]:
        gb = jnp.sum(g, axis=batch_axes)
    return _like_meta((gi, gw, gb))


# ---------------------------------------------------------------- group norm
@lower("native_group_norm.default")
def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    acc = opmath(input.dtype)
    x = cast(input, acc)
    N, C, HxW = int(N), int(C), int(HxW)
    if x.size == 0:
        return jnp.zeros(x.shape, acc), jnp.zeros((N, group), acc), jnp.zeros((N, group), acc)
    xg = x.reshape(N, group, -1)
    mean = jnp.mean(xg, axis=2)
    var = jnp.mean(jnp.square(xg - mean[:, :, None]), axis=2)
    rstd = lax.rsqrt(var + jnp.asarray(eps, acc))
    y = ((xg - mean[:, :, None]) * rstd[:, :, None]).reshape(x.shape)
    cs = (1, C) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * cast(weight, acc).reshape(cs)
    if bias is not None:
        y = y + cast(bias, acc).reshape(cs)
    return y, mean, rstd


@lower("native_group_norm_backward.default")
def native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group,
                               output_mask):
    acc = opmath(input.dtype)
    N, C, HxW = int(N), int(C), int(HxW)
    x = cast(input, acc).reshape(N, C, HxW)
    g = cast(grad_out, acc).reshape(N, C, HxW)
    cpg = C // group
    mean = cast(mean, acc).reshape(N, group, 1, 1)
    rstd = cast(rstd, acc).reshape(N, group, 1, 1)
    xhat = ((x.reshape(N, group, cpg, HxW) - mean) * rstd)
    gi = gw = gb = None
    if output_mask[0]:
        gx = g * cast(weight, acc).reshape(1, C, 1) if weight is not None else g
        gx = gx.reshape(N, group, cpg, HxW)
        if x.size == 0:
            gi = jnp.zeros(input.shape, acc)
        else:
            red = (2, 3)
            gi = rstd * (gx - jnp.mean(gx, axis=red, keepdims=True)
                         - xhat * jnp.mean(gx * xhat, axis=red, keepdims=True))
            gi = gi.reshape(input.shape)
    if output_mask[1]:
        gw = jnp.sum(g * xhat.reshape(N, C, HxW), axis=(0, 2))
    if output_mask[2]:
        gb = jnp.sum(g, axis=(0, 2))
    return _like_meta((gi, gw, gb))


# ---------------------------------------------------------------- weight norm
def _norm_except(v, dim):
    axes = tuple(i for i in range(v.ndim) if i != dim) if dim != -1 else tuple(range(v.ndim))
    return jnp.sqrt(jnp.sum(jnp.square(v), axis=axes, keepdims=True))


@lower("_weight_norm_interface.default")
def weight_norm_interface(v, g, dim=0):
    acc = opmath(v.dtype)
    vv = cast(v, acc)
    norms = _norm_except(vv, dim)
    w = vv * (cast(g, acc) / norms)
    return w, norms.reshape(out_meta()[1].shape)


@lower("_weight_norm_interface_backward.default")
def weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    acc = opmath(saved_v.dtype)
    v = cast(saved_v, acc)
    gw = cast(grad_w, acc)
    keep = [1] * v.ndim
    if dim != -1:
        keep[dim] = v.shape[dim]
    norms = cast(saved_norms, acc).reshape(keep)
    g = cast(saved_g, acc).reshape(keep)
    axes = tuple(i for i in range(v.ndim) if i != dim) if dim != -1 else tuple(range(v.ndim))
    grad_g = jnp.sum(gw * v, axis=axes, keepdims=True) / norms
    grad_v = (g / norms) * (gw - v * (grad_g / norms))
    return grad_v, grad_g.reshape(out_meta()[1].shape)

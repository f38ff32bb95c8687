"""Activations and their backward ops, softmax / log_softmax and their backward.

Half-precision inputs (float16 / bfloat16) are computed in float32 and rounded
once at the end, as PyTorch's CPU and CUDA kernels do (their "opmath" type).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ..numerics import canon_dim, cast, is_float
from ..lowering import in_opmath, lower, out_dtype, out_meta, rng_key


def _s(v, dt):
    """A Scalar argument as a value of the compute type."""
    return cast(jnp.asarray(v), dt)


def _is_complex(dt):
    return jnp.issubdtype(dt, jnp.complexfloating)


# ---------------------------------------------------------------- relu family
@lower("relu.default")
def relu(x):
    if x.dtype == jnp.bool_:
        return x
    return jnp.where(x > 0, x, jnp.zeros_like(x)) if not is_float(x.dtype) else \
        jnp.where(jnp.isnan(x), x, jnp.maximum(x, jnp.zeros_like(x)))


@lower("threshold.default")
def threshold(x, threshold, value):
    dt = out_dtype()
    x = cast(x, dt)
    return jnp.where(x <= _s(threshold, dt), _s(value, dt), x)


@lower("threshold_backward.default")
def threshold_backward(grad_output, self, threshold):
    dt = out_dtype()
    g = cast(grad_output, dt)
    s = cast(self, dt)
    return jnp.where(s <= _s(threshold, dt), jnp.zeros_like(g), g)


@lower("hardtanh.default")
def hardtanh(x, min_val=-1, max_val=1):
    dt = out_dtype()
    x = cast(x, dt)
    lo, hi = _s(min_val, dt), _s(max_val, dt)
    if not is_float(dt):
        return jnp.minimum(jnp.maximum(x, lo), hi)
    # NaN propagates, like clamp
    return jnp.where(x < lo, lo, jnp.where(x > hi, hi, x))


@lower("hardtanh_backward.default")
def hardtanh_backward(grad_output, self, min_val, max_val):
    dt = out_dtype()
    g, s = cast(grad_output, dt), cast(self, dt)
    return jnp.where((s <= _s(min_val, dt)) | (s >= _s(max_val, dt)), jnp.zeros_like(g), g)


@lower("leaky_relu.default", compute=in_opmath)
def leaky_relu(x, negative_slope=0.01):
    return jnp.where(x > 0, x, x * _s(negative_slope, x.dtype))


@lower("leaky_relu_backward.default", static=("negative_slope",))
def leaky_relu_backward(grad_output, self, negative_slope, self_is_result):
    if self_is_result and negative_slope < 0:
        raise RuntimeError(
            "In-place leakyReLu backward calculation is triggered with a negative slope which is "
            "not supported. This is caused by calling in-place forward function with a negative "
            "slope, please call out-of-place version instead. File an issue at "
            "https://github.com/pytorch/pytorch if you do require supporting in-place leakRelu "
            "backward calculation with negative slope"
        )
    g, s = in_opmath(grad_output, self)
    return jnp.where(s > 0, g, g * _s(negative_slope, g.dtype))


@lower("rrelu_with_noise.default", random=True)
def rrelu_with_noise(x, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    (xu,) = in_opmath(x)
    lo, hi = _s(lower, xu.dtype), _s(upper, xu.dtype)
    if not training:
        return jnp.where(xu >= 0, xu, xu * ((lo + hi) / 2)), [None]
    # a slope drawn from U(lower, upper) for each negative element; noise records it
    r = jax.random.uniform(rng_key(), xu.shape, jnp.float32 if xu.dtype != jnp.float64
                           else jnp.float64).astype(xu.dtype)
    r = lo + (hi - lo) * r
    slope = jnp.where(xu <= 0, r, jnp.ones_like(r))
    return xu * slope, [slope]


@lower("rrelu_with_noise_backward.default")
def rrelu_with_noise_backward(grad_output, self, noise, lower, upper, training, self_is_result):
    g, s, n = in_opmath(grad_output, self, noise)
    lo, hi = _s(lower, g.dtype), _s(upper, g.dtype)
    leaky = jnp.where(s > 0, g, g * ((lo + hi) / 2))
    if training:
        # noise holds the slope drawn for each negative element (1 elsewhere)
        return jnp.where(hi - lo > 1e-6, g * n, leaky)
    return leaky


@lower("_prelu_kernel.default")
def prelu_kernel(x, weight):
    x, w = in_opmath(x, weight)
    return jnp.where(x > 0, x, w * x)


@lower("_prelu_kernel_backward.default")
def prelu_kernel_backward(grad_output, self, weight):
    dt = out_dtype(0)
    g, x, w = in_opmath(grad_output, self, weight, dt=dt)
    gx = jnp.where(x > 0, g, w * g)
    gw = jnp.where(x > 0, jnp.zeros_like(g), x * g)
    return gx, gw


# ---------------------------------------------------------------- smooth activations
_SQRT1_2 = 1.0 / math.sqrt(2.0)
_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5  # sqrt(2/pi)
_KAPPA = 0.044715


@lower("gelu.default", compute=in_opmath)
def gelu(x, *, approximate="none"):
    if approximate == "tanh":
        inner = _BETA * (x + _KAPPA * x * x * x)
        return 0.5 * x * (1 + jnp.tanh(inner))
    return x * 0.5 * (1 + jax.scipy.special.erf(x * _SQRT1_2))


@lower("gelu_backward.default")
def gelu_backward(grad_output, self, *, approximate="none"):
    g, x = in_opmath(grad_output, self)
    if approximate == "tanh":
        x_sq = x * x
        inner = _BETA * (x + _KAPPA * x_sq * x)
        t = jnp.tanh(inner)
        left = 0.5 * x
        right = 1 + t
        left_d = 0.5 * right
        right_d = left * (1 - t * t) * _BETA * (1 + 3 * _KAPPA * x_sq)
        return g * (left_d + right_d)
    cdf = 0.5 * (1 + jax.scipy.special.erf(x * _SQRT1_2))
    pdf = jnp.exp(-0.5 * x * x) * (1.0 / math.sqrt(2 * math.pi))
    return g * (cdf + x * pdf)


def _sigmoid(x):
    if _is_complex(x.dtype):
        return 1 / (1 + jnp.exp(-x))
    return jax.nn.sigmoid(x)


@lower("silu.default", compute=in_opmath)
def silu(x):
    return x * _sigmoid(x)


# silu_backward / mish_backward: CPU and CUDA have kernels next to the composite one
@lower("silu_backward.default")
def silu_backward(grad_output, self):
    g, x = in_opmath(grad_output, self)
    s = _sigmoid(x)
    return g * s * (1 + x * (1 - s))


@lower("mish.default", compute=in_opmath)
def mish(x):
    return x * jnp.tanh(jnp.logaddexp(x, jnp.zeros_like(x)))


@lower("mish_backward.default")
def mish_backward(grad_output, self):
    g, x = in_opmath(grad_output, self)
    s = jax.nn.sigmoid(x)
    t = jnp.tanh(jnp.logaddexp(x, jnp.zeros_like(x)))
    return g * (t + x * s * (1 - t * t))


@lower("tanh_backward.default")
def tanh_backward(grad_output, output):
    g, y = in_opmath(grad_output, output)
    d = 1 - y * y
    return g * (jnp.conj(d) if _is_complex(d.dtype) else d)


@lower("sigmoid_backward.default")
def sigmoid_backward(grad_output, output):
    g, y = in_opmath(grad_output, output)
    d = (1 - y) * y
    return g * (jnp.conj(d) if _is_complex(d.dtype) else d)


@lower("logit_backward.default", static=("eps",))
def logit_backward(grad_output, self, eps=None):
    g, x = in_opmath(grad_output, self)
    if eps is None:
        return jnp.where((x < 0) | (x > 1), jnp.nan, g / (x * (1 - x)))
    lo, hi = eps, 1 - eps
    return jnp.where((x < lo) | (x > hi), jnp.zeros_like(g), g / (x * (1 - x)))


@lower("softplus.default", compute=in_opmath)
def softplus(x, beta=1, threshold=20):
    b = _s(beta, x.dtype)
    xb = x * b
    return jnp.where(xb > _s(threshold, x.dtype), x, jnp.log1p(jnp.exp(xb)) / b)


@lower("softplus_backward.default")
def softplus_backward(grad_output, self, beta, threshold):
    g, x = in_opmath(grad_output, self)
    xb = x * _s(beta, x.dtype)
    z = jnp.exp(xb)
    return jnp.where(xb > _s(threshold, x.dtype), g, g * z / (z + 1))


@lower("elu.default", compute=in_opmath)
def elu(x, alpha=1, scale=1, input_scale=1):
    dt = x.dtype
    neg = _s(alpha, dt) * _s(scale, dt)
    return jnp.where(x > 0, x * _s(scale, dt), jnp.expm1(x * _s(input_scale, dt)) * neg)


@lower("elu_backward.default")
def elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result):
    g, v = in_opmath(grad_output, self_or_result)
    dt = g.dtype
    negcoef = _s(alpha, dt) * _s(scale, dt)
    poscoef = _s(scale, dt)
    negiptcoef = _s(input_scale, dt)
    if is_result:
        return jnp.where(v <= 0, g * negiptcoef * (v + negcoef), g * poscoef)
    return jnp.where(v <= 0, g * negiptcoef * negcoef * jnp.exp(v * negiptcoef), g * poscoef)


@lower("celu.default", compute=in_opmath)
def celu(x, alpha=1.0):
    a = _s(alpha, x.dtype)
    return jnp.where(x > 0, x, jnp.expm1(x / a) * a)


@lower("hardswish.default", compute=in_opmath)
def hardswish(x):
    return x * jnp.minimum(jnp.maximum(x + 3, 0), 6) / 6


@lower("hardswish_backward.default")
def hardswish_backward(grad_output, self):
    g, x = in_opmath(grad_output, self)
    return jnp.where(x < -3, jnp.zeros_like(g), jnp.where(x <= 3, g * (x / 3 + 0.5), g))


@lower("hardsigmoid.default", compute=in_opmath)
def hardsigmoid(x):
    return jnp.minimum(jnp.maximum(x + 3, 0), 6) / 6


@lower("hardsigmoid_backward.default")
def hardsigmoid_backward(grad_output, self):
    g, x = in_opmath(grad_output, self)
    # PyTorch's CPU kernel multiplies by float(1/6), also for float64
    sixth = jnp.asarray(jnp.float32(1.0 / 6.0), g.dtype)
    return jnp.where((x > -3) & (x < 3), g * sixth, jnp.zeros_like(g))


@lower("softshrink.default", compute=in_opmath)
def softshrink(x, lambd=0.5):
    l = _s(lambd, x.dtype)
    return jnp.where(x > l, x - l, jnp.where(x < -l, x + l, x * 0))


@lower("softshrink_backward.default")
def softshrink_backward(grad_output, self, lambd):
    g, x = in_opmath(grad_output, self)
    l = _s(lambd, x.dtype)
    return jnp.where((x >= -l) & (x <= l), jnp.zeros_like(g), g)


@lower("hardshrink.default", compute=in_opmath)
def hardshrink(x, lambd=0.5):
    l = _s(lambd, x.dtype)
    return jnp.where((x >= -l) & (x <= l), jnp.zeros_like(x), x)


@lower("hardshrink_backward.default")
def hardshrink_backward(grad_out, self, lambd):
    g, x = in_opmath(grad_out, self)
    l = _s(lambd, x.dtype)
    return jnp.where((x >= -l) & (x <= l), jnp.zeros_like(g), g)


# ---------------------------------------------------------------- log_sigmoid
@lower("log_sigmoid_forward.default")
def log_sigmoid_forward(x):
    (x,) = in_opmath(x, dt=out_dtype(0))
    z = jnp.exp(-jnp.abs(x))
    out = jnp.minimum(x, 0) - jnp.log1p(z)
    meta = out_meta()
    buf_shape = tuple(meta[1].shape) if meta is not None else x.shape
    buf = z if buf_shape == tuple(x.shape) else jnp.zeros(buf_shape, z.dtype)
    return out, buf


@lower("log_sigmoid_backward.default")
def log_sigmoid_backward(grad_output, self, buffer):
    # recomputed from self: the buffer is an implementation detail (empty on CUDA)
    g, x = in_opmath(grad_output, self)
    neg = x < 0
    z = jnp.exp(-jnp.abs(x))
    max_deriv = jnp.where(neg, 1, 0).astype(x.dtype)
    sign = jnp.where(neg, 1, -1).astype(x.dtype)
    return (max_deriv - sign * (z / (1 + z))) * g


# ---------------------------------------------------------------- glu
@lower("glu.default", compute=in_opmath)
def glu(x, dim=-1):
    d = canon_dim(dim, x.ndim)
    a, b = jnp.split(x, 2, axis=d)
    return a * jax.nn.sigmoid(b)


@lower("glu_backward.default")
def glu_backward(grad_output, self, dim):
    g, x = in_opmath(grad_output, self)
    d = canon_dim(dim, x.ndim)
    a, b = jnp.split(x, 2, axis=d)
    s = jax.nn.sigmoid(b)
    ga = g * s
    gb = g * a * s * (1 - s)
    return jnp.concatenate([ga, gb], axis=d)


# ---------------------------------------------------------------- softmax
def _softmax_impl(x, dim, log):
    if x.ndim == 0:  # one row of one element, as CPU: +-inf and NaN give NaN
        return _softmax_impl(x.reshape(1), 0, log).reshape(())
    d = canon_dim(dim, x.ndim)
    if x.shape[d] == 0:
        return x
    # like PyTorch: a row of -inf (or holding +inf) gives NaN
    m = jnp.max(x, axis=d, keepdims=True)
    shifted = x - m
    if log:
        return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=d, keepdims=True))
    e = jnp.exp(shifted)
    return e / jnp.sum(e, axis=d, keepdims=True)


@lower("_softmax.default", compute=in_opmath)
def softmax(x, dim, half_to_float):
    return _softmax_impl(x, dim, log=False)


@lower("_log_softmax.default", compute=in_opmath)
def log_softmax(x, dim, half_to_float):
    return _softmax_impl(x, dim, log=True)


def _red_dim(x, dim):
    return 0 if x.ndim == 0 else canon_dim(dim, x.ndim)


@lower("_softmax_backward_data.default")
def softmax_backward_data(grad_output, output, dim, input_dtype):
    g, y = in_opmath(grad_output, output, dt=jnp.result_type(grad_output, output))
    d = _red_dim(y, dim)  # a 0-d tensor reduces over itself (sum over no axis is itself)
    if y.ndim == 0:
        return y * (g - g * y)
    return y * (g - jnp.sum(g * y, axis=d, keepdims=True))


@lower("_log_softmax_backward_data.default")
def log_softmax_backward_data(grad_output, output, dim, input_dtype):
    g, y = in_opmath(grad_output, output, dt=jnp.result_type(grad_output, output))
    d = _red_dim(y, dim)
    if y.ndim == 0:
        return g - jnp.exp(y) * g
    return g - jnp.exp(y) * jnp.sum(g, axis=d, keepdims=True)

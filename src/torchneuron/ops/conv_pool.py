"""Convolution (1-3d, transposed, grouped) and pooling (max, avg, adaptive), with backward.

Convolutions are one ``lax.conv_general_dilated`` each (HIGHEST precision for
float32, float32 accumulation for float16/bfloat16).  A transposed convolution
is computed as the linear transpose of the matching forward convolution (that
is PyTorch's definition of it), and convolution_backward as the vjp of the
forward, so every stride/padding/dilation/groups/output_padding combination is
exact by construction and XLA picks the gradient convolutions.

Max pooling is one variadic ``lax.reduce_window`` over (value, flat index)
pairs whose combiner reproduces PyTorch's choice of index (first maximum in
scan order; NaN wins, the last NaN of a window); its backward scatters the
gradient back through the indices.  Average pooling is a windowed sum divided
by PyTorch's divisor (count_include_pad, ceil_mode, divisor_override), with the
vjp as backward.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..numerics import HALF, cast, opmath, round_to, scalar_type_name
from ..lowering import follow_input_format, index_checks, lower, meta_kernel, out_dtype, out_meta

aten = torch.ops.aten

HIGHEST = lax.Precision.HIGHEST


def _prec(dt):
    return HIGHEST if jnp.issubdtype(dt, jnp.inexact) else None


def _dn(nd):
    sp = "DHW"[3 - nd:] if nd <= 3 else None
    if sp is None:
        raise NotImplementedError(f"torchneuron: {nd}-d convolution")
    return ("NC" + sp, "OI" + sp, "NC" + sp)


def _tup(v, n):
    v = list(v)
    if len(v) == 1 and n > 1:
        v = v * n
    return tuple(int(x) for x in v)


# ---------------------------------------------------------------- convolution
def _conv_fwd(x, w, stride, padding, dilation, groups, pref=None):
    nd = x.ndim - 2
    return lax.conv_general_dilated(
        x, w, window_strides=stride, padding=[(p, p) for p in padding],
        rhs_dilation=dilation, dimension_numbers=_dn(nd), feature_group_count=groups,
        precision=_prec(x.dtype), preferred_element_type=pref)


def _conv_t(x, w, stride, padding, dilation, groups, out_shape):
    """Transposed convolution: the transpose of the forward conv from out_shape."""
    # with output_padding >= stride (allowed when < dilation) the forward conv of
    # out_shape is longer than x: the extra positions are not part of x's transpose
    crop = (slice(None), slice(None)) + tuple(slice(0, n) for n in x.shape[2:])

    if not jnp.issubdtype(x.dtype, jnp.inexact):
        # jax transposes nothing for integers (they are not differentiable): compute in
        # float64, exact while the partial sums stay below 2**53, and round back
        r = _conv_t(x.astype(jnp.float64), w.astype(jnp.float64), stride, padding, dilation,
                    groups, out_shape)
        return jnp.round(r).astype(x.dtype)

    def fwd(z):
        return _conv_fwd(z, w, stride, padding, dilation, groups)[crop]

    (r,) = jax.linear_transpose(fwd, jax.ShapeDtypeStruct(out_shape, x.dtype))(x)
    return r


def _conv_any(x, w, stride, padding, dilation, transposed, groups, out_shape, pref=None):
    if transposed:
        return _conv_t(x, w, stride, padding, dilation, groups, out_shape)
    return _conv_fwd(x, w, stride, padding, dilation, groups, pref)


def _conv_args(x, stride, padding, dilation, output_padding):
    nd = x.ndim - 2
    return (_tup(stride, nd), _tup(padding, nd), _tup(dilation, nd), _tup(output_padding, nd))


def _conv_check(input, weight, bias, *rest):
    """at::native::_convolution's check_input_same_type_as_parameters (the meta kernel
    promotes instead)."""
    if input.dtype != weight.dtype:
        raise RuntimeError(f"Input type ({input.type()}) and weight type ({weight.type()}) "
                           "should be the same")
    if bias is not None and bias.dtype != input.dtype:
        raise RuntimeError(f"Input type ({str(input.dtype).replace('torch.', '')}) and bias "
                           f"type ({str(bias.dtype).replace('torch.', '')}) should be the same")


def _conv_meta(input, weight, *rest):
    """The output of a convolution is channels-last when its input or its weight is (as
    cuDNN's and the CPU's oneDNN kernels return, and PyTorch's test_memory_format expects;
    PyTorch's meta kernel says contiguous); an unbatched convolution's output follows its
    input."""
    if len(rest) < 7:
        raise TypeError("convolution: unexpected arguments")
    out = aten.convolution.default(input, weight, *rest[:7])
    if input.dim() in (4, 5) and weight.dim() == input.dim():
        for t in (input, weight):
            r = follow_input_format(out, t)
            if r is not out:
                return r
    if input.dim() == weight.dim() - 1:  # unbatched
        return follow_input_format(out, input, contiguous=True)
    return out


@lower("convolution.default", "convolution_overrideable.default", "_convolution.default",
       check=_conv_check, device_meta=_conv_meta)
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                groups, *rest):
    dt = out_dtype()
    out_shape = tuple(out_meta().shape) if not isinstance(out_meta(), (list, tuple)) else None
    unbatched = input.ndim == weight.ndim - 1
    x = input[None] if unbatched else input
    x, w = cast(x, dt), cast(weight, dt)
    stride, padding, dilation, output_padding = _conv_args(x, stride, padding, dilation,
                                                           output_padding)
    acc = opmath(dt)
    if x.shape[0] == 0 or (transposed and 0 in x.shape[1:2]):
        shape = out_shape if not unbatched else (1,) + out_shape
        r = jnp.zeros(shape, acc)
    elif transposed:
        in_shape = (x.shape[0],) + tuple(out_shape[-(x.ndim - 1):])
        r = cast(_conv_t(x, w, stride, padding, dilation, groups, in_shape), acc)
    else:
        r = _conv_fwd(x, w, stride, padding, dilation, groups, pref=acc)
    if bias is not None:
        r = r + cast(bias, acc).reshape((1, -1) + (1,) * (r.ndim - 2))
    if unbatched:
        r = r[0]
    return cast(r, dt)


@lower("convolution_backward.default", "convolution_backward_overrideable.default")
def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                         transposed, output_padding, groups, output_mask):
    dt = jnp.dtype(input.dtype)
    x, w, g = input, cast(weight, dt), cast(grad_output, dt)
    stride, padding, dilation, output_padding = _conv_args(x, stride, padding, dilation,
                                                           output_padding)
    gi = gw = gb = None
    if output_mask[0] or output_mask[1]:
        if x.shape[0] == 0 or 0 in g.shape:
            gi, gw = jnp.zeros(x.shape, dt), jnp.zeros(w.shape, dt)
        else:
            def f(x_, w_):
                return _conv_any(x_, w_, stride, padding, dilation, transposed, groups,
                                 tuple(g.shape))

            _, vjp = jax.vjp(f, x, w)
            gi, gw = vjp(g)
    if output_mask[2]:
        axes = (0,) + tuple(range(2, g.ndim))
        gb = jnp.sum(cast(g, opmath(dt)), axis=axes)
    return (gi if output_mask[0] else None, gw if output_mask[1] else None, gb)


# ---------------------------------------------------------------- pooling helpers
def _lowest(dt):
    if jnp.issubdtype(dt, jnp.floating):
        return jnp.array(-jnp.inf, dt)
    if dt == jnp.bool_:
        return jnp.array(False)
    return jnp.array(jnp.iinfo(dt).min, dt)


_NO_INDEX = 2 ** 62


def _argmax_combine(a, b):
    """(value, index) pairs: PyTorch's max-pool choice as a commutative, associative op.

    Larger value wins; on equal values the smaller (earlier) index; NaN beats
    everything, and between NaNs the larger (later) index, as PyTorch's
    ``if (val > maxval || isnan(val))`` scan does.
    """
    av, ai = a
    bv, bi = b
    if jnp.issubdtype(av.dtype, jnp.floating):
        an, bn = jnp.isnan(av), jnp.isnan(bv)
        plain = (bv > av) | ((bv == av) & (bi < ai))
        take_b = jnp.where(an & bn, bi > ai, jnp.where(an, False, jnp.where(bn, True, plain)))
    else:
        take_b = (bv > av) | ((bv == av) & (bi < ai))
    return jnp.where(take_b, bv, av), jnp.where(take_b, bi, ai)


def _flat_index(spatial, batch_shape):
    """int64 array of batch_shape + spatial holding each position's flat spatial index."""
    nd = len(spatial)
    full = tuple(batch_shape) + tuple(spatial)
    idx = jnp.zeros(full, jnp.int64)
    mul = 1
    for i in range(nd - 1, -1, -1):
        ax = len(batch_shape) + i
        idx = idx + lax.broadcasted_iota(jnp.int64, full, ax) * mul
        mul *= spatial[i]
    return idx


def _pool_geometry(in_sp, out_sp, kernel, stride, padding, dilation):
    """reduce_window padding that makes exactly out_sp windows (ceil_mode included)."""
    pads = []
    for i, k, s, p, d, o in zip(in_sp, kernel, stride, padding, dilation, out_sp):
        need = (o - 1) * s + (k - 1) * d + 1 if o > 0 else 0
        hi = max(need - i - p, 0)
        pads.append((p, hi))
    return pads


def _pool_params(nd, kernel, stride, padding, dilation=None):
    kernel = _tup(kernel, nd)
    stride = _tup(stride, nd) if len(stride) else kernel
    padding = _tup(padding, nd)
    dilation = _tup(dilation, nd) if dilation is not None else (1,) * nd
    return kernel, stride, padding, dilation


def _max_pool(x, nd, kernel, stride, padding, dilation):
    kernel, stride, padding, dilation = _pool_params(nd, kernel, stride, padding, dilation)
    m = out_meta()[0]
    out_sp = tuple(m.shape[-nd:])
    batch = x.shape[:-nd]
    in_sp = x.shape[-nd:]
    if 0 in x.shape or 0 in out_sp:
        return jnp.zeros(tuple(m.shape), x.dtype), jnp.zeros(tuple(m.shape), jnp.int64)
    pads = [(0, 0)] * len(batch) + _pool_geometry(in_sp, out_sp, kernel, stride, padding,
                                                  dilation)
    ones = (1,) * len(batch)
    idx = _flat_index(in_sp, batch)
    v, i = lax.reduce_window(
        (x, idx), (_lowest(x.dtype), jnp.array(_NO_INDEX, jnp.int64)), _argmax_combine,
        ones + kernel, ones + stride, pads, window_dilation=ones + dilation)
    return v, i


@lower("max_pool2d_with_indices.default")
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=(0,), dilation=(1,),
                            ceil_mode=False):
    return _max_pool(x, 2, kernel_size, stride, padding, dilation)


@lower("max_pool3d_with_indices.default")
def max_pool3d_with_indices(x, kernel_size, stride=(), padding=(0,), dilation=(1,),
                            ceil_mode=False):
    return _max_pool(x, 3, kernel_size, stride, padding, dilation)


def _scatter_flat(v, indices, out_sp, add):
    """A zero (..., *out_sp) array with out[..., indices[j]] = v[..., j] (or += when add)
    over the flattened spatial dims; out-of-range indices are dropped."""
    nd = len(out_sp)
    batch = tuple(v.shape[:-nd])
    B = math.prod(batch)
    n_v = math.prod(v.shape[-nd:])  # (not -1: the batch may be empty)
    vf = v.reshape(B, n_v)
    idx = indices.reshape(B, n_v).astype(jnp.int64)
    rows = lax.broadcasted_iota(jnp.int64, idx.shape, 0)
    at = jnp.zeros((B, math.prod(out_sp)), v.dtype).at[rows, idx]
    out = at.add(vf, mode="drop") if add else at.set(vf, mode="drop")
    return out.reshape(batch + tuple(out_sp))


def _scatter_by_index(g, indices, in_shape, nd):
    """grad_input[..., indices[j]] += g[..., j] over the flattened spatial dims."""
    out = _scatter_flat(cast(g, opmath(g.dtype)), indices, tuple(in_shape[-nd:]), add=True)
    return cast(out.reshape(in_shape), g.dtype)


@lower("max_pool2d_with_indices_backward.default")
def max_pool2d_with_indices_backward(grad_output, x, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return _scatter_by_index(grad_output, indices, x.shape, 2)


@lower("max_pool3d_with_indices_backward.default")
def max_pool3d_with_indices_backward(grad_output, x, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return _scatter_by_index(grad_output, indices, x.shape, 3)


def _avg_divisor(in_sp, out_sp, kernel, stride, padding, count_include_pad, divisor_override):
    """PyTorch's per-output-position divisor (static: depends only on shapes)."""
    if divisor_override is not None:
        return None
    per_axis = []
    for i, o, k, s, p in zip(in_sp, out_sp, kernel, stride, padding):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, i + p)
        pool = end - start
        cs, ce = np.maximum(start, 0), np.minimum(end, i)
        per_axis.append(pool if count_include_pad else np.maximum(ce - cs, 0))
    div = per_axis[0]
    for a in per_axis[1:]:
        div = np.multiply.outer(div, a)
    return div


def _avg_pool(x, nd, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override, out_sp):
    kernel, stride, padding, _ = _pool_params(nd, kernel_size, stride, padding)
    dt = jnp.dtype(x.dtype)
    acc = opmath(dt)
    batch = x.shape[:-nd]
    in_sp = x.shape[-nd:]
    if 0 in x.shape or 0 in out_sp:
        return jnp.zeros(tuple(batch) + tuple(out_sp), acc)
    pads = [(0, 0)] * len(batch) + _pool_geometry(in_sp, out_sp, kernel, stride, padding,
                                                  (1,) * nd)
    ones = (1,) * len(batch)
    s = lax.reduce_window(cast(x, acc), np.array(0, acc), lax.add, ones + kernel,
                          ones + stride, pads)
    if divisor_override is not None:
        div = jnp.asarray(divisor_override, acc)
    else:
        div = jnp.asarray(_avg_divisor(in_sp, out_sp, kernel, stride, padding,
                                       count_include_pad, None), acc)
    if jnp.issubdtype(acc, jnp.integer):
        return lax.div(s, jnp.broadcast_to(div, s.shape))
    return s / div


@lower("avg_pool2d.default")
def avg_pool2d(x, kernel_size, stride=(), padding=(0,), ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    out_sp = tuple(out_meta().shape[-2:])
    return _avg_pool(x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, out_sp)


@lower("avg_pool3d.default")
def avg_pool3d(x, kernel_size, stride=(), padding=(0,), ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    out_sp = tuple(out_meta().shape[-3:])
    return _avg_pool(x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, out_sp)


def _linear_vjp(f, x_shape, dt, g):
    """The vjp of a linear function of one array of x_shape (computed in dt)."""
    (r,) = jax.linear_transpose(f, jax.ShapeDtypeStruct(tuple(x_shape), dt))(g)
    return r


def _avg_pool_backward(nd, grad_output, x, kernel_size, stride, padding, ceil_mode,
                       count_include_pad, divisor_override):
    dt = jnp.dtype(x.dtype)
    acc = opmath(dt)
    out_sp = tuple(grad_output.shape[-nd:])
    if 0 in x.shape or 0 in out_sp:
        return jnp.zeros(x.shape, dt)

    def f(z):
        return _avg_pool(z, nd, kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override, out_sp)

    return cast(_linear_vjp(f, x.shape, acc, cast(grad_output, acc)), dt)


@lower("avg_pool2d_backward.default")
def avg_pool2d_backward(grad_output, x, kernel_size, stride, padding, ceil_mode,
                        count_include_pad, divisor_override):
    return _avg_pool_backward(2, grad_output, x, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


@lower("avg_pool3d_backward.default")
def avg_pool3d_backward(grad_output, x, kernel_size, stride, padding, ceil_mode,
                        count_include_pad, divisor_override):
    return _avg_pool_backward(3, grad_output, x, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


# ---------------------------------------------------------------- adaptive pooling
def _adaptive_bounds(i, o):
    k = np.arange(o)
    start = (k * i) // o
    end = -((-(k + 1) * i) // o)  # ceil
    return start, end


def _adaptive_avg(x, out_sp):
    nd = len(out_sp)
    dt = jnp.dtype(x.dtype)
    acc = opmath(dt)
    batch = x.shape[:-nd]
    if 0 in x.shape or 0 in out_sp:
        return jnp.zeros(tuple(batch) + tuple(out_sp), acc)
    r = cast(x, acc)
    div = None
    for j, o in enumerate(out_sp):
        ax = len(batch) + j
        i = x.shape[ax]
        start, end = _adaptive_bounds(i, o)
        cnt = end - start
        if i % o == 0:  # equal windows: reshape and sum
            shp = r.shape[:ax] + (o, i // o) + r.shape[ax + 1:]
            r = jnp.sum(r.reshape(shp), axis=ax + 1)
        else:  # overlapping windows: a 0/1 matrix product (exact sums)
            pos = np.arange(i)
            S = ((pos[None, :] >= start[:, None]) & (pos[None, :] < end[:, None])).astype(
                np.float64)
            r = lax.dot_general(r, jnp.asarray(S, acc), (((ax,), (1,)), ((), ())),
                                precision=_prec(acc))
            r = jnp.moveaxis(r, -1, ax)
        div = cnt if div is None else np.multiply.outer(div, cnt)
    return r / jnp.asarray(div, acc)


@lower("_adaptive_avg_pool2d.default", "_adaptive_avg_pool3d.default")
def adaptive_avg_pool(x, output_size):
    return _adaptive_avg(x, tuple(int(v) for v in output_size))


def _adaptive_avg_backward(nd, grad_output, x):
    dt = jnp.dtype(x.dtype)
    acc = opmath(dt)
    out_sp = tuple(grad_output.shape[-nd:])
    if 0 in x.shape:
        return jnp.zeros(x.shape, dt)
    return cast(_linear_vjp(lambda z: _adaptive_avg(z, out_sp), x.shape, acc,
                            cast(grad_output, acc)), dt)


@lower("_adaptive_avg_pool2d_backward.default")
def adaptive_avg_pool2d_backward(grad_output, x):
    return _adaptive_avg_backward(2, grad_output, x)


@lower("_adaptive_avg_pool3d_backward.default")
def adaptive_avg_pool3d_backward(grad_output, x):
    return _adaptive_avg_backward(3, grad_output, x)


def _adaptive_max(x, out_sp):
    nd = len(out_sp)
    batch = x.shape[:-nd]
    in_sp = x.shape[-nd:]
    if 0 in x.shape or 0 in out_sp:
        shp = tuple(batch) + tuple(out_sp)
        return jnp.zeros(shp, x.dtype), jnp.zeros(shp, jnp.int64)
    if all(i % o == 0 for i, o in zip(in_sp, out_sp)):  # a plain max pool
        k = tuple(i // o for i, o in zip(in_sp, out_sp))
        ones = (1,) * len(batch)
        idx = _flat_index(in_sp, batch)
        return lax.reduce_window(
            (x, idx), (_lowest(x.dtype), jnp.array(_NO_INDEX, jnp.int64)), _argmax_combine,
            ones + k, ones + k, "VALID")
    vals = x
    idx = _flat_index(in_sp, batch)
    valid = jnp.ones(x.shape, bool)
    nb = len(batch)
    # gather every window along each axis: axis j becomes (out_j, K_j)
    for j, (i, o) in enumerate(zip(in_sp, out_sp)):
        ax = nb + 2 * j
        start, end = _adaptive_bounds(i, o)
        K = int((end - start).max())
        pos = start[:, None] + np.arange(K)[None, :]
        ok = pos < end[:, None]
        pos = np.minimum(pos, i - 1).reshape(-1)
        def take(a):
            a = jnp.take(a, jnp.asarray(pos), axis=ax)
            return a.reshape(a.shape[:ax] + (o, K) + a.shape[ax + 1:])
        vals, idx, valid = take(vals), take(idx), take(valid)
        okshape = [1] * vals.ndim
        okshape[ax], okshape[ax + 1] = o, K
        valid = valid & jnp.asarray(ok).reshape(okshape)
    vals = jnp.where(valid, vals, _lowest(x.dtype))
    idx = jnp.where(valid, idx, jnp.int64(_NO_INDEX))
    red = tuple(nb + 2 * j + 1 for j in range(nd))
    return lax.reduce((vals, idx), (_lowest(x.dtype), jnp.array(_NO_INDEX, jnp.int64)),
                      _argmax_combine, red)


@lower("adaptive_max_pool2d.default", "adaptive_max_pool3d.default")
def adaptive_max_pool(x, output_size):
    return _adaptive_max(x, tuple(int(v) for v in output_size))


@lower("adaptive_max_pool2d_backward.default")
def adaptive_max_pool2d_backward(grad_output, x, indices):
    return _scatter_by_index(grad_output, indices, x.shape, 2)


@lower("adaptive_max_pool3d_backward.default")
def adaptive_max_pool3d_backward(grad_output, x, indices):
    return _scatter_by_index(grad_output, indices, x.shape, 3)


# ---------------------------------------------------------------- max unpooling
def _max_unpool(x, indices, out_sp):
    """out[..., indices[j]] = x[..., j] over the flattened spatial dims (a zero output)."""
    return _scatter_flat(x, indices, out_sp, add=False)


def _unpool_check(nd):
    """PyTorch's CPU shape checks for max_unpool (the meta kernels have none) and its
    out-of-range index error, which needs one host read (skipped with index checks off)."""
    name = f"max_unpooling{nd}d"

    def check(x, indices, output_size, *rest):
        if indices.dtype != torch.int64:
            raise RuntimeError("elements in indices should be type int64" + (
                f" but got: {scalar_type_name(indices.dtype)}" if nd == 2 else ""))
        if len(output_size) != nd:
            what = "two elements (height, width)" if nd == 2 else \
                "three elements (depth, height, width)"
            raise RuntimeError(f"There should be exactly {what} in output_size, but got "
                               f"{len(output_size)} elements.")
        if x.dim() not in (nd + 1, nd + 2):
            raise RuntimeError(f"Input to {name} should be a {nd + 1}d or {nd + 2}d Tensor, "
                               f"but got a tensor with {x.dim()} dimensions.")
        if x.shape != indices.shape:
            raise RuntimeError(f"Expected shape of indices to be same as that of the input "
                               f"tensor ({list(x.shape)}) but got indices tensor with shape: "
                               f"{list(indices.shape)}")
        n_out = math.prod(output_size)
        if index_checks() and indices.numel():
            flat = indices.reshape(-1)
            bad = (flat < 0) | (flat >= n_out)
            if bool(bad.any().item()):
                v = int(flat[bad.nonzero()[0, 0]].item())
                size = "x".join(str(int(s)) for s in output_size)
                raise RuntimeError(f"Found an invalid max index: {v} (output volumes are of "
                                   f"size {size})")

    return check


@lower("max_unpool2d.default", check=_unpool_check(2))
def max_unpool2d(x, indices, output_size):
    return _max_unpool(x, indices, tuple(output_size))


@lower("max_unpool3d.default", check=_unpool_check(3))
def max_unpool3d(x, indices, output_size, stride, padding):
    return _max_unpool(x, indices, tuple(output_size))




# ---------------------------------------------------------------- fractional max pooling
def _frac_intervals(sample, in_size, out_size, pool, dt):
    """PyTorch's generate_intervals, per plane: sample (...,) -> start offsets (..., out)."""
    if out_size == 0:
        return jnp.zeros(sample.shape + (0,), jnp.int64)
    last = jnp.full(sample.shape + (1,), in_size - pool, jnp.int64)
    if out_size == 1:
        return last
    half = jnp.dtype(dt) in HALF

    def r(v):  # CPU's Half/BFloat16 arithmetic rounds after every operation
        return round_to(v, dt)

    ct = jnp.float32 if half else dt
    alpha = r(jnp.asarray(in_size - pool, ct) / jnp.asarray(out_size - 1, ct))
    s = cast(sample, ct)[..., None]
    i = jnp.arange(out_size - 1, dtype=ct)
    seq = (r(r(i + s) * alpha).astype(jnp.int64) - r(s * alpha).astype(jnp.int64))
    return jnp.concatenate([seq, last], axis=-1)


def _fractional_max_pool(x, kernel, out_sp, samples):
    nd = len(out_sp)
    unbatched = x.ndim == nd + 1
    if unbatched:
        x = x[None]
        samples = samples[:1] if samples.shape[0] else samples
    N, C = x.shape[:2]
    in_sp = x.shape[2:]
    # CPU's order of the samples: (W, H) in 2d, (T, H, W) in 3d
    order = (1, 0) if nd == 2 else (0, 1, 2)
    starts = [_frac_intervals(samples[:, :, order[d]], in_sp[d], out_sp[d], kernel[d], x.dtype)
              for d in range(nd)]
    v = x
    idx = jnp.zeros((1,) * (2 + nd), jnp.int64)
    for d in range(nd):
        pos = (starts[d][..., :, None] + jnp.arange(kernel[d])).reshape(
            N, C, out_sp[d] * kernel[d])
        shape = [N, C] + [1] * nd
        shape[2 + d] = pos.shape[-1]
        pos_b = pos.reshape(shape)
        v = jnp.take_along_axis(v, pos_b, axis=2 + d, mode="clip")
        stride = math.prod(in_sp[d + 1:])
        idx = idx + pos_b * stride
    # (N, C, o0*k0, o1*k1, ...) -> (N, C, o0, o1, ..., k0 * k1 ...)
    split = [N, C]
    for d in range(nd):
        split += [out_sp[d], kernel[d]]
    perm = [0, 1] + [2 + 2 * d for d in range(nd)] + [3 + 2 * d for d in range(nd)]
    K = math.prod(kernel)
    v = v.reshape(split).transpose(perm).reshape((N, C) + tuple(out_sp) + (K,))
    idx = jnp.broadcast_to(idx, (N, C) + tuple(o * k for o, k in zip(out_sp, kernel)))
    idx = idx.reshape(split).transpose(perm).reshape((N, C) + tuple(out_sp) + (K,))
    # the first maximum in scan order, or the last NaN of the window (CPU's `>` || isnan)
    isn = jnp.isnan(v) if jnp.issubdtype(v.dtype, jnp.floating) else jnp.zeros(v.shape, bool)
    any_nan = jnp.any(isn, axis=-1, keepdims=True)
    last_nan = K - 1 - jnp.argmax(isn[..., ::-1], axis=-1, keepdims=True)
    first_max = jnp.argmax(jnp.where(isn, -jnp.inf, v) if isn.dtype == bool else v, axis=-1,
                           keepdims=True)
    k = jnp.where(any_nan, last_nan, first_max)
    out = jnp.take_along_axis(v, k, axis=-1)[..., 0]
    ind = jnp.take_along_axis(idx, k, axis=-1)[..., 0]
    if unbatched:
        out, ind = out[0], ind[0]
    return out, ind


@lower("fractional_max_pool2d.default")
def fractional_max_pool2d(x, kernel_size, output_size, random_samples):
    return _fractional_max_pool(x, tuple(kernel_size), tuple(output_size), random_samples)


@lower("fractional_max_pool3d.default")
def fractional_max_pool3d(x, kernel_size, output_size, random_samples):
    return _fractional_max_pool(x, tuple(kernel_size), tuple(output_size), random_samples)


@lower("fractional_max_pool2d_backward.default")
def fractional_max_pool2d_backward(grad_output, x, kernel_size, output_size, indices):
    return _scatter_by_index(grad_output, indices, x.shape, 2)


@lower("fractional_max_pool3d_backward.default")
def fractional_max_pool3d_backward(grad_output, x, kernel_size, output_size, indices):
    return _scatter_by_index(grad_output, indices, x.shape, 3)


def _frac3d_backward_meta(grad_output, x, kernel_size, output_size, indices):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


meta_kernel("fractional_max_pool3d_backward", _frac3d_backward_meta)

"""Shape ops that copy: cat/stack, padding, flip/roll/repeat, diagonals, the *_backward and
*_scatter twins of view ops, pixel/channel shuffles, im2col/col2im, repeat_interleave.

Backward ops that are the transpose of a gather (reflection/replication padding,
col2im) are derived from their forward with ``jax.linear_transpose``, so they
sum overlapping contributions exactly as PyTorch does.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..numerics import canon_dim, cast, opmath, storage_numel
from ..lowering import (device_mismatch, follow_input_format, lower, out_dtype, out_meta,
                        out_shape, read_back)

aten = torch.ops.aten


def _transpose_of(fn, in_shape, dtype, ct):
    """The transpose (adjoint) of the linear map fn at input shape/dtype, applied to ct."""
    spec = jax.ShapeDtypeStruct(tuple(in_shape), dtype)
    (r,) = jax.linear_transpose(fn, spec)(ct.astype(dtype))
    return r


# ---------------------------------------------------------------- cat / stack
@lower("cat.default")
def cat(tensors, dim=0):
    dt = out_dtype()
    shape = out_shape()
    # legacy behaviour: 1-D empty tensors are skipped whatever their shape
    parts = [cast(jnp.asarray(t), dt) for t in tensors
             if not (jnp.ndim(t) == 1 and jnp.shape(t)[0] == 0)]
    if not parts:
        return jnp.zeros(shape, dt)
    dim = canon_dim(dim, len(shape))
    parts = [p for p in parts if p.shape[dim] != 0] or parts[:1]
    if len(parts) == 1:
        return parts[0].reshape(shape)
    return jnp.concatenate(parts, axis=dim)


@lower("stack.default")
def stack(tensors, dim=0):
    dt = out_dtype()
    dim = canon_dim(dim, len(out_shape()))
    return jnp.stack([cast(jnp.asarray(t), dt) for t in tensors], axis=dim)


@lower("split_with_sizes_copy.default")
def split_with_sizes_copy(x, split_sizes, dim=0):
    dim = canon_dim(dim, x.ndim)
    out, start = [], 0
    for s in split_sizes:
        out.append(lax.slice_in_dim(x, start, start + s, axis=dim))
        start += s
    return out


@lower("split_copy.Tensor")
def split_copy(x, split_size, dim=0):
    dim = canon_dim(dim, x.ndim)
    n = x.shape[dim]
    if split_size == 0:
        return [x]
    return [lax.slice_in_dim(x, s, min(s + split_size, n), axis=dim)
            for s in range(0, max(n, 1), split_size)][: max(-(-n // split_size), 1)]


@lower("unbind_copy.int")
def unbind_copy(x, dim=0):
    dim = canon_dim(dim, x.ndim)
    return [lax.index_in_dim(x, i, axis=dim, keepdims=False) for i in range(x.shape[dim])]


# ---------------------------------------------------------------- padding
@lower("constant_pad_nd.default")
def constant_pad_nd(x, pad, value=0):
    shape = out_shape()
    n = len(pad) // 2
    cfg = [(0, 0, 0)] * x.ndim
    for i in range(n):
        cfg[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    if math.prod(shape) == 0:
        return jnp.zeros(shape, x.dtype)
    if x.size == 0:
        return jnp.full(shape, cast(jnp.asarray(value), x.dtype))
    return lax.pad(x, cast(jnp.asarray(value), x.dtype), cfg)


def _pad_mode(x, padding, mode):
    """Reflect / edge padding of the last len(padding)//2 dims (negative = crop)."""
    n = len(padding) // 2
    widths = [(0, 0)] * (x.ndim - n)
    crops = [(0, 0)] * (x.ndim - n)
    for i in reversed(range(n)):
        lo, hi = padding[2 * i], padding[2 * i + 1]
        widths.append((max(lo, 0), max(hi, 0)))
        crops.append((max(-lo, 0), max(-hi, 0)))
    y = jnp.pad(x, widths, mode=mode)
    if any(c != (0, 0) for c in crops):
        y = y[tuple(slice(a, y.shape[d] - b) for d, (a, b) in enumerate(crops))]
    return y


def _reflect(x, padding):
    return _pad_mode(x, padding, "reflect")


def _replicate(x, padding):
    return _pad_mode(x, padding, "edge")


def _pad_meta(kind):
    ops = {2: f"{kind}_pad1d", 4: f"{kind}_pad2d", 6: f"{kind}_pad3d"}

    def meta(x, padding):
        out = getattr(aten, ops.get(len(padding), ops[2])).default(x, padding)
        return follow_input_format(out, x)
    return meta


@lower("reflection_pad1d.default", "reflection_pad2d.default", "reflection_pad3d.default",
       device_meta=_pad_meta("reflection"))
def reflection_pad(x, padding):
    return _reflect(x, list(padding))


@lower("replication_pad1d.default", "replication_pad2d.default", "replication_pad3d.default",
       device_meta=_pad_meta("replication"))
def replication_pad(x, padding):
    return _replicate(x, list(padding))


def _pad_backward(fwd):
    def low(grad_output, x, padding):
        padding = list(padding)
        acc = opmath(grad_output.dtype)
        r = _transpose_of(lambda v: fwd(v, padding), x.shape, acc, grad_output)
        return r.astype(grad_output.dtype)
    return low


lower("reflection_pad1d_backward.default", "reflection_pad2d_backward.default",
      "reflection_pad3d_backward.default")(_pad_backward(_reflect))
lower("replication_pad1d_backward.default", "replication_pad2d_backward.default",
      "replication_pad3d_backward.default")(_pad_backward(_replicate))


# ---------------------------------------------------------------- flip / roll / repeat
@lower("flip.default")
def flip(x, dims):
    if x.ndim == 0 or not dims:
        return x
    return jnp.flip(x, axis=tuple(canon_dim(d, x.ndim) for d in dims))


@lower("roll.default")
def roll(x, shifts, dims=()):
    if x.size == 0:
        return x
    if not dims:
        return jnp.roll(x.reshape(-1), shifts[0]).reshape(x.shape)
    return jnp.roll(x, tuple(shifts), axis=tuple(canon_dim(d, x.ndim) for d in dims))


@lower("repeat.default")
def repeat(x, repeats):
    shape = out_shape()
    lead = len(repeats) - x.ndim
    xr = x.reshape((1,) * lead + x.shape)
    if math.prod(shape) == 0:
        return jnp.zeros(shape, x.dtype)
    return jnp.tile(xr, tuple(repeats))


def _ri_stats(r):
    v = r.reshape(-1).astype(jnp.int64)
    return jnp.stack([jnp.sum(v), jnp.min(v, initial=0)])


def _ri_normalize(repeats, *, output_size=None):
    """repeat_interleave(repeats) has an output size that depends on the values unless
    output_size is given: sum on the device and read it (a sync); with output_size
    there is no sync and no check (as CUDA)."""
    if repeats.dim() > 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (torch.int64, torch.int32):
        raise RuntimeError("repeats has to be Long or Int tensor")
    if repeats.device.type != "neuron":
        raise device_mismatch("neuron:0", repeats.device)
    if output_size is None:
        total, lo = (int(v) for v in read_back(_ri_stats, repeats)) if repeats.numel() \
            else (0, 0)
        if lo < 0:
            raise RuntimeError("repeats can not be negative")
        output_size = total
    return (repeats,), {"output_size": output_size}


@lower("repeat_interleave.Tensor", normalize=_ri_normalize)
def repeat_interleave(repeats, *, output_size=None):
    n = repeats.shape[0] if repeats.ndim else 1
    total = out_shape()[0]
    return jnp.repeat(jnp.arange(n, dtype=repeats.dtype), repeats.reshape(-1),
                      total_repeat_length=total)


# ---------------------------------------------------------------- diagonals
def _diag_idx(n_rows, n_cols, offset):
    """Row and column indices of the `offset` diagonal of an (n_rows, n_cols) matrix."""
    if offset >= 0:
        n = max(min(n_rows, n_cols - offset), 0)
        r = np.arange(n)
        return r, r + offset
    n = max(min(n_rows + offset, n_cols), 0)
    r = np.arange(n)
    return r - offset, r


def _diag_set(x, src, offset, dim1, dim2, add=False):
    dim1, dim2 = canon_dim(dim1, x.ndim), canon_dim(dim2, x.ndim)
    y = jnp.moveaxis(x, (dim1, dim2), (-2, -1))
    r, c = _diag_idx(y.shape[-2], y.shape[-1], offset)
    if len(r) == 0:
        return x
    s = cast(src, x.dtype)
    y = y.at[..., r, c].add(s) if add else y.at[..., r, c].set(s)
    return jnp.moveaxis(y, (-2, -1), (dim1, dim2))


@lower("diagonal_copy.default")
def diagonal_copy(x, offset=0, dim1=0, dim2=1):
    shape = out_shape()
    if math.prod(shape) == 0:
        return jnp.zeros(shape, x.dtype)
    return jnp.diagonal(x, offset, canon_dim(dim1, x.ndim), canon_dim(dim2, x.ndim))


@lower("diagonal_scatter.default")
def diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    return _diag_set(x, src, offset, dim1, dim2)


@lower("diagonal_backward.default")
def diagonal_backward(grad_output, input_sizes, offset, dim1, dim2):
    z = jnp.zeros(tuple(input_sizes), grad_output.dtype)
    return _diag_set(z, grad_output, offset, dim1, dim2)


@lower("diag_embed.default")
def diag_embed(x, offset=0, dim1=-2, dim2=-1):
    shape = out_shape()
    nd = len(shape)
    d1, d2 = canon_dim(dim1, nd), canon_dim(dim2, nd)
    z = jnp.zeros(shape, x.dtype)
    if math.prod(shape) == 0:
        return z
    # x's last dim runs along the diagonal; its other dims are the remaining output dims
    return _diag_set(z, x, offset, d1, d2)


# ---------------------------------------------------------------- select / slice scatter
def _slice_norm(size, start, end, step):
    start = 0 if start is None else start
    end = size if end is None else end
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, end, step


@lower("select_backward.default")
def select_backward(grad_output, input_sizes, dim, index):
    z = jnp.zeros(tuple(input_sizes), grad_output.dtype)
    return select_scatter(z, grad_output, dim, index)


@lower("select_scatter.default")
def select_scatter(x, src, dim, index):
    dim = canon_dim(dim, x.ndim)
    if index < 0:
        index += x.shape[dim]
    upd = jnp.expand_dims(cast(jnp.asarray(src), x.dtype), dim)
    return lax.dynamic_update_slice_in_dim(x, upd, index, axis=dim)


@lower("slice_backward.default")
def slice_backward(grad_output, input_sizes, dim, start, end, step):
    z = jnp.zeros(tuple(input_sizes), grad_output.dtype)
    return slice_scatter(z, grad_output, dim, start, end, step)


@lower("slice_scatter.default")
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    dim = canon_dim(dim, x.ndim)
    size = x.shape[dim] if x.ndim else 1
    start, end, step = _slice_norm(size, start, end, step)
    src = cast(jnp.asarray(src), x.dtype)
    if src.size == 0:
        return x
    if step == 1:
        return lax.dynamic_update_slice_in_dim(x, src, start, axis=dim)
    idx = (slice(None),) * dim + (slice(start, end, step),)
    return x.at[idx].set(src)


@lower("narrow_copy.default")
def narrow_copy(x, dim, start, length):
    dim = canon_dim(dim, x.ndim)
    if start < 0:
        start += x.shape[dim]
    return lax.slice_in_dim(x, start, start + length, axis=dim)


@lower("unfold_backward.default")
def unfold_backward(grad_in, input_sizes, dim, size, step):
    input_sizes = tuple(input_sizes)
    nd = len(input_sizes)
    dim = canon_dim(dim, nd)
    acc = opmath(grad_in.dtype)
    z = jnp.zeros(input_sizes, acc)
    if grad_in.size == 0:
        return z.astype(grad_in.dtype)
    if nd == 0:
        return grad_in.reshape(()).astype(grad_in.dtype)
    nwin = grad_in.shape[dim]
    idx = (np.arange(nwin)[:, None] * step + np.arange(size)[None, :])
    g = jnp.moveaxis(grad_in.astype(acc), -1, dim + 1)  # (..., nwin, size, ...)
    r = z.at[(slice(None),) * dim + (idx,)].add(g)
    return r.astype(grad_in.dtype)


@lower("as_strided_scatter.default")
def as_strided_scatter(x, src, size, stride, storage_offset=None):
    m = out_meta()
    out_strides = tuple(m.stride())
    shape = tuple(x.shape)
    n = storage_numel(shape, out_strides)
    if n == 0 or math.prod(tuple(size)) == 0:
        return x
    # the output's storage: x laid out with the strides PyTorch's clone chose
    pos = np.zeros(shape, np.int64)
    for d, (s, st) in enumerate(zip(shape, out_strides)):
        pos = pos + (np.arange(s) * st).reshape((1,) * d + (s,) + (1,) * (len(shape) - d - 1))
    flat = jnp.zeros((n,), x.dtype).at[pos.reshape(-1)].set(x.reshape(-1))
    off = 0 if storage_offset is None else storage_offset
    vpos = np.full(tuple(size), off, np.int64)
    for d, (s, st) in enumerate(zip(size, stride)):
        vpos = vpos + (np.arange(s) * st).reshape((1,) * d + (s,) + (1,) * (len(size) - d - 1))
    flat = flat.at[vpos.reshape(-1)].set(jnp.broadcast_to(cast(src, x.dtype), tuple(size)).reshape(-1))
    return flat[pos]


# ---------------------------------------------------------------- *_copy twins of views
@lower("expand_copy.default")
def expand_copy(x, size, *, implicit=False):
    return jnp.broadcast_to(x, out_shape())


@lower("permute_copy.default")
def permute_copy(x, dims):
    return jnp.transpose(x, tuple(canon_dim(d, x.ndim) for d in dims)) if x.ndim else x


@lower("view_copy.default")
def view_copy(x, size):
    return x.reshape(out_shape())


@lower("unfold_copy.default")
def unfold_copy(x, dimension, size, step):
    shape = out_shape()
    if x.ndim == 0:
        return x.reshape(shape)
    dim = canon_dim(dimension, x.ndim)
    nwin = shape[dim]
    if math.prod(shape) == 0:
        return jnp.zeros(shape, x.dtype)
    idx = np.arange(nwin)[:, None] * step + np.arange(size)[None, :]
    g = jnp.take(x, idx.reshape(-1), axis=dim).reshape(x.shape[:dim] + (nwin, size) + x.shape[dim + 1:])
    return jnp.moveaxis(g, dim + 1, -1)


# ---------------------------------------------------------------- shuffles
@lower("channel_shuffle.default", "native_channel_shuffle.default")
def channel_shuffle(x, groups):
    n, c = x.shape[0], x.shape[1]
    rest = x.shape[2:]
    y = x.reshape((n, groups, c // groups) + rest)
    return jnp.swapaxes(y, 1, 2).reshape(x.shape)


@lower("pixel_shuffle.default")
def pixel_shuffle(x, upscale_factor):
    r = upscale_factor
    *b, c, h, w = x.shape
    oc = c // (r * r)
    y = x.reshape(tuple(b) + (oc, r, r, h, w))
    nb = len(b)
    perm = tuple(range(nb)) + (nb, nb + 3, nb + 1, nb + 4, nb + 2)
    return jnp.transpose(y, perm).reshape(tuple(b) + (oc, h * r, w * r))


@lower("pixel_unshuffle.default")
def pixel_unshuffle(x, downscale_factor):
    r = downscale_factor
    *b, c, h, w = x.shape
    oh, ow = h // r, w // r
    y = x.reshape(tuple(b) + (c, oh, r, ow, r))
    nb = len(b)
    perm = tuple(range(nb)) + (nb, nb + 2, nb + 4, nb + 1, nb + 3)
    return jnp.transpose(y, perm).reshape(tuple(b) + (c * r * r, oh, ow))


# ---------------------------------------------------------------- im2col / col2im
def _im2col(x, kernel_size, dilation, padding, stride):
    """(N, C, H, W) -> (N, C*kh*kw, L) with PyTorch's (c, ki, kj) channel order."""
    kh, kw = kernel_size
    dh, dw = dilation
    ph, pw = padding
    sh, sw = stride
    n, c, h, w = x.shape
    xp = jnp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    cols = []
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dh, j * dw
            cols.append(lax.slice(xp, (0, 0, r0, c0),
                                  (n, c, r0 + (oh - 1) * sh + 1, c0 + (ow - 1) * sw + 1),
                                  (1, 1, sh, sw)))
    y = jnp.stack(cols, axis=2)  # (N, C, kh*kw, oh, ow)
    return y.reshape(n, c * kh * kw, oh * ow)


@lower("im2col.default")
def im2col(x, kernel_size, dilation, padding, stride):
    shape = out_shape()
    if math.prod(shape) == 0:
        return jnp.zeros(shape, x.dtype)
    batched = x.ndim == 4
    xb = x if batched else x[None]
    y = _im2col(xb, kernel_size, dilation, padding, stride)
    return y if batched else y[0]


@lower("col2im.default")
def col2im(x, output_size, kernel_size, dilation, padding, stride):
    shape = out_shape()
    if math.prod(shape) == 0:
        return jnp.zeros(shape, x.dtype)
    batched = x.ndim == 3
    xb = x if batched else x[None]
    n = xb.shape[0]
    c = xb.shape[1] // (kernel_size[0] * kernel_size[1])
    in_shape = (n, c) + tuple(output_size)
    acc = opmath(x.dtype)
    r = _transpose_of(lambda v: _im2col(v, kernel_size, dilation, padding, stride),
                      in_shape, acc, xb)
    r = r.astype(x.dtype)
    return r if batched else r[0]


# ---------------------------------------------------------------- jagged <-> padded
# The dense kernels under nested tensors with the jagged layout (NJT): to_padded_tensor,
# softmax / layer_norm / SDPA over the ragged dimension, and their gradients.  One gather
# each way, with PyTorch's CPU semantics: sequences longer than the padded length are
# cut, padded positions past a sequence read `padding_value`, jagged rows past the last
# offset (or past the padded length) are zero.
def _one_jagged_dim(offsets, max_lengths=(0,)):
    if len(offsets) != 1 or len(max_lengths) != 1:
        raise RuntimeError("Only one jagged dim is supported for now")


@lower("_jagged_to_padded_dense_forward.default")
def jagged_to_padded_dense(values, offsets, max_lengths, padding_value=0.0):
    _one_jagged_dim(offsets, max_lengths)
    off = offsets[0].astype(jnp.int64)
    s_len = int(max_lengths[0])
    batch = off.shape[0] - 1
    pos = jnp.arange(s_len, dtype=jnp.int64)
    idx = off[:-1, None] + pos[None, :]  # (B, S) rows of values
    valid = pos[None, :] < (off[1:] - off[:-1])[:, None]
    rest = values.shape[1:]
    pad = jnp.full((batch, s_len) + rest, padding_value, dtype=values.dtype)
    if values.shape[0] == 0:
        return pad
    rows = jnp.take(values, jnp.clip(idx, 0, values.shape[0] - 1), axis=0)
    mask = valid.reshape(valid.shape + (1,) * len(rest))
    return jnp.where(mask, rows, pad)


def _padded_to_jagged_normalize(dense, offsets, total_L=None):
    """The last offset, read back (CUDA syncs too without total_L): the result's size, or
    checked against a given total_L as the CPU checks it (a wrong total_L, which PyTorch's
    own to_padded_tensor backward passes for a transposed NestedTensor, would otherwise
    gather garbage)."""
    if len(offsets) == 1 and offsets[0].numel():
        last = int(read_back(_last, offsets[0]))
        if total_L is None:
            total_L = last
        elif last != total_L:
            raise RuntimeError("_padded_dense_to_jagged_forward(): final offset should match "
                               "total_L value")
    return (dense, offsets, total_L), {}


def _last(x):
    return x[-1]


def _padded_to_jagged_meta(dense, offsets, total_L=None):
    _one_jagged_dim(offsets)
    if total_L is None:
        raise RuntimeError("_padded_dense_to_jagged_forward: total_L is needed to know the "
                           "result's size without reading the offsets")
    return dense.new_empty((total_L,) + tuple(dense.shape[2:]))


@lower("_padded_dense_to_jagged_forward.default", normalize=_padded_to_jagged_normalize,
       meta=_padded_to_jagged_meta)
def padded_dense_to_jagged(dense, offsets, total_L=None):
    _one_jagged_dim(offsets)
    off = offsets[0].astype(jnp.int64)
    total = out_shape()[0]
    batch, s_len = dense.shape[0], dense.shape[1]
    rest = dense.shape[2:]
    zeros = jnp.zeros((total,) + rest, dense.dtype)
    if batch == 0 or s_len == 0 or total == 0:
        return zeros
    i = jnp.arange(total, dtype=jnp.int64)
    b = jnp.searchsorted(off, i, side="right") - 1
    s = i - off[jnp.clip(b, 0, batch)]
    valid = (b >= 0) & (b < batch) & (s < s_len)
    flat = dense.reshape((batch * s_len,) + rest)
    rows = jnp.take(flat, jnp.clip(b, 0, batch - 1) * s_len + jnp.clip(s, 0, s_len - 1), axis=0)
    return jnp.where(valid.reshape(valid.shape + (1,) * len(rest)), rows, zeros)

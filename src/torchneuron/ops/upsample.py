"""Upsampling / interpolation (nearest, nearest-exact, linear, bilinear, bicubic,
trilinear, antialiased bilinear/bicubic) with backward; grid_sampler_2d and
affine_grid_generator.

Every interpolation is separable: for each spatial axis a static plan (source
indices and weights, computed on the host from the sizes and scales only, with
the same float arithmetic as PyTorch's CPU kernels) is applied as a gather and
a weighted sum, a broadcast (integer nearest factors) or, for antialiasing, a
small dense matrix product.  The backward is the linear transpose of the same
forward, so it is exact and uses the same plans.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..numerics import cast, is_float, opmath
from ..lowering import lower

HIGHEST = lax.Precision.HIGHEST


def _acc(dt):
    """The type upsampling computes in: opmath of a floating dtype, float32 for integers."""
    dt = jnp.dtype(dt)
    return opmath(dt) if is_float(dt) else jnp.dtype(jnp.float32)


# ---------------------------------------------------------------- host-side plans
def _scale_value(scale, in_size, out_size, ft):
    """compute_scales_value: 1/scale when given and positive, else in/out (in type ft)."""
    if scale is not None and scale > 0:
        return ft(1.0 / scale)
    return ft(in_size) / ft(out_size)


def _area_scale(in_size, out_size, align_corners, scale, ft):
    if align_corners:
        return ft(in_size - 1) / ft(out_size - 1) if out_size > 1 else ft(0)
    return _scale_value(scale, in_size, out_size, ft)


def _source_index(scale, dst, align_corners, cubic, ft):
    dst = dst.astype(ft)
    if align_corners:
        return scale * dst
    src = scale * (dst + ft(0.5)) - ft(0.5)
    return src if cubic else np.where(src < 0, ft(0), src).astype(ft)


def _plan_nearest(in_size, out_size, scale, exact):
    o = np.arange(out_size)
    if not exact:
        if out_size == in_size:
            return ("identity",)
        if out_size == 2 * in_size:
            return ("repeat", 2)
    s = _scale_value(scale, in_size, out_size, np.float32)
    of = o.astype(np.float32)
    src = np.floor((of + np.float32(0.5)) * s) if exact else np.floor(of * s)
    idx = np.minimum(src.astype(np.int64), in_size - 1)
    if in_size > 0 and out_size % in_size == 0 and np.array_equal(idx, o // (out_size // in_size)):
        return ("repeat", out_size // in_size)
    return ("take", idx[:, None], None)


def _plan_linear(in_size, out_size, align_corners, scale, ft):
    s = _area_scale(in_size, out_size, align_corners, scale, ft)
    src = _source_index(s, np.arange(out_size), align_corners, False, ft)
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    lam = np.clip(src - i0.astype(ft), 0, 1).astype(ft)
    i1 = i0 + (i0 < in_size - 1).astype(np.int64)
    idx = np.stack([i0, i1], 1)
    w = np.stack([ft(1) - lam, lam], 1).astype(ft)
    return ("taps", idx, w)


def _cubic_coeffs(t, ft):
    A = ft(-0.75)

    def cc1(x):
        return ((A + 2) * x - (A + 3)) * x * x + 1

    def cc2(x):
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A

    t = t.astype(ft)
    return np.stack([cc2(t + 1), cc1(t), cc1(1 - t), cc2(2 - t)], 1).astype(ft)


def _plan_cubic(in_size, out_size, align_corners, scale, ft):
    s = _area_scale(in_size, out_size, align_corners, scale, ft)
    src = _source_index(s, np.arange(out_size), align_corners, True, ft)
    i = np.floor(src).astype(np.int64)
    t = (src - i.astype(ft)).astype(ft)
    idx = np.clip(i[:, None] - 1 + np.arange(4)[None, :], 0, in_size - 1)
    return ("taps", idx, _cubic_coeffs(t, ft))


def _aa_filter_linear(x):
    x = np.abs(x)
    return np.where(x < 1, 1 - x, 0)


def _aa_filter_cubic(x):
    a = -0.5
    x = np.abs(x)
    return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, 0))


def _plan_aa(in_size, out_size, align_corners, scale, interp_size, ft):
    """PyTorch's antialiased (PIL-style) weights as a dense (out, in) matrix."""
    filt = _aa_filter_linear if interp_size == 2 else _aa_filter_cubic
    s = _area_scale(in_size, out_size, align_corners, scale, ft)
    support = ft(interp_size * 0.5) * s if s >= 1.0 else ft(interp_size * 0.5)
    invscale = ft(1.0) / s if s >= 1.0 else ft(1.0)
    max_size = int(math.ceil(float(support))) * 2 + 1
    W = np.zeros((out_size, in_size), ft)
    for i in range(out_size):
        center = s * ft(i + 0.5)
        xmin = max(int(center - support + ft(0.5)), 0)
        xsize = min(int(center + support + ft(0.5)), in_size) - xmin
        xsize = min(max(xsize, 0), max_size)
        j = np.arange(xsize)
        w = filt(((j + xmin).astype(ft) - center + ft(0.5)) * invscale).astype(ft)
        total = w.sum(dtype=ft)
        if total != 0:
            w = (w / total).astype(ft)
        W[i, xmin:xmin + xsize] = w
    return ("matrix", W)


# ---------------------------------------------------------------- applying plans
def _apply(x, ax, plan, n_out):
    kind = plan[0]
    if kind == "identity":
        return x
    if kind == "repeat":
        k = plan[1]
        x = jnp.expand_dims(x, ax + 1)
        shp = list(x.shape)
        shp[ax + 1] = k
        x = jnp.broadcast_to(x, shp)
        return x.reshape(x.shape[:ax] + (n_out,) + x.shape[ax + 2:])
    if kind == "matrix":
        W = jnp.asarray(plan[1], x.dtype)
        r = lax.dot_general(x, W, (((ax,), (1,)), ((), ())), precision=HIGHEST)
        return jnp.moveaxis(r, -1, ax)
    idx, w = plan[1], plan[2]
    out = None
    for t in range(idx.shape[1]):
        g = jnp.take(x, jnp.asarray(idx[:, t]), axis=ax)
        if w is not None:
            wshape = [1] * x.ndim
            wshape[ax] = n_out
            g = g * jnp.asarray(w[:, t], x.dtype).reshape(wshape)
        out = g if out is None else out + g
    return out


def _plans(mode, in_sp, out_sp, align_corners, scales, dt):
    ft = np.float64 if jnp.dtype(dt) == jnp.float64 else np.float32
    plans = []
    for i, o, s in zip(in_sp, out_sp, scales):
        if mode in ("nearest", "nearest-exact"):
            plans.append(_plan_nearest(i, o, s, mode == "nearest-exact"))
        elif mode == "linear":
            plans.append(_plan_linear(i, o, align_corners, s, ft))
        elif mode == "cubic":
            plans.append(_plan_cubic(i, o, align_corners, s, ft))
        elif mode == "linear-aa":
            plans.append(_plan_aa(i, o, align_corners, s, 2, ft))
        elif mode == "cubic-aa":
            plans.append(_plan_aa(i, o, align_corners, s, 4, ft))
    return plans


def _interp(x, mode, out_sp, align_corners, scales, dtype=None):
    nd = len(out_sp)
    in_sp = x.shape[-nd:]
    if 0 in x.shape or 0 in out_sp:
        return jnp.zeros(x.shape[:-nd] + tuple(out_sp), x.dtype)
    plans = _plans(mode, in_sp, out_sp, align_corners, scales, dtype or x.dtype)
    for j, plan in enumerate(plans):
        x = _apply(x, x.ndim - nd + j, plan, out_sp[j])
    return x


def _forward(mode, x, output_size, align_corners, scales):
    out_sp = tuple(int(v) for v in output_size)
    dt = jnp.dtype(x.dtype)
    if mode.startswith("nearest"):
        return _interp(x, mode, out_sp, align_corners, scales)
    acc = _acc(dt)
    if jnp.issubdtype(dt, jnp.integer):
        return _interp_int(x, mode, out_sp, align_corners, scales, acc)
    return _interp(cast(x, acc), mode, out_sp, align_corners, scales, dtype=dt)


def _interp_int(x, mode, out_sp, align_corners, scales, acc):
    """uint8 images, as PyTorch's CPU kernels (and PIL) do them: separable passes from
    the last axis to the first; cubic passes are each rounded and saturated to the
    integer type (their overshoot is clipped in between), linear ones only at the end."""
    nd = len(out_sp)
    dt = jnp.dtype(x.dtype)
    info = jnp.iinfo(dt)
    if 0 in x.shape or 0 in out_sp:
        return jnp.zeros(x.shape[:-nd] + tuple(out_sp), dt)
    plans = _plans(mode, x.shape[-nd:], out_sp, align_corners, scales, jnp.float32)
    r = cast(x, acc)
    for j in reversed(range(nd)):
        r = _apply(r, r.ndim - nd + j, plans[j], out_sp[j])
        if mode.startswith("cubic") or j == 0:
            r = jnp.clip(jnp.round(r), info.min, info.max)
    return r


def _backward(mode, grad_output, output_size, input_size, align_corners, scales):
    out_sp = tuple(int(v) for v in output_size)
    in_shape = tuple(int(v) for v in input_size)
    dt = jnp.dtype(grad_output.dtype)
    acc = _acc(dt)
    if 0 in in_shape or 0 in grad_output.shape:
        return jnp.zeros(in_shape, dt)

    def f(z):
        return _interp(z, mode, out_sp, align_corners, scales)

    (r,) = jax.linear_transpose(f, jax.ShapeDtypeStruct(in_shape, acc))(cast(grad_output, acc))
    return r


# ---------------------------------------------------------------- registrations
_SCALE_NAMES = {1: ("scales",), 2: ("scales_h", "scales_w"), 3: ("scales_d", "scales_h", "scales_w")}


def _scales(nd, pos, kw):
    names = _SCALE_NAMES[nd]
    vals = list(pos) + [kw.get(n) for n in names[len(pos):]]
    return tuple(vals[:nd])


def _reg(name, mode, nd, has_align):
    if has_align:
        def fwd(x, output_size, align_corners, *scales, **kw):
            return _forward(mode, x, output_size, align_corners, _scales(nd, scales, kw))

        def bwd(grad_output, output_size, input_size, align_corners, *scales, **kw):
            return _backward(mode, grad_output, output_size, input_size, align_corners,
                             _scales(nd, scales, kw))
    else:
        def fwd(x, output_size, *scales, **kw):
            return _forward(mode, x, output_size, False, _scales(nd, scales, kw))

        def bwd(grad_output, output_size, input_size, *scales, **kw):
            return _backward(mode, grad_output, output_size, input_size, False,
                             _scales(nd, scales, kw))

    lower(f"{name}.default")(fwd)
    lower(f"{name}_backward.default")(bwd)


for _nd in (1, 2, 3):
    _reg(f"upsample_nearest{_nd}d", "nearest", _nd, False)
    _reg(f"_upsample_nearest_exact{_nd}d", "nearest-exact", _nd, False)
_reg("upsample_linear1d", "linear", 1, True)
_reg("upsample_bilinear2d", "linear", 2, True)
_reg("upsample_trilinear3d", "linear", 3, True)
_reg("upsample_bicubic2d", "cubic", 2, True)
_reg("_upsample_bilinear2d_aa", "linear-aa", 2, True)
_reg("_upsample_bicubic2d_aa", "cubic-aa", 2, True)




# ---------------------------------------------------------------- grid sampling
# interpolation_mode: 0 bilinear, 1 nearest, 2 bicubic; padding_mode: 0 zeros, 1 border,
# 2 reflection (PyTorch's GridSampler.h).  Written so that jax's derivative equals
# PyTorch's hand-written one (clipping/reflection pass no gradient at the boundaries
# exactly as PyTorch's *_set_grad helpers).
def _unnormalize(coord, size, align_corners):
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _clip(x, size):
    # NaN clips to 0, as in PyTorch's vectorized CPU kernel
    hi = jnp.asarray(size - 1, x.dtype)
    return jnp.where(x > 0, jnp.where(x < hi, x, jnp.broadcast_to(hi, x.shape)), jnp.zeros_like(x))


def _reflect(x, twice_low, twice_high):
    if twice_low == twice_high:
        return jnp.zeros_like(x)
    mn = twice_low / 2
    span = (twice_high - twice_low) / 2
    d = x - mn
    d = jnp.where(d < 0, -d, d)
    extra = jnp.fmod(d, span)
    flips = jnp.floor(d / span)
    even = jnp.fmod(flips, 2) == 0
    return jnp.where(even, extra + mn, span - extra + mn)


def _pad_coords(x, size, padding_mode, align_corners):
    if padding_mode == 1:
        return _clip(x, size)
    if padding_mode == 2:
        if align_corners:
            x = _reflect(x, 0, 2 * (size - 1))
        else:
            x = _reflect(x, -1, 2 * size - 1)
        return _clip(x, size)
    return x


def _gather(inp_flat, sizes, idxs):
    """inp_flat (N, C, prod(sizes)); idxs: integer coordinate arrays (N, *out) per axis.
    Returns values (N, C, *out) with zeros where any coordinate is out of bounds."""
    ok = None
    flat = None
    for i, (ix, n) in enumerate(zip(idxs, sizes)):
        inb = (ix >= 0) & (ix < n)
        ok = inb if ok is None else ok & inb
        c = jnp.clip(ix, 0, n - 1)
        flat = c if flat is None else flat * n + c
    N = inp_flat.shape[0]
    out_shape = flat.shape[1:]
    v = jnp.take_along_axis(inp_flat, flat.reshape(N, 1, -1), axis=2)
    v = v.reshape(inp_flat.shape[:2] + out_shape)
    return jnp.where(ok[:, None], v, jnp.zeros_like(v))


def _cubic_w(t):
    A = -0.75

    def cc1(x):
        return ((A + 2) * x - (A + 3)) * x * x + 1

    def cc2(x):
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A

    return [cc2(t + 1), cc1(t), cc1(1 - t), cc2(2 - t)]


def _grid_sample(inp, grid, mode, padding_mode, align_corners):
    nd = inp.ndim - 2
    sizes = inp.shape[2:]
    N, C = inp.shape[:2]
    flat = inp.reshape(N, C, -1)
    # grid[..., 0] indexes the last axis (W), grid[..., 1] the one before, ...
    coords = [grid[..., nd - 1 - a] for a in range(nd)]  # per axis a (D/H/W order)
    if mode == 2:  # bicubic (2-d only)
        xs = [_unnormalize(coords[a], sizes[a], align_corners) for a in range(nd)]
        base = [jnp.floor(x) for x in xs]
        ws = [_cubic_w(x - b) for x, b in zip(xs, base)]
        out = 0
        for i in range(4):
            for j in range(4):
                pos = []
                for a, k in zip(range(nd), (i, j)):
                    p = _pad_coords(base[a] - 1 + k, sizes[a], padding_mode, align_corners)
                    pos.append(p.astype(jnp.int64))
                v = _gather(flat, sizes, pos)
                out = out + v * (ws[0][i] * ws[1][j])[:, None]
        return out
    raw = [_pad_coords(_unnormalize(coords[a], sizes[a], align_corners), sizes[a], padding_mode,
                       align_corners) for a in range(nd)]
    # non-finite coordinates never index (PyTorch maps them far out of range), but
    # their weights stay non-finite, as in PyTorch's CPU kernel
    xs = [jnp.where(jnp.isfinite(x), x, jnp.full_like(x, -100.0)) for x in raw]
    if mode == 1:  # nearest, round half to even like nearbyint
        return _gather(flat, sizes, [jnp.round(x).astype(jnp.int64) for x in xs])
    lo = [jnp.floor(x) for x in xs]
    out = 0
    for corner in range(2 ** nd):
        pos, w = [], None
        for a in range(nd):
            up = (corner >> (nd - 1 - a)) & 1
            p = lo[a] + up
            wa = (raw[a] - lo[a]) if up else (lo[a] + 1 - raw[a])
            pos.append(p.astype(jnp.int64))
            w = wa if w is None else w * wa
        out = out + _gather(flat, sizes, pos) * w[:, None]
    return out


@lower("grid_sampler_2d.default", "grid_sampler_3d.default")
def grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
    acc = _acc(input.dtype)
    if input.size == 0 or grid.size == 0:
        return jnp.zeros(input.shape[:2] + grid.shape[1:-1], acc)
    return _grid_sample(cast(input, acc), cast(grid, acc), interpolation_mode, padding_mode,
                        align_corners)


@lower("grid_sampler_2d_backward.default", "grid_sampler_3d_backward.default")
def grid_sampler_backward(grad_output, input, grid, interpolation_mode, padding_mode,
                          align_corners, output_mask):
    acc = _acc(input.dtype)
    if input.size == 0 or grid.size == 0:
        return (jnp.zeros(input.shape, acc) if output_mask[0] else None, jnp.zeros(grid.shape, acc))

    def f(x, g):
        return _grid_sample(x, g, interpolation_mode, padding_mode, align_corners)

    _, vjp = jax.vjp(f, cast(input, acc), cast(grid, acc))
    gi, gg = vjp(cast(grad_output, acc))
    return (gi if output_mask[0] else None, gg)

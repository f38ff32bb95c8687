"""Shape ops that copy: cat/stack/split, padding, flip/roll/repeat, diagonals, scatters of
views, shuffles, im2col/col2im, repeat_interleave — against PyTorch's CPU results."""
import pytest
import torch
import torch.nn.functional as F

import torchneuron
from helpers import DEV, check, rand_of

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32, torch.bool]
FLOATS = [torch.float32, torch.float64]


_rand = rand_of


# views applied inside the checked function, so the device sees a non-contiguous input
LAYOUTS = {
    "contig": lambda x: x,
    "transposed": lambda x: x.transpose(-1, -2) if x.dim() >= 2 else x,
    "strided": lambda x: x[..., ::2] if x.dim() else x,
}


def _grad(dtype):
    return dtype.is_floating_point and dtype != torch.bfloat16


# ---------------------------------------------------------------- table: one-input ops
UNARY = [
    ("flip", lambda x: x.flip(0, -1)),
    ("flip_one", lambda x: x.flip(-1)),
    ("roll", lambda x: x.roll((1, -2), (0, -1))),
    ("roll_flat", lambda x: x.roll(3)),
    ("repeat", lambda x: x.repeat(2, 1, 3)),
    ("repeat_same_rank", lambda x: x.repeat(*([1] * (x.dim() - 1)), 2)),
    ("tile", lambda x: x.tile((2,))),
    ("rep_interleave_int", lambda x: x.repeat_interleave(2, dim=0)),
    ("rep_interleave_flat", lambda x: x.repeat_interleave(2)),
    ("pad_const", lambda x: F.pad(x, (1, 2, 0, 1), value=3)),
    ("pad_const_neg", lambda x: F.pad(x, (-1, 2, 1, -1))),
    ("diag_embed", lambda x: torch.diag_embed(x)),
    ("diag_embed_off", lambda x: torch.diag_embed(x, 1, 0, 2)),
    ("diag_embed_negoff", lambda x: torch.diag_embed(x, -2)),
    ("diagonal_copy", lambda x: torch.diagonal_copy(x)),
    ("diagonal_copy_off", lambda x: torch.diagonal_copy(x, -1)),
    ("diag_matrix", lambda x: torch.diag(x, 1)),
    ("diag_vector", lambda x: torch.diag(x[0], -1)),
    ("narrow_copy", lambda x: x.narrow_copy(-1, 1, 2)),
    ("movedim", lambda x: x.movedim(0, -1).contiguous()),
    ("rot90", lambda x: torch.rot90(x, 1, (0, 1))),
    ("fliplr", lambda x: torch.fliplr(x)),
    ("tril", lambda x: x.tril(-1)),
    ("unfold_copy", lambda x: x.unfold(-1, 2, 1).contiguous()),
    ("expand_copy", lambda x: x[:1].expand(3, -1).contiguous()),
    ("permute_copy", lambda x: torch.permute_copy(x, (1, 0))),
    ("t_copy", lambda x: torch.t_copy(x)),
    ("split_copy", lambda x: torch.split_copy(x, 2, -1)),
    ("split_with_sizes_copy", lambda x: torch.split_with_sizes_copy(x, [1, x.shape[-1] - 1], -1)),
    ("unbind_copy", lambda x: torch.unbind_copy(x, 0)),
]


@pytest.mark.parametrize("layout", list(LAYOUTS), ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name,fn", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, fn, dtype, layout):
    shape = (4, 8) if layout == "strided" else (4, 4)
    x = _rand(shape, dtype)
    lay = LAYOUTS[layout]
    if _grad(dtype) and name not in ("split_copy", "split_with_sizes_copy", "unbind_copy",
                                     "permute_copy", "t_copy"):
        x.requires_grad_()
        check(lambda x: fn(lay(x)), x, grad=True)
    else:
        check(lambda x: fn(lay(x)), x)


# the 2-D-only rows are left out
UNARY_3D = [u for u in UNARY if u[0] not in ("diag_matrix", "diag_vector", "rot90", "fliplr",
                                             "permute_copy", "t_copy", "expand_copy",
                                             "pad_const_neg")]


@pytest.mark.parametrize("name,fn", UNARY_3D, ids=[u[0] for u in UNARY_3D])
def test_unary_3d(name, fn):
    x = _rand((3, 4, 6)).requires_grad_()
    check(fn, x, grad=name not in ("split_copy", "split_with_sizes_copy", "unbind_copy"))


@pytest.mark.parametrize("name,fn", [
    ("flip", lambda x: x.flip(0)),
    ("roll", lambda x: x.roll(1, 0)),
    ("repeat", lambda x: x.repeat(2, 3)),
    ("pad_const", lambda x: F.pad(x, (1, 1))),
    ("cat", lambda x: torch.cat([x, x], 0)),
    ("stack", lambda x: torch.stack([x, x], 1)),
    ("diag_embed", lambda x: torch.diag_embed(x)),
    ("narrow_copy", lambda x: x.narrow_copy(0, 0, 0)),
])
@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0)], ids=str)
def test_empty(name, fn, shape):
    if name == "repeat" and len(shape) == 1:
        fn = lambda x: x.repeat(2)  # noqa: E731  (as many repeats as dims)
    if name in ("narrow_copy",) and shape[0] == 0:
        pass
    check(fn, torch.randn(shape))


@pytest.mark.parametrize("name,fn", [
    ("flip", lambda x: x.flip(())),
    ("roll", lambda x: x.roll(1)),
    ("repeat", lambda x: x.repeat(3, 2)),
    ("diag_embed_1", lambda x: torch.diag_embed(x.reshape(1))),
    ("stack", lambda x: torch.stack([x, x * 2])),
    ("cat", lambda x: torch.cat([x.reshape(1), x.reshape(1)])),
])
def test_zero_dim(name, fn):
    check(fn, torch.tensor(2.5, requires_grad=True), grad=True)


# ---------------------------------------------------------------- cat / stack
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dtype, dim):
    a, b, c = _rand((2, 3, 4), dtype), _rand((2, 3, 4), dtype), _rand((2, 3, 4), dtype)
    if _grad(dtype):
        a.requires_grad_(), b.requires_grad_()
    check(lambda a, b, c: torch.cat([a, b.transpose(1, 2).transpose(1, 2), c[:, :, :]], dim),
          a, b, c, grad=_grad(dtype))
    check(lambda a, b: torch.stack([a, b], dim), a, b, grad=_grad(dtype))
    check(lambda a, b: torch.cat([a[:, ::2], a[:, 1:2]], 1), a, b,
          grad=_grad(dtype))


def test_cat_promotion_and_legacy_empty():
    a = _rand((2, 3), torch.int32)
    b = _rand((2, 3), torch.float16)
    check(lambda a, b: torch.cat([a, b]), a, b)
    check(lambda a, b: torch.cat([a, b.double()], 1), a, b)
    check(lambda a, b: torch.stack([a, b]), a, b)
    # 1-D empty tensors are skipped whatever the other shapes are
    e = torch.empty(0)
    check(lambda a, e: torch.cat([e, a, e]), a, e)
    check(lambda a, e: torch.cat([a, e], 1), a.float().requires_grad_(), e, grad=True)
    check(lambda e: torch.cat([e, e]), e)
    check(lambda a: torch.cat([a[:0], a]), a)
    check(lambda a: torch.cat([a]), a)
    check(lambda a: torch.hstack([a, a]), a)
    check(lambda a: torch.vstack([a, a]), a)


def test_cat_out_and_errors():
    a = _rand((2, 3))
    check(lambda a: torch.cat([a, a], out=torch.empty(4, 3, device=a.device)), a)
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        torch.cat([a.to(DEV), torch.zeros(2, 4, device=DEV)])


# ---------------------------------------------------------------- padding
PAD_MODES = ["reflect", "replicate", "circular"]


@pytest.mark.parametrize("mode", PAD_MODES)
@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("dtype", FLOATS + [torch.bfloat16], ids=str)
def test_pad_modes(mode, nd, batched, dtype):
    spatial = {1: (7,), 2: (5, 6), 3: (4, 5, 6)}[nd]
    shape = ((2, 3) if batched else (3,)) + spatial
    pad = {1: (2, 3), 2: (1, 3, 2, 0), 3: (1, 2, 0, 3, 2, 1)}[nd]
    x = _rand(shape, dtype)
    g = _grad(dtype)
    if g:
        x.requires_grad_()
    atol = 1e-2 if dtype == torch.bfloat16 else None
    check(lambda x: F.pad(x, pad, mode=mode), x, grad=g, atol=atol, rtol=atol)
    # non-contiguous input
    check(lambda x: F.pad(x.transpose(0, -1).contiguous().transpose(0, -1), pad, mode=mode), x,
          grad=g, atol=atol, rtol=atol)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_negative(mode):
    x = _rand((2, 6)).requires_grad_()
    op = getattr(torch.ops.aten, ("reflection" if mode == "reflect" else "replication") + "_pad1d")
    check(lambda x: op(x, [-1, 2]), x, grad=True)
    check(lambda x: op(x, [3, -2]), x, grad=True)


@pytest.mark.parametrize("dtype", DTYPES + [torch.complex64], ids=str)
def test_constant_pad_dtypes(dtype):
    x = _rand((3, 4), dtype)
    check(lambda x: torch.constant_pad_nd(x, [1, 1, 2, 0], 1), x)
    check(lambda x: torch.constant_pad_nd(x.t(), [0, 1]), x)
    check(lambda x: torch.constant_pad_nd(x, [-1, 0, 0, -3]), x)
    check(lambda x: torch.constant_pad_nd(x, [-2, -2, 0, 0]), x)


def test_pad_errors():
    x = _rand((2, 3)).to(DEV)
    with pytest.raises(RuntimeError):
        F.pad(x, (3, 3), mode="reflect")


# ---------------------------------------------------------------- *_scatter / *_backward
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scatters(dtype):
    x = _rand((4, 5, 6), dtype)
    g = _grad(dtype)
    s1 = _rand((4, 6), dtype)
    s2 = _rand((4, 2, 6), dtype)
    s3 = _rand((4, 5, 2), dtype)
    if g:
        for t in (x, s1, s2, s3):
            t.requires_grad_()
    check(lambda x, s: torch.select_scatter(x, s, 1, -2), x, s1, grad=g)
    check(lambda x, s: torch.slice_scatter(x, s, 1, 1, 3), x, s2, grad=g)
    check(lambda x, s: torch.slice_scatter(x, s, 2, 1, None, 3), x, s3, grad=g)
    check(lambda x, s: torch.slice_scatter(x, s, -1, -4, -1, 2), x, s3, grad=g)
    check(lambda x, s: torch.diagonal_scatter(x, s.t(), 0, 0, 2), x, _leaf(_rand((4, 5), dtype)),
          grad=g)
    check(lambda x, s: torch.diagonal_scatter(x, s.t(), 1, 1, 2), x, _leaf(_rand((5, 4), dtype)),
          grad=g)
    check(lambda x, s: torch.diagonal_scatter(x, s, -2, 2, 1), x, _leaf(_rand((4, 4), dtype)),
          grad=g)


def _leaf(t):
    return t.requires_grad_() if _grad(t.dtype) else t


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_view_backward_ops(dtype):
    x = _rand((4, 5, 6), dtype).requires_grad_()
    check(lambda x: x[:, 2] * 2, x, grad=True)                       # select_backward
    check(lambda x: x[:, 1:4:2] * 2, x, grad=True)                   # slice_backward
    check(lambda x: x[..., -3:] * 2, x, grad=True)
    check(lambda x: x.diagonal(1, 0, 2) * 2, x, grad=True)           # diagonal_backward
    check(lambda x: x.diagonal(-2, -1, 1) * 2, x, grad=True)
    check(lambda x: x.unfold(2, 3, 2) * 2, x, grad=True)             # unfold_backward
    check(lambda x: x.unfold(1, 2, 1) * 2, x, grad=True)
    check(lambda x: x.unfold(0, 1, 3) * 2, x, grad=True)
    check(lambda x: x.narrow(1, 1, 3) * 2, x, grad=True)
    check(lambda x: x[1] * 2, x, grad=True)
    check(lambda x: torch.ops.aten.diagonal_backward(x, (4, 5, 6, 6), 0, 2, 3), x)
    check(lambda x: torch.ops.aten.slice_backward(x, (4, 7, 6), 1, 2, 100, 1), x)
    check(lambda x: torch.ops.aten.select_backward(x[:, 0], (4, 3, 6), 1, -1), x)


def test_as_strided_scatter():
    x = _rand((4, 6)).requires_grad_()
    s = _rand((3, 2)).requires_grad_()
    check(lambda x, s: torch.as_strided_scatter(x, s, (3, 2), (6, 2), 1), x, s, grad=True)
    check(lambda x, s: torch.as_strided_scatter(x, s, (3, 2), (2, 1), 0), x, s)
    check(lambda x, s: torch.as_strided_scatter(x.t(), s, (3, 2), (1, 4), 2), x.detach(), s.detach())


# ---------------------------------------------------------------- repeat_interleave
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=str)
def test_repeat_interleave_tensor(dtype):
    r = torch.tensor([1, 0, 3, 2], dtype=dtype)
    check(lambda r: torch.repeat_interleave(r), r)
    check(lambda r: torch.repeat_interleave(r, output_size=6), r)
    check(lambda r: torch.repeat_interleave(r[::2]), r)
    check(lambda r: torch.repeat_interleave(r[:0]), r)
    check(lambda r: torch.repeat_interleave(r * 0), r)
    x = _rand((4, 3)).requires_grad_()
    check(lambda x, r: x.repeat_interleave(r, dim=0), x, r, grad=True)
    check(lambda x, r: x.t().repeat_interleave(r[:3], dim=0), x, r, grad=True)
    check(lambda x, r: x.repeat_interleave(r[:3], dim=1, output_size=4), x, r, grad=True)
    check(lambda x: x.repeat_interleave(3), x, grad=True)
    check(lambda x: x.repeat_interleave(torch.tensor(2, device=x.device), dim=1), x, grad=True)


def test_repeat_interleave_errors():
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        torch.repeat_interleave(torch.tensor([1, -1], device=DEV))
    with pytest.raises(RuntimeError, match="1D"):
        torch.repeat_interleave(torch.ones(2, 2, dtype=torch.long, device=DEV))


# ---------------------------------------------------------------- shuffles, im2col
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64], ids=str)
def test_shuffles(dtype):
    x = _rand((2, 8, 3, 4), dtype)
    g = _grad(dtype)
    if g:
        x.requires_grad_()
    check(lambda x: F.pixel_shuffle(x, 2), x, grad=g)
    check(lambda x: F.pixel_shuffle(x[0], 2), x, grad=g)
    check(lambda x: F.pixel_shuffle(x.reshape(1, 2, 8, 3, 4), 2), x, grad=g)
    check(lambda x: F.pixel_unshuffle(x.reshape(2, 2, 6, 8), 2), x, grad=g)
    check(lambda x: F.pixel_unshuffle(x.permute(0, 2, 1, 3), 2), x, grad=g)
    check(lambda x: F.channel_shuffle(x, 4), x, grad=g)
    check(lambda x: F.channel_shuffle(x.transpose(-1, -2), 2), x, grad=g)
    check(lambda x: torch.nn.ChannelShuffle(2)(x), x, grad=g)


@pytest.mark.parametrize("cfg", [
    dict(kernel_size=2),
    dict(kernel_size=(2, 3), padding=1, stride=(1, 2)),
    dict(kernel_size=3, dilation=2, padding=2, stride=2),
], ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_unfold_fold(cfg, dtype):
    x = _rand((2, 3, 7, 8), dtype).requires_grad_()
    check(lambda x: F.unfold(x, **cfg), x, grad=True)
    check(lambda x: F.unfold(x[0], **cfg), x, grad=True)
    check(lambda x: F.unfold(x.transpose(-1, -2), **cfg), x, grad=True)
    cols = F.unfold(x.detach(), **cfg)
    c = cols.clone().requires_grad_()
    check(lambda c: F.fold(c, (7, 8), **cfg), c, grad=True)
    check(lambda c: F.fold(c[0], (7, 8), **cfg), c, grad=True)


def test_meshgrid_and_composites():
    a = _rand((3,)).requires_grad_()
    b = _rand((4,)).requires_grad_()
    check(lambda a, b: torch.meshgrid(a, b, indexing="ij"), a, b)
    check(lambda a, b: [t * 1 for t in torch.meshgrid(a, b, indexing="xy")], a, b, grad=True)
    x = _rand((2, 3, 4)).requires_grad_()
    check(lambda x: torch.movedim(x, (0, 1), (2, 0)) * 1, x, grad=True)
    check(lambda x: torch.tile(x, (2, 1, 1, 2)), x, grad=True)
    check(lambda x: torch.dstack([x, x]), x, grad=True)
    check(lambda x: torch.column_stack([x[0], x[1]]), x, grad=True)


def test_native_ops_are_lowered():
    """These ops must reach a direct lowering (not a decomposition, not the CPU)."""
    torchneuron.reset_fallback_stats()
    x = _rand((2, 3, 4, 5)).to(DEV)
    torch.cat([x, x])
    torch.stack([x, x])
    F.pad(x, (1, 1, 1, 1), mode="reflect")
    F.pad(x, (1, 1, 1, 1), mode="replicate")
    F.pad(x, (1, 1))
    x.flip(0)
    x.roll(1, 0)
    x.repeat(1, 2, 1, 1)
    F.pixel_shuffle(x.reshape(2, 4, 3, 5), 2)
    F.unfold(x, 2)
    assert torchneuron.decomposition_stats() == {}
    assert torchneuron.fallback_stats() == {}

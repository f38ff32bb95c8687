"""Interpolation (F.interpolate, nn.Upsample) and grid sampling: neuron vs CPU, with gradients."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import DEV, check, check_or_raises, native_only, raises_like, tol


def _r(shape, dtype=torch.float32, grad=False):
    return torch.randn(shape, dtype=torch.float64).to(dtype).requires_grad_(grad)


# (id, input shape, interpolate kwargs)
CASES = [
    ("nearest1d_size", (2, 3, 7), dict(size=12, mode="nearest")),
    ("nearest1d_down", (2, 3, 11), dict(size=4, mode="nearest")),
    ("nearest2d_x2", (2, 3, 4, 5), dict(scale_factor=2, mode="nearest")),
    ("nearest2d_x3", (2, 3, 4, 5), dict(scale_factor=3, mode="nearest")),
    ("nearest2d_frac", (2, 3, 5, 7), dict(scale_factor=(1.7, 0.6), mode="nearest")),
    ("nearest2d_size", (2, 3, 5, 7), dict(size=(8, 3), mode="nearest")),
    ("nearest3d", (1, 2, 3, 4, 5), dict(size=(5, 6, 4), mode="nearest")),
    ("nearest_exact1d", (2, 3, 7), dict(size=12, mode="nearest-exact")),
    ("nearest_exact2d", (2, 3, 5, 7), dict(scale_factor=(1.7, 0.6), mode="nearest-exact")),
    ("nearest_exact3d", (1, 2, 3, 4, 5), dict(size=(5, 6, 4), mode="nearest-exact")),
    ("linear1d", (2, 3, 7), dict(size=12, mode="linear")),
    ("linear1d_ac", (2, 3, 7), dict(size=12, mode="linear", align_corners=True)),
    ("bilinear_up", (2, 3, 5, 7), dict(size=(9, 12), mode="bilinear")),
    ("bilinear_up_ac", (2, 3, 5, 7), dict(size=(9, 12), mode="bilinear", align_corners=True)),
    ("bilinear_down", (2, 3, 9, 8), dict(size=(4, 5), mode="bilinear")),
    ("bilinear_scale", (2, 3, 5, 7), dict(scale_factor=(1.5, 2.3), mode="bilinear")),
    ("bilinear_scale_norecompute", (2, 3, 5, 7), dict(scale_factor=0.6, mode="bilinear", recompute_scale_factor=False)),
    ("bilinear_scale_recompute", (2, 3, 5, 7), dict(scale_factor=1.3, mode="bilinear", recompute_scale_factor=True)),
    ("bilinear_to1", (2, 3, 5, 7), dict(size=(1, 1), mode="bilinear", align_corners=True)),
    ("bicubic_up", (2, 3, 5, 7), dict(size=(9, 12), mode="bicubic")),
    ("bicubic_up_ac", (2, 3, 5, 7), dict(size=(9, 12), mode="bicubic", align_corners=True)),
    ("bicubic_down", (2, 3, 9, 8), dict(size=(4, 5), mode="bicubic")),
    ("trilinear", (1, 2, 3, 4, 5), dict(size=(5, 6, 4), mode="trilinear")),
    ("trilinear_ac", (1, 2, 3, 4, 5), dict(scale_factor=1.5, mode="trilinear", align_corners=True)),
    ("bilinear_aa_down", (2, 3, 9, 11), dict(size=(4, 5), mode="bilinear", antialias=True)),
    ("bilinear_aa_up", (2, 3, 4, 5), dict(size=(7, 9), mode="bilinear", antialias=True)),
    ("bilinear_aa_ac", (2, 3, 9, 11), dict(scale_factor=0.4, mode="bilinear", antialias=True, align_corners=True)),
    ("bicubic_aa_down", (2, 3, 9, 11), dict(size=(4, 5), mode="bicubic", antialias=True)),
    ("bicubic_aa_up", (2, 3, 4, 5), dict(size=(7, 9), mode="bicubic", antialias=True)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name,shape,kw", CASES, ids=[c[0] for c in CASES])
def test_interpolate(name, shape, kw, dtype):
    x = _r(shape, dtype)
    try:
        F.interpolate(x, **kw)
    except (RuntimeError, NotImplementedError):
        pytest.skip(f"CPU has no {dtype} kernel for {name}")
    check(lambda x: F.interpolate(x, **kw), x, **tol(dtype, "upsample"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name,shape,kw", CASES, ids=[c[0] for c in CASES])
def test_interpolate_grad(name, shape, kw, dtype):
    check(lambda x: F.interpolate(x, **kw), _r(shape, dtype, grad=True), grad=True, **tol(dtype, "upsample"))


@pytest.mark.parametrize("name", ["nearest2d_frac", "bilinear_up", "bicubic_down", "bilinear_aa_down"])
def test_interpolate_noncontiguous_channels_last(name):
    _, shape, kw = next(c for c in CASES if c[0] == name)
    x = _r(shape)
    check(lambda x: F.interpolate(x, **kw), x.to(memory_format=torch.channels_last).requires_grad_(),
          grad=True, **tol(torch.float32, "upsample"))
    xt = _r(shape[:2] + shape[2:][::-1]).transpose(-1, -2).requires_grad_()
    check(lambda x: F.interpolate(x, **kw), xt, grad=True, **tol(torch.float32, "upsample"))


@pytest.mark.parametrize("kw", [dict(size=(9, 12), mode="bilinear"), dict(scale_factor=2, mode="nearest"),
                                dict(size=(4, 5), mode="bilinear", antialias=True),
                                dict(size=(7, 9), mode="bicubic"), dict(size=(3, 13), mode="bicubic", align_corners=True),
                                dict(size=(4, 5), mode="bicubic", antialias=True),
                                dict(size=(4, 5), mode="bilinear", antialias=True, align_corners=True),
                                dict(size=(9, 5), mode="bilinear", align_corners=True)], ids=str)
def test_interpolate_uint8(kw):
    x = torch.randint(0, 256, (1, 3, 6, 8), dtype=torch.uint8)
    try:
        F.interpolate(x, **kw)
    except (RuntimeError, NotImplementedError):
        pytest.skip("CPU has no uint8 kernel")
    check(lambda x: F.interpolate(x, **kw), x, atol=1, rtol=0)


def test_interpolate_empty():
    check(lambda x: F.interpolate(x, size=(6, 8), mode="bilinear"), _r((0, 3, 3, 4)))
    check(lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), _r((0, 3, 3, 4)))
    with pytest.raises(RuntimeError, match="Non-empty 3D data tensor expected"):
        F.interpolate(_r((2, 0, 3)).to("neuron"), size=5, mode="nearest-exact")


def test_upsample_modules():
    for m in [nn.Upsample(scale_factor=2, mode="nearest"), nn.Upsample(scale_factor=2, mode="bilinear"),
              nn.Upsample(size=(7, 9), mode="bicubic", align_corners=True), nn.UpsamplingBilinear2d(scale_factor=2),
              nn.UpsamplingNearest2d(size=(5, 5))]:
        check(m, _r((2, 3, 4, 4), grad=True), grad=True, **tol(torch.float32, "upsample"))


def test_upsample_direct_ops():
    x = _r((2, 3, 4, 5), grad=True)
    check(lambda x: torch.ops.aten.upsample_bilinear2d(x, [7, 9], False, scales_h=1.5, scales_w=2.0), x,
          grad=True, **tol(torch.float32, "upsample"))
    check(lambda x: torch.ops.aten.upsample_nearest2d(x, [8, 10]), x, grad=True)
    check(lambda x: torch.ops.aten._upsample_nearest_exact2d(x, [7, 11], 1.7, 2.2), x, grad=True)


def test_interpolate_errors():
    x = torch.randn(1, 3, 4, 4, device="neuron")
    for mode in ("bilinear", "nearest", "bicubic"):
        with pytest.raises(RuntimeError, match="sizes should be greater than 0"):
            F.interpolate(x, size=(0, 4), mode=mode)
    with pytest.raises(RuntimeError, match="sizes should be greater than 0"):
        F.interpolate(torch.randn(1, 3, 0, 4, device="neuron"), size=(3, 4), mode="bilinear")
    with pytest.raises((RuntimeError, NotImplementedError, ValueError)):
        F.interpolate(x, size=(4,), mode="bilinear")


# ---------------------------------------------------------------- grid sampling
GRID = [(m, p, ac) for m in ("bilinear", "nearest", "bicubic") for p in ("zeros", "border", "reflection")
        for ac in (False, True)]


@pytest.mark.parametrize("mode,pad,ac", GRID, ids=[f"{m}-{p}-{ac}" for m, p, ac in GRID])
def test_grid_sample_2d(mode, pad, ac):
    x = _r((2, 3, 5, 6), torch.float64, grad=True)
    g = (torch.rand(2, 4, 7, 2, dtype=torch.float64) * 2.6 - 1.3).requires_grad_()
    fn = lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=pad, align_corners=ac)  # noqa: E731
    check(fn, x, g, grad=True, **tol(torch.float64, "upsample"))
    check(fn, x.detach().float().requires_grad_(), g.detach().float().requires_grad_(), grad=True,
          atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode,pad,ac", [c for c in GRID if c[0] != "bicubic"],
                         ids=[f"{m}-{p}-{ac}" for m, p, ac in GRID if m != "bicubic"])
def test_grid_sample_3d(mode, pad, ac):
    x = _r((2, 3, 4, 5, 6), torch.float64, grad=True)
    g = (torch.rand(2, 3, 4, 2, 3, dtype=torch.float64) * 2.6 - 1.3).requires_grad_()
    check(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=pad, align_corners=ac), x, g,
          grad=True, **tol(torch.float64, "upsample"))


@pytest.mark.parametrize("ac", [False, True])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
def test_affine_grid_sample(ac, pad):
    # identity-ish affine grids land exactly on pixel centres and borders
    theta = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[0.9, 0.2, 0.1], [-0.1, 1.1, -0.2]]],
                         dtype=torch.float64, requires_grad=True)
    x = _r((2, 3, 5, 6), torch.float64, grad=True)

    def fn(x, theta):
        grid = F.affine_grid(theta, (2, 3, 4, 7), align_corners=ac)
        return F.grid_sample(x, grid, padding_mode=pad, align_corners=ac)

    check(fn, x, theta, grad=True, **tol(torch.float64, "upsample"))
    theta3 = _r((2, 3, 4), torch.float64, grad=True)
    check(lambda t: F.affine_grid(t, (2, 3, 3, 4, 5), align_corners=ac), theta3, grad=True, **tol(torch.float64, "upsample"))


def test_grid_sample_noncontiguous_and_nonfinite():
    x = _r((2, 6, 5, 3), grad=True).detach().transpose(1, 3).requires_grad_()
    g = (torch.rand(2, 2, 7, 4) * 2 - 1).transpose(1, 3).contiguous().transpose(1, 2)
    g = g.permute(0, 1, 2, 3)[..., :2].requires_grad_()
    check(lambda x, g: F.grid_sample(x, g, align_corners=False), x, g, grad=True, atol=1e-5, rtol=1e-5)
    gn = torch.rand(1, 2, 2, 2) * 2 - 1
    gn[0, 0, 0, 0] = float("nan")
    gn[0, 1, 1, 1] = float("inf")
    gn[0, 1, 0, 1] = float("-inf")
    for mode in ("bilinear", "nearest", "bicubic"):
        for pad in ("zeros", "border", "reflection"):
            check(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=pad, align_corners=False),
                  _r((1, 2, 4, 4)), gn, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool],
                         ids=str)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "linear", "bilinear", "bicubic",
                                  "trilinear"])
def test_integer_dtypes_accepted_or_refused_like_cpu(mode, dtype):
    """CPU's upsample kernels refuse most integer dtypes ('"compute_indices_weights_nearest"
    not implemented for 'Short''; the meta kernels take them): the same dtypes work and
    the same raise, with CPU's message (the kernel named depends on the layout)."""
    nd = {"linear": 3, "bilinear": 4, "bicubic": 4, "trilinear": 5}.get(mode)
    for n in ([nd] if nd else [3, 4, 5]):
        for c in (1, 3):
            x = (torch.arange(c * 4 ** (n - 2)) % 3).reshape((1, c) + (4,) * (n - 2)).to(dtype)
            xs = [x] + ([x.contiguous(memory_format=torch.channels_last)] if n == 4 else [])
            def fn(t):
                return F.interpolate(t, scale_factor=2, mode=mode)

            for v in xs:
                if mode.startswith("nearest"):
                    check_or_raises(fn, v, exact=True)
                    continue
                try:  # uint8 (bi)linear values: CPU's integer AVX path rounds its own way
                    expected = fn(v)
                except NotImplementedError:
                    raises_like(lambda v=v: fn(v), lambda v=v: fn(v.to(DEV)))
                    continue
                with native_only():
                    got = fn(v.to(DEV))
                assert got.shape == expected.shape and got.dtype == expected.dtype

"""Forward-mode AD on the device: torch.func.jvp / jacfwd and torch.autograd.forward_ad.

PyTorch's forward-mode formulas live above the backend (the autograd kernels), so
they run on any device whose ops they call are implemented; these rows check that
every such op is lowered (native, under TORCHNEURON_FALLBACK=error) and that the
tangents match the CPU's for the same primals and tangents."""
import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch.func import jacfwd, jvp

from helpers import DEV, assert_same, native_only, to_dev

A = (4, 6)
SQ = (5, 5)

# (name, fn, input shapes): fn takes float tensors and returns a tensor or a tuple
JVP = [
    ("add_mul", lambda x, y: x * y + 2 * x, [A, A]),
    ("div_pow", lambda x, y: x / (y.abs() + 1) + x.abs().pow(1.5), [A, A]),
    ("exp_log", lambda x: torch.exp(x) + torch.log(x.abs() + 1), [A]),
    ("trig", lambda x: torch.sin(x) * torch.cos(x) + torch.tan(x / 4), [A]),
    ("tanh_sigmoid", lambda x: torch.tanh(x) + torch.sigmoid(x), [A]),
    ("sqrt_rsqrt", lambda x: torch.sqrt(x.abs() + 1) + torch.rsqrt(x.abs() + 1), [A]),
    ("erf_lgamma", lambda x: torch.erf(x) + torch.lgamma(x.abs() + 1), [A]),
    ("where_clamp", lambda x, y: torch.where(x > 0, x, y).clamp(-0.5, 0.7), [A, A]),
    ("max_min_elem", lambda x, y: torch.maximum(x, y) - torch.minimum(x, y), [A, A]),
    ("relu_gelu", lambda x: F.relu(x) + F.gelu(x) + F.gelu(x, approximate="tanh"), [A]),
    ("silu_mish_elu", lambda x: F.silu(x) + F.mish(x) + F.elu(x), [A]),
    ("softplus_leaky", lambda x: F.softplus(x) + F.leaky_relu(x, 0.1) + F.hardswish(x), [A]),
    ("softmax", lambda x: F.softmax(x, -1), [A]),
    ("log_softmax", lambda x: F.log_softmax(x, 0), [A]),
    ("sum_mean", lambda x: (x.sum(), x.mean(1), x.sum(0, keepdim=True)), [A]),
    ("prod_cumsum", lambda x: (x.prod(1), x.cumsum(0), x.cumprod(1)), [A]),
    ("var_std", lambda x: (x.var(1), x.std(0), torch.var_mean(x, 1)[0]), [A]),
    ("amax_logsumexp", lambda x: (x.amax(1), torch.logsumexp(x, 0)), [A]),
    ("norm", lambda x: (torch.linalg.vector_norm(x), x.norm(dim=1)), [A]),
    ("sort_topk", lambda x: (x.sort(1)[0], x.topk(2, 1)[0]), [A]),
    ("max_dim", lambda x: x.max(1)[0] + x.min(0)[0].sum(), [A]),
    ("mm_bmm", lambda x, y: (x @ y.t(), torch.bmm(x.reshape(2, 2, 6), y.reshape(2, 6, 2))), [A, A]),
    ("addmm_einsum", lambda x, y: torch.addmm(x[:, :4], x, y.t()[:, :4]) +
     torch.einsum("ij,kj->ik", x, y)[:, :4], [A, A]),
    ("linear", lambda x, w, b: F.linear(x, w, b), [A, (3, 6), (3,)]),
    ("conv2d", lambda x, w: F.conv2d(x, w, padding=1), [(2, 3, 6, 6), (4, 3, 3, 3)]),
    ("conv1d_stride", lambda x, w: F.conv1d(x, w, stride=2), [(2, 3, 9), (4, 3, 3)]),
    ("max_pool_avg_pool", lambda x: (F.max_pool2d(x, 2), F.avg_pool2d(x, 2),
                                     F.adaptive_avg_pool2d(x, 3)), [(2, 3, 6, 6)]),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (6,), w, b), [A, (6,), (6,)]),
    ("group_norm", lambda x: F.group_norm(x, 2), [(2, 4, 5)]),
    ("rms_norm", lambda x, w: F.rms_norm(x, (6,), w), [A, (6,)]),
    ("batch_norm_train", lambda x: F.batch_norm(x, None, None, training=True), [(5, 3, 4)]),
    ("cross_entropy", lambda x: F.cross_entropy(x, torch.tensor([1, 0, 5, 2], device=x.device)),
     [A]),
    ("mse_l1_smooth", lambda x, y: F.mse_loss(x, y) + F.l1_loss(x, y) + F.smooth_l1_loss(x, y),
     [A, A]),
    ("bce_logits", lambda x, y: F.binary_cross_entropy_with_logits(x, torch.sigmoid(y)), [A, A]),
    ("shape_ops", lambda x: (torch.cat([x, x * 2], 0), torch.stack([x, -x]), x.t().flip(0),
                             x.roll(1, 1), x.repeat(2, 1), x.tril(), x[1:, ::2]), [A]),
    ("pad_modes", lambda x: (F.pad(x, (1, 2)), F.pad(x, (2, 1), mode="reflect"),
                             F.pad(x, (1, 1), mode="replicate")), [(2, 3, 6)]),
    ("index_gather", lambda x: (x[torch.tensor([2, 0, 3], device=x.device)],
                                x.gather(1, torch.tensor([[0, 5], [1, 1], [2, 3], [4, 0]],
                                                         device=x.device)),
                                x.index_select(1, torch.tensor([5, 1], device=x.device))), [A]),
    ("scatter_add", lambda x, s: x.scatter_add(0, torch.tensor([[0, 1, 2, 3, 0, 1]] * 2,
                                                               device=x.device), s), [A, (2, 6)]),
    ("embedding", lambda w: F.embedding(torch.tensor([[1, 3], [0, 3]], device=w.device), w), [(5, 4)]),
    ("upsample", lambda x: (F.interpolate(x, scale_factor=2, mode="nearest"),
                            F.interpolate(x, size=(7, 5), mode="bilinear", align_corners=False)),
     [(1, 2, 4, 3)]),
    ("inv_det_solve", lambda a, b: (torch.linalg.inv(a + 5 * torch.eye(5, device=a.device)),
                                    torch.linalg.det(a),
                                    torch.linalg.solve(a + 5 * torch.eye(5, device=a.device), b)),
     [SQ, SQ]),
    ("cholesky_qr", lambda a: (torch.linalg.cholesky(a @ a.mT + torch.eye(5, device=a.device)),
                               torch.linalg.qr(a)[1].abs()), [SQ]),
]


def _make(shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]


def _run_jvp(fn, primals, tangents):
    out, tan = jvp(fn, tuple(primals), tuple(tangents))
    return out, tan


@pytest.mark.parametrize("name,fn,shapes", JVP, ids=[r[0] for r in JVP])
def test_jvp_matches_cpu(name, fn, shapes):
    primals = _make(shapes, 0)
    tangents = _make(shapes, 1)
    exp_out, exp_tan = _run_jvp(fn, primals, tangents)
    with native_only():
        out, tan = _run_jvp(fn, to_dev(primals), to_dev(tangents))
    assert_same(out, exp_out, atol=1e-10, rtol=1e-8, msg="primal")
    assert_same(tan, exp_tan, atol=1e-10, rtol=1e-8, msg="tangent")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_forward_ad_dual_tensors(dtype):
    x = torch.randn(3, 4).to(dtype)
    t = torch.randn(3, 4).to(dtype)
    w = torch.randn(5, 4).to(dtype)

    def f(x):
        return torch.tanh(F.linear(x, w)).sum(1) * x.mean()

    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    with fwAD.dual_level():
        y = f(fwAD.make_dual(x, t))
        p, tan = fwAD.unpack_dual(y)
    wd = w.to(DEV)
    with native_only(), fwAD.dual_level():
        yd = torch.tanh(F.linear(fwAD.make_dual(x.to(DEV), t.to(DEV)), wd)).sum(1)
        yd = yd * fwAD.make_dual(x.to(DEV), t.to(DEV)).mean()
        pd, tand = fwAD.unpack_dual(yd)
        assert tand.device == DEV and tand.dtype == dtype
    assert_same(pd, p, **tol, msg="primal")
    assert_same(tand, tan, **tol, msg="tangent")


def test_jacfwd_matches_jacrev_and_cpu():
    lin = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()
    x = torch.randn(6, dtype=torch.float64)
    expected = jacfwd(lin)(x)
    lin_d = lin.to(DEV)
    with native_only():
        got = jacfwd(lin_d)(x.to(DEV))
        rev = torch.func.jacrev(lin_d)(x.to(DEV))
    assert got.device == DEV and got.shape == (3, 6)
    assert_same(got, expected, atol=1e-10, rtol=1e-8)
    assert_same(rev, expected, atol=1e-10, rtol=1e-8)


def test_hessian_forward_over_reverse():
    def f(x):
        return (torch.sin(x) * x.pow(2)).sum()

    x = torch.randn(5, dtype=torch.float64)
    expected = torch.func.hessian(f)(x)
    with native_only():
        got = torch.func.hessian(f)(x.to(DEV))
    assert_same(got, expected, atol=1e-10, rtol=1e-8)


def test_forward_ad_inplace_and_views():
    x = torch.randn(4, 4, dtype=torch.float64)
    t = torch.randn(4, 4, dtype=torch.float64)

    def f(x):
        y = x.clone()
        y[1:3].mul_(2).add_(1)
        y.t()[0].copy_(x[0] * 3)
        return y.exp()

    exp_out, exp_tan = jvp(f, (x,), (t,))
    with native_only():
        out, tan = jvp(f, (x.to(DEV),), (t.to(DEV),))
    assert_same(out, exp_out, atol=1e-12, rtol=1e-10)
    assert_same(tan, exp_tan, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("causal", [False, True])
def test_jvp_scaled_dot_product_attention(causal):
    # the CPU's fused kernel has no forward-mode formula: its reference is the math kernel
    shapes = [(2, 3, 5, 4)] * 3
    primals, tangents = _make(shapes, 0), _make(shapes, 1)
    keep = torch.rand(5, 5, generator=torch.Generator().manual_seed(2)) > 0.3
    keep[:, 0] = True  # no fully masked row
    # an additive float mask (the math kernel takes it as is; a bool one is converted first)
    mask = None if causal else torch.zeros(5, 5, dtype=torch.float64).masked_fill(~keep, -torch.inf)

    def ref(q, k, v):
        return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, mask, 0.0, causal)[0]

    exp_out, exp_tan = _run_jvp(ref, primals, tangents)
    mask_d = None if mask is None else mask.to(DEV)
    with native_only():
        out, tan = _run_jvp(lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask_d, is_causal=causal), to_dev(primals), to_dev(tangents))
        # and through the dual-tensor API
        with fwAD.dual_level():
            duals = [fwAD.make_dual(p, t) for p, t in zip(to_dev(primals), to_dev(tangents))]
            tan2 = fwAD.unpack_dual(F.scaled_dot_product_attention(
                *duals, attn_mask=mask_d, is_causal=causal)).tangent
    assert_same(out, exp_out, atol=1e-10, rtol=1e-8, msg="primal")
    assert_same(tan, exp_tan, atol=1e-10, rtol=1e-8, msg="tangent")
    assert_same(tan2, exp_tan, atol=1e-10, rtol=1e-8, msg="tangent (dual tensors)")

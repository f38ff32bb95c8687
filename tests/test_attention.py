"""Scaled dot-product attention and nn.MultiheadAttention: neuron vs CPU, with gradients."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchneuron
from helpers import check, tol
from torchneuron.kernels import attention


def _r(shape, dtype=torch.float32, grad=False):
    return torch.randn(shape, dtype=torch.float64).to(dtype).requires_grad_(grad)


@pytest.fixture(params=["fused", "math"])
def sdpa_mode(request, monkeypatch):
    monkeypatch.setattr(attention, "_MODE", request.param)
    return request.param


# (id, q shape, k shape, v shape, kwargs, mask shape or None, mask kind)
CASES = [
    ("basic", (2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8), {}, None, None),
    ("cross_len_dv", (2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4), {}, None, None),
    ("causal", (2, 3, 6, 8), (2, 3, 6, 8), (2, 3, 6, 8), {"is_causal": True}, None, None),
    ("causal_rect", (1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8), {"is_causal": True}, None, None),
    ("scale", (2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8), {"scale": 0.3}, None, None),
    ("3d", (4, 5, 8), (4, 6, 8), (4, 6, 8), {}, None, None),
    ("float_mask_2d", (2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8), {}, (5, 6), "float"),
    ("float_mask_b1", (2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8), {}, (2, 1, 5, 6), "float"),
    ("float_mask_full", (2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8), {}, (2, 3, 5, 6), "float"),
    ("bool_mask", (2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8), {}, (2, 1, 5, 6), "bool"),
    ("bool_mask_key_padding", (2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8), {}, (2, 1, 1, 6), "bool"),
    ("gqa", (2, 6, 5, 8), (2, 2, 7, 8), (2, 2, 7, 4), {"enable_gqa": True}, None, None),
    ("gqa_causal_mask", (1, 4, 5, 8), (1, 2, 5, 8), (1, 2, 5, 8), {"enable_gqa": True}, (5, 5), "float"),
    ("5d_math", (2, 2, 3, 5, 8), (2, 2, 3, 5, 8), (2, 2, 3, 5, 8), {}, None, None),
    ("bcast_batch_math", (2, 3, 5, 8), (1, 3, 5, 8), (1, 3, 5, 8), {}, None, None),
]


def _args(qs, ks, vs, ms, mk, dtype, grad):
    args = [_r(qs, dtype, grad), _r(ks, dtype, grad), _r(vs, dtype, grad)]
    if ms is not None:
        if mk == "bool":
            m = torch.rand(ms) > 0.3
            m[..., 0] = True  # keep at least one key per row
            args.append(m)
        else:
            args.append(_r(ms, dtype, grad))
    return args


def _fn(kwargs):
    def f(q, k, v, *m):
        return F.scaled_dot_product_attention(q, k, v, *m, **kwargs)
    return f


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name,qs,ks,vs,kw,ms,mk", CASES, ids=[c[0] for c in CASES])
def test_sdpa_forward(name, qs, ks, vs, kw, ms, mk, dtype, sdpa_mode):
    args = _args(qs, ks, vs, ms, mk, dtype, False)
    check(_fn(kw), *args, **tol(dtype, "attention"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name,qs,ks,vs,kw,ms,mk", CASES, ids=[c[0] for c in CASES])
def test_sdpa_grad(name, qs, ks, vs, kw, ms, mk, dtype, sdpa_mode):
    args = _args(qs, ks, vs, ms, mk, dtype, True)
    check(_fn(kw), *args, grad=True, **tol(dtype, "attention"))


def test_sdpa_bf16_grad():
    args = _args((2, 3, 5, 16), (2, 3, 6, 16), (2, 3, 6, 16), (5, 6), "float", torch.bfloat16, True)
    check(_fn({}), *args, grad=True, atol=5e-2, rtol=5e-2)


def test_sdpa_uses_fused_op(monkeypatch):
    monkeypatch.setattr(attention, "_MODE", "fused")
    seen = []
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    q = _r((2, 3, 5, 8), grad=True).detach().to("neuron").requires_grad_()
    with Log():
        F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    names = {f.name() for f in seen}
    assert "aten::_scaled_dot_product_fused_attention_overrideable" in names
    assert "aten::_scaled_dot_product_fused_attention_overrideable_backward" in names
    assert "aten::bmm" not in names


def test_sdpa_fully_masked_rows(sdpa_mode):
    q, k, v = _r((1, 2, 4, 8), grad=True), _r((1, 2, 5, 8), grad=True), _r((1, 2, 5, 8), grad=True)
    m = torch.ones(4, 5, dtype=torch.bool)
    m[1] = False
    check(_fn({}), q, k, v, m, grad=True, **tol(torch.float32, "attention"))
    mf = torch.zeros(4, 5)
    mf[2] = float("-inf")
    check(_fn({}), q, k, v, mf, grad=True, **tol(torch.float32, "attention"))


def test_sdpa_noncontiguous(sdpa_mode):
    # the usual layout: (B, L, H, E) projections viewed as (B, H, L, E)
    q, k, v = (_r((2, 5, 3, 8)).transpose(1, 2).requires_grad_() for _ in range(3))
    check(_fn({"is_causal": True}), q, k, v, grad=True, **tol(torch.float32, "attention"))


def test_sdpa_mask_and_causal_error(sdpa_mode):
    # documented: an error when both are set (CPU's math path raises it; its flash
    # kernel, used without gradients, silently applies both)
    q = torch.randn(1, 2, 5, 8, requires_grad=True)
    m = torch.zeros(5, 5, requires_grad=True)
    with pytest.raises(RuntimeError, match="should not be set when is_causal"):
        F.scaled_dot_product_attention(q, q, q, m, is_causal=True)
    qd, md = q.detach().to("neuron"), m.detach().to("neuron")
    with pytest.raises(RuntimeError, match="should not be set when is_causal"):
        F.scaled_dot_product_attention(qd, qd, qd, md, is_causal=True)


def test_sdpa_dropout_runs_natively():
    q = _r((2, 3, 5, 8)).to("neuron")
    with torchneuron.fallback_policy("error"):
        torch.manual_seed(0)
        a = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
        torch.manual_seed(0)
        b = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
        c = F.scaled_dot_product_attention(q, q, q, dropout_p=0.0)
    assert a.shape == (2, 3, 5, 8)
    torch.testing.assert_close(a.cpu(), b.cpu())  # same seed, same mask
    assert not torch.allclose(a.cpu(), c.cpu())


def test_sdpa_errors():
    q = torch.randn(2, 3, 5, 8, device="neuron")
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, torch.randn(2, 3, 5, 7, device="neuron"), q)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, q.double(), q)


# ---------------------------------------------------------------- MultiheadAttention
def _functional(module):
    names = [n for n, _ in module.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in module.parameters()]

    def f(*args, **kw):
        n = len(args) - len(params)
        return torch.func.functional_call(module, dict(zip(names, args[n:])), args[:n], kw)

    return f, params


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention(batch_first, need_weights):
    torch.manual_seed(0)
    m = nn.MultiheadAttention(16, 4, batch_first=batch_first)
    f, params = _functional(m)
    shape = (2, 5, 16) if batch_first else (5, 2, 16)
    x = _r(shape, grad=True)
    kpm = torch.zeros(2, 5, dtype=torch.bool)
    kpm[1, -2:] = True

    def g(x, kpm, *ps):
        out, w = f(x, x, x, *ps, need_weights=need_weights, key_padding_mask=kpm)
        return (out, w) if need_weights else out

    check(g, x, kpm, *params, grad=True, atol=1e-5, rtol=1e-4)


def test_multihead_attention_cross_kdim_mask():
    torch.manual_seed(0)
    m = nn.MultiheadAttention(12, 3, kdim=6, vdim=10, batch_first=True)
    f, params = _functional(m)
    q, k, v = _r((2, 4, 12), grad=True), _r((2, 7, 6), grad=True), _r((2, 7, 10), grad=True)
    mask = torch.triu(torch.ones(4, 7, dtype=torch.bool), 1)

    def g(q, k, v, mask, *ps):
        return f(q, k, v, *ps, attn_mask=mask, need_weights=False)[0]

    check(g, q, k, v, mask, *params, grad=True, atol=1e-5, rtol=1e-4)


def test_transformer_encoder_layer():
    torch.manual_seed(0)
    m = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
    f, params = _functional(m)
    mask = nn.Transformer.generate_square_subsequent_mask(6)

    def g(x, mask, *ps):
        return f(x, *ps, src_mask=mask, is_causal=True)

    check(g, _r((2, 6, 16), grad=True), mask, *params, grad=True, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_transformer_decoder_layer_float64_gradcheck(bias, norm_first):
    """gradcheck (as PyTorch's module tests run it, float64) passes like on CPU: its
    undefined-gradient pass sends an undefined grad_out into the fused attention backward
    (was: AttributeError 'NoneType' object has no attribute 'dtype')."""
    torch.manual_seed(0)
    ref = nn.TransformerDecoderLayer(4, 2, 16, dropout=0.0, bias=bias,
                                     norm_first=norm_first).double()
    m = nn.TransformerDecoderLayer(4, 2, 16, dropout=0.0, bias=bias,
                                   norm_first=norm_first).double()
    m.load_state_dict(ref.state_dict())
    m = m.to("neuron")
    g = torch.Generator().manual_seed(1)
    a = torch.randn(2, 3, 4, dtype=torch.float64, generator=g)
    b = torch.randn(2, 3, 4, dtype=torch.float64, generator=g)
    for mod, dev in ((ref, "cpu"), (m, "neuron")):
        x, y = a.to(dev, copy=True).requires_grad_(), b.to(dev, copy=True).requires_grad_()
        assert torch.autograd.gradcheck(mod, (x, y), fast_mode=True,
                                        check_batched_grad=False)
    x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
    ref(x, y).sum().backward()
    xd, yd = a.to("neuron").requires_grad_(), b.to("neuron").requires_grad_()
    m(xd, yd).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(yd.grad.cpu(), y.grad, atol=1e-10, rtol=1e-10)

"""Recurrent layers on the device (fused LSTM/GRU cells), forward and backward, vs CPU, natively."""
import pytest
import torch

from helpers import DEV, assert_same, native_only

RNNS = [
    ("lstm", torch.nn.LSTM, dict()),
    ("lstm_2layer_batch_first", torch.nn.LSTM, dict(num_layers=2, batch_first=True)),
    ("lstm_bidirectional", torch.nn.LSTM, dict(bidirectional=True)),
    ("lstm_no_bias", torch.nn.LSTM, dict(bias=False)),
    ("lstm_proj", torch.nn.LSTM, dict(proj_size=3)),
    ("gru", torch.nn.GRU, dict()),
    ("gru_2layer_bidirectional", torch.nn.GRU, dict(num_layers=2, bidirectional=True)),
    ("gru_no_bias", torch.nn.GRU, dict(bias=False)),
    ("rnn_tanh", torch.nn.RNN, dict()),
    ("rnn_relu", torch.nn.RNN, dict(nonlinearity="relu", num_layers=2)),
]


def _pair(cls, *args, **kw):
    torch.manual_seed(0)
    m = cls(*args, **kw)
    d = cls(*args, **kw).to(DEV)
    d.load_state_dict(m.state_dict())
    return m, d


@pytest.mark.parametrize("name,cls,kw", RNNS, ids=[r[0] for r in RNNS])
def test_recurrent_layer_forward_backward(name, cls, kw):
    m, d = _pair(cls, 5, 7, **kw)
    x = torch.randn(4, 3, 5, requires_grad=True)
    xd = x.detach().to(DEV).requires_grad_()
    out, hid = m(x)
    with native_only():
        dout, dhid = d(xd)
        loss = dout.pow(2).sum() + (sum(h.sum() for h in dhid) if isinstance(dhid, tuple) else dhid.sum())
        loss.backward()
    (out.pow(2).sum() + (sum(h.sum() for h in hid) if isinstance(hid, tuple) else hid.sum())).backward()
    assert_same(dout, out.detach(), atol=1e-5, rtol=1e-5)
    assert_same(xd.grad, x.grad, atol=1e-5, rtol=1e-5)
    for p, q in zip(m.parameters(), d.parameters()):
        assert_same(q.grad, p.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_cells_with_given_state(bias):
    x = torch.randn(3, 5)
    h, c = torch.randn(3, 7), torch.randn(3, 7)
    lc, dlc = _pair(torch.nn.LSTMCell, 5, 7, bias=bias)
    gc, dgc = _pair(torch.nn.GRUCell, 5, 7, bias=bias)
    xd, hd, cd = (t.to(DEV).requires_grad_() for t in (x, h, c))
    x.requires_grad_(), h.requires_grad_(), c.requires_grad_()
    hy, cy = lc(x, (h, c))
    g = gc(x, h)
    (hy.sum() * 2 + cy.pow(2).sum() + g.pow(3).sum()).backward()
    with native_only():
        dhy, dcy = dlc(xd, (hd, cd))
        dg = dgc(xd, hd)
        (dhy.sum() * 2 + dcy.pow(2).sum() + dg.pow(3).sum()).backward()
    assert_same(dhy, hy.detach(), atol=1e-5, rtol=1e-5)
    assert_same(dcy, cy.detach(), atol=1e-5, rtol=1e-5)
    assert_same(dg, g.detach(), atol=1e-5, rtol=1e-5)
    for a, b in ((xd, x), (hd, h), (cd, c)):
        assert_same(a.grad, b.grad, atol=1e-5, rtol=1e-5)
    for p, q in zip(list(lc.parameters()) + list(gc.parameters()),
                    list(dlc.parameters()) + list(dgc.parameters())):
        assert_same(q.grad, p.grad, atol=1e-5, rtol=1e-5)


def test_lstm_bfloat16_forward_close_to_float32():
    m, d = _pair(torch.nn.LSTM, 5, 7)
    x = torch.randn(4, 3, 5)
    ref, _ = m(x)
    with native_only():
        out, _ = d.to(torch.bfloat16)(x.to(DEV, torch.bfloat16))
    assert out.dtype == torch.bfloat16
    assert_same(out.float(), ref.detach(), atol=3e-2, rtol=3e-2)


def test_lstm_double_backward_runs_natively():
    # with create_graph the cell's backward goes through PyTorch's differentiable formula
    m, d = _pair(torch.nn.LSTMCell, 4, 3)
    x = torch.randn(2, 4, requires_grad=True)
    xd = x.detach().to(DEV).requires_grad_()
    (gx,) = torch.autograd.grad(m(x)[0].pow(2).sum(), x, create_graph=True)
    gx.sum().backward()
    with native_only():
        (dgx,) = torch.autograd.grad(d(xd)[0].pow(2).sum(), xd, create_graph=True)
        dgx.sum().backward()
    assert_same(dgx, gx.detach(), atol=1e-5, rtol=1e-5)
    for p, q in zip(m.parameters(), d.parameters()):
        assert_same(q.grad, p.grad, atol=1e-5, rtol=1e-5)

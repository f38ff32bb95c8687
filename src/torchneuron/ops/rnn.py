"""Fused LSTM and GRU cells: the kernels nn.LSTM / nn.GRU / nn.LSTMCell / nn.GRUCell use.

On CUDA and PrivateUse1, ``at::lstm`` / ``at::gru`` (and the cells) compute the
two gate matmuls with ordinary ops and hand the pointwise part of each step to
``_thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell``, whose backward kernels read
the activated gates back from a ``workspace`` output.  The CPU has no kernels
for these ops (so the CPU fallback cannot run them); the workspace layouts here
are CUDA's (aten/src/ATen/native/cuda/RNN.cu), so PyTorch's autograd formulas
work unchanged:

- LSTM workspace ``(batch, 4*hidden)``: sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)
- GRU workspace ``(batch, 5*hidden)``: reset, input (update) gate, new gate, hx,
  and the hidden part of the new gate (hidden bias included)

Computed in float32 for half dtypes (CUDA's accumulate type), rounded once.
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import nn as jnn

from ..numerics import upcast
from ..lowering import lower, meta_kernel


def _bias(b):
    return 0 if b is None else b


# ---------------------------------------------------------------- meta kernels
# PyTorch has none for the GRU cell ops (CUDA-only ops), and its LSTM cell one fails
# on bias=None (it reads None.device); the executable builder needs them.
def _cell_meta(name, ngates, nstates, nwork):
    def meta(input_gates, hidden_gates, state, input_bias=None, hidden_bias=None):
        if input_gates.dim() != 2 or input_gates.shape != hidden_gates.shape:
            raise RuntimeError(f"{name}: input_gates and hidden_gates must be 2-D and of the "
                               "same size")
        n, hg = input_gates.shape
        hsz = hg // ngates
        if hg % ngates or tuple(state.shape) != (n, hsz):
            raise RuntimeError(f"{name}: the state has size {list(state.shape)}, expected "
                               f"{[n, hsz]}")
        # (hy[, cy], workspace of nwork * hidden columns)
        return (*(state.new_empty((n, hsz)) for _ in range(nstates)),
                state.new_empty((n, nwork * hsz)))

    return meta


def _gru_cell_backward_meta(grad_hy, workspace, has_bias):
    n, h5 = workspace.shape
    hsz = h5 // 5
    grads = (workspace.new_empty((n, 3 * hsz)), workspace.new_empty((n, 3 * hsz)),
             workspace.new_empty((n, hsz)))
    if not has_bias:  # undefined bias gradients, as CUDA returns
        return (*grads, None, None)
    return (*grads, workspace.new_empty((3 * hsz,)), workspace.new_empty((3 * hsz,)))


meta_kernel("_thnn_fused_lstm_cell", _cell_meta("_thnn_fused_lstm_cell", 4, 2, 4), replace=True)
meta_kernel("_thnn_fused_gru_cell", _cell_meta("_thnn_fused_gru_cell", 3, 1, 5))
meta_kernel("_thnn_fused_gru_cell_backward", _gru_cell_backward_meta)


# ---------------------------------------------------------------- LSTM
@lower("_thnn_fused_lstm_cell.default")
def fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    dt = cx.dtype
    ig, hg, c, ib, hb = upcast(input_gates, hidden_gates, cx, input_bias, hidden_bias)
    gates = ig + hg + _bias(ib) + _bias(hb)
    i, f, g, o = jnp.split(gates, 4, axis=1)
    i, f, g, o = jnn.sigmoid(i), jnn.sigmoid(f), jnp.tanh(g), jnn.sigmoid(o)
    cy = f * c + i * g
    hy = o * jnp.tanh(cy)
    ws = jnp.concatenate([i, f, g, o], axis=1)
    return hy.astype(dt), cy.astype(dt), ws.astype(dt)


@lower("_thnn_fused_lstm_cell_backward_impl.default", static=("has_bias",))
def fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    dt = cx.dtype
    c, cyv, ws, gh, gc = upcast(cx, cy, workspace, grad_hy, grad_cy)
    i, f, g, o = jnp.split(ws, 4, axis=1)
    gh = jnp.zeros_like(cyv) if gh is None else gh
    gc = jnp.zeros_like(cyv) if gc is None else gc
    tcy = jnp.tanh(cyv)
    go = gh * tcy
    gcy = gh * o * (1 - tcy * tcy) + gc
    gi = gcy * g * (1 - i) * i
    gf = gcy * c * (1 - f) * f
    gg = gcy * i * (1 - g * g)
    go = go * (1 - o) * o
    grad_gates = jnp.concatenate([gi, gf, gg, go], axis=1)
    grad_cx = gcy * f
    grad_bias = grad_gates.sum(0).astype(dt) if has_bias else None
    return grad_gates.astype(dt), grad_cx.astype(dt), grad_bias


# ---------------------------------------------------------------- GRU
@lower("_thnn_fused_gru_cell.default")
def fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    dt = hx.dtype
    ig, hg, h, ib, hb = upcast(input_gates, hidden_gates, hx, input_bias, hidden_bias)
    ir, ii, inn = jnp.split(ig + _bias(ib), 3, axis=1)
    hr, hi, hn = jnp.split(hg + _bias(hb), 3, axis=1)
    r = jnn.sigmoid(ir + hr)
    z = jnn.sigmoid(ii + hi)
    n = jnp.tanh(inn + r * hn)
    hy = n + z * (h - n)
    ws = jnp.concatenate([r, z, n, h, hn], axis=1)
    return hy.astype(dt), ws.astype(dt)


@lower("_thnn_fused_gru_cell_backward.default", static=("has_bias",))
def fused_gru_cell_backward(grad_hy, workspace, has_bias):
    dt = workspace.dtype
    go, ws = upcast(grad_hy, workspace)
    r, z, n, h, hn = jnp.split(ws, 5, axis=1)
    gz = go * (h - n) * (1 - z) * z
    ghx = go * z
    gn = go * (1 - z) * (1 - n * n)
    ghn = gn * r
    gr = gn * hn * (1 - r) * r
    g_in = jnp.concatenate([gr, gz, gn], axis=1)
    g_hid = jnp.concatenate([gr, gz, ghn], axis=1)
    gib = g_in.sum(0).astype(dt) if has_bias else None
    ghb = g_hid.sum(0).astype(dt) if has_bias else None
    return g_in.astype(dt), g_hid.astype(dt), ghx.astype(dt), gib, ghb

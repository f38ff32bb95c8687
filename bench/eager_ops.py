"""Eager cost: torchneuron (op by op and fused) vs raw jax vs torch CPU.

    python bench/eager_ops.py [--reps N] [--quick] [--skip-ops] [--skip-programs]

Per op: for each op and size, the three systems run side by side in this one
process; the table reports microseconds per call (best of several rounds) and
the ratios torchneuron/jax and torchneuron/cpu.  Also times one training step of
the demo CNN on the neuron device and on the CPU.

Programs (issue 12's goals): elementwise chains of 4, 8 and 16 ops at 64x64, a
2-layer MLP forward+backward, an AdamW step, the demo CNN training step, a tiny
GPT-2's forward and 8-token greedy ``generate()``; each as fused eager, op-by-op
eager, the same computation as one jitted jax function (where one exists) and
torch CPU eager, side by side.  Every call ends with its result computed (a
synchronize, block_until_ready), so fused eager pays its program's run each time.
Writes reports/eager_ops.json and reports/eager_ops.png.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.nn.functional as F

import torchneuron  # noqa: F401
from torchneuron.runtime import jax_device

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _jax_sync(r):
    jax.block_until_ready(r)


def _tn_sync(r):
    torch.neuron.synchronize()


def _cpu_sync(r):
    pass


def timeit(fn, sync, reps, rounds=5):
    r = fn()
    sync(r)
    for _ in range(3):
        r = fn()
    sync(r)
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(reps):
            r = fn()
        sync(r)
        best = min(best, (time.perf_counter() - t) / reps)
    return best * 1e6


def cases(n):
    """(name, torch fn over tensors, jax fn over arrays, input shapes/dtypes)."""
    m = n
    img = (8, 16, max(n // 8, 8), max(n // 8, 8))
    return [
        ("add", lambda a, b: a + b, lambda a, b: a + b, [(m, m), (m, m)]),
        ("mul_scalar", lambda a: a * 0.5, lambda a: a * 0.5, [(m, m)]),
        ("relu", F.relu, jax.nn.relu, [(m, m)]),
        ("gelu", F.gelu, lambda a: jax.nn.gelu(a, approximate=False), [(m, m)]),
        ("sigmoid", torch.sigmoid, jax.nn.sigmoid, [(m, m)]),
        ("matmul", torch.matmul, lambda a, b: jnp.matmul(a, b, precision="highest"), [(m, m), (m, m)]),
        ("sum", torch.sum, jnp.sum, [(m, m)]),
        ("mean_dim", lambda a: a.mean(-1), lambda a: a.mean(-1), [(m, m)]),
        ("softmax", lambda a: torch.softmax(a, -1), lambda a: jax.nn.softmax(a, -1), [(m, m)]),
        ("layer_norm", lambda a: F.layer_norm(a, a.shape[-1:]),
         lambda a: (a - a.mean(-1, keepdims=True)) * jax.lax.rsqrt(a.var(-1, keepdims=True) + 1e-5),
         [(m, m)]),
        ("transpose_copy", lambda a: a.t().contiguous(), lambda a: a.T.copy(), [(m, m)]),
        ("cat", lambda a, b: torch.cat([a, b]), lambda a, b: jnp.concatenate([a, b]), [(m, m), (m, m)]),
        ("conv2d", lambda x, w: F.conv2d(x, w, padding=1),
         lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                                   dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                                   precision="highest"),
         [img, (16, 16, 3, 3)]),
        ("max_pool2d", lambda x: F.max_pool2d(x, 2),
         lambda x: jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID"),
         [img]),
        ("inplace_add_", lambda a, b: a.add_(b), lambda a, b: a + b, [(m, m), (m, m)]),
        ("index_select", lambda a, i: a.index_select(0, i), lambda a, i: a[i], [(m, m), ("idx", m)]),
    ]


def make_inputs(shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for s in shapes:
        if s[0] == "idx":
            out.append(torch.randint(0, s[1], (s[1] // 2,), generator=g))
        else:
            out.append(torch.randn(s, generator=g))
    return out


def bench_ops(sizes, reps, quick=False):
    rows = []
    dev = jax_device(0)
    for n in sizes:
        for name, tfn, jfn, shapes in cases(n):
            cpu = make_inputs(shapes)
            neu = [t.to("neuron") for t in cpu]
            jx = [jax.device_put(t.numpy(), dev) for t in cpu]
            jf = jax.jit(jfn)  # raw jax "eager" with its own per-op cache: one jit per op
            r = reps if n <= 128 else max(reps // 10, 5)
            t_tn = timeit(lambda: tfn(*neu), _tn_sync, r)
            t_jx = timeit(lambda: jf(*jx), _jax_sync, r)
            t_cpu = timeit(lambda: tfn(*cpu), _cpu_sync, r)
            rows.append({"op": name, "size": n, "torchneuron_us": t_tn, "jax_us": t_jx,
                         "cpu_us": t_cpu, "tn_over_jax": t_tn / t_jx, "tn_over_cpu": t_tn / t_cpu})
            print(f"{name:16s} {n:5d} {t_tn:10.1f} {t_jx:10.1f} {t_cpu:10.1f} "
                  f"{t_tn / t_jx:9.2f}x {t_tn / t_cpu:9.2f}x", flush=True)
    return rows


def bench_train_step(steps=20):
    from torchneuron.demo import DigitsCNN, _step

    out = {}
    for device in ("neuron", "cpu"):
        torch.manual_seed(0)
        model = DigitsCNN().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(64, 1, 8, 8).to(device)
        y = torch.randint(0, 10, (64,)).to(device)
        for _ in range(3):
            _step(model, opt, x, y)
        sync = _tn_sync if device == "neuron" else _cpu_sync
        out[device] = timeit(lambda: _step(model, opt, x, y), sync, steps, rounds=3) / 1000.0
    return out


def _chain(n_ops):
    """An elementwise chain of n_ops ops (torch and jax spellings of the same math)."""
    steps = [(lambda x, y: x * y, lambda x, y: x * y), (lambda x, y: x + y, lambda x, y: x + y),
             (lambda x, y: x.sin(), lambda x, y: jnp.sin(x)),
             (lambda x, y: x / (y + 3.0), lambda x, y: x / (y + 3.0))]

    def tfn(x, y):
        for i in range(n_ops):
            x = steps[i % 4][0](x, y)
        return x

    def jfn(x, y):
        for i in range(n_ops):
            x = steps[i % 4][1](x, y)
        return x

    return tfn, jfn


def _mlp(n=64):
    import torch.nn as nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(n, n), nn.ReLU(), nn.Linear(n, 10))


def _mlp_jax(params, x, y):
    def loss(p):
        h = jax.nn.relu(x @ p[0].T + p[1])
        z = h @ p[2].T + p[3]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(z), y[:, None], 1))
    return jax.value_and_grad(loss)(params)


def bench_programs(reps):
    """rows of {"program", "fused_us", "op_us", "jax_us", "cpu_us"} (None where absent)."""
    rows = []
    dev = jax_device(0)

    def tn(fn, mode, r):
        with torchneuron.eager_mode(mode):
            return timeit(lambda: _done(fn()), _tn_sync, r)

    def row(name, fn_neuron, fn_cpu, jfn=None, r=reps):
        fused = tn(fn_neuron, "fused", r)
        op = tn(fn_neuron, "op", r)
        jx = timeit(lambda: jax.block_until_ready(jfn()), _cpu_sync, r) if jfn else None
        cpu = timeit(fn_cpu, _cpu_sync, r)
        rows.append({"program": name, "fused_us": fused, "op_us": op, "jax_us": jx,
                     "cpu_us": cpu})
        jtxt = f"{jx:10.1f}" if jx else f"{'-':>10s}"
        rj = f"{fused / jx:8.2f}x" if jx else f"{'-':>9s}"
        print(f"{name:22s} {fused:10.1f} {op:10.1f} {jtxt} {cpu:10.1f} {op / fused:8.2f}x "
              f"{rj} {fused / cpu:8.2f}x", flush=True)

    print(f"\n{'program':22s} {'fused us':>10s} {'op us':>10s} {'jax us':>10s} {'cpu us':>10s} "
          f"{'op/fused':>9s} {'fused/jax':>9s} {'fused/cpu':>9s}")
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g).abs()
    an, bn = a.to("neuron"), b.to("neuron")
    aj, bj = jax.device_put(a.numpy(), dev), jax.device_put(b.numpy(), dev)
    for n_ops in (4, 8, 16):
        tfn, jfn = _chain(n_ops)
        jf = jax.jit(jfn)
        row(f"chain{n_ops} 64x64", lambda: tfn(an, bn), lambda: tfn(a, b),
            lambda: jf(aj, bj))

    # MLP forward + backward
    x, y = torch.randn(64, 64, generator=g), torch.randint(0, 10, (64,), generator=g)
    m_cpu = _mlp()
    m_n = _mlp().to("neuron")
    xn, yn = x.to("neuron"), y.to("neuron")

    def fwd_bwd(m, x, y):
        m.zero_grad(set_to_none=True)
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        return loss

    params = [jax.device_put(p.detach().numpy(), dev) for p in m_cpu.parameters()]
    xj, yj = jax.device_put(x.numpy(), dev), jax.device_put(y.numpy(), dev)
    jmlp = jax.jit(_mlp_jax)
    row("mlp64 fwd+bwd", lambda: fwd_bwd(m_n, xn, yn), lambda: fwd_bwd(m_cpu, x, y),
        lambda: jmlp(params, xj, yj))

    # AdamW step over the MLP's parameters (gradients in place)
    fwd_bwd(m_n, xn, yn)
    fwd_bwd(m_cpu, x, y)
    opt_n = torch.optim.AdamW(m_n.parameters(), lr=1e-3)
    opt_c = torch.optim.AdamW(m_cpu.parameters(), lr=1e-3)
    row("adamw step (mlp64)", lambda: opt_n.step() or m_n[0].weight,
        lambda: opt_c.step())

    # demo CNN training step
    from torchneuron.demo import DigitsCNN, _step

    torch.manual_seed(0)
    cnn_n, cnn_c = DigitsCNN().to("neuron"), DigitsCNN()
    o_n = torch.optim.AdamW(cnn_n.parameters(), lr=1e-3)
    o_c = torch.optim.AdamW(cnn_c.parameters(), lr=1e-3)
    xi, yi = torch.randn(64, 1, 8, 8, generator=g), torch.randint(0, 10, (64,), generator=g)
    xin, yin = xi.to("neuron"), yi.to("neuron")
    row("demo CNN train step", lambda: _step(cnn_n, o_n, xin, yin),
        lambda: _step(cnn_c, o_c, xi, yi), r=max(reps // 10, 10))

    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return rows
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=128, n_positions=64)
    torch.manual_seed(0)
    gpt_c = GPT2LMHeadModel(cfg).eval()
    gpt_n = GPT2LMHeadModel(cfg).eval()
    gpt_n.load_state_dict(gpt_c.state_dict())
    gpt_n.to("neuron")
    ids = torch.randint(0, 128, (1, 16), generator=g)
    ids_n = ids.to("neuron")

    def fwd(m, i):
        with torch.no_grad():
            return m(i).logits

    def gen(m, i):
        return m.generate(i, max_new_tokens=8, do_sample=False, pad_token_id=0)

    row("tiny GPT-2 forward", lambda: fwd(gpt_n, ids_n), lambda: fwd(gpt_c, ids),
        r=max(reps // 10, 10))
    row("tiny GPT-2 generate(8)", lambda: gen(gpt_n, ids_n), lambda: gen(gpt_c, ids),
        r=max(reps // 40, 3))
    return rows


def _done(r):
    """The call's results computed (fused eager: the pending program has run)."""
    torch.neuron.synchronize()
    return r


def chart_programs(rows, ax):
    x = np.arange(len(rows))
    w = 0.2
    for k, (key, label) in enumerate([("fused_us", "fused eager"), ("op_us", "op-by-op eager"),
                                      ("jax_us", "one jitted jax function"),
                                      ("cpu_us", "torch CPU eager")]):
        ax.bar(x + (k - 1.5) * w, [r[key] or 0 for r in rows], w, label=label)
    ax.set_xticks(x, [r["program"] for r in rows], rotation=40, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("µs per call (result computed)")
    ax.set_title("programs: fused vs op-by-op eager")
    ax.legend(fontsize=8)


def chart(rows, path, programs=()):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["size"] for r in rows})
    ncol = len(sizes) + (1 if programs else 0)
    fig, axes = plt.subplots(1, ncol, figsize=(7 * ncol, 5), squeeze=False)
    if programs:
        chart_programs(programs, axes[0][-1])
    for ax, n in zip(axes[0], sizes):
        rs = [r for r in rows if r["size"] == n]
        x = np.arange(len(rs))
        ax.bar(x - 0.27, [r["torchneuron_us"] for r in rs], 0.27, label="torchneuron eager")
        ax.bar(x, [r["jax_us"] for r in rs], 0.27, label="jax (jit per op)")
        ax.bar(x + 0.27, [r["cpu_us"] for r in rs], 0.27, label="torch CPU")
        ax.set_xticks(x, [r["op"] for r in rs], rotation=60, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("µs per call")
        ax.set_title(f"eager op cost, size {n}")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--sizes", default="64,512")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--skip-ops", action="store_true", help="only the programs")
    p.add_argument("--skip-programs", action="store_true", help="only the per-op table")
    p.add_argument("--out", default=os.path.join(ROOT, "reports"))
    a = p.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.quick:
        a.reps = 30
    import jaxlib

    print(f"torch {torch.__version__}  jax {jax.__version__}  jaxlib {jaxlib.__version__}  "
          f"platform {jax_device(0).platform}")
    print(f"{'op':16s} {'size':>5s} {'neuron us':>10s} {'jax us':>10s} {'cpu us':>10s} "
          f"{'tn/jax':>10s} {'tn/cpu':>10s}")
    rows, geo, step = [], None, None
    if not a.skip_ops:
        rows = bench_ops(sizes, a.reps, a.quick)
        small = [r for r in rows if r["size"] == min(sizes)]
        geo = float(np.exp(np.mean([np.log(r["tn_over_jax"]) for r in small])))
        print(f"\ngeometric mean torchneuron/jax at size {min(sizes)}: {geo:.2f}x "
              f"(goal: <= 2.50x)")
        step = bench_train_step(10 if a.quick else 20)
        print(f"demo CNN training step (batch 64): neuron {step['neuron']:.2f} ms, "
              f"cpu {step['cpu']:.2f} ms, neuron/cpu {step['neuron'] / step['cpu']:.2f}x")
    programs = [] if a.skip_programs else bench_programs(a.reps)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "eager_ops.json"), "w") as f:
        json.dump({"rows": rows, "train_step_ms": step, "geomean_small_tn_over_jax": geo,
                   "programs": programs,
                   "platform": jax_device(0).platform, "torch": torch.__version__,
                   "jax": jax.__version__}, f, indent=1)
    chart(rows, os.path.join(a.out, "eager_ops.png"), programs)
    print(f"wrote {a.out}/eager_ops.json and eager_ops.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

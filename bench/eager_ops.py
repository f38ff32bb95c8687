"""Eager per-op cost: torchneuron vs raw jax (the same computation in jnp) vs torch CPU.

    python bench/eager_ops.py [--reps N] [--quick]

For each op and size, the three systems run side by side in this one process;
the table reports microseconds per call (best of several rounds) and the
ratios torchneuron/jax and torchneuron/cpu.  Also times one training step of
the demo CNN on the neuron device and on the CPU.  Writes
reports/eager_ops.json and reports/eager_ops.png.
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


def chart(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["size"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(7 * len(sizes), 5), squeeze=False)
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
    rows = bench_ops(sizes, a.reps, a.quick)
    small = [r for r in rows if r["size"] == min(sizes)]
    geo = float(np.exp(np.mean([np.log(r["tn_over_jax"]) for r in small])))
    print(f"\ngeometric mean torchneuron/jax at size {min(sizes)}: {geo:.2f}x "
          f"(goal: <= 1.50x)")
    step = bench_train_step(10 if a.quick else 20)
    print(f"demo CNN training step (batch 64): neuron {step['neuron']:.2f} ms, "
          f"cpu {step['cpu']:.2f} ms, neuron/cpu {step['neuron'] / step['cpu']:.2f}x")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "eager_ops.json"), "w") as f:
        json.dump({"rows": rows, "train_step_ms": step, "geomean_small_tn_over_jax": geo,
                   "platform": jax_device(0).platform, "torch": torch.__version__,
                   "jax": jax.__version__}, f, indent=1)
    chart(rows, os.path.join(a.out, "eager_ops.png"))
    print(f"wrote {a.out}/eager_ops.json and eager_ops.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Collective bandwidth on the "neuron" c10d backend vs plain gloo on CPU tensors, and
the DDP step time of the demo at world 2 vs world 1.

    python bench/collectives.py [--nproc 2] [--max-mib 64] [--iters 5]
                                [--engines gloo,xla] [--out reports/collectives.json]

Runs itself under torchrun (--standalone, a free port).  For each collective
(all_reduce, all_gather_into_tensor, reduce_scatter_tensor) and each size from 4 KiB
to --max-mib MiB, the neuron-tensor call and the same call on CPU tensors (the gloo
that the neuron group wraps) alternate in one run; each keeps its best of --iters
timed calls (robust to other load).  Bus bandwidth follows nccl-tests: all_reduce
moves 2(n-1)/n of the buffer per rank, the other two (n-1)/n of the full buffer.
Each engine of the neuron backend (TORCHNEURON_COLLECTIVES: gloo over host memory, xla
inside XLA through jax.distributed) runs as its own torchrun launch, each against plain
gloo on CPU tensors in the same processes.  Prints a table with the neuron/gloo ratio,
writes JSON and a PNG chart.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPS = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor")


def _sizes(max_mib):
    s, out = 4 << 10, []
    while s <= max_mib << 20:
        out.append(s)
        s *= 4
    return out


def _worker(args):
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    dist.init_process_group(timeout=timedelta(minutes=5))
    r, w = dist.get_rank(), dist.get_world_size()
    rows = []
    sizes = _sizes(args.max_mib)
    total = len(sizes) * len(OPS)
    done = 0
    for nbytes in sizes:
        n = nbytes // 4
        for op in OPS:
            res = {}
            bufs = {}
            for dev in ("neuron", "cpu"):
                x = torch.ones(n, device=dev)
                if op == "all_reduce":
                    bufs[dev] = lambda x=x: dist.all_reduce(x)
                elif op == "all_gather_into_tensor":
                    o = torch.empty(n * w, device=dev)
                    xs = torch.ones(n, device=dev)
                    bufs[dev] = lambda o=o, xs=xs: dist.all_gather_into_tensor(o, xs)
                else:
                    o = torch.empty(n, device=dev)
                    xi = torch.ones(n * w, device=dev)
                    bufs[dev] = lambda o=o, xi=xi: dist.reduce_scatter_tensor(o, xi)
            for dev in bufs:  # warm up (compiles the device copies)
                bufs[dev]()
            best = {d: float("inf") for d in bufs}
            for _ in range(args.iters):
                for dev, f in bufs.items():
                    dist.barrier()
                    if dev == "neuron":
                        torch.neuron.synchronize()
                    t0 = time.perf_counter()
                    f()
                    if dev == "neuron":
                        torch.neuron.synchronize()
                    best[dev] = min(best[dev], time.perf_counter() - t0)
            # bus bandwidth (nccl-tests): bytes each rank moves over the slowest link
            full = nbytes * (w if op != "all_reduce" else 1)
            factor = 2 * (w - 1) / w if op == "all_reduce" else (w - 1) / w
            for dev in best:
                res[dev] = full * factor / best[dev] / 1e9
            rows.append({"engine": args.engine, "op": op, "bytes": nbytes, "neuron_GBps": res["neuron"],
                         "gloo_cpu_GBps": res["cpu"], "ratio": res["neuron"] / res["cpu"],
                         "neuron_s": best["neuron"], "gloo_cpu_s": best["cpu"]})
            done += 1
            if r == 0:
                print(f"\r[{done}/{total}] {op} {nbytes >> 10} KiB", end="", file=sys.stderr,
                      flush=True)
    if r == 0:
        print(file=sys.stderr)
        Path(args.part).write_text(json.dumps({"world": w, "rows": rows}))
    dist.destroy_process_group()


def _demo_steps(nproc, epochs):
    """steps/s of the digits demo under DDP at world `nproc` (1: plain, no DDP)."""
    cmd = [sys.executable, "-m", "torchneuron.demo", "--json", "--no-progress",
           "--epochs", str(epochs)]
    if nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={nproc}", "-m", "torchneuron.demo", "--ddp", "--json",
               "--no-progress", "--epochs", str(epochs)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    if "{" not in p.stdout:  # (the demo exits 1 below 95% accuracy: short runs may)
        raise RuntimeError(p.stdout[-2000:] + p.stderr[-2000:])
    return json.loads(p.stdout[p.stdout.index("{"):])


def _chart(report, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(OPS), figsize=(5 * len(OPS), 4), sharey=True)
    for ax, op in zip(axes, OPS):
        engines = sorted({r["engine"] for r in report["rows"]})
        for eng in engines:
            rows = [r for r in report["rows"] if r["op"] == op and r["engine"] == eng]
            x = [r["bytes"] / 1024 for r in rows]
            ax.plot(x, [r["neuron_GBps"] for r in rows], "o-", label=f"neuron tensors ({eng})")
        rows = [r for r in report["rows"] if r["op"] == op and r["engine"] == engines[0]]
        ax.plot(x, [r["gloo_cpu_GBps"] for r in rows], "s--", label="CPU tensors (gloo)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(op)
        ax.set_xlabel("message size (KiB)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("bus bandwidth (GB/s)")
    axes[0].legend()
    fig.suptitle(f"torchneuron c10d backend, world {report['world']} "
                 f"({report['machine']})")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--max-mib", type=int, default=64)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--demo-epochs", type=int, default=2)
    p.add_argument("--engines", default="gloo,xla",
                   help="neuron backend engines to measure (TORCHNEURON_COLLECTIVES values)")
    p.add_argument("--engine", default="gloo", help=argparse.SUPPRESS)
    p.add_argument("--out", default=str(ROOT / "reports" / "collectives.json"))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--part", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return _worker(a)
    part = Path(a.out).with_suffix(".part.json")
    report = {"rows": []}
    for eng in a.engines.split(","):
        print(f"engine {eng}:", file=sys.stderr)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={a.nproc}", __file__, "--worker", "--part", str(part),
               "--max-mib", str(a.max_mib), "--iters", str(a.iters), "--engine", eng]
        subprocess.run(cmd, check=True, cwd=ROOT, timeout=3600,
                       env=dict(os.environ, OMP_NUM_THREADS="1", TORCHNEURON_COLLECTIVES=eng))
        got = json.loads(part.read_text())
        part.unlink()
        report["world"] = got["world"]
        report["rows"] += got["rows"]
    import platform

    import torch

    report["machine"] = f"{os.cpu_count()} cores, {platform.machine()}, torch {torch.__version__}"
    print(f"\n{'engine':<8}{'op':<24}{'size':>10}{'neuron GB/s':>14}{'gloo GB/s':>12}"
          f"{'ratio':>8}")
    for r in report["rows"]:
        size = f"{r['bytes'] >> 10} KiB" if r["bytes"] < 1 << 20 else f"{r['bytes'] >> 20} MiB"
        print(f"{r['engine']:<8}{r['op']:<24}{size:>10}{r['neuron_GBps']:>14.3f}"
              f"{r['gloo_cpu_GBps']:>12.3f}{r['ratio']:>8.2f}")
    for eng in a.engines.split(","):
        big = [r["ratio"] for r in report["rows"] if r["bytes"] >= 1 << 20 and r["engine"] == eng]
        if big:
            report[f"min_ratio_from_1MiB_{eng}"] = min(big)
            med = sorted(big)[len(big) // 2]
            report[f"median_ratio_from_1MiB_{eng}"] = med
            print(f"{eng}: neuron/gloo ratio from 1 MiB up: lowest {min(big):.2f}, median "
                  f"{med:.2f} (goal >= 0.8)")
    print("DDP demo step time (world 1 vs world %d) ..." % a.nproc, file=sys.stderr)
    one = _demo_steps(1, a.demo_epochs)
    many = _demo_steps(a.nproc, a.demo_epochs)
    report["demo"] = {"world1_steps_per_s": one["steps_per_s"],
                      f"world{a.nproc}_ddp_steps_per_s": many["steps_per_s"],
                      "world1_accuracy": one["test_accuracy"],
                      f"world{a.nproc}_accuracy": many["test_accuracy"],
                      "step_time_ratio": one["steps_per_s"] / many["steps_per_s"]}
    print(f"demo: world 1 {one['steps_per_s']:.1f} steps/s, world {a.nproc} DDP "
          f"{many['steps_per_s']:.1f} steps/s (step time x{report['demo']['step_time_ratio']:.2f}; "
          f"the same global batch, {os.cpu_count()} cores shared)")
    Path(a.out).write_text(json.dumps(report, indent=1))
    _chart(report, Path(a.out).with_suffix(".png"))
    print(f"wrote {a.out} and {Path(a.out).with_suffix('.png')}")


if __name__ == "__main__":
    sys.exit(main())

"""Before vs after a change: bench/eager_ops.py and bench/compile.py run on two source
trees side by side, in one run, rounds interleaved (before, after, after, before, ...).

    python bench/before_after.py --before PATH [--rounds 2] [--out reports/before_after.json]

PATH is another checkout of torchneuron (``git worktree add /tmp/before <rev>``).  Each
bench runs in a fresh process with that tree's ``src`` first on ``sys.path`` and its own
copy of the bench script; every figure keeps its best round per tree (robust to other
load on the machine).  Prints after/before ratios (< 1: faster after) and writes a JSON
report and a PNG chart next to it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

EAGER_ARGS = ["--quick"]
COMPILE_ARGS = ["--sizes", "tiny", "--steps", "10", "--rounds", "2"]


def _run(tree, script, args, out):
    env = dict(os.environ, PYTHONPATH=os.path.join(tree, "src"))
    cmd = [sys.executable, os.path.join(tree, "bench", script), *args, "--out", out]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, cwd=tree)
    return time.perf_counter() - t0


def eager_figures(report):
    """name -> microseconds (lower is better) from an eager_ops.json."""
    f = {}
    for r in report.get("rows", []):
        f[f"op {r['op']} {r['size']}"] = r["torchneuron_us"]
    for p in report.get("programs", []):
        if p.get("op_us"):
            f[f"{p['program']} (op by op)"] = p["op_us"]
        if p.get("fused_us"):
            f[f"{p['program']} (fused)"] = p["fused_us"]
    step = report.get("train_step_ms", {}).get("neuron")
    if step:
        f["demo CNN train step"] = step * 1000
    return f


def compile_figures(report):
    """name -> microseconds per training step (lower is better) from a compile.json."""
    f = {}
    for size, s in report.get("sizes", {}).items():
        for config, r in s.get("results", {}).items():
            if config.startswith("neuron") and r.get("step_ms"):
                f[f"GPT {size} step, {config}"] = r["step_ms"] * 1000
    return f


def _best(runs):
    out = {}
    for figs in runs:
        for k, v in figs.items():
            out[k] = min(v, out.get(k, math.inf))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="the other checkout (its root folder)")
    p.add_argument("--after", default=ROOT)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default=os.path.join(ROOT, "reports", "before_after.json"))
    a = p.parse_args(argv)
    trees = {"before": os.path.abspath(a.before), "after": os.path.abspath(a.after)}
    runs = {t: [] for t in trees}
    tmp = tempfile.mkdtemp(prefix="tn-before-after-")
    order = []
    for r in range(a.rounds):  # ABBA: neither tree always runs first
        order += [("before", r), ("after", r)] if r % 2 == 0 else [("after", r), ("before", r)]
    for i, (t, r) in enumerate(order):
        e = os.path.join(tmp, f"eager_{t}_{r}")  # eager_ops.py writes into a folder
        c = os.path.join(tmp, f"compile_{t}_{r}.json")
        s1 = _run(trees[t], "eager_ops.py", EAGER_ARGS, e)
        s2 = _run(trees[t], "compile.py", COMPILE_ARGS, c)
        with open(os.path.join(e, "eager_ops.json")) as f:
            figs = eager_figures(json.load(f))
        with open(c) as f:
            figs.update(compile_figures(json.load(f)))
        runs[t].append(figs)
        print(f"[{i + 1}/{len(order)}] round {r + 1} {t}: eager_ops {s1:.0f} s, compile {s2:.0f} s",
              flush=True)
    before, after = _best(runs["before"]), _best(runs["after"])
    rows = []
    for k in before:
        if k in after and before[k] > 0:
            rows.append({"figure": k, "before_us": before[k], "after_us": after[k],
                         "ratio": after[k] / before[k]})
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows)) if rows else None
    print(f"\n{'figure':52s} {'before us':>11s} {'after us':>11s} {'after/before':>12s}")
    for r in rows:
        print(f"{r['figure']:52s} {r['before_us']:11.1f} {r['after_us']:11.1f} {r['ratio']:12.3f}")
    print(f"geometric mean after/before: {geo:.3f} over {len(rows)} figures")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"before": trees["before"], "after": trees["after"], "rounds": a.rounds,
                   "eager_args": EAGER_ARGS, "compile_args": COMPILE_ARGS,
                   "geomean_ratio": geo, "rows": rows}, f, indent=1)
    _chart(rows, geo, os.path.splitext(a.out)[0] + ".png")
    return 0


def _chart(rows, geo, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r["ratio"])
    fig, ax = plt.subplots(figsize=(8, 0.22 * len(rows) + 1.5))
    ax.barh([r["figure"] for r in rows], [r["ratio"] for r in rows],
            color=["tab:green" if r["ratio"] <= 1 else "tab:red" for r in rows])
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xlabel("after / before (time; < 1 is faster after)")
    ax.set_title(f"before vs after, best of rounds; geomean {geo:.3f}")
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())

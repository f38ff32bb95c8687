"""Small-GPT training step: torchneuron eager vs torch.compile(backend="neuron") vs
PyTorch CPU eager vs torch.compile (inductor) on the CPU.

    python bench/compile.py [--sizes full,tiny] [--steps 10] [--rounds 3] [--batch B]
                            [--out reports/compile.json]

Sizes: "full" is the 4-layer, width-256, sequence-128, vocabulary-256 GPT at
batch 8 (compute-bound on a CPU); "tiny" (2 layers, width 64, sequence 32,
batch 2) is where per-op dispatch overhead dominates.

Each configuration trains its own copy of the same model (same seed) with AdamW.
Timing: the first two steps (compilation; AdamW's state appears at step one, so
step two compiles again) are timed separately; then `--rounds` rounds of
`--steps` steps run round-robin over the configurations and each keeps its best
round (robust to other load on the machine).  Prints steps/s and ratios, writes
a JSON report and a PNG chart.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import torch

import torchneuron  # noqa: F401  (the neuron device; autoload would do it too)
from torchneuron.models.gpt import GPT, GPTConfig, synthetic_batches

_STEP_SRC = """
def step(model, opt, idx, targets):
    loss = model(idx, targets)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()
"""


def _fresh_step(tag):
    """train_step with its own code object, so each compiled configuration has its own
    Dynamo cache."""
    ns = {}
    exec(compile(_STEP_SRC, f"<bench-step-{tag}>", "exec"), ns)
    return ns["step"]


def _sync(dev):
    if dev.type == "neuron":
        torch.neuron.synchronize()


class Config:
    def __init__(self, name, device, compile_backend, cfg, batches, lr):
        self.name = name
        self.dev = torch.device(device)
        torch.manual_seed(0)
        self.model = GPT(cfg).to(self.dev)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr)
        step = _fresh_step(name.replace(" ", "_"))
        self.step = torch.compile(step, backend=compile_backend) if compile_backend else step
        self.batches = [(x.to(self.dev), y.to(self.dev)) for x, y in batches]
        self.i = 0
        self.losses = []
        self.first_two_s = None
        self.best_step_s = float("inf")

    def one(self):
        x, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        return self.step(self.model, self.opt, x, y)

    def warm(self):
        t = time.perf_counter()
        for _ in range(2):
            self.losses.append(self.one().item())
        self.first_two_s = time.perf_counter() - t

    def timed(self, n):
        _sync(self.dev)
        t = time.perf_counter()
        for _ in range(n):
            loss = self.one()
        self.losses.append(loss.item())  # waits for the last step
        dt = (time.perf_counter() - t) / n
        self.best_step_s = min(self.best_step_s, dt)
        return dt


SIZES = {
    # the small GPT: compute-bound on a CPU
    "full": dict(layers=4, width=256, heads=4, seq=128, vocab=256, batch=8),
    # the same model family where per-op overhead dominates (what compilation removes)
    "tiny": dict(layers=2, width=64, heads=2, seq=32, vocab=256, batch=2),
}


def run_size(label, size, a):
    cfg = GPTConfig(vocab_size=size["vocab"], block_size=size["seq"], n_layer=size["layers"],
                    n_head=size["heads"], n_embd=size["width"], dropout=0.0)
    batches = synthetic_batches(4, size["batch"], size["seq"], size["vocab"])
    names = [("neuron eager", "neuron", None), ("neuron compiled", "neuron", "neuron"),
             ("cpu eager", "cpu", None), ("cpu inductor", "cpu", "inductor")]
    if a.only:
        keep = {s.strip() for s in a.only.split(",")}
        names = [n for n in names if n[0] in keep]
    print(f"[{label}] small GPT: {size['layers']} layers, width {size['width']}, {size['heads']} "
          f"heads, sequence {size['seq']}, vocabulary {size['vocab']}, batch {size['batch']}; "
          f"AdamW", flush=True)
    torch._dynamo.reset()
    configs = []
    for name, dev, backend in names:
        c = Config(f"{label} {name}", dev, backend, cfg, batches, a.lr)
        c.warm()
        print(f"  {name:16s} first two steps {c.first_two_s:8.2f} s", flush=True)
        configs.append((name, c))
    for _ in range(a.rounds):
        for _, c in configs:
            c.timed(a.steps)
    res = {}
    for name, c in configs:
        res[name] = {
            "steps_per_s": 1.0 / c.best_step_s,
            "step_ms": c.best_step_s * 1e3,
            "first_two_steps_s": c.first_two_s,
            # what the first two steps cost beyond two ordinary steps: compilation
            "compile_s": max(0.0, c.first_two_s - 2 * c.best_step_s),
            "losses": c.losses,
        }
    print(f"  {'configuration':18s} {'steps/s':>9s} {'ms/step':>9s} {'compile s':>10s}")
    for n, r in res.items():
        print(f"  {n:18s} {r['steps_per_s']:9.2f} {r['step_ms']:9.1f} {r['compile_s']:10.1f}")
    ratios = {}

    def ratio(x, y, lab):
        if x in res and y in res:
            ratios[lab] = res[x]["steps_per_s"] / res[y]["steps_per_s"]

    ratio("neuron compiled", "neuron eager", "neuron compiled / neuron eager")
    ratio("neuron compiled", "cpu inductor", "neuron compiled / cpu inductor")
    ratio("neuron compiled", "cpu eager", "neuron compiled / cpu eager")
    ratio("neuron eager", "cpu eager", "neuron eager / cpu eager")
    ratio("cpu inductor", "cpu eager", "cpu inductor / cpu eager")
    if "neuron compiled" in res and "cpu inductor" in res:
        ratios["first compile: neuron / inductor"] = (res["neuron compiled"]["compile_s"]
                                                      / max(res["cpu inductor"]["compile_s"], 1e-9))
    for k, v in ratios.items():
        print(f"  {k:36s} {v:6.2f}x")
    if "neuron compiled" in res and "neuron eager" in res:
        le, lc = res["neuron eager"]["losses"], res["neuron compiled"]["losses"]
        print(f"  {'loss after ' + str(2 + a.rounds * a.steps) + ' steps':36s} eager {le[-1]:.4f}  "
              f"compiled {lc[-1]:.4f}", flush=True)
    params = sum(p.numel() for p in configs[0][1].model.parameters())
    return {"size": size | {"params": params}, "results": res, "ratios": ratios}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="full", help=f"comma list of {sorted(SIZES)}")
    p.add_argument("--batch", type=int, default=None, help="override the batch size")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--only", default="", help="comma list of configurations to run")
    p.add_argument("--out", default="reports/compile.json")
    p.add_argument("--png", default=None, help="chart path (default: next to --out)")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, torch threads "
          f"{torch.get_num_threads()}", flush=True)
    runs = {}
    for label in [s.strip() for s in a.sizes.split(",") if s.strip()]:
        size = dict(SIZES[label])
        if a.batch:
            size["batch"] = a.batch
        runs[label] = run_size(label, size, a)
        print(flush=True)

    from torchneuron.compile import stats

    report = {
        "benchmark": "small-GPT training step (forward, backward, AdamW), steps/s (best round)",
        "args": vars(a),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": sys.version.split()[0], "torch": torch.__version__,
                    "torch_threads": torch.get_num_threads(),
                    "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
        "sizes": runs,
        "neuron_compile_stats": stats(),
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=2)
    png = a.png or os.path.splitext(a.out)[0] + ".png"
    _chart(runs, png)
    print(f"wrote {a.out} and {png}")
    return 0


def _chart(runs, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"neuron eager": "#9ecae1", "neuron compiled": "#08519c",
              "cpu eager": "#fdae6b", "cpu inductor": "#d94801"}
    fig, axes = plt.subplots(len(runs), 2, figsize=(11, 4.2 * len(runs)), squeeze=False)
    for row, (label, run) in zip(axes, runs.items()):
        res, size = run["results"], run["size"]
        names = list(res)
        for ax, key, ylabel in ((row[0], "steps_per_s", "training steps / s (higher is better)"),
                                (row[1], "compile_s", "first two steps beyond steady state (s)")):
            vals = [res[n][key] for n in names]
            bars = ax.bar(names, vals, color=[colors.get(n, "grey") for n in names])
            for b, v in zip(bars, vals):
                ax.text(b.get_x() + b.get_width() / 2, v, f"{v:.2f}" if key == "steps_per_s"
                        else f"{v:.0f}", ha="center", va="bottom")
            ax.set_ylabel(ylabel)
            ax.tick_params(axis="x", rotation=15)
        row[0].set_title(f"{label}: {size['layers']}L d={size['width']} T={size['seq']} "
                         f"B={size['batch']} ({size['params'] / 1e6:.2f}M params)")
        row[1].set_title("compile / warm-up time")
        txt = "   ".join(f"{k}: {v:.2f}x" for k, v in run["ratios"].items() if "first" not in k)
        row[0].text(0.0, -0.3, txt, transform=row[0].transAxes, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())

"""First-call latency: cold vs warm persistent XLA cache, against torch CPU.

    python bench/first_call.py [--quick]

Each workload runs in fresh processes, side by side in this one run:
  * cpu        torch on the CPU;
  * off        the neuron device with the persistent cache off (every op compiles);
  * cold       the neuron device with an empty cache folder (compiles and writes);
  * warm       the same folder again (every executable loads from disk).
Workloads: the demo CNN's first training step (and its second), and a tiny GPT-2's first
forward and first 8-token greedy ``generate()``.  Prints seconds and the warm/cold and
warm/cpu ratios; writes reports/first_call.json and reports/first_call.png.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
device, work = sys.argv[1], sys.argv[2]
if device != "cpu":
    import torchneuron  # noqa: F401
t_import = time.perf_counter() - t0
def sync():
    if device != "cpu":
        torch.neuron.synchronize()
out = {"import_s": t_import}
if work == "demo":
    from torchneuron.demo import DigitsCNN, load_digits
    import torch.nn.functional as F
    torch.manual_seed(0)
    (x, y), _ = load_digits(0)
    m = DigitsCNN().to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=2e-3, weight_decay=1e-4)
    xb, yb = x[:64].to(device), y[:64].to(device)
    for name in ("first_step_s", "second_step_s"):
        t = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(m(xb), yb)
        loss.backward()
        opt.step()
        out["loss"] = loss.item()
        out[name] = time.perf_counter() - t
else:
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=128, n_positions=64)
    m = GPT2LMHeadModel(cfg).eval().to(device)
    ids = torch.randint(0, 128, (1, 8)).to(device)
    with torch.no_grad():
        t = time.perf_counter()
        logits = m(ids).logits
        out["logit"] = logits[0, -1, 0].item()
        out["first_forward_s"] = time.perf_counter() - t
        t = time.perf_counter()
        g = m.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
        out["tokens"] = g[0].tolist()
        out["first_generate_s"] = time.perf_counter() - t
print(json.dumps(out))
"""

WORKLOADS = {"demo": ("first_step_s", "second_step_s"),
             "gpt2": ("first_forward_s", "first_generate_s")}


def run(device, work, cache):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHNEURON_COMPILE_CACHE")}
    env["TORCHNEURON_COMPILE_CACHE_DIR"] = cache or "off"
    env.setdefault("TORCHNEURON_FALLBACK", "silent")
    p = subprocess.run([sys.executable, "-c", _CHILD, device, work], env=env,
                       capture_output=True, text=True, timeout=1800, cwd=ROOT)
    if p.returncode:
        raise RuntimeError(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def chart(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [(w, m) for w, ms in WORKLOADS.items() for m in ms]
    modes = ["cpu", "off", "cold", "warm"]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.2
    for j, mode in enumerate(modes):
        vals = [results[w][mode][m] for w, m in metrics]
        ax.bar([i + (j - 1.5) * width for i in range(len(metrics))], vals, width, label=mode)
    ax.set_xticks(range(len(metrics)))
    ax.set_xticklabels([f"{w}\n{m.removesuffix('_s')}" for w, m in metrics])
    ax.set_ylabel("seconds")
    ax.set_yscale("log")
    ax.set_title("first-call latency: persistent XLA cache off / cold / warm vs torch CPU")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "reports"))
    ap.add_argument("--quick", action="store_true", help="the demo only")
    a = ap.parse_args(argv)
    works = ["demo"] if a.quick else list(WORKLOADS)
    results = {}
    tmp = tempfile.mkdtemp(prefix="tn-first-call-")
    try:
        for w in works:
            cache = os.path.join(tmp, w)
            results[w] = {}
            for mode, device, c in (("cpu", "cpu", None), ("off", "neuron", None),
                                    ("cold", "neuron", cache), ("warm", "neuron", cache)):
                print(f"[{w}] {mode} ...", file=sys.stderr, flush=True)
                results[w][mode] = run(device, w, c)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'workload':<26}{'cpu':>9}{'off':>9}{'cold':>9}{'warm':>9}"
          f"{'warm/cold':>11}{'warm/cpu':>10}")
    summary = {}
    for w in works:
        r = results[w]
        for m in WORKLOADS[w] + ("import_s",):
            row = {mode: r[mode][m] for mode in ("cpu", "off", "cold", "warm")}
            row["warm_over_cold"] = row["warm"] / row["cold"]
            row["warm_over_cpu"] = row["warm"] / row["cpu"]
            summary[f"{w}.{m}"] = row
            print(f"{w + '.' + m:<26}{row['cpu']:>9.3f}{row['off']:>9.3f}{row['cold']:>9.3f}"
                  f"{row['warm']:>9.3f}{row['warm_over_cold']:>11.2f}{row['warm_over_cpu']:>10.1f}")
        same = r["warm"].get("loss", r["warm"].get("tokens")) == \
            r["cold"].get("loss", r["cold"].get("tokens"))
        print(f"{w}: warm result identical to cold: {same}")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "first_call.json"), "w") as f:
        json.dump({"results": results, "summary": summary}, f, indent=1)
    if not a.quick:
        chart(results, os.path.join(a.out, "first_call.png"))
    print(f"wrote {a.out}/first_call.json" + ("" if a.quick else " and first_call.png"))


if __name__ == "__main__":
    main()

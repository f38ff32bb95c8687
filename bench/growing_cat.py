"""A tensor grown by one `cat` a step: eager `cat` into bucket-sized cells
(src/torchneuron/kernels/shape.py) against the lowered `cat` (TORCHNEURON_EAGER_BUCKETS=0)
and torch on the CPU.

    python bench/growing_cat.py [--steps N]

Side by side in this one run:
  * growing: in a fresh process each (empty caches), a loop of N steps (default 128) that
    grows ids (1, L), a float mask (1, L) and two key/value caches (1, 4, L, 16) by one
    position a step, as an eager `generate()` does; seconds and XLA compiles;
  * steady: in one process, the per-call time of `torch.cat([past, new], 2)` for a
    (1, 12, 100, c) past (its cells exact, so every call is a hit), by result size,
    both ways alternated (median of 5 rounds of 100 calls): what each step of a
    growing loop pays once its executables exist.  (A loop over fixed shapes never
    buckets: a call signature buckets once it has shown more than 3 lengths.)
Prints the ratios; writes reports/growing_cat.json and reports/growing_cat.png.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
device, what, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
compiles = [0]
if device != "cpu":
    import torchneuron  # noqa: F401
    from jax import monitoring
    def on(event, duration_secs=None, **kw):
        if event.endswith("backend_compile_duration"):
            compiles[0] += 1
    monitoring.register_event_duration_secs_listener(on)
def sync():
    if device != "cpu":
        torch.neuron.synchronize()
out = {}
if what == "growing":
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (1, 8), generator=g).to(device)
    mask = torch.ones(1, 8).to(device)
    keys = [torch.randn(1, 4, 8, 16, generator=g).to(device) for _ in range(2)]
    news = [torch.randn(1, 4, 1, 16, generator=g).to(device) for _ in range(steps)]
    tok = torch.ones(1, 1, dtype=torch.long).to(device)
    one = torch.ones(1, 1).to(device)
    sync()
    compiles[0] = 0
    t = time.perf_counter()
    for i in range(steps):
        ids = torch.cat([ids, tok], -1)
        mask = torch.cat([mask, one], -1)
        keys = [torch.cat([k, news[i]], -2) for k in keys]
    sync()
    out = {"s": time.perf_counter() - t, "compiles": compiles[0],
           "check": float(keys[0].sum().item() + ids.sum().item() + mask.sum().item())}
else:
    from torchneuron.kernels import shape as sk
    sk.CHURN = 0  # the bucket's copies at every call (a growing tensor's steady state)
    res = {}
    for c in (1, 4, 16, 64, 200):
        past = torch.randn(1, 12, 100, c).to(device)
        new = torch.randn(1, 12, 1, c).to(device)
        times = {"bucketed": [], "lowered": []}
        for _ in range(5):
            for mode, limit in (("bucketed", 1 << 40), ("lowered", 0)):
                sk.LIMIT = limit
                for _ in range(5):
                    torch.cat([past, new], 2)
                sync()
                t = time.perf_counter()
                for _ in range(100):
                    r = torch.cat([past, new], 2)
                sync()
                times[mode].append((time.perf_counter() - t) / 100)
        kib = 12 * 101 * c * 4 / 1024
        res[f"{kib:.1f}"] = {m: sorted(v)[2] for m, v in times.items()}
    out = {"sizes_kib": res}
print(json.dumps(out))
"""


def child(device, what, steps, env_extra=None):
    env = dict(os.environ, TORCHNEURON_COMPILE_CACHE_DIR="off", **(env_extra or {}))
    p = subprocess.run([sys.executable, "-c", _CHILD, device, what, str(steps)],
                       capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode:
        raise RuntimeError(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def chart(report, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    g = report["growing"]
    names = ["cpu", "lowered", "bucketed"]
    a.bar(names, [g[n]["s"] for n in names], color=["grey", "tab:red", "tab:blue"])
    for i, n in enumerate(names):
        if "compiles" in g[n]:
            a.text(i, g[n]["s"], f"{g[n]['compiles']} compiles", ha="center", va="bottom")
    a.set_ylabel("seconds, fresh process")
    a.set_title(f"{report['steps']} steps growing ids, mask and 2 caches")
    sizes = report["steady"]
    xs = [float(k) for k in sizes]
    for mode, col in (("lowered", "tab:red"), ("bucketed", "tab:blue")):
        b.plot(xs, [sizes[k][mode] * 1e6 for k in sizes], "o-", color=col, label=mode)
    b.set_xscale("log")
    b.set_xlabel("result size, KiB")
    b.set_ylabel("microseconds per cat (cached)")
    b.set_title("steady state: one cat of a (1, 12, 100, c) past")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--out", default=os.path.join(ROOT, "reports"))
    a = ap.parse_args(argv)
    growing = {}
    for name, device, extra in (("cpu", "cpu", None),
                                ("lowered", "neuron", {"TORCHNEURON_EAGER_BUCKETS": "0"}),
                                ("bucketed", "neuron", None)):
        print(f"growing, {name} ...", file=sys.stderr, flush=True)
        growing[name] = child(device, "growing", a.steps, extra)
    assert abs(growing["lowered"]["check"] - growing["cpu"]["check"]) < 1e-3 * abs(
        growing["cpu"]["check"]) + 1e-3, growing
    assert growing["bucketed"]["check"] == growing["lowered"]["check"], growing
    print("steady state ...", file=sys.stderr, flush=True)
    steady = child("neuron", "steady", 0)["sizes_kib"]
    g = growing
    print(f"{a.steps} steps, fresh process     cpu {g['cpu']['s']:7.2f} s   lowered "
          f"{g['lowered']['s']:7.2f} s ({g['lowered']['compiles']} compiles)   bucketed "
          f"{g['bucketed']['s']:7.2f} s ({g['bucketed']['compiles']} compiles)   "
          f"bucketed/lowered {g['bucketed']['s'] / g['lowered']['s']:.2f}")
    for kib, t in steady.items():
        print(f"steady, result {kib:>7} KiB   lowered {t['lowered'] * 1e6:8.1f} us   bucketed "
              f"{t['bucketed'] * 1e6:8.1f} us   bucketed/lowered "
              f"{t['bucketed'] / t['lowered']:.2f}")
    report = {"steps": a.steps, "growing": growing, "steady": steady}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "growing_cat.json"), "w") as f:
        json.dump(report, f, indent=1)
    chart(report, os.path.join(a.out, "growing_cat.png"))
    print(f"wrote {a.out}/growing_cat.json and growing_cat.png")


if __name__ == "__main__":
    main()

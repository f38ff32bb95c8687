"""What installing torchneuron costs a program that only imports torch.

    python bench/import_cost.py [--runs N]

Fresh processes, interleaved in this one run (the machine is noisy):
  * without    ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``: torch as if torchneuron were not installed;
  * with       the autoload on (``TORCHNEURON_AUTOLOAD=1``: registers ``neuron`` even where
               another accelerator would make ``auto`` step aside);
  * first use  the same, then one tensor on ``neuron`` (what the light autoload defers).
Each child reports the wall time of ``import torch`` and its peak RSS (``ru_maxrss``).
Prints medians and the differences with/without; writes reports/import_cost.json and
reports/import_cost.png.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
first = None
if sys.argv[1] == "first":
    x = torch.ones(4, device="neuron") + 1
    x.cpu()
    first = time.perf_counter() - t1
print(json.dumps({"import": t1 - t0, "first_use": first,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "backend": torch._C._get_privateuse1_backend_name()}))
"""

CASES = {
    "without": {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    "with": {"TORCHNEURON_AUTOLOAD": "1"},
    "first use": {"TORCHNEURON_AUTOLOAD": "1"},
}


def run_once(case: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TORCHNEURON_") and k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    env.update(CASES[case])
    env["TORCHNEURON_COMPILE_CACHE_DIR"] = "off"
    r = subprocess.run([sys.executable, "-c", _CHILD, "first" if case == "first use" else "-"],
                       capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{case}: child failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=7, help="processes per case (default 7)")
    p.add_argument("--out", default=os.path.join(ROOT, "reports", "import_cost.json"))
    a = p.parse_args(argv)
    samples = {c: [] for c in CASES}
    run_once("with")  # warm the page cache (and build the hooks library once)
    for i in range(a.runs):
        for case in CASES:
            samples[case].append(run_once(case))
        print(f"\rrun {i + 1}/{a.runs}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    med = {c: {k: statistics.median(s[k] for s in samples[c])
               for k in ("import", "rss_mb")} for c in CASES}
    first = statistics.median(s["first_use"] for s in samples["first use"])
    w, wo = med["with"], med["without"]
    print(f"{'case':10s} {'import torch (s)':>17s} {'peak RSS (MB)':>14s}")
    for c in CASES:
        print(f"{c:10s} {med[c]['import']:17.3f} {med[c]['rss_mb']:14.1f}")
    print(f"with - without: {w['import'] - wo['import']:+.3f} s "
          f"({w['import'] / wo['import']:.2f}x), {w['rss_mb'] - wo['rss_mb']:+.1f} MB")
    print(f"first use (one tensor on neuron, after import): {first:.2f} s, peak RSS "
          f"{med['first use']['rss_mb']:.0f} MB")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"runs": a.runs, "median": med, "first_use_s": first, "samples": samples}, f,
                  indent=1)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
        names = list(CASES)
        ax1.bar(names, [med[c]["import"] for c in names], color=["#777", "#2e7d32", "#81c784"])
        ax1.set_ylabel("import torch (s, median)")
        ax2.bar(names, [med[c]["rss_mb"] for c in names], color=["#777", "#2e7d32", "#81c784"])
        ax2.set_ylabel("peak RSS (MB, median)")
        fig.suptitle("import torch with and without torchneuron installed")
        fig.tight_layout()
        png = os.path.splitext(a.out)[0] + ".png"
        fig.savefig(png, dpi=100)
        print(f"wrote {a.out} and {png}")
    except ImportError:
        print(f"wrote {a.out} (no matplotlib: no chart)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

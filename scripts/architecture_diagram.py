"""Draw docs/architecture.png from the layering contract in pyproject.toml.

    python scripts/architecture_diagram.py

The picture is the import-linter ``layers`` contract (top layer first), so it
cannot drift from what CI checks.
"""
from __future__ import annotations

import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NOTES = {
    "cli": "the torchneuron command",
    "tools": "conformance sweep, reports",
    "demo": "digits CNN training",
    "compile": "torch.compile backend: FX graph -> one jax.jit",
    "kernels": "eager kernels needing the device",
    "amp": "autocast",
    "dispatch": "op call -> cached executable; the one runner; registry, fallback",
    "interpret": "FX graph as jax with the lowering table",
    "ops": "pure lowerings, one module per family",
    "lowering": "@lower, LOWERINGS, trace context",
    "probe": "dtype probes",
    "device": "torch.neuron",
    "distributed": "the neuron c10d backend",
    "upstream_hooks": "PyTorch internals extended",
    "persist": "private, verified cache files",
    "boot": "the neuron device registered, no jax",
    "storage": "cells, views, host transfer",
    "numerics": "opmath, dims, dtype names, conversions",
    "runtime": "jax platform, dtypes",
    "native": "C++ hooks (pinned memory)",
    "dynamo_skip": "Dynamo skip marks",
    "models": "demo models",
    "config": "TORCHNEURON_* knobs",
}


def layers():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        cfg = tomllib.load(f)
    for c in cfg["tool"]["importlinter"]["contracts"]:
        if c["type"] == "layers":
            return [[m.strip().removeprefix("torchneuron.") for m in row.split("|")]
                    for row in c["layers"]]
    raise SystemExit("no layers contract in pyproject.toml")


def main(out=os.path.join(ROOT, "docs", "architecture.png")) -> int:
    rows = layers()
    h = 0.9
    fig, ax = plt.subplots(figsize=(11, 0.75 * len(rows) + 1))
    ax.set_xlim(0, 10.5)
    ax.set_ylim(-0.5, len(rows) + 0.3)
    ax.axis("off")
    for r, mods in enumerate(rows):
        y = len(rows) - 1 - r
        w = 9.6 / len(mods)
        for k, m in enumerate(mods):
            x = 0.2 + k * w
            ax.add_patch(FancyBboxPatch((x + 0.05, y + 0.05), w - 0.1, h - 0.1,
                                        boxstyle="round,pad=0.02", linewidth=1,
                                        facecolor="#dbe8f6" if m not in ("ops", "kernels")
                                        else "#f6e7c8", edgecolor="#4a6b8a"))
            ax.text(x + w / 2, y + 0.58, m, ha="center", va="center", fontsize=11,
                    fontweight="bold")
            ax.text(x + w / 2, y + 0.28, NOTES.get(m, ""), ha="center", va="center",
                    fontsize=7.5, color="#333333")
    ax.annotate("", xy=(10.1, 0.2), xytext=(10.1, len(rows) - 0.2),
                arrowprops=dict(arrowstyle="->", color="#888888"))
    ax.text(10.18, len(rows) / 2, "imports", rotation=270, va="center", ha="left", fontsize=8,
            color="#888888")
    ax.set_title("torchneuron: each layer imports only the layers below it "
                 "(import-linter contract)", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))

"""TORCHNEURON_DUMP_DIR=path: write each compiled graph's StableHLO and a summary line.

For every XLA executable built by the neuron backend:

  path/<graph>.mlir   the StableHLO module XLA compiled
  path/<graph>.txt    one line: graph, ops, inputs, outputs, compile time
  path/summary.txt    the same lines, one per executable, appended
"""
from __future__ import annotations

import os
import re

from .. import config


def dump_dir():
    d = config.get("TORCHNEURON_DUMP_DIR").strip()
    return d or None


def summary_line(exe, ninputs, seconds):
    return (f"{exe.name}: ops={exe.nops} inputs={ninputs} outputs={exe.nouts} "
            f"mutated_inputs={len(exe.writes) + len(exe.host_writes)} random_ops={exe.nrandom} "
            f"compile_s={seconds:.3f}")


def write(exe, ninputs, seconds):
    d = dump_dir()
    if d is None:
        return
    os.makedirs(d, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", exe.name)
    with open(os.path.join(d, stem + ".mlir"), "w") as f:
        f.write(exe.lowered.as_text())
    line = summary_line(exe, ninputs, seconds)
    with open(os.path.join(d, stem + ".txt"), "w") as f:
        f.write(line + "\n")
    with open(os.path.join(d, "summary.txt"), "a") as f:
        f.write(line + "\n")

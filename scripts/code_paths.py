"""Which torchneuron modules and functions one call runs, and the largest modules and
functions: the figures the "one executable" redesign (issue 33) is judged by.

    python scripts/code_paths.py [--json]

Paths, each a warm call (its executable cached), traced with sys.setprofile:
``a + b`` op by op, ``a + b`` under fused eager (recorded), and a compiled function
(``torch.compile(backend="neuron")``) called again.  Run it on two checkouts
(``PYTHONPATH=<tree>/src``) to compare.
"""
from __future__ import annotations

import ast
import json
import os
import sys


def _path(fn):
    """(modules, functions) of torchneuron that one call of `fn` enters."""
    seen = []

    def prof(frame, event, arg):
        if event == "call":
            f = frame.f_code.co_filename
            if "torchneuron" in f and "code_paths" not in f:
                mod = f.split("torchneuron" + os.sep)[-1]
                seen.append(f"{mod}:{frame.f_code.co_name}")

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    funcs = sorted(set(seen))
    mods = sorted({s.split(":")[0] for s in funcs})
    return mods, funcs, len(seen)


def paths():
    import torch

    import torchneuron

    a = torch.randn(64, 64).to("neuron")
    b = torch.randn(64, 64).to("neuron")
    for _ in range(3):
        a + b
    out = {"a + b": _path(lambda: a + b)}
    with torchneuron.eager_mode("fused"):
        for _ in range(3):
            a + b
        out["a + b, fused eager"] = _path(lambda: a + b)
        torch.neuron.synchronize()

    @torch.compile(backend="neuron")
    def f(x, y):
        return (x * y).sum(0) + 1

    for _ in range(3):
        f(a, b)
    out["compiled f(a, b)"] = _path(lambda: f(a, b))
    return out


def largest(root, n=8):
    """The n largest modules (lines) and functions (lines) under `root`."""
    mods, funcs = [], []
    for dirpath, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".py"):
                continue
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            src = open(p).read()
            mods.append((src.count("\n"), rel))
            for node in ast.walk(ast.parse(src)):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    funcs.append((node.end_lineno - node.lineno + 1, f"{rel}:{node.name}"))
    return sorted(mods, reverse=True)[:n], sorted(funcs, reverse=True)[:n]


def main() -> int:
    import torchneuron

    root = os.path.dirname(torchneuron.__file__)
    res = {}
    for name, (mods, funcs, calls) in paths().items():
        res[name] = {"modules": mods, "functions": len(funcs), "calls": calls}
        print(f"{name}: {len(mods)} modules, {len(funcs)} functions, {calls} Python calls")
        print("   " + ", ".join(mods))
    mods, funcs = largest(root)
    res["largest_modules"] = mods
    res["largest_functions_and_classes"] = funcs
    print("largest modules:", ", ".join(f"{m} {n}" for n, m in mods))
    print("largest functions/classes:", ", ".join(f"{m} {n}" for n, m in funcs))
    if "--json" in sys.argv:
        print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The floor of each step of one eager op, measured in isolation (issue 12 item 3).

    python bench/op_floor.py [--n N]

For a 64x64 float32 add on neuron, times side by side in this one process:
torch's dispatch into an empty Python PrivateUse1 kernel (a custom op registered for
the bench), the argument walk and cache key, the cached executable's call, one
result tensor, the whole Entry called directly, ``a + b`` through torch, and the same
op recorded by fused eager (no executable call).  Prints microseconds per step and
each step's share of ``a + b``; writes reports/op_floor.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

import torchneuron
from torchneuron import storage
from torchneuron.dispatch import registry
from torchneuron.dispatch.executable import Walk, global_state

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def per_call(fn, n, rounds=5):
    for _ in range(min(n, 200)):
        fn()
    torch.neuron.synchronize()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        torch.neuron.synchronize()
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1e6


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=3000)
    p.add_argument("--out", default=os.path.join(ROOT, "reports"))
    a = p.parse_args(argv)
    n = a.n

    lib = torch.library.Library("tn_bench", "DEF")
    lib.define("nop(Tensor a, Tensor b) -> Tensor")
    lib.impl("nop", lambda x, y: x, "PrivateUse1")
    nop = torch.ops.tn_bench.nop.default

    x = torch.randn(64, 64).to("neuron")
    y = torch.randn(64, 64).to("neuron")
    kern = registry.registered(torch.ops.aten.add.Tensor)
    entry = getattr(kern, "entry", kern)
    x + y
    exe = next(iter(entry.cache.values()))
    ax = storage.cell_of(x).arr
    ay = storage.cell_of(y).arr
    sch = entry.schema

    def walk_key():
        w = Walk(entry.static)
        toks = [w.value(v, sch.kinds[i], sch.names[i]) for i, v in enumerate((x, y))]
        toks.append(w.index)
        toks.append(global_state())
        return entry.cache.get(tuple(toks))

    res = exe.fn(ax, ay)
    sp = exe.outs[0]

    def result_tensor():
        return storage.make_tensor(res[0], sp[0], sp[1], sp[2], sp[3], 0, sp.nbytes)

    steps = [
        ("torch dispatch into an empty Python kernel", lambda: nop(x, y)),
        ("argument walk + key + cache lookup", walk_key),
        ("cached executable call", lambda: exe.fn(ax, ay)),
        ("one result tensor (cell, storage, tensor)", result_tensor),
        ("Entry called directly (all of the above but dispatch)", lambda: entry(x, y)),
        ("a + b through torch", lambda: x + y),
    ]
    rows = {}
    for name, fn in steps:
        rows[name] = per_call(fn, n)
    prev = torchneuron.set_eager_mode("fused")
    try:
        def fused_add():
            return x + y

        rows["a + b recorded by fused eager (flush every 100)"] = per_call(
            lambda: [fused_add() for _ in range(100)], max(n // 100, 10)) / 100
    finally:
        torchneuron.set_eager_mode(prev)
    total = rows["a + b through torch"]
    print(f"{'step':58s} {'us':>8s} {'of a+b':>8s}")
    for name, us in rows.items():
        print(f"{name:58s} {us:8.2f} {us / total:8.0%}")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "op_floor.json"), "w") as f:
        json.dump({"us": rows, "torch": torch.__version__}, f, indent=1)
    print(f"wrote {a.out}/op_floor.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The floor of each step of one eager op, measured in isolation (issue 12 item 3).

    python bench/op_floor.py [--n N]

For a 64x64 float32 add on neuron, times side by side in this one process:
torch's dispatch into an empty Python PrivateUse1 kernel (a custom op registered for
the bench), the argument walk and cache key, the cached executable's call, one
result tensor, the whole Entry called directly, ``a + b`` through torch, both again
with the executable call stubbed (torchneuron's Python and torch without XLA), a
jitted jax add alone and between a little torch CPU work (XLA:CPU's call costs more
when its code is not hot), and the same op recorded by fused eager (no executable
call).  Prints microseconds per step and each step's share of ``a + b``; writes
reports/op_floor.json.
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
    sp = exe.news[0]

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

    # the same two with the executable call stubbed (it returns a result computed
    # before): what torchneuron's Python and torch cost without XLA
    held = exe.fn(ax, ay)
    real = exe.fn
    exe.fn = lambda *a: held
    try:
        rows["Entry, executable call stubbed"] = per_call(lambda: entry(x, y), n)
        rows["a + b, executable call stubbed"] = per_call(lambda: x + y, n)
    finally:
        exe.fn = real

    # the eager executable store hands the entry a jax Compiled object (an AOT executable)
    # instead of the jitted function: the same op through it, in this run
    real = exe.fn
    exe.fn = getattr(exe, "jit", real).trace(ax, ay).lower().compile()
    try:
        rows["a + b through torch, AOT executable (eager store)"] = per_call(
            lambda: x + y, n)
    finally:
        exe.fn = real

    # XLA:CPU's own call between other work: a jitted jax add alone and interleaved
    # with a few microseconds of torch CPU work (no torchneuron), that work subtracted
    import jax
    import jax.numpy as jnp

    jadd = jax.jit(lambda u, v: u + v)
    ja, jb = jnp.ones((64, 64), jnp.float32), jnp.ones((64, 64), jnp.float32)
    jadd(ja, jb).block_until_ready()
    cpu_t = torch.empty(64, 64)

    def torch_work():
        return torch.empty(0).set_(cpu_t.untyped_storage(), 0, (64, 64), (64, 1)).stride()

    work = per_call(torch_work, n)
    rows["jitted jax add alone"] = per_call(lambda: jadd(ja, jb), n)
    rows["jitted jax add between torch CPU work (work subtracted)"] = per_call(
        lambda: (jadd(ja, jb), torch_work()), n) - work
    prev = torchneuron.set_eager_mode("fused")
    try:
        def fused_add():
            return x + y

        rows["a + b recorded by fused eager (flush every 100)"] = per_call(
            lambda: [fused_add() for _ in range(100)], max(n // 100, 10)) / 100
    finally:
        torchneuron.set_eager_mode(prev)
    total = rows["a + b through torch"]
    print(f"{'step':60s} {'us':>8s} {'of a+b':>8s}")
    for name, us in rows.items():
        print(f"{name:60s} {us:8.2f} {us / total:8.0%}")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "op_floor.json"), "w") as f:
        json.dump({"us": rows, "torch": torch.__version__}, f, indent=1)
    print(f"wrote {a.out}/op_floor.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

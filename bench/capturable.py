"""Compiled small-GPT training step on neuron: AdamW(capturable=True) (step counters on the
device, what Dynamo sets for CUDA parameters) vs the default (host step counters), side
by side in one run (both optimizers fresh, only the flag differs).  Checks that neuron
should follow Dynamo's CUDA rule (torchneuron makes compiled neuron optimizers capturable):
on this 2-core machine capturable took 0.77-0.92x the time at the tiny size.

    python bench/capturable.py [--size tiny|full] [--steps 20] [--rounds 5]

Prints the best-round step time of each and the ratio.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

import torchneuron  # noqa: F401
from torchneuron.models.gpt import GPT, GPTConfig, synthetic_batches

SIZES = {"tiny": dict(layers=2, width=64, heads=2, seq=32, vocab=256, batch=2),
         "full": dict(layers=4, width=256, heads=4, seq=128, vocab=256, batch=8)}

_STEP = """
def step(model, opt, idx, targets):
    loss = model(idx, targets)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()
"""


def _step_fn(tag):
    ns = {}
    exec(compile(_STEP, f"<capturable-{tag}>", "exec"), ns)
    return ns["step"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny", choices=sorted(SIZES))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    s = SIZES[a.size]
    cfg = GPTConfig(vocab_size=s["vocab"], block_size=s["seq"], n_layer=s["layers"],
                    n_head=s["heads"], n_embd=s["width"])
    batches = [(x.to("neuron"), y.to("neuron"))
               for x, y in synthetic_batches(4, s["batch"], s["seq"], s["vocab"])]
    runs = {}
    for name in ("capturable", "host step counters"):
        torch.manual_seed(0)
        model = GPT(cfg).to("neuron")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3,
                                capturable=name == "capturable")
        fn = torch.compile(_step_fn(name), backend="neuron")
        from torch._dynamo.variables import optimizer as dyn_opt

        patched = dyn_opt.OptimizerVariable._set_capturable
        if name != "capturable":  # Dynamo's own rule (cuda/xpu only) while this one compiles
            dyn_opt.OptimizerVariable._set_capturable = getattr(patched, "__wrapped__", patched)
        try:
            for i in range(3):
                fn(model, opt, *batches[i % 4]).item()
        finally:
            dyn_opt.OptimizerVariable._set_capturable = patched
        runs[name] = dict(fn=fn, model=model, opt=opt, best=float("inf"))
        print(f"{name}: capturable={opt.param_groups[0]['capturable']}", file=sys.stderr)
    for r in range(a.rounds):
        for name, run in runs.items():
            torch.neuron.synchronize()
            t = time.perf_counter()
            for i in range(a.steps):
                loss = run["fn"](run["model"], run["opt"], *batches[i % 4])
            loss.item()
            run["best"] = min(run["best"], (time.perf_counter() - t) / a.steps)
        print(f"round {r + 1}/{a.rounds}", file=sys.stderr)
    cap, host = runs["capturable"]["best"], runs["host step counters"]["best"]
    print(f"{a.size}: capturable {cap * 1e3:.2f} ms/step, host step counters "
          f"{host * 1e3:.2f} ms/step, capturable/host {cap / host:.2f}")


if __name__ == "__main__":
    main()

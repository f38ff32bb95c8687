"""The main job: train a small CNN on scikit-learn's bundled digits on the neuron device.

    python -m torchneuron.demo [--epochs N] [--device neuron] [--compile]
    torchrun --nproc_per_node=2 -m torchneuron.demo --ddp     (or --fsdp)

Prints a progress bar, then test accuracy, steps/s and the number of ops that
fell back to the CPU (0 means the whole training ran natively).  With --ddp or
--fsdp (under torchrun) every process trains on its share of each global batch
(the same global batch and steps as one process) through the "neuron" c10d backend.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class DigitsCNN(nn.Module):
    def __init__(self, width: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(2 * width * 4 * 4, 128)
        self.drop = nn.Dropout(0.2)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = self.drop(F.relu(self.fc1(x.flatten(1))))
        return self.fc2(x)


def load_digits(seed: int = 0):
    """scikit-learn's digits (1797 8x8 images), split 80/20, scaled to [0, 1]."""
    from sklearn.datasets import load_digits as _load

    d = _load()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(d.target, dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(y), generator=g)
    x, y = x[perm], y[perm]
    n_test = len(y) // 5
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def _wrap(model, parallel: str | None):
    """(model, rank, world): DDP or FSDP2 over the default process group."""
    if parallel is None:
        return model, 0, 1
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model), rank, world
    from torch.distributed.fsdp import fully_shard

    for m in (model.conv1, model.conv2, model.fc1, model.fc2):
        fully_shard(m)
    fully_shard(model)
    return model, rank, world


def train(device: str = "neuron", epochs: int = 8, batch_size: int = 64, lr: float = 2e-3,
          seed: int = 0, compile: bool = False, progress: bool = True, log=print,
          parallel: str | None = None):
    import torchneuron

    torch.manual_seed(seed)
    (xtr, ytr), (xte, yte) = load_digits(seed)
    dev = torch.device(device)
    model, rank, world = _wrap(DigitsCNN().to(dev), parallel)
    if batch_size % world:
        raise ValueError(f"--batch-size {batch_size} is not divisible by the world size {world}")
    local_bs = batch_size // world
    progress = progress and rank == 0
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    step_fn = _step
    if compile:
        step_fn = torch.compile(_step, backend="neuron")
    xtr_d, ytr_d = xtr.to(dev), ytr.to(dev)
    torchneuron.reset_fallback_stats()
    n = len(ytr)
    steps_per_epoch = (n + batch_size - 1) // batch_size
    total = epochs * steps_per_epoch
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc=f"training on {device}", unit="step", file=sys.stderr)
    g = torch.Generator().manual_seed(seed + 1)
    t0 = None
    timed_steps = 0
    loss = None
    for epoch in range(epochs):
        perm = torch.randperm(n, generator=g).to(dev)
        model.train()
        for i in range(steps_per_epoch):
            idx = perm[i * batch_size:(i + 1) * batch_size]
            if world > 1:  # this rank's share of the global batch (the last one may be short)
                idx = idx[rank * local_bs:(rank + 1) * local_bs]
                if len(idx) == 0:
                    idx = perm[i * batch_size:i * batch_size + 1]
            loss = step_fn(model, opt, xtr_d[idx], ytr_d[idx])
            if epoch == 0 and i == 1:  # time from the third step: the first ones compile
                _sync(dev)
                t0 = time.perf_counter()
                timed_steps = 0
            elif t0 is not None:
                timed_steps += 1
            if bar is not None:
                bar.update(1)
                if i == steps_per_epoch - 1:
                    bar.set_postfix(epoch=epoch + 1, loss=f"{loss.item():.4f}")
    _sync(dev)
    elapsed = time.perf_counter() - t0 if t0 else float("nan")
    if bar is not None:
        bar.close()
    acc = evaluate(model, xte, yte, dev)
    fallbacks = torchneuron.fallback_stats() if dev.type == "neuron" else {}
    return {
        "device": str(dev),
        "parallel": parallel or "none",
        "world_size": world,
        "epochs": epochs,
        "steps": total,
        "final_loss": float(loss.item()),
        "test_accuracy": acc,
        "steps_per_s": timed_steps / elapsed if elapsed == elapsed and elapsed > 0 else None,
        "fallback_ops": sum(fallbacks.values()),
        "fallback_detail": fallbacks,
    }


def _step(model, opt, x, y):
    loss = F.cross_entropy(model(x), y, label_smoothing=0.05)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


@torch.no_grad()
def evaluate(model, x, y, dev) -> float:
    model.eval()
    pred = model(x.to(dev)).argmax(1).cpu()
    return float((pred == y).float().mean().item())


def _sync(dev):
    if dev.type == "neuron":
        torch.neuron.synchronize()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="torchneuron demo", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="neuron")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile", action="store_true", help="torch.compile(backend='neuron') the step")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-progress", action="store_true")
    par = p.add_mutually_exclusive_group()
    par.add_argument("--ddp", action="store_true",
                     help="DistributedDataParallel over the neuron c10d backend (torchrun)")
    par.add_argument("--fsdp", action="store_true", help="FSDP2 fully_shard (torchrun)")
    a = p.parse_args(argv)
    parallel = "ddp" if a.ddp else "fsdp" if a.fsdp else None
    if parallel is not None:
        import torch.distributed as dist
        from datetime import timedelta

        dist.init_process_group(timeout=timedelta(minutes=5))
    try:
        r = train(a.device, a.epochs, a.batch_size, a.lr, a.seed, a.compile, not a.no_progress,
                  parallel=parallel)
    finally:
        if parallel is not None:
            dist.destroy_process_group()
    if r["world_size"] > 1 and int(__import__("os").environ.get("RANK", "0")) != 0:
        return 0 if r["test_accuracy"] >= 0.95 else 1
    if a.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"device            {r['device']}")
        if parallel is not None:
            print(f"parallel          {parallel}, world size {r['world_size']}")
        print(f"steps             {r['steps']} ({r['epochs']} epochs)")
        print(f"final loss        {r['final_loss']:.4f}")
        print(f"test accuracy     {r['test_accuracy'] * 100:.2f}%")
        sps = r["steps_per_s"]
        print(f"steps/s           {sps:.1f}" if sps else "steps/s           n/a")
        print(f"CPU fallback ops  {r['fallback_ops']}" + (f"  {r['fallback_detail']}" if r["fallback_ops"] else ""))
    ok = r["test_accuracy"] >= 0.95 and (r["fallback_ops"] == 0 or a.device != "neuron")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

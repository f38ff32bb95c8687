"""One torchrun worker for tests/test_distributed.py: runs the named scenarios in one
process group and writes {scenario: [ok, detail]} to OUT/rank{R}.json.

Every scenario compares the distributed run on neuron with a single-process reference
on CPU over the same global batch (or with the same distributed recipe on CPU tensors,
which the same process group serves through gloo), after several optimizer steps.

    torchrun --standalone --nproc_per_node=2 tests/programs/dist_worker.py OUT NAME...
"""
from __future__ import annotations

import copy
import json
import os
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

DEV = "neuron"
STEPS = 3
SCENARIOS = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def maxdiff(a, b):
    return (a.detach().cpu().double() - b.detach().cpu().double()).abs().max().item()


def close(a, b, tol=1e-5):
    d = maxdiff(a, b)
    if not d <= tol:
        raise AssertionError(f"max difference {d:.3g} > {tol:.1g}")
    return d


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batch(n=8, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 8, generator=g), torch.randn(n, 4, generator=g)


def reference(model_fn, steps=STEPS, lr=0.1, micro=1, opt=torch.optim.SGD):
    """The single-process CPU run on the global batch (micro-batches summed)."""
    ref = model_fn()
    o = opt(ref.parameters(), lr=lr)
    for s in range(steps):
        o.zero_grad()
        for m in range(micro):
            x, y = batch(seed=1 + s * micro + m)
            F.mse_loss(ref(x), y).backward()
        o.step()
    return ref


def shard(t, r, w):
    return t.chunk(w)[r].to(DEV)


def compare_params(model, ref, tol=1e-5, full=lambda t: t):
    worst = 0.0
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        worst = max(worst, close(full(p), full(q) if hasattr(q, "full_tensor") else q, tol))
    return f"params max diff {worst:.2e}"


# ------------------------------------------------------------------- collectives
@scenario
def collectives(r, w):
    out = []
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    ranks = [base + k for k in range(w)]
    for op, want in [(dist.ReduceOp.SUM, sum(ranks)), (dist.ReduceOp.AVG, sum(ranks) / w),
                     (dist.ReduceOp.MAX, ranks[-1]), (dist.ReduceOp.MIN, ranks[0]),
                     (dist.ReduceOp.PRODUCT, torch.stack(ranks).prod(0))]:
        t = ranks[r].to(DEV)
        dist.all_reduce(t, op=op)
        close(t, want, 0)
        out.append(str(op).split(".")[-1])
    for dtype in (torch.bfloat16, torch.int64, torch.float64):  # other dtypes
        t = ranks[r].to(dtype).to(DEV)
        dist.all_reduce(t)
        close(t, sum(ranks).to(dtype), 0)
    # a non-contiguous view is reduced in place
    t = torch.zeros(4, 6, device=DEV)
    v = t[:, ::2]
    v.fill_(r + 1)
    dist.all_reduce(v)
    close(t[:, ::2], torch.full((4, 3), float(sum(range(1, w + 1)))), 0)
    close(t[:, 1::2], torch.zeros(4, 3), 0)
    # broadcast / reduce
    t = ranks[r].to(DEV)
    dist.broadcast(t, src=w - 1)
    close(t, ranks[-1], 0)
    t = ranks[r].to(DEV)
    dist.reduce(t, dst=0)
    if r == 0:
        close(t, sum(ranks), 0)
    # all_gather (list and into tensor), reduce_scatter (tensor and list)
    lst = [torch.empty(3, 4, device=DEV) for _ in range(w)]
    dist.all_gather(lst, ranks[r].to(DEV))
    for k in range(w):
        close(lst[k], ranks[k], 0)
    big = torch.empty(3 * w, 4, device=DEV)
    dist.all_gather_into_tensor(big, ranks[r].to(DEV))
    close(big, torch.cat(ranks), 0)
    full = torch.cat(ranks)  # each rank contributes the same cat(...) + r
    o = torch.empty(3, 4, device=DEV)
    dist.reduce_scatter_tensor(o, (full + r).to(DEV))
    close(o, (full * w + sum(range(w))).chunk(w)[r], 0)
    o = torch.empty(3, 4, device=DEV)
    dist.reduce_scatter(o, [(c + r).to(DEV) for c in full.chunk(w)])
    close(o, (full * w + sum(range(w))).chunk(w)[r], 0)
    # gather / scatter
    gl = [torch.empty(3, 4, device=DEV) for _ in range(w)] if r == 0 else None
    dist.gather(ranks[r].to(DEV), gl, dst=0)
    if r == 0:
        for k in range(w):
            close(gl[k], ranks[k], 0)
    o = torch.empty(3, 4, device=DEV)
    dist.scatter(o, [t.to(DEV) for t in ranks] if r == 0 else None, src=0)
    close(o, ranks[r], 0)
    # all_to_all_single with uneven splits, and the list form
    inp = torch.arange(w * (w + 1) // 2 * 2, dtype=torch.float32) + 100 * r
    in_splits = [2 * (k + 1) for k in range(w)][:w]
    inp = torch.arange(sum(in_splits), dtype=torch.float32) + 100 * r
    out_splits = [2 * (r + 1)] * w
    o = torch.empty(sum(out_splits), device=DEV)
    dist.all_to_all_single(o, inp.to(DEV), out_splits, in_splits)
    want = torch.cat([(torch.arange(sum(in_splits), dtype=torch.float32) + 100 * k)
                      .split(in_splits)[r] for k in range(w)])
    close(o, want, 0)
    outs = [torch.empty(2, device=DEV) for _ in range(w)]
    dist.all_to_all(outs, [torch.full((2,), float(10 * r + k), device=DEV) for k in range(w)])
    for k in range(w):
        close(outs[k], torch.full((2,), float(10 * k + r)), 0)
    # point to point: batch_isend_irecv in a ring (no rank blocks in a send)
    nxt, prv = (r + 1) % w, (r - 1) % w
    got = torch.empty(5, device=DEV)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((5,), float(r), device=DEV), nxt),
                                   dist.P2POp(dist.irecv, got, prv)])
    for q in reqs:
        q.wait()
    close(got, torch.full((5,), float(prv)), 0)
    if w >= 2:
        t = torch.full((3,), 7.0, device=DEV) if r == 0 else torch.empty(3, device=DEV)
        if r == 0:
            dist.send(t, 1)
        elif r == 1:
            dist.recv(t, 0)
            close(t, torch.full((3,), 7.0), 0)
    # async op: work.wait(), and the future's value
    t = ranks[r].to(DEV)
    work = dist.all_reduce(t, async_op=True)
    fut_val = work.get_future().wait()
    close(fut_val[0], sum(ranks), 0)
    work.wait()
    close(t, sum(ranks), 0)
    # coalesced (the coalescing manager, as FSDP and DDP use it)
    a, b = ranks[r].to(DEV), (ranks[r] * 2).to(DEV)
    with dist._coalescing_manager(async_ops=False):
        dist.all_reduce(a)
        dist.all_reduce(b)
    close(a, sum(ranks), 0)
    close(b, sum(ranks) * 2, 0)
    # objects and CPU tensors (gloo serves them through the same group)
    objs = [None] * w
    dist.all_gather_object(objs, {"rank": r})
    assert objs == [{"rank": k} for k in range(w)], objs
    c = ranks[r].clone()
    dist.all_reduce(c)
    close(c, sum(ranks), 0)
    dist.barrier()
    return ", ".join(out)


@scenario
def mismatch_errors(r, w):
    """Bad calls raise PyTorch-style errors (no hang, no wrong data)."""
    msgs = []
    try:
        dist.all_gather_into_tensor(torch.empty(5, device=DEV), torch.ones(3, device=DEV))
    except (RuntimeError, ValueError) as e:
        msgs.append(type(e).__name__)
    else:
        raise AssertionError("a wrongly sized all_gather_into_tensor output was accepted")
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int32, device=DEV), op=dist.ReduceOp.AVG)
    except (RuntimeError, ValueError) as e:
        msgs.append(type(e).__name__)
    else:
        raise AssertionError("AVG of an integer tensor was accepted")
    dist.barrier()
    return ", ".join(msgs)


# ------------------------------------------------------------------- DDP
def _ddp_run(r, w, steps=STEPS, micro=1, hook=None, **kw):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(mlp().to(DEV), **kw)
    if hook is not None:
        model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for s in range(steps):
        opt.zero_grad()
        for m in range(micro):
            x, y = batch(seed=1 + s * micro + m)
            ctx = model.no_sync() if m < micro - 1 else _null()
            with ctx:
                F.mse_loss(model(shard(x, r, w)), shard(y, r, w)).backward()
        opt.step()
    return model.module


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@scenario
def ddp(r, w):
    return compare_params(_ddp_run(r, w), reference(mlp))


@scenario
def ddp_bucket_view(r, w):
    return compare_params(_ddp_run(r, w, gradient_as_bucket_view=True, bucket_cap_mb=0.0001),
                          reference(mlp))


@scenario
def ddp_no_sync(r, w):
    return compare_params(_ddp_run(r, w, micro=2), reference(mlp, micro=2))


@scenario
def ddp_find_unused(r, w):
    return compare_params(_ddp_run(r, w, find_unused_parameters=True), reference(mlp))


@scenario
def ddp_static_graph(r, w):
    return compare_params(_ddp_run(r, w, static_graph=True), reference(mlp))


@scenario
def ddp_hooks(r, w):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as dh

    ref = reference(mlp)
    out = [compare_params(_ddp_run(r, w, hook=dh.allreduce_hook), ref)]
    out.append(compare_params(_ddp_run(r, w, hook=dh.fp16_compress_hook), ref, tol=2e-3))
    # (torch's bf16_compress_hook refuses every device but CUDA/NCCL and XPU/XCCL)
    return "; ".join(out)


@scenario
def ddp_compile(r, w):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(mlp().to(DEV))
    cmodel = torch.compile(model, backend="neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for s in range(STEPS):
        opt.zero_grad()
        x, y = batch(seed=1 + s)
        F.mse_loss(cmodel(shard(x, r, w)), shard(y, r, w)).backward()
        opt.step()
    return compare_params(model.module, reference(mlp))


@scenario
def zero(r, w):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(mlp().to(DEV))
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=0.01)
    for s in range(STEPS):
        opt.zero_grad()
        x, y = batch(seed=1 + s)
        F.mse_loss(model(shard(x, r, w)), shard(y, r, w)).backward()
        opt.step()
    ref = reference(mlp, lr=0.01, opt=torch.optim.AdamW)
    opt.consolidate_state_dict(to=0)
    if r == 0:
        st = opt.state_dict()
        assert len(st["state"]) == len(list(model.parameters())), "consolidated state is partial"
    return compare_params(model.module, ref)


# ------------------------------------------------------------------- FSDP2
def _fsdp_run(r, w, dev=DEV, steps=STEPS, micro=1, reshard=True, mp=None, divide=None, lr=0.1):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = mlp().to(dev)
    # (the default mesh is the accelerator's: the CPU recipe names its mesh)
    kw = {"reshard_after_forward": reshard, "mesh": init_device_mesh(dev, (w,))}
    if mp is not None:
        kw["mp_policy"] = mp
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, **kw)
    fully_shard(model, **kw)
    if divide is not None:
        for mod in model.modules():  # every FSDP module (the root holds no parameters)
            if hasattr(mod, "set_gradient_divide_factor"):
                mod.set_gradient_divide_factor(divide)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for s in range(steps):
        opt.zero_grad()
        for m in range(micro):
            x, y = batch(seed=1 + s * micro + m)
            model.set_requires_gradient_sync(m == micro - 1)
            F.mse_loss(model(shard(x, r, w).to(dev)), shard(y, r, w).to(dev)).backward()
        opt.step()
    return model


def _full(p):
    return p.full_tensor()


@scenario
def fsdp(r, w):
    a = compare_params(_fsdp_run(r, w), reference(mlp), full=_full)
    b = compare_params(_fsdp_run(r, w, reshard=False), reference(mlp), full=_full)
    return f"reshard: {a}; no reshard: {b}"


@scenario
def fsdp_grad_accum(r, w):
    return compare_params(_fsdp_run(r, w, micro=2), reference(mlp, micro=2), full=_full)


@scenario
def fsdp_divide_factor(r, w):
    # factor 1: gradients summed over ranks; compared with the same recipe on CPU tensors
    dev_model = _fsdp_run(r, w, divide=1.0)
    cpu_model = _fsdp_run(r, w, dev="cpu", divide=1.0)
    default = _fsdp_run(r, w, dev="cpu")
    assert maxdiff(_full(next(cpu_model.parameters())), _full(next(default.parameters()))) > 1e-4, \
        "the divide factor changed nothing"
    return compare_params(dev_model, cpu_model, tol=1e-6, full=_full) + " (vs CPU recipe)"


@scenario
def fsdp_mixed_precision(r, w):
    from torch.distributed.fsdp import MixedPrecisionPolicy

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    dev_model = _fsdp_run(r, w, mp=mp)
    for p in dev_model.parameters():
        assert p.dtype == torch.float32, p.dtype  # sharded parameters stay float32
    # bf16 compute: within bf16 rounding of the float32 single-process reference
    out = "vs fp32 reference " + compare_params(dev_model, reference(mlp), tol=2e-2, full=_full)
    try:
        cpu_model = _fsdp_run(r, w, dev="cpu", mp=mp)  # the same recipe on CPU tensors (gloo)
    except RuntimeError as e:  # torch 2.11's CPU FSDP2 mixed precision raises by itself
        return out + f"; (the CPU recipe itself fails on this torch: {str(e)[:80]})"
    return out + "; vs the same recipe on CPU " + compare_params(dev_model, cpu_model, tol=1e-6,
                                                                 full=_full)


@scenario
def dcp_save(r, w):
    """Save an FSDP2 model and optimizer with torch.distributed.checkpoint, load them into
    a fresh FSDP2 model, and compare; the test loads the same files in one process."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    out_dir = os.environ["TN_DCP_DIR"]
    model = _fsdp_run(r, w, lr=0.01)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    x, y = batch(seed=9)
    F.mse_loss(model(shard(x, r, w)), shard(y, r, w)).backward()
    opt.step()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=out_dir)
    fresh = _fsdp_run(r, w, steps=0)
    fopt = torch.optim.AdamW(fresh.parameters(), lr=0.01)
    fm, fo = get_state_dict(fresh, fopt)
    state = {"model": fm, "optim": fo}
    dcp.load(state, checkpoint_id=out_dir)
    set_state_dict(fresh, fopt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    worst = max(close(_full(p), _full(q), 0) for p, q in zip(fresh.parameters(), model.parameters()))
    res = f"reloaded params equal (max diff {worst})"
    for (k, a), b in zip(fopt.state_dict()["state"].items(), opt.state_dict()["state"].values()):
        close(_full(a["exp_avg"]), _full(b["exp_avg"]), 0)
    full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
    if r == 0:
        torch.save(full, os.path.join(out_dir, "full_params.pt"))
    return res


# ------------------------------------------------------------------- DTensor / TP
@scenario
def dtensor(r, w):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard, distribute_tensor,
                                          randn)

    mesh = init_device_mesh(DEV, (w,))
    assert mesh.device_type == DEV
    torch.manual_seed(0)
    x = torch.randn(8, 6)
    wt = torch.randn(6, 5)
    dx = distribute_tensor(x.to(DEV), mesh, [Shard(0)])
    close(dx.to_local(), x.chunk(w)[r], 0)
    assert dx.to_local().device.type == DEV
    close(dx.redistribute(mesh, [Replicate()]).to_local(), x, 0)
    close(dx.redistribute(mesh, [Shard(1)]).to_local(), x.chunk(w, dim=1)[r], 0)
    part = DTensor.from_local((x * (r + 1)).to(DEV), mesh, [Partial()])
    close(part.redistribute(mesh, [Replicate()]).to_local(), x * sum(range(1, w + 1)), 1e-5)
    close(part.redistribute(mesh, [Shard(0)]).to_local(),
          (x * sum(range(1, w + 1))).chunk(w)[r], 1e-5)
    dw = distribute_tensor(wt.to(DEV), mesh, [Replicate()])
    close((dx @ dw).full_tensor(), x @ wt, 1e-5)
    close(dx.sum().full_tensor(), x.sum(), 1e-5)
    close(torch.relu(dx * 2 + 1).full_tensor(), torch.relu(x * 2 + 1), 1e-6)
    # autograd through DTensor ops
    dxg = distribute_tensor(x.to(DEV).requires_grad_(), mesh, [Shard(0)])
    (dxg @ dw).sum().backward()
    ref = x.clone().requires_grad_()
    (ref @ wt).sum().backward()
    # distributed RNG: Replicate draws are equal on every rank, Shard draws differ
    torch.manual_seed(5)
    rep = randn(4, 4, device_mesh=mesh, placements=[Replicate()]).to_local().cpu()
    sh = randn(4 * w, 4, device_mesh=mesh, placements=[Shard(0)]).to_local().cpu()
    reps = [None] * w
    shs = [None] * w
    dist.all_gather_object(reps, rep)
    dist.all_gather_object(shs, sh)
    assert all(torch.equal(reps[0], t) for t in reps), "Replicate random draws differ"
    assert not torch.equal(shs[0], shs[1]), "Shard random draws are equal on two ranks"
    return "Shard/Replicate/Partial, matmul, sum, autograd, RNG"


class Attn(nn.Module):
    def __init__(self, d=8, heads=2):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.o = nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        h = self.norm(x)
        # local heads: a colwise-sharded projection holds heads/world heads
        q, k, v = (p(h).view(b, s, -1, d // self.heads).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.o(a.transpose(1, 2).reshape(b, s, -1))


def attn():
    torch.manual_seed(0)
    return Attn()


@scenario
def tensor_parallel(r, w):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    mesh = init_device_mesh(DEV, (w,))
    out = []
    # MLP: column-parallel up projection, row-parallel down projection
    m = parallelize_module(mlp().to(DEV), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for s in range(STEPS):
        opt.zero_grad()
        x, y = batch(seed=1 + s)  # every rank sees the whole batch
        F.mse_loss(m(x.to(DEV)), y.to(DEV)).backward()
        opt.step()
    out.append("mlp " + compare_params(m, reference(mlp), full=_full))
    # attention: q/k/v colwise (heads split over ranks), out rowwise
    a = parallelize_module(attn().to(DEV), mesh, {"q": ColwiseParallel(), "k": ColwiseParallel(),
                                                  "v": ColwiseParallel(), "o": RowwiseParallel()})
    ref = attn()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 6, 8, generator=g)
    ya = a(x.to(DEV))
    yr = ref(x)
    close(ya, yr, 1e-5)
    ya.square().mean().backward()
    yr.square().mean().backward()
    worst = max(maxdiff(p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad, q.grad)
                for p, q in zip(a.parameters(), ref.parameters()))
    assert worst < 1e-5, f"attention gradients differ by {worst:.3g}"
    out.append(f"attention grads {worst:.2e}")
    return "; ".join(out)


@scenario
def sequence_parallel(r, w):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    mesh = init_device_mesh(DEV, (w,))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.norm = nn.LayerNorm(8)
            self.up = nn.Linear(8, 16)
            self.down = nn.Linear(16, 8)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(self.norm(x))))

    m = parallelize_module(Block().to(DEV), mesh, {
        "norm": SequenceParallel(),
        "up": ColwiseParallel(input_layouts=Shard(1)),
        "down": RowwiseParallel(output_layouts=Shard(1)),
    })
    ref = Block()
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 4 * w, 8, generator=g)
    y = m(x.chunk(w, dim=1)[r].to(DEV))  # each rank holds its slice of the sequence
    yr = ref(x)
    close(y, yr.chunk(w, dim=1)[r], 1e-5)
    y.square().mean().backward()
    yr.square().mean().backward()
    # each rank's loss is the mean over its slice: the gradients add up to w times the
    # gradient of the global mean
    worst = max(close(_full(p.grad), q.grad * w, 1e-5)
                for p, q in zip(m.parameters(), ref.parameters()))
    return f"LayerNorm sequence-parallel + colwise/rowwise, grads {worst:.1e}"


@scenario
def mesh_2d(r, w):
    """TP x FSDP2 on a 2-D mesh (4 processes: dp 2 x tp 2)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    if w != 4:
        return "skipped: needs 4 processes"
    mesh = init_device_mesh(DEV, (2, 2), mesh_dim_names=("dp", "tp"))
    m = parallelize_module(mlp().to(DEV), mesh["tp"], {"0": ColwiseParallel(),
                                                       "2": RowwiseParallel()})
    fully_shard(m, mesh=mesh["dp"])
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    dp = mesh["dp"].get_local_rank()
    for s in range(STEPS):
        opt.zero_grad()
        x, y = batch(seed=1 + s)
        F.mse_loss(m(shard(x, dp, 2)), shard(y, dp, 2)).backward()
        opt.step()
    return compare_params(m, reference(mlp), full=_full)


# ------------------------------------------------------------------- pipelining
@scenario
def pipeline(r, w):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    out = []
    for sched_cls in (ScheduleGPipe, Schedule1F1B):
        full = nn.Sequential(*[nn.Linear(8, 8) for _ in range(2 * w)])
        torch.manual_seed(0)
        for p in full.parameters():
            nn.init.normal_(p, std=0.3)
        ref = copy.deepcopy(full)
        per = len(full) // w
        part = nn.Sequential(*list(full)[r * per:(r + 1) * per]).to(DEV)
        stage = PipelineStage(part, r, w, torch.device(DEV))
        sched = sched_cls(stage, n_microbatches=4, loss_fn=lambda o, t: F.mse_loss(o, t))
        g = torch.Generator().manual_seed(7)
        x, y = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
        if r == 0:
            sched.step(x.to(DEV))
        elif r == w - 1:
            losses = []
            sched.step(target=y.to(DEV), losses=losses)
        else:
            sched.step()
        # reference: the schedule scales gradients by 1/n_microbatches (scale_grads)
        for xm, ym in zip(x.chunk(4), y.chunk(4)):
            (F.mse_loss(ref(xm), ym) / 4).backward()
        worst = max(maxdiff(p.grad, q.grad) for p, q in
                    zip(part.parameters(), nn.Sequential(*list(ref)[r * per:(r + 1) * per])
                        .parameters()))
        assert worst < 1e-5, f"{sched_cls.__name__}: gradients differ by {worst:.3g}"
        out.append(f"{sched_cls.__name__} {worst:.1e}")
    return ", ".join(out)


# ------------------------------------------------------------------- faults
@scenario
def timeout_fault(r, w):
    """Rank 1 never joins: rank 0's all_reduce fails with the group's timeout."""
    import time

    grp = dist.new_group(timeout=timedelta(seconds=3))
    if r == 1:
        time.sleep(8)
        return "slept"
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(3, device=DEV), group=grp)
    except (RuntimeError, dist.DistError) as e:
        took = time.monotonic() - t0
        assert took < 30, f"timeout surfaced after {took:.0f} s"
        return f"{type(e).__name__} after {took:.1f} s: {str(e).splitlines()[0][:120]}"
    raise AssertionError("all_reduce with a missing rank returned")


@scenario
def mismatch_detected(r, w):
    """Under TORCH_DISTRIBUTED_DEBUG=DETAIL, collectives whose shapes or dtypes differ
    across ranks raise on every rank (not gloo's silent wrong data on one of them)."""
    out = []
    for what, t in [("shape", torch.ones(3 + r, device=DEV)),
                    ("dtype", torch.ones(4, dtype=(torch.float32, torch.float64)[r % 2],
                                         device=DEV))]:
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            assert "Detected mismatch between collectives" in str(e), e
            out.append(what)
        else:
            raise AssertionError(f"a {what} mismatch across ranks was not detected")
    t = torch.ones(4, device=DEV)  # the group still works
    dist.all_reduce(t)
    close(t, torch.full((4,), float(w)), 0)
    return "detected: " + ", ".join(out)


@scenario
def rank_dies(r, w):
    """Rank 1 dies without a word; rank 0's all_reduce must not hang."""
    if r == 1:
        os._exit(3)
    dist.all_reduce(torch.ones(3, device=DEV))
    return "all_reduce returned"


def main():
    out_dir, names = sys.argv[1], sys.argv[2:]
    # as CUDA programs do: the local rank names this process's device (here neuron:0)
    torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
    kw = {}
    if os.environ.get("TN_INIT_BACKEND"):  # "neuron", "cpu:gloo,neuron:neuron"
        kw["backend"] = os.environ["TN_INIT_BACKEND"]
    if os.environ.get("TN_DEVICE_ID"):
        kw["device_id"] = torch.device("neuron", torch.neuron.current_device())
    dist.init_process_group(timeout=timedelta(seconds=int(os.environ.get("TN_PG_TIMEOUT", "60"))),
                            **kw)
    r, w = dist.get_rank(), dist.get_world_size()
    results = {"backend": str(dist.get_backend()), "world": w,
               "device_count": torch.neuron.device_count(),
               "current_device": torch.neuron.current_device(),
               "group_type": type(dist.distributed_c10d._get_default_group()).__name__}
    for name in names:
        try:
            results[name] = [True, SCENARIOS[name](r, w)]
        except Exception as e:  # noqa: BLE001  (reported to the test)
            results[name] = [False, f"{type(e).__name__}: {e}\n{traceback.format_exc()[-3000:]}"]
        from torchneuron.distributed import xla_engine

        results["xla_calls"] = dict(xla_engine.calls)
        with open(os.path.join(out_dir, f"rank{r}.json"), "w") as f:
            json.dump(results, f, indent=1)
        if name in ("timeout_fault", "rank_dies"):
            break  # the group is unusable after a timeout
    if not {"timeout_fault", "rank_dies"} & set(names):
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

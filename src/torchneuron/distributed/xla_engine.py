"""Collectives inside XLA across processes (``TORCHNEURON_COLLECTIVES=xla``).

Under torchrun, ``runtime`` starts ``jax.distributed`` before any jax backend exists, so
every process sees the global device list (one device per process).  A collective on
neuron tensors of the whole world group then runs as one jitted ``shard_map`` program
over a 1-D mesh of all processes' devices: ``psum``/``pmax``/``pmin`` for all_reduce,
``all_gather`` and ``psum_scatter`` (tiled) for the all-gather and reduce-scatter into
tensors, an all-gather and a pick for broadcast.  On XLA:CPU the transport is the gloo
inside XLA; on CUDA it is NCCL, with no host copy.  The result array becomes the
tensor's new device buffer at once (jax arrays are futures: the program runs
asynchronously and readers wait), so the returned work is already complete.

Only tensors that are their whole cell (contiguous, offset 0, the cell's dtype) and only
groups of the whole world take this path; everything else (sub-groups, views, lists,
point to point, objects) goes through the gloo engine.
"""
from __future__ import annotations

import jax
import numpy as np
import torch
from torch.distributed import ReduceOp

from .. import runtime, storage

_mesh = None
_fns = runtime.JitCache("collectives", runtime.SMALL_FNS_MAX)
calls: dict = {}  # collective -> calls that ran inside XLA (tests and benchmarks read it)


def available(group_size: int) -> bool:
    return runtime.multiprocess() and group_size == jax.process_count()


def _get_mesh():
    global _mesh
    if _mesh is None:
        from jax.sharding import Mesh

        plat = runtime.platform()
        devs = sorted(jax.devices(plat), key=lambda d: (d.process_index, d.id))
        by_proc = {}
        for d in devs:
            by_proc.setdefault(d.process_index, d)  # one device per process
        _mesh = Mesh(np.array([by_proc[p] for p in sorted(by_proc)]), ("x",))
    return _mesh


_REDUCE = {ReduceOp.SUM: "psum", ReduceOp.MAX: "pmax", ReduceOp.MIN: "pmin",
           ReduceOp.AVG: "pmean"}


def reduce_kind(op):
    kind = getattr(op, "op", op)
    return _REDUCE.get(kind)


def _program(key, body, n_in, n_out):
    f = _fns.get(key)
    if f is None:
        from jax.sharding import PartitionSpec as P

        try:
            from jax import shard_map
        except ImportError:  # older jax
            from jax.experimental.shard_map import shard_map
        mesh = _get_mesh()
        f = _fns.put(key, runtime.jit(shard_map(body, mesh=mesh, in_specs=P("x"),
                                                out_specs=P("x"))))
    return f


def _global(arr, n):
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = _get_mesh()
    w = mesh.devices.size
    return jax.make_array_from_single_device_arrays((w * n,), NamedSharding(mesh, P("x")), [arr])


def _local(garr):
    return garr.addressable_shards[0].data


def _run(key, body, cell, n_out):
    calls[key[0]] = calls.get(key[0], 0) + 1
    f = _program(key, body, cell.numel, n_out)
    return _local(f(_global(cell.arr, cell.numel)))


def all_reduce(t: torch.Tensor, kind: str) -> None:
    cell = storage.whole_cell(t)
    from jax import lax

    fn = {"psum": lax.psum, "pmax": lax.pmax, "pmin": lax.pmin, "pmean": lax.pmean}[kind]
    key = ("all_reduce", kind, cell.numel, cell.dt)
    cell.arr = _run(key, lambda a: fn(a, "x"), cell, cell.numel)


def all_gather(out: torch.Tensor, inp: torch.Tensor) -> None:
    from jax import lax

    src, dst = storage.whole_cell(inp), storage.whole_cell(out)
    key = ("all_gather", src.numel, src.dt)
    dst.arr = _run(key, lambda a: lax.all_gather(a, "x", tiled=True), src, dst.numel)


def reduce_scatter(out: torch.Tensor, inp: torch.Tensor, kind: str) -> None:
    from jax import lax

    src, dst = storage.whole_cell(inp), storage.whole_cell(out)
    w = _get_mesh().devices.size
    if kind == "psum":
        body = lambda a: lax.psum_scatter(a, "x", tiled=True)  # noqa: E731
    elif kind == "pmean":
        body = lambda a: lax.psum_scatter(a, "x", tiled=True) / w  # noqa: E731
    else:
        raise KeyError(kind)
    key = ("reduce_scatter", kind, src.numel, src.dt)
    dst.arr = _run(key, body, src, dst.numel)


def broadcast(t: torch.Tensor, src_rank: int) -> None:
    from jax import lax

    cell = storage.whole_cell(t)
    n = cell.numel
    key = ("broadcast", src_rank, n, cell.dt)
    cell.arr = _run(key, lambda a: lax.all_gather(a, "x", tiled=True)[src_rank * n:(src_rank + 1) * n],
                    cell, n)

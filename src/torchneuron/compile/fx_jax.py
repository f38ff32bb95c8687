"""Run an FX graph of aten/prims ops as jax code, with the eager lowering table.

Used by torch.compile (the whole captured graph inside one ``jax.jit``) and by
eager dispatch for ops that have no lowering of their own but have a PyTorch
decomposition: the decomposition is traced with ``make_fx`` into a graph of
lowered ops and run inside one executable.
"""
from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from .. import lowering, runtime
from ..lowering import LOWERINGS

aten = torch.ops.aten


class Unlowerable(Exception):
    """A graph node whose op has no lowering (names the op)."""

    def __init__(self, op):
        super().__init__(f"torchneuron: no lowering for {op}")
        self.op = op


def _val_meta(node):
    v = node.meta.get("val")
    if isinstance(v, torch.Tensor):
        return v
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, torch.Tensor) or x is None for x in v):
        return type(v)(v)
    return None


def _cast_like(v, m):
    if isinstance(m, torch.Tensor) and hasattr(v, "dtype"):
        jd = runtime.jdtype(m.dtype)
        if v.dtype != jd:
            v = v.astype(jd)
        if tuple(v.shape) != tuple(m.shape) and v.size == m.numel():
            v = v.reshape(tuple(m.shape))
        return v
    if isinstance(m, (list, tuple)) and isinstance(v, (list, tuple)):
        return type(v)(_cast_like(a, b) for a, b in zip(v, m))
    return v


def _const(t: torch.Tensor):
    from .. import storage

    if t.device.type == "neuron":
        from ..ops.memory import materialize

        return materialize(t)
    return jnp.asarray(storage.runtime.torch_to_numpy(t.detach().contiguous().cpu()))


def run_graph(gm: torch.fx.GraphModule, args, device: int = 0, key=None):
    """Interpret `gm` on jax values `args` (inside a jax trace)."""
    env = {}
    it = iter(args)
    k_used = [0]

    def load(a):
        if isinstance(a, torch.fx.Node):
            return env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(load(x) for x in a)
        if isinstance(a, dict):
            return {k: load(v) for k, v in a.items()}
        if isinstance(a, torch.Tensor):
            return _const(a)
        return a

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = next(it)
        elif node.op == "get_attr":
            obj = gm
            for part in node.target.split("."):
                obj = getattr(obj, part)
            env[node] = _const(obj) if isinstance(obj, torch.Tensor) else obj
        elif node.op == "call_function":
            tgt = node.target
            a = load(node.args)
            kw = load(node.kwargs)
            if tgt is operator.getitem:
                env[node] = a[0][a[1]]
                continue
            if not isinstance(tgt, torch._ops.OpOverload):
                env[node] = tgt(*a, **kw)
                continue
            low = LOWERINGS.get(tgt)
            if low is None:
                raise Unlowerable(tgt.name())
            meta = _val_meta(node)
            sub_key = None
            if low.random:
                if key is None:
                    raise Unlowerable(tgt.name() + " (random op without an RNG key)")
                sub_key = jax.random.fold_in(key, k_used[0])
                k_used[0] += 1
            kw = {k: v for k, v in kw.items() if k != "device" or True}
            with lowering.tracing(meta=meta, key=sub_key, device=device):
                out = low.fn(*a, **kw)
            env[node] = _cast_like(out, meta) if meta is not None else out
        elif node.op == "output":
            return load(node.args[0])
        else:
            raise Unlowerable(f"fx node kind {node.op}")
    return None


# ---------------------------------------------------------------- decompositions
def _decomp_table():
    from torch._decomp import decomposition_table

    return {op: fn for op, fn in decomposition_table.items() if op not in LOWERINGS}


def decomposition_lowering(op):
    """A Lowering for `op` that traces PyTorch's decomposition (None if it has none)."""
    from torch._decomp import decomposition_table

    if op not in decomposition_table:
        return None
    decomp = decomposition_table[op]
    static = {a.name for a in op._schema.arguments}

    def fn(*args, **kwargs):
        tensors = []

        def to_meta(v):
            if hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, torch.Tensor):
                tensors.append(v)
                return torch.empty(tuple(v.shape), dtype=runtime.tdtype(v.dtype), device="meta")
            if isinstance(v, (list, tuple)):
                return type(v)(to_meta(x) for x in v)
            if isinstance(v, torch.device):
                return torch.device("meta")
            return v

        margs = [to_meta(a) for a in args]
        mkw = {k: to_meta(v) for k, v in kwargs.items()}
        n = len(tensors)

        def call(*ts):
            it = iter(ts)

            def put(v):
                if isinstance(v, torch.Tensor):
                    return next(it)
                if isinstance(v, (list, tuple)):
                    return type(v)(put(x) for x in v)
                return v

            return decomp(*[put(a) for a in margs], **{k: put(v) for k, v in mkw.items()})

        flat_meta = []

        def collect(v):
            if isinstance(v, torch.Tensor):
                flat_meta.append(v)
            elif isinstance(v, (list, tuple)):
                for x in v:
                    collect(x)

        collect(margs)
        collect(list(mkw.values()))
        assert len(flat_meta) == n
        gm = make_fx(call, decomposition_table=_decomp_table())(*flat_meta)
        return run_graph(gm, tensors, device=lowering._ctx.device, key=lowering._ctx.key)

    return lowering.Lowering(op, fn, static=static, random=False)

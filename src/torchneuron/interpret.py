"""Run an FX graph of aten/prims ops as jax code, with the lowering table.

Used by torch.compile (the whole captured graph inside one ``jax.jit``) and by
eager dispatch for ops that have no lowering of their own but have a PyTorch
decomposition: the decomposition is traced with ``make_fx`` into a graph of
lowered ops and run inside one executable.
"""
from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from . import lowering, runtime, storage
from .lowering import LOWERINGS

aten = torch.ops.aten


class Unlowerable(Exception):
    """A graph node whose op has no lowering (names the op).

    ``node`` is the outermost graph node that could not be traced (set by
    run_graph; a decomposition's inner node is replaced by the node it expands)."""

    def __init__(self, op):
        super().__init__(f"torchneuron: no lowering for {op}")
        self.op = op
        self.node = None


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
    if t.device.type == "neuron":
        return storage.materialize(t)
    return jnp.asarray(runtime.torch_to_numpy(t.detach().contiguous().cpu()))


_SYM_SIZE = {aten.sym_size.int, aten.sym_numel.default, aten.sym_stride.int,
             aten.sym_storage_offset.default}
_decomp_lowerings: dict = {}
_NO_DECOMP = object()


def find_lowering(op):
    """The lowering run_graph uses for `op`: the table (compile-only view/allocation
    lowerings included), then a traced PyTorch decomposition (None if neither)."""
    low = LOWERINGS.get(op)
    if low is not None:
        return low
    low = _decomp_lowerings.get(op)
    if low is None:
        low = decomposition_lowering(op) if isinstance(op, torch._ops.OpOverload) else None
        _decomp_lowerings[op] = _NO_DECOMP if low is None else low
    return None if low is _NO_DECOMP else low


def _sym(op, x, meta, args):
    if op is aten.sym_size.int:
        return int(x.shape[args[1]])
    if op is aten.sym_numel.default:
        return int(x.size)
    if meta is None:
        raise Unlowerable(op.name() + " (no metadata for its input)")
    if op is aten.sym_stride.int:
        return int(meta.stride(args[1]))
    return int(meta.storage_offset())


def run_graph(gm: torch.fx.GraphModule, args, device: int = 0, key=None, *, rng=None,
              metas=None, mutations=None, stats=None):
    """Interpret `gm` on jax values `args` (inside a jax trace).

    key: a jax key for all random nodes (decompositions: the k-th random node
      draws with fold_in(key, k)).
    rng: (seed, offset) traced values (compiled graphs): the k-th random node
      draws with fold_in(PRNGKey(seed), offset + k), exactly the key an eager
      call of that op would get after k earlier random ops.
    metas: {node: meta value} overriding node.meta["val"] (concrete shapes).
    mutations: a dict; ``copy_(placeholder, value)`` nodes record
      {placeholder index: value} there (input mutations kept in the graph).
    stats: a dict; gets "random" (random nodes) and "ops" (op nodes).
    """
    env = {}
    it = iter(args)
    k_used = [0]
    n_ops = 0
    placeholder_index = {}

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

    def meta_of(n):
        if metas is not None and n in metas:
            m = metas[n]
            if isinstance(m, torch.Tensor):
                return m
            if isinstance(m, (list, tuple)) and m and all(
                    isinstance(x, torch.Tensor) or x is None for x in m):
                return type(m)(m)
            return None
        return _val_meta(n)

    def run_node(node, tgt, a, kw):
        """Trace one call_function node into env; 1 if it is an op node."""
        if not isinstance(tgt, torch._ops.OpOverload):
            if isinstance(tgt, torch._ops.HigherOrderOperator):
                raise Unlowerable(str(tgt))
            env[node] = tgt(*a, **kw)
            return 0
        if tgt in _SYM_SIZE:
            env[node] = _sym(tgt, a[0], meta_of(node.args[0]), a)
            return 1
        if (tgt is aten.copy_.default and mutations is not None
                and node.args[0] in placeholder_index):
            dst = node.args[0]
            cur = env[dst]
            src = jnp.broadcast_to(jnp.asarray(a[1]).astype(cur.dtype), cur.shape)
            mutations[placeholder_index[dst]] = src
            env[dst] = src
            env[node] = src
            return 1
        if tgt is aten.as_strided.default:
            v = strided_view(a[0], meta_of(node.args[0]), *a[1:], **kw)
            if v is None:
                raise Unlowerable(tgt.name() + " (of a non-contiguous tensor)")
            env[node] = v
            return 1
        low = find_lowering(tgt)
        if low is None:
            raise Unlowerable(tgt.name())
        meta = meta_of(node)
        sub_key = None
        if low.random:
            if rng is not None:
                sub_key = jax.random.fold_in(jax.random.PRNGKey(rng[0]),
                                             rng[1] + np.uint64(k_used[0]))
            elif key is not None:
                sub_key = jax.random.fold_in(key, k_used[0])
            else:
                raise Unlowerable(tgt.name() + " (random op without an RNG key)")
            k_used[0] += 1
        with lowering.tracing(meta=meta, key=sub_key, device=device):
            out = low.fn(*a, **kw)
        env[node] = _cast_like(out, meta) if meta is not None else out
        return 1

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            placeholder_index[node] = len(placeholder_index)
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
            try:
                n_ops += run_node(node, tgt, a, kw)
            except Unlowerable as e:
                e.node = node  # the outermost graph's node (decompositions nest)
                raise
        elif node.op == "output":
            if stats is not None:
                stats["random"] = k_used[0]
                stats["ops"] = n_ops
            return load(node.args[0])
        else:
            raise Unlowerable(f"fx node kind {node.op}")
    return None


def strided_view(x, x_meta, size, stride, storage_offset=None):
    """as_strided over the values of a contiguous tensor (offsets relative to its storage)."""
    if x_meta is None or not x_meta.is_contiguous():
        return None
    base = x_meta.storage_offset()
    off = base if storage_offset is None else int(storage_offset)
    size, stride = tuple(int(v) for v in size), tuple(int(v) for v in stride)
    span = sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else -1
    if off < base or off - base + span >= max(x_meta.numel(), 1) and span >= 0:
        return None  # it reads storage outside this tensor's values: not in the graph
    spec = (x_meta.dtype, size, stride, off - base)
    return storage.read_view(jnp.reshape(x, (-1,)), spec)


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

"""One compiled FX graph: the whole graph in one ``jax.jit``, one XLA executable per
concrete input signature.

AOTAutograd hands us functional aten graphs (forward, backward or inference).
At the first call with a given input signature (shapes, strides, dtypes,
storage sharing, Python scalars) the graph is traced with ``interpret.run_graph``
between view reads of the inputs' cells and view writes of mutated inputs,
lowered to StableHLO and compiled once into a ``dispatch.runner.Executable``
(the type eager ops use; its return plan in the same ``dispatch.plan``
vocabulary).  A call walks the arguments with eager dispatch's ``Walk`` and runs
the executable through ``dispatch.runner.run``, as an eager op does: on the
cells' flat jax arrays, mutated inputs' new arrays stored back into their cells,
the results wrapped as new neuron tensors.  No host round trip and no per-op
dispatch at run time.

Ops that no lowering (nor a traced decomposition) covers split the graph:
the lowerable runs are compiled as above and the rest runs node by node
through the eager dispatcher (which may fall back to the CPU).
"""
from __future__ import annotations

import logging
import math
import operator
import time
import warnings

import jax
import numpy as np
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from .. import config, interpret, runtime, storage
from ..dispatch.executable import Walk, dense_strides, fill, layout
from ..dispatch.plan import (Arg, ArgView, Const, Dyn, New, NewView, Off, OutSpec, Seq, Slot,
                             resolve)
from ..dispatch.runner import Executable, run
from ..interpret import Unlowerable
from . import cache, dump
from .counters import STATS

log = logging.getLogger("torchneuron.compile")
Tensor = torch.Tensor
aten = torch.ops.aten

CACHE_SIZE = config.get("TORCHNEURON_COMPILE_CACHE_SIZE")




# ---------------------------------------------------------------- argument walk
class _GraphWalk(Walk):
    """dispatch's walk over a graph's flat arguments: neuron tensors become cell slots
    (the same tokens as eager entries), CPU tensors runtime inputs, the rest key
    values."""

    __slots__ = ("toks",)


def _walk(args):
    w = _GraphWalk()
    w.toks = toks = []
    for a in args:
        if isinstance(a, Tensor):
            cell = w.cell_or_none(a)
            if cell is not None:
                toks.append(w.cell_token(a, cell))
            else:  # a CPU tensor (a 0-d step counter, a lifted constant): its values go up
                w.dyn.append(a)
                toks.append(("cpu", a.dtype, a.shape))
        elif isinstance(a, (int, float, bool)) or a is None:
            toks.append(("v", type(a), a))
        elif isinstance(a, torch.SymInt) and a.node.is_nested_int():
            # a NestedTensor's ragged size (jagged layout): a graph input only so that the
            # outputs' NestedTensor metadata can carry it; no compute reads it (a trace that
            # did would fail on the symbol), so its identity is not part of the key
            toks.append(("nested", a.node.nested_int_coeff()))
        elif isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise RuntimeError("torchneuron.compile: a symbolic value reached the compiled graph "
                               "at run time")
        else:
            toks.append(("o", type(a), a))
    return w


def _dyn_inputs(dyn, index):
    """Device inputs for the CPU tensors among the arguments: the 0-d ones (step
    counters, bias corrections) go up together, one array per dtype, in one transfer
    each; others one by one."""
    groups = {}
    others = []
    for t in dyn:
        if t.dim() == 0:
            g = groups.get(t.dtype)
            if g is None:
                g = groups[t.dtype] = []
            g.append(t.item())
        else:
            others.append(storage.to_device_array(t, index))
    dev = runtime.jax_device(index)
    arrs = [jax.device_put(np.asarray(v, dtype=runtime.jdtype(dt)), dev)
            for dt, v in groups.items()]
    return arrs + others


def _dyn_plans(dyn):
    """Where each CPU tensor argument's value sits among the _dyn_inputs arrays."""
    order = []
    count = {}
    for t in dyn:
        if t.dim() == 0 and t.dtype not in count:
            count[t.dtype] = 0
            order.append(t.dtype)
    plans = []
    k_other = len(order)
    for t in dyn:
        if t.dim() == 0:
            plans.append((order.index(t.dtype), count[t.dtype]))
            count[t.dtype] += 1
        else:
            plans.append((k_other, None))
            k_other += 1
    return plans, k_other


# ---------------------------------------------------------------- metadata
def _has_symbols(v):
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(v, Tensor):
        return any(isinstance(s, torch.SymInt) for s in
                   (*v.shape, *v.stride(), v.storage_offset()))
    if isinstance(v, (list, tuple)):
        return any(_has_symbols(x) for x in v)
    return False


def _static_metas(gm):
    """node -> meta["val"] when every value in the graph has concrete shapes; else None."""
    metas = {}
    for n in gm.graph.nodes:
        if n.op == "output":
            continue
        if "val" not in n.meta:
            if n.op == "call_function" and n.target in _NO_VAL_OK:
                continue
            return None
        v = n.meta["val"]
        if _has_symbols(v):
            return None
        metas[n] = v
    return metas


_NO_VAL_OK = {aten._assert_tensor_metadata.default} if hasattr(aten, "_assert_tensor_metadata") else set()


def _propagate(gm, args):
    """Concrete metadata for every node: run the graph on fake copies of the inputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    # a shape environment only for a jagged NestedTensor's offsets, whose fake copy carries
    # a symbolic ragged size; every shape stays concrete (static_shapes)
    mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())
    fakes = [mode.from_tensor(a, static_shapes=True) if isinstance(a, Tensor) else a
             for a in args]
    metas = {}

    class _P(torch.fx.Interpreter):
        def run_node(self, n):
            r = super().run_node(n)
            metas[n] = r
            return r

    with mode:
        _P(gm).run(*fakes)
    return metas


def _concrete_metas(gm, args):
    """Concrete metadata for every node of a symbolic graph at the sizes of `args`: the
    traced symbolic metadata evaluated with each size symbol bound from the inputs (shapes,
    strides, offsets and storage sharing as Dynamo traced them); nodes the trace gave no
    metadata (a bucket rewrite's) run on fake tensors.  Raises when a symbol is not bound
    by the inputs (an unbacked size) or an input does not match its traced layout."""
    import sympy
    from torch._subclasses.fake_tensor import FakeTensorMode

    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    bind = {}

    def sym_expr(x):
        return x.node.expr if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)) \
            else None

    def bind_one(s, c):
        e = sym_expr(s)
        if isinstance(e, sympy.Symbol) and bind.setdefault(e, c) != c:
            raise ValueError(f"symbol {e} bound to {bind[e]} and {c}")

    for n, a in zip(phs, args):
        v = n.meta.get("val")
        if isinstance(v, Tensor) and isinstance(a, Tensor):
            for s, c in zip(v.shape, a.shape):
                bind_one(s, int(c))
            for s, c, d in zip(v.stride(), a.stride(), a.shape):
                if d > 1:
                    bind_one(s, int(c))
            bind_one(v.storage_offset(), int(a.storage_offset()))
        elif sym_expr(v) is not None and isinstance(a, (int, float, bool)):
            bind_one(v, a)

    def ev(x, kind=int):
        e = sym_expr(x)
        if e is None:
            return x
        r = e.xreplace(bind) if isinstance(e, sympy.Basic) else e
        if getattr(r, "free_symbols", None):
            raise ValueError(f"unbound size symbols {sorted(map(str, r.free_symbols))}")
        return kind(r)

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    storages = {}  # the traced storage -> its concrete fake storage
    metas = {}

    def concrete(v):
        if isinstance(v, (list, tuple)):
            return type(v)(concrete(x) for x in v)
        if isinstance(v, torch.SymInt):
            return ev(v)
        if isinstance(v, torch.SymFloat):
            return ev(v, float)
        if isinstance(v, torch.SymBool):
            return ev(v, bool)
        if not isinstance(v, Tensor):
            return v
        if v.is_nested or type(v) not in (Tensor, torch.nn.Parameter) and not \
                isinstance(v, torch._subclasses.fake_tensor.FakeTensor):
            raise ValueError(f"a {type(v).__name__} value")
        shape = [ev(s) for s in v.shape]
        stride = [ev(s) for s in v.stride()]
        off = ev(v.storage_offset())
        ref = StorageWeakRef(v.untyped_storage())
        st = storages.get(ref)
        if st is None:
            # (a fake storage's size is not checked against its views' extents)
            st = torch.empty(0, dtype=torch.uint8, device=v.device).untyped_storage()
            storages[ref] = st
        return torch.empty(0, dtype=v.dtype, device=v.device).set_(st, off, shape, stride)

    class _P(torch.fx.Interpreter):
        def run_node(self, n):
            if n.op == "call_function" and "val" in n.meta:
                r = concrete(n.meta["val"])
            else:
                r = super().run_node(n)
            metas[n] = r
            return r

    with mode:
        fakes = []
        for n, a in zip(phs, args):
            v = n.meta.get("val")
            if isinstance(a, Tensor):
                f = mode.from_tensor(a, static_shapes=True)
                if isinstance(v, Tensor):
                    want = concrete(v)
                    if (tuple(want.shape) != tuple(f.shape) or want.storage_offset()
                            != f.storage_offset() or want.dtype != f.dtype
                            or any(d > 1 and x != y for d, x, y
                                   in zip(f.shape, want.stride(), f.stride()))):
                        raise ValueError(f"input {n.name} is not laid out as traced")
                    storages[StorageWeakRef(v.untyped_storage())] = f.untyped_storage()
                fakes.append(f)
            else:
                fakes.append(a)
        _P(gm).run(*fakes)
    return metas


def _out_layout(m):
    """The OutSpec a new output takes (PyTorch's strides when dense)."""
    shape = tuple(int(s) for s in m.shape)
    strides = dense_strides(shape, tuple(int(s) for s in m.stride()))
    return OutSpec(m.dtype, shape, strides, 0, math.prod(shape) * m.dtype.itemsize,
                   m.device.type == "cpu")


def _flatten_out(v, leaves):
    """The output node's argument -> a template, collecting leaves."""
    if isinstance(v, (list, tuple)):
        return (type(v), [_flatten_out(x, leaves) for x in v])
    leaves.append(v)
    return len(leaves) - 1


def _plan_tree(tmpl, plans):
    """The output template with each leaf's plan: the graph's return plan."""
    if isinstance(tmpl, int):
        return plans[tmpl]
    kind, parts = tmpl
    return Seq(kind, tuple(_plan_tree(p, plans) for p in parts))


class CompiledGraph:
    """A functional aten FX graph compiled for the neuron device (AOT boxed convention)."""

    _boxed_call = True

    def __init__(self, gm: torch.fx.GraphModule, name: str, options=None, kind=None):
        self._boxed_call = True  # an instance attribute: wrappers copy __dict__
        self.gm = gm
        self.name = name
        self.options = options
        self.kind = kind
        self.cache = runtime.JitCache("compiled graphs", CACHE_SIZE)
        self.builds = 0
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.output_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        self.static_metas = _static_metas(gm)
        self.eager_ops: set = set()
        self.split = None
        self.nops = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        # input mutations kept in the graph: copy_(placeholder, value)
        pidx = {n: i for i, n in enumerate(self.placeholders)}
        self.mutated = sorted({pidx[n.args[0]] for n in gm.graph.nodes
                               if n.op == "call_function" and n.target is aten.copy_.default
                               and n.args[0] in pidx})
        self.maybe_random = any(
            n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
            and getattr(interpret.find_lowering(n.target), "random", False)
            for n in gm.graph.nodes)
        leaves = []
        self.out_tmpl = _flatten_out(self.output_node.args[0], leaves)
        self.out_leaves = leaves
        STATS.graphs += 1
        host = self._host_nodes()
        if host:
            self._make_split(host)
        # shape buckets (compile/buckets.py): a graph with symbolic sizes runs them
        # rounded up to a size class, one executable per class
        self.buckets = None
        if self.static_metas is None and self.split is None and kind is not None:
            from . import buckets

            p = buckets.plan(gm, kind)
            if isinstance(p, str):
                log.info("torchneuron.compile: %s is compiled per shape: %s", name, p)
                if kind == "inference":
                    STATS.unbucketed_graphs += 1
            else:
                self.buckets = p
                self.bucketed = CompiledGraph(p.gm, f"{name}_bucketed", options)
                STATS.graphs -= 1  # the same graph, padded
                STATS.bucketed_graphs += 1
                log.info("torchneuron.compile: %s runs sizes %s in buckets", name,
                         sorted(map(str, p.syms)))

    # ------------------------------------------------------------ run time
    def __call__(self, args):
        if self.split is not None:
            args = list(args)
            return self.split(*args)
        if self.buckets is not None:
            b = self.buckets.bind(args)
            if b is not None:
                padded, vals = b
                STATS.bucket_calls += 1
                return self.buckets.cut(self.bucketed(padded), vals)
        w = _walk(args)
        key = tuple(w.toks)
        exe = self.cache.get(key)
        if exe is None:
            exe = self._build(key, list(args), w)
            if exe is None:  # the graph was split: run that
                return self.split(*args)
        else:
            STATS.cache_hits += 1
        return run(exe, w, _dyn_inputs(w.dyn, exe.index) if w.dyn else None, args)

    # ------------------------------------------------------------ build time
    def _build(self, key, args, w):
        t0 = time.perf_counter()
        index = w.index
        if index is None:
            from .. import device

            index = device.current_device()
        try:
            exe = self._trace_and_compile(args, w, index)
        except Unlowerable as e:
            node = e.node
            target = node.target if node is not None else None
            if not isinstance(target, torch._ops.OpOverload) or target in self.eager_ops:
                raise RuntimeError(f"torchneuron.compile: cannot compile graph {self.name}: "
                                   f"{e}") from e
            self.eager_ops.add(target)
            self._make_split()
            return None
        dt = time.perf_counter() - t0
        STATS.compile_time_s += dt
        STATS.compilations += 1
        self.builds += 1
        if self.builds > 1:
            STATS.recompilations += 1
            log.info("torchneuron.compile: recompiling %s for new input shapes %s (%d builds)",
                     self.name, _shapes(args), self.builds)
        log.info("torchneuron.compile: compiled %s: %d ops, %d inputs, %d outputs in %.2fs",
                 exe.name, exe.nops, len(args), exe.nouts, dt)
        dump.write(exe, len(args), dt)
        capture = (self.options or {}).get("capture")
        if capture is not None:
            capture.append(exe.lowered.as_text())
        exe.lowered = None  # the MLIR module is big; the executable is what runs
        if len(self.cache) >= CACHE_SIZE:
            STATS.evictions += 1
        return self.cache.put(key, exe)

    def _metas(self, args):
        if self.static_metas is not None:
            return self.static_metas
        try:
            return _concrete_metas(self.gm, args)
        except Exception as e:  # noqa: BLE001  (an unbacked size, a jagged tensor)
            log.debug("torchneuron.compile: %s: metadata by a fake run (%s)", self.name, e)
            return _propagate(self.gm, args)

    def _trace_and_compile(self, args, w, index):
        gm = self.gm
        metas = self._metas(args)
        ncells = len(w.cells)
        noffs = len(w.offs)
        has_rng = self.maybe_random

        # how each placeholder is read: a view of a cell, a host input, a baked value
        in_plans = []
        off_k = 0
        dyn_plans, ndyn = _dyn_plans(w.dyn)
        dyn_k = 0
        for a, tok in zip(args, w.toks):
            if isinstance(a, Tensor) and tok[0] != "cpu":
                off = tok[4]
                if off == -1:
                    off = Off(off_k)
                    off_k += 1
                in_plans.append(Slot(tok[0], (a.dtype, tuple(a.shape), tuple(a.stride()), off)))
            elif isinstance(a, Tensor):
                in_plans.append(Dyn(*dyn_plans[dyn_k]))
                dyn_k += 1
            else:
                in_plans.append(a)

        # outputs: inputs returned as they are, views of inputs, or new tensors
        leaf_plans, news, new_leaves, consts, dups = self._plan_outputs(args, metas)
        write_plans = []
        cpu_writes = []
        for i in self.mutated:
            if type(in_plans[i]) is Slot:
                write_plans.append(i)
            else:
                cpu_writes.append(i)
        write_slots = []
        for i in write_plans:
            s = in_plans[i].slot
            if s not in write_slots:
                write_slots.append(s)

        trace_info = {}

        def traced(*inputs):
            slots = list(inputs[:ncells])
            dyn = inputs[ncells:ncells + ndyn]
            offs = inputs[ncells + ndyn:ncells + ndyn + noffs]
            rng = inputs[ncells + ndyn + noffs] if has_rng else None
            vals, _ = fill(in_plans, {}, slots, dyn, offs)
            muts = {}
            stats = {}
            outs = interpret.run_graph(gm, vals, device=index, rng=rng, metas=metas,
                                       mutations=muts, stats=stats)
            trace_info.update(stats)
            leaves = []
            _flatten_out(outs, leaves)
            trace_info["leaves"] = leaves
            results = [layout(leaves[k], news[j]) for j, k in enumerate(new_leaves)]
            for i in write_plans:
                p = in_plans[i]
                slots[p.slot] = storage.write_view(slots[p.slot], resolve(p.spec, offs), muts[i])
            return (tuple(results) + tuple(slots[s] for s in write_slots)
                    + tuple(muts[i] for i in cpu_writes))

        sample = list(w.arrays) + _dyn_inputs(w.dyn, index) + \
            [storage.dyn_scalar(o, index) for o in w.offs]
        if has_rng:
            sample.append(np.zeros(2, np.uint64))
        device = runtime.jax_device(index)
        sharding = jax.sharding.SingleDeviceSharding(device)
        donate = tuple(write_slots) if _donation_enabled(self.options) else ()
        jitted = jax.jit(traced, out_shardings=sharding, donate_argnums=donate)
        runtime.maybe_release_executables()
        with cache.compiling():
            t0 = time.perf_counter()
            lowered = jitted.trace(*sample).lower()
            t1 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*donated buffers were not usable.*")
                compiled = lowered.compile()
            log.debug("torchneuron.compile: %s traced+lowered in %.2fs, XLA compiled in %.2fs",
                      self.name, t1 - t0, time.perf_counter() - t1)

        leaves = trace_info["leaves"]
        for k in consts:  # values the trace computed (a SymInt, a bool)
            leaf_plans[k] = Const(_concrete(leaves[k]))
        for k, first in dups.items():  # a leaf met again: the same plan, so the same value
            leaf_plans[k] = leaf_plans[first]
        exe = Executable(compiled, index, news, write_slots, _plan_tree(self.out_tmpl, leaf_plans),
                         nrandom=trace_info.get("random", 0) if has_rng else 0)
        exe.host_writes = cpu_writes
        exe.donate = donate
        exe.undonated = _undonated(exe, traced, sharding, sample)
        exe.lowered = lowered
        exe.nops = trace_info.get("ops", self.nops)
        exe.nouts = len(leaf_plans)
        exe.name = self.name if self.builds == 0 else f"{self.name}_v{self.builds}"
        return exe

    def _plan_outputs(self, args, metas):
        """A return plan per output leaf (New, Arg, ArgView, NewView, Const; a leaf met
        again gets the first one's plan object, after the trace: `dups`), the new results'
        OutSpecs, the leaf each new result is computed from, and the leaves whose Const
        the trace fills in."""
        pidx = {n: i for i, n in enumerate(self.placeholders)}
        in_store = {}
        for n, i in pidx.items():
            m = metas.get(n)
            if isinstance(m, Tensor) and isinstance(args[i], Tensor) and args[i].device.type == "neuron":
                in_store.setdefault(StorageWeakRef(m.untyped_storage()), (i, m))
        plans = []
        news = []
        new_leaves = []
        consts = []
        dups = {}
        new_store = {}
        seen = {}
        for k, leaf in enumerate(self.out_leaves):
            if not isinstance(leaf, torch.fx.Node):
                plans.append(Const(leaf))
                continue
            if leaf in seen:
                dups[k] = seen[leaf]
                plans.append(None)
                continue
            seen[leaf] = k
            src = leaf
            if (leaf.op == "call_function" and leaf.target is aten.copy_.default
                    and leaf.args[0] in pidx):
                src = leaf.args[0]
            if src in pidx and isinstance(args[pidx[src]], Tensor):
                plans.append(Arg(pidx[src]))
                continue
            m = metas.get(leaf)
            if not isinstance(m, Tensor):
                consts.append(k)
                plans.append(Const(None))
                continue
            ref = StorageWeakRef(m.untyped_storage())
            hit = in_store.get(ref)
            shape = tuple(int(s) for s in m.shape)
            strides = tuple(int(s) for s in m.stride())
            # (a view may have another dtype than its base: view(dtype))
            if hit is not None:
                plans.append(ArgView(hit[0], m.dtype, shape, strides,
                                     int(m.storage_offset()) * m.dtype.itemsize
                                     - int(hit[1].storage_offset()) * hit[1].dtype.itemsize))
                continue
            base = new_store.get(ref)
            if base is not None:
                plans.append(NewView(base, m.dtype, shape, strides, int(m.storage_offset())))
                continue
            sp = _out_layout(m)
            plans.append(New(len(news)))
            news.append(sp)
            new_leaves.append(k)
            # later outputs may alias this one when it is laid out exactly as PyTorch's
            if (sp.strides == strides and int(m.storage_offset()) == 0
                    and m.untyped_storage().nbytes() == sp.nbytes):
                new_store.setdefault(ref, len(news) - 1)
        return plans, news, new_leaves, consts, dups

    # ------------------------------------------------------------ split graphs
    def _host_nodes(self):
        """Nodes that compute CPU tensors from CPU tensors only (optimizer step counters,
        bias corrections): they run on the host, before the device executable, so the
        device never waits for them and they never wait for the device."""
        host = set()
        host_vals = set()
        for n in self.gm.graph.nodes:
            if n.op == "placeholder" or n.op == "get_attr":
                v = n.meta.get("val")
                if isinstance(v, Tensor) and v.device.type == "cpu":
                    host_vals.add(n)
                elif n.op == "get_attr":
                    obj = self.gm
                    for part in n.target.split("."):
                        obj = getattr(obj, part, None)
                    if isinstance(obj, Tensor) and obj.device.type == "cpu":
                        host_vals.add(n)
                continue
            if n.op != "call_function":
                continue
            ins = n.all_input_nodes
            if n.target is operator.getitem:
                if ins and ins[0] in host:
                    host.add(n)
                    host_vals.add(n)
                continue
            if not isinstance(n.target, torch._ops.OpOverload):
                continue
            v = n.meta.get("val")
            vs = v if isinstance(v, (list, tuple)) else [v]
            tensors = [x for x in vs if isinstance(x, Tensor)]
            if not tensors or any(x.device.type != "cpu" for x in tensors):
                continue
            # every input a host value: a node moves before the device work, so an input
            # computed there (a size read off a device tensor, as a jagged NestedTensor's
            # cached lengths use) keeps it in place
            if all(i in host_vals for i in ins):
                host.add(n)
                host_vals.add(n)
        return host

    def _make_split(self, host=()):
        """Compile the lowerable runs of nodes; run the others eagerly (host nodes first,
        host copies back into CPU inputs last)."""
        from torch.fx.passes.split_module import split_module

        gm = self.gm
        eager = self.eager_ops
        host = set(host)
        g = gm.graph
        if host:
            # hoist: host nodes right after the inputs, host copies into inputs at the end
            pidx = set(self.placeholders)
            epilogue = [n for n in g.nodes if n in host and n.target is aten.copy_.default
                        and n.args[0] in pidx]
            prologue = [n for n in g.nodes if n in host and n not in epilogue]
            attrs = [n for n in g.nodes if n.op == "get_attr"]
            moved = set(attrs) | set(prologue)
            anchor = next((n for n in g.nodes if n.op != "placeholder" and n not in moved), None)
            if anchor is not None:
                for n in attrs + prologue:
                    anchor.prepend(n)
            out = self.output_node
            for n in epilogue:
                out.prepend(n)
            g.lint()
            gm.recompile()
            epi = set(epilogue)
        else:
            epi = set()
        part = {}
        counter = [0]
        cur = [None]
        eager_parts = set()

        def is_eager(n):
            t = n.target
            if isinstance(t, torch._ops.HigherOrderOperator):
                return True
            if isinstance(t, torch._ops.OpOverload):
                return t in eager
            return False

        host_run = [None]
        for n in g.nodes:
            if n.op != "call_function":
                continue
            if n.target is operator.getitem and isinstance(n.args[0], torch.fx.Node) \
                    and n.args[0] in part:
                part[n] = part[n.args[0]]
                continue
            if n in host:
                if host_run[0] is None or (n in epi) != (host_run[1] if len(host_run) > 1 else False):
                    counter[0] += 1
                    host_run[:] = [counter[0], n in epi]
                part[n] = host_run[0]
                eager_parts.add(host_run[0])
                cur[0] = None
                continue
            host_run[:] = [None]
            if is_eager(n):
                counter[0] += 1
                part[n] = counter[0]
                eager_parts.add(counter[0])
                STATS.eager_nodes[n.target.name() if hasattr(n.target, "name")
                                  else str(n.target)] += 1
                cur[0] = None
            else:
                if cur[0] is None:
                    counter[0] += 1
                    cur[0] = counter[0]
                part[n] = cur[0]

        split = split_module(gm, gm, lambda n: part[n], keep_original_order=True)
        for name, sub in list(split.named_children()):
            try:
                pid = int(name.rsplit("_", 1)[1])
            except ValueError:
                continue
            if pid in eager_parts:
                continue
            cg = CompiledGraph(sub, f"{self.name}_part{pid}", self.options, kind=self.kind)
            STATS.graphs -= 1  # a piece of this graph, not a new one
            delattr(split, name)
            setattr(split, name, _Unboxed(cg))
        if eager:
            STATS.split_graphs += 1
            log.info("torchneuron.compile: %s runs %s eagerly (no lowering); the rest is compiled",
                     self.name, sorted(e.name() for e in eager))
        self.split = split


class _Unboxed:
    """A CompiledGraph called with positional arguments (inside a split graph)."""

    def __init__(self, cg):
        self.cg = cg

    def __call__(self, *args):
        return self.cg(list(args))


def _undonated(exe, traced, sharding, sample):
    """() -> `exe` without buffer donation (compiled on first need), for a call whose
    buffer has another owner; each such call is counted."""
    plain = []

    def undonated():
        STATS.donations_skipped += 1
        if not plain:
            with cache.compiling():
                plain.append(jax.jit(traced, out_shardings=sharding).trace(
                    *sample).lower().compile())
        return plain[0]
    return undonated


def _concrete(v):
    try:
        return v.item() if getattr(v, "shape", None) == () else v
    except Exception:  # noqa: BLE001
        return v


def _shapes(args):
    return [tuple(a.shape) if isinstance(a, Tensor) else a for a in args]


def _donation_enabled(options):
    if options is not None and options.get("donate") is not None:
        return bool(options["donate"])
    return config.get("TORCHNEURON_COMPILE_DONATE")

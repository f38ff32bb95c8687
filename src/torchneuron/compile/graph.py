"""One compiled FX graph: the whole graph in one ``jax.jit``, one XLA executable per
concrete input signature.

AOTAutograd hands us functional aten graphs (forward, backward or inference).
At the first call with a given input signature (shapes, strides, dtypes,
storage sharing, Python scalars) the graph is traced with ``fx_jax.run_graph``
between view reads of the inputs' cells and view writes of mutated inputs,
lowered to StableHLO and compiled once.  A call then walks the arguments,
calls the executable on the cells' flat jax arrays, stores mutated inputs'
new arrays back into their cells and wraps the results as new neuron tensors.
No host round trip and no per-op dispatch at run time.

Ops that no lowering (nor a traced decomposition) covers split the graph:
the lowerable runs are compiled as above and the rest runs node by node
through the eager dispatcher (which may fall back to the CPU).
"""
from __future__ import annotations

import collections
import logging
import math
import operator
import sys
import time
import warnings

import jax
import numpy as np
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from .. import config, dispatch, runtime, storage
from . import fx_jax
from .fx_jax import Unlowerable

log = logging.getLogger("torchneuron.compile")
Tensor = torch.Tensor
aten = torch.ops.aten

CACHE_SIZE = config.get("TORCHNEURON_COMPILE_CACHE_SIZE")


# ---------------------------------------------------------------- statistics
class _Stats:
    def __init__(self):
        self.reset()

    def reset(self):
        self.graphs = 0            # FX graphs handed to the backend (fw/bw/inference)
        self.compilations = 0      # XLA executables built
        self.recompilations = 0    # of which for a new input signature of a known graph
        self.cache_hits = 0        # calls served by an already built executable
        self.evictions = 0
        self.compile_time_s = 0.0  # trace + lower + XLA compile
        self.split_graphs = 0      # graphs with nodes that run eagerly
        self.eager_nodes = collections.Counter()  # op -> nodes run eagerly in split graphs
        self.disk_cache_hits = 0   # executables loaded from the persistent cache
        self.dynamo_graphs = 0     # graphs Dynamo captured (before AOTAutograd)
        self.donations_skipped = 0  # calls that could not donate (a buffer shared by storages)

    def as_dict(self):
        return {
            "dynamo_graphs": self.dynamo_graphs,
            "graphs": self.graphs,
            "compilations": self.compilations,
            "recompilations": self.recompilations,
            "cache_hits": self.cache_hits,
            "evictions": self.evictions,
            "compile_time_s": round(self.compile_time_s, 4),
            "split_graphs": self.split_graphs,
            "eager_nodes": dict(self.eager_nodes),
            "disk_cache_hits": self.disk_cache_hits,
            "donations_skipped": self.donations_skipped,
        }


STATS = _Stats()


# ---------------------------------------------------------------- argument walk
_CELL, _DYN, _VAL = 0, 1, 2


class _Walk:
    __slots__ = ("cells", "slots", "arrays", "dyn", "offs", "index", "toks")

    def __init__(self):
        self.cells = []
        self.slots = {}
        self.arrays = []
        self.dyn = []
        self.offs = []
        self.index = None
        self.toks = []


def _walk(args):
    w = _Walk()
    toks = w.toks
    for a in args:
        if isinstance(a, Tensor):
            st = a.untyped_storage()
            cell = getattr(st, "_tn_cell", None)
            if cell is None and a.device.type == "neuron":
                cell = storage.cell_of(a)
            if cell is not None:
                if cell.raw:
                    storage.retype(cell, a.dtype)
                if w.index is None:
                    w.index = cell.index
                elif cell.index != w.index:
                    raise dispatch.device_mismatch(f"neuron:{w.index}", a.device)
                cid = id(cell)
                slot = w.slots.get(cid)
                if slot is None:
                    slot = w.slots[cid] = len(w.cells)
                    w.cells.append(cell)
                    w.arrays.append(cell.arr)
                off = a.storage_offset()
                if off:
                    w.offs.append(off)
                    off = -1
                toks.append((slot, a.dtype, a.shape, a.stride(), off, cell.dt, cell.numel))
            else:  # a CPU tensor (a 0-d step counter, a lifted constant): its values go up
                w.dyn.append(a)
                toks.append(("cpu", a.dtype, a.shape))
        elif isinstance(a, (int, float, bool)) or a is None:
            toks.append(("v", type(a), a))
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

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(a) if isinstance(a, Tensor) else a for a in args]
    metas = {}

    class _P(torch.fx.Interpreter):
        def run_node(self, n):
            r = super().run_node(n)
            metas[n] = r
            return r

    with mode:
        _P(gm).run(*fakes)
    return metas


def _out_layout(m):
    """(dtype, shape, strides, nbytes) a new output takes (PyTorch's strides when dense)."""
    shape = tuple(int(s) for s in m.shape)
    strides = tuple(int(s) for s in m.stride())
    if storage.perm_plan(shape, strides) is None or any(s < 0 for s in strides):
        strides = storage.contiguous_strides(shape)
    return (m.dtype, shape, strides, math.prod(shape) * m.dtype.itemsize, m.device.type == "cpu")


# ---------------------------------------------------------------- executables
_NEW, _INPUT, _VIEW_IN, _VIEW_OUT, _CONST, _DUP = range(6)


class _Exe:
    __slots__ = ("fn", "fn_plain", "plain_builder", "lowered", "donate", "outs", "new_specs",
                 "writes", "cpu_writes", "nrandom", "index", "out_bytes", "nops", "name")


def _flatten_out(v, leaves):
    """The output node's argument -> a template, collecting leaves."""
    if isinstance(v, (list, tuple)):
        return (type(v), [_flatten_out(x, leaves) for x in v])
    leaves.append(v)
    return len(leaves) - 1


def _unflatten_out(tmpl, values):
    if isinstance(tmpl, int):
        return values[tmpl]
    kind, parts = tmpl
    return kind(_unflatten_out(p, values) for p in parts)


class CompiledGraph:
    """A functional aten FX graph compiled for the neuron device (AOT boxed convention)."""

    _boxed_call = True

    def __init__(self, gm: torch.fx.GraphModule, name: str, options=None):
        self._boxed_call = True  # an instance attribute: wrappers copy __dict__
        self.gm = gm
        self.name = name
        self.options = options
        self.cache = collections.OrderedDict()
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
            and getattr(fx_jax.find_lowering(n.target), "random", False)
            for n in gm.graph.nodes)
        leaves = []
        self.out_tmpl = _flatten_out(self.output_node.args[0], leaves)
        self.out_leaves = leaves
        STATS.graphs += 1
        host = self._host_nodes()
        if host:
            self._make_split(host)

    # ------------------------------------------------------------ run time
    def __call__(self, args):
        if self.split is not None:
            args = list(args)
            return self.split(*args)
        w = _walk(args)
        key = tuple(w.toks)
        exe = self.cache.get(key)
        if exe is None:
            exe = self._build(key, list(args), w)
            if exe is None:  # the graph was split: run that
                return self.split(*args)
        else:
            STATS.cache_hits += 1
        index = exe.index
        inputs = w.arrays
        if w.dyn:
            inputs = inputs + _dyn_inputs(w.dyn, index)
        if w.offs:
            inputs = inputs + [storage.dyn_scalar(o, index) for o in w.offs]
        if exe.nrandom:
            from .. import device

            inputs = inputs + [device.next_rng_input(index, exe.nrandom)]
        if exe.out_bytes:
            storage.check_room(index, exe.out_bytes)
        fn = exe.fn
        if exe.donate:
            # donate a cell's buffer only when the cell is its sole owner: another cell
            # may hold the same jax array (jit forwards unchanged inputs).  Owners we
            # know of: the cell, w.arrays, `inputs` when it is a new list, getrefcount.
            arrays = w.arrays
            limit = 3 if inputs is arrays else 4
            for s in exe.donate:
                if sys.getrefcount(arrays[s]) > limit:
                    fn = exe.fn_plain or self._plain(exe)
                    STATS.donations_skipped += 1
                    break
        try:
            res = fn(*inputs)
        except Exception as e:  # noqa: BLE001
            raise dispatch._translate_runtime_error(e, index) from None
        return self._finish(exe, res, args, w)

    def _finish(self, exe, res, args, w):
        specs = exe.new_specs
        nnew = len(specs)
        if exe.writes:
            cells = w.cells
            for j, slot in enumerate(exe.writes):
                cells[slot].arr = res[nnew + j]
        if exe.cpu_writes:
            base = nnew + len(exe.writes)
            for j, i in enumerate(exe.cpu_writes):
                t = args[i]
                with torch.no_grad():
                    t.copy_(storage.to_host(res[base + j], t.dtype).reshape(t.shape))
        index = exe.index
        new = [storage.make_tensor(res[k], sp[0], sp[1], sp[2], 0, index, sp[3]) if not sp[4]
               else storage.to_host(res[k], sp[0]).reshape(sp[1])  # a CPU result: a sync
               for k, sp in enumerate(specs)]
        values = []
        for p in exe.outs:
            kind = p[0]
            if kind == _NEW:
                values.append(new[p[1]])
            elif kind == _INPUT:
                values.append(args[p[1]])
            elif kind == _CONST:
                values.append(p[1])
            elif kind == _DUP:
                values.append(values[p[1]])
            elif kind == _VIEW_IN:
                src = args[p[1]]
                t = storage.new_shell(index, p[2])
                values.append(storage.set_metadata(t, src.untyped_storage(),
                                                   src.storage_offset() + p[5], p[3], p[4]))
            else:  # _VIEW_OUT
                src = new[p[1]]
                t = storage.new_shell(index, p[2])
                values.append(storage.set_metadata(t, src.untyped_storage(), p[5], p[3], p[4]))
        return _unflatten_out(self.out_tmpl, values)

    @staticmethod
    def _plain(exe):
        """The same executable without buffer donation (compiled on first need)."""
        exe.fn_plain = exe.plain_builder()
        return exe.fn_plain

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
                 exe.name, exe.nops, len(args), len(exe.outs), dt)
        from . import dump

        dump.write(exe, len(args), dt)
        capture = (self.options or {}).get("capture")
        if capture is not None:
            capture.append(exe.lowered.as_text())
        exe.lowered = None  # the MLIR module is big; the executable is what runs
        if len(self.cache) >= CACHE_SIZE:
            self.cache.popitem(last=False)
            STATS.evictions += 1
        self.cache[key] = exe
        return exe

    def _metas(self, args):
        if self.static_metas is not None:
            return self.static_metas
        return _propagate(self.gm, args)

    def _trace_and_compile(self, args, w, index):
        gm = self.gm
        metas = self._metas(args)
        ncells = len(w.cells)
        noffs = len(w.offs)
        has_rng = self.maybe_random

        # how each placeholder is read
        in_plans = []
        off_k = 0
        for i, (a, tok) in enumerate(zip(args, w.toks)):
            if isinstance(a, Tensor) and tok[0] != "cpu":
                off = tok[4]
                if off == -1:
                    off = ("off", off_k)
                    off_k += 1
                in_plans.append((_CELL, tok[0], (a.dtype, tuple(a.shape), tuple(a.stride()), off)))
            elif isinstance(a, Tensor):
                in_plans.append((_DYN, None))
            else:
                in_plans.append((_VAL, a))
        dyn_plans, ndyn = _dyn_plans(w.dyn)
        dyn_k = 0
        for j, p in enumerate(in_plans):
            if p[0] == _DYN:
                in_plans[j] = (_DYN,) + dyn_plans[dyn_k]
                dyn_k += 1

        # outputs: inputs returned as they are, views of inputs, or new tensors
        out_plans, new_nodes = self._plan_outputs(args, metas)
        write_plans = []
        cpu_writes = []
        for i in self.mutated:
            if in_plans[i][0] == _CELL:
                write_plans.append(i)
            else:
                cpu_writes.append(i)
        write_slots = []
        for i in write_plans:
            s = in_plans[i][1]
            if s not in write_slots:
                write_slots.append(s)

        trace_info = {}

        def spec_of(plan, offs):
            sp = plan[2]
            if isinstance(sp[3], tuple):
                return (sp[0], sp[1], sp[2], offs[sp[3][1]])
            return sp

        def traced(*inputs):
            slots = list(inputs[:ncells])
            dyn = inputs[ncells:ncells + ndyn]
            offs = inputs[ncells + ndyn:ncells + ndyn + noffs]
            rng = inputs[ncells + ndyn + noffs] if has_rng else None
            vals = []
            for p in in_plans:
                if p[0] == _CELL:
                    vals.append(storage.read_view(slots[p[1]], spec_of(p, offs)))
                elif p[0] == _DYN:
                    vals.append(dyn[p[1]] if p[2] is None else dyn[p[1]][p[2]])
                else:
                    vals.append(p[1])
            muts = {}
            stats = {}
            outs = fx_jax.run_graph(gm, vals, device=index, rng=rng, metas=metas,
                                    mutations=muts, stats=stats)
            trace_info.update(stats)
            leaves = []
            _flatten_out(outs, leaves)
            trace_info["leaves"] = leaves
            results = []
            for k in new_nodes:
                v = leaves[k]
                sp = out_plans[k][2]
                results.append(dispatch._layout(v, (sp[0], sp[1], sp[2])))
            for i in write_plans:
                p = in_plans[i]
                s = p[1]
                slots[s] = storage.write_view(slots[s], spec_of(p, offs), muts[i])
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
        from . import cache

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

        exe = _Exe()
        exe.fn = compiled
        exe.fn_plain = None
        exe.donate = donate

        def plain_builder():
            with cache.compiling():
                return jax.jit(traced, out_shardings=sharding).trace(*sample).lower().compile()

        exe.plain_builder = plain_builder
        exe.lowered = lowered
        exe.index = index
        exe.nrandom = trace_info.get("random", 0) if has_rng else 0
        exe.writes = write_slots
        exe.cpu_writes = cpu_writes
        exe.nops = trace_info.get("ops", self.nops)
        leaves = trace_info["leaves"]
        outs = []
        specs = []
        new_index = {}
        for k, p in enumerate(out_plans):
            if p[0] == _NEW:
                new_index[k] = len(specs)
                outs.append((_NEW, len(specs)))
                specs.append(p[2])
            elif p[0] == _CONST:
                v = leaves[k]
                outs.append((_CONST, _concrete(v)))
            elif p[0] == _VIEW_OUT:
                outs.append((_VIEW_OUT, new_index[p[1]]) + tuple(p[2:]))
            else:
                outs.append(p)
        exe.outs = outs
        exe.new_specs = specs
        exe.out_bytes = sum(sp[3] for sp in specs if not sp[4])
        exe.name = self.name if self.builds == 0 else f"{self.name}_v{self.builds}"
        return exe

    def _plan_outputs(self, args, metas):
        """Plan per output leaf: (_NEW, None, layout) | (_INPUT, i) | (_VIEW_IN, i, dtype,
        shape, strides, relative offset) | (_VIEW_OUT, leaf k, dtype, shape, strides, off)
        | (_CONST, None)."""
        pidx = {n: i for i, n in enumerate(self.placeholders)}
        in_store = {}
        for n, i in pidx.items():
            m = metas.get(n)
            if isinstance(m, Tensor) and isinstance(args[i], Tensor) and args[i].device.type == "neuron":
                in_store.setdefault(StorageWeakRef(m.untyped_storage()), (i, m))
        plans = []
        new_store = {}
        seen = {}
        for k, leaf in enumerate(self.out_leaves):
            if not isinstance(leaf, torch.fx.Node):
                plans.append((_CONST, leaf))
                continue
            if leaf in seen:
                plans.append((_DUP, seen[leaf]))
                continue
            seen[leaf] = k
            src = leaf
            if (leaf.op == "call_function" and leaf.target is aten.copy_.default
                    and leaf.args[0] in pidx):
                src = leaf.args[0]
            if src in pidx and isinstance(args[pidx[src]], Tensor):
                plans.append((_INPUT, pidx[src]))
                continue
            m = metas.get(leaf)
            if not isinstance(m, Tensor):
                plans.append((_CONST, None))
                continue
            ref = StorageWeakRef(m.untyped_storage())
            hit = in_store.get(ref)
            shape = tuple(int(s) for s in m.shape)
            strides = tuple(int(s) for s in m.stride())
            if hit is not None and hit[1].dtype == m.dtype:
                plans.append((_VIEW_IN, hit[0], m.dtype, shape, strides,
                              int(m.storage_offset()) - int(hit[1].storage_offset())))
                continue
            base = new_store.get(ref)
            if base is not None and base[1].dtype == m.dtype:
                plans.append((_VIEW_OUT, base[0], m.dtype, shape, strides, int(m.storage_offset())))
                continue
            lay = _out_layout(m)
            plans.append((_NEW, None, lay))
            # later outputs may alias this one when it is laid out exactly as PyTorch's
            if (lay[2] == strides and int(m.storage_offset()) == 0
                    and m.untyped_storage().nbytes() == lay[3]):
                new_store.setdefault(ref, (k, m))
        new_nodes = [k for k, p in enumerate(plans) if p[0] == _NEW]
        return plans, new_nodes

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
            if all(i in host_vals for i in ins if isinstance(i.meta.get("val"), (Tensor, list, tuple))
                   or i.op == "placeholder"):
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
            cg = CompiledGraph(sub, f"{self.name}_part{pid}", self.options)
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

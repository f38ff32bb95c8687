"""An :class:`Entry`: the kernel of one lowered overload, its executable cache and
its build.

A call (the hot path) walks the arguments, looks the key up and runs the cached
executable through the one runner (dispatch/runner.py); a miss (the slow path) asks
the layout policy whether to compile for this layout (dispatch/layouts.py), asks
PyTorch's meta kernel for the results' dtypes, shapes and strides, checks
TensorIterator's overlap and casting rules (dispatch/overlap.py), traces the
lowering between view reads and view writes, and jits it for the device (the eager
executable store, dispatch/store.py, may load it instead).  out= kernels are in
dispatch/out.py; fused eager's recording in dispatch/fused.py.
"""
from __future__ import annotations

import collections
import math

import jax
import torch

from .. import config, lowering, runtime, storage
from ..storage import lazy as _lazy
from . import meta as _meta
from . import store
from .executable import (FusedWalk, Walk, as_array, current_device, dense_strides, fill,
                         global_state, layout, template)
from .layouts import DENSE, LayoutPolicy, densify
from .overlap import (OVERLAP_WRITES, aliased_pairs, check_inplace_cast, check_inplace_shape,
                      check_overlap, check_partial_overlaps)
from .plan import JIT, Arg, Const, New, Nothing, OutSpec, Seq, WriteTarget, resolve
from .runner import Executable, run
from .schema import schema

Tensor = torch.Tensor
aten = torch.ops.aten

cache_hits = collections.Counter()  # op name -> calls served by a cached executable
cache_misses = collections.Counter()  # op name -> executables built
CACHE_MAX = config.get("TORCHNEURON_EXECUTABLE_CACHE")


class Entry:
    """A kernel: an overload plus its lowering and executable cache."""

    def __init__(self, op, low, mode):
        self.op = op
        self.low = low  # Lowering of op itself, or of its functional variant
        self.mode = mode  # "functional" | "inplace" | "mutating"
        self.schema = schema(op)
        self.cache = runtime.JitCache("eager executables", CACHE_MAX)
        self.static = low.static
        self.random = low.random
        self.name = op.name()
        self.layouts = LayoutPolicy(op, CACHE_MAX) if mode == "functional" else None

    # the hot path -------------------------------------------------------
    def __call__(self, *args, **kwargs):
        return self.run(args, kwargs, True)

    def run(self, args, kwargs, dense_ok):
        """Run the op.  With `dense_ok` a key under layout churn answers DENSE: the call
        runs once more on dense copies of its strided inputs, with `dense_ok` False, so
        that second run builds (or finds) an executable and never densifies again."""
        sch = self.schema
        w = FusedWalk(self.static) if _lazy.fused else Walk(self.static)
        kinds = sch.kinds
        names = sch.names
        toks = [w.value(a, kinds[i], names[i]) for i, a in enumerate(args)]
        if kwargs:
            kind_of = sch.kind_of
            toks.append(tuple((k, w.value(v, kind_of[k], k)) for k, v in kwargs.items()))
        toks.append(w.index)
        toks.append(global_state())
        key = tuple(toks)
        exe = self.cache.get(key)
        if exe is None:
            exe = self.miss(key, args, kwargs, w, dense_ok)
        else:
            cache_hits[self.name] += 1
        if exe is DENSE:
            if not dense_ok:  # this key was marked by a call that could densify
                exe = self.build(key, args, kwargs, w)
            else:
                return self.run([densify(a) for a in args],
                                {k: densify(v) for k, v in kwargs.items()}, False)
        if exe.overlaps:
            check_partial_overlaps(exe.overlaps, args)
        host = None
        if w.dyn:
            index = exe.index
            host = [storage.typed_scalar(v, index) if isinstance(v, Tensor)
                    else storage.dyn_scalar(v, index) for v in w.dyn]
        return run(exe, w, host, args, kwargs, sch)

    # the slow path ------------------------------------------------------
    def miss(self, key, args, kwargs, w, dense_ok=True):
        """Build the executable of `key`, or mark the key DENSE (the layout policy)."""
        if self.layouts is not None and self.layouts.dense(key, args, kwargs, dense_ok):
            return self.cache.put(key, DENSE)
        return self.build(key, args, kwargs, w)

    def build(self, key, args, kwargs, w):
        cache_misses[self.name] += 1
        runtime.maybe_release_executables()
        index = w.index if w.index is not None else current_device()
        sch = self.schema
        meta_args, meta_kwargs = _meta.to_meta(args, kwargs)
        pointwise_inplace = self.mode == "inplace" and args and (
            torch.Tag.pointwise in self.op.tags or torch.Tag.pointwise in self.low.op.tags)
        if pointwise_inplace:  # TensorIterator: memory overlap first, then everything else
            check_overlap(args[0], self.op._schema.name in OVERLAP_WRITES)
            check_partial_overlaps(aliased_pairs(self.op, sch, args), args)
        # PyTorch's meta kernel validates and gives result dtypes/shapes/strides.
        meta_self = _meta.run_meta(self.op, meta_args, meta_kwargs,
                                   self.low.device_meta if self.op is self.low.op else None)
        if pointwise_inplace:
            check_inplace_shape(meta_self, args[0])
        func_op = self.low.op
        if func_op is not self.op and self.mode == "inplace":
            fm_args, fm_kwargs = _meta.drop_out_args(func_op, meta_args, meta_kwargs)
            meta_func = _meta.run_meta(func_op, fm_args, fm_kwargs)
            check_inplace_cast(meta_func, meta_args[0] if meta_args else None)
        else:
            meta_func = meta_self

        tmpl_args, tmpl_kwargs, spec_of = template(args, kwargs, sch, w)
        ncells = len(w.cells)
        ndyn = len(w.dyn)
        noffs = len(w.offs)
        low = self.low
        mode = self.mode

        # output layout from the functional meta result
        if mode == "functional":
            flat_meta, ret_plan = flatten_returns(meta_self, sch)
        elif mode == "inplace":
            flat_meta, ret_plan = [], alias_returns(sch)
        else:  # mutating: lowering returns (returns, updates)
            flat_meta, ret_plan = flatten_returns(meta_self, sch, mutating=True)

        out_specs = []
        for m in flat_meta:
            shape = tuple(m.shape)
            strides = dense_strides(shape, tuple(m.stride()))
            out_specs.append(OutSpec(m.dtype, shape, strides, 0,
                                     math.prod(shape) * m.dtype.itemsize))

        # which (slot, spec) each mutated argument writes
        write_targets = []
        base_name = self.op._schema.name
        overlap_ok = base_name in OVERLAP_WRITES
        if mode in ("inplace", "mutating"):
            for i in sch.mutated:
                v = sch.arg(args, kwargs, i)
                if isinstance(v, (list, tuple)):
                    write_targets.append([write_target(x, w, spec_of, overlap_ok) for x in v])
                elif v is None:
                    write_targets.append(None)
                else:
                    write_targets.append(write_target(v, w, spec_of, overlap_ok))
        writes_slots = sorted({t.slot for grp in write_targets if grp is not None
                               for t in (grp if isinstance(grp, list) else [grp])})
        random = self.random
        device = runtime.jax_device(index)

        def traced(*inputs):
            slots = list(inputs[:ncells])
            dyn = inputs[ncells:ncells + ndyn]
            offs = inputs[ncells + ndyn:ncells + ndyn + noffs]
            rng = inputs[ncells + ndyn + noffs] if random else None
            jargs, jkwargs = fill(tmpl_args, tmpl_kwargs, slots, dyn, offs)
            key = None
            if rng is not None:
                key = jax.random.fold_in(jax.random.PRNGKey(rng[0]), rng[1])
            with lowering.tracing(meta=meta_func, key=key, device=index, warnings=exe.warn):
                result = low.fn(*jargs, **jkwargs)
            outs = []
            if mode == "functional":
                for v, sp in zip(flatten_values(result), out_specs):
                    outs.append(layout(v, sp))
            else:
                if mode == "mutating":
                    result, updates = result
                    for v, sp in zip(flatten_values(result), out_specs):
                        outs.append(layout(v, sp))
                else:
                    updates = result
                    if len(write_targets) == 1:
                        updates = [updates]
                for grp, val in zip(write_targets, updates):
                    if grp is None or val is None:
                        continue
                    for tgt, v in (zip(grp, val) if isinstance(grp, list) else ((grp, val),)):
                        write = storage.write_view_overlapping if tgt.overlap else \
                            storage.write_view
                        slots[tgt.slot] = write(
                            slots[tgt.slot], resolve(tgt.spec, offs),
                            storage.apply_flags(as_array(v), tgt.flags))
            return tuple(outs) + tuple(slots[s] for s in writes_slots)

        jitted = runtime.jit(traced, out_shardings=jax.sharding.SingleDeviceSharding(device))
        exe = Executable(jitted, index, out_specs, writes_slots, ret_plan,
                         nrandom=1 if random else 0, stage=JIT)
        store.attach(exe, (self.name, low.op.name(), mode, key), device)
        exe.overlaps = aliased_pairs(self.op, sch, args) if mode == "inplace" else ()
        overlapped = any(t.overlap for grp in write_targets if grp is not None
                         for t in (grp if isinstance(grp, list) else [grp]))
        if overlapped and OVERLAP_WRITES.get(base_name):
            exe.warn.append((OVERLAP_WRITES[base_name], False))
        return self.cache.put(key, exe)


def write_target(t, w, spec_of, overlap_ok=False):
    cell = storage.cell_of(t)
    overlap = check_overlap(t, overlap_ok)
    return WriteTarget(w.slots[id(cell)], spec_of[id(t)], storage.view_flags(t), overlap)


def flatten_returns(meta, sch, mutating=False):
    """Meta results -> (flat list of meta tensors, return plan)."""
    flat = []

    def walk(m):
        if isinstance(m, Tensor):
            flat.append(m)
            return New(len(flat) - 1)
        if isinstance(m, (list, tuple)):
            return Seq(list if isinstance(m, list) else tuple, tuple(walk(x) for x in m))
        return Const(m)

    if mutating or sch.nreturns > 1:
        if not isinstance(meta, tuple):
            meta = (meta,)
        if any(sch.returns_alias[: len(meta)]):
            raise AssertionError(f"torchneuron: {sch.op} returns an alias of an argument "
                                 "from a functional or mutating entry")
        parts = tuple(walk(m) for m in meta)
        if sch.nreturns == 1:
            return flat, parts[0]
        return flat, Seq(tuple, parts)
    return flat, walk(meta)


def alias_returns(sch):
    """In-place ops return their mutated self argument(s)."""
    if sch.nreturns == 0:
        return Nothing()
    if sch.nreturns == 1:
        return Arg(sch.mutated[0])
    return Seq(tuple, tuple(Arg(i) for i in sch.mutated[: sch.nreturns]))


def flatten_values(result):
    """A lowering's results, flat.  None results are undefined tensors (e.g. masked-out
    gradients): the meta kernel returns None there too, so they have no output spec."""
    if isinstance(result, (list, tuple)):
        out = []
        for r in result:
            if isinstance(r, (list, tuple)):
                out.extend(x for x in r if x is not None)
            elif r is not None:
                out.append(r)
        return out
    return [result]

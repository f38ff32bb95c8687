"""The kernels dispatch builds: an :class:`Entry` (an overload, its lowering and
its executable cache), the out= kernel of a lowered functional op, and the wrapper
that runs a lowering's eager extras (argument normaliser, checks, index bounds)
before its entry.

A call (the hot path) walks the arguments, looks the key up and calls the cached
executable; a miss (the slow path) asks PyTorch's meta kernel for the results'
dtypes, shapes and strides, traces the lowering between view reads and view
writes, and jits it for the device.
"""
from __future__ import annotations

import collections
import functools
import math
import warnings

import jax
import torch

from .. import config, lowering, runtime, storage
from ..storage import lazy as _lazy
from ..numerics import scalar_type_name
from . import meta as _meta
from . import store
from .executable import (FusedWalk, Walk, as_array, current_device, dense_strides, fill, global_state,
                         layout, template)
from .meta import device_mismatch, translate_runtime_error
from .plan import Arg, Const, New, Nothing, OutSpec, Seq, WriteTarget, assemble, resolve
from .schema import TLIST, schema

_LAST_DISPATCH = runtime.LAST_DISPATCH

Tensor = torch.Tensor
aten = torch.ops.aten

# primitives XLA:CPU runs far slower as a conditional's branch than at top level (measured:
# convolution 8.5x; dot, reduce_window, fft, sort, cumsum, gathers, reductions: within 20%)
_SOLO_PRIMITIVES = ("conv_general_dilated",)
_SOLO_HLO = ("convolution(",)  # the same primitives in a compiled executable's HLO text


class Executable:
    __slots__ = ("fn", "outs", "writes", "returns", "out_bytes", "random", "index", "warn",
                 "overlaps", "avals", "solo", "jit", "store_key", "reset", "__weakref__")


_warned_once: set = set()  # warn_once messages already given


def warn_once(msg: str, stacklevel: int = 3) -> None:
    """PyTorch's TORCH_WARN_ONCE: once per process unless torch.set_warn_always(True)."""
    if not torch.is_warn_always_enabled():
        if msg in _warned_once:
            return
        _warned_once.add(msg)
    warnings.warn(msg, UserWarning, stacklevel=stacklevel)


cache_hits = collections.Counter()  # op name -> calls served by a cached executable
cache_misses = collections.Counter()  # op name -> executables built
CACHE_MAX = config.get("TORCHNEURON_EXECUTABLE_CACHE")

# Layout churn.  The strides are part of an executable's key (view reads are traced into
# the op's program, so XLA folds a transpose into a dot).  A functional op that has been
# compiled for LAYOUT_VARIANTS layouts of the same shapes (PyTorch's layout-sweeping tests,
# programs that permute their inputs every call) stops compiling per layout: a new layout
# reads its strided inputs into dense copies (the copies' own small executables are shared
# by every op) and runs the op's one dense executable.  Only where the op's outputs keep the
# same strides (the meta kernel says so), so what the caller sees does not change.
LAYOUT_VARIANTS = 8
DENSE = object()  # cache marker: run this key's call on dense copies of its inputs
_TOKEN_LEN = 9  # Walk.cell_token


def _shape_key(tok):
    """`tok` (a key or part of one) without the tensors' strides, offsets and buffers."""
    if isinstance(tok, tuple):
        if len(tok) == _TOKEN_LEN and isinstance(tok[1], torch.dtype) \
                and isinstance(tok[2], torch.Size):
            return (tok[1], tok[2], tok[7], tok[8])
        return tuple(_shape_key(t) for t in tok)
    return tok


def _partial(t):
    """A device tensor that is not exactly its whole buffer, in order (a strided view)."""
    if not isinstance(t, Tensor) or t.device.type != "neuron" or t.is_conj() or t.is_neg():
        return False
    cell = getattr(t.untyped_storage(), "_tn_cell", None)
    return cell is not None and not (t.is_contiguous() and t.storage_offset() == 0
                                     and cell.nbytes == t.numel() * t.element_size())


def _densify(v):
    """`v` with its strided views replaced by dense copies.  The copies are made by
    storage.dense_copy, which runs no op's kernel: a kernel that asked for them (clone,
    contiguous, _to_copy included) never re-enters itself."""
    if _partial(v):
        return storage.dense_copy(v)
    if isinstance(v, (list, tuple)) and any(_partial(x) for x in v):
        return type(v)(_densify(x) for x in v)
    return v


def _meta_dense(v, m):
    """The meta argument `m` of `v`, contiguous where `v` is a strided view."""
    if _partial(v):
        return torch.empty(v.shape, dtype=v.dtype, device="meta")
    if isinstance(v, (list, tuple)) and isinstance(m, (list, tuple)):
        return type(m)(_meta_dense(x, y) for x, y in zip(v, m))
    return m


def _strides(res):
    if isinstance(res, Tensor):
        return (tuple(res.shape), res.stride())
    if isinstance(res, (list, tuple)):
        return tuple(_strides(r) for r in res)
    return None


class Entry:
    """A kernel: an overload plus its lowering and executable cache."""

    def __init__(self, op, low, mode):
        self.op = op
        self.low = low  # Lowering of op itself, or of its functional variant
        self.mode = mode  # "functional" | "inplace" | "mutating"
        self.schema = schema(op)
        self.cache = collections.OrderedDict()
        self.static = low.static
        self.random = low.random
        self.name = op.name()
        self.layouts = {}  # shape key -> layouts compiled (functional ops)

    # the hot path -------------------------------------------------------
    def __call__(self, *args, **kwargs):
        return self.run(args, kwargs, True)

    def run(self, args, kwargs, dense_ok):
        """Run the op.  With `dense_ok` a key under layout churn answers DENSE: the call
        runs once more on dense copies of its strided inputs, with `dense_ok` False, so
        that second run builds (or finds) an executable and never densifies again."""
        sch = self.schema
        fused = _lazy.fused
        w = FusedWalk(self.static) if fused else Walk(self.static)
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
                return self.run([_densify(a) for a in args],
                                {k: _densify(v) for k, v in kwargs.items()}, False)
        if exe.overlaps:
            check_partial_overlaps(exe.overlaps, args)
        index = exe.index
        inputs = w.arrays
        if w.dyn:
            inputs = inputs + [t_or_v for t_or_v in self._dyn_values(w.dyn, index)]
        if w.offs:
            inputs = inputs + [storage.dyn_scalar(o, index) for o in w.offs]
        if exe.random:
            from .. import device

            inputs = inputs + [device.next_rng_input(index)]
        if exe.out_bytes:
            storage.check_room(index, exe.out_bytes)
        res = self.record(exe, inputs, index) if fused else None
        if res is None:
            try:
                res = exe.fn(*[x.result() if type(x) is storage.Pending else x
                               for x in inputs] if fused else inputs)
            except Exception as e:  # noqa: BLE001
                raise translate_runtime_error(e, index) from None
            _LAST_DISPATCH[index] = res
        for msg, once in exe.warn:  # (filled while the first call traces the lowering)
            if once:
                warn_once(msg)
            else:
                warnings.warn(msg, UserWarning, stacklevel=2)
        return self.finish(exe, res, w, args, kwargs)

    @staticmethod
    def record(exe, inputs, index):
        """Fused eager: append the call to the device's pending program; its results are
        storage.Pending values.  An executable never called yet runs op by op instead (the
        pending program first): its first call loads it from the eager executable store,
        or traces, compiles and stores it, so tracing errors and warnings come at the op.
        Its next recording reads its results' shapes from the compiled executable (or, with
        the store off, from an abstract trace).  An executable that XLA:CPU runs slowly
        inside a program (a convolution: 8x slower as a conditional's branch) is not
        recorded: the pending program runs and None tells the caller to call the
        executable itself, op by op."""
        avals = exe.avals
        if avals is None:
            fn = exe.fn
            if type(fn) is functools.partial:  # _first_call: the store's load or build
                _lazy.program(index).flush()
                return None
            if fn is exe.jit:  # the store is off
                jaxpr = jax.make_jaxpr(exe.jit)(
                    *[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs])
                avals = tuple(jaxpr.out_avals)
                text = str(jaxpr)
                exe.solo = any(p in text for p in _SOLO_PRIMITIVES)
            else:  # a compiled executable, loaded from the store or built for it
                avals = tuple(jax.tree_util.tree_leaves(fn.out_info))
                text = fn.as_text()
                exe.solo = any(p in text for p in _SOLO_HLO)
            exe.avals = avals
        if exe.solo:
            _lazy.program(index).flush()
            return None
        return _lazy.program(index).record(exe, inputs, avals)

    @staticmethod
    def _dyn_values(dyn, index):
        for v in dyn:
            if isinstance(v, Tensor):
                yield storage.typed_scalar(v, index)
            else:
                yield storage.dyn_scalar(v, index)

    def finish(self, exe, res, w, args, kwargs):
        nouts = len(exe.outs)
        if exe.writes:
            cells = w.cells
            for j, slot in enumerate(exe.writes):
                storage.put(cells[slot], res[nouts + j])
        index = exe.index
        outs = [make_out(res[i], exe.outs[i], index) for i in range(nouts)]
        plan = exe.returns
        if type(plan) is New:
            return outs[plan.index]
        return assemble(plan, outs, self.schema, args, kwargs)

    # the slow path ------------------------------------------------------
    def miss(self, key, args, kwargs, w, dense_ok=True):
        """Build the executable of `key`, or (`dense_ok`) mark the key DENSE (layout
        churn)."""
        if self.mode != "functional":
            return self.build(key, args, kwargs, w)
        sk = _shape_key(key)
        n = self.layouts.get(sk, 0)
        if dense_ok and n >= LAYOUT_VARIANTS and self._dense_keeps_layout(args, kwargs):
            if len(self.cache) >= CACHE_MAX:
                self.cache.popitem(last=False)
            self.cache[key] = DENSE
            return DENSE
        if len(self.layouts) >= CACHE_MAX:
            self.layouts.clear()
        self.layouts[sk] = n + 1
        return self.build(key, args, kwargs, w)

    def _dense_keeps_layout(self, args, kwargs):
        """Whether some input is a strided view and the op's results keep their strides
        when those inputs are dense."""
        if not any(_partial(a) or isinstance(a, (list, tuple)) and any(_partial(x) for x in a)
                   for a in list(args) + list(kwargs.values())):
            return False
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # build() gives the op's warnings
                m_args, m_kwargs = _meta.to_meta(args, kwargs)
                before = _meta.run_meta(self.op, m_args, m_kwargs)
                after = _meta.run_meta(
                    self.op, [_meta_dense(a, m) for a, m in zip(args, m_args)],
                    {k: _meta_dense(v, m_kwargs[k]) for k, v in kwargs.items()})
        except Exception:  # noqa: BLE001  bad arguments: build() reports them
            return False
        return _strides(before) == _strides(after)

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
            check_partial_overlaps(_aliased_pairs(self.op, sch, args), args)
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

        exe = Executable()
        exe.fn = exe.jit = runtime.jit(traced, out_shardings=jax.sharding.SingleDeviceSharding(device))
        exe.store_key = None
        if store.folder() is not None:  # the eager executable store (dispatch/store.py)
            exe.store_key = store.key_of((self.name, low.op.name(), mode, key), device)
            if exe.store_key is not None:
                exe.fn = functools.partial(_first_call, exe)
        exe.outs = out_specs
        exe.writes = writes_slots
        exe.returns = ret_plan
        exe.out_bytes = sum(sp.nbytes for sp in out_specs)
        exe.random = random
        exe.index = index
        exe.avals = None
        exe.solo = False
        exe.overlaps = _aliased_pairs(self.op, sch, args) if mode == "inplace" else ()
        overlapped = any(t.overlap for grp in write_targets if grp is not None
                         for t in (grp if isinstance(grp, list) else [grp]))
        exe.warn = [(OVERLAP_WRITES[base_name], False)] \
            if overlapped and OVERLAP_WRITES.get(base_name) else []
        if len(self.cache) >= CACHE_MAX:
            self.cache.popitem(last=False)
        self.cache[key] = exe
        return exe


def _first_call(exe, *inputs):
    """An executable's first call with the eager executable store on: load it from the
    store (no trace, no compile; its trace's warnings come with it), else trace, compile
    and store it.  Later calls go straight to the jax executable."""
    device = runtime.jax_device(exe.index)
    got = store.load(exe.store_key, device)
    if got is not None:
        compiled, warn = got
        try:
            res = compiled(*inputs)
        except Exception:  # noqa: BLE001  an entry that does not run here: build it again
            store.discard(exe.store_key)
        else:
            exe.fn, exe.warn = compiled, warn
            store.track(exe, _unload)
            return res
    hits = store.jax_cache_hits()
    compiled = exe.jit.trace(*inputs).lower().compile()  # the trace fills exe.warn
    if store.jax_cache_hits() != hits:
        # jax's cache served it (written under another code version): XLA:CPU cannot
        # serialize again an executable it loaded (its kernels are missing), so compile it
        # once more past jax's cache (a new function: jit's own caches miss) for the store
        store.STATS.jax_served += 1
        with store.jax_cache_bypassed() as bypassed:
            if bypassed:
                fresh = runtime.jit(functools.partial(exe.jit.__wrapped__),
                                out_shardings=jax.sharding.SingleDeviceSharding(device))
                compiled = fresh.trace(*inputs).lower().compile()
        hits = store.jax_cache_hits() if bypassed else None
    if store.jax_cache_hits() == hits:
        store.save(exe.store_key, compiled, exe.warn)
    exe.fn = compiled
    store.track(exe, _unload)
    return compiled(*inputs)


def _unload(exe):
    """Releasing every executable: drop this one's (the next call loads it again)."""
    exe.fn = functools.partial(_first_call, exe)


def make_out(arr, sp, index):
    return storage.make_tensor(arr, sp[0], sp[1], sp[2], sp[3], index, sp.nbytes)


def _expanded_warning(op, example):
    return (f"Use of {op} on expanded tensors is deprecated. Please clone() the tensor before "
            f"performing this operation. This also applies to advanced indexing e.g. {example}")


# In-place ops whose CPU kernels write through a view with internal overlap (an expanded
# tensor) instead of refusing it: fill_ and zero_ silently (every element gets the same
# value), these with a deprecation warning (TensorAdvancedIndexing.cpp's TORCH_WARNs).
OVERLAP_WRITES = {
    "aten::fill_": None,
    "aten::zero_": None,
    "aten::index_put_": _expanded_warning("index_put_", "tensor[indices] = tensor"),
    "aten::_index_put_impl_": _expanded_warning("index_put_", "tensor[indices] = tensor"),
    "aten::masked_fill_": _expanded_warning("masked_fill_", "tensor[mask] = scalar"),
    "aten::index_fill_": _expanded_warning("index_fill_", "tensor[mask] = scalar"),
}


def _aliased_pairs(op, sch, args):
    """(written position, input position) of a pointwise in-place op's tensor arguments that
    share a buffer: TensorIterator's partial-overlap check applies to them (per call: the
    cache key knows which arguments share a buffer, not where their views lie)."""
    if torch.Tag.pointwise not in op.tags and torch.Tag.pointwise not in getattr(
            _functional_of(op), "tags", ()):
        return ()
    pairs = []
    for i in sch.mutated:
        t = args[i] if i < len(args) else None
        if not isinstance(t, Tensor) or t.device.type != "neuron":
            continue
        cell = storage.cell_of(t)
        for j, a in enumerate(args):
            if j != i and isinstance(a, Tensor) and a.device.type == "neuron" \
                    and storage.cell_of(a) is cell:
                pairs.append((i, j))
    return tuple(pairs)


def _functional_of(op):
    """aten::gt_.Tensor -> aten::gt.Tensor (in-place overloads lack the pointwise tag)."""
    pkt = op._schema.name.split("::")[1]
    if not pkt.endswith("_"):
        return None
    try:
        return getattr(getattr(torch.ops.aten, pkt[:-1]), op._overloadname)
    except AttributeError:
        return None


def check_partial_overlaps(pairs, args):
    for i, j in pairs:
        check_partial_overlap(args[i], args[j])


def overlap_status(a, b) -> str:
    """PyTorch's get_overlap_status for two tensors: full | partial | no | too_hard."""
    if a is b:
        return "full"
    if a.numel() == 0 or b.numel() == 0:
        return "no"
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return "no"  # (checked first here: the cheap test, and too_hard is as harmless)
    from torch._prims_common import is_non_overlapping_and_dense_or_false as dense

    if not dense(a) or not dense(b):
        return "too_hard"
    a0 = a.storage_offset() * a.element_size()
    b0 = b.storage_offset() * b.element_size()
    a1, b1 = a0 + a.numel() * a.element_size(), b0 + b.numel() * b.element_size()
    if a0 == b0 and a1 == b1:
        return "full" if a.stride() == b.stride() else "partial"
    return "partial" if a0 < b1 and b0 < a1 else "no"


def check_partial_overlap(written, read) -> None:
    """TensorIterator's assert_no_partial_overlap."""
    if overlap_status(written, read) == "partial":
        _raise_partial()


def check_no_overlap(written, read) -> None:
    """TensorIterator's assert_no_overlap (index_put_ and its kin: not even a full overlap)."""
    if isinstance(read, Tensor) and overlap_status(written, read) in ("full", "partial"):
        _raise_partial()


def _raise_partial():
    raise RuntimeError(
        "unsupported operation: some elements of the input tensor and the written-to tensor "
        "refer to a single memory location. Please clone() the tensor before performing the "
        "operation.")


def check_overlap(t, allowed=False) -> bool:
    """Whether the written-to tensor `t` has internal overlap; raises TensorIterator's
    error unless the op writes through overlap (`allowed`)."""
    if not isinstance(t, Tensor) or torch._debug_has_internal_overlap(t) != 1:
        return False
    if allowed:
        return True
    raise RuntimeError(
        "unsupported operation: more than one element of the written-to tensor refers to a "
        "single memory location. Please clone() the tensor before performing the operation."
    )


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


# ---------------------------------------------------------------- casting rules
def check_cast(result_dtype, out_dtype) -> None:
    """TensorIterator's rule for in-place and out= results."""
    if not torch.can_cast(result_dtype, out_dtype):
        raise RuntimeError(f"result type {scalar_type_name(result_dtype)} can't be cast to the "
                           f"desired output type {scalar_type_name(out_dtype)}")


def check_inplace_shape(result, self_) -> None:
    """A pointwise in-place op cannot grow self to the broadcast shape (TensorIterator's
    check, which comes before the dtype checks; some Python meta references skip it)."""
    if isinstance(result, (tuple, list)):
        result = result[0] if result else None
    if isinstance(result, Tensor) and isinstance(self_, Tensor) and result.shape != self_.shape:
        raise RuntimeError(f"output with shape {list(self_.shape)} doesn't match the broadcast "
                           f"shape {list(result.shape)}")


def check_inplace_cast(result, self_) -> None:
    """An in-place op computed through its functional form must be able to cast the
    result back into self (some releases' meta kernels for the in-place overload do not
    check: torch 2.11's div_ accepts an int64 self)."""
    if isinstance(self_, (tuple, list)):  # a foreach op: every result into its self
        if isinstance(result, (tuple, list)):
            for r, t in zip(result, self_):
                check_inplace_cast(r, t)
        return
    if isinstance(result, (tuple, list)):
        result = result[0] if result else None
    if isinstance(result, Tensor) and isinstance(self_, Tensor):
        check_cast(result.dtype, self_.dtype)


_OUT_DTYPE_WORDS = ("cast", "dtype", "type", "non-boolean outputs")
_out_checked: dict = {}


def _sig(v):
    if isinstance(v, Tensor):
        return (v.dtype, tuple(v.shape), v.device.type == "cpu" and v.dim() == 0)
    if isinstance(v, (list, tuple)):
        return tuple(_sig(x) for x in v)
    if isinstance(v, (bool, int, float, complex)):
        return type(v)
    return v


def check_out_dtypes(out_op, args, kwargs) -> bool:
    """Raise what PyTorch's CPU out= kernel raises for these dtypes (each op's
    TensorIterator decides: "result type X can't be cast to the desired output type Y",
    "Found dtype X but expected Y", "Expected out tensor to have dtype ..."), found by
    running it once per signature on small zero-filled CPU stand-ins.  Only dtype errors
    count (zeros can make values fail: integer division).  False when the arguments are
    too big for stand-ins (the caller then applies the can_cast rule)."""
    try:
        key = (out_op, tuple(_sig(a) for a in args),
               tuple((k, _sig(v)) for k, v in kwargs.items()), global_state())
        hash(key)
    except TypeError:
        key = None
    err = _out_checked.get(key, 0) if key is not None else 0
    if err == 0:
        if _too_big(args) or _too_big(list(kwargs.values())):
            return False
        margs, mkwargs = _meta.to_meta(args, kwargs)
        # empty out= stand-ins: resized without the deprecation warning (which C++ would
        # deliver to the user's call, past any catch_warnings here)
        sch = schema(out_op)
        for i in sch.out_args:
            name = sch.names[i]
            if name in mkwargs:
                mkwargs[name] = _empty_like_meta(mkwargs[name])
            elif i < len(margs):
                margs[i] = _empty_like_meta(margs[i])
        e = _meta.cpu_error(out_op, margs, mkwargs)
        err = None
        if e is not None and any(w in str(e) for w in _OUT_DTYPE_WORDS):
            err = e
        if key is not None:
            if len(_out_checked) > 4096:
                _out_checked.clear()
            _out_checked[key] = err
    if err is not None:
        raise type(err)(str(err))
    return True


def _empty_like_meta(v):
    if isinstance(v, Tensor):
        return torch.empty(0, dtype=v.dtype, device="meta")
    if isinstance(v, (list, tuple)):
        return type(v)(_empty_like_meta(x) for x in v)
    return v


def _too_big(vs):
    for v in vs:
        if isinstance(v, Tensor) and v.numel() > _meta._CPU_ERROR_MAX_NUMEL:
            return True
        if isinstance(v, (list, tuple)) and _too_big(v):
            return True
    return False


# ---------------------------------------------------------------- out= kernels
def resize_output(out: Tensor, shape) -> None:
    """at::native::resize_output: resize, warning when a non-empty out changes shape."""
    shape = tuple(shape)
    if tuple(out.shape) == shape:
        return
    if out.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape {list(out.shape)}, "
            f"which does not match the required output shape {list(shape)}. This behavior is "
            "deprecated, and in a future PyTorch release outputs will not be resized unless they "
            "have zero elements. You can explicitly reuse an out tensor t by resizing it, inplace, "
            "to zero elements with t.resize_(0).",
            UserWarning,
            stacklevel=4,
        )
    out.resize_(shape)


def out_kernel(out_op, func_op):
    """The out= overload `out_op` computed by its functional overload `func_op`, then
    copied into `out` (PyTorch's autogenerated out= kernels).  A Tensor[] out
    (``_foreach_*_out``) is filled element by element."""
    sch = schema(out_op)
    fnames = {a.name for a in func_op._schema.arguments}
    out_names = [sch.names[i] for i in sch.out_args]
    list_out = [sch.kinds[i] == TLIST for i in sch.out_args]
    out_pos = set(sch.out_args)
    pointwise = torch.Tag.pointwise in func_op.tags

    def kernel(*args, **kwargs):
        outs = [kwargs[n] if n in kwargs else args[sch.names.index(n)] for n in out_names]
        if pointwise:  # TensorIterator checks memory overlap first, then shapes, then dtypes
            ins = [a for k, a in enumerate(args) if k not in out_pos and isinstance(a, Tensor)]
            for o in outs:
                if not isinstance(o, Tensor) or o.device.type != "neuron":
                    continue
                check_overlap(o)
                for a in ins:
                    if a.device.type == "neuron":
                        check_partial_overlap(o, a)
            # an out tensor that is also an input is not resized
            for o in outs:
                if any(a is o for a in ins):
                    try:
                        shape = tuple(torch.broadcast_shapes(*[a.shape for a in ins]))
                    except RuntimeError:
                        break  # the meta kernel reports it
                    if tuple(o.shape) != shape:
                        raise RuntimeError(f"output with shape {list(o.shape)} doesn't match "
                                           f"the broadcast shape {list(shape)}")
        checked = check_out_dtypes(out_op, args, kwargs)
        fkw = {k: v for k, v in kwargs.items() if k in fnames}
        try:
            res = func_op(*args, **fkw)
        except NotImplementedError:
            if pointwise:  # the CPU's structured kernel has resized the outs by then
                shapes = [a.shape for k, a in enumerate(args)
                          if k not in out_pos and isinstance(a, Tensor)]
                try:
                    shape = torch.broadcast_shapes(*shapes)
                except RuntimeError:
                    shape = None
                for o in outs:
                    if shape is not None and isinstance(o, Tensor) and o.device.type == "neuron":
                        resize_output(o, shape)
            raise
        if list_out == [True]:
            dst, res = outs[0], res
            if len(dst) != len(res):
                raise RuntimeError(f"Tensor lists must have the same number of tensors, got "
                                   f"{len(dst)} and {len(res)}")
            for o, r in zip(dst, res):
                if tuple(o.shape) != tuple(r.shape):
                    resize_output(o, r.shape)
                o.copy_(r)
            return None
        results = res if isinstance(res, (tuple, list)) else (res,)
        for o, r in zip(outs, results):
            if o.device.type != "neuron":
                raise device_mismatch("neuron:0", o.device)
            if not checked:
                check_cast(r.dtype, o.dtype)
            resize_output(o, r.shape)
            o.copy_(r)
        if sch.nreturns == 1:
            return outs[0]
        return tuple(outs)

    return kernel

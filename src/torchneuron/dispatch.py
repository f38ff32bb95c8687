"""Kernel registration, the executable cache, and the CPU fallback.

Every aten overload with a lowering gets a PrivateUse1 kernel.  A call:

1. walks the arguments once, collecting each distinct storage cell touched
   (its flat jax array is an executable input), each dynamic scalar (a cached
   device value), and a hashable key describing shapes, strides, offsets,
   dtypes, static arguments and the aliasing between arguments;
2. looks the key up in the op's executable cache; on a miss it runs PyTorch's
   meta kernel (which validates the arguments with PyTorch's own errors and
   gives the result dtypes, shapes and strides), traces the lowering between
   view reads and view writes, and jits it for the device;
3. calls the executable once and wraps its results in new tensors, or stores
   the updated flat arrays back into the cells of mutated arguments.

Ops without a lowering go through the boxed PrivateUse1 fallback: first a
PyTorch decomposition traced into one executable (still native), else a copy
to the CPU, PyTorch's CPU kernel, and a copy back (counted, policy-controlled).
"""
from __future__ import annotations

import collections
import functools
import math
import warnings

import jax
import jax.numpy as jnp
import torch

from . import config, lowering, runtime, storage
from .numerics import scalar_type_name
from .lowering import LOWERINGS

aten = torch.ops.aten
Tensor = torch.Tensor

# ---------------------------------------------------------------- schema info
_T, _TOPT, _TLIST, _S, _SLIST, _OTHER = range(6)


def _kind(t) -> int:
    if isinstance(t, torch.TensorType):
        return _T
    if isinstance(t, torch.NumberType):
        return _S
    if isinstance(t, torch.OptionalType):
        k = _kind(t.getElementType())
        return {_T: _TOPT, _S: _S, _TLIST: _TLIST}.get(k, _OTHER)
    if isinstance(t, torch.ListType):
        k = _kind(t.getElementType())
        return {_T: _TLIST, _TOPT: _TLIST, _S: _SLIST}.get(k, _OTHER)
    return _OTHER


class Schema:
    """What dispatch needs to know about an overload's arguments."""

    def __init__(self, op):
        s = op._schema
        self.op = op
        self.names = [a.name for a in s.arguments]
        self.kinds = [_kind(a.type) for a in s.arguments]
        self.kind_of = dict(zip(self.names, self.kinds))
        self.kwarg_only = [a.kwarg_only for a in s.arguments]
        self.mutated = [i for i, a in enumerate(s.arguments)
                        if a.alias_info is not None and a.alias_info.is_write]
        self.out_args = [i for i in self.mutated if s.arguments[i].kwarg_only]
        self.inplace = [i for i in self.mutated if not s.arguments[i].kwarg_only]
        self.returns_alias = [r.alias_info is not None for r in s.returns]
        self.nreturns = len(s.returns)
        self.returns_list = (len(s.returns) == 1 and isinstance(s.returns[0].type, torch.ListType))
        self.defaults = {a.name: a.default_value for a in s.arguments if a.has_default_value()}

    def arg(self, args, kwargs, i):
        name = self.names[i]
        if name in kwargs:
            return kwargs[name]
        if i < len(args) and not self.kwarg_only[i]:
            return args[i]
        return self.defaults.get(name)


@functools.lru_cache(maxsize=None)
def schema(op) -> Schema:
    return Schema(op)


def functional_of(op):
    """The functional overload an in-place (foo_) or out= overload computes."""
    sch = schema(op)
    packet_name = op._schema.name.split("::")[1]
    if sch.inplace and packet_name.endswith("_") and not sch.out_args:
        base = getattr(aten, packet_name[:-1], None)
        if base is None:
            return None
        # match by argument names and types, not by overload name: pow_.Scalar
        # (Tensor self, Scalar exponent) computes pow.Tensor_Scalar, not pow.Scalar
        want = [(a.name, str(a.type)) for a in op._schema.arguments]
        for ov in [op._overloadname] + [o for o in base.overloads() if o != op._overloadname]:
            cand = getattr(base, ov, None)
            if cand is not None and [(a.name, str(a.type)) for a in cand._schema.arguments] == want:
                return cand
        return None
    if sch.out_args:
        packet = getattr(aten, packet_name)
        want = [(a.name, str(a.type)) for a in op._schema.arguments if not
                (a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)]
        for ov in packet.overloads():
            cand = getattr(packet, ov)
            cs = cand._schema
            if any(a.alias_info is not None and a.alias_info.is_write for a in cs.arguments):
                continue
            if [(a.name, str(a.type)) for a in cs.arguments] == want:
                return cand
    return None


# ---------------------------------------------------------------- errors
def device_mismatch(a, b):
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"{a} and {b}!"
    )


# ---------------------------------------------------------------- argument walk
class _Walk:
    """One pass over an op's arguments: key tokens, executable inputs, cells."""

    __slots__ = ("cells", "slots", "arrays", "dyn", "offs", "index", "static")

    def __init__(self, static):
        self.cells = []
        self.slots = {}
        self.arrays = []
        self.dyn = []
        self.offs = []  # nonzero storage offsets: executable inputs, not key parts
        self.index = None
        self.static = static

    def tensor(self, t):
        st = t.untyped_storage()
        cell = getattr(st, "_tn_cell", None)
        if cell is None and st.device.type == "neuron":
            cell = storage.cell_of(t)
        if cell is not None:
            if cell.raw:
                storage.retype(cell, t.dtype)
            idx = cell.index
            if self.index is None:
                self.index = idx
            elif idx != self.index:
                raise device_mismatch(f"neuron:{self.index}", t.device)
            cid = id(cell)
            slot = self.slots.get(cid)
            if slot is None:
                slot = self.slots[cid] = len(self.cells)
                self.cells.append(cell)
                self.arrays.append(cell.arr)
            off = t.storage_offset()
            if off:
                self.offs.append(off)
                off = -1
            return (slot, t.dtype, t.shape, t.stride(), off, cell.dt, cell.numel,
                    t.is_conj(), t.is_neg())
        if t.is_cpu and t.dim() == 0:
            self.dyn.append(t)
            return ("cs", t.dtype)
        if t.device.type == "neuron":
            storage.cell_of(t)  # raises: a neuron tensor without a device buffer
        raise device_mismatch(f"neuron:{self.index or 0}", t.device)

    def value(self, v, kind, name):
        if kind == _S:
            if isinstance(v, Tensor):
                return self.tensor(v)
            if v is None:
                return v
            if name in self.static:  # 5 == 5.0 == True as keys: keep the type apart
                return (type(v), v)
            self.dyn.append(v)
            return ("s", type(v))
        if kind == _T or kind == _TOPT:
            if v is None:
                return None
            if not isinstance(v, Tensor):  # a wrapped number arrives as a Python scalar
                self.dyn.append(v)
                return ("s", type(v))
            return self.tensor(v)
        if kind == _TLIST:
            return tuple(None if x is None else self.tensor(x) for x in v)
        if kind == _SLIST:
            if name in self.static:
                return tuple((type(x), x) for x in v)
            toks = []
            for x in v:
                if isinstance(x, Tensor):
                    toks.append(self.tensor(x))
                else:
                    self.dyn.append(x)
                    toks.append(("s", type(x)))
            return tuple(toks)
        if isinstance(v, list):
            return tuple(v)
        if isinstance(v, torch.device):
            if v.type == "neuron" and self.index is None:
                self.index = v.index if v.index is not None else _current_device()
            return ("dev", v.type)
        return v


def _current_device():
    from . import device

    return device.current_device()


# ---------------------------------------------------------------- executables
class Executable:
    __slots__ = ("fn", "outs", "writes", "returns", "out_bytes", "random", "index")


_cache_hits = collections.Counter()
_cache_misses = collections.Counter()
CACHE_MAX = config.get("TORCHNEURON_EXECUTABLE_CACHE")


class Entry:
    """A registered kernel: an overload plus its lowering and executable cache."""

    def __init__(self, op, low, mode):
        self.op = op
        self.low = low  # Lowering of op itself, or of its functional variant
        self.mode = mode  # "functional" | "inplace" | "mutating"
        self.schema = schema(op)
        self.cache = collections.OrderedDict()
        self.static = low.static
        self.random = low.random
        self.name = op.name()

    # the hot path -------------------------------------------------------
    def __call__(self, *args, **kwargs):
        sch = self.schema
        w = _Walk(self.static)
        kinds = sch.kinds
        names = sch.names
        toks = [w.value(a, kinds[i], names[i]) for i, a in enumerate(args)]
        if kwargs:
            kind_of = sch.kind_of
            toks.append(tuple((k, w.value(v, kind_of[k], k)) for k, v in kwargs.items()))
        toks.append(w.index)
        key = tuple(toks)
        exe = self.cache.get(key)
        if exe is None:
            exe = self.build(key, args, kwargs, w)
        else:
            _cache_hits[self.name] += 1
        index = exe.index
        inputs = w.arrays
        if w.dyn:
            inputs = inputs + [t_or_v for t_or_v in self._dyn_values(w.dyn, index)]
        if w.offs:
            inputs = inputs + [storage.dyn_scalar(o, index) for o in w.offs]
        if exe.random:
            from . import device

            inputs = inputs + [device.next_rng_input(index)]
        if exe.out_bytes:
            storage.check_room(index, exe.out_bytes)
        try:
            res = exe.fn(*inputs)
        except Exception as e:  # noqa: BLE001
            raise _translate_runtime_error(e, index) from None
        return self.finish(exe, res, w, args, kwargs)

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
                cells[slot].arr = res[nouts + j]
        index = exe.index
        outs = [_make_out(res[i], exe.outs[i], index) for i in range(nouts)]
        tmpl = exe.returns
        if tmpl[0] == "new":
            return outs[tmpl[1]]
        return self.assemble(tmpl, outs, args, kwargs)

    def assemble(self, tmpl, outs, args, kwargs):
        # tmpl: ("new", i) | ("arg", i) | ("list", [...]) | ("tuple", [...]) | None
        kind = tmpl[0]
        if kind == "new":
            return outs[tmpl[1]]
        if kind == "arg":
            return self.schema.arg(args, kwargs, tmpl[1])
        if kind == "tuple":
            return tuple(self.assemble(t, outs, args, kwargs) for t in tmpl[1])
        if kind == "list":
            return [self.assemble(t, outs, args, kwargs) for t in tmpl[1]]
        if kind == "const":  # a non-tensor result (e.g. SymInt) the meta kernel computed
            return tmpl[1]
        return None

    # the slow path ------------------------------------------------------
    def build(self, key, args, kwargs, w):
        _cache_misses[self.name] += 1
        runtime.maybe_release_executables()
        index = w.index if w.index is not None else _current_device()
        sch = self.schema
        meta_args, meta_kwargs = _to_meta(args, kwargs)
        # PyTorch's meta kernel validates and gives result dtypes/shapes/strides.
        meta_self = _run_meta(self.op, meta_args, meta_kwargs)
        func_op = self.low.op
        if func_op is not self.op and self.mode == "inplace":
            fm_args, fm_kwargs = _drop_out_args(func_op, meta_args, meta_kwargs)
            meta_func = _run_meta(func_op, fm_args, fm_kwargs)
            _check_inplace_cast(meta_func, meta_args[0] if meta_args else None)
        else:
            meta_func = meta_self

        tmpl_args, tmpl_kwargs, spec_of = _template(args, kwargs, sch, self.static, w)
        ncells = len(w.cells)
        ndyn = len(w.dyn)
        noffs = len(w.offs)
        low = self.low
        mode = self.mode
        mutated_paths = [(i, sch.names[i]) for i in sch.mutated]

        # output layout from the functional meta result
        if mode == "functional":
            flat_meta, ret_tmpl = _flatten_returns(meta_self, sch)
        elif mode == "inplace":
            flat_meta, ret_tmpl = [], _alias_returns(sch)
        else:  # mutating: lowering returns (returns, updates)
            flat_meta, ret_tmpl = _flatten_returns(meta_self, sch, mutating=True)

        out_specs = []
        for m in flat_meta:
            shape = tuple(m.shape)
            strides = tuple(m.stride())
            if storage.perm_plan(shape, strides) is None or any(s < 0 for s in strides):
                strides = storage.contiguous_strides(shape)
            out_specs.append((m.dtype, shape, strides, 0,
                              math.prod(shape) * m.dtype.itemsize))

        # which (slot, spec) each mutated argument writes
        write_targets = []
        if mode in ("inplace", "mutating"):
            for i, name in mutated_paths:
                v = sch.arg(args, kwargs, i)
                if isinstance(v, (list, tuple)):
                    write_targets.append([_write_target(x, w, spec_of) for x in v])
                elif v is None:
                    write_targets.append(None)
                else:
                    write_targets.append(_write_target(v, w, spec_of))
        writes_slots = sorted({t[0] for grp in write_targets if grp is not None
                               for t in (grp if isinstance(grp, list) else [grp])})
        random = self.random
        device = runtime.jax_device(index)
        out_flat_specs = out_specs

        def traced(*inputs):
            slots = list(inputs[:ncells])
            dyn = inputs[ncells:ncells + ndyn]
            offs = inputs[ncells + ndyn:ncells + ndyn + noffs]
            rng = inputs[ncells + ndyn + noffs] if random else None
            jargs, jkwargs = _fill(tmpl_args, tmpl_kwargs, slots, dyn, offs)
            key = None
            if rng is not None:
                key = jax.random.fold_in(jax.random.PRNGKey(rng[0]), rng[1])
            with lowering.tracing(meta=meta_func, key=key, device=index):
                result = low.fn(*jargs, **jkwargs)
            outs = []
            if mode == "functional":
                flat = _flatten_values(result, sch)
                for v, sp in zip(flat, out_flat_specs):
                    outs.append(_layout(v, sp))
            else:
                if mode == "mutating":
                    result, updates = result
                    flat = _flatten_values(result, sch, mutating=True)
                    for v, sp in zip(flat, out_flat_specs):
                        outs.append(_layout(v, sp))
                else:
                    updates = result
                    if len(write_targets) == 1:
                        updates = [updates]
                for grp, val in zip(write_targets, updates):
                    if grp is None or val is None:
                        continue
                    if isinstance(grp, list):
                        for tgt, v in zip(grp, val):
                            slots[tgt[0]] = storage.write_view(
                                slots[tgt[0]], _resolve(tgt[1], offs),
                                storage.apply_flags(_as_array(v), tgt[2]))
                    else:
                        slots[grp[0]] = storage.write_view(
                            slots[grp[0]], _resolve(grp[1], offs),
                            storage.apply_flags(_as_array(val), grp[2]))
            return tuple(outs) + tuple(slots[s] for s in writes_slots)

        exe = Executable()
        exe.fn = jax.jit(traced, out_shardings=jax.sharding.SingleDeviceSharding(device))
        exe.outs = [_OutSpec(*sp) for sp in out_specs]
        exe.writes = writes_slots
        exe.returns = ret_tmpl
        exe.out_bytes = sum(sp[4] for sp in out_specs)
        exe.random = random
        exe.index = index
        if len(self.cache) >= CACHE_MAX:
            self.cache.popitem(last=False)
        self.cache[key] = exe
        return exe


class _OutSpec(tuple):
    """(dtype, shape, strides, offset) + nbytes, unpacked into make_tensor."""

    def __new__(cls, dtype, shape, strides, offset, nbytes):
        return tuple.__new__(cls, (dtype, shape, strides, offset))

    def __init__(self, dtype, shape, strides, offset, nbytes):
        self.nbytes = nbytes


def _make_out(arr, sp, index):
    return storage.make_tensor(arr, sp[0], sp[1], sp[2], sp[3], index, sp.nbytes)


def _as_array(v):
    if isinstance(v, (int, float, bool, complex)):
        return jnp.asarray(v)
    return v


def _layout(v, spec):
    """Cast a result to its dtype and lay it out flat in its storage order."""
    dtype, shape, strides = spec[0], spec[1], spec[2]
    v = _as_array(v)
    jd = runtime.jdtype(dtype)
    if v.dtype != jd:
        v = v.astype(jd)
    if tuple(v.shape) != shape:
        v = jnp.broadcast_to(v, shape) if v.size != math.prod(shape) else v.reshape(shape)
    order = storage.perm_plan(shape, strides)
    if order is not None and order != sorted(order):
        v = jnp.transpose(v, order)
    return v.reshape(-1)


def _write_target(t, w, spec_of):
    cell = storage.cell_of(t)
    slot = w.slots[id(cell)]
    if torch._debug_has_internal_overlap(t) == 1:
        raise RuntimeError(
            "unsupported operation: more than one element of the written-to tensor refers to a "
            "single memory location. Please clone() the tensor before performing the operation."
        )
    return (slot, spec_of[id(t)], storage.view_flags(t))


def _flatten_returns(meta, sch, mutating=False):
    """Meta results -> (flat list of meta tensors, return template)."""
    flat = []

    def walk(m, aliased=False):
        if isinstance(m, Tensor):
            flat.append(m)
            return ("new", len(flat) - 1)
        if isinstance(m, (list, tuple)):
            parts = [walk(x) for x in m]
            return ("list" if isinstance(m, list) else "tuple", parts)
        return ("const", m)

    if mutating or sch.nreturns > 1:
        if not isinstance(meta, tuple):
            meta = (meta,)
        parts = []
        for i, m in enumerate(meta):
            if sch.returns_alias[i] if i < len(sch.returns_alias) else False:
                parts.append(("aliasret", i))
            else:
                parts.append(walk(m))
        if sch.nreturns == 1 and not isinstance(meta, tuple):
            return flat, parts[0]
        tmpl = ("tuple", parts) if sch.nreturns != 1 else parts[0]
        return flat, tmpl
    return flat, walk(meta)


def _alias_returns(sch):
    """In-place ops return their mutated self argument(s)."""
    if sch.nreturns == 0:
        return ("none",)
    if sch.nreturns == 1:
        return ("arg", sch.mutated[0])
    return ("tuple", [("arg", i) for i in sch.mutated[: sch.nreturns]])


def _flatten_values(result, sch, mutating=False):
    # None results are undefined tensors (e.g. masked-out gradients): the meta
    # kernel returns None there too, so they have no output spec; skip them.
    if isinstance(result, (list, tuple)):
        out = []
        for r in result:
            if isinstance(r, (list, tuple)):
                out.extend(x for x in r if x is not None)
            elif r is not None:
                out.append(r)
        return out
    return [result]


# ---------------------------------------------------------------- templates
class _Slot:
    __slots__ = ("slot", "spec", "flags")

    def __init__(self, slot, spec, flags=0):
        self.slot = slot
        self.spec = spec
        self.flags = flags  # storage.view_flags: lazy conj / neg bits


class _Dyn:
    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i


class _Off:
    """Placeholder for the k-th dynamic storage offset in a view spec."""

    __slots__ = ("k",)

    def __init__(self, k):
        self.k = k


def _resolve(spec, offs):
    off = spec[3]
    if isinstance(off, _Off):
        return (spec[0], spec[1], spec[2], offs[off.k])
    return spec


def _template(args, kwargs, sch, static, w):
    """Arguments with tensors and dynamic scalars replaced by placeholders.

    Visits tensors in the same order as _Walk, so the k-th nonzero storage
    offset becomes the k-th offset input.  Returns (args, kwargs, {id(tensor): spec})."""
    dyn_i = [0]
    off_i = [0]
    spec_of = {}

    def tens(t):
        if t.device.type == "neuron":
            dtype, shape, strides, off = storage.view_spec(t)
            if off:
                off = _Off(off_i[0])
                off_i[0] += 1
            spec = (dtype, shape, strides, off)
            spec_of.setdefault(id(t), spec)
            return _Slot(w.slots[id(storage.cell_of(t))], spec, storage.view_flags(t))
        d = _Dyn(dyn_i[0])
        dyn_i[0] += 1
        return d

    def val(v, kind, name):
        if kind in (_T, _TOPT):
            if v is not None and not isinstance(v, Tensor):
                d = _Dyn(dyn_i[0])
                dyn_i[0] += 1
                return d
            return None if v is None else tens(v)
        if kind == _S:
            if isinstance(v, Tensor):
                return tens(v)
            if v is None or name in static:
                return v
            d = _Dyn(dyn_i[0])
            dyn_i[0] += 1
            return d
        if kind == _TLIST:
            return [None if x is None else tens(x) for x in v]
        if kind == _SLIST:
            if name in static:
                return list(v)
            out = []
            for x in v:
                if isinstance(x, Tensor):
                    out.append(tens(x))
                else:
                    out.append(_Dyn(dyn_i[0]))
                    dyn_i[0] += 1
            return out
        return v

    targs = [val(a, sch.kinds[i], sch.names[i]) for i, a in enumerate(args)]
    tkw = {k: val(v, sch.kind_of[k], k) for k, v in kwargs.items()}
    return targs, tkw, spec_of


def _fill(targs, tkw, slots, dyn, offs=()):
    def f(v):
        if isinstance(v, _Slot):
            r = storage.read_view(slots[v.slot], _resolve(v.spec, offs))
            return storage.apply_flags(r, v.flags) if v.flags else r
        if isinstance(v, _Dyn):
            return dyn[v.i]
        if isinstance(v, list):
            return [f(x) for x in v]
        return v

    return [f(a) for a in targs], {k: f(v) for k, v in tkw.items()}


# ---------------------------------------------------------------- meta
def _meta_tensor(t):
    if t.device.type == "cpu" and t.dim() == 0 and not t.is_neuron:
        return torch.empty((), dtype=t.dtype, device="meta")
    return torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device="meta")


def _to_meta(args, kwargs):
    def f(v):
        if isinstance(v, Tensor):
            return _meta_tensor(v)
        if isinstance(v, (list, tuple)) and any(isinstance(x, Tensor) for x in v):
            return type(v)(f(x) if x is not None else None for x in v)
        if isinstance(v, torch.device) and v.type == "neuron":
            return torch.device("meta")
        return v

    return [f(a) for a in args], {k: f(v) for k, v in kwargs.items()}


class _NoMeta(Exception):
    pass


def _run_meta(op, margs, mkwargs):
    try:
        return op(*margs, **mkwargs)
    except NotImplementedError as e:
        msg = str(e)
        if "not implemented for '" in msg:  # a dtype the kernel refuses: PyTorch's error
            raise (_cpu_error(op, margs, mkwargs) or e) from None
        raise _NoMeta(msg) from None
    except (RuntimeError, ValueError, IndexError, TypeError) as e:
        msg = str(e)
        if "Meta" in msg and ("Could not run" in msg or "not implemented" in msg.lower()):
            raise _NoMeta(msg) from None
        cpu_err = _cpu_error(op, margs, mkwargs)
        raise (cpu_err or e) from None


_CPU_ERROR_MAX_NUMEL = 1 << 16


def _cpu_error(op, margs, mkwargs):
    """The error PyTorch's CPU kernel raises for these shapes (its wording is CUDA's too).

    Meta kernels are often Python references whose messages differ from the
    native kernels'.  Re-run the op on small CPU stand-ins of the same shapes
    to get the native message; None if that does not raise or is too big."""

    def cpu(v):
        if isinstance(v, Tensor):
            if v.numel() > _CPU_ERROR_MAX_NUMEL:
                raise OverflowError
            return torch.zeros(tuple(v.shape), dtype=v.dtype)
        if isinstance(v, (list, tuple)):
            return type(v)(cpu(x) for x in v)
        if isinstance(v, torch.device) and v.type == "meta":
            return torch.device("cpu")
        return v

    try:
        cargs = [cpu(a) for a in margs]
        ckw = {k: cpu(v) for k, v in mkwargs.items()}
    except OverflowError:
        return None
    try:
        op(*cargs, **ckw)
    except (RuntimeError, ValueError, IndexError, TypeError) as e:
        return type(e)(str(e))
    except Exception:  # noqa: BLE001
        return None
    return None


def _drop_out_args(func_op, margs, mkwargs):
    names = {a.name for a in func_op._schema.arguments}
    return margs, {k: v for k, v in mkwargs.items() if k in names}


def _translate_runtime_error(e, index):
    msg = str(e)
    if "RESOURCE_EXHAUSTED" in msg or "Out of memory" in msg or "out of memory" in msg:
        storage.stats(index).oom_count += 1
        return torch.OutOfMemoryError(f"NEURON out of memory on device {index}: {msg.splitlines()[0]}")
    return e


# ---------------------------------------------------------------- registration
_lib = None
_fallback_lib = None
_registered: dict = {}


def library():
    global _lib
    if _lib is None:
        _lib = torch.library.Library("aten", "IMPL")
    return _lib


def register_kernel(op, fn):
    """Register a Python kernel for an aten overload on PrivateUse1 (once)."""
    if op in _registered:
        return
    name = op.name().split("::", 1)[1]
    library().impl(name, fn, "PrivateUse1", allow_override=True)
    _registered[op] = fn


def _check_cast(result_dtype, out_dtype) -> None:
    """TensorIterator's rule for in-place and out= results."""
    if not torch.can_cast(result_dtype, out_dtype):
        raise RuntimeError(f"result type {scalar_type_name(result_dtype)} can't be cast to the "
                           f"desired output type {scalar_type_name(out_dtype)}")


def _check_inplace_cast(result, self_) -> None:
    """An in-place op computed through its functional form must be able to cast the
    result back into self (some releases' meta kernels for the in-place overload do not
    check: torch 2.11's div_ accepts an int64 self)."""
    if isinstance(result, (tuple, list)):
        result = result[0] if result else None
    if isinstance(result, Tensor) and isinstance(self_, Tensor):
        _check_cast(result.dtype, self_.dtype)


def register_lowerings():
    """Give every lowered overload (and its in-place / out= variants) a kernel."""
    for op, low in list(LOWERINGS.items()):
        if op in _registered:
            continue
        sch = schema(op)
        if sch.out_args and not sch.inplace:
            register_kernel(op, _out_kernel_for_lowered(op, low))
            continue
        mode = "functional"
        if sch.mutated:
            mode = "inplace" if (sch.inplace and sch.nreturns <= len(sch.inplace)
                                 and all(sch.returns_alias)) else "mutating"
        register_kernel(op, Entry(op, low, mode))
    # in-place and out= variants of lowered functional ops
    for op, low in list(LOWERINGS.items()):
        if schema(op).mutated:
            continue
        packet_name = op._schema.name.split("::")[1]
        ip = getattr(aten, packet_name + "_", None)
        if ip is not None:
            for ipn in ip.overloads():
                ipo = getattr(ip, ipn)
                if ipo not in _registered and ipo not in LOWERINGS and functional_of(ipo) is op:
                    register_kernel(ipo, Entry(ipo, low, "inplace"))
        packet = getattr(aten, packet_name)
        for ov in packet.overloads():
            cand = getattr(packet, ov)
            if cand in _registered or cand in LOWERINGS:
                continue
            if schema(cand).out_args and functional_of(cand) is op:
                register_kernel(cand, _out_kernel(cand, op))
    _register_out_via()


# out= overloads whose functional op is CompositeImplicitAutograd: computed by
# the named lowered op instead (e.g. conj_physical.out through _conj_physical)
OUT_VIA = {"conj_physical.out": "_conj_physical.default"}


def _register_out_via():
    for out_name, func_name in OUT_VIA.items():
        packet, ov = out_name.split(".")
        fpacket, fov = func_name.split(".")
        out_op = getattr(getattr(aten, packet), ov)
        func_op = getattr(getattr(aten, fpacket), fov)
        if out_op not in _registered and func_op in LOWERINGS:
            register_kernel(out_op, _out_kernel(out_op, func_op))


def _out_kernel_for_lowered(op, low):
    f = functional_of(op)
    if f is not None and f in LOWERINGS:
        return _out_kernel(op, f)
    return Entry(op, low, "mutating")


def resize_output(out: Tensor, shape) -> None:
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


def _out_kernel(out_op, func_op):
    sch = schema(out_op)
    fnames = {a.name for a in func_op._schema.arguments}
    out_names = [sch.names[i] for i in sch.out_args]

    def kernel(*args, **kwargs):
        outs = [kwargs[n] if n in kwargs else args[sch.names.index(n)] for n in out_names]
        fkw = {k: v for k, v in kwargs.items() if k in fnames}
        fargs = list(args[: len(args)])
        res = func_op(*fargs, **fkw)
        results = res if isinstance(res, (tuple, list)) else (res,)
        for o, r in zip(outs, results):
            if o.device.type != "neuron":
                raise device_mismatch("neuron:0", o.device)
            _check_cast(r.dtype, o.dtype)
            resize_output(o, r.shape)
            o.copy_(r)
        if sch.nreturns == 1:
            return outs[0]
        return tuple(outs)

    return kernel


# ---------------------------------------------------------------- fallback
_fallback_counts = collections.Counter()
_decomp_counts = collections.Counter()
_warned = set()


_POLICIES = ("warn", "silent", "error")
_policy = config.get("TORCHNEURON_FALLBACK")


def fallback_policy() -> str:
    return _policy


def set_fallback_policy(policy: str) -> str:
    """Set what happens when an op has no native lowering; returns the previous policy."""
    global _policy
    policy = policy.strip().lower()
    if policy not in _POLICIES:
        raise ValueError(f"fallback policy must be one of {_POLICIES}, got {policy!r}")
    prev, _policy = _policy, policy
    return prev


class FallbackError(NotImplementedError):
    pass


def fallback_stats() -> dict:
    """{op name: number of calls} for ops that ran through the CPU fallback."""
    return dict(_fallback_counts)


def decomposition_stats() -> dict:
    """{op name: number of calls} for ops run natively through a PyTorch decomposition."""
    return dict(_decomp_counts)


def reset_fallback_stats() -> None:
    _fallback_counts.clear()
    _decomp_counts.clear()


def _boxed_fallback(op, *args, **kwargs):
    entry = _decomp_entries.get(op)
    if entry is None and op not in _no_decomp:
        entry = _make_decomp_entry(op)
    if entry is not None:
        try:
            _decomp_counts[op.name()] += 1
            return entry(*args, **kwargs)
        except _NoMeta:
            _no_decomp.add(op)
        except _Unlowerable:
            _no_decomp.add(op)
    return cpu_fallback(op, *args, **kwargs)


_decomp_entries: dict = {}
_no_decomp: set = set()


class _Unlowerable(Exception):
    pass


def _make_decomp_entry(op):
    from . import dynamo_skip
    from .compile import fx_jax

    dynamo_skip.skip_loaded_modules()
    low = fx_jax.decomposition_lowering(op)
    if low is None:
        _no_decomp.add(op)
        return None
    sch = schema(op)
    mode = "functional"
    if sch.mutated:
        _no_decomp.add(op)
        return None
    e = Entry(op, low, mode)
    _decomp_entries[op] = e
    return e


def cpu_fallback(op, *args, **kwargs):
    name = op.name()
    policy = fallback_policy()
    if policy == "error":
        raise FallbackError(
            f"torchneuron: {name} has no native lowering and TORCHNEURON_FALLBACK=error "
            "forbids running it on the CPU"
        )
    _fallback_counts[name] += 1
    if policy == "warn" and name not in _warned:
        _warned.add(name)
        warnings.warn(
            f"torchneuron: {name} has no native lowering; it runs on the CPU (copies to and "
            "from the device). Set TORCHNEURON_FALLBACK=silent to hide this warning.",
            stacklevel=3,
        )
    return run_on_cpu(op, args, kwargs)


def run_on_cpu(op, args, kwargs):
    """Run `op` with PyTorch's CPU kernel, with exact in-place/out=/view semantics."""
    sch = schema(op)
    index = None
    host = {}  # id(cell) -> (cpu storage, neuron storage, cell)

    def to_cpu(t):
        nonlocal index
        if not isinstance(t, Tensor) or t.device.type != "neuron":
            return t
        if index is None:
            index = t.device.index
        nst = t.untyped_storage()
        cell = storage.cell_of(t)
        ent = host.get(id(cell))
        if ent is None:
            raw = storage.to_host(cell.arr, runtime.tdtype(cell.arr.dtype))
            cst = raw.untyped_storage()
            ent = host[id(cell)] = (cst, nst, cell, raw)
        c = torch.empty(0, dtype=t.dtype)
        c.set_(ent[0], t.storage_offset(), tuple(t.shape), t.stride())
        c.requires_grad_(False)
        if t.is_conj():  # the stored values, seen through the same lazy bits
            torch._C._set_conj(c, True)
        if t.is_neg():
            torch._C._set_neg(c, True)
        return c

    def conv(v):
        if isinstance(v, Tensor):
            return to_cpu(v)
        if isinstance(v, (list, tuple)):
            return type(v)(conv(x) for x in v)
        if isinstance(v, torch.device) and v.type == "neuron":
            nonlocal index
            if index is None:
                index = v.index if v.index is not None else _current_device()
            return torch.device("cpu")
        return v

    cargs = [conv(a) for a in args]
    ckw = {k: conv(v) for k, v in kwargs.items()}
    if index is None:
        index = _current_device()
    # keep the mutated args' CPU tensors to compare after the call
    mutated = []
    for i in sch.mutated:
        nv = sch.arg(args, kwargs, i)
        cv = sch.arg(cargs, ckw, i)
        if isinstance(nv, (list, tuple)):
            mutated.extend(zip(nv, cv))
        elif nv is not None:
            mutated.append((nv, cv))
    with torch._C._DisableTorchDispatch():
        result = op(*cargs, **ckw)

    # write mutated storages back
    written = set()
    for nv, cv in mutated:
        if not isinstance(nv, Tensor) or nv.device.type != "neuron":
            continue
        cell = storage.cell_of(nv)
        ent = host[id(cell)]
        if cv.untyped_storage().data_ptr() == ent[0].data_ptr() and cv.untyped_storage().nbytes() == ent[0].nbytes():
            if id(cell) not in written:
                written.add(id(cell))
                cell.arr = storage.to_device_array(ent[3], index)
            if (tuple(cv.shape), cv.stride(), cv.storage_offset()) != (tuple(nv.shape), nv.stride(), nv.storage_offset()):
                storage.set_metadata(nv, nv.untyped_storage(), cv.storage_offset(), tuple(cv.shape), cv.stride())
        else:  # the CPU kernel reallocated (resize_ of an out= tensor)
            new = storage.host_storage_to_device(cv, index)
            storage.set_metadata(nv, new.untyped_storage(), cv.storage_offset(), tuple(cv.shape), cv.stride())

    by_ptr = {ent[0].data_ptr(): ent for ent in host.values()}
    mutated_by_cpu = {id(cv): nv for nv, cv in mutated}

    def back(r):
        if isinstance(r, Tensor):
            if id(r) in mutated_by_cpu:
                return mutated_by_cpu[id(r)]
            ent = by_ptr.get(r.untyped_storage().data_ptr()) if r.untyped_storage().nbytes() else None
            if ent is not None and sch.returns_alias and any(sch.returns_alias):
                # a view of an input: same metadata over the neuron storage
                t = storage.new_shell(index, r.dtype)
                return storage.set_metadata(t, ent[1], r.storage_offset(), tuple(r.shape), r.stride())
            return storage.to_neuron(r, index)
        if isinstance(r, (list, tuple)):
            return type(r)(back(x) for x in r)
        return r

    return back(result)


def install_fallback():
    global _fallback_lib
    if _fallback_lib is None:
        _fallback_lib = torch.library.Library("_", "IMPL")
        _fallback_lib.fallback(_boxed_fallback, "PrivateUse1")

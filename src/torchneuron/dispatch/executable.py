"""The argument walk, argument templates and result layout: what an executable is
built from, for eager entries and compiled graphs alike.

A call walks its arguments once (:class:`Walk`): each distinct storage cell
touched becomes an executable input (its flat jax array), each dynamic scalar
and nonzero storage offset a runtime input, and everything else (shapes,
strides, dtypes, static arguments, aliasing between arguments) a token of the
cache key.  On a cache miss the same traversal, run by :class:`Template`,
replaces tensors and dynamic values by placeholders (``plan.Slot/Dyn/Off``) in
the same order, so that :func:`fill` can rebuild the arguments from the traced
inputs.  :func:`layout` lays a result out flat in the storage order of its
PyTorch strides.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import torch

from .. import runtime, storage
from .meta import device_mismatch
from .plan import Dyn, Off, Slot, resolve
from .schema import OTHER, S, SLIST, T, TLIST, TOPT  # noqa: F401

Tensor = torch.Tensor


def current_device() -> int:
    from .. import device

    return device.current_device()


_default_dtype = torch.get_default_dtype
_deterministic = torch._C._get_deterministic_algorithms
_warn_only = torch._C._get_deterministic_algorithms_warn_only
_fill_uninit = torch._C._get_deterministic_fill_uninitialized_memory


def global_state():
    """The global state an executable's result depends on, a part of every cache key:
    the default dtype (an int/int true division or a factory without dtype= computes in
    it: the meta kernel reads it) and the deterministic-algorithms mode with its
    warn-only and fill-uninitialized-memory flags (torch.empty fills NaN / max int, some
    kernels refuse).  Autocast is not part of it: its kernels cast above the backend, so
    an executable sees the cast dtypes in its arguments.  Neither is grad mode: kernels
    run below autograd and no lowering or meta kernel reads it."""
    if _deterministic():
        return (_default_dtype(), True, _warn_only(), _fill_uninit())
    return _default_dtype()


class Walk:
    """One pass over an op's arguments: key tokens, executable inputs, cells."""

    __slots__ = ("cells", "slots", "arrays", "dyn", "offs", "index", "static")
    raw = False  # FusedWalk: executable inputs may be storage.Pending values

    def __init__(self, static=frozenset()):
        self.cells = []
        self.slots = {}
        self.arrays = []
        self.dyn = []
        self.offs = []  # nonzero storage offsets: executable inputs, not key parts
        self.index = None
        self.static = static

    # ------------------------------------------------------------ tensors
    def cell_token(self, t, cell):
        """The key token of a tensor over `cell`, registering the cell as an input slot
        (shared with compiled graphs' walks)."""
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
            # fused eager records a pending cell's value without running its program
            self.arrays.append(storage.raw_arr(cell) if self.raw else cell.arr)
        off = t.storage_offset()
        if off:
            self.offs.append(off)
            off = -1
        return (slot, t.dtype, t.shape, t.stride(), off, cell.dt, cell.numel,
                t.is_conj(), t.is_neg())

    @staticmethod
    def cell_or_none(t):
        st = t.untyped_storage()
        cell = getattr(st, "_tn_cell", None)
        if cell is None and st.device.type == "neuron":
            cell = storage.cell_of(t)  # raises: a neuron tensor without a device buffer
        return cell

    def tensor(self, t):
        cell = self.cell_or_none(t)
        if cell is not None:
            return self.cell_token(t, cell)
        if t.is_cpu and t.dim() == 0:  # a CPU scalar tensor: its value goes up
            self.dyn.append(t)
            return ("cs", t.dtype)
        raise device_mismatch(f"neuron:{self.index or 0}", t.device)

    # ------------------------------------------------------------ other values
    def scalar(self, v):
        self.dyn.append(v)
        return ("s", type(v))

    def static_value(self, v):
        # 5 == 5.0 == True and -0.0 == 0.0 as keys: keep the type and the zero's sign apart
        return (type(v), storage.number_key(v))

    def other(self, v):
        if isinstance(v, list):
            return tuple(v)
        if isinstance(v, torch.device):
            if v.type == "neuron" and self.index is None:
                self.index = v.index if v.index is not None else current_device()
            return ("dev", v.type)
        return v

    # ------------------------------------------------------------ the traversal
    def value(self, v, kind, name):
        """One argument of schema kind `kind` (the only traversal; Template reuses it)."""
        if kind == T or kind == TOPT:
            if v is None:
                return None
            if not isinstance(v, Tensor):  # a wrapped number arrives as a Python scalar
                return self.scalar(v)
            return self.tensor(v)
        if kind == S:
            if isinstance(v, Tensor):
                return self.tensor(v)
            if v is None:
                return v
            if name in self.static:
                return self.static_value(v)
            return self.scalar(v)
        if kind == TLIST:
            return self.seq(None if x is None else self.tensor(x) for x in v)
        if kind == SLIST:
            if name in self.static:
                return self.seq(self.static_value(x) for x in v)
            return self.seq(self.tensor(x) if isinstance(x, Tensor) else self.scalar(x)
                            for x in v)
        return self.other(v)

    seq = tuple


class FusedWalk(Walk):
    """The walk of an op recorded by fused eager (storage/lazy.py)."""

    __slots__ = ()
    raw = True


class Template(Walk):
    """The same traversal as :class:`Walk`, producing placeholders: an executable's
    argument template.  `walk` is the call's walk (its cell slots)."""

    __slots__ = ("walk", "spec_of", "ndyn", "noff")

    def __init__(self, walk):
        super().__init__(walk.static)
        self.walk = walk
        self.spec_of = {}  # id(tensor) -> its view spec (write targets look it up)
        self.ndyn = 0
        self.noff = 0

    def tensor(self, t):
        if t.device.type == "neuron":
            dtype, shape, strides, off = storage.view_spec(t)
            if off:
                off = Off(self.noff)
                self.noff += 1
            spec = (dtype, shape, strides, off)
            self.spec_of.setdefault(id(t), spec)
            return Slot(self.walk.slots[id(storage.cell_of(t))], spec, storage.view_flags(t))
        return self.scalar(t)

    def scalar(self, v):
        d = Dyn(self.ndyn)
        self.ndyn += 1
        return d

    def static_value(self, v):
        return v

    def other(self, v):
        return v

    seq = list


def template(args, kwargs, sch, walk):
    """(args, kwargs, {id(tensor): spec}) with placeholders, in the walk's order."""
    tm = Template(walk)
    targs = [tm.value(a, sch.kinds[i], sch.names[i]) for i, a in enumerate(args)]
    tkw = {k: tm.value(v, sch.kind_of[k], k) for k, v in kwargs.items()}
    return targs, tkw, tm.spec_of


def fill(targs, tkw, slots, dyn, offs=()):
    """Inside a trace: the arguments with placeholders replaced by traced values."""
    def f(v):
        if isinstance(v, Slot):
            r = storage.read_view(slots[v.slot], resolve(v.spec, offs))
            return storage.apply_flags(r, v.flags) if v.flags else r
        if isinstance(v, Dyn):
            return dyn[v.i] if v.item is None else dyn[v.i][v.item]
        if isinstance(v, list):
            return [f(x) for x in v]
        return v

    return [f(a) for a in targs], {k: f(v) for k, v in tkw.items()}


def as_array(v):
    if isinstance(v, (int, float, bool, complex)):
        return jnp.asarray(v)
    return v


def layout(v, spec):
    """Inside a trace: a result cast to its dtype and laid out flat in its storage order."""
    dtype, shape, strides = spec[0], spec[1], spec[2]
    v = as_array(v)
    jd = runtime.jdtype(dtype)
    if v.dtype != jd:
        v = v.astype(jd)
    if tuple(v.shape) != shape:
        v = jnp.broadcast_to(v, shape) if v.size != math.prod(shape) else v.reshape(shape)
    order = storage.perm_plan(shape, strides)
    if order is not None and order != sorted(order):
        v = jnp.transpose(v, order)
    return v.reshape(-1)


def dense_strides(shape, strides):
    """PyTorch's strides for a new result when they are a permutation of a dense
    layout, else contiguous ones (results are always dense)."""
    if storage.perm_plan(shape, strides) is None or any(s < 0 for s in strides):
        return storage.contiguous_strides(shape)
    return strides

"""Named types for what an executable is built from and how its results come back:
one vocabulary for eager entries and compiled graphs.

Placeholders stand for runtime inputs inside an argument template (built once per
executable, filled inside the trace); an ``OutSpec`` is the layout of one new
result; a return plan says how the caller's return value is assembled from the
new results and the arguments (an eager op's schema arguments, a compiled graph's
flat inputs): ``New``, ``Arg``, ``ArgView``, ``NewView``, ``Const``, ``Nothing``,
nested in ``Seq``."""
from __future__ import annotations

from typing import NamedTuple


# ---------------------------------------------------------------- template placeholders
class Slot:
    """A tensor argument: view `spec` over the cell in input slot `slot`."""

    __slots__ = ("slot", "spec", "flags")

    def __init__(self, slot, spec, flags=0):
        self.slot = slot
        self.spec = spec
        self.flags = flags  # storage.view_flags: lazy conj / neg bits


class Dyn:
    """The i-th dynamic host input (a Python number or a CPU 0-d tensor; a compiled
    graph's CPU tensors), or element `item` of it (a compiled graph's 0-d CPU tensors
    go up packed, one array per dtype)."""

    __slots__ = ("i", "item")

    def __init__(self, i, item=None):
        self.i = i
        self.item = item


class Off:
    """The k-th dynamic storage offset input, inside a view spec."""

    __slots__ = ("k",)

    def __init__(self, k):
        self.k = k


def resolve(spec, offs):
    """A view spec with its dynamic offset (if any) replaced by the traced value."""
    off = spec[3]
    if isinstance(off, Off):
        return (spec[0], spec[1], spec[2], offs[off.k])
    return spec


# ---------------------------------------------------------------- results
class OutSpec(tuple):
    """(dtype, shape, strides, offset) of a new result, plus its bytes and whether it
    comes back to the host (a compiled graph's CPU result: a sync)."""

    def __new__(cls, dtype, shape, strides, offset, nbytes, on_cpu=False):
        return tuple.__new__(cls, (dtype, shape, strides, offset))

    def __init__(self, dtype, shape, strides, offset, nbytes, on_cpu=False):
        self.nbytes = nbytes
        self.on_cpu = on_cpu

    dtype = property(lambda self: self[0])
    shape = property(lambda self: self[1])
    strides = property(lambda self: self[2])


class WriteTarget(NamedTuple):
    """A mutated argument: the input slot of its cell, its view spec, its lazy bits, and
    whether the view overlaps itself (an expanded tensor that fill_ / index_put_ write)."""

    slot: int
    spec: tuple
    flags: int
    overlap: bool = False


# ---------------------------------------------------------------- return plans
class New(NamedTuple):
    """The index-th new result tensor."""

    index: int


class Arg(NamedTuple):
    """The argument at position `position` (an in-place op's self, an out=; a compiled
    graph's input returned as it is)."""

    position: int


class ArgView(NamedTuple):
    """A new view of the argument at `position` (a compiled graph returning a view of
    an input); `offset` in bytes, relative to the argument's own storage offset (the
    view's dtype may differ from the argument's)."""

    position: int
    dtype: object
    shape: tuple
    strides: tuple
    offset: int


class NewView(NamedTuple):
    """A view of the index-th new result (`offset` in elements of `dtype`)."""

    index: int
    dtype: object
    shape: tuple
    strides: tuple
    offset: int


class Seq(NamedTuple):
    """A tuple or list of plans."""

    kind: type
    parts: tuple


class Const(NamedTuple):
    """A non-tensor result the meta kernel computed (a SymInt, a bool)."""

    value: object


class Nothing(NamedTuple):
    """No result (ops returning ``()``), or an undefined tensor."""


def assemble(plan, outs, sch, args, kwargs, views=None):
    """The return value from its plan, new results and arguments (`sch` None: `args`
    are a compiled graph's flat inputs).  `views(plan, base)` makes an ArgView /
    NewView's tensor."""
    t = type(plan)
    if t is New:
        return outs[plan.index]
    if t is Arg:
        return args[plan.position] if sch is None else sch.arg(args, kwargs, plan.position)
    if t is Seq:
        return plan.kind(assemble(p, outs, sch, args, kwargs, views) for p in plan.parts)
    if t is Const:
        return plan.value
    if t is ArgView:
        return views(plan, args[plan.position])
    if t is NewView:
        return views(plan, outs[plan.index])
    return None


# ---------------------------------------------------------------- executable stages
# how an executable's fn is reached (the eager store sets it, fused eager reads it)
JIT = "jit"  # fn is the jax.jit function itself (the eager store is off)
FIRST_CALL = "first_call"  # fn is the store's first call: load, or build and store
COMPILED = "compiled"  # fn is a compiled XLA executable

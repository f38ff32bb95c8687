"""Named types for what an executable is built from and how its results come back.

Placeholders stand for runtime inputs inside an argument template (built once per
executable, filled inside the trace); an ``OutSpec`` is the layout of one new
result; a return plan says how the kernel's return value is assembled from the
new results and the arguments."""
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
    """The i-th dynamic scalar input (a Python number or a CPU 0-d tensor)."""

    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i


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
    """(dtype, shape, strides, offset) of a new result, plus its bytes."""

    def __new__(cls, dtype, shape, strides, offset, nbytes):
        return tuple.__new__(cls, (dtype, shape, strides, offset))

    def __init__(self, dtype, shape, strides, offset, nbytes):
        self.nbytes = nbytes


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
    """The argument at schema position `position` (an in-place op's self, an out=)."""

    position: int


class Seq(NamedTuple):
    """A tuple or list of plans."""

    kind: type
    parts: tuple


class Const(NamedTuple):
    """A non-tensor result the meta kernel computed (a SymInt, a bool)."""

    value: object


class Nothing(NamedTuple):
    """No result (ops returning ``()``), or an undefined tensor."""


def assemble(plan, outs, sch, args, kwargs):
    """The kernel's return value from its plan, new results and arguments."""
    t = type(plan)
    if t is New:
        return outs[plan.index]
    if t is Arg:
        return sch.arg(args, kwargs, plan.position)
    if t is Seq:
        return plan.kind(assemble(p, outs, sch, args, kwargs) for p in plan.parts)
    if t is Const:
        return plan.value
    return None

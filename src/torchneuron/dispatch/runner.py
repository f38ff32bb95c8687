"""One executable, one runner: how compiled XLA code runs over device buffers, for
eager ops, fused eager and compiled graphs alike.

An :class:`Executable` is a compiled function with everything needed to call it on
cells and to hand its results back: its device, the layouts of its new results
(``news``: :class:`plan.OutSpec`), the input slots whose cells it rewrites
(``writes``), the CPU inputs it writes back (``host_writes``, compiled graphs), its
return plan (``plan.New/Arg/ArgView/NewView/Seq/Const``), the random offsets it
consumes, the buffers it may donate, and the state the eager executable store and
fused eager keep on it (``stage``, ``jit``, ``avals``).

:func:`run` is the one way to call one.  Its inputs are, in this order, the flat
arrays of the cells the argument walk met (``Walk.arrays``), the host values the
caller uploads (dynamic scalars, CPU tensors), the nonzero storage offsets, and the
``[seed, offset]`` of the device's generator when the executable draws random
numbers.  It checks device memory for the new results, records the call into the
pending program under fused eager (:mod:`.fused`) or calls the executable,
translates XLA's runtime errors into PyTorch's, gives the warnings the trace
recorded, writes rewritten buffers back into their cells and CPU inputs, wraps new
results as tensors, and assembles the return value from the plan.
"""
from __future__ import annotations

import sys
import warnings

import torch

from .. import runtime, storage
from . import fused, tiers
from .meta import translate_runtime_error
from .plan import COMPILED, ArgView, New, NewView, Seq, assemble

_LAST_DISPATCH = runtime.LAST_DISPATCH


class Executable:
    """A compiled function over device buffers and the plan of its results."""

    __slots__ = ("fn", "index", "news", "writes", "host_writes", "returns", "out_bytes",
                 "nrandom", "donate", "undonated", "warn", "overlaps",
                 "jit", "stage", "store_key", "avals", "solo", "name", "nops", "nouts",
                 "lowered", "views", "countdown", "__weakref__")

    def __init__(self, fn, index, news, writes, returns, nrandom=0, stage=COMPILED):
        self.fn = fn  # what a call runs (see `stage`)
        self.index = index  # the device
        self.news = news  # OutSpec of each new result, in result order
        self.writes = writes  # input slots whose cells get the next results
        self.host_writes = ()  # then the CPU arguments written back (compiled graphs)
        self.returns = returns  # the return plan
        self.views = _has_views(returns)  # it makes ArgView / NewView results
        self.out_bytes = sum(sp.nbytes for sp in news if not sp.on_cpu)
        self.nrandom = nrandom  # generator offsets one call consumes
        self.donate = ()  # input slots whose buffers the executable may reuse
        self.undonated = None  # () -> the same without donation (a buffer is shared)
        self.warn = []  # (message, once) the trace gave: repeated at every call
        self.overlaps = ()  # (written, read) argument positions checked per call
        self.jit = fn  # the jax.jit function (fused eager traces it into programs)
        self.stage = stage
        self.store_key = None  # the eager executable store's key
        self.avals = None  # the results' abstract values (fused eager)
        self.solo = False  # never recorded into a fused program (dispatch/fused.py)
        self.name = None  # compiled graphs: for logs and dumps
        self.nops = 0
        self.nouts = len(news)
        self.lowered = None  # compiled graphs: for dumps; tier 1: for the tier-up
        self.countdown = 0  # tier 1: calls left before the tier-up (dispatch/tiers.py)


def run(exe, w, host, args, kwargs=None, sch=None):
    """Call `exe` on the walk `w` of `args` (see the module docstring) and return what
    its plan assembles.  `host`: the uploaded host values (a list, or None); `sch`:
    the op's schema (None for a compiled graph, whose `args` are positional)."""
    index = exe.index
    inputs = w.arrays
    if host:
        inputs = inputs + host
    if w.offs:
        inputs = inputs + [storage.dyn_scalar(o, index) for o in w.offs]
    if exe.nrandom:
        inputs = inputs + [_device().next_rng_input(index, exe.nrandom)]
    if exe.out_bytes:
        storage.check_room(index, exe.out_bytes)
    res = fused.record(exe, inputs, index) if w.raw else None
    if res is None:
        fn = exe.fn
        if exe.donate:
            fn = _donating(exe, w.arrays, inputs is w.arrays)
        try:
            res = fn(*[x.result() if type(x) is storage.Pending else x
                       for x in inputs] if w.raw else inputs)
        except Exception as e:  # noqa: BLE001
            raise translate_runtime_error(e, index) from None
        _LAST_DISPATCH[index] = res
        if exe.countdown:
            tiers.tick(exe)
    for msg, once in exe.warn:  # (filled while the first call traces the lowering)
        if once:
            warn_once(msg, stacklevel=4)
        else:
            warnings.warn(msg, UserWarning, stacklevel=3)
    return finish(exe, res, w.cells, args, kwargs, sch)


def _donating(exe, arrays, same):
    """`exe.fn`, or its twin without donation when a buffer it would donate has another
    owner.

    A cell's buffer is donated only when the cell is its sole owner: another cell may
    hold the same jax array (jit forwards unchanged inputs).  Owners we know of: the
    cell, `arrays`, the input list when it is a new one (`same` False), getrefcount's
    argument."""
    # this call becomes the one synchronize() waits for, and the last results'
    # reference must not stop a donation
    _LAST_DISPATCH.pop(exe.index, None)
    limit = 3 if same else 4
    for s in exe.donate:
        if sys.getrefcount(arrays[s]) > limit:
            return exe.undonated()
    return exe.fn


def finish(exe, res, cells, args, kwargs=None, sch=None):
    """Write `res`'s rewritten buffers back, wrap its new results, assemble the return."""
    news = exe.news
    n = len(news)
    if exe.writes:
        for j, slot in enumerate(exe.writes):
            storage.put(cells[slot], res[n + j])
    if exe.host_writes:
        base = n + len(exe.writes)
        for j, i in enumerate(exe.host_writes):
            t = args[i]
            with torch.no_grad():
                t.copy_(storage.to_host(res[base + j], t.dtype).reshape(t.shape))
    index = exe.index
    outs = [make_out(res[i], news[i], index) for i in range(n)]
    plan = exe.returns
    if type(plan) is New:
        return outs[plan.index]
    return assemble(plan, outs, sch, args, kwargs, _Views(index) if exe.views else None)


def make_out(arr, sp, index):
    """A new result as a tensor: a new cell on the device, or (a CPU result) a host copy."""
    if sp.on_cpu:
        return storage.to_host(arr, sp[0]).reshape(sp[1])
    return storage.make_tensor(arr, sp[0], sp[1], sp[2], sp[3], index, sp.nbytes)


def _has_views(plan) -> bool:
    if isinstance(plan, (ArgView, NewView)):
        return True
    return isinstance(plan, Seq) and any(_has_views(p) for p in plan.parts)


class _Views:
    """Makes the ArgView / NewView results of one call; a plan met twice (a graph
    returning the same view twice) gives the same tensor."""

    __slots__ = ("index", "made")

    def __init__(self, index):
        self.index = index
        self.made = {}

    def __call__(self, plan, base):
        t = self.made.get(id(plan))
        if t is None:
            t = storage.new_shell(self.index, plan.dtype)
            off = plan.offset
            if type(plan) is ArgView:
                off = (base.storage_offset() * base.element_size() + off) // plan.dtype.itemsize
            t = self.made[id(plan)] = storage.set_metadata(t, base.untyped_storage(), off,
                                                           plan.shape, plan.strides)
        return t


_warned_once: set = set()  # warn_once messages already given


def warn_once(msg: str, stacklevel: int = 3) -> None:
    """PyTorch's TORCH_WARN_ONCE: once per process unless torch.set_warn_always(True)."""
    if not torch.is_warn_always_enabled():
        if msg in _warned_once:
            return
        _warned_once.add(msg)
    warnings.warn(msg, UserWarning, stacklevel=stacklevel)


def _device():
    from .. import device  # noqa: PLC0415  (the device module imports dispatch's callers)

    return device

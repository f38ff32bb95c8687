"""Fused eager: device ops recorded into a pending program per device, run when a
value is needed (docs/eager.md, "Fused eager").

In fused mode an eager op does everything it does op by op (argument walk, cache
key, PyTorch's meta kernel and errors, warnings, result tensors) except call its
executable: it appends the executable and its inputs to its device's
:class:`Program` and gets :class:`~.cells.Pending` arrays for its results, which
its result tensors' cells hold.  Reading a pending cell's ``arr`` (a host read, a
copy, a collective, a compiled graph, a CPU fallback: whatever needs the value)
runs the program; so do ``torch.neuron.synchronize()``, the end of an optimizer
step and a size bound (``TORCHNEURON_FUSE_MAX_OPS``).

A program runs as one XLA computation in which every recorded executable is the
taken branch of a ``lax.cond`` on a runtime predicate: XLA compiles each branch
as its own computation and never fuses across branches, so results are
bit-identical to op-by-op execution (fusing two ops lets XLA:CPU contract a
multiply and an add into an FMA, or rewrite a/b/c as a/(b*c)).  Only results
still referenced when the program runs leave it; dead temporaries never reach
memory.  Programs are cached by structure; a structure seen for the first time
runs its executables one by one (each compiled once and shared, as op by op),
and is compiled as one program from its second occurrence on ("adaptive"): a
loop fuses from its second iteration, while one-off sequences (most tests, a
program's first step) cost no extra compile.
"""
from __future__ import annotations

import contextlib
import threading
from sys import getrefcount

import jax
import jax.numpy as jnp

from .. import config, runtime
from .cells import Pending, translate_runtime_error

_MODES = ("op", "fused")
_mode = "op"  # TORCHNEURON_EAGER, applied at the end of this module
fused = False  # read by the dispatcher's hot path
MAX_OPS = config.get("TORCHNEURON_FUSE_MAX_OPS")
_lock = threading.RLock()
_programs: dict = {}  # device index -> Program

# program structure -> runs seen (int) or its compiled XLA computation
_compiled = runtime.JitCache("fused programs", 512)


class Stats:
    recorded = 0  # ops recorded
    flushes = 0  # programs run
    fused_runs = 0  # ... of which as one compiled computation
    compiles = 0  # program computations compiled
    outputs = 0  # values that left a program (the rest died unread)


STATS = Stats()


def reset_stats() -> None:
    STATS.recorded = STATS.flushes = STATS.fused_runs = STATS.compiles = STATS.outputs = 0


class Program:
    """The ops recorded on one device since its last flush."""

    __slots__ = ("index", "ops", "ext", "ext_ids", "outs", "nvals")

    def __init__(self, index: int):
        self.index = index
        self._reset()

    def _reset(self):
        self.ops = []  # (executable, refs, avals)
        self.ext = []  # arrays from outside the program: its inputs
        self.ext_ids = {}  # id(array) -> position in ext
        self.outs = []  # the Pending of every value the program computes
        self.nvals = 0

    def record(self, exe, inputs, avals):
        """Append the executable `exe` called on `inputs` (arrays or Pendings); its results
        as Pendings.  `exe.fn` runs it alone (as op by op), `exe.jit` traces it into a
        program."""
        with _lock:
            refs = []
            for x in inputs:
                if type(x) is Pending:
                    if x.value is not None:
                        x = x.value
                    elif x.prog is self and x.error is None:
                        refs.append(-1 - x.k)
                        continue
                    else:  # another device's program (a bug) or a failed value
                        x = x.result()
                k = self.ext_ids.get(id(x))
                if k is None:
                    k = self.ext_ids[id(x)] = len(self.ext)
                    self.ext.append(x)
                refs.append(k)
            k = self.nvals
            res = []
            for a in avals:
                res.append(Pending(self, k, a.dtype, a.shape))
                k += 1
            self.outs.extend(res)
            self.nvals = k
            self.ops.append((exe, tuple(refs), avals))
            STATS.recorded += 1
            if len(self.ops) >= MAX_OPS:
                self.flush()
            return tuple(res)

    def flush(self) -> None:
        """Run the recorded ops; every live Pending gets its value."""
        with _lock:
            ops = self.ops
            if not ops:
                return
            ext, outs = self.ext, self.outs
            self._reset()
            # a value is an output if something besides this list (a cell) holds it:
            # references are `outs`, `p` and getrefcount's argument when nothing does
            live = [p for p in outs if getrefcount(p) > 3]
            del outs
            STATS.flushes += 1
            STATS.outputs += len(live)
            try:
                values = _run(self.index, ops, ext, tuple(p.k for p in live))
                if values:
                    runtime.LAST_DISPATCH[self.index] = values
            except Exception as e:  # noqa: BLE001
                err = translate_runtime_error(e, self.index)
                for p in live:
                    p.error = err
                raise err from None
            for p, v in zip(live, values):
                p.value = v


def _run(index, ops, ext, keep):
    if len(ops) == 1:
        return _run_each(ops, ext, keep)
    key = (index, tuple((exe, refs) for exe, refs, _ in ops), keep)
    prog = _compiled.get(key)
    if prog is None or type(prog) is int:
        if not prog:  # a structure seen for the first time: op by op
            _compiled.put(key, 1)
            return _run_each(ops, ext, keep)
        prog = _compiled.put(key, _build(index, ops, keep))
        STATS.compiles += 1
    STATS.fused_runs += 1
    return prog(_true(index), *ext)


def _run_each(ops, ext, keep):
    """The recorded executables called one by one, as op-by-op mode calls them."""
    vals = []
    for exe, refs, _ in ops:
        vals.extend(exe.fn(*[ext[r] if r >= 0 else vals[-1 - r] for r in refs]))
    return [vals[k] for k in keep]


def _build(index, ops, keep):
    def zeros(avals):
        return lambda *a: tuple(jnp.zeros(v.shape, v.dtype) for v in avals)

    def program(pred, *ext):
        vals = []
        for exe, refs, avals in ops:
            ins = [ext[r] if r >= 0 else vals[-1 - r] for r in refs]
            # each executable is its own branch: XLA never fuses across a conditional's
            # branches, so every op rounds exactly as it does alone
            vals.extend(jax.lax.cond(pred, exe.jit, zeros(avals), *ins))
        return tuple(vals[k] for k in keep)

    device = runtime.jax_device(index)
    return runtime.jit(program, out_shardings=jax.sharding.SingleDeviceSharding(device))


_trues: dict = {}


def _true(index):
    t = _trues.get(index)
    if t is None:
        t = _trues[index] = jax.device_put(jnp.asarray(True), runtime.jax_device(index))
    return t


# ---------------------------------------------------------------- the switch
def program(index: int) -> Program:
    p = _programs.get(index)
    if p is None:
        with _lock:
            p = _programs.setdefault(index, Program(index))
    return p


def flush(index: int | None = None) -> None:
    """Run the pending program of device `index` (every device's when None)."""
    for i, p in list(_programs.items()):
        if index is None or i == index:
            p.flush()


def pending_ops(index: int | None = None) -> int:
    return sum(len(p.ops) for i, p in list(_programs.items()) if index is None or i == index)


_hooked = False


def _after_step(optimizer, args, kwargs):
    if fused or pending_ops():
        flush()


def set_mode(mode: str) -> str:
    """'op' or 'fused'; returns the previous mode.  Leaving fused mode runs what is
    pending."""
    global _mode, fused, _hooked
    if mode not in _MODES:
        raise ValueError(f"torchneuron: eager mode must be 'op' or 'fused', got {mode!r}")
    prev = _mode
    _mode = mode
    fused = mode == "fused"
    if fused and not _hooked:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(_after_step)
        _hooked = True
    if not fused:
        flush()
    return prev


def mode() -> str:
    return _mode


@contextlib.contextmanager
def eager_mode(mode_: str):
    """``with torchneuron.eager_mode("fused"): ...``"""
    prev = set_mode(mode_)
    try:
        yield
    finally:
        set_mode(prev)


set_mode(config.get("TORCHNEURON_EAGER"))

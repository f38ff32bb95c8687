"""Fused eager's side of dispatch: whether an eager call is recorded into its
device's pending program or runs op by op.

The contract of fused eager, across the modules that share it:

* ``storage.lazy`` owns the pending :class:`~torchneuron.storage.lazy.Program` of each
  device: ``record(exe, inputs, avals)`` appends a call and returns
  :class:`~torchneuron.storage.Pending` values, ``flush()`` runs what is recorded
  (one XLA computation, each executable a ``lax.cond`` branch, results bit-identical
  to op by op).  It calls ``exe.fn`` to run one op alone and traces ``exe.jit`` into
  programs: both must take the inputs in the runner's order and return the results
  in the runner's order (``dispatch/runner.py``).
* ``storage.cells``: a cell whose array is Pending is a ``PendingCell``; reading its
  ``arr`` (a host read, a copy, a collective, a compiled graph) flushes.
  ``storage.put`` is the one way a result enters a cell.
* ``dispatch.executable.FusedWalk`` (``raw``) collects a cell's value without
  flushing (``storage.raw_arr``); the runner then calls :func:`record`, and a call
  that is not recorded resolves its Pending inputs itself.
* ``dispatch.bounds`` does not remember a bounds check of a Pending value (its
  array does not exist yet).  ``torch.neuron.synchronize()``, the end of an optimizer step and
  ``TORCHNEURON_FUSE_MAX_OPS`` flush.
* An executable's ``stage`` (``plan.JIT`` / ``FIRST_CALL`` / ``COMPILED``) says how
  its ``fn`` is reached; the eager store (``dispatch/store.py``) moves it from
  FIRST_CALL to COMPILED and back when executables are released.

Compiled graphs never record: their walk is not raw, so their inputs are computed.
"""
from __future__ import annotations

import jax

from ..storage import lazy as _lazy
from .plan import FIRST_CALL, JIT

# primitives XLA:CPU runs far slower as a conditional's branch than at top level (measured:
# convolution 8.5x; dot, reduce_window, fft, sort, cumsum, gathers, reductions: within 20%)
SOLO_PRIMITIVES = ("conv_general_dilated",)
SOLO_HLO = ("convolution(",)  # the same primitives in a compiled executable's HLO text


def record(exe, inputs, index):
    """Append the call to the device's pending program; its results are Pending values.

    An executable never called yet (stage FIRST_CALL) runs op by op instead (the
    pending program first): its first call loads it from the eager executable store,
    or traces, compiles and stores it, so tracing errors and warnings come at the op.
    Its next recording reads its results' shapes from the compiled executable (or,
    with the store off, from an abstract trace).  An executable that XLA:CPU runs
    slowly inside a program (a convolution: 8x slower as a conditional's branch) is
    not recorded.  None: the pending program has run and the caller calls the
    executable itself."""
    avals = exe.avals
    if avals is None:
        stage = exe.stage
        if stage == FIRST_CALL:
            _lazy.program(index).flush()
            return None
        if stage == JIT:
            jaxpr = jax.make_jaxpr(exe.jit)(
                *[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs])
            avals = tuple(jaxpr.out_avals)
            text = str(jaxpr)
            exe.solo = any(p in text for p in SOLO_PRIMITIVES)
        else:  # a compiled executable, loaded from the store or built for it
            fn = exe.fn
            avals = tuple(jax.tree_util.tree_leaves(fn.out_info))
            text = fn.as_text()
            exe.solo = any(p in text for p in SOLO_HLO)
        exe.avals = avals
    if exe.solo:
        _lazy.program(index).flush()
        return None
    return _lazy.program(index).record(exe, inputs, avals)

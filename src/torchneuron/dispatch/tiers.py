"""Tiered compilation of eager executables: a new shape compiles fast first, and an
executable that turns out hot is compiled again, optimised, in the background.

Every new (op, shapes, dtypes, ...) of an eager program is an XLA executable, and on
XLA:CPU its compile is most of what a new shape costs (bench/dynamic_shapes.py: 78% of a
first ``generate()``).  XLA:CPU's per-fusion IR emitters (``xla_cpu_use_fusion_emitters
=false``) compile an executable in about half the time of its default MLIR fusion
emitters, and their code runs up to 1.3x slower on large elementwise/reduction fusions.
So on XLA:CPU:

* tier 1: an executable's first compile uses the fast emitters (:data:`FAST`);
* tier 2: after ``TORCHNEURON_TIER_UP_CALLS`` calls (default 16) its MLIR module, kept
  from tier 1, is compiled with the default options on a background thread (XLA releases
  the GIL while it compiles), and the next call after that runs the optimised executable;
  the eager executable store (dispatch/store.py) then holds the optimised one.

Only executables made of elementwise arithmetic and data movement (:data:`TIERABLE`) are
tiered: XLA:CPU's two emitters vectorise reductions differently, so an executable with a
reduction (or a dot, a scatter, ...) always compiles with the default options.

Both tiers of a tiered executable give bit-identical results
(``TORCHNEURON_TIER_CHECK=1`` compiles both tiers of every tiered executable at its first
call, runs both and raises if any result differs in a bit; docs/eager.md says which test
files ran clean under it).  Executables loaded from the store, and every executable on other
platforms, are not tiered.  Compiled graphs and fused programs (one compile per program,
run many times) use the default options.
"""
from __future__ import annotations

import concurrent.futures
import re
import threading

import jax
import numpy as np

from .. import config, runtime

FAST = {"xla_cpu_use_fusion_emitters": False}
TIERED = config.get("TORCHNEURON_TIERED")
TIER_UP_CALLS = config.get("TORCHNEURON_TIER_UP_CALLS")
CHECK = config.get("TORCHNEURON_TIER_CHECK")


class _Stats:
    fast = 0        # tier-1 compiles
    submitted = 0   # executables sent to tier 2
    tier_ups = 0    # executables now running their tier-2 compile
    stale = 0       # tier-2 compiles that finished after their executable was released
    failed = 0      # tier-2 compiles that raised (the executable stays at tier 1)
    checked = 0     # TORCHNEURON_TIER_CHECK: executables whose two tiers were compared


STATS = _Stats()
_pool = None
_pool_lock = threading.Lock()


def tiered(device) -> bool:
    return TIERED and device.platform == "cpu"


# The StableHLO/CHLO operations of the executables that are tiered: elementwise
# arithmetic and data movement whose code both emitters generate bit for bit alike.  Not
# a reduction (XLA:CPU's fusion emitters vectorise a row reduction in another order: a
# layer-norm backward differs in the last bit), nor the functions whose approximations
# differ between the emitters: measured over 200,000 values, specials included, in
# float64/32/16 and bfloat16, tan, cbrt, atan, atanh, asinh, acosh, erf_inv, rsqrt, and
# log and log1p in float16 differ; erf agreed there but not inside GELU's backward
# (TORCHNEURON_TIER_CHECK=1 over the op test files), so of the transcendental functions
# only those that agreed everywhere are listed.  Nor complex numbers, nor anything else
# not listed.
TIERABLE = frozenset("""
    abs add and bitcast_convert broadcast_in_dim ceil clamp compare concatenate constant
    convert cosine count_leading_zeros divide dynamic_slice dynamic_update_slice
    exponential exponential_minus_one floor iota is_finite logistic maximum minimum
    multiply negate not or pad popcnt remainder reshape reverse round_nearest_afz
    round_nearest_even select shift_left shift_right_arithmetic shift_right_logical sign
    sine slice sqrt subtract tanh transpose xor return
    next_after is_inf is_neg_inf is_pos_inf square
    broadcast_add broadcast_subtract broadcast_multiply broadcast_divide broadcast_maximum
    broadcast_minimum broadcast_compare broadcast_select broadcast_and broadcast_or
    broadcast_xor broadcast_remainder broadcast_next_after
""".split())
# an operation: `%r = stablehlo.add ...`, `stablehlo.return ...`, `"stablehlo.scatter"(...)`
_OP = re.compile(r'(?:=|^)\s*"?(?:stablehlo|chlo|mhlo)\.([a-z_0-9]+)', re.MULTILINE)


def tierable(text: str) -> bool:
    """Whether a module's operations are all in :data:`TIERABLE` (and it has no complex
    numbers)."""
    return "complex<" not in text and all(op in TIERABLE for op in set(_OP.findall(text)))


def first_compile(exe, lowered, device, inputs):
    """Compile `lowered` for `exe`'s first call: tier 1 where tiering applies (`exe`
    then counts down to its tier-up), else with the default options."""
    if not tiered(device) or not tierable(lowered.as_text()):
        return lowered.compile()
    compiled = lowered.compile(compiler_options=FAST)
    STATS.fast += 1
    if CHECK:
        check(lowered, compiled, inputs)
    exe.lowered = lowered
    exe.countdown = TIER_UP_CALLS
    return compiled


def tick(exe) -> None:
    """One call of a tier-1 executable (the runner calls this while `exe.countdown`)."""
    exe.countdown -= 1
    if exe.countdown == 0:
        submit(exe)


def forget(exe) -> None:
    """`exe` no longer runs its tier-1 compile (released): no tier-up."""
    exe.countdown = 0
    exe.lowered = None


def submit(exe) -> None:
    global _pool
    lowered, exe.lowered = exe.lowered, None
    if lowered is None:
        return
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="torchneuron-tier-up")
    STATS.submitted += 1
    _pool.submit(_tier_up, exe, lowered, exe.fn)


def _tier_up(exe, lowered, fast):
    hits = runtime.jax_cache_hits()
    try:
        compiled = lowered.compile()
    except Exception:  # noqa: BLE001  (tier 1 keeps running)
        STATS.failed += 1
        return
    # jax's persistent cache may have served it (or another thread's compile, meanwhile):
    # XLA:CPU serializes such an executable without its kernels, so it is not stored
    served = runtime.jax_cache_hits() != hits
    if exe.fn is not fast:  # released (or replaced) meanwhile
        STATS.stale += 1
        return
    exe.fn = compiled
    STATS.tier_ups += 1
    for fn in _on_tier_up:
        fn(exe, compiled, served)


_on_tier_up = []


def on_tier_up(fn) -> None:
    """Call `fn(exe, compiled, served)` (on the background thread) when `exe` reaches
    tier 2 (`served`: jax's persistent cache may have served the compile): the eager
    executable store writes the optimised executable over the fast one."""
    _on_tier_up.append(fn)


def wait() -> None:
    """Wait for the tier-2 compiles submitted so far (tests, benches)."""
    if _pool is not None:
        _pool.submit(lambda: None).result()


def check(lowered, fast, inputs) -> None:
    """Compile the default tier too, run both on `inputs`, raise if a result differs."""
    full = lowered.compile()
    a = jax.tree_util.tree_leaves(fast(*inputs))
    b = jax.tree_util.tree_leaves(full(*inputs))
    STATS.checked += 1
    for i, (x, y) in enumerate(zip(a, b)):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            raise AssertionError(
                f"torchneuron: the fast and the default XLA:CPU compile of an executable "
                f"differ in result {i} ({x.dtype}{list(x.shape)})\n{lowered.as_text()[:4000]}")


def background_compiles() -> int:
    """XLA compiles the tier-ups made (finished ones: :func:`wait` first), which a count of
    a program's own compiles leaves out."""
    return STATS.tier_ups + STATS.stale


def stats() -> dict:
    return {k: getattr(STATS, k) for k in vars(_Stats) if not k.startswith("_")}

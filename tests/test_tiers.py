"""Tiered compilation (dispatch/tiers.py): an elementwise executable compiles fast first
and, once hot, is compiled again with XLA's default options in the background; results
are bit-identical across the tier-up, executables with reductions are never tiered, and
the eager executable store keeps the optimised compile."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
import torch

from torchneuron import runtime
from torchneuron.dispatch import tiers
from helpers import DEV

pytestmark = pytest.mark.skipif(runtime.jax_device(0).platform != "cpu" or not tiers.TIERED,
                                reason="tiering applies to XLA:CPU")


def _chain(x):
    return (x.exp().tanh() + 1.5).sin() * x.sqrt() + x.sigmoid()


def test_tier_up_keeps_every_result_bit_identical():
    """cap + 50 calls of a chain of new elementwise executables: the first ones run the
    fast compile, the tier-up swaps in the default compile, and every result has the same
    bits (and matches the CPU)."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(37, 29, generator=g) + 0.1
    xd = x.to(DEV)
    fast, ups = tiers.STATS.fast, tiers.STATS.tier_ups
    first = _chain(xd).cpu()
    assert tiers.STATS.fast - fast >= 5  # exp, tanh, add, sin, sqrt, mul, sigmoid: tier 1
    for i in range(tiers.TIER_UP_CALLS + 50):
        if i == tiers.TIER_UP_CALLS + 2:
            tiers.wait()  # the background compiles are in: later calls run tier 2
        assert torch.equal(_chain(xd).cpu(), first), i
    tiers.wait()
    assert tiers.STATS.tier_ups - ups >= 5
    torch.testing.assert_close(first, _chain(x))


def _lowered(fn, *args):
    return jax.jit(fn).lower(*args).as_text()


X = jnp.arange(12.0).reshape(3, 4)
TIERABLE_ROWS = [
    ("add", lambda x: x + 1, True),
    ("transcendentals", lambda x: jnp.tanh(jnp.exp(x)) * jnp.sqrt(x), True),
    ("tan", lambda x: jnp.tan(x), False),  # the emitters' approximations differ
    ("log", lambda x: jnp.log(x), False),
    ("erf", lambda x: jax.lax.erf(x), False),  # differs inside GELU's backward
    ("complex", lambda x: (x + 1j) * 2, False),
    ("concatenate", lambda x: jnp.concatenate([x, x * 2], 1), True),
    ("slice_transpose", lambda x: x[1:, ::2].T, True),
    ("where", lambda x: jnp.where(x > 3, x, -x), True),
    ("sum", lambda x: x.sum(1), False),
    ("max", lambda x: x.max(), False),
    ("matmul", lambda x: x @ x.T, False),
    ("cumsum", lambda x: jnp.cumsum(x, 0), False),
    ("sort", lambda x: jnp.sort(x, 1), False),
    ("scatter_add", lambda x: x.at[jnp.array([0, 0])].add(1.0), False),
    ("gather", lambda x: x[jnp.array([2, 0])], False),
]


@pytest.mark.parametrize("name,fn,expected", TIERABLE_ROWS, ids=[r[0] for r in TIERABLE_ROWS])
def test_only_elementwise_and_data_movement_are_tiered(name, fn, expected):
    assert tiers.tierable(_lowered(fn, X)) is expected


def test_a_reduction_is_compiled_with_the_default_options():
    """A layer-norm backward's row reductions differ in the last bit between XLA:CPU's two
    emitters, so an eager reduction never runs a fast compile."""
    x = torch.randn(9, 31).to(DEV)
    fast = tiers.STATS.fast
    x.sum(1).cpu()
    torch.nn.functional.layer_norm(x, (31,)).cpu()
    assert tiers.STATS.fast == fast


def test_the_check_raises_on_a_differing_compile():
    """TORCHNEURON_TIER_CHECK's comparison fails when the two compiles differ in a bit,
    and passes for the real fast compile."""
    x = jnp.linspace(0.1, 2.0, 33, dtype=jnp.float32)
    lowered = jax.jit(lambda a: jnp.exp(a) * 3.0).lower(x)
    tiers.check(lowered, lowered.compile(compiler_options=tiers.FAST), [x])
    one_bit_off = lambda a: jax.lax.nextafter(jnp.exp(a) * 3.0, jnp.float32(jnp.inf))  # noqa: E731
    with pytest.raises(AssertionError, match="differ in result 0"):
        tiers.check(lowered, jax.jit(one_bit_off), [x])


def test_release_during_tier_one_keeps_computing_right():
    """Releasing every executable while one waits for its tier-up: it compiles again
    (tier 1) and tiers up later; results stay the same bits."""
    x = torch.rand(23, 3) + 0.5
    xd = x.to(DEV)
    first = (xd.exp() * 3).cpu()
    runtime.release_executables(reason="test")
    for _ in range(tiers.TIER_UP_CALLS + 5):
        assert torch.equal((xd.exp() * 3).cpu(), first)
    tiers.wait()
    assert torch.equal((xd.exp() * 3).cpu(), first)
    torch.testing.assert_close(first, x.exp() * 3)  # and what the CPU computes


_CHILD = r"""
import json, torch
from torchneuron.dispatch import store, tiers
x = torch.linspace(0.1, 3.0, 101).to("neuron")
outs = []
for _ in range(tiers.TIER_UP_CALLS + 10):
    outs.append((x.exp() * 2.5).tanh().cpu().tolist())
tiers.wait()
print(json.dumps({"fast": tiers.STATS.fast, "ups": tiers.STATS.tier_ups,
                  "loads": store.STATS.loads, "writes": store.STATS.writes,
                  "same": all(o == outs[0] for o in outs), "out": outs[0]}))
"""


def test_the_store_keeps_the_optimised_compile(tmp_path):
    """With the eager executable store on, a tiered executable is stored at tier 1 and
    again at its tier-up; a second process loads it (no compile, no tiering) and computes
    the same bits."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHNEURON_COMPILE_CACHE")}
    env["TORCHNEURON_COMPILE_CACHE_DIR"] = str(tmp_path)

    def run():
        p = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    a = run()
    assert a["fast"] >= 3 and a["ups"] >= 3 and a["writes"] >= 2 * 3 and a["same"]
    b = run()
    assert b["fast"] == 0 and b["loads"] >= 3 and b["same"] and b["out"] == a["out"]
    x = torch.linspace(0.1, 3.0, 101)
    torch.testing.assert_close(torch.tensor(a["out"]), (x.exp() * 2.5).tanh())


def test_a_tier_up_served_by_jax_cache_is_not_stored(tmp_path):
    """A tier-2 compile that jax's persistent cache serves (here: a process with tiering
    off compiled the same modules with the default options first) is not written to the
    eager store: XLA:CPU serializes such an executable without its kernels, and a later
    process would load an entry that fails ("Function ... not found")."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHNEURON_COMPILE_CACHE")}
    env["TORCHNEURON_COMPILE_CACHE_DIR"] = str(tmp_path)

    def run(tiered):
        p = subprocess.run([sys.executable, "-c", _CHILD],
                           env={**env, "TORCHNEURON_TIERED": tiered},
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    untiered = run("0")  # default compiles, in jax's cache
    a = run("1")  # another code version: the store misses; tier 2 comes from jax's cache
    assert a["fast"] >= 3 and a["ups"] >= 3 and a["out"] == untiered["out"]
    b = run("1")  # loads what `a` stored, and runs it
    assert b["fast"] == 0 and b["loads"] >= 3 and b["same"] and b["out"] == a["out"]

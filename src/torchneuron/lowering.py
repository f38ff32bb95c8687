"""The lowering table: aten overload -> jax function.

One table serves eager dispatch (``dispatch.py``) and ``torch.compile``
(``compile/``).  A lowering is a plain function over jax values that mirrors
the aten schema: tensors arrive as jax arrays, ``Scalar`` arguments as jax
0-d values (weakly typed, so they promote like PyTorch's wrapped numbers),
everything else (ints, int lists, dtypes, bools, strings) as Python values.
It returns jax arrays in the schema's return structure.  The caller casts
every result to the dtype PyTorch's own meta kernel computed, so a lowering
only has to get the values right; it may read the expected outputs with
:func:`out_meta` / :func:`out_dtype` when it needs them to pick a compute type.

Registering a lowering for a functional overload (``add.Tensor``) also makes
its in-place (``add_.Tensor``) and ``out=`` (``add.out``) variants native.
"""
from __future__ import annotations

import contextlib
import threading

import jax
import torch

from . import runtime

aten = torch.ops.aten


class Lowering:
    __slots__ = ("op", "fn", "static", "random", "name")

    def __init__(self, op, fn, static=(), random=False):
        self.op = op
        self.fn = fn
        self.static = frozenset(static)
        self.random = random
        self.name = op.name()


LOWERINGS: dict = {}


def resolve(name):
    """'add.Tensor' / 'aten::add.Tensor' / OpOverload -> OpOverload."""
    if isinstance(name, torch._ops.OpOverload):
        return name
    if isinstance(name, torch._ops.OpOverloadPacket):
        return name.default
    if "::" in name:
        ns, name = name.split("::", 1)
    else:
        ns = "aten"
    base, _, overload = name.partition(".")
    packet = getattr(getattr(torch.ops, ns), base)
    return getattr(packet, overload or "default")


_meta_lib = None


def meta_kernel(name: str, fn, replace: bool = False) -> None:
    """Register fn as the Meta kernel of aten::name (an overload name such as
    "foo" or "foo.out").  The executable builder asks PyTorch's meta kernel for result
    shapes and dtypes; some ops (CUDA-only ones, data-dependent ones) have none, a few
    have a broken one (`replace=True` overrides it for the whole process)."""
    global _meta_lib
    import warnings

    qual = name if "::" in name else f"aten::{name}"
    if not replace and torch._C._dispatch_has_kernel_for_dispatch_key(qual, "Meta"):
        return
    if _meta_lib is None:
        _meta_lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        _meta_lib.impl(qual.split("::", 1)[1], fn, "Meta", allow_override=True)


def lower(*names, static=(), random=False, probe=False):
    """Decorator: register `fn` as the lowering of each named aten overload.

    static: names of Scalar arguments that must be compile-time constants
      (they decide an output shape or a cheaper algorithm).
    random: the lowering draws random numbers with :func:`rng_key`.
    probe: check the argument dtypes against PyTorch's CPU kernel at trace time
      (probe.py), for ops whose meta kernel accepts dtypes the kernels reject.
    """

    def deco(fn):
        for n in names:
            try:
                op = resolve(n)
            except AttributeError:
                continue  # overload absent in this torch version
            if composite_only(op):
                continue
            f = fn
            if probe:
                from .probe import probed

                f = probed(op, fn)
            LOWERINGS[op] = Lowering(op, f, static, random)
        return fn

    return deco


def composite_only(op) -> bool:
    """A CompositeImplicitAutograd op without a CPU kernel of its own (square, ...): it
    runs as its decomposition on every backend, and a backend kernel would hide that
    decomposition from autograd (no gradient), so it is never lowered."""
    name = op.name()
    return (torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")
            and not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU"))


def get(op):
    return LOWERINGS.get(op)


# ---------------------------------------------------------------- trace context
class _Ctx(threading.local):
    def __init__(self):
        self.meta = None
        self.key = None
        self.device = 0
        self.keys_used = 0


_ctx = _Ctx()


@contextlib.contextmanager
def tracing(meta=None, key=None, device=0):
    saved = (_ctx.meta, _ctx.key, _ctx.device, _ctx.keys_used)
    _ctx.meta, _ctx.key, _ctx.device, _ctx.keys_used = meta, key, device, 0
    try:
        yield _ctx
    finally:
        _ctx.meta, _ctx.key, _ctx.device, _ctx.keys_used = saved


def out_meta():
    """The meta tensor(s) PyTorch computed for this op's result (None if unknown)."""
    return _ctx.meta


def out_dtype(i=None):
    """The jax dtype of the (i-th) result, as PyTorch computes it; None if unknown."""
    m = _ctx.meta
    if m is None:
        return None
    if isinstance(m, (list, tuple)):
        m = m[i or 0]
    return runtime.jdtype(m.dtype)


def rng_key():
    """A fresh jax PRNG key for a random op (distinct per call within one trace)."""
    if _ctx.key is None:
        raise RuntimeError("torchneuron: random lowering traced without an RNG key")
    k = jax.random.fold_in(_ctx.key, _ctx.keys_used)
    _ctx.keys_used += 1
    return k



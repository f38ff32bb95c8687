"""The one registry: every aten overload torchneuron runs natively, and why.

Declarations come from two layers and are plain data until :func:`install`:

- ``lowering.LOWERINGS`` / ``lowering.METAS``: the pure lowerings of ``ops/`` with
  their eager extras, and meta kernels;
- :func:`kernel`: eager kernels of ``kernels/`` (ops whose eager execution needs
  the device beyond one executable: data-dependent shapes, host reads, copies).

:func:`install` registers everything with PyTorch in one place and one order:
meta kernels, then eager kernels, then one kernel per lowering (with its extras),
then the in-place and out= variants of lowered functional ops, then the boxed
fallback.  A second declaration for the same overload and dispatch key raises,
naming both places, so nothing depends on import order.

:func:`natives` is the report every consumer reads (``torchneuron.native_ops()``,
the conformance report's families, docs/native-ops.md): op -> (kind, family,
where), kind one of ``lowered``, ``variant`` (in-place/out= of a lowered op),
``eager`` (an eager kernel), ``compile-only`` (graphs only), ``decomposed`` (a
PyTorch decomposition traced into one executable at first use).
"""
from __future__ import annotations

import collections
import sys
import warnings
from typing import NamedTuple

import torch

from .. import lowering
from ..lowering import LOWERINGS, METAS, DuplicateRegistration, family_of, resolve, where_of
from . import meta as _meta
from .bounds import first_bad
from .entry import Entry
from .out import out_kernel
from .schema import functional_of, inplace_variants, out_variants, schema

aten = torch.ops.aten

KINDS = ("lowered", "variant", "eager", "compile-only", "decomposed")


class Native(NamedTuple):
    kind: str
    family: str
    where: str


class _Kernel(NamedTuple):
    fn: object
    key: str
    family: str
    where: str


_KERNELS: dict = {}  # (op, dispatch key) -> _Kernel, declared by kernels/
NATIVE: dict = {}  # op -> Native, filled by install() and by decompositions
_installed: dict = {}  # (op, key) -> fn registered with PyTorch
_FALLTHROUGH: list = []  # dispatch keys whose unlisted ops fall through (autocast)
_libs: dict = {}


def declare(op, fn, key="PrivateUse1", family=None, where=None):
    """Declare an eager kernel for `op` (an OpOverload or a name) on dispatch `key`.  A
    kernel built by dispatch itself (an out= kernel) belongs to the declaring module."""
    op = resolve(op)
    if (getattr(fn, "__module__", "") or "").startswith(__package__) and family is None:
        caller = sys._getframe(1)
        while caller.f_globals.get("__name__", "").startswith(__package__):
            caller = caller.f_back
        family = caller.f_globals["__name__"].rsplit(".", 1)[-1]
        where = where or f"{lowering.where_of(caller.f_code).split(':')[0]}:{caller.f_lineno}"
    where = where or where_of(fn)
    old = _KERNELS.get((op, key))
    if old is not None:
        raise DuplicateRegistration(f"torchneuron: two {key} kernels for {op}: {old.where} and "
                                    f"{where}")
    _KERNELS[(op, key)] = _Kernel(fn, key, family or family_of(fn), where)


def kernel(*names, key="PrivateUse1"):
    """Decorator: `fn` is the eager kernel of each named overload (absent ones skipped)."""
    def deco(fn):
        for n in names:
            try:
                op = resolve(n)
            except AttributeError:
                continue
            declare(op, fn, key)
        return fn

    return deco


def redispatch(names, to, key="PrivateUse1"):
    """Declare, for each named overload present in this torch, a `key` kernel that
    redispatches to PyTorch's own kernel for the dispatch key set `to` (CPU for views and
    metadata ops of strided tensors, SparseMeta / SparseCsrMeta for the device-generic
    field accessors of sparse tensors).  The kernels belong to the calling module."""
    for name in names:
        try:
            op = resolve(name)
        except AttributeError:  # not in this torch
            continue
        declare(op, _redispatcher(op._handle, to), key)


def _redispatcher(handle, keys):
    def redispatching_kernel(*args, **kwargs):
        return handle.redispatch_boxed(keys, *args, **kwargs)

    return redispatching_kernel


_entries: dict = {}


def entry_for(op, low_op=None, mode=None):
    """The (shared) Entry that runs `op` with the lowering of `low_op` (default: its
    own), for eager kernels that add work around a lowered op."""
    op = resolve(op)
    low_op = op if low_op is None else resolve(low_op)
    key = (op, low_op, mode)
    e = _entries.get(key)
    if e is None:
        e = _entries[key] = Entry(op, LOWERINGS[low_op], mode or _mode(schema(op)))
    return e


class LazyEntry:
    """:func:`entry_for`'s Entry, found at the first call: an eager kernel module may hold
    one at import, before the lowering table is loaded, so nothing depends on the order
    in which modules are imported."""

    __slots__ = ("args", "entry")

    def __init__(self, *args):
        self.args = args
        self.entry = None

    def __call__(self, *args, **kwargs):
        e = self.entry
        if e is None:
            e = self.entry = entry_for(*self.args)
        return e(*args, **kwargs)


def lazy_entry(op, low_op=None, mode=None) -> LazyEntry:
    """:func:`entry_for` for a module's import time (see :class:`LazyEntry`)."""
    return LazyEntry(op, low_op, mode)


def fallthrough(key):
    """Declare that ops without a kernel on `key` skip it (``fallthrough_kernel``)."""
    if key not in _FALLTHROUGH:
        _FALLTHROUGH.append(key)


def declared(op, key="PrivateUse1") -> bool:
    return (op, key) in _KERNELS


def library(ns="aten"):
    lib = _libs.get(ns)
    if lib is None:
        lib = _libs[ns] = torch.library.Library(ns, "IMPL")
    return lib


def _impl(op, fn, key):
    if (op, key) in _installed:
        raise DuplicateRegistration(f"torchneuron: {op} registered twice on {key}")
    name = op.name().split("::", 1)[1]
    library(op.namespace).impl(name, fn, key, allow_override=True)
    _installed[(op, key)] = fn


def registered(op, key="PrivateUse1"):
    """The function installed for `op` on `key` (None if none)."""
    return _installed.get((op, key))


# ---------------------------------------------------------------- extras
def with_extras(op, entry, low):
    """`entry` preceded by the lowering's eager extras (normaliser, check, bounds)."""
    if not low.has_extras:
        return entry
    normalize, check, bounds = low.normalize, low.check, low.bounds
    sch = schema(op)
    pos = {n: i for i, n in enumerate(sch.names)}
    index_checks = lowering.index_checks

    def kernel(*args, **kwargs):
        if normalize is not None:
            args, kwargs = normalize(*args, **kwargs)
        if check is not None:
            try:
                check(*args, **kwargs)
            except lowering.AfterMeta as e:
                _meta.validate(op, args, kwargs)  # PyTorch's own errors first
                raise e.error from None
        if bounds is not None and index_checks():
            _check_bounds(op, bounds, sch, pos, args, kwargs)
        return entry(*args, **kwargs)

    kernel.__name__ = f"neuron_{op.name().split('::')[1]}"
    kernel.entry = entry
    return kernel


def _check_bounds(op, finder, sch, pos, args, kwargs):
    def arg(name):
        return sch.arg(args, kwargs, pos[name])

    try:
        items = finder(arg)
    except Exception:  # noqa: BLE001  malformed arguments: the meta kernel reports them
        items = None
    if items:
        err = first_bad(items)
        if err is not None:
            _meta.validate(op, args, kwargs)  # PyTorch's own errors first
            raise err


# ---------------------------------------------------------------- install
# out= overloads whose functional op is CompositeImplicitAutograd: computed by
# the named lowered op instead (e.g. conj_physical.out through _conj_physical)
OUT_VIA = {"conj_physical.out": "_conj_physical.default"}


def _mode(sch):
    if not sch.mutated:
        return "functional"
    if sch.inplace and sch.nreturns <= len(sch.inplace) and all(sch.returns_alias):
        return "inplace"
    return "mutating"


def _native(op, kind, family, where):
    NATIVE[op] = Native(kind, family, where)


def install():
    """Register every declaration with PyTorch (once)."""
    if _installed:
        return
    # 1. meta kernels
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        for qual, m in METAS.items():
            if not m.replace and torch._C._dispatch_has_kernel_for_dispatch_key(qual, "Meta"):
                continue
            op = resolve(qual)
            _impl(op, m.fn, "Meta")
    # 2. eager kernels (and the keys whose other ops fall through)
    for key in _FALLTHROUGH:
        lib = torch.library.Library("_", "IMPL")
        lib.fallback(torch.library.fallthrough_kernel, key)
        _libs[("_", key)] = lib
    for (op, key), k in _KERNELS.items():
        _impl(op, k.fn, key)
        if key in ("PrivateUse1", "AutogradPrivateUse1") and op not in NATIVE:
            _native(op, "eager", k.family, k.where)
    # 3. one kernel per lowering
    for op, low in list(LOWERINGS.items()):
        if low.compile_only:
            if op not in NATIVE:  # (an eager kernel of its own is what eager runs)
                _native(op, "compile-only", low.family, low.where)
            continue
        if (op, "PrivateUse1") in _installed:
            continue  # an eager kernel; the lowering serves compiled graphs
        sch = schema(op)
        if sch.out_args and not sch.inplace:
            f = functional_of(op)
            if f is not None and f in LOWERINGS:
                _impl(op, out_kernel(op, f), "PrivateUse1")
            else:
                _impl(op, with_extras(op, Entry(op, low, "mutating"), low), "PrivateUse1")
        else:
            _impl(op, with_extras(op, Entry(op, low, _mode(sch)), low), "PrivateUse1")
        _native(op, "lowered", low.family, low.where)
    # 4. in-place and out= variants of lowered functional ops
    for op, low in list(LOWERINGS.items()):
        if low.compile_only or schema(op).mutated:
            continue
        for ipo in inplace_variants(op):
            if (ipo, "PrivateUse1") not in _installed and ipo not in LOWERINGS:
                _impl(ipo, with_extras(ipo, Entry(ipo, low, "inplace"), low), "PrivateUse1")
                _native(ipo, "variant", low.family, low.where)
        for cand in out_variants(op):
            if (cand, "PrivateUse1") not in _installed and cand not in LOWERINGS:
                _impl(cand, out_kernel(cand, op), "PrivateUse1")
                _native(cand, "variant", low.family, low.where)
    for out_name, func_name in OUT_VIA.items():
        out_op, func_op = resolve(out_name), resolve(func_name)
        if (out_op, "PrivateUse1") not in _installed and func_op in LOWERINGS:
            _impl(out_op, out_kernel(out_op, func_op), "PrivateUse1")
            _native(out_op, "variant", LOWERINGS[func_op].family, LOWERINGS[func_op].where)
    # 5. everything else: the boxed fallback
    from . import fallback

    fallback.install()


_DECOMPOSED = Native("decomposed", "decompositions", "torch._decomp")


def natives() -> dict:
    """{aten overload name: Native(kind, family, where)} of every native overload
    (decompositions as they are found at first use)."""
    from . import fallback

    out = {op.name(): n for op, n in NATIVE.items()}
    for op in fallback.decomposed_ops():
        out.setdefault(op.name(), _DECOMPOSED)
    return out


def layout_kernels() -> dict:
    """{dispatch key: sorted aten overload names} of the kernels declared for the sparse
    layouts' keys (SparsePrivateUse1, SparseCsrPrivateUse1)."""
    out = collections.defaultdict(list)
    for (op, key) in _KERNELS:
        if key.startswith("Sparse"):
            out[key].append(op.name())
    return {k: sorted(v) for k, v in sorted(out.items())}


def family(op) -> str | None:
    """The family an overload's native implementation belongs to (None if not native)."""
    from . import fallback

    op = resolve(op) if not isinstance(op, torch._ops.OpOverload) else op
    n = NATIVE.get(op)
    if n is None and op in fallback.decomposed_ops():
        n = _DECOMPOSED
    return n.family if n is not None else None



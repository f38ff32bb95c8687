"""PyTorch's OpInfo database as the conformance sweep sees it: ids, dtypes, families.

``torch.testing._internal`` parses ``sys.argv`` when it is imported (unittest
flags such as ``--seed``); :func:`load_op_db` imports it with a clean argv so
our own command-line options never reach that parser.
"""
from __future__ import annotations

import contextlib
import sys

import torch

# The dtypes the sweep covers, by the names used in reports and on the command line.
DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
    "complex64": torch.complex64,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

@contextlib.contextmanager
def _clean_argv():
    saved = sys.argv
    sys.argv = [saved[0] if saved else "torchneuron"]
    try:
        yield
    finally:
        sys.argv = saved


def load_op_db():
    """``common_methods_invocations.op_db`` (imports torchneuron first, so the device
    generic test machinery sees the PrivateUse1 backend)."""
    import torchneuron  # noqa: F401

    with _clean_argv():
        from torch.testing._internal.common_methods_invocations import op_db
    return op_db


def op_id(op) -> str:
    """``name`` or ``name.variant`` (e.g. ``div.trunc_rounding``), as in PyTorch's test names."""
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def cpu_dtypes(op) -> set:
    try:
        return set(op.supported_dtypes("cpu"))
    except Exception:
        return set()


def has_backward(op) -> bool:
    """Whether the sweep checks gradients for this op (float32 backward on the CPU)."""
    try:
        return bool(op.supports_autograd) and torch.float32 in op.supported_backward_dtypes("cpu")
    except Exception:
        return False


# ---------------------------------------------------------------------------
# op families: the registry's (the ops/ or kernels/ module that makes an op native)

COMPOSITE = "composite"  # runs as PyTorch's decomposition into other (native) ops
OTHER = "other"  # not an aten op, or runs on the CPU fallback


def _aten_family(name):
    import torch

    from .. import dispatch

    try:
        packet = getattr(torch.ops.aten, name) if name else None
        overloads = [getattr(packet, ov) for ov in packet.overloads()] if packet else []
    except (AttributeError, RuntimeError):  # not an aten operator
        return None
    overloads.sort(key=lambda o: o._overloadname != "default")
    for o in overloads:
        fam = dispatch.family(o)
        if fam is not None:
            return fam
    for o in overloads:
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key(o.name(), "CompositeImplicitAutograd"):
                return COMPOSITE
        except RuntimeError:
            continue
    return None


_PLUMBING = ("views", "memory", "creation")  # families of ops every program touches


def _traced_family(op):
    """The family of the native ops that do the work of the OpInfo's first sample: run it
    on the CPU under a dispatch mode that records the aten ops hit, and take the most
    used family (view, copy and creation ops only when nothing else runs)."""
    import collections

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from .. import dispatch

    hits = collections.Counter()
    last = {}  # family -> position of its latest op (ties go to the later family)

    class _Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            fam = dispatch.family(func) if isinstance(func, torch._ops.OpOverload) else None
            if fam is not None:
                hits[fam] += 1
                last[fam] = sum(hits.values())
            return func(*args, **(kwargs or {}))

    try:
        sample = next(iter(op.sample_inputs("cpu", torch.float32, requires_grad=False)))
        with _Record():
            op(sample.input, *sample.args, **sample.kwargs)
    except Exception:  # noqa: BLE001  (no float32 samples, or the CPU refuses them)
        return None
    ranked = sorted(hits, key=lambda f: (hits[f], last[f]), reverse=True)
    work = [f for f in ranked if f not in _PLUMBING]
    return (work or ranked or [None])[0]


def family(op) -> str:
    """The family of an OpInfo, as the registry records it (the ops/ or kernels/ module
    that makes it native): that of the aten op it names (``aten_name``, its
    decomposition's ``decomp_aten_name``), else of the native ops its first sample runs
    (composite ops), ``composite`` / ``other`` when neither says."""
    names = [getattr(op, "aten_name", None), getattr(op, "decomp_aten_name", None),
             op.name.replace(".", "_"), op.name.rsplit(".", 1)[-1]]
    composite = False
    for name in names:
        fam = _aten_family(name)
        if fam == COMPOSITE:
            composite = True
        elif fam is not None:
            return fam
    return _traced_family(op) or (COMPOSITE if composite else OTHER)


def families() -> list:
    """Every family a report can show, in display order."""
    from .. import dispatch

    native = sorted({n.family for n in dispatch.natives().values()})
    return native + [COMPOSITE, OTHER]

"""PyTorch's meta kernels as the source of truth for result metadata and errors.

An executable is built from what the meta kernel says (dtypes, shapes, strides)
and refuses what it refuses.  Meta kernels are often Python references whose
messages differ from the native kernels', so an error is re-raised with the
message of PyTorch's CPU kernel run on small zero-filled stand-ins.
"""
from __future__ import annotations

import warnings

import torch

from .. import storage
from ..lowering import device_mismatch  # noqa: F401  (re-exported)

Tensor = torch.Tensor


def meta_tensor(t):
    if t.device.type == "cpu" and t.dim() == 0 and not t.is_neuron:
        return torch.empty((), dtype=t.dtype, device="meta")
    return torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device="meta")


def to_meta(args, kwargs):
    def f(v):
        if isinstance(v, Tensor):
            return meta_tensor(v)
        if isinstance(v, (list, tuple)) and any(isinstance(x, Tensor) for x in v):
            return type(v)(f(x) if x is not None else None for x in v)
        if isinstance(v, torch.device) and v.type == "neuron":
            return torch.device("meta")
        return v

    return [f(a) for a in args], {k: f(v) for k, v in kwargs.items()}


class NoMeta(Exception):
    pass


def _snapshot(v):
    if isinstance(v, Tensor):
        return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device="meta")
    if isinstance(v, (list, tuple)):
        return type(v)(_snapshot(x) for x in v)
    return v


def run_meta(op, margs, mkwargs, device_meta=None):
    """`op` on meta tensors (or the lowering's `device_meta` in its place), its errors in
    the CPU kernel's wording and its warnings re-emitted."""
    # the arguments as they were: a Python meta reference can resize an out= or in-place
    # argument before it raises, and the CPU's error must see the original shapes
    before = ([_snapshot(a) for a in margs], {k: _snapshot(v) for k, v in mkwargs.items()})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = (device_meta or op)(*margs, **mkwargs)
        except NotImplementedError as e:
            msg = str(e)
            if "not implemented for '" in msg:  # a dtype the kernel refuses: PyTorch's error
                raise (cpu_error(op, *before) or e) from None
            raise NoMeta(msg) from None
        except (RuntimeError, ValueError, IndexError, TypeError, AssertionError) as e:
            # (some Python meta kernels check with assert: linalg.cholesky on a 1-D input;
            # the CPU kernel's error replaces theirs)
            msg = str(e)
            if "Meta" in msg and ("Could not run" in msg or "not implemented" in msg.lower()):
                raise NoMeta(msg) from None
            cpu_err = cpu_error(op, *before)
            raise (cpu_err or e) from None
    # (a call that raises gives no warning, like the CPU kernel's)
    for w in caught:
        if "{str(shape)}" in str(w.message):
            # the prims wrapper's out= resize warning, with its format string unfilled; the
            # out= kernels give CPU's own wording (per call)
            continue
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    return result


_CPU_ERROR_MAX_NUMEL = 1 << 16


def cpu_error(op, margs, mkwargs):
    """The error PyTorch's CPU kernel raises for these shapes (its wording is CUDA's too).

    Meta kernels are often Python references whose messages differ from the
    native kernels'.  Re-run the op on small CPU stand-ins of the same shapes
    to get the native message; None if that does not raise or is too big."""

    def cpu(v):
        if isinstance(v, Tensor):
            if v.numel() > _CPU_ERROR_MAX_NUMEL:
                raise OverflowError
            return torch.zeros(tuple(v.shape), dtype=v.dtype)
        if isinstance(v, (list, tuple)):
            return type(v)(cpu(x) for x in v)
        if isinstance(v, torch.device) and v.type == "meta":
            return torch.device("cpu")
        return v

    try:
        cargs = [cpu(a) for a in margs]
        ckw = {k: cpu(v) for k, v in mkwargs.items()}
    except OverflowError:
        return None
    try:
        op(*cargs, **ckw)
    except (RuntimeError, ValueError, IndexError, TypeError) as e:
        return type(e)(str(e))
    except Exception:  # noqa: BLE001
        return None
    return None


def drop_out_args(func_op, margs, mkwargs):
    names = {a.name for a in func_op._schema.arguments}
    return margs, {k: v for k, v in mkwargs.items() if k in names}


translate_runtime_error = storage.translate_runtime_error


# ---------------------------------------------------------------- registration


def validate(op, args, kwargs):
    """Raise what PyTorch's meta kernel raises for these arguments (nothing without one)."""
    margs, mkwargs = to_meta(args, kwargs)
    try:
        run_meta(op, margs, mkwargs)
    except NoMeta:
        pass

"""Trace-time dtype-support checks: PyTorch's own kernel decides which dtypes an op takes.

PyTorch's kernels reject some dtypes (``"frac_cpu" not implemented for 'Long'``)
after the meta kernel has accepted them.  A lowering registered with
``lower(..., probe=True)`` runs, at trace time (once per executable, eager or
compiled), PyTorch's CPU kernel on empty CPU tensors of the same dtypes and
re-raises its NotImplementedError (or a RuntimeError that does not depend on
values); no data is involved.
"""
from __future__ import annotations

import jax.numpy as jnp
import torch

from . import runtime
from .storage import number_key

_probe_cache: dict = {}
_slot_cache: dict = {}


class _NoProbe(Exception):
    pass


def _probe_arg(v, scalar=False):
    if isinstance(v, (list, tuple)):
        return type(v)(_probe_arg(x) for x in v)
    if not hasattr(v, "dtype") or not hasattr(v, "shape"):
        return v
    dt = jnp.dtype(v.dtype)
    try:
        tdt = runtime.tdtype(dt)
    except KeyError:
        raise _NoProbe from None
    if (scalar or getattr(v, "weak_type", False)) and v.ndim == 0:  # a Python number
        return (True if dt == jnp.bool_ else 1 if jnp.issubdtype(dt, jnp.integer) else
                1j if jnp.issubdtype(dt, jnp.complexfloating) else 1.0)
    return torch.ones((), dtype=tdt) if v.ndim == 0 else torch.empty((0,) * v.ndim, dtype=tdt)


def _tensor_slots(op):
    slots = _slot_cache.get(op)
    if slots is None:
        slots = _slot_cache[op] = {a.name: i for i, a in enumerate(op._schema.arguments)
                                   if _is_tensor_type(a.type)}
    return slots


def _is_tensor_type(t):
    """A `Tensor` or `Tensor?` argument (a 0-d value there is a tensor, not a number)."""
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return isinstance(t, torch.TensorType)


def _as_tensor_slot(v):
    # a wrapped number in a Tensor argument: a 0-d tensor of its kind
    return torch.tensor(v) if isinstance(v, (bool, int, float, complex)) else v


def probe(op, args, kwargs):
    """Raise what PyTorch's CPU kernel raises for these argument dtypes, if anything."""
    slots = _tensor_slots(op)
    idx = set(slots.values())
    try:
        pargs = [_probe_arg(a, i not in idx) for i, a in enumerate(args)]
        pkw = {k: _probe_arg(v, k not in slots) for k, v in kwargs.items()}
    except _NoProbe:
        return
    pargs = [_as_tensor_slot(a) if i in idx else a for i, a in enumerate(pargs)]
    pkw = {k: _as_tensor_slot(v) if k in slots else v for k, v in pkw.items()}
    key = (op, tuple(_probe_sig(a) for a in pargs), tuple((k, _probe_sig(v)) for k, v in pkw.items()))
    err = _probe_cache.get(key, 0)
    if err == 0:
        err = None
        try:
            op(*pargs, **pkw)
        except NotImplementedError as e:
            err = (NotImplementedError, str(e).split("\n")[0])
        except RuntimeError as e:
            # a type rule, unless a value is at fault: retry with only empty tensors
            if _runtime_error_without_values(op, pargs, pkw):
                err = (RuntimeError, str(e).split("\n")[0])
        except Exception:  # noqa: BLE001  (values matter there: not a dtype question)
            pass
        _probe_cache[key] = err
    if err is not None:
        raise err[0](err[1])


def _runtime_error_without_values(op, pargs, pkw):
    def empty(v):
        if isinstance(v, torch.Tensor) and v.dim() == 0:
            return torch.empty((0,), dtype=v.dtype)
        return v

    try:
        op(*[empty(a) for a in pargs], **{k: empty(v) for k, v in pkw.items()})
    except RuntimeError:
        return True
    except Exception:  # noqa: BLE001
        return False
    return False


def _probe_sig(v):
    if isinstance(v, torch.Tensor):
        return (v.dtype, v.dim())
    if isinstance(v, (list, tuple)):
        return tuple(_probe_sig(x) for x in v)
    if isinstance(v, (bool, int, float, complex)):
        # the value too: the probe runs with it, and some errors depend on it (a negative
        # integer power)
        return (type(v), number_key(v))
    return v


def probed(op, fn):
    """fn, probing the argument dtypes first."""
    def wrapped(*args, **kwargs):
        probe(op, args, kwargs)
        return fn(*args, **kwargs)

    wrapped.__name__ = getattr(fn, "__name__", "lowering")
    return wrapped

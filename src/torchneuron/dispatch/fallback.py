"""Ops without a lowering: a PyTorch decomposition traced into one executable
(still native), else the CPU fallback: a copy to the host, PyTorch's CPU kernel,
a copy back, with exact semantics for in-place, out= and view-returning ops;
counted, and governed by the policy (``TORCHNEURON_FALLBACK=warn|silent|error``).
"""
from __future__ import annotations

import collections
import warnings

import torch

from .. import config, runtime, storage
from ..interpret import Unlowerable
from .entry import Entry
from .executable import current_device
from .meta import NoMeta
from .schema import schema

Tensor = torch.Tensor

_fallback_counts = collections.Counter()
_decomp_counts = collections.Counter()
_warned = set()


_POLICIES = ("warn", "silent", "error")
_policy = config.get("TORCHNEURON_FALLBACK")


def fallback_policy() -> str:
    return _policy


def set_fallback_policy(policy: str) -> str:
    """Set what happens when an op has no native lowering; returns the previous policy."""
    global _policy
    policy = policy.strip().lower()
    if policy not in _POLICIES:
        raise ValueError(f"fallback policy must be one of {_POLICIES}, got {policy!r}")
    prev, _policy = _policy, policy
    return prev


class FallbackError(NotImplementedError):
    pass


def fallback_stats() -> dict:
    """{op name: number of calls} for ops that ran through the CPU fallback."""
    return dict(_fallback_counts)


def decomposition_stats() -> dict:
    """{op name: number of calls} for ops run natively through a PyTorch decomposition."""
    return dict(_decomp_counts)


def reset_fallback_stats() -> None:
    _fallback_counts.clear()
    _decomp_counts.clear()


def _boxed_fallback(op, *args, **kwargs):
    entry = _decomp_entries.get(op)
    if entry is None and op not in _no_decomp:
        entry = _make_decomp_entry(op)
    if entry is not None:
        try:
            _decomp_counts[op.name()] += 1
            return entry(*args, **kwargs)
        except NoMeta:
            _no_decomp.add(op)
        except Unlowerable:
            _no_decomp.add(op)
    return cpu_fallback(op, *args, **kwargs)


_decomp_entries: dict = {}
_no_decomp: set = set()


def _make_decomp_entry(op):
    from .. import dynamo_skip, interpret

    dynamo_skip.skip_loaded_modules()
    low = interpret.decomposition_lowering(op)
    if low is None:
        _no_decomp.add(op)
        return None
    sch = schema(op)
    mode = "functional"
    if sch.mutated:
        _no_decomp.add(op)
        return None
    e = Entry(op, low, mode)
    _decomp_entries[op] = e
    return e


def decomposed_ops() -> list:
    """Overloads run natively through a traced PyTorch decomposition so far."""
    return list(_decomp_entries)


def cpu_fallback(op, *args, **kwargs):
    name = op.name()
    policy = fallback_policy()
    if policy == "error":
        raise FallbackError(
            f"torchneuron: {name} has no native lowering and TORCHNEURON_FALLBACK=error "
            "forbids running it on the CPU"
        )
    _fallback_counts[name] += 1
    if policy == "warn" and name not in _warned:
        _warned.add(name)
        warnings.warn(
            f"torchneuron: {name} has no native lowering; it runs on the CPU (copies to and "
            "from the device). Set TORCHNEURON_FALLBACK=silent to hide this warning.",
            stacklevel=3,
        )
    return run_on_cpu(op, args, kwargs)


def run_on_cpu(op, args, kwargs):
    """Run `op` with PyTorch's CPU kernel, with exact in-place/out=/view semantics."""
    sch = schema(op)
    index = None
    host = {}  # id(cell) -> (cpu storage, neuron storage, cell)

    def to_cpu(t):
        nonlocal index
        if not isinstance(t, Tensor) or t.device.type != "neuron":
            return t
        if index is None:
            index = t.device.index
        nst = t.untyped_storage()
        cell = storage.cell_of(t)
        ent = host.get(id(cell))
        if ent is None:
            raw = storage.to_host(cell.arr, runtime.tdtype(cell.arr.dtype))
            cst = raw.untyped_storage()
            ent = host[id(cell)] = (cst, nst, cell, raw)
        c = torch.empty(0, dtype=t.dtype)
        c.set_(ent[0], t.storage_offset(), tuple(t.shape), t.stride())
        c.requires_grad_(False)
        if t.is_conj():  # the stored values, seen through the same lazy bits
            torch._C._set_conj(c, True)
        if t.is_neg():
            torch._C._set_neg(c, True)
        return c

    def conv(v):
        if isinstance(v, Tensor):
            return to_cpu(v)
        if isinstance(v, (list, tuple)):
            return type(v)(conv(x) for x in v)
        if isinstance(v, torch.device) and v.type == "neuron":
            nonlocal index
            if index is None:
                index = v.index if v.index is not None else current_device()
            return torch.device("cpu")
        return v

    cargs = [conv(a) for a in args]
    ckw = {k: conv(v) for k, v in kwargs.items()}
    if index is None:
        index = current_device()
    # keep the mutated args' CPU tensors to compare after the call
    mutated = []
    for i in sch.mutated:
        nv = sch.arg(args, kwargs, i)
        cv = sch.arg(cargs, ckw, i)
        if isinstance(nv, (list, tuple)):
            mutated.extend(zip(nv, cv))
        elif nv is not None:
            mutated.append((nv, cv))
    with torch._C._DisableTorchDispatch():
        result = op(*cargs, **ckw)

    # write mutated storages back
    written = set()
    for nv, cv in mutated:
        if not isinstance(nv, Tensor) or nv.device.type != "neuron":
            continue
        cell = storage.cell_of(nv)
        ent = host[id(cell)]
        if cv.untyped_storage().data_ptr() == ent[0].data_ptr() and cv.untyped_storage().nbytes() == ent[0].nbytes():
            if id(cell) not in written:
                written.add(id(cell))
                cell.arr = storage.to_device_array(ent[3], index)
            if (tuple(cv.shape), cv.stride(), cv.storage_offset()) != (tuple(nv.shape), nv.stride(), nv.storage_offset()):
                storage.set_metadata(nv, nv.untyped_storage(), cv.storage_offset(), tuple(cv.shape), cv.stride())
        else:  # the CPU kernel reallocated (resize_ of an out= tensor)
            new = storage.host_storage_to_device(cv, index)
            storage.set_metadata(nv, new.untyped_storage(), cv.storage_offset(), tuple(cv.shape), cv.stride())

    by_ptr = {ent[0].data_ptr(): ent for ent in host.values()}
    mutated_by_cpu = {id(cv): nv for nv, cv in mutated}

    def back(r):
        if isinstance(r, Tensor) and r.layout != torch.strided:
            # sparse: its indices and values move to the device (PyTorch's own copy)
            return r.to(torch.device("neuron", index))
        if isinstance(r, Tensor):
            if id(r) in mutated_by_cpu:
                return mutated_by_cpu[id(r)]
            ent = by_ptr.get(r.untyped_storage().data_ptr()) if r.untyped_storage().nbytes() else None
            if ent is not None and sch.returns_alias and any(sch.returns_alias):
                # a view of an input: same metadata over the neuron storage
                t = storage.new_shell(index, r.dtype)
                return storage.set_metadata(t, ent[1], r.storage_offset(), tuple(r.shape), r.stride())
            return storage.to_neuron(r, index)
        if isinstance(r, (list, tuple)):
            return type(r)(back(x) for x in r)
        return r

    return back(result)


def install():
    """The PrivateUse1 fallback is registered once, light, by torchneuron/boot.py (its
    first call loads the device); from now on it hands ops here."""
    from .. import boot

    boot.set_fallback(_boxed_fallback)

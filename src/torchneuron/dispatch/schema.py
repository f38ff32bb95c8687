"""What dispatch needs to know about an aten overload's schema, and the one place
that finds an overload's in-place and out= variants (and the functional overload
a variant computes)."""
from __future__ import annotations

import functools

import torch

aten = torch.ops.aten

# argument kinds
T, TOPT, TLIST, S, SLIST, OTHER = range(6)


def _kind(t) -> int:
    if isinstance(t, torch.TensorType):
        return T
    if isinstance(t, torch.NumberType):
        return S
    if isinstance(t, torch.OptionalType):
        k = _kind(t.getElementType())
        return {T: TOPT, S: S, TLIST: TLIST}.get(k, OTHER)
    if isinstance(t, torch.ListType):
        k = _kind(t.getElementType())
        return {T: TLIST, TOPT: TLIST, S: SLIST}.get(k, OTHER)
    return OTHER


class Schema:
    """What dispatch needs to know about an overload's arguments."""

    def __init__(self, op):
        s = op._schema
        self.op = op
        self.names = [a.name for a in s.arguments]
        self.kinds = [_kind(a.type) for a in s.arguments]
        self.kind_of = dict(zip(self.names, self.kinds))
        self.kwarg_only = [a.kwarg_only for a in s.arguments]
        self.mutated = [i for i, a in enumerate(s.arguments)
                        if a.alias_info is not None and a.alias_info.is_write]
        self.out_args = [i for i in self.mutated if s.arguments[i].kwarg_only]
        self.inplace = [i for i in self.mutated if not s.arguments[i].kwarg_only]
        self.returns_alias = [r.alias_info is not None for r in s.returns]
        self.nreturns = len(s.returns)
        self.returns_list = (len(s.returns) == 1 and isinstance(s.returns[0].type, torch.ListType))
        self.defaults = {a.name: a.default_value for a in s.arguments if a.has_default_value()}

    def arg(self, args, kwargs, i):
        name = self.names[i]
        if name in kwargs:
            return kwargs[name]
        if i < len(args) and not self.kwarg_only[i]:
            return args[i]
        return self.defaults.get(name)


@functools.lru_cache(maxsize=None)
def schema(op) -> Schema:
    return Schema(op)


def packet_name(op) -> str:
    return op._schema.name.split("::")[1]


def _signature(op, drop_out=False):
    return [(a.name, str(a.type)) for a in op._schema.arguments
            if not (drop_out and a.kwarg_only and a.alias_info is not None
                    and a.alias_info.is_write)]


def functional_of(op):
    """The functional overload an in-place (foo_) or out= overload computes (matched by
    argument names and types, not by overload name: pow_.Scalar (Tensor self, Scalar
    exponent) computes pow.Tensor_Scalar, not pow.Scalar)."""
    sch = schema(op)
    name = packet_name(op)
    if sch.inplace and name.endswith("_") and not sch.out_args:
        base = getattr(aten, name[:-1], None)
        if base is None:
            return None
        want = _signature(op)
        for ov in [op._overloadname] + [o for o in base.overloads() if o != op._overloadname]:
            cand = getattr(base, ov, None)
            if cand is not None and _signature(cand) == want:
                return cand
        return None
    if sch.out_args:
        packet = getattr(aten, name)
        want = _signature(op, drop_out=True)
        for ov in packet.overloads():
            cand = getattr(packet, ov)
            if any(a.alias_info is not None and a.alias_info.is_write
                   for a in cand._schema.arguments):
                continue
            if _signature(cand) == want:
                return cand
    return None


def inplace_variants(op) -> list:
    """The in-place overloads (foo_.*) that compute the functional overload `op`."""
    ip = getattr(aten, packet_name(op) + "_", None)
    if ip is None:
        return []
    out = []
    for ov in ip.overloads():
        cand = getattr(ip, ov)
        if functional_of(cand) is op:
            out.append(cand)
    return out


def out_variants(op) -> list:
    """The out= overloads (foo.out, foo.*_out) that compute the functional overload `op`."""
    packet = getattr(aten, packet_name(op))
    out = []
    for ov in packet.overloads():
        cand = getattr(packet, ov)
        if cand is not op and schema(cand).out_args and functional_of(cand) is op:
            out.append(cand)
    return out

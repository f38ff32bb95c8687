"""export_stablehlo: a function's (or module's) graph as StableHLO text."""
from __future__ import annotations

import itertools
import types

import torch

_ids = itertools.count()


def export_stablehlo(fn_or_module, *example_args, **example_kwargs) -> str:
    from .backend import neuron_backend

    captured: list = []

    def backend(gm, example_inputs):
        return neuron_backend(gm, example_inputs, options={"capture": captured})

    callee = fn_or_module

    def call(*a, **k):
        return callee(*a, **k)

    # a fresh code object per export: Dynamo's per-code cache (and its recompile
    # limit) is never shared between exports
    code = call.__code__.replace(co_name=f"export_stablehlo_{next(_ids)}")
    target = types.FunctionType(code, call.__globals__, code.co_name, None, call.__closure__)

    compiled = torch.compile(target, backend=backend, fullgraph=True, dynamic=False)
    with torch.no_grad():
        compiled(*example_args, **example_kwargs)
    if not captured:
        raise RuntimeError("torchneuron.compile.export_stablehlo: the function produced no graph "
                           "(nothing to compile)")
    return "\n".join(captured)

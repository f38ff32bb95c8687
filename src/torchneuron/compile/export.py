"""export_stablehlo: a function's (or module's) graph as StableHLO text."""
from __future__ import annotations

import itertools

import torch

_ids = itertools.count()


def export_stablehlo(fn_or_module, *example_args, **example_kwargs) -> str:
    from .backend import neuron_backend

    captured: list = []

    def backend(gm, example_inputs):
        return neuron_backend(gm, example_inputs, options={"capture": captured})

    # a fresh trampoline (own code object, own file name) per export: Dynamo's per-code
    # cache and recompile limit are never shared between exports, and the file is
    # not under torchneuron's (Dynamo-skipped) folders
    n = next(_ids)
    ns = {"callee": fn_or_module}
    exec(compile("def call(*a, **k):\n    return callee(*a, **k)\n",
                 f"<torchneuron-export-{n}>", "exec"), ns)
    target = ns["call"]

    compiled = torch.compile(target, backend=backend, fullgraph=True, dynamic=False)
    with torch.no_grad():
        compiled(*example_args, **example_kwargs)
    if not captured:
        raise RuntimeError("torchneuron.compile.export_stablehlo: the function produced no graph "
                           "(nothing to compile)")
    return "\n".join(captured)

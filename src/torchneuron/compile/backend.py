"""The Dynamo backend ``neuron``: torch.compile(model, backend="neuron").

Registered through the ``torch_dynamo_backends`` entry point, so no import
beyond torch is needed.  Dynamo captures FX graphs (graph breaks run
eagerly); AOTAutograd turns each into functional forward and backward graphs
(or one inference graph), keeping input mutations in the graph as
``copy_(input, value)``; each of those graphs becomes a :class:`CompiledGraph`
(one jax.jit → StableHLO → one XLA executable per input signature).

Options (``torch.compile(..., options={...})``):
  frontend: "default" (the lowering table) or "torch-mlir" (torch-mlir's FX
            importer → StableHLO; inference graphs only; ``pip install
            torchneuron[torch-mlir]``)
  donate:   donate mutated inputs' buffers to XLA (default True)
"""
from __future__ import annotations

import itertools
import logging

import torch

from . import graph as _graph

log = logging.getLogger("torchneuron.compile")

_ids = itertools.count()
_ready = False

_KNOWN_OPTIONS = {"frontend", "donate", "capture"}


def _setup():
    """Once: Dynamo must not trace into the runtime (jax, torchneuron's dispatcher),
    which runs eager ops under a compiled frame (graph breaks, backward)."""
    global _ready
    if _ready:
        return
    _ready = True
    import torchneuron

    torchneuron._register()
    try:
        from torch._dynamo import trace_rules

        for mod in ("jax", "jaxlib", "ml_dtypes", "opt_einsum", "torchneuron.dispatch",
                    "torchneuron.storage", "torchneuron.lowering", "torchneuron.runtime",
                    "torchneuron.device", "torchneuron.amp", "torchneuron.ops",
                    "torchneuron.compile"):
            try:
                trace_rules.add(mod)
            except Exception:  # noqa: BLE001  (module absent)
                pass
    except ImportError:
        pass
    from . import cache

    cache.setup()
    from .. import dynamo_skip

    dynamo_skip.skip_loaded_modules()  # the compile modules imported since registration


def _check_options(options):
    options = dict(options or {})
    bad = set(options) - _KNOWN_OPTIONS
    if bad:
        raise ValueError(f"torch.compile(backend='neuron'): unknown option(s) {sorted(bad)}; "
                         f"known options are {sorted(_KNOWN_OPTIONS - {'capture'})}")
    fe = options.get("frontend", "default")
    if fe not in ("default", "torch-mlir", "torch_mlir"):
        raise ValueError(f"torch.compile(backend='neuron'): unknown frontend {fe!r}; "
                         "use 'default' or 'torch-mlir'")
    options["frontend"] = "torch-mlir" if fe in ("torch-mlir", "torch_mlir") else "default"
    return options


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, options=None, **kwargs):
    """The torch.compile backend: Dynamo graph -> AOTAutograd -> XLA executables."""
    if kwargs.get("mode") not in (None, "default"):
        log.info("torchneuron.compile: mode=%r is ignored", kwargs.get("mode"))
    options = _check_options(options)
    _setup()
    gid = next(_ids)
    _graph.STATS.dynamo_graphs += 1
    if options["frontend"] == "torch-mlir":
        from . import mlir_frontend

        return mlir_frontend.compile_graph(gm, example_inputs, f"g{gid}", options)

    from torch._dynamo.backends.common import aot_autograd

    def compiler(kind):
        def fn(g, ex):
            return _graph.CompiledGraph(g, f"g{gid}_{kind}", options, kind=kind)

        return fn

    be = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                      inference_compiler=compiler("inference"),
                      keep_inference_input_mutations=True)
    return be(gm, example_inputs)

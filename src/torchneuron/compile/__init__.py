"""torch.compile(backend="neuron") and the FX -> jax interpreter.

Public API:
  stats() / reset_stats()          compile counters (graphs, compilations, cache hits, ...)
  export_stablehlo(fn, *args)      the StableHLO text of fn's graph
  cache_dir()                      the persistent compilation cache folder (or None)
See docs/compile.md.
"""
from __future__ import annotations


def stats() -> dict:
    """Counters of the neuron compile backend: graphs, XLA compilations, recompilations,
    in-memory cache hits, compile time, split graphs and the ops they ran eagerly,
    executables loaded from the persistent cache."""
    from .counters import STATS

    return STATS.as_dict()


def reset_stats() -> None:
    from .counters import STATS

    STATS.reset()


def cache_dir():
    """The persistent compilation cache's folder (None when it is off)."""
    from . import cache

    return cache.cache_dir()


def export_stablehlo(fn_or_module, *example_args, **example_kwargs) -> str:
    """The StableHLO text XLA compiles for `fn_or_module(*example_args)`.

    The function is captured whole by Dynamo (fullgraph=True), without autograd
    (inference graph), lowered with the same table as eager and compiled once;
    the example arguments are run once on the device.
    """
    from .export import export_stablehlo as _export

    return _export(fn_or_module, *example_args, **example_kwargs)


def neuron_backend(gm, example_inputs, **kwargs):
    from .backend import neuron_backend as _nb

    return _nb(gm, example_inputs, **kwargs)

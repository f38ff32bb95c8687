"""Dispatch: from a PyTorch op call on neuron tensors to a cached XLA executable.

- ``schema``: what an overload's arguments are; its in-place / out= variants;
- ``executable``: the argument walk, templates and result layout (shared with
  compiled graphs);
- ``runner``: the one executable type and the one way to run it over cells (eager
  ops, fused eager and compiled graphs);
- ``entry``: an overload's kernel, its executable cache and build;
- ``layouts``: the layout policy (when an op stops compiling per input layout);
- ``overlap``: TensorIterator's memory-overlap and casting rules;
- ``out``: out= kernels of lowered functional ops;
- ``fused``: whether an eager call is recorded into fused eager's pending program
  (the contract of fused eager is in its docstring);
- ``store``: the eager executable store (executables on disk) and an executable's
  first call;
- ``meta``: PyTorch's meta kernels as the source of result metadata and errors;
- ``registry``: declarations of eager kernels, ``install()`` (every registration with
  PyTorch, in one place), and the report of what is native and why;
- ``fallback``: decompositions and the CPU fallback, its policy and counters;
- ``bounds``: index bounds checks (one host read).

This module is the API the other layers use.
"""
from __future__ import annotations

from .entry import Entry, cache_hits, cache_misses  # noqa: F401
from .out import out_kernel, resize_output  # noqa: F401
from .overlap import (OVERLAP_WRITES, check_cast, check_no_overlap,  # noqa: F401
                      check_partial_overlap, overlap_status)
from .runner import Executable, run, warn_once  # noqa: F401
from .fallback import (FallbackError, cpu_fallback, decomposition_stats,  # noqa: F401
                       fallback_policy, fallback_stats, reset_fallback_stats, run_on_cpu,
                       set_fallback_policy)
from .meta import (NoMeta, cpu_error, device_mismatch, to_meta,  # noqa: F401
                   translate_runtime_error, validate)
from .registry import (declare, declared, entry_for, fallthrough, family, install,  # noqa: F401
                       kernel, layout_kernels, lazy_entry, library, natives, redispatch,
                       registered)
from .schema import (Schema, functional_of, inplace_variants, out_variants,  # noqa: F401
                     schema)

"""Dispatch: from a PyTorch op call on neuron tensors to a cached XLA executable.

- ``schema``: what an overload's arguments are; its in-place / out= variants;
- ``executable``: the argument walk, templates and result layout (shared with
  compiled graphs);
- ``entry``: the kernels dispatch builds (an overload's cached executables, out=
  kernels, a lowering's eager extras);
- ``meta``: PyTorch's meta kernels as the source of result metadata and errors;
- ``registry``: declarations of eager kernels, ``install()`` (every registration with
  PyTorch, in one place), and the report of what is native and why;
- ``fallback``: decompositions and the CPU fallback, its policy and counters;
- ``bounds``: index bounds checks (one host read).

This module is the API the other layers use.
"""
from __future__ import annotations

from .entry import (OVERLAP_WRITES, Entry, cache_hits, cache_misses, check_cast,  # noqa: F401
                    check_no_overlap, check_partial_overlap, overlap_status,
                    out_kernel, resize_output, warn_once)
from .fallback import (FallbackError, cpu_fallback, decomposition_stats,  # noqa: F401
                       fallback_policy, fallback_stats, reset_fallback_stats, run_on_cpu,
                       set_fallback_policy)
from .meta import (NoMeta, cpu_error, device_mismatch, to_meta,  # noqa: F401
                   translate_runtime_error, validate)
from .registry import (declare, declared, entry_for, fallthrough, family, install,  # noqa: F401
                       kernel, layout_kernels, library, natives, redispatch, registered)
from .schema import (Schema, functional_of, inplace_variants, out_variants,  # noqa: F401
                     schema)

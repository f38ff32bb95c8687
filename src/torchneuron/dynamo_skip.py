"""Keep Dynamo out of torchneuron's own code.

While a ``torch.compile``'d function runs (or falls back to eager after a graph
break), Dynamo's frame-evaluation hook sees every Python frame that starts, also
the ones PyTorch's C++ dispatcher starts: our kernels, the CPU fallback, meta
and autocast kernels, the hooks.  It would try to compile them, and fails inside
them (jax tracers, numpy views).  CUDA's kernels are C++, so Dynamo never sees
them; ours must be marked the same way.

The supported switch is a frame-execution strategy on the code object
(``torch._C._dynamo.eval_frame.set_code_exec_strategy``, what
``torch._dynamo.skip_code`` and ``torch._dynamo.disable`` build on): SKIP for the
frame and, recursively, for every frame it calls (jax, numpy).  It costs nothing
per call and needs no import of ``torch._dynamo``.  Every code object of the
runtime modules is marked once, when they are imported; user-level code that
Dynamo is meant to compile (``torchneuron.models``, the demo) is left alone.
"""
from __future__ import annotations

import sys
import types

# modules whose functions a user compiles with torch.compile: never skipped
_COMPILED_BY_USERS = ("torchneuron.models", "torchneuron.demo")

_marked: set = set()  # module names already walked
_codes: set = set()  # ids of the marked code objects (kept alive by their modules)


def _strategy():
    try:
        from torch._C._dynamo.eval_frame import (_FrameAction, _FrameExecStrategy,
                                                 set_code_exec_strategy)
    except ImportError:  # a torch without Dynamo's C extension
        return None, None
    return set_code_exec_strategy, _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)


def _codes_of(obj, filename, out, seen):
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, types.CodeType):
        if obj.co_filename == filename:
            out.append(obj)
            for c in obj.co_consts:
                if isinstance(c, types.CodeType):
                    _codes_of(c, filename, out, seen)
        return
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        for f in (obj.fget, obj.fset, obj.fdel):
            if f is not None:
                _codes_of(f, filename, out, seen)
        return
    wrapped = getattr(obj, "__wrapped__", None)  # functools.wraps / lru_cache
    if wrapped is not None and wrapped is not obj:
        _codes_of(wrapped, filename, out, seen)
    code = getattr(obj, "__code__", None)
    if isinstance(code, types.CodeType):
        _codes_of(code, filename, out, seen)
    elif isinstance(obj, type):
        for v in vars(obj).values():
            _codes_of(v, filename, out, seen)


def runtime_codes(module) -> list:
    """Every code object defined in `module`'s file: functions, methods, nested
    functions and lambdas."""
    filename = getattr(module, "__file__", None)
    if not filename:
        return []
    out: list = []
    seen: set = set()
    for v in list(vars(module).values()):
        if isinstance(v, type) and v.__module__ != module.__name__:
            continue
        _codes_of(v, filename, out, seen)
    return out


def skip_loaded_modules() -> int:
    """Mark the code of every imported torchneuron runtime module (idempotent, cheap for
    modules already marked); returns how many code objects were marked now."""
    set_strategy, strategy = _strategy()
    if set_strategy is None:
        return 0
    n = 0
    for name, mod in list(sys.modules.items()):
        if mod is None or name in _marked:
            continue
        if name != "torchneuron" and not name.startswith("torchneuron."):
            continue
        _marked.add(name)
        if any(name == p or name.startswith(p + ".") for p in _COMPILED_BY_USERS):
            continue
        for code in runtime_codes(mod):
            set_strategy(code, strategy)
            _codes.add(id(code))
            n += 1
    return n


def is_skipped(code) -> bool:
    """Whether `code` was marked to run without Dynamo."""
    return id(code) in _codes

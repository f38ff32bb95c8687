"""Eager kernels: ops whose eager execution needs the device beyond one cached
executable of a lowering (data-dependent shapes, host reads, copies across
devices, allocation, views, custom autograd), one module per family.

They are declared with ``dispatch.kernel`` (registered by ``dispatch.install``) and
build on ``storage``'s one helper for device work (``storage.device_fn`` /
``storage.read_back``: one cache of small jitted functions, one cap) and on
``dispatch.entry_for`` when they wrap a lowered op (``dispatch.lazy_entry`` at a
module's top level: nothing runs at import that needs another module loaded first;
tests/test_native_ops.py checks it).  ``load_all`` imports them.
"""
from __future__ import annotations

import importlib
import pkgutil


def load_all() -> None:
    for m in pkgutil.iter_modules(__path__):
        if not m.name.startswith("_"):
            importlib.import_module(f"{__name__}.{m.name}")

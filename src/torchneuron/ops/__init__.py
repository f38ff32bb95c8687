"""The lowering table, one module per op family.  ``load_all`` imports them."""
from __future__ import annotations

import importlib
import pkgutil


def load_all() -> None:
    for m in pkgutil.iter_modules(__path__):
        if not m.name.startswith("_"):
            importlib.import_module(f"{__name__}.{m.name}")

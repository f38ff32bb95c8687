"""Capturable optimizers for neuron parameters under torch.compile, as for CUDA's.

When Dynamo traces ``optimizer.step()`` for the first time, it sets
``capturable=True`` on every param group whose parameters are all on a GPU
(``p.is_cuda or p.is_xpu``) and have no state yet: the step counters are then
device tensors, updated inside the compiled graph, instead of host numbers
uploaded at every step.  PyTorch's optimizers accept ``capturable`` on the
PrivateUse1 device too (``torch.optim.optimizer._get_capturable_supported_devices``);
only Dynamo's check names the GPUs.  This extends that check to neuron parameters
and changes nothing else: groups on other devices, optimizers with state, and
eager optimizer steps are as PyTorch leaves them.

Installed when torchneuron registers, without importing Dynamo: if
``torch._dynamo.variables.optimizer`` is not imported yet, an import hook patches
it when it is.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

_MODULE = "torch._dynamo.variables.optimizer"


def _neuron_groups_capturable(optimizer) -> None:
    for group in optimizer.param_groups:
        params = group.get("params", [])
        if ("capturable" in group and params
                and all(getattr(p, "device", None) is not None and p.device.type == "neuron"
                        for p in params)
                and all(p not in optimizer.state for p in params)):
            group["capturable"] = True


def _patch(mod) -> None:
    cls = getattr(mod, "OptimizerVariable", None)
    orig = getattr(cls, "_set_capturable", None)
    if orig is None or getattr(orig, "_torchneuron", False):
        return  # another torch: nothing to extend

    def _set_capturable(self, tx):
        _neuron_groups_capturable(self.value)
        return orig(self, tx)

    _set_capturable._torchneuron = True
    _set_capturable.__wrapped__ = orig
    cls._set_capturable = _set_capturable


class _Finder(importlib.abc.MetaPathFinder):
    """Patches the module right after its first import."""

    def find_spec(self, name, path=None, target=None):
        if name != _MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def install() -> None:
    mod = sys.modules.get(_MODULE)
    if mod is not None:
        _patch(mod)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())

"""torchneuron's compatibility module for the name Hugging Face looks for.

transformers (``is_torch_neuron_available``), accelerate (``is_neuron_available``)
and diffusers recognise a Neuron device when a module named ``torch_neuronx``
can be found and ``torch.neuron.is_available()``.  This module is that name for
torchneuron: importing it registers the ``neuron`` device (as ``import
torchneuron`` does).  It is shipped in torchneuron's own distribution, and
carries no code of AWS's ``torch-neuronx`` package; installing both in one
environment is refused with a clear error (they would both own the ``neuron``
device and this module's files).
"""
from __future__ import annotations

import importlib.metadata as _metadata


def _check_no_aws_package() -> None:
    try:
        dist = _metadata.distribution("torch-neuronx")
    except _metadata.PackageNotFoundError:
        return
    raise ImportError(
        f"torch_neuronx: AWS's torch-neuronx {dist.version} is installed next to torchneuron, "
        "which ships a compatibility module of the same name; the two cannot share one "
        "environment (both register the 'neuron' device). Uninstall one of them "
        "(pip uninstall torch-neuronx, or pip uninstall torchneuron).")


_check_no_aws_package()

import torchneuron  # noqa: E402  (registers the device)

__version__ = torchneuron.__version__
TORCHNEURON = True  # this is torchneuron's module, not AWS's

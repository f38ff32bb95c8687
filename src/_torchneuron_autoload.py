"""torchneuron's ``torch.backends`` entry point: what ``import torch`` runs.

A module of its own, outside the ``torchneuron`` package, so that deciding not to
register imports nothing of torchneuron, and a later explicit ``import
torchneuron`` still runs the package and registers the device (the opt-in).

The decision (``TORCHNEURON_AUTOLOAD``, docs/limitations.md "What installing
torchneuron changes"):

- ``auto`` (default): register ``neuron`` unless another accelerator is available
  to torch (CUDA/ROCm GPUs counted through NVML/AMD SMI, without a CUDA context;
  XPU; MPS).  PyTorch makes a registered PrivateUse1 device *the* accelerator
  (``torch.accelerator``, Hugging Face's default device, ``init_process_group()``'s
  default backend, the pinned-memory allocator), so on a GPU host registering at
  ``import torch`` would move users' work off native CUDA; there the user opts in
  with ``import torchneuron`` or ``TORCHNEURON_AUTOLOAD=1``.
- ``1`` / ``on``: always register at ``import torch``;
- ``0`` / ``off``: never at ``import torch`` (``import torchneuron`` still does).

Registering is light (torchneuron/boot.py): jax and the kernels load at the
device's first use.  Nothing here may make ``import torch`` fail: a bad
``TORCHNEURON_*`` value, or any error while registering, is a warning.
"""
from __future__ import annotations

import os
import warnings

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def other_accelerator() -> str | None:
    """The accelerator PyTorch would use without torchneuron ('cuda', 'xpu', 'mps'), or
    None.  Answered without creating a CUDA context: NVML (AMD SMI under ROCm) counts the
    GPUs, as ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` makes ``torch.cuda.is_available()`` do,
    so a program may still fork afterwards."""
    import torch

    try:
        if torch.backends.cuda.is_built():
            count = (torch.cuda._device_count_amdsmi() if torch.version.hip
                     else torch.cuda._device_count_nvml())
            if count > 0:
                return "cuda"
    except Exception:  # noqa: BLE001  (a torch without the private counters)
        pass
    try:
        if getattr(torch._C, "_has_xpu", False) and torch.xpu.is_available():
            return "xpu"
    except Exception:  # noqa: BLE001
        pass
    try:
        if torch.backends.mps.is_available():
            return "mps"
    except Exception:  # noqa: BLE001
        pass
    return None


def decision() -> tuple[bool, str]:
    """(register at ``import torch``?, why)."""
    text = os.environ.get("TORCHNEURON_AUTOLOAD", "auto").strip().lower()
    if text in _OFF:
        return False, "TORCHNEURON_AUTOLOAD=0"
    if text in _ON:
        return True, "TORCHNEURON_AUTOLOAD=1"
    if text not in ("", "auto"):
        warnings.warn(f"TORCHNEURON_AUTOLOAD={os.environ['TORCHNEURON_AUTOLOAD']!r} is not "
                      "one of 'auto', '1' (on), '0' (off); using 'auto'", stacklevel=3)
    import importlib.util

    spec = importlib.util.find_spec("torch_neuronx")
    if spec is not None and spec.origin != "torchneuron":  # not torchneuron's own answer
        # AWS's torch-neuronx (torchneuron ships no module of that name): it owns 'neuron'
        return False, "AWS's torch_neuronx is installed"
    other = other_accelerator()
    if other is not None:
        return False, f"{other} is available (TORCHNEURON_AUTOLOAD=1 or import torchneuron opts in)"
    return True, "auto"


def main() -> None:
    try:
        ok, _why = decision()
        if not ok:
            return
        import torchneuron  # noqa: F401  (registers the device, light)

        from torchneuron import config

        for problem in config.problems():
            warnings.warn(problem, stacklevel=2)
    except Exception as e:  # noqa: BLE001  (import torch must not fail because of us)
        warnings.warn(f"torchneuron: the neuron device was not registered at import torch: "
                      f"{type(e).__name__}: {e}", stacklevel=2)

"""Registering the ``neuron`` device with PyTorch, light; loading the rest at first use.

``import torch`` (through the ``torch.backends`` entry point) or ``import
torchneuron`` calls :func:`register`.  It does only what PyTorch needs to know
that a device named ``neuron`` exists, and imports neither jax nor any of
torchneuron's kernels:

- PrivateUse1 renamed ``neuron`` and the Tensor/Module methods PyTorch generates
  for it (``.neuron()``, ``.is_neuron``);
- ``torch.neuron``: a module that answers ``is_available()``,
  ``manual_seed_all()`` and ``_is_in_bad_fork()`` itself (``torch.manual_seed``
  calls them in every program) and loads the real device module
  (torchneuron/device.py) for anything else;
- the hooks and device guard (the native hooks library when it is built:
  pinned host memory, torchneuron/native/);
- one boxed fallback for the PrivateUse1 dispatch key: the first aten op that
  meets the device (a factory with ``device="neuron"``, ``.to("neuron")``)
  lands there, loads everything (:func:`ensure_loaded`) and redispatches;
  afterwards it is the CPU fallback's entry (dispatch/fallback.py);
- a finder for the module name ``torch_neuronx``, placed after every other
  finder, so Hugging Face's detection finds the device without torchneuron
  shipping files under AWS's package name (AWS's own package, when installed,
  is found first).

This module imports only the standard library, ``torchneuron.config`` and
``torchneuron.native`` at module level (and torch inside functions).
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import threading
import types

_lock = threading.RLock()
_registered = False
_loaded = False
_loading = False
_loader = None  # torchneuron._load: imports and registers the rest
_fallback = None  # the CPU fallback's boxed kernel, once loaded
_fallback_lib = None
_pending_seed = None  # torch.manual_seed() before the device's first use
_device_module = None  # the real torch.neuron (torchneuron.device) once loaded
_version = None  # torchneuron.__version__


def registered() -> bool:
    return _registered


def loaded() -> bool:
    """Whether the device's first use has loaded jax and the kernels."""
    return _loaded


# ---------------------------------------------------------------- torch.neuron
def _is_available() -> bool:
    """Without jax where the answer is known: the default platform falls back to XLA:CPU,
    which always has a device; a named non-CPU platform needs jax to say."""
    from . import config

    try:
        plat = (config.get("TORCHNEURON_PLATFORM") or "").strip().lower()
    except ValueError:
        plat = ""
    if plat in ("", "cpu"):
        return True
    try:
        return ensure_loaded().is_available()
    except Exception:  # noqa: BLE001  (is_available never raises)
        return False


def _is_in_bad_fork() -> bool:
    return False


def _manual_seed_all(seed) -> None:
    global _pending_seed
    if _loaded:
        _device_module.manual_seed_all(seed)
    else:
        _pending_seed = int(seed)


class _DeviceModule(types.ModuleType):
    """``torch.neuron`` before the device's first use: the few functions every program
    may call through PyTorch answer here; any other attribute loads the device."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        mod = ensure_loaded()
        return getattr(mod, name)


def _fill(proxy, mod) -> None:
    for k, v in vars(mod).items():
        if not k.startswith("__"):
            proxy.__dict__[k] = v


_proxy = _DeviceModule("torch.neuron", "The neuron device (torchneuron/device.py, loaded at "
                       "the device's first use).")
_proxy.is_available = _is_available
_proxy._is_in_bad_fork = _is_in_bad_fork
_proxy.manual_seed_all = _manual_seed_all


# ---------------------------------------------------------------- first use
def ensure_loaded():
    """Load jax, the runtime and every kernel (once); the real ``torch.neuron`` module."""
    global _loaded, _loading, _pending_seed, _device_module
    if _loaded:
        return _device_module
    with _lock:
        if _loaded:
            return _device_module
        if _loading:  # a first use from inside the load itself (a kernel module's import)
            return sys.modules["torchneuron.device"]
        if not _registered:
            register()
        _loading = True
        try:
            device = _loader()  # torchneuron._load: returns torchneuron.device
        finally:
            _loading = False
        _device_module = device
        _fill(_proxy, device)
        _loaded = True
        if _pending_seed is not None:
            device.manual_seed_all(_pending_seed)
            _pending_seed = None
    return _device_module


def set_fallback(fn) -> None:
    """The CPU fallback's boxed kernel: ops without a neuron kernel go there once loaded."""
    global _fallback
    _fallback = fn


def _first_use_fallback(op, *args, **kwargs):
    fb = _fallback
    if fb is not None:
        return fb(op, *args, **kwargs)
    ensure_loaded()
    import torch

    # the op's own neuron kernel, registered just now (or the CPU fallback)
    return op.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1),
                         *args, **kwargs)


# ---------------------------------------------------------------- Hugging Face's module name
class _ShimLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__doc__ = ("torchneuron's answer to the module name Hugging Face looks for "
                          "(transformers, accelerate and diffusers recognise a Neuron device "
                          "by it); not AWS's torch-neuronx, and no file of torchneuron's. "
                          "docs/huggingface.md.")
        module.__version__ = _version
        module.TORCHNEURON = True


class _ShimFinder(importlib.abc.MetaPathFinder):
    """Answers ``torch_neuronx`` only when no other finder did: it sits last on
    ``sys.meta_path``, so an installed AWS torch-neuronx is always the one imported."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch_neuronx":
            return None
        return importlib.machinery.ModuleSpec(fullname, _ShimLoader(), origin="torchneuron")


_finder = _ShimFinder()


def install_finder() -> None:
    if not any(isinstance(f, _ShimFinder) for f in sys.meta_path):
        sys.meta_path.append(_finder)


# ---------------------------------------------------------------- c10d
_pg_factory = None  # distributed/process_group.create, set at the first use


def set_process_group_factory(fn) -> None:
    global _pg_factory
    _pg_factory = fn


def _create_process_group(*args, **kwargs):
    ensure_loaded()
    return _pg_factory(*args, **kwargs)


def _register_c10d_name() -> None:
    """The "neuron" c10d backend, its creator loading the device when a group is made:
    ``init_process_group()`` with no backend needs it from the start (PyTorch refuses to
    guess a backend for the registered accelerator), as do ``backend="neuron"`` and
    ``"cpu:gloo,neuron:neuron"``."""
    import torch.distributed as dist

    if not dist.is_available() or "neuron" in dist.Backend.backend_list:
        return
    dist.Backend.register_backend("neuron", _create_process_group, devices=["neuron", "cpu"])


# ---------------------------------------------------------------- registration
def _hooks():
    import torch

    class NeuronHooks(torch._C._acc.PrivateUse1Hooks):
        def is_available(self) -> bool:
            return _is_available()

        def has_primary_context(self, dev_id) -> bool:
            return True

        def is_built(self) -> bool:
            return True

    return NeuronHooks()


def _guard():
    import torch

    class NeuronGuard(torch._C._acc.DeviceGuard):
        def type_(self):
            return torch._C._autograd.DeviceType.PrivateUse1

    return NeuronGuard()


def register(loader=None, version=None) -> None:
    """Make ``neuron`` a PyTorch device, without loading jax (idempotent).  `loader`
    (torchneuron._load) runs at the device's first use."""
    global _registered, _loader, _fallback_lib, _version
    if loader is not None:
        _loader, _version = loader, version
    if _registered:
        return
    with _lock:
        if _registered:
            return
        import torch
        from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

        from . import native

        name = torch._C._get_privateuse1_backend_name()
        if name != "privateuseone":
            # another backend owns PrivateUse1 (AWS's torch-neuronx names its device
            # 'neuron' too), or an earlier registration of torchneuron failed half-way
            raise RuntimeError(
                f"torchneuron: the PrivateUse1 backend is already registered as {name!r}"
                + (" by another package (AWS's torch-neuronx?) or by a failed earlier "
                   "import of torchneuron; torchneuron cannot share a process with it"
                   if name == "neuron" else ""))
        # the C++ hooks first (they can return a pinned-memory allocator); PyTorch then
        # ignores the Python hooks passed below
        if not native.register_hooks(_is_available):
            native.install_python_pinning()
            native.warn_fallback()
        _setup_privateuseone_for_python_backend(
            "neuron", backend_module=_proxy, hook=_hooks(), device_guard=_guard())
        lib = torch.library.Library("_", "IMPL")
        lib.fallback(_first_use_fallback, "PrivateUse1")
        _fallback_lib = lib
        _register_c10d_name()
        install_finder()
        _registered = True

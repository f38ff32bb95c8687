"""torchneuron: a native PyTorch device backend ("neuron") on XLA/PJRT.

``import torchneuron`` (or plain ``import torch`` with the autoload entry
point) makes ``tensor.to("neuron")`` work.  See README.md.
"""
from __future__ import annotations

__version__ = "0.1.0"

_registered = False


def _register() -> None:
    """Register the neuron device with PyTorch (idempotent)."""
    global _registered
    if _registered:
        return
    import torch  # when torch is not imported yet, its autoload registers us right here

    if _registered:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    from . import device, dispatch, runtime  # noqa: F401  (runtime turns on x64)

    runtime.watch_compiles()

    name = torch._C._get_privateuse1_backend_name()
    if name != "privateuseone":
        # another backend owns PrivateUse1 (AWS's torch-neuronx names its device 'neuron'
        # too), or an earlier registration of torchneuron failed half-way
        raise RuntimeError(
            f"torchneuron: the PrivateUse1 backend is already registered as {name!r}"
            + (" by another package (AWS's torch-neuronx?) or by a failed earlier import of "
               "torchneuron; torchneuron cannot share a process with it" if name == "neuron"
               else ""))
    from . import native

    # the C++ hooks first (they can return a pinned-memory allocator); PyTorch then
    # ignores the Python hooks passed below
    if not native.register_hooks(device.is_available):
        native.install_python_pinning()
    _setup_privateuseone_for_python_backend(
        "neuron", backend_module=device, hook=_hooks(), device_guard=_guard())
    _patch_storage_methods()
    from . import amp, kernels, ops  # noqa: F401  (amp: autocast kernels)

    ops.load_all()  # lowerings and their extras (declarations only)
    kernels.load_all()  # eager kernels (declarations only)
    dispatch.install()  # every registration with PyTorch, in one place
    from . import dynamo_skip, upstream_hooks

    upstream_hooks.install()  # PyTorch Python internals extended to neuron tensors
    from . import distributed

    distributed.register()  # the "neuron" c10d backend
    dynamo_skip.skip_loaded_modules()
    _registered = True


def _hooks():
    import torch

    class NeuronHooks(torch._C._acc.PrivateUse1Hooks):
        def is_available(self) -> bool:
            from . import device

            return device.is_available()

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


def _patch_storage_methods() -> None:
    """Storage methods that would need a C++ allocator: route them through torchneuron."""
    import torch

    from . import storage

    def storage_to_neuron(self, device=None, non_blocking=False):
        from .device import index_of as _index_of

        idx = _index_of(torch.device("neuron", device) if isinstance(device, int) else device)
        if self.device.type == "neuron" and self.device.index == idx:
            return self
        src = torch.empty(0, dtype=torch.uint8, device=self.device)
        src.set_(self, 0, (self.nbytes(),), (1,))
        dst = src.to(torch.device("neuron", idx))
        return dst.untyped_storage()

    torch.storage._StorageBase.neuron = storage_to_neuron

    orig_clone = torch.storage._StorageBase.clone

    def clone(self):
        if self.device.type != "neuron":
            return orig_clone(self)
        src = torch.empty(0, dtype=torch.uint8, device=self.device)
        src.set_(self, 0, (self.nbytes(),), (1,))
        return src.clone().untyped_storage()

    torch.storage._StorageBase.clone = clone

    # UntypedStorage.resize_ would reach PrivateUse1 hooks' resizePrivateUse1Bytes,
    # which has no Python slot (FSDP2 frees and refills parameter storage with it)
    orig_resize = torch.UntypedStorage.resize_

    def resize_(self, size):
        if self.device.type != "neuron":
            return orig_resize(self, size)
        storage.resize_storage(self, int(size))
        return self

    torch.UntypedStorage.resize_ = resize_

    # torch.UntypedStorage(n, device="neuron") would reach a C++ allocator that a
    # Python backend cannot register (a null allocator: a crash).  Build the
    # storage here instead: zero bytes in a raw cell that takes the dtype of the
    # first tensor that uses it.
    base_new = torch._C.StorageBase.__new__

    def untyped_new(cls, *args, device=None, **kwargs):
        if device is not None and torch.device(device).type == "neuron":
            from .device import index_of as _index_of

            idx = _index_of(torch.device(device))
            if len(args) == 1 and isinstance(args[0], int) and not kwargs:
                return storage.raw_storage(args[0], idx)
            if len(args) == 1 and not kwargs:  # a sequence of byte values
                data = torch.tensor(list(args[0]), dtype=torch.uint8)
                t = data.to(torch.device("neuron", idx))
                return t.untyped_storage()
            if not args and not kwargs:
                return storage.raw_storage(0, idx)
            raise RuntimeError(f"torchneuron: unsupported UntypedStorage arguments {args} {kwargs}")
        if device is not None:
            kwargs["device"] = device
        return base_new(cls, *args, **kwargs)

    torch.UntypedStorage.__new__ = untyped_new


def set_index_checks(enabled: bool) -> bool:
    """Turn the eager out-of-range index checks on/off (``TORCHNEURON_INDEX_CHECKS``);
    returns the previous setting."""
    from . import lowering

    return lowering.set_index_checks(enabled)


def native_ops() -> dict:
    """{aten overload: Native(kind, family, where)}: every overload that runs natively and
    why (lowered, variant, eager kernel, compile-only, decomposed at first use)."""
    from . import dispatch

    return dispatch.natives()


def fallback_stats() -> dict:
    """{aten op name: calls} for ops that ran on the CPU through the fallback."""
    from . import dispatch

    return dispatch.fallback_stats()


def decomposition_stats() -> dict:
    """{aten op name: calls} for ops run natively through a PyTorch decomposition."""
    from . import dispatch

    return dispatch.decomposition_stats()


def set_fallback_policy(policy: str) -> str:
    """'warn' (default), 'silent' or 'error'; returns the previous policy."""
    from . import dispatch

    return dispatch.set_fallback_policy(policy)


class fallback_policy:
    """Context manager: ``with torchneuron.fallback_policy("error"): ...``"""

    def __init__(self, policy: str):
        self.policy = policy

    def __enter__(self):
        self.prev = set_fallback_policy(self.policy)
        return self

    def __exit__(self, *exc):
        set_fallback_policy(self.prev)
        return False


def set_eager_mode(mode: str) -> str:
    """'op' (default: each eager op runs when called) or 'fused' (ops are recorded and
    run as one cached program when a value is needed; docs/eager.md); returns the
    previous mode (``TORCHNEURON_EAGER``)."""
    from . import storage

    return storage.lazy.set_mode(mode)


def get_eager_mode() -> str:
    from . import storage

    return storage.lazy.mode()


def eager_mode(mode: str):
    """Context manager: ``with torchneuron.eager_mode("fused"): ...``"""
    from . import storage

    return storage.lazy.eager_mode(mode)


def reset_fallback_stats() -> None:
    from . import dispatch

    dispatch.reset_fallback_stats()


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: called by ``import torch``."""
    _register()


_register()

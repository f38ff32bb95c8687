"""torchneuron: a native PyTorch device backend ("neuron") on XLA/PJRT.

``import torchneuron`` (or plain ``import torch`` with the autoload entry
point) makes ``tensor.to("neuron")`` work.  See README.md.
"""
from __future__ import annotations

__version__ = "0.1.0"

def _register_device() -> None:
    """Make ``neuron`` a PyTorch device without importing jax (torchneuron/boot.py);
    everything else loads at the device's first use.  Idempotent."""
    from . import boot

    if boot.registered():
        return
    boot.register(loader=_load, version=__version__)
    _patch_storage_methods()


def _load():
    """The device's first use: jax, the runtime and every kernel (once, through
    ``boot.ensure_loaded``); returns the real ``torch.neuron`` module."""
    from . import device, dispatch, runtime  # noqa: F401  (runtime turns on x64)

    runtime.watch_compiles()
    from . import amp, kernels, ops  # noqa: F401  (amp: autocast kernels)

    ops.load_all()  # lowerings and their extras (declarations only)
    kernels.load_all()  # eager kernels (declarations only)
    dispatch.install()  # every registration with PyTorch, in one place
    from . import dynamo_skip, upstream_hooks

    upstream_hooks.install()  # PyTorch Python internals extended to neuron tensors
    from . import distributed

    distributed.register()  # the "neuron" c10d backend
    dynamo_skip.skip_loaded_modules()
    return device


def _register() -> None:
    """Register the neuron device and load it now (idempotent): what a first use does."""
    from . import boot

    _register_device()
    boot.ensure_loaded()


def _patch_storage_methods() -> None:
    """Storage methods that would need a C++ allocator: route them through torchneuron."""
    import torch

    def storage_to_neuron(self, device=None, non_blocking=False):
        _register()
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
        _register()
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
        _register()
        from . import storage

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
            _register()
            from . import storage
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
    _register()
    from . import lowering

    return lowering.set_index_checks(enabled)


def native_ops() -> dict:
    """{aten overload: Native(kind, family, where)}: every overload that runs natively and
    why (lowered, variant, eager kernel, compile-only, decomposed at first use)."""
    _register()
    from . import dispatch

    return dispatch.natives()


def fallback_stats() -> dict:
    """{aten op name: calls} for ops that ran on the CPU through the fallback."""
    _register()
    from . import dispatch

    return dispatch.fallback_stats()


def decomposition_stats() -> dict:
    """{aten op name: calls} for ops run natively through a PyTorch decomposition."""
    _register()
    from . import dispatch

    return dispatch.decomposition_stats()


def set_fallback_policy(policy: str) -> str:
    """'warn' (default), 'silent' or 'error'; returns the previous policy."""
    _register()
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
    _register()
    from . import storage

    return storage.lazy.set_mode(mode)


def get_eager_mode() -> str:
    _register()
    from . import storage

    return storage.lazy.mode()


def eager_mode(mode: str):
    """Context manager: ``with torchneuron.eager_mode("fused"): ...``"""
    _register()
    from . import storage

    return storage.lazy.eager_mode(mode)


def reset_fallback_stats() -> None:
    _register()
    from . import dispatch

    dispatch.reset_fallback_stats()


def _autoload() -> None:
    """The ``torch.backends`` entry point of earlier installs (now
    ``_torchneuron_autoload:main``): registers, light."""
    _register_device()


_register_device()  # import torchneuron: the device exists (light; loads at first use)

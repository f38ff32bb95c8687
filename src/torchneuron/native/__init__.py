"""The native PrivateUse1 hooks (hostmem.cpp): pinned host memory.

PyTorch pins a CPU tensor (``Tensor.pin_memory()``, ``torch.empty(...,
pin_memory=True)``, DataLoader's pin thread, DDP's reducer) with the C++
allocator that the accelerator's hooks return.  The hooks Python can register
cannot return one (``torch._C._acc.PrivateUse1Hooks.getPinnedMemoryAllocator``
always raises), so once torchneuron makes ``neuron`` the accelerator, every
pin would raise, in CPU-only programs too.  hostmem.cpp is the smallest hooks
object that can answer: compiled once per torch build against the installed
torch's headers (about two seconds), cached under ``TORCHNEURON_CACHE_DIR``
(default ``~/.cache/torchneuron``), loaded with ctypes.

Without a C++ compiler (or with ``TORCHNEURON_NATIVE=0``) the Python hooks are
registered instead and :func:`install_python_pinning` keeps
``Tensor.pin_memory()`` / ``is_pinned()`` (and so DataLoader) working through
CPU-key kernels; only the factories' ``pin_memory=True`` argument then raises
(docs/limitations.md).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import config

_SRC = Path(__file__).with_name("hostmem.cpp")
_lib = None  # the loaded shared library once the native hooks are registered
_available_cb = None  # keeps the ctypes callback alive
_error: str | None = None  # why the native hooks are not in use


def enabled() -> bool:
    try:
        return config.get("TORCHNEURON_NATIVE")
    except ValueError:  # warned about once at import torch (config.problems)
        return True


def cache_dir() -> Path:
    return Path(config.cache_root()) / "native"


def _compiler() -> str | None:
    for c in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if c and shutil.which(c):
            return shutil.which(c)
    return None


def _torch_paths():
    import torch

    root = Path(torch.__file__).parent
    return root / "include", root / "lib"


def _std() -> str:
    """The C++ standard torch's headers need: C++20 from torch 2.14 (operator<=>,
    std::bit_width, string_view::starts_with), C++17 before."""
    import torch

    major_minor = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return "-std=c++20" if major_minor >= (2, 14) else "-std=c++17"


def _tag(cxx: str) -> str:
    import torch

    h = hashlib.sha256()
    h.update(_SRC.read_bytes())
    h.update(_std().encode())  # a build with other flags is another library
    try:  # a compiler upgraded in place is another compiler: a failed build is retried
        st = os.stat(cxx)
        cxx_id = f"{cxx}|{st.st_size}|{st.st_mtime_ns}"
    except OSError:
        cxx_id = cxx
    h.update(f"{torch.__version__}|{torch.version.git_version}|{torch.__file__}|{cxx_id}|"
             f"{sys.platform}".encode())
    return h.hexdigest()[:16]


def _build(cxx: str, out: Path) -> None:
    import torch

    inc, lib = _torch_paths()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.stem + ".", suffix=".so", dir=out.parent)
    os.close(fd)
    cmd = [cxx, "-O2", "-shared", "-fPIC", _std(), "-w", str(_SRC), "-o", tmp,
           f"-I{inc}", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
           f"-L{lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib}"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:2])} ... failed:\n{r.stderr.strip()[-2000:]}")
        os.replace(tmp, out)  # atomic: concurrent builders (test workers) agree
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def library_path() -> Path | None:
    """The compiled hooks library for this torch (built if missing); None if it cannot be."""
    global _error
    cxx = _compiler()
    if cxx is None:
        _error = "no C++ compiler found (set CXX, or install g++)"
        return None
    tag = _tag(cxx)
    so = cache_dir() / f"hostmem-{tag}.so"
    failed = so.with_suffix(".failed")
    if so.exists():
        return so
    if failed.exists():
        _error = failed.read_text()
        return None
    try:
        _build(cxx, so)
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        _error = f"building {_SRC.name} failed: {e}"
        try:
            failed.write_text(_error)
        except OSError:
            pass
        return None
    return so


def register_hooks(is_available) -> bool:
    """Register the native PrivateUse1 hooks; False (with :func:`error` saying why) if the
    Python hooks must be used instead."""
    global _lib, _available_cb, _error
    if _lib is not None:
        return True
    if not enabled():
        _error = "disabled by TORCHNEURON_NATIVE=0"
        return False
    so = library_path()
    if so is None:
        return False
    try:
        lib = ctypes.CDLL(str(so))
    except OSError as e:
        _error = f"loading {so} failed: {e}"
        return False
    proto = ctypes.CFUNCTYPE(ctypes.c_int)
    cb = proto(lambda: 1 if is_available() else 0)
    lib.tn_register_hooks.argtypes = [proto]
    lib.tn_register_hooks.restype = ctypes.c_int
    if not lib.tn_register_hooks(cb):
        _error = "PrivateUse1 hooks were already registered by another package"
        return False
    lib.tn_host_stats.argtypes = [ctypes.POINTER(ctypes.c_size_t)] * 2
    lib.tn_host_stats.restype = None
    lib.tn_storage_set.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                   ctypes.c_int]
    lib.tn_storage_set.restype = ctypes.c_int
    _lib, _available_cb = lib, cb
    return True


_warned = False


def warn_fallback() -> None:
    """Once per process: say that pinned memory runs without the native hooks, and why
    (nothing when the user turned them off with TORCHNEURON_NATIVE=0)."""
    global _warned
    if _warned or not enabled():
        return
    _warned = True
    import warnings

    warnings.warn(
        f"torchneuron: the native hooks library is not in use ({_error}); pinned host "
        "memory runs through Python kernels, and factories' pin_memory=True raises "
        "(docs/limitations.md). TORCHNEURON_NATIVE=0 silences this.", stacklevel=3)


def state() -> str:
    """One line for ``torchneuron info``: the hooks library in use, or why not."""
    if _lib is not None:
        return f"native (built {_lib._name})"
    if not enabled():
        return "python (TORCHNEURON_NATIVE=0)"
    return f"python ({_error})" if _error else "not registered yet"


def active() -> bool:
    """Whether the native hooks (and so real pinned host memory) are in use."""
    return _lib is not None


def error() -> str | None:
    return _error


def host_stats() -> tuple[int, int]:
    """(live pinned blocks, their bytes) from the native allocator; (0, 0) without it."""
    if _lib is None:
        return (0, 0)
    n, b = ctypes.c_size_t(), ctypes.c_size_t()
    _lib.tn_host_stats(ctypes.byref(n), ctypes.byref(b))
    return (n.value, b.value)


def set_storage_memory(cdata: int, addr: int, nbytes: int, index: int) -> bool:
    """Point a neuron StorageImpl (``storage._cdata``) at `addr` with `nbytes` bytes, in
    place; False without the native library."""
    if _lib is None:
        return False
    return bool(_lib.tn_storage_set(cdata, addr, nbytes, index))


# ---------------------------------------------------------------- Python pinning
_py_lib = None


def install_python_pinning() -> None:
    """Without the native hooks: ``Tensor.pin_memory()`` and ``is_pinned()`` through
    CPU-key kernels.  A pinned tensor is a fresh page-aligned-enough CPU copy whose
    storage is marked; other device arguments keep PyTorch's own kernel."""
    global _py_lib
    if _py_lib is not None:
        return
    import torch
    from torch._C import DispatchKey, DispatchKeySet

    composite = DispatchKeySet(DispatchKey.CompositeExplicitAutograd)
    pin_op = torch.ops.aten._pin_memory.default
    is_pinned_op = torch.ops.aten.is_pinned.default

    def ours(device) -> bool:
        return device is None or torch.device(device).type == "neuron"

    def pin(self, device=None):
        if not ours(device):
            return pin_op.redispatch(composite, self, device)
        out = torch.empty_strided(tuple(self.shape), self.stride(), dtype=self.dtype)
        out.copy_(self)
        out.untyped_storage()._tn_pinned = True
        return out

    def is_pinned(self, device=None):
        if not ours(device):
            return is_pinned_op.redispatch(composite, self, device)
        return bool(getattr(self.untyped_storage(), "_tn_pinned", False))

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_pin_memory", pin, "CPU", allow_override=True)
    lib.impl("is_pinned", is_pinned, "CPU", allow_override=True)
    _py_lib = lib


"""torchneuron's on-disk caches, in one place: the cache folder, its size cap, whole-file
writes, private folders and verified entries.

torchneuron keeps compiled executables on disk: jax's persistent compilation cache
(:func:`persistent_cache` points it at ``$TORCHNEURON_CACHE_DIR/xla``, trims it to
its cap once per process with :func:`trim_cache`, and makes jax write entries whole:
:func:`write_whole`), the eager executable store in the same folder
(:func:`store_folder`; what it stores is dispatch/store.py's), and the model scan's
shared XLA cache.  Loading such an entry
runs what it holds: an entry another user could write (a shared, world-writable or
predictable folder such as ``/tmp/...``) would let them run code in our process.  So:

* :func:`private_dir` makes a cache folder (and its parents) owned by the current user
  with mode 0o700, tightens a folder of ours that is looser, and refuses one that is
  not ours or that others can write;
* :func:`verified_write` / :func:`verified_read` keep each entry as an HMAC-SHA256 tag
  followed by the payload.  The HMAC key is a per-user secret (:func:`secret`: 32 random
  bytes in a 0o600 file inside the private cache root, created atomically on first use).
  A read returns None -- the caller's miss -- when the tag does not match (a torn,
  tampered or foreign entry), when the file is not ours or when others can write it.

Only the standard library and :mod:`torchneuron.config` are imported here (jax when the
persistent cache is configured, at the device's first use).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import stat
import tempfile
import threading
import warnings

from . import config

TAG = hashlib.sha256().digest_size  # 32 bytes of HMAC-SHA256 in front of the payload
_MAGIC = b"torchneuron-persist-v1\0"
_SECRET_NAME = ".persist-key"
_SECRET_BYTES = 32
_lock = threading.Lock()
_secrets: dict = {}  # private root -> its secret (read once per process)


def _describe(st) -> str:
    try:
        import pwd

        owner = pwd.getpwuid(st.st_uid).pw_name
    except (ImportError, KeyError):
        owner = str(st.st_uid)
    return f"owner {owner} (uid {st.st_uid}), mode {oct(stat.S_IMODE(st.st_mode))}"


def private_dir(path: str) -> str:
    """`path` (absolute) as a folder only the current user can enter: created (parents
    too) with mode 0o700; an existing folder of ours that is looser is chmod-ed to 0o700.
    Raises PermissionError for a folder that is not ours, that others can write (where we
    cannot tighten it), or that is not a folder (a symlink to one included)."""
    path = os.path.abspath(os.path.expanduser(path))
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except FileExistsError:  # a file (or a dangling link) of that name
        pass
    try:
        st = os.lstat(path)
    except OSError as e:
        raise PermissionError(f"torchneuron: cannot create the cache folder {path}: {e}") from e
    uid = os.getuid()
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(
            f"torchneuron: the cache folder {path} is not a folder (a "
            f"{'symbolic link' if stat.S_ISLNK(st.st_mode) else 'file'}, {_describe(st)}); "
            "remove it or point the cache elsewhere (TORCHNEURON_CACHE_DIR)")
    if st.st_uid != uid:
        raise PermissionError(
            f"torchneuron: refusing the cache folder {path}: it belongs to another user "
            f"({_describe(st)}; you are uid {uid}), who could plant entries that torchneuron "
            "would load and run. Point the cache at a folder of your own "
            "(TORCHNEURON_CACHE_DIR / TORCHNEURON_COMPILE_CACHE_DIR) or remove that folder.")
    if stat.S_IMODE(st.st_mode) & 0o077:
        try:
            os.chmod(path, 0o700)
        except OSError as e:
            raise PermissionError(
                f"torchneuron: refusing the cache folder {path} ({_describe(st)}): others "
                f"can use it and it cannot be made private ({e}); run `chmod 700 {path}` "
                "or point the cache elsewhere (TORCHNEURON_CACHE_DIR)") from e
    return path


def secret(root: str | None = None) -> bytes:
    """The per-user HMAC key kept in the private folder `root` (default: torchneuron's
    cache root, config.cache_root()); made on first use, atomically (written whole under
    a temporary name, then linked to its name: two processes racing agree on one)."""
    root = private_dir(root or config.cache_root())
    with _lock:
        got = _secrets.get(root)
        if got is not None:
            return got
        path = os.path.join(root, _SECRET_NAME)
        key = _read_secret(path)
        if key is None:
            fd, tmp = tempfile.mkstemp(prefix=".persist-key.", dir=root)  # mode 0o600
            try:
                os.write(fd, os.urandom(_SECRET_BYTES))
                os.fsync(fd)
                os.close(fd)
                fd = -1
                try:
                    os.link(tmp, path)  # fails where another process made it first
                except FileExistsError:
                    pass
                except OSError:  # a file system without hard links
                    try:
                        fd2 = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    except FileExistsError:
                        pass
                    else:
                        os.close(fd2)
                        os.replace(tmp, path)
            finally:
                if fd >= 0:
                    os.close(fd)
                try:
                    os.remove(tmp)
                except OSError:
                    pass
            key = _read_secret(path)
            if key is None:
                raise PermissionError(f"torchneuron: could not create the cache key {path}")
        _secrets[root] = key
        return key


def _read_secret(path: str) -> bytes | None:
    """The key at `path`; None when there is none; PermissionError when it is not ours,
    others can read it, or it is not a key."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise PermissionError(f"torchneuron: cannot read the cache key {path}: {e}") from e
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077 \
                or not stat.S_ISREG(st.st_mode):
            raise PermissionError(
                f"torchneuron: refusing the cache key {path} ({_describe(st)}): it must be "
                "a file of yours with mode 0o600; remove it (a new one is made, and "
                "entries written with the old one are compiled again)")
        data = os.read(fd, _SECRET_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != _SECRET_BYTES:
        if not data:  # created but not yet written (a file system without hard links)
            return None
        raise PermissionError(f"torchneuron: the cache key {path} is damaged; remove it")
    return data


def _tag(key: bytes, path: str, payload) -> bytes:
    # the entry's file name is part of what is signed: an entry copied to another name
    # (another cache key) does not verify there
    m = hmac.new(key, _MAGIC + os.path.basename(path).encode() + b"\0", hashlib.sha256)
    m.update(payload)
    return m.digest()


def verified_write(path: str, key: bytes, payload: bytes) -> bool:
    """Write the entry `path` (tag, then `payload`) whole (:func:`write_whole`)."""
    return write_whole(path, _tag(key, path, payload), payload)


def verified_read(path: str, key: bytes) -> bytes | None:
    """The payload of the entry `path`, or None (a miss) when there is none, it is not a
    regular file of ours, others can write it, or its tag does not match."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() \
                or stat.S_IMODE(st.st_mode) & 0o022:
            return None
        with os.fdopen(fd, "rb") as f:
            fd = -1
            blob = f.read()
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(blob) < TAG:
        return None
    payload = memoryview(blob)[TAG:]
    if not hmac.compare_digest(blob[:TAG], _tag(key, path, payload)):
        return None
    return bytes(payload)


# ---------------------------------------------------------------- whole-file writes
def write_whole(path: str, *chunks) -> bool:
    """Write `chunks` (bytes) to `path` as a whole: a temporary file of mode 0o600 in the
    same folder, renamed over `path`, so a process reading the folder meanwhile never
    sees half a file.  False (nothing left behind) where the disk refuses."""
    folder = os.path.dirname(path) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                                   dir=folder)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            for c in chunks:
                f.write(c)
        os.replace(tmp, path)
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass
        return False
    return True


# ---------------------------------------------------------------- persistent compilation cache
# jax's persistent compilation cache, pointed at a torchneuron folder when the device is
# first used (not at import: a program that never touches the device keeps jax as it was).
# Eager executables and compiled graphs are written there, so a second process skips their
# XLA compiles (the trace to StableHLO still runs).  jax decides once per process, at its
# first compile, whether the cache is used: a jax program that compiled before the neuron
# device was first used runs without it.
_cache_configured = False
_cache_dir = None


def persistent_cache():
    """The persistent XLA cache's folder (None when off); configures it on first call."""
    import jax

    global _cache_configured, _cache_dir
    if _cache_configured:
        return _cache_dir
    _cache_configured = True
    current = jax.config.jax_compilation_cache_dir
    if current:  # the program set jax's own cache: keep it and its thresholds
        _cache_dir = current
        return _cache_dir
    env = config.get("TORCHNEURON_COMPILE_CACHE_DIR")
    if env is not None and env.strip().lower() in ("", "0", "off", "none", "false"):
        return None
    path = os.path.abspath(os.path.expanduser(env)) if env else os.path.join(
        config.cache_root(), "xla")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    cap = config.get("TORCHNEURON_COMPILE_CACHE_MAX_SIZE").strip()
    if cap != "-1":
        trim_cache(path, config.parse_bytes(cap))
    try:
        jax.config.update("jax_persistent_cache_min_compile_time_secs",
                          config.get("TORCHNEURON_COMPILE_CACHE_MIN_SECS"))
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    except (AttributeError, KeyError, ValueError):
        pass  # an older jax without an option: its defaults
    _atomic_cache_writes()
    jax.config.update("jax_compilation_cache_dir", path)
    _cache_dir = path
    return _cache_dir


def _atomic_cache_writes() -> None:
    """jax writes a cache entry in place, so a process reading it meanwhile (test workers,
    torchrun ranks sharing the folder) can load half a file: jax then warns and compiles.
    Entries are written to a temporary name and renamed instead (local folders without
    jax's own size cap, the setting used here)."""
    try:
        from jax._src import lru_cache
    except ImportError:
        return
    cls = getattr(lru_cache, "LRUCache", None)
    orig = getattr(cls, "put", None)
    suffix = getattr(lru_cache, "_CACHE_SUFFIX", None)
    if orig is None or suffix is None or getattr(orig, "_torchneuron", False):
        return

    def put(self, key, value):
        if getattr(self, "eviction_enabled", True) or not key:
            return orig(self, key, value)
        target = os.path.join(str(self.path), f"{key}{suffix}")
        if not os.path.exists(target):
            write_whole(target, value)  # a read-only or full disk: kept in memory only
        return None

    put._torchneuron = True
    put.__wrapped__ = orig
    cls.put = put


def trim_cache(path, cap: int) -> int:
    """Delete the oldest-written executables of the cache folder `path` until it holds at
    most `cap` bytes; the bytes kept.  Run once per process, when the cache is configured:
    jax's own size cap rescans the whole folder at every write (quadratic in entries: a
    test file of 2,000 eager executables took 1.6x as long with it), so the cap is ours and
    a process may pass it by what it writes until the next process starts."""
    entries = []
    try:
        with os.scandir(path) as it:
            for e in it:
                if e.name.endswith("-cache") and e.is_file():
                    st = e.stat()
                    entries.append((st.st_mtime, e.path, st.st_size))
    except OSError:
        return 0
    total = sum(size for _, _, size in entries)
    for _, p, size in sorted(entries):
        if total <= cap:
            break
        try:
            os.remove(p)
        except OSError:  # another process trimmed it first
            pass
        total -= size
    return total


# ---------------------------------------------------------------- the eager executable store
_store: dict = {}  # persistent cache folder -> (its path, HMAC key) or None (refused)


def store_folder():
    """(folder, HMAC key) of the eager executable store: the persistent cache's folder,
    made private (:func:`private_dir`) with the per-user key (:func:`secret`); None when the
    cache is off, or (with a warning, once) where the folder cannot be made private or the
    key cannot be had."""
    d = persistent_cache()
    if d is None:
        return None
    got = _store.get(d, False)
    if got is False:
        try:
            got = (private_dir(d), secret())
        except OSError as e:  # PermissionError included
            warnings.warn(f"torchneuron: the eager executable store is off: {e}", stacklevel=3)
            got = None
        _store[d] = got
    return got

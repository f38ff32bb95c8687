"""Safe on-disk caches: private folders and verified entries.

torchneuron keeps compiled executables on disk (the eager executable store, jax's
persistent compilation cache, the model scan's shared XLA cache).  Loading such an entry
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

Only the standard library and :mod:`torchneuron.config` are imported here.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import stat
import tempfile
import threading

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
    """Write the entry `path` (tag, then `payload`) whole: a temporary file of mode 0o600
    in the same folder, renamed over `path`.  False (nothing left behind) where the disk
    refuses."""
    folder = os.path.dirname(path) or "."
    tag = _tag(key, path, payload)
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                                   dir=folder)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(tag)
            f.write(payload)
        os.replace(tmp, path)
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass
        return False
    return True


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

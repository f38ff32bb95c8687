"""Every ``TORCHNEURON_*`` environment knob, in one table, read in one place.

Each knob is read with :func:`get` where its value is used, and when: knobs read
at import (the fallback policy, cache sizes) are fixed for the process, the
others (the memory limit per device, donation, dump folder) are read at their
first use.  README's table of environment variables is this table
(tests/test_config.py keeps them equal); ``torchneuron config`` prints the values
in effect.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Knob:
    name: str
    default: str | None
    kind: str  # "str" | "int" | "float" | "bool" | "choice" | "path" | "bytes"
    doc: str
    choices: tuple = ()
    internal: bool = False  # set by torchneuron's own tools, not by users


_OFF = ("0", "false", "no", "off")
_ON = ("1", "true", "yes", "on", "")

KNOBS = {k.name: k for k in [
    Knob("TORCHNEURON_AUTOLOAD", "auto", "choice",
         "`auto` (default): `import torch` registers the `neuron` device (light: jax loads at "
         "the device's first use) unless another accelerator (CUDA, ROCm, XPU, MPS) is "
         "available to torch, which a registered device would displace as "
         "`torch.accelerator`; `1`: always; `0`: never (`import torchneuron` still "
         "registers). `TORCH_DEVICE_BACKEND_AUTOLOAD=0` turns off every backend's autoload.",
         choices=("auto", "1", "0", "on", "off", "true", "false", "yes", "no")),
    Knob("TORCHNEURON_PLATFORM", "", "str",
         "PJRT platform behind `neuron` (`cpu`, `cuda`, ...). Default: a GPU platform if jax "
         "has one, else `cpu`. `neuron:N` is that platform's device N."),
    Knob("TORCHNEURON_COLLECTIVES", "gloo", "choice",
         "engine of the `neuron` c10d backend for neuron tensors: `gloo` (default: gloo over "
         "host memory, zero-copy reads on XLA:CPU) or `xla` (collectives inside XLA across "
         "processes through `jax.distributed`: gloo on CPU, NCCL on CUDA, no host copy; "
         "set before the program starts, under torchrun). docs/distributed.md.",
         choices=("gloo", "xla")),
    Knob("TORCHNEURON_XLA_COORDINATOR", "", "str",
         "with `TORCHNEURON_COLLECTIVES=xla`: `host:port` of jax's coordinator (default: "
         "torchrun's MASTER_ADDR and MASTER_PORT + 1)."),
    Knob("TORCHNEURON_FALLBACK", "warn", "choice",
         "`warn` (default: warn once per op), `silent`, or `error` (raise instead of running "
         "an op on the CPU). `torchneuron.fallback_policy(\"error\")` does the same in a "
         "`with` block.", choices=("warn", "silent", "error")),
    Knob("TORCHNEURON_MEMORY_LIMIT", None, "bytes",
         "cap on device bytes held by tensors (`512MiB`, `2GiB`, ...); past it, allocations "
         "raise `torch.OutOfMemoryError`. Also `torch.neuron.set_per_process_memory_fraction` "
         "/ `torch.neuron.set_memory_limit`."),
    Knob("TORCHNEURON_EXECUTABLE_CACHE", "8192", "int",
         "executables kept per op in eager mode (default 8192)."),
    Knob("TORCHNEURON_EAGER", "op", "choice",
         "`op` (default): every eager op runs as its own executable when called; `fused`: "
         "eager ops are recorded into a pending program per device, run as one cached XLA "
         "computation when a value is needed (results bit-identical to `op`). "
         "`torchneuron.eager_mode(\"fused\")` does the same in a `with` block. docs/eager.md.",
         choices=("op", "fused")),
    Knob("TORCHNEURON_FUSE_MAX_OPS", "256", "int",
         "fused eager: run the pending program once it holds this many ops (default 256)."),
    Knob("TORCHNEURON_MAPS_FRACTION", "0.5", "float",
         "past this fraction (default 0.5) of Linux's `vm.max_map_count`, the least "
         "recently used half of every cache of XLA executables is dropped (eager ops "
         "rebuild theirs when next used), and every executable only if that is not "
         "enough; without `/proc`, `TORCHNEURON_MAX_LIVE_EXECUTABLES` (4096) compiles "
         "trigger the trim. Keeps long processes from crashing inside the XLA compiler."),
    Knob("TORCHNEURON_MAX_LIVE_EXECUTABLES", "4096", "int",
         "without `/proc`: drop the least recently used half of the cached XLA "
         "executables every this many compiles."),
    Knob("TORCHNEURON_TIERED", "1", "bool",
         "`1` (default): on XLA:CPU an eager executable first compiles with the faster-to-"
         "compile emitters, and once hot (`TORCHNEURON_TIER_UP_CALLS` calls) again with the "
         "default ones in the background (results bit-identical); `0`: default compiles "
         "only. docs/eager.md."),
    Knob("TORCHNEURON_TIER_UP_CALLS", "16", "int",
         "calls after which a tier-1 eager executable is compiled again, optimised "
         "(default 16)."),
    Knob("TORCHNEURON_EAGER_BUCKETS", "256KiB", "bytes",
         "a tensor grown by an eager `cat` a step (generated ids, an attention mask, a small "
         "key/value cache): once a `cat` call signature has shown more than 3 lengths, a "
         "result of at most this size (default 256KiB) goes into a buffer of its element "
         "count rounded up to a power of two, one executable per bucket, not per length "
         "(docs/eager.md); `0`: off."),
    Knob("TORCHNEURON_TIER_CHECK", "0", "bool",
         "`1`: compile both tiers of every tiered eager executable at its first call, run both "
         "and raise if a result differs in a bit (a check of the tiering, slow)."),
    Knob("TORCHNEURON_INDEX_CHECKS", "1", "bool",
         "`1` (default): advanced indexing checks index bounds like CPU/CUDA (one host read "
         "per indexing op); `0` skips the check (faster; out-of-range gathers then read NaN "
         "or the minimum integer and out-of-range scatters are dropped)."),
    Knob("TORCHNEURON_SDPA", "fused", "choice",
         "`math` runs `scaled_dot_product_attention` as PyTorch's math decomposition instead "
         "of the fused executable (needed for forward-mode AD through attention).",
         choices=("fused", "math")),
    Knob("TORCHNEURON_NATIVE", "1", "bool",
         "`1` (default): register the small C++ hooks library (pinned host memory; compiled "
         "once per torch build with the system C++ compiler, `CXX` to choose one); `0`: "
         "Python hooks only, pinning through Python kernels (docs/limitations.md)."),
    Knob("TORCHNEURON_CACHE_DIR", None, "path",
         "root of torchneuron's on-disk caches (default `$XDG_CACHE_HOME/torchneuron`, else "
         "`~/.cache/torchneuron`): the compiled hooks library (`native/`) and the persistent "
         "XLA compilation cache (`xla/`)."),
    Knob("TORCHNEURON_DUMP_DIR", "", "path",
         "torch.compile: every compiled graph's StableHLO and a summary are written here "
         "(docs/compile.md)."),
    Knob("TORCHNEURON_COMPILE_CACHE_DIR", None, "path",
         "the persistent compilation caches of eager ops (the eager executable store: no "
         "trace on a warm first call) and torch.compile graphs (jax's cache), so a second "
         "run starts warm (default `$TORCHNEURON_CACHE_DIR/xla`; `off` disables both; a "
         "folder set with jax's own `jax_compilation_cache_dir` wins). docs/eager.md."),
    Knob("TORCHNEURON_COMPILE_CACHE_MIN_SECS", "0", "float",
         "only executables that took at least this long to compile are written to the "
         "persistent cache (default 0: all)."),
    Knob("TORCHNEURON_COMPILE_CACHE_MAX_SIZE", "2GiB", "bytes",
         "size cap of the persistent XLA cache (`512MiB`, `2GiB`, ...; default 2GiB): when "
         "a process first uses the device, the oldest-written executables past it are "
         "deleted; `-1` for no cap."),
    Knob("TORCHNEURON_COMPILE_CACHE_SIZE", "64", "int",
         "torch.compile: XLA executables kept per graph (one per input signature; default "
         "64, least recently used out)."),
    Knob("TORCHNEURON_COMPILE_BUCKETS", "16", "int",
         "torch.compile: the smallest shape bucket (default 16). A graph with symbolic sizes "
         "(`dynamic=True`, `mark_dynamic`) runs a size of at least half of it padded to this "
         "doubled until it fits (16, 32, 64, ...), one executable per bucket, where the "
         "graph keeps the true outputs exact (docs/compile.md); `0`: one executable per "
         "size."),
    Knob("TORCHNEURON_COMPILE_DONATE", "1", "bool",
         "torch.compile: `0` turns off buffer donation for mutated inputs."),
    Knob("TORCHNEURON_SCAN_XLA_CACHE", None, "path",
         "`torchneuron scan`: the XLA compilation cache its model processes share (default "
         "`$TORCHNEURON_CACHE_DIR/scan-xla`; made private to the user, mode 0o700, and "
         "refused when another user's or writable by others; `off` disables it)."),
    Knob("TORCHNEURON_CONFORMANCE_ROOT", None, "path",
         "set by `torchneuron conformance --snapshot`: the checkout reports are written to.",
         internal=True),
    Knob("TORCHNEURON_CONFORMANCE_SNAPSHOT", None, "str",
         "set by `torchneuron conformance --snapshot`: the commit being swept.", internal=True),
    Knob("TORCHNEURON_TEST_WORKERS", "2", "int",
         "the project's test scripts: pytest worker processes (0: in-process).", internal=True),
    Knob("TORCHNEURON_SKIP_GATE", None, "str",
         "the project's test suite: `1` skips the conformance and model-scan gates.",
         internal=True),
    Knob("TORCHNEURON_SKIP_SLOW", None, "str",
         "the project's test suite: `1` skips tests that spawn worker processes.",
         internal=True),
]}


def raw(name: str) -> str | None:
    """The environment's text for a knob (None when unset)."""
    if name not in KNOBS:
        raise KeyError(f"torchneuron: unknown configuration knob {name}")
    return os.environ.get(name)


_FORMS = {
    "int": "an integer (e.g. 8192)",
    "float": "a number (e.g. 0.5)",
    "bool": "1/0, true/false, yes/no or on/off",
    "bytes": "a size such as 512MiB, 2GiB, 1.5g or a byte count (-1: no cap)",
}


def _parse(knob: Knob, text: str):
    """`text` parsed as `knob`'s kind; ValueError naming the variable, the value and the
    accepted forms."""
    t = text.strip()
    try:
        if knob.kind == "int":
            return int(t)
        if knob.kind == "float":
            return float(t)
        if knob.kind == "bool":
            v = t.lower()
            if v in _OFF:
                return False
            if v in _ON:
                return True
            raise ValueError
        if knob.kind == "bytes":
            parse_bytes(t)
            return t
        if knob.kind == "choice":
            v = t.lower()
            if v not in knob.choices:
                raise ValueError
            return v
    except ValueError:
        forms = (_FORMS[knob.kind] if knob.kind in _FORMS
                 else "one of " + ", ".join(repr(c) for c in knob.choices))
        raise ValueError(f"{knob.name}={text!r} is not valid: expected {forms}") from None
    return text


def get(name: str):
    """A knob's value, parsed: the environment's, else the default.  A malformed value
    raises ValueError naming the variable, the value and the accepted forms."""
    knob = KNOBS[name]
    text = os.environ.get(name)
    if text is None:
        text = knob.default
    if text is None:
        return None
    return _parse(knob, text)


def problems() -> list:
    """Every malformed ``TORCHNEURON_*`` value and unknown ``TORCHNEURON_*`` name in the
    environment, as messages (checked once, when ``import torch`` registers the device;
    a bad value also raises where it is used)."""
    out = []
    for name, text in sorted(os.environ.items()):
        if not name.startswith("TORCHNEURON_"):
            continue
        knob = KNOBS.get(name)
        if knob is None:
            close = [k for k in KNOBS if k[12:15] == name[12:15]]
            out.append(f"{name} is not a torchneuron setting (ignored)"
                       + (f"; did you mean {', '.join(close)}?" if close else
                          "; `torchneuron config` lists them"))
            continue
        try:
            _parse(knob, text)
        except ValueError as e:
            out.append(f"torchneuron: {e}")
    return out


def parse_bytes(text: str) -> int:
    """`512MiB`, `2GiB`, `1.5g`, `1000000` -> bytes."""
    t = text.strip().lower().replace(" ", "")
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
             "kb": 1000, "mb": 1000**2, "gb": 1000**3, "k": 1 << 10, "m": 1 << 20,
             "g": 1 << 30, "b": 1}
    for u, mul in units.items():
        if t.endswith(u):
            n = float(t[: -len(u)])
            if n < 0 or n != n:
                raise ValueError(f"not a size: {text!r}")
            return int(n * mul)
    return int(t)


def cache_root() -> str:
    """The folder of torchneuron's on-disk caches (TORCHNEURON_CACHE_DIR)."""
    d = get("TORCHNEURON_CACHE_DIR")
    if d:
        return os.path.abspath(os.path.expanduser(d))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torchneuron")


def markdown_rows() -> list:
    """README's table rows, one per user knob."""
    return [f"| `{k.name}` | {k.doc} |" for k in KNOBS.values() if not k.internal]


def describe() -> list:
    """[(name, value in effect, set in the environment?, doc)] for every user knob."""
    return [(k.name, get(k.name), k.name in os.environ, k.doc)
            for k in KNOBS.values() if not k.internal]

"""The ``torchneuron`` command's front (``torchneuron`` and ``python -m torchneuron``).

A module of its own, outside the ``torchneuron`` package: ``--help``, ``--version``, an
unknown command and a missing optional dependency answer without importing torch or
torchneuron, so nothing is registered and nothing loads.  A command imports
torchneuron and runs (torchneuron/cli.py).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys

# name: (module, function, what it does); a None module means torchneuron.cli's own
COMMANDS = {
    "demo": ("torchneuron.demo", "main", "train a CNN on digits on the neuron device"),
    "info": (None, "_info", "versions, devices and the native hooks library's state"),
    "config": (None, "_config", "the TORCHNEURON_* settings in effect"),
    "conformance": ("torchneuron.tools.conformance", "main", "run the OpInfo conformance sweep"),
    "ops": ("torchneuron.tools.native_ops", "main",
            "write docs/native-ops.md (a checkout) or print it (a wheel) from the registry"),
    "scan": ("torchneuron.tools.model_scan", "main", "run the Hugging Face model scan"),
    "fuzz": ("torchneuron.tools.fuzz", "main", "random programs on neuron against the CPU"),
    "workloads": ("torchneuron.tools.workloads_report", "main",
                  "generation and training workloads, long, against the CPU"),
}

# what a command imports beyond torchneuron's own dependencies: (module, distribution)
NEEDS = {
    "demo": [("sklearn", "scikit-learn")],
    "conformance": [("expecttest", "expecttest")],
    "scan": [("transformers", "transformers")],  # diffusers only for the diffusers:* models
    "fuzz": [("hypothesis", "hypothesis")],
    "workloads": [("transformers", "transformers"), ("sklearn", "scikit-learn"),
                  ("matplotlib", "matplotlib")],
}
EXTRA = {"demo": "demo", "fuzz": "fuzz"}  # the pyproject extra that installs them; else "tools"


def version() -> str:
    from importlib import metadata

    try:
        return metadata.version("torchneuron")
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return "unknown (not installed)"


def usage() -> str:
    lines = ["usage: torchneuron [--version] [--help] <command> [options]", "",
             "A PyTorch device backend ('neuron') on XLA/PJRT. `torchneuron <command> --help` "
             "for a command's options.", "", "commands:"]
    lines += [f"  {name:12s} {doc}" for name, (_, _, doc) in COMMANDS.items()]
    return "\n".join(lines)


def _importable(mod: str) -> bool:
    try:
        return importlib.util.find_spec(mod) is not None
    except (ImportError, ValueError):
        return False


def missing(cmd: str) -> list[str]:
    return [dist for mod, dist in NEEDS.get(cmd, []) if not _importable(mod)]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(f"torchneuron {version()}")
        return 0
    cmd = argv.pop(0)
    if cmd not in COMMANDS:
        print(f"{usage()}\n\ntorchneuron: error: unknown command {cmd!r}", file=sys.stderr)
        return 2
    lacking = missing(cmd)
    if lacking:
        print(f"torchneuron {cmd} needs {', '.join(lacking)}, which is not installed: "
              f"pip install 'torchneuron[{EXTRA.get(cmd, 'tools')}]'", file=sys.stderr)
        return 2
    mod, fn, _ = COMMANDS[cmd]
    if mod is None:
        from torchneuron import cli

        return getattr(cli, fn)(argv)
    return getattr(importlib.import_module(mod), fn)(argv)


if __name__ == "__main__":
    sys.exit(main())

"""The ``torchneuron`` command: ``torchneuron demo``, ``torchneuron info``, ..."""
from __future__ import annotations

import sys


def _info(argv) -> int:
    import jax
    import torch

    import torchneuron
    from torchneuron import runtime

    print(f"torchneuron {torchneuron.__version__}")
    print(f"torch       {torch.__version__}")
    print(f"jax         {jax.__version__}")
    print(f"platform    {runtime.platform()}")
    for i in range(torch.neuron.device_count()):
        print(f"neuron:{i}    {torch.neuron.get_device_name(i)}")
    return 0


def _config(argv) -> int:
    from torchneuron import config

    for name, value, is_set, doc in config.describe():
        print(f"{name:36s} {value!r:>10}  {'(set)' if is_set else '(default)'}")
    return 0


COMMANDS = {
    "demo": ("torchneuron.demo", "main", "train a CNN on digits on the neuron device"),
    "info": (None, _info, "versions and devices"),
    "config": (None, _config, "the TORCHNEURON_* settings in effect"),
    "conformance": ("torchneuron.tools.conformance", "main", "run the OpInfo conformance sweep"),
    "ops": ("torchneuron.tools.native_ops", "main", "write docs/native-ops.md from the registry"),
    "scan": ("torchneuron.tools.model_scan", "main", "run the Hugging Face model scan"),
    "fuzz": ("torchneuron.tools.fuzz", "main", "random programs on neuron against the CPU"),
    "workloads": ("torchneuron.tools.workloads_report", "main",
                  "generation and training workloads, long, against the CPU"),
}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: torchneuron <command> [options]\n\ncommands:")
        for name, (_, _, doc) in COMMANDS.items():
            print(f"  {name:12s} {doc}")
        return 0
    cmd = argv.pop(0)
    if cmd not in COMMANDS:
        print(f"torchneuron: unknown command {cmd!r}", file=sys.stderr)
        return 2
    mod, fn, _ = COMMANDS[cmd]
    if mod is None:
        return fn(argv)
    import importlib

    return getattr(importlib.import_module(mod), fn)(argv)


if __name__ == "__main__":
    sys.exit(main())

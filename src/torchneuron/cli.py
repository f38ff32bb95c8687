"""The ``torchneuron`` command: ``torchneuron demo``, ``torchneuron info``, ..."""
from __future__ import annotations

import sys


def _info(argv) -> int:
    import jax
    import torch

    import torchneuron
    from _torchneuron_autoload import decision
    from torchneuron import native, runtime

    on, why = decision()
    acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None

    print(f"torchneuron {torchneuron.__version__}")
    print(f"torch       {torch.__version__}")
    print(f"jax         {jax.__version__}")
    print(f"platform    {runtime.platform()}")
    print(f"hooks       {native.state()}")
    print(f"autoload    {'registers neuron at import torch' if on else 'off'} ({why})")
    print(f"accelerator {acc}")
    for i in range(torch.neuron.device_count()):
        print(f"neuron:{i}    {torch.neuron.get_device_name(i)}")
    return 0


def _config(argv) -> int:
    from torchneuron import config

    for name, value, is_set, doc in config.describe():
        print(f"{name:36s} {value!r:>10}  {'(set)' if is_set else '(default)'}")
    return 0


def main(argv=None) -> int:
    """The ``torchneuron`` command (its front, _torchneuron_cli, answers --help and
    --version without importing torch)."""
    from _torchneuron_cli import main as front

    return front(argv)


if __name__ == "__main__":
    sys.exit(main())

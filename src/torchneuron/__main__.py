"""``python -m torchneuron <command>``: the ``torchneuron`` command (_torchneuron_cli)."""
import sys

from _torchneuron_cli import main

sys.exit(main())

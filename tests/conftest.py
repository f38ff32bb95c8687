import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

# The suite runs without the persistent XLA cache (its subprocesses inherit this), so one
# run does not depend on what an earlier run left in ~/.cache and its time stays
# comparable between runs; tests/test_persistent_cache.py and test_compile.py's
# persistent-cache test turn it on in their own folders.
os.environ.setdefault("TORCHNEURON_COMPILE_CACHE_DIR", "off")

import pytest  # noqa: E402
import torch  # noqa: E402

import torchneuron  # noqa: E402,F401


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield

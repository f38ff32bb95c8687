#!/usr/bin/env bash
# Fused eager (TORCHNEURON_EAGER=fused, docs/eager.md): a representative subset of the suite
# run with every eager op recorded into fused programs (views and aliasing, training,
# optimizers, random numbers, copies, autograd, executable release, interpolation,
# FFT, FP8/int8 matmuls, the persistent executable store).  Run after scripts/test.sh (its .venv).
# Pass test files or pytest options to run something else.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
if [ "$#" -eq 0 ]; then
  set -- tests/test_views.py tests/test_training.py tests/test_optim.py tests/test_random.py \
         tests/test_copy.py tests/test_fused_eager.py tests/test_executables.py \
         tests/test_upsample.py tests/test_fft.py tests/test_lowp_matmul.py \
         tests/test_persistent_cache.py
fi
TORCHNEURON_EAGER=fused python -m pytest -n "${TORCHNEURON_TEST_WORKERS:-2}" --dist loadfile \
  -p no:cacheprovider "$@"

#!/usr/bin/env bash
# Set up (idempotent) and run the main job: train the digits CNN on the neuron device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
python -m torchneuron.demo "$@"

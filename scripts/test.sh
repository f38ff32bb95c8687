#!/usr/bin/env bash
# Set up (idempotent) and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
python -m pytest tests "$@"

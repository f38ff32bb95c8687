#!/usr/bin/env bash
# Set up (idempotent) and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
# the layering contract (pyproject.toml [tool.importlinter], docs/architecture.md)
lint-imports --no-cache
# one test file per worker process (a module's fixtures run once); TORCHNEURON_TEST_WORKERS=0
# runs everything in this process
workers="${TORCHNEURON_TEST_WORKERS:-2}"
if [ "$workers" = "0" ]; then
  python -m pytest tests "$@"
else
  python -m pytest tests -n "$workers" --dist loadfile --durations=20 "$@"
fi

#!/usr/bin/env bash
# Create .venv (if missing) and install torchneuron with what the demo and tests need.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python -m pip install -q -r requirements-ci.txt
python -m pip install -q --no-deps -e .

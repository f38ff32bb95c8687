#!/usr/bin/env bash
# torchneuron the way users get it: run by scripts/test_torch211.sh after it installs the
# wheel built from this tree (not editable) into .venv-torch211.  From an empty folder (no
# source tree on the path): the main job and every subcommand of the `torchneuron` command
# (the gates on a sample of their units; the whole gates run in scripts/test.sh), with the
# data they read coming from the installed package.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
export TORCHNEURON_CACHE_DIR="$work/cache"
python - "$src" <<'PY'
import importlib.metadata as md, sys, torchneuron, _torchneuron_cli
import os
# the venv may live inside the checkout (.venv-torch211): what must not be used is its src/
src = os.path.join(os.path.realpath(sys.argv[1]), "src") + os.sep
for m in (torchneuron, _torchneuron_cli):
    path = os.path.realpath(m.__file__)
    assert not path.startswith(src), f"{m.__name__} imported from the source tree: {path}"
    assert "site-packages" in path.split(os.sep), f"{m.__name__} not from an installed package: {path}"
dist = md.distribution("torchneuron")
assert not any(str(f).endswith(".pth") for f in dist.files), "an editable install, not the wheel"
print(f"installed: torchneuron {dist.version} from {torchneuron.__file__}")
PY
PS4='+ [${SECONDS}s] '
set -x
torchneuron --version
torchneuron --help > help.txt
grep -q "conformance" help.txt
python -m torchneuron info
torchneuron config > config.txt
grep -q "TORCHNEURON_AUTOLOAD" config.txt
torchneuron ops > native-ops.md
grep -q '`add.Tensor`' native-ops.md
torchneuron demo --no-progress
torchneuron fuzz --programs 20 --no-progress --out fuzz
torchneuron conformance --gate --ops add,mm -q
torchneuron scan --gate --only bert --no-progress

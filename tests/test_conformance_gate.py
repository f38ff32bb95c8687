"""CI gate: a fixed, deterministic sample of the OpInfo conformance sweep vs the baseline.

Runs ``GATE_OPS`` (float32 forward + backward) and ``GATE_EXTRA`` (a few ops in
bfloat16 and int64) through the same worker pool as ``torchneuron
conformance``, then compares every row with src/torchneuron/tools/data/conformance_baseline.csv:

- a row that the baseline expects to PASS and that now fails (or falls back)
  is a regression;
- a row that the baseline lists as failing and that now passes (or fails
  differently) means the baseline is stale: regenerate it with
  ``torchneuron conformance --gate --update-baseline`` and commit it.

Set TORCHNEURON_SKIP_GATE=1 to skip (e.g. on a machine busy with other work).
"""
from __future__ import annotations

import os

import pytest

from torchneuron.tools import conformance as C

pytestmark = pytest.mark.skipif(os.environ.get("TORCHNEURON_SKIP_GATE") == "1",
                                reason="TORCHNEURON_SKIP_GATE=1")

GATE_IDS = list(dict.fromkeys(C.GATE_OPS + [o for ops in C.GATE_EXTRA.values() for o in ops]))


@pytest.fixture(scope="module")
def gate_rows(tmp_path_factory):
    path = tmp_path_factory.mktemp("gate") / "gate.jsonl"
    return C.run_gate(workers=2, timeout=300.0, results_path=str(path), progress=False)


@pytest.fixture(scope="module")
def baseline():
    assert os.path.exists(C.DEFAULT_BASELINE), "src/torchneuron/tools/data/conformance_baseline.csv is missing"
    return C.load_baseline(C.DEFAULT_BASELINE)


def test_gate_covers_its_units(gate_rows):
    units = {(r["op"], r["dtype"]) for r in gate_rows}
    assert len(units) >= 60
    statuses = {r["status"] for r in gate_rows}
    assert "PASS" in statuses
    # every gate op ran in at least one dtype (float32, or its GATE_EXTRA dtypes)
    for oid in C.GATE_OPS:
        rows = [r for r in gate_rows if r["op"] == oid]
        assert rows, f"{oid}: no rows (removed from op_db?)"


@pytest.mark.parametrize("oid", GATE_IDS)
def test_gate_matches_baseline(oid, gate_rows, baseline):
    rows = [r for r in gate_rows if r["op"] == oid]
    if not rows:
        pytest.skip(f"{oid} is not in this torch's op_db")
    problems = C.compare_to_baseline(rows, baseline)
    assert not problems, (
        "conformance gate disagrees with src/torchneuron/tools/data/conformance_baseline.csv "
        "(fix the regression, or run `torchneuron conformance --gate --update-baseline` "
        "and commit the baseline):\n" + "\n".join(C.format_problem(p) for p in problems))

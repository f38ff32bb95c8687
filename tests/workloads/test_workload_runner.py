"""The runner of ``torchneuron workloads``: a group in a fresh process, a record per
workload; a process that dies is reported, not lost."""
from __future__ import annotations

from torchneuron.tools import workloads_report as R


def test_group_runs_in_a_fresh_process():
    (rec,) = R.run_group(["gpt2/eos"], "ci", "op", timeout=600)
    assert rec["status"] == "PASS" and rec["eager"] == "op", rec
    assert rec["device_s"] > 0 and rec["cpu_s"] > 0 and rec["compiles"] > 0, rec


def test_dead_worker_is_a_crash_record():
    recs = R.run_group(["no/such-workload"], "ci", "op", timeout=300)
    assert [r["status"] for r in recs] == ["CRASH"], recs
    assert "KeyError" in recs[0]["detail"], recs

"""The module_db / optim_db conformance sweeps (``torchneuron conformance --db modules|optims``).

- The checks can fail: a module and an optimizer that behave differently on the device
  come out MISMATCH, one that raises there comes out ERROR, a configuration the CPU
  rejects comes out SKIP with the CPU's error.
- The CI gate: a fixed sample of PyTorch's ModuleInfos and OptimizerInfos run through the
  same worker pool as the full sweep, each row compared with its baseline
  (src/torchneuron/tools/data/conformance_{modules,optims}_baseline.csv) in both
  directions.  Regenerate with ``torchneuron conformance --db modules --gate --update-baseline``.

Set TORCHNEURON_SKIP_GATE=1 to skip the gate (e.g. on a machine busy with other work).
"""
from __future__ import annotations

import os

import pytest
import torch

from helpers import DEV
from torchneuron.tools import conformance as C
from torchneuron.tools import nn_conformance as N
from torchneuron.tools import nn_conformance_worker as W


def _test_case():
    from torch.testing._internal.common_utils import TestCase

    return TestCase()


class _OffOnDevice(torch.nn.Module):
    """Linear, but wrong on the neuron device by `delta` (or raising there)."""

    def __init__(self, delta=1e-2, fail=False):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.delta, self.fail = delta, fail

    def forward(self, x):
        y = self.lin(x)
        if y.device.type == "neuron":
            if self.fail:
                raise RuntimeError("broken on the device")
            y = y + self.delta
        return y


def _module_info(**ctor):
    from torch.testing._internal.common_modules import FunctionInput, ModuleInfo, ModuleInput

    def inputs(module_info, device, dtype, requires_grad, training, **kw):
        x = torch.randn(4, 3, dtype=dtype, device=device, requires_grad=requires_grad)
        return [ModuleInput(constructor_input=FunctionInput(**ctor), forward_input=FunctionInput(x))]

    return ModuleInfo(_OffOnDevice, module_inputs_func=inputs)


@pytest.mark.parametrize("ctor,want", [({"delta": 0.0}, "PASS"), ({"delta": 1e-2}, "MISMATCH"),
                                       ({"fail": True}, "ERROR")])
@pytest.mark.parametrize("group,checks", [("test_cpu_gpu_parity", ("forward", "backward")),
                                          ("test_non_contiguous_tensors", ("noncontiguous",)),
                                          ("test_pickle", ("pickle",)), ("test_to", ("device_moves",))])
def test_module_checks_can_fail(ctor, want, group, checks):
    mi = _module_info(**ctor)
    inp = mi.module_inputs_func(mi, "cpu", torch.float32, True, True)[0]
    rec = {}
    W._module_sample(_test_case(), group, mi, inp, torch.float32, DEV, True, 0, rec)
    for c in checks:
        got = rec["checks"][c][0]
        # an output shifted by a constant has the CPU's gradients
        expect = "PASS" if (c == "backward" and want == "MISMATCH") else want
        assert got == expect, (c, rec["checks"][c])


def test_module_mismatch_is_judged_against_float64():
    mi = _module_info(delta=1e-2)
    inp = mi.module_inputs_func(mi, "cpu", torch.float32, True, True)[0]
    rec = {}
    W._module_sample(_test_case(), "test_cpu_gpu_parity", mi, inp, torch.float32, DEV, True, 0, rec)
    ref = rec["ref"]["forward"]
    assert not ref["rounding"] and ref["dev"] > 100 * ref["cpu"]


class _BrokenSGD(torch.optim.SGD):
    """SGD whose device step goes twice as far."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = super().step(closure)
        for g in self.param_groups:
            for p in g["params"]:
                if p.device.type == "neuron" and p.grad is not None:
                    p.add_(p.grad, alpha=-g["lr"])
        return loss


def _optim_info(cls):
    from torch.testing._internal.common_optimizers import OptimizerInfo, OptimizerInput

    def inputs(device, dtype=None):
        return [OptimizerInput(params=None, kwargs={"lr": 0.1}, desc="lr"),
                OptimizerInput(params=None, kwargs={"lr": -1.0}, desc="negative lr")]

    return OptimizerInfo(cls, optim_inputs_func=inputs)


@pytest.mark.parametrize("cls,want", [(torch.optim.SGD, "PASS"), (_BrokenSGD, "MISMATCH")])
def test_optimizer_steps_can_fail_and_cpu_rejections_are_skips(cls, want):
    oi = _optim_info(cls)
    ok, bad = oi.optim_inputs_func("cpu")
    rec = {}
    W._optim_sample(_test_case(), "test_forloop_goes_right_direction", oi, ok, torch.float32, DEV, 0, rec)
    assert rec["checks"]["steps"][0] == want, rec
    with pytest.raises(W._CpuRejects, match="Invalid learning rate"):
        W._optim_sample(_test_case(), "test_forloop_goes_right_direction", oi, bad, torch.float32, DEV, 0, {})


def test_optimizer_state_dict_crosses_devices():
    oi = _optim_info(torch.optim.Adam)
    rec = {}
    W._optim_sample(_test_case(), "test_state_dict_with_cuda_params", oi, oi.optim_inputs_func("cpu")[0],
                    torch.float32, DEV, 0, rec)
    assert rec["checks"]["state_dict"][0] == "PASS", rec


def test_aggregate_worst_sample_wins_and_skip_reasons():
    agg = N.aggregate_for("optims")
    info = {"family": "optimizer"}
    samples = [{"i": "0", "desc": "a", "checks": {"steps": ["PASS", ""], "foreach": ["SKIP", "no foreach"]}},
               {"i": "1", "desc": "b", "checks": {"steps": ["MISMATCH", "off"]},
                "ref": {"steps": {"dev": 1e-6, "cpu": 1e-6, "rounding": True}}},
               {"note": {"checks": ("scheduler",), "skip": "PyTorch skips it"}}]
    rows = {r["check"]: r for r in agg("SGD", info, "float32", {}, samples, {"seconds": 1.0})}
    assert rows["steps"]["status"] == "MISMATCH" and rows["steps"]["rounding"]
    assert rows["steps"]["sample"].startswith("#1")
    assert rows["foreach"]["status"] == "SKIP" and rows["foreach"]["message"] == "no foreach"
    assert rows["scheduler"]["status"] == "SKIP" and rows["scheduler"]["message"] == "PyTorch skips it"
    assert rows["sparse"]["status"] == "SKIP"


# ---------------------------------------------------------------------------
# the CI gate

gate = pytest.mark.skipif(os.environ.get("TORCHNEURON_SKIP_GATE") == "1", reason="TORCHNEURON_SKIP_GATE=1")


@pytest.fixture(scope="module")
def gate_rows(tmp_path_factory):
    out = {}
    for db in ("modules", "optims"):
        path = tmp_path_factory.mktemp(db) / "gate.jsonl"
        out[db] = N.run_gate(db, workers=2, timeout=600.0, results_path=str(path), progress=False)
    return out


@gate
@pytest.mark.parametrize("db", ["modules", "optims"])
def test_nn_gate_matches_baseline(db, gate_rows):
    rows = gate_rows[db]
    units = {r["op"] for r in rows}
    assert units == set(N.GATE[db]), units ^ set(N.GATE[db])
    assert sum(r["status"] == "PASS" for r in rows) > len(rows) // 2
    base = N.paths(db)["baseline"]
    assert os.path.exists(base), f"{base} is missing"
    problems = C.compare_to_baseline(rows, C.load_baseline(base))
    assert not problems, (
        f"the {db} conformance gate disagrees with {os.path.relpath(base)} (fix the regression, or run "
        f"`torchneuron conformance --db {db} --gate --update-baseline` and commit the baseline):\n" +
        "\n".join(C.format_problem(p) for p in problems))

"""The conformance sweep's own machinery: classification, decorators, aggregation, baseline.

Synthetic OpInfos run through the same device-generic test the sweep
instantiates (PyTorch's ``instantiate_device_type_tests`` + ``@ops`` with the
neuron device as PrivateUse1), so each status is shown to be reachable and
PyTorch's ``DecorateInfo`` tolerance/skip/xfail entries are shown to apply.
"""
from __future__ import annotations

import os
import unittest

import pytest
import torch

import torchneuron
from torchneuron.tools import conformance as C
from torchneuron.tools.opdb import _clean_argv, family

with _clean_argv():
    from torch.testing._internal.common_device_type import tol, toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo, OpInfo, SampleInput

F32 = (torch.float32,)


def _samples(op, device, dtype, requires_grad, **kw):
    for shape in ((3, 4), (5,)):
        yield SampleInput(torch.testing.make_tensor(shape, dtype=dtype, device=device, low=-3, high=3,
                                                    requires_grad=requires_grad))


def _on_neuron(x):
    return x.device.type == "neuron"


def _plus_small(x):
    return x * 2 + (1e-3 * x.abs() if _on_neuron(x) else 0)


def _scaled_shifted(x):
    # on the device: off by 2e-4 everywhere, beyond the default tolerance of the small
    # elements but within 4 ulps of the result's largest magnitude (3000): rounding-sized
    y = torch.cat([x.reshape(-1) * 1e-3, x.new_full((1,), 3000.0)])
    return y + (2e-4 if _on_neuron(x) else 0)


def _raise_on_neuron(x):
    if _on_neuron(x):
        raise RuntimeError("boom on the device")
    return x * 2


def _raise_on_cpu(x):
    raise RuntimeError("the CPU rejects this")


def _random_values(x):
    return torch.rand_like(x) + x


def _wrong_shape_on_neuron(x):
    return x.reshape(-1) if _on_neuron(x) else x


# An op with only a CPU kernel: on the neuron device it can only run through the fallback.
_lib = torch.library.Library("tnconformance", "DEF")
_lib.define("twice(Tensor x) -> Tensor")
_lib.impl("twice", lambda x: x * 2, "CPU")
_lib.impl("twice", lambda x: torch.empty_like(x), "Meta")


def _fallback_op(x):
    return torch.ops.tnconformance.twice(x)


def _op(name, fn, autograd=True, decorators=(), dtypes=F32):
    return OpInfo(name, op=fn, dtypes=dtypes, sample_inputs_func=_samples, supports_autograd=autograd,
                  decorators=tuple(decorators), supports_out=False)


SKIP_VALUES = DecorateInfo(unittest.skip("output is non-deterministic"), "TestCommon", "test_compare_cpu")
LOOSE = DecorateInfo(toleranceOverride({torch.float32: tol(atol=1e-2, rtol=1e-2)}), "TestCommon",
                     "test_compare_cpu")
XFAIL = DecorateInfo(unittest.expectedFailure, "TestCommon", "test_compare_cpu")

OPS = {
    "tn_pass": _op("tn_pass", lambda x: torch.tanh(x) * 2),
    "tn_mismatch": _op("tn_mismatch", _plus_small),
    "tn_tolerance": _op("tn_tolerance", _plus_small, decorators=[LOOSE]),
    "tn_rounding": _op("tn_rounding", _scaled_shifted, autograd=False),
    "tn_error": _op("tn_error", _raise_on_neuron),
    "tn_cpu_error": _op("tn_cpu_error", _raise_on_cpu),
    "tn_fallback": _op("tn_fallback", _fallback_op, autograd=False),
    "tn_random": _op("tn_random", _random_values, decorators=[SKIP_VALUES]),
    "tn_random_bad_shape": _op("tn_random_bad_shape", _wrong_shape_on_neuron, decorators=[SKIP_VALUES]),
    "tn_xfail": _op("tn_xfail", _plus_small, decorators=[XFAIL]),
    "tn_rng": _op("tn_rng", _random_values),
    "tn_int": _op("tn_int", lambda x: x * 2, autograd=False, dtypes=(torch.int64,)),
}


@pytest.fixture(scope="module")
def test_cls():
    from torchneuron.tools.conformance_worker import build_test_class

    cls = build_test_class(list(OPS.values()), [torch.float32, torch.int64])
    cls.setUpClass()
    return cls


def run(test_cls, name, dtype=torch.float32):
    from torchneuron.tools.conformance_worker import collect_unit
    from torchneuron.tools.opdb import DTYPE_NAMES

    op = OPS[name]
    prev = torchneuron.set_fallback_policy("silent")
    try:
        begin, samples, end = collect_unit(test_cls, op, dtype)
    finally:
        torchneuron.set_fallback_policy(prev)
    rows = C.aggregate(name, C.op_info(op), DTYPE_NAMES[dtype], begin, samples, end)
    return {r["check"]: r for r in rows}


def test_instantiated_through_privateuse1(test_cls):
    assert "PRIVATEUSE1" in test_cls.__name__
    names = [n for n in dir(test_cls) if n.startswith("test_compare_cpu_tn_pass")]
    assert names == ["test_compare_cpu_tn_pass_neuron_float32"]


def test_pass_forward_and_backward(test_cls):
    r = run(test_cls, "tn_pass")
    assert r["forward"]["status"] == "PASS" and r["forward"]["samples"] == 2
    assert r["backward"]["status"] == "PASS"
    assert r["forward"]["fallback_ops"] == []


def test_mismatch_with_default_tolerance(test_cls):
    r = run(test_cls, "tn_mismatch")
    assert r["forward"]["status"] == "MISMATCH"
    assert "Tensor-likes are not close" in r["forward"]["message"]
    assert r["forward"]["sample"].startswith("#0: f32[3, 4]")
    assert r["backward"]["status"] == "MISMATCH"  # d/dx (2x + 1e-3|x|) differs from 2


def test_float64_reference_tells_rounding_from_bugs(test_cls):
    r = run(test_cls, "tn_rounding")["forward"]
    assert r["status"] == "MISMATCH" and r["rounding"]
    assert r["reason"].startswith(C.ROUNDING_NOTE) and "2 mismatching samples" in r["reason"]
    # 2x + 1e-3|x| on the device: 1e-3 off where the CPU is exact, far beyond rounding
    bad = run(test_cls, "tn_mismatch")
    assert not bad["forward"]["rounding"] and not bad["forward"]["reason"]
    assert not bad["backward"]["rounding"]


def test_reference_errors():
    from torchneuron.tools import conformance_worker as W

    ref = torch.tensor([1000.0, 1.0], dtype=torch.float64)
    cpu = ref.float()
    # 1e-4 off on the small element: within 4 ulps of 1000, so rounding-sized
    assert W._ref_verdict(W._ref_errors(cpu + torch.tensor([0, 1e-4]), cpu, ref))["rounding"]
    # 1e-2 off: not
    assert not W._ref_verdict(W._ref_errors(cpu + torch.tensor([0, 1e-2]), cpu, ref))["rounding"]
    # twice the CPU's own error is still rounding, three times is not (here above the floor)
    ref2 = torch.tensor([1.0, 1.0], dtype=torch.float64)
    cpu2 = torch.tensor([1.001, 1.0])
    assert W._ref_verdict(W._ref_errors(torch.tensor([1.0, 1.002]), cpu2, ref2))["rounding"]
    assert not W._ref_verdict(W._ref_errors(torch.tensor([1.0, 1.003]), cpu2, ref2))["rounding"]
    # differing integer results, shapes or NaN positions: no verdict
    assert W._ref_errors([torch.tensor([1])], [torch.tensor([2])], [torch.tensor([1])]) is None
    nan = torch.tensor([float("nan"), 1.0])
    assert W._ref_errors(torch.tensor([1.0, 1.0]), nan, nan.double()) is None


def test_tolerance_override_of_the_opinfo_applies(test_cls):
    r = run(test_cls, "tn_tolerance")
    assert r["forward"]["status"] == "PASS"


def test_error_on_device(test_cls):
    r = run(test_cls, "tn_error")
    assert r["forward"]["status"] == "ERROR"
    assert "boom on the device" in r["forward"]["message"]
    assert r["backward"]["status"] == "ERROR"


def test_cpu_error_is_skip(test_cls):
    r = run(test_cls, "tn_cpu_error")
    assert r["forward"]["status"] == "SKIP"
    assert r["forward"]["message"].startswith("CPU: RuntimeError")


def test_fallback_is_not_native(test_cls):
    r = run(test_cls, "tn_fallback")
    assert r["forward"]["status"] == "FALLBACK"
    assert r["forward"]["fallback_ops"] == ["tnconformance::twice"]
    assert "backward" not in r


def test_pytorch_skip_compares_shapes_only(test_cls):
    r = run(test_cls, "tn_random")
    assert r["forward"]["status"] == "PASS" and not r["forward"]["values_compared"]
    assert "non-deterministic" in r["forward"]["note"]
    bad = run(test_cls, "tn_random_bad_shape")
    assert bad["forward"]["status"] == "MISMATCH"


def test_ops_drawing_from_the_generator_compare_shapes_only(test_cls):
    r = run(test_cls, "tn_rng")
    assert r["forward"]["status"] == "PASS" and not r["forward"]["values_compared"]
    assert r["forward"]["note"].startswith("random:")


def test_pytorch_expected_failure_is_recorded(test_cls):
    r = run(test_cls, "tn_xfail")
    assert r["forward"]["status"] == "MISMATCH" and r["forward"]["pytorch_xfail"]


def test_integer_dtype(test_cls):
    r = run(test_cls, "tn_int", torch.int64)
    assert r["forward"]["status"] == "PASS" and "backward" not in r


# ---------------------------------------------------------------------------
# aggregation, baseline, families (no device work)

INFO = {"name": "x", "variant": "", "family": "other", "dtypes": ["float32"], "backward": True}


def test_aggregate_precedence_and_lists():
    samples = [
        {"i": 0, "desc": "a", "fwd": ["PASS", ""], "bwd": ["PASS", ""], "dec_fwd": ["aten::foo"]},
        {"i": 1, "desc": "b", "fwd": ["FALLBACK", ""], "bwd": ["SKIP", "CPU: x"], "fb_fwd": ["aten::bar"]},
        {"i": 2, "desc": "c", "fwd": ["MISMATCH", "diff"], "bwd": ["PASS", ""]},
    ]
    f, b = C.aggregate("x", INFO, "float32", {"n": 3}, samples, {"seconds": 1.0})
    assert f["status"] == "MISMATCH" and f["message"] == "diff" and f["sample"] == "#2: c"
    assert f["fallback_ops"] == ["aten::bar"] and f["decomposed_ops"] == ["aten::foo"]
    assert f["counts"] == {"PASS": 1, "FALLBACK": 1, "MISMATCH": 1}
    assert b["status"] == "PASS"
    f2, = C.aggregate("x", INFO, "bfloat16", {"n": 3}, samples[:2], {})
    assert f2["status"] == "FALLBACK" and "aten::bar" in f2["message"]


def test_aggregate_timeout_crash_and_no_samples():
    f, b = C.aggregate("x", INFO, "float32", {"n": 5}, [{"i": 0, "fwd": ["PASS", ""]}], {}, timeout=30)
    assert f["status"] == b["status"] == "TIMEOUT" and "1/5 samples" in f["message"]
    f, b = C.aggregate("x", INFO, "float32", {"n": 5}, [], {}, crashed="died")
    assert f["status"] == "ERROR" and f["message"] == "died"
    f, b = C.aggregate("x", INFO, "float32", {"n": 0}, [], {})
    assert f["status"] == "SKIP" and "no sample" in f["message"]


def test_baseline_roundtrip_and_gate_comparison(tmp_path):
    path = str(tmp_path / "baseline.csv")

    def row(op, st, check="forward", dt="float32"):
        return {"op": op, "dtype": dt, "check": check, "status": st, "message": "m"}

    rows = [row("a", "PASS"), row("b", "MISMATCH"), row("c", "FALLBACK"), row("c", "PASS", "backward"),
            row("d", "UNSUPPORTED_DTYPE", dt="bool")]
    changed, n = C.update_baseline(path, rows)
    base = C.load_baseline(path)
    assert set(base) == {("b", "float32", "forward"), ("c", "float32", "forward")} and n == 2
    assert C.compare_to_baseline(rows, base) == []
    # a human-written note survives an update while the status stays the same
    text = open(path).read().replace("b,float32,forward,MISMATCH,", "b,float32,forward,MISMATCH,rounding of exp2")
    open(path, "w").write(text)
    C.update_baseline(path, rows)
    assert C.load_baseline(path)[("b", "float32", "forward")]["note"] == "rounding of exp2"
    # regressions and stale entries are both reported
    now = [row("a", "ERROR"), row("b", "PASS"), row("c", "FALLBACK"), row("c", "PASS", "backward")]
    problems = [C.format_problem(p) for p in C.compare_to_baseline(now, C.load_baseline(path))]
    assert any(p.startswith("REGRESSION: a float32 forward") for p in problems)
    assert any(p.startswith("NOW PASSES") and " b " in p for p in problems)
    assert len(problems) == 2
    # updating with the new rows of unit b only leaves the other entries alone
    C.update_baseline(path, [row("b", "PASS")])
    assert set(C.load_baseline(path)) == {("c", "float32", "forward")}


def test_gate_treats_measured_rounding_as_machine_dependent(tmp_path):
    path = str(tmp_path / "baseline.csv")

    def row(op, st, rounding=False, reason=""):
        return {"op": op, "dtype": "float32", "check": "forward", "status": st, "message": "m",
                "rounding": rounding, "reason": reason}

    why = C.ROUNDING_NOTE + " CPU reference the device's largest error is 1e-05 ..."
    C.update_baseline(path, [row("r", "MISMATCH", True, why), row("m", "MISMATCH")])
    base = C.load_baseline(path)
    assert base[("r", "float32", "forward")]["note"] == why  # the measured reason is written
    assert base[("m", "float32", "forward")]["note"] == ""
    # a rounding-level MISMATCH where the baseline says PASS is no regression (another
    # machine's CPU kernels round differently), and a rounding entry may pass
    assert C.compare_to_baseline([row("p", "MISMATCH", True), row("r", "PASS")], base) == []
    # but a real MISMATCH is, and a bug entry that passes makes the baseline stale
    probs = [C.format_problem(p) for p in
             C.compare_to_baseline([row("p", "MISMATCH"), row("m", "PASS")], base)]
    assert len(probs) == 2 and probs[0].startswith("REGRESSION") and probs[1].startswith("NOW PASSES")


def test_families_come_from_the_registry():
    """An OpInfo's family is the ops/ or kernels/ module that makes it native: by the aten
    op it names, or (composite ops) by the native ops its first sample runs."""
    from torchneuron.tools.opdb import families, load_op_db

    db = {op.name: op for op in load_op_db() if not op.variant_test_name}
    expected = {
        "add": "elementwise", "cumsum": "scans", "sort": "sorting", "bernoulli": "random",
        "index_put": "indexing", "nonzero": "indexing", "arange": "creation",
        "permute_copy": "shape", "linalg.vector_norm": "reduction", "unique": "reduction",
        "nn.functional.conv2d": "conv_pool", "nn.functional.max_pool2d": "conv_pool",
        "nn.functional.layer_norm": "norm", "nn.functional.cross_entropy": "loss",
        "nn.functional.linear": "linalg", "cdist": "distance", "special.bessel_j0": "special",
        "fft.fft": "fft", "nn.functional.scaled_dot_product_attention": "attention",
    }
    got = {name: family(db[name]) for name in expected}
    assert got == expected
    native = set(torchneuron.native_ops().values())
    assert {n.family for n in native} <= set(families())
    for fam in set(expected.values()):
        assert any(n.family == fam for n in native), fam


@pytest.mark.skipif(os.environ.get("TORCHNEURON_SKIP_SLOW") == "1", reason="spawns a worker process")
def test_pool_records_timeouts(tmp_path):
    """A unit that cannot finish in time becomes TIMEOUT rows; the pool survives the kill."""
    cat = {"abs": {"name": "abs", "variant": "", "family": "elementwise unary", "dtypes": ["float32"],
                   "backward": True}}
    res = C.ResultsFile(str(tmp_path / "r.jsonl"))
    counts = C.run_units([("abs", "float32")], cat, res, workers=1, timeout=0.001, op_ids=["abs"],
                         dtypes=["float32"], log_path=str(tmp_path / "w.log"), progress=False)
    rows, _ = C.load_results(res.path)
    assert counts == {"TIMEOUT": 2}
    assert {k: r["status"] for k, r in rows.items()} == {("abs", "float32", "forward"): "TIMEOUT",
                                                          ("abs", "float32", "backward"): "TIMEOUT"}

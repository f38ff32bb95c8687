"""The differential fuzzer (torchneuron fuzz): its CI batch, its oracle, its shrinking and
repros, and regression tests for the device bugs it found (each against the CPU)."""
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

import torchneuron  # noqa: F401
from torchneuron.tools import fuzz
from torchneuron.tools import fuzz_programs as fp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEV = "neuron"


# ---------------------------------------------------------------- the CI batch
def test_fixed_seed_batch_has_no_unexplained_mismatch(tmp_path):
    """A fixed-seed batch of random programs (op by op and torch.compile'd): every
    difference from the CPU is rounding or in src/torchneuron/tools/data/fuzz_allowlist.csv."""
    fz = fuzz.Fuzzer(300, seed=20261202, mode="mixed", out=str(tmp_path), progress=False,
                     max_failures=5)
    s = fz.run()
    c = s["counts"]
    assert c["programs"] == 300
    assert c["eager"] > 0 and c["compiled"] > 0
    assert c["pass"] + c["rounding"] + c["allowed"] + c["mismatch"] == c["programs"]
    assert s["unexplained"] == 0, json.dumps(s["failures"], indent=1)


# ---------------------------------------------------------------- the oracle
def _p(*steps, compiled=False):
    return fp.Program([fp.Step(*s) if isinstance(s, tuple) else s for s in steps], compiled)


T0 = fp.Step("tensor", "fz.T([3.0, 1.5, -2.0, 0.25], 'float32', dev, (2, 2))", is_input=True)


ORACLE_CASES = [
    # (what the device does differently, steps, expected mismatch kind or None)
    ("nothing", [T0, ("mul", "v0 * 2", (0,))], None),
    ("a wrong value", [T0, ("mul", "v0 * (2 if dev == 'cpu' else 3)", (0,))], "value"),
    ("a wrong dtype", [T0, ("to", "v0.double() if dev == 'cpu' else v0.half()", (0,))], "dtype"),
    ("a wrong shape", [T0, ("view", "v0.view(-1) if dev == 'cpu' else v0.view(1, -1)", (0,))],
     "shape"),
    ("a wrong stride", [T0, ("t", "v0.t().contiguous() if dev != 'cpu' else v0.t()", (0,))],
     "stride"),
    ("a copy for a view", [T0, ("flatten", "v0.flatten().clone() if dev != 'cpu' else v0.flatten()",
                                (0,))], "alias"),
    ("an error the CPU does not raise",
     [T0, ("view", "v0.view(-1) if dev == 'cpu' else v0.view(3)", (0,))], "error"),
    ("another error message",
     [T0, ("view", "v0.view(5) if dev == 'cpu' else v0.view(3)", (0,))], "error"),
    ("a missing warning",
     [T0, ("std", "(torch.std(v0[:1, 0], 0), v0 * 1)[1] if dev == 'cpu' else v0 * 1", (0,))],
     "warning"),
    ("an in-place write lost",
     [T0, ("add_", "v0.add_(1) if dev == 'cpu' else v0 + 1", (0,))], "final_value"),
    ("a wrong gradient", [fp.Step("tensor", "fz.T([1.0, 2.0], 'float32', dev, (2,)).requires_grad_()",
                                  is_input=True),
                          ("mul", "v0 * v0 if dev == 'cpu' else v0 * v0.detach()", (0,)),
                          ("backward", "fz.backward(v1)", (1,))], "grad_value"),
]


@pytest.mark.parametrize("what,steps,kind", ORACLE_CASES, ids=[c[0] for c in ORACLE_CASES])
def test_oracle_sees_each_kind_of_difference(what, steps, kind):
    status, m, _, _ = fuzz.judge(_p(*steps))
    if kind is None:
        assert status == "pass", m
    else:
        assert status == "mismatch" and m.kind == kind, (status, m)


def test_oracle_sees_differences_in_compiled_programs():
    good = _p(T0, ("mul", "v0 * 2", (0,)), ("sin", "torch.sin(v1)", (1,)), compiled=True)
    assert fuzz.judge(good)[0] == "pass"
    bad = _p(T0, ("mul", "v0 * 2", (0,)), ("sin", "torch.sin(v1) + (v1.device.type != 'cpu')", (1,)),
             compiled=True)
    status, m, _, _ = fuzz.judge(bad)
    assert status == "mismatch" and m.kind == "final_value", m


def test_rounding_is_told_apart_from_a_wrong_op():
    """A 1-ulp input difference that floor() turns into 1.0 is rounding (the device's floor
    gives the CPU's result on the CPU's inputs); a floor that is wrong on equal inputs is not."""
    base = fp.Step("tensor", "fz.T([3.0, 5.0], 'float32', dev, (2,))", is_input=True)
    nudge = ("mul", "v0 * (1.0 if dev == 'cpu' else 1.0 - 2 ** -23)", (0,))
    status, m, _, _ = fuzz.judge(_p(base, nudge, ("floor", "torch.floor(v1)", (1,))))
    assert status == "rounding" and m.name == "floor", (status, m)
    wrong = ("floor", "torch.floor(v1) if dev == 'cpu' else torch.ceil(v1) - 1", (1,))
    status, m, _, _ = fuzz.judge(_p(base, ("mul", "v0 * 1.0", (0,)), wrong))
    assert status == "mismatch", (status, m)


def test_allowlist_explains_a_listed_difference(tmp_path):
    steps = [T0, ("mul", "v0 * (2 if dev == 'cpu' else 3)", (0,))]
    path = tmp_path / "allow.csv"
    path.write_text("kind,step,source,detail,reason\nvalue,mul,dev == 'cpu',.,a test reason\n")
    status, m, reason, _ = fuzz.judge(_p(*steps), fuzz.load_allowlist(str(path)))
    assert status == "allowed" and reason == "a test reason"
    path.write_text("kind,step,source,detail,reason\nvalue,add,.,.,not this one\n")
    assert fuzz.judge(_p(*steps), fuzz.load_allowlist(str(path)))[0] == "mismatch"


def test_the_allowlist_has_a_reason_for_every_row():
    rows = fuzz.load_allowlist()
    assert rows
    limitations = open(os.path.join(ROOT, "docs", "limitations.md")).read()
    for *_, reason in rows:
        assert len(reason) > 40 and "docs/limitations.md" in reason
    assert "torchneuron fuzz" in limitations


# ---------------------------------------------------------------- shrinking and repros
def _buggy_builder(g):
    """A step that is wrong on the device whenever it is drawn (an injected bug)."""
    c = [i for i in g.tensors(lambda t: t.is_floating_point() and t.numel() > 0) if g.on_dev[i]]
    if not c:
        return None
    i = c[-1]
    return fp.Step("injected", f"v{i} + (0.5 if dev != 'cpu' else 0.0)", (i,))


def test_a_failure_is_shrunk_to_a_standalone_repro(tmp_path, monkeypatch):
    monkeypatch.setattr(fp, "_CHOICES", fp._CHOICES + [_buggy_builder] * 6)
    fz = fuzz.Fuzzer(40, seed=1, mode="eager", out=str(tmp_path), progress=False, max_failures=1)
    s = fz.run()
    assert "value:injected" in s["failures"], s["failures"]
    f = s["failures"]["value:injected"]
    assert f["steps"] <= 3  # a tensor, perhaps a view of it, and the injected step
    repro = tmp_path / "value_injected.py"
    assert repro.exists()
    # the repro reproduces the bug: it fails on neuron against the CPU, standalone
    r = subprocess.run([sys.executable, str(repro)], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "Tensor-likes are not close" in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("compiled", [False, True])
def test_a_passing_program_repro_runs_clean(tmp_path, compiled):
    steps = [T0, fp.Step("t", "v0.t()", (0,)), fp.Step("add_", "v1.add_(1)", (1,)),
             fp.Step("sum", "torch.sum(v0, 0)", (0,))]
    prog = fp.Program(steps, compiled)
    assert fuzz.judge(prog)[0] == "pass"
    path = tmp_path / "repro.py"
    path.write_text(prog.source())
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "no difference" in r.stdout, r.stderr[-2000:]


def test_cli_writes_a_json_summary(tmp_path):
    out = tmp_path / "s.json"
    r = subprocess.run([sys.executable, "-m", "torchneuron.cli", "fuzz", "--programs", "8",
                        "--seed", "3", "--mode", "eager", "--no-progress", "--json", str(out),
                        "--out", str(tmp_path / "repros")],
                       capture_output=True, text=True, timeout=600)
    s = json.loads(out.read_text())
    assert s["counts"]["programs"] == 8 and s["seed"] == 3
    assert r.returncode == (1 if s["unexplained"] else 0)


# ---------------------------------------------------------------- bugs the fuzzer found
def _both(fn):
    """fn(device) on the CPU and on neuron: (value or exception, warnings) each."""
    out = []
    for dev in ("cpu", DEV):
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            torch.set_warn_always(True)  # PyTorch's warn-once warnings, on both devices
            try:
                v = fn(dev)
            except Exception as e:  # noqa: BLE001
                v = e
            finally:
                torch.set_warn_always(False)
        out.append((v, [str(w.message).split(" (Triggered internally")[0] for w in ws
                         if "no native lowering" not in str(w.message)]))
    return out


def _same(fn):
    (want, wwarn), (got, gwarn) = _both(fn)
    if isinstance(want, Exception):
        assert type(got) is type(want) and fp.normalize(str(got)) == fp.normalize(str(want)), \
            (got, want)
    else:
        assert not isinstance(got, Exception), got
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            if isinstance(w, torch.Tensor):
                assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride()
                torch.testing.assert_close(g.cpu(), w, equal_nan=True)
            else:
                assert g == w
    assert gwarn == wwarn


REGRESSIONS = {
    "nonzero is column-major": lambda d: torch.tensor([[1., 0], [2, 3], [0, 1], [0, 0]],
                                                      device=d).nonzero(),
    "arange refuses complex": lambda d: torch.arange(3, dtype=torch.complex64, device=d),
    "index_add_ 1-d out of range": lambda d: torch.ones(3, device=d).index_add_(
        0, torch.tensor([-1], device=d), torch.ones(1, device=d)),
    "index_add_ 2-d out of range": lambda d: torch.ones(3, 2, device=d).index_add_(
        0, torch.tensor([3], device=d), torch.ones(1, 2, device=d)),
    "fmod int by 0": lambda d: torch.fmod(torch.tensor([3], device=d), 0),
    "remainder int by 0": lambda d: torch.remainder(torch.tensor([3], device=d), 0),
    "floor_divide int by 0": lambda d: torch.tensor([3], device=d) // 0,
    "fmod float by 0": lambda d: torch.fmod(torch.tensor([3.], device=d), 0),
    "std warns every call": lambda d: (torch.std(torch.ones(1, device=d), 0),
                                       torch.std(torch.ones(1, device=d), 0)),
    "var_mean warns with its name": lambda d: torch.var_mean(torch.ones(1, device=d), 0),
    "signbit out= must be bool": lambda d: torch.signbit(torch.ones(2, device=d),
                                                         out=torch.ones(2, device=d)),
    "median bool kernel name": lambda d: torch.ones(3, dtype=torch.bool, device=d).median(),
    "median(dim) bool kernel name": lambda d: torch.ones(3, dtype=torch.bool, device=d).median(0),
    "in-place cannot grow self": lambda d: torch.ones((), dtype=torch.int64, device=d).div_(
        torch.ones(1, device=d), rounding_mode="floor"),
    "in-place shape before dtype": lambda d: torch.ones(1, device=d).bitwise_xor_(
        torch.ones(0, 0, device=d)),
    "in-place partial overlap": lambda d: (lambda x: x.add_(x.t()))(
        torch.arange(4., device=d).reshape(2, 2)),
    "in-place shifted overlap": lambda d: (lambda y: y[1:].add_(y[:-1]))(torch.arange(6., device=d)),
    "in-place full overlap is fine": lambda d: (lambda x: x.add_(x))(torch.arange(4., device=d)),
    "out= partial overlap": lambda d: (lambda z: torch.add(z[:3], z[:3], out=z[1:4]))(
        torch.arange(6., device=d)),
    "out= same-size other view": lambda d: (lambda v: torch.le(v, v, out=v.flatten()))(
        torch.tensor(3.0, device=d)),
    "out= that is an input is not resized": lambda d: (lambda v: torch.add(
        v, v[torch.tensor([], dtype=torch.int64, device=d)], out=v))(torch.zeros(1, device=d)),
    "out= resize warning wording": lambda d: torch.minimum(
        torch.eye(4, 2, device=d), torch.ones(4, 1, device=d), out=torch.ones(4, 1, device=d)),
    "index_put_ values overlap self": lambda d: (lambda v: (lambda w: w.__setitem__(
        torch.tensor([], dtype=torch.int64, device=d), v))(v.reshape(-1)))(
        torch.tensor(3.0, device=d)),
    "linspace uint8 overflow": lambda d: torch.linspace(-2.5, 3, 1, dtype=torch.uint8, device=d),
    "linspace end overflow": lambda d: torch.linspace(0, 300, 3, dtype=torch.uint8, device=d),
    "complex 0 - z with an infinite part": lambda d: 0 - torch.tensor(
        [complex(float("inf"), -1.0), 1 + 2j], device=d),
    "complex add alpha": lambda d: torch.add(torch.tensor([0j, 3 - 1j], device=d), torch.tensor(
        [complex(float("inf"), -1.0), 1 + 2j], device=d), alpha=2),
    "-0.0 after 0.0 (scalar caches)": lambda d: (torch.full((1,), 0.0, device=d),
                                                 torch.full((1,), -0.0, device=d).signbit(),
                                                 torch.ones(1, device=d) * 0.0,
                                                 (torch.ones(1, device=d) * -0.0).signbit(),
                                                 (torch.ones(1, device=d) * torch.tensor(-0.0)).signbit()),
    "complex sqrt keeps the zero's sign": lambda d: torch.view_as_real(torch.sqrt(torch.tensor(
        [complex(-3.0, -0.0), complex(-3.0, 0.0), 4 + 1j], device=d))).signbit(),
    "complex rsqrt keeps the zero's sign": lambda d: torch.rsqrt(torch.tensor(
        [complex(-3.0, -0.0), complex(-1.0, 0.0), 4 + 1j], device=d)),
    "cumprod complex to real warns": lambda d: torch.cumprod(torch.tensor(3 + 1j, device=d), 0,
                                                             dtype=torch.float32),
    "amin complex kernel name": lambda d: torch.amin(torch.tensor([1j], device=d)),
    "min(dim) complex": lambda d: torch.min(torch.tensor([1j], device=d), 0),
    "argmax complex": lambda d: torch.argmax(torch.tensor([1j], device=d)),
    "topk bool": lambda d: torch.topk(torch.tensor([True], device=d), 1),
    "sort complex": lambda d: torch.sort(torch.tensor([1j], device=d)),
    "in-place overlap before shape": lambda d: (lambda v: v.pow_(v.unsqueeze(0)))(
        torch.ones(1, device=d)),
    "comparison in-place cannot grow self": lambda d: torch.ones(1, device=d).gt_(
        torch.eye(0, 0, device=d)),
    "comparison in-place overlap": lambda d: (lambda x: x.lt_(x.t()))(torch.ones(2, 2, device=d)),
    "sum float to uint8 wraps like the CPU": lambda d: (
        torch.nansum(torch.tensor([-2.0, 300.5, 3.7], device=d), dtype=torch.uint8),
        torch.sum(torch.tensor([-2.0, 300.5], device=d), dtype=torch.int8)),
    "in-place overlap before the meta kernel's shape error": lambda d: (
        lambda v: v.logical_and_(v.unsqueeze(0)))(torch.tensor(1.0, device=d)),
    "prod complex to real warns": lambda d: torch.prod(torch.tensor([1 + 1j], device=d),
                                                       dtype=torch.float32),
    "cumsum to bool": lambda d: torch.cumsum(torch.ones(2, device=d), 0, dtype=torch.bool),
    "cumprod to bool": lambda d: torch.cumprod(torch.ones(2, device=d), 0, dtype=torch.bool),
    "nansum of complex": lambda d: torch.nansum(torch.ones(2, dtype=torch.complex64, device=d)),
    "out= growth keeps other views of the storage": lambda d: (lambda v0: (
        lambda v1: (torch.mul(torch.cat([v0, v0]), 0, out=v0), v1,
                    v0.untyped_storage().data_ptr() == v1.untyped_storage().data_ptr()))(
        v0.detach()))(torch.tensor([3.0], device=d)),
    "aminmax complex kernel name": lambda d: torch.aminmax(torch.tensor([1j], device=d)),
    "index_put_ shape error before dtype error": lambda d: torch.ones(1, 1, 1, device=d).__setitem__(
        torch.tensor([], dtype=torch.int64, device=d),
        torch.eye(0, 0, dtype=torch.float64, device=d)),
    "cumsum float to int converts like the CPU": lambda d: (
        torch.cumsum(torch.tensor([-1e-30, float("inf"), 3.7, -2.5], device=d), 0,
                     dtype=torch.int64),
        torch.cumsum(torch.tensor([-1e-30, float("inf"), 3.7, -2.5], device=d), 0,
                     dtype=torch.uint8)),
    "out= input shape check before dtype check": lambda d: (lambda v0: (
        lambda v1: torch.fmax(v0, v1, out=v1))(torch.argmax(v0, 0)))(
        torch.ones(1, 1, device=d)),
    "linspace to uint8 wraps like the CPU": lambda d: (
        torch.linspace(1, -1, 2, dtype=torch.uint8, device=d),
        torch.linspace(-1, 5, 4, dtype=torch.uint8, device=d)),
    "median of empty tensors": lambda d: tuple(
        torch.median(torch.zeros(0, dtype=dt, device=d)) for dt in
        (torch.int64, torch.int32, torch.int16, torch.bool, torch.float32)),
    "out= into an expanded tensor": lambda d: (lambda v: torch.neg(v, out=v.expand((2,))))(
        torch.tensor(3.0, device=d)),
    "in-place on an expanded tensor before the dtype check": lambda d: (
        lambda v: v.div_(v))(torch.broadcast_to(torch.tensor(0, device=d), (2,))),
    "conv bias of another dtype": lambda d: torch.nn.functional.conv1d(
        torch.ones(1, 2, 5, device=d), torch.ones(3, 2, 3, device=d),
        torch.ones(3, dtype=torch.float64, device=d)),
    "conv module in float64 on a float32 input": lambda d: (
        lambda m: m(torch.ones(1, 2, 5, device=d)))(
        torch.nn.Conv1d(2, 3, 3, dtype=torch.float64).to(d)),
    "complex to real copies warn like the CPU": lambda d: (
        torch.zeros(2, device=d).copy_(torch.tensor([1 + 2j, 3j], device=d)),
        torch.tensor([1 + 2j, 3j], device=d).to(torch.float32),
        torch.zeros(2, device=d).copy_(torch.tensor([1 + 2j, 3j])),
        torch.logical_and(torch.tensor([1 + 2j, 0j], device=d), torch.tensor([1j, 1j], device=d),
                          out=torch.zeros(2, device=d))),
    "std of an empty tensor warns": lambda d: torch.std(torch.ones(1, 2, 0, device=d), 1),
    "nansum to complex": lambda d: torch.nansum(torch.ones(2, device=d), dtype=torch.complex64),
    "a probe's error is not another exponent's": lambda d: (
        (lambda v: (pytest.raises(RuntimeError, v.pow, -1), torch.square(v))[1])(
            torch.arange(2, device=d))),
}


@pytest.mark.parametrize("name", list(REGRESSIONS))
def test_found_by_the_fuzzer(name):
    _same(REGRESSIONS[name])


def test_compiled_as_strided_outside_a_view_runs_eagerly():
    """as_strided of a view reaching storage outside the view's values (an offset before
    it): the compiled graph runs that op outside XLA instead of crashing."""
    def program(v0):
        v1 = v0[None, ..., -1]
        return [v1, v1.as_strided((1,), (0,), 0), v0.as_strided((2,), (1,), 0)]

    want = program(torch.eye(1, 2))
    torch._dynamo.reset()
    got = torch.compile(program, backend="neuron")(torch.eye(1, 2, device=DEV))
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w)


def test_compiled_dtype_view_of_an_intermediate_aliases_it():
    def program(v0, x):
        v1 = torch.add(v0, v0)
        return [v1, v1.view(torch.float16), x[1:].view(torch.int16), x.view(torch.int64)[1:]]

    outs = {}
    for dev, be in (("cpu", "aot_eager"), (DEV, "neuron")):
        torch._dynamo.reset()
        x = torch.arange(4., device=dev)
        o = torch.compile(program, backend=be)(torch.ones(2, device=dev), x)
        ptr = [t.untyped_storage().data_ptr() for t in o]
        outs[dev] = ([t.cpu() for t in o], [t.storage_offset() for t in o],
                     ptr[0] == ptr[1], ptr[2] == x.untyped_storage().data_ptr())
    want, got = outs["cpu"], outs[DEV]
    for g, w in zip(got[0], want[0]):
        assert torch.equal(g, w)
    assert got[1:] == want[1:]
    assert got[2] and got[3]  # both views share their base's storage


def test_out_dtype_error_follows_the_default_dtype():
    def f(dev):
        v = torch.tensor(0, device=dev)
        msgs = []
        for d in (torch.float32, torch.float64):
            torch.set_default_dtype(d)
            try:
                torch.div(v, v, out=v)
            except RuntimeError as e:
                msgs.append(str(e))
        torch.set_default_dtype(torch.float32)
        return tuple(msgs)
    _same(f)


def test_warn_once_warnings_follow_torch():
    """CPU's TORCH_WARN_ONCE warnings show once per process (every time with
    torch.set_warn_always(True)): so do the device's."""
    msg = "Casting complex values to real discards the imaginary part"
    x = torch.tensor([1 + 1j], device=DEV)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.prod(x, dtype=torch.float32)
    assert sum(msg in str(w.message) for w in ws) <= 1
    torch.set_warn_always(True)
    try:
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            for _ in range(3):
                torch.prod(x, dtype=torch.float32)
    finally:
        torch.set_warn_always(False)
    assert sum(msg in str(w.message) for w in ws) == 3


def test_out_is_resized_before_a_dtype_error():
    def f(dev):
        out = torch.eye(0, 0, device=dev)
        try:
            torch.bitwise_xor(torch.ones(1, device=dev), torch.ones(1, device=dev), out=out)
        except NotImplementedError as e:
            return str(e), tuple(out.shape)
    _same(f)

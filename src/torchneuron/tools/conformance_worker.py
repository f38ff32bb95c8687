"""Worker process of the conformance sweep.

Each worker imports torch, torchneuron and PyTorch's OpInfo database once,
instantiates one device-generic test with PyTorch's own machinery
(``instantiate_device_type_tests`` + ``@ops(op_db)``: the neuron device comes
in through ``PrivateUse1TestBase``, exactly as a CUDA device would through
``CUDATestBase``), then runs the units (op × dtype) the parent sends it.

The generic test is ``TestCommon.test_compare_cpu``, the name of PyTorch's own
device-vs-CPU test in test_ops.py, so that every ``DecorateInfo`` an OpInfo
carries for that test applies here as it does in PyTorch's CI:
``toleranceOverride`` / ``precisionOverride`` set the test's tolerances (used
by ``TestCase.assertEqual``, which otherwise uses ``torch.testing.assert_close``'s
defaults for the dtype); a ``skip`` ("output is non-deterministic", "undefined
outputs", ...) turns the value comparison off (the op must still run and give
results of the right shape and dtype); an ``expectedFailure`` is recorded on
the row as a documented reason.

Inputs: ``op.sample_inputs("cpu", dtype, requires_grad=...)`` under the
OpInfo's own fixed seeding; the neuron side gets copies of the very same
tensors (``device=`` arguments are moved too), so both sides see identical
inputs.  Per sample the worker reports the forward result vs the CPU, the
float32 gradients vs the CPU (same random cotangents), and the aten ops that
went through the CPU fallback or a traced decomposition while the op (or its
backward) ran.  Aggregation into rows happens in the parent
(``conformance.aggregate``), which also turns a unit that runs too long into
TIMEOUT rows.
"""
from __future__ import annotations

import gc
import os
import sys
import time
import traceback
import unittest
import warnings
import zlib

MSG_CHARS = 600
# at most this many samples per op x dtype, spread evenly over the OpInfo's list (0: all)
MAX_SAMPLES = 64


def _short(msg: str, n: int = MSG_CHARS) -> str:
    msg = " ".join(str(msg).split())
    return msg if len(msg) <= n else msg[: n - 3] + "..."


def _exc(e: BaseException) -> str:
    return _short(f"{type(e).__name__}: {e}")


# ---------------------------------------------------------------------------
# moving samples and results


def _map(x, f):
    import torch

    if isinstance(x, torch.Tensor):
        return f(x)
    if isinstance(x, list):
        return [_map(v, f) for v in x]
    if isinstance(x, tuple):
        vals = [_map(v, f) for v in x]
        if type(x) is tuple:
            return tuple(vals)
        try:
            return type(x)(vals)  # torch.return_types (structseq)
        except TypeError:
            return type(x)(*vals)  # namedtuple
    if isinstance(x, dict):
        return {k: _map(v, f) for k, v in x.items()}
    return x


def _tensors(x, out):
    import torch

    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _tensors(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _tensors(v, out)
    return out


def _sample_tensors(s):
    return _tensors([s.input, list(s.args), dict(s.kwargs)], [])


def _move_device_args(v, device):
    """``device=`` arguments of factory-style samples: CPU -> the neuron device."""
    import torch

    if isinstance(v, torch.device) and v.type == "cpu":
        return torch.device(device)
    if isinstance(v, str) and v == "cpu":
        return device
    return v


# positional arguments that PyTorch requires on the CPU whatever the device (CUDA raises
# too); the OpInfo samples create them on the CPU, so they stay there
KEEP_ON_CPU = {"tensor_split": (0,)}


def _copy_sample(s, device, keep_grad=True, op_name=None):
    """A copy of sample `s` whose tensors are fresh leaves on `device`."""
    import torch
    from torch.testing._internal.opinfo.core import SampleInput

    keep = KEEP_ON_CPU.get(op_name, ()) if device != "cpu" else ()

    def f(t):
        c = t.detach().to(device) if device != "cpu" else t.detach().clone()
        if keep_grad and t.requires_grad and (t.is_floating_point() or t.is_complex()):
            c.requires_grad_(True)
        return c

    with torch.no_grad():
        inp = _map(s.input, f)
        args = tuple(a if i in keep else _map(a, f) for i, a in enumerate(s.args))
        kwargs = {k: _map(v, f) for k, v in s.kwargs.items()}
    if device != "cpu":
        args = tuple(_move_device_args(a, device) for a in args)
        kwargs = {k: (_move_device_args(v, device) if k == "device" else v) for k, v in kwargs.items()}
    return SampleInput(inp, args=args, kwargs=kwargs, output_process_fn_grad=s.output_process_fn_grad,
                       broadcasts_input=s.broadcasts_input, name=s.name)


def _to_cpu(x):
    return _map(x, lambda t: t.detach().cpu())


_DT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64",
       "int32": "i32", "bool": "b8", "complex64": "c64", "complex128": "c128", "uint8": "u8",
       "int8": "i8", "int16": "i16"}


def _describe(x, depth=0) -> str:
    import torch

    if isinstance(x, torch.Tensor):
        dt = str(x.dtype).replace("torch.", "")
        s = f"{_DT.get(dt, dt)}{list(x.shape)}"
        if x.layout != torch.strided:
            s += f"({str(x.layout).replace('torch.', '')})"
        elif x.numel() > 1 and not x.is_contiguous():
            s += "(nc)"
        return s
    if isinstance(x, (list, tuple)):
        if depth > 1 or len(x) > 6:
            return f"[{len(x)} items]"
        inner = ", ".join(_describe(v, depth + 1) for v in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner})"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}={_describe(v, depth + 1)}" for k, v in x.items()) + "}"
    return _short(repr(x), 40)


def describe_sample(s) -> str:
    try:
        parts = [_describe(s.input)]
        parts += [_describe(a) for a in s.args]
        parts += [f"{k}={_describe(v)}" for k, v in s.kwargs.items()]
        return _short(", ".join(parts), 300)
    except Exception as e:
        return f"(undescribable sample: {_exc(e)})"


# ---------------------------------------------------------------------------
# comparisons


def _meta_equal(actual, expected, where="result"):
    """Structure, shapes and dtypes only (outputs PyTorch declares non-deterministic)."""
    import torch

    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise AssertionError(f"{where}: expected a tensor, got {type(actual).__name__}")
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            raise AssertionError(f"{where}: {actual.dtype}{list(actual.shape)} != "
                                 f"{expected.dtype}{list(expected.shape)}")
    elif isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise AssertionError(f"{where}: structure differs")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _meta_equal(a, e, f"{where}[{i}]")


def _check_devices(actual, device_type):
    for t in _tensors(actual, []):
        if t.device.type != device_type:
            raise AssertionError(f"result tensor on {t.device}, expected the {device_type} device")


def _targets_device(dev_s, device):
    """Whether the sample hands the op anything on the device (a tensor or a device= argument);
    a factory call without one (``torch.arange(1, 3)``) rightly returns a CPU tensor."""
    import torch

    dev = torch.device(device)
    if any(t.device.type == dev.type for t in _sample_tensors(dev_s)):
        return True
    vals = list(dev_s.args) + list(dev_s.kwargs.values())
    return any((isinstance(v, torch.device) and v.type == dev.type) or (isinstance(v, str) and v == device)
               for v in vals)


def _seeded_mode_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class SeededOps(TorchDispatchMode):
        """Observes the CPU reference run: notes the first aten op tagged nondeterministic_seeded
        (rand, bernoulli, native_dropout, ...), also when the OpInfo reseeds around the call."""

        hit = None

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if self.hit is None and torch.Tag.nondeterministic_seeded in func.tags:
                self.hit = func.name()
            return func(*args, **(kwargs or {}))

    return SeededOps


_seeded_cls = None


def _SeededOps():
    global _seeded_cls
    if _seeded_cls is None:
        _seeded_cls = _seeded_mode_class()
    return _seeded_cls()


# PyTorch's own test_compare_cpu compares a device with the CPU at atol=rtol=1e-3: a MISMATCH
# within that is flagged as a near miss (rounding / summation order) in the report.
NEAR_TOL = 1e-3


def _compare(test, actual, expected, msg=None):
    """``test.assertEqual`` (the OpInfo's tolerances); on failure, note whether it is a near miss."""
    try:
        test.assertEqual(actual, expected, msg=msg)
    except AssertionError as e:
        try:
            test.assertEqual(actual, expected, atol=NEAR_TOL, rtol=NEAR_TOL)
            e.near_miss = True
        except Exception:
            e.near_miss = False
        raise


# A MISMATCH in a floating dtype is measured against a float64 CPU reference (the same
# sample with every float tensor widened): when the device is at most REF_SLACK times as far
# from it as the CPU kernel is (or within a few ulps of it), the difference is rounding
# (summation order, fused steps, a different but equally accurate algorithm), recorded as
# the row's written reason; otherwise the device is less accurate than the CPU, a bug.
REF_SLACK = 2.0
REF_ULPS = 4


def _widen(t):
    import torch

    if t.dtype in (torch.float32, torch.float16, torch.bfloat16):
        return torch.float64
    if t.dtype == torch.complex64 or t.dtype == torch.complex32:
        return torch.complex128
    return None


def _wide_sample(s, keep_grad):
    """The sample on the CPU with float tensors widened to float64 (fresh leaves)."""
    import torch
    from torch.testing._internal.opinfo.core import SampleInput

    def f(t):
        w = _widen(t)
        c = t.detach().to(w) if w is not None else t.detach().clone()
        if keep_grad and t.requires_grad and w is not None:
            c.requires_grad_(True)
        return c

    with torch.no_grad():
        inp = _map(s.input, f)
        args = tuple(_map(a, f) for a in s.args)
        kwargs = {k: _map(v, f) for k, v in s.kwargs.items()}
    return SampleInput(inp, args=args, kwargs=kwargs, output_process_fn_grad=s.output_process_fn_grad,
                       broadcasts_input=s.broadcasts_input, name=s.name)


def _ref_errors(actual, expected, ref):
    """(device error, CPU error, ulp floor) over the float tensors of three like structures."""
    import torch

    a_l, e_l, r_l = _tensors(actual, []), _tensors(expected, []), _tensors(ref, [])
    if not (len(a_l) == len(e_l) == len(r_l)) or not a_l:
        return None
    err_a = err_e = floor = 0.0
    for a, e, r in zip(a_l, e_l, r_l):
        if not (e.is_floating_point() or e.is_complex()):
            if not torch.equal(a, e):
                return None  # an integer/bool result differs: not a rounding question
            continue
        if a.shape != e.shape or r.shape != e.shape:
            return None
        r64 = r.detach().to(torch.complex128 if r.is_complex() else torch.float64)
        fin = torch.isfinite(r64)
        same_nonfinite = bool(((~fin) == ~torch.isfinite(a.to(r64.dtype))).all()) and bool(
            ((~fin) == ~torch.isfinite(e.to(r64.dtype))).all())
        if not same_nonfinite:
            return None
        if not bool(fin.any()):
            continue
        ra = (a.to(r64.dtype) - r64)[fin].abs().max().item()
        re_ = (e.to(r64.dtype) - r64)[fin].abs().max().item()
        eps = torch.finfo(e.dtype).eps
        floor = max(floor, REF_ULPS * eps * r64[fin].abs().max().item())
        err_a, err_e = max(err_a, ra), max(err_e, re_)
    return err_a, err_e, floor


def _ref_verdict(errs):
    if errs is None:
        return None
    dev, cpu, floor = errs
    return {"dev": dev, "cpu": cpu, "rounding": dev <= max(REF_SLACK * cpu, floor)}


def _ref_forward(op, sample, actual, expected):
    """The float64 verdict of a forward MISMATCH (None when it does not apply)."""
    import torch

    try:
        if not any(_widen(t) is not None for t in _sample_tensors(sample)):
            return None
        wide = _wide_sample(sample, keep_grad=False)
        with torch.no_grad():
            ref = wide.output_process_fn_grad(_to_cpu(op(wide.input, *wide.args, **wide.kwargs)))
        return _ref_verdict(_ref_errors(actual, expected, ref))
    except Exception:  # noqa: BLE001  (the op has no float64 kernel, ...: no verdict)
        return None


def _ref_backward(op, sample, cots, grads_a, grads_e):
    """The float64 verdict of a gradient MISMATCH, with the same cotangents widened."""
    import torch

    try:
        wide = _wide_sample(sample, keep_grad=True)
        out = wide.output_process_fn_grad(op(wide.input, *wide.args, **wide.kwargs))
        outs = _diff_outputs(out)
        ins = [t for t in _sample_tensors(wide) if t.requires_grad]
        if len(outs) != len(cots):
            return None
        grads_r = torch.autograd.grad(outs, ins, [c.to(o.dtype) for c, o in zip(cots, outs)],
                                      allow_unused=True)
        keep = [i for i, e in enumerate(grads_e) if e is not None]
        if len(grads_r) != len(grads_e) or any(grads_r[i] is None for i in keep):
            return None
        return _ref_verdict(_ref_errors([grads_a[i] for i in keep], [grads_e[i] for i in keep],
                                        [grads_r[i] for i in keep]))
    except Exception:  # noqa: BLE001
        return None


class _Fallbacks:
    """The aten ops that ran through the CPU fallback / a decomposition in a window."""

    def __enter__(self):
        import torchneuron

        torchneuron.reset_fallback_stats()
        return self

    def __exit__(self, *exc):
        import torchneuron

        self.fallback = sorted(torchneuron.fallback_stats())
        self.decomposed = sorted(set(torchneuron.decomposition_stats()) - set(self.fallback))
        return False


def _status(ok_status, fb):
    return "FALLBACK" if (ok_status == "PASS" and fb.fallback) else ok_status


def _run_sample(test, op, sample, device, values, backward, seed):
    """One sample: forward (and float32 backward) on CPU and on the device."""
    import torch

    rec = {"desc": describe_sample(sample)}
    t0 = time.perf_counter()

    # -- forward on CPU (the reference); a CPU error makes the sample a SKIP
    cpu_s = _copy_sample(sample, "cpu")
    torch.manual_seed(seed)
    rng_before = torch.get_rng_state()
    seeded = _SeededOps()
    try:
        try:
            with seeded:
                expected = op(cpu_s.input, *cpu_s.args, **cpu_s.kwargs)
        except Exception:
            # the observing mode should change nothing; if the op refuses to run under it,
            # run the reference without it
            seeded.hit = None
            cpu_s = _copy_sample(sample, "cpu")
            torch.manual_seed(seed)
            expected = op(cpu_s.input, *cpu_s.args, **cpu_s.kwargs)
    except Exception as e:
        if backward and any(t.requires_grad for t in _sample_tensors(sample)):
            # e.g. an in-place op on a leaf that requires grad: forward without autograd
            backward = False
            cpu_s = _copy_sample(sample, "cpu", keep_grad=False)
            try:
                expected = op(cpu_s.input, *cpu_s.args, **cpu_s.kwargs)
            except Exception as e2:
                rec["fwd"] = ["SKIP", "CPU: " + _exc(e2)]
                rec["t"] = time.perf_counter() - t0
                return rec
            rec["bwd"] = ["SKIP", "CPU: " + _exc(e)]
        else:
            rec["fwd"] = ["SKIP", "CPU: " + _exc(e)]
            if backward:
                rec["bwd"] = ["SKIP", "CPU: " + _exc(e)]
            rec["t"] = time.perf_counter() - t0
            return rec

    # -- random ops (they draw from, or reseed, the CPU generator; the neuron device has its own
    # generator): compare structure, shapes and dtypes only
    if values and (seeded.hit or not torch.equal(torch.get_rng_state(), rng_before)):
        values = False
        rec["random"] = seeded.hit or "CPU generator"

    # -- forward on the device
    dev_s = _copy_sample(sample, device, keep_grad=backward, op_name=op.name)
    with _Fallbacks() as fb:
        try:
            actual = op(dev_s.input, *dev_s.args, **dev_s.kwargs)
            actual_cpu = _to_cpu(actual)
            err = None
        except Exception as e:
            err = e
    rec["fb_fwd"], rec["dec_fwd"] = fb.fallback, fb.decomposed
    if err is not None:
        rec["fwd"] = ["ERROR", _exc(err)]
        if backward:
            rec["bwd"] = ["ERROR", "forward failed: " + _exc(err)]
        rec["t"] = time.perf_counter() - t0
        return rec
    try:
        if _targets_device(dev_s, device):
            _check_devices(actual, torch.device(device).type)
        exp_p = cpu_s.output_process_fn_grad(_to_cpu(expected))
        act_p = sample.output_process_fn_grad(actual_cpu)
        if values:
            _compare(test, act_p, exp_p)
            # in-place effects: the inputs afterwards
            _compare(test, _to_cpu(_sample_tensors(dev_s)), _to_cpu(_sample_tensors(cpu_s)),
                     msg="inputs after the call differ")
        else:
            _meta_equal(act_p, exp_p)
        rec["fwd"] = [_status("PASS", fb), ""]
    except AssertionError as e:
        rec["fwd"] = ["MISMATCH", _exc(e)]
        if getattr(e, "near_miss", False):
            rec["near_fwd"] = True
        if values:
            rec["ref_fwd"] = _ref_forward(op, sample, act_p, exp_p)
    except Exception as e:
        rec["fwd"] = ["ERROR", "comparing results: " + _exc(e)]

    # -- backward (float32): the same random cotangent on both sides
    if backward and "bwd" not in rec:
        rec["bwd"] = _run_backward(test, op, sample, cpu_s, dev_s, expected, actual, device, values,
                                   seed, rec)
    rec["t"] = time.perf_counter() - t0
    return rec


def _diff_outputs(out):
    return [t for t in _tensors(out, []) if t.requires_grad]


def _run_backward(test, op, sample, cpu_s, dev_s, expected, actual, device, values, seed, rec):
    import torch

    try:
        outs_e = _diff_outputs(cpu_s.output_process_fn_grad(expected))
        ins_e = [t for t in _sample_tensors(cpu_s) if t.requires_grad]
        if not outs_e or not ins_e:
            return ["SKIP", "no differentiable outputs/inputs"]
        g = torch.Generator().manual_seed(seed)
        cots = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs_e]
        grads_e = torch.autograd.grad(outs_e, ins_e, cots, allow_unused=True)
    except Exception as e:
        return ["SKIP", "CPU backward: " + _exc(e)]
    with _Fallbacks() as fb:
        try:
            outs_a = _diff_outputs(sample.output_process_fn_grad(actual))
            ins_a = [t for t in _sample_tensors(dev_s) if t.requires_grad]
            if len(outs_a) != len(outs_e) or len(ins_a) != len(ins_e):
                err = AssertionError(f"{len(outs_a)} differentiable outputs / {len(ins_a)} inputs "
                                     f"on the device, {len(outs_e)} / {len(ins_e)} on the CPU")
                grads_a = None
            else:
                grads_a = torch.autograd.grad(outs_a, ins_a, [c.to(device) for c in cots],
                                              allow_unused=True)
                grads_a = [None if v is None else v.detach().cpu() for v in grads_a]
                err = None
        except Exception as e:
            err = e
    rec["fb_bwd"], rec["dec_bwd"] = fb.fallback, fb.decomposed
    if isinstance(err, AssertionError):
        return ["MISMATCH", _exc(err)]
    if err is not None:
        return ["ERROR", _exc(err)]
    try:
        for i, (a, e) in enumerate(zip(grads_a, grads_e)):
            if (a is None) != (e is None):
                raise AssertionError(f"grad[{i}]: {'None' if a is None else 'a tensor'} on the device, "
                                     f"{'None' if e is None else 'a tensor'} on the CPU")
            if e is None:
                continue
            if values:
                _compare(test, a, e, msg=f"grad[{i}] ({_describe(e)})")
            else:
                _meta_equal(a, e, f"grad[{i}]")
        return [_status("PASS", fb), ""]
    except AssertionError as e:
        if getattr(e, "near_miss", False):
            rec["near_bwd"] = True
        if values:
            rec["ref_bwd"] = _ref_backward(op, sample, cots, grads_a, grads_e)
        return ["MISMATCH", _exc(e)]
    except Exception as e:
        return ["ERROR", "comparing gradients: " + _exc(e)]


# ---------------------------------------------------------------------------
# the device-generic test and the unit runner


class _Unit:
    """State of the unit being run; the generic test body calls ``run``."""

    def __init__(self, op, dtype, send):
        self.op, self.dtype, self.send = op, dtype, send
        self.started = False

    def run(self, test, device, dtype, op, values=True, note=""):
        import torch

        from .opdb import DTYPE_NAMES, has_backward, op_id

        self.started = True
        oid = op_id(op)
        seed = zlib.crc32(f"{oid}|{DTYPE_NAMES.get(dtype, dtype)}".encode())
        backward = dtype == torch.float32 and has_backward(op)
        torch.manual_seed(seed)
        try:
            samples = list(op.sample_inputs("cpu", dtype, requires_grad=backward))
        except Exception as e:
            self.send(("begin", {"n": 0, "values": values, "note": note,
                                 "sample_error": "sample_inputs: " + _exc(e)}))
            return
        total = len(samples)
        picked = list(range(total))
        if MAX_SAMPLES and total > MAX_SAMPLES:
            picked = sorted({round(k * (total - 1) / max(MAX_SAMPLES - 1, 1)) for k in range(MAX_SAMPLES)})
        self.send(("begin", {"n": len(picked), "total": total, "values": values, "note": note}))
        for i in picked:
            s = samples[i]
            try:
                rec = _run_sample(test, op, s, device, values, backward, seed + i)
            except Exception as e:  # a bug of this harness on an unusual sample: say so, go on
                msg = "harness error: " + _exc(e)
                rec = {"desc": describe_sample(s), "fwd": ["ERROR", msg]}
                if backward:
                    rec["bwd"] = ["ERROR", msg]
            rec["i"] = i
            self.send(("sample", rec))
            del s
        del samples


_unit: _Unit | None = None


def build_test_class(op_list, dtypes):
    """Instantiate the device-generic test for the neuron device with PyTorch's machinery."""
    import torchneuron  # noqa: F401  (before common_device_type: PrivateUse1TestBase needs the backend)

    from .opdb import _clean_argv

    with _clean_argv():
        from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
        from torch.testing._internal.common_utils import TestCase

    class TestCommon(TestCase):
        @ops(op_list, allowed_dtypes=dtypes)
        def test_compare_cpu(self, device, dtype, op):
            _unit.run(self, device, dtype, op)

    scope = {"TestCommon": TestCommon}
    instantiate_device_type_tests(TestCommon, scope, only_for=("privateuse1",))
    classes = [c for n, c in scope.items() if n != "TestCommon"]
    if len(classes) != 1:
        raise RuntimeError("torchneuron conformance: PyTorch's device-generic test machinery did not "
                           "instantiate a PrivateUse1 (neuron) test class; was torchneuron imported "
                           "before torch.testing._internal.common_device_type?")
    return classes[0]


def test_name(cls, op, dtype) -> str:
    from torch.testing._internal.common_device_type import _dtype_test_suffix

    return f"test_compare_cpu_{op.formatted_name}_neuron{_dtype_test_suffix(dtype)}"


def run_unit(cls, op, dtype, send):
    """Run one op × dtype through the instantiated test (decorators included)."""
    import torch

    global _unit
    _unit = unit = _Unit(op, dtype, send)
    name = test_name(cls, op, dtype)
    method = getattr(cls, name, None)
    if method is None:
        send(("begin", {"n": 0, "values": True, "note": "",
                        "sample_error": f"no instantiated test {name}"}))
        return
    xfail = bool(getattr(method, "__unittest_expecting_failure__", False))
    inst = cls(name)
    device = f"neuron:{torch.neuron.current_device()}"
    try:
        try:
            inst.setUp()
            getattr(inst, name)()
        except unittest.SkipTest as e:
            if unit.started:
                raise
            # PyTorch skips its own device-vs-CPU value comparison for this op
            # (random or undefined outputs): run it and compare shapes/dtypes only.
            unit.run(inst, device, dtype, op, values=False,
                     note=_short(f"PyTorch skips TestCommon.test_compare_cpu: {e}", 200))
    finally:
        try:
            inst.tearDown()
        except Exception:
            pass
    if xfail:
        send(("xfail", "PyTorch marks TestCommon.test_compare_cpu an expected failure for this op"))


def collect_unit(cls, op, dtype):
    """Run one unit in this process; returns (begin, samples, end) for ``conformance.aggregate``."""
    begin, samples, end = {}, [], {}

    def send(msg):
        if msg[0] == "begin":
            begin.update(msg[1])
        elif msg[0] == "sample":
            samples.append(msg[1])
        elif msg[0] == "xfail":
            end["xfail"] = True

    t0 = time.perf_counter()
    try:
        run_unit(cls, op, dtype, send)
    except Exception as e:
        end["harness_error"] = _exc(e) + " | " + _short(traceback.format_exc(), 1500)
    end["seconds"] = time.perf_counter() - t0
    return begin, samples, end


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except Exception:
        return 0.0


def worker_setup(log_path):
    """A worker's stdout and stderr go to `log_path` (appended); warnings are silenced."""
    if log_path:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    warnings.simplefilter("ignore")


def main(conn, op_ids, dtype_names, log_path, max_samples=MAX_SAMPLES):
    """Entry point of a worker process (multiprocessing, spawn)."""
    global MAX_SAMPLES
    MAX_SAMPLES = max_samples
    worker_setup(log_path)
    try:
        import torch

        import torchneuron

        from .opdb import DTYPES, load_op_db, op_id

        torchneuron.set_fallback_policy("silent")
        torch.set_num_threads(1)
        op_db = load_op_db()
        by_id = {op_id(op): op for op in op_db}
        ops = [by_id[i] for i in op_ids if i in by_id] if op_ids else list(op_db)
        dtypes = [DTYPES[n] for n in dtype_names]
        cls = build_test_class(ops, dtypes)
        cls.setUpClass()
    except BaseException:
        conn.send(("fatal", traceback.format_exc()))
        return
    serve(conn, lambda oid, dtname: run_unit(cls, by_id[oid], DTYPES[dtname], conn.send))


def serve(conn, run):
    """A ready worker's loop: run(unit id, dtype name) for each unit the parent sends, then
    an "end" message with the seconds, the memory and any harness error."""
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "stop":
            return
        _, uid, dtname = msg
        t0 = time.perf_counter()
        try:
            run(uid, dtname)
            extra = {}
        except BaseException as e:  # a bug of the harness, or an exception escaping the body
            extra = {"harness_error": _exc(e) + " | " + _short(traceback.format_exc(), 1500)}
        gc.collect()
        extra.update(seconds=time.perf_counter() - t0, rss_mb=_rss_mb())
        conn.send(("end", extra))

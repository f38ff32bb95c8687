"""Worker process of the module and optimizer sweeps (``torchneuron conformance --db modules|optims``).

Like the OpInfo worker (``conformance_worker``), each worker imports torch,
torchneuron and one of PyTorch's device-generic databases once and
instantiates tests for the neuron device with PyTorch's own machinery:
``@modules(module_db)`` / ``@optims(optim_db)`` and
``instantiate_device_type_tests`` (the device comes in through
``PrivateUse1TestBase``).  The tests carry the names of upstream's tests
(test_modules.py's ``TestModule``, test_optim.py's ``TestOptimRenewed``) so that
every ``DecorateInfo`` skip and tolerance a ModuleInfo / OptimizerInfo declares
for that test applies here as in PyTorch's CI; a skip becomes a SKIP row with
upstream's reason.

Checks of a module (per ModuleInfo x dtype, in train and eval mode where they
differ; every ``module_inputs_func`` sample):

* ``forward`` (``test_cpu_gpu_parity``): the same module state and inputs on the
  CPU and the device; outputs and buffers (running statistics) compared;
* ``backward`` (``test_cpu_gpu_parity``): seeded cotangents; gradients of the
  inputs and of every parameter compared;
* ``noncontiguous`` (``test_non_contiguous_tensors``): the device's inputs are
  strided views; outputs and gradients compared with the CPU's contiguous run;
* ``channels_last`` (``test_memory_format``): 4-D / 5-D inputs and the module in
  channels-last memory format on both sides: values, gradients and whether each output
  is channels-last compared with the CPU's;
* ``factory_kwargs`` (``test_factory_kwargs``): ``Module(..., device="neuron",
  dtype=...)`` puts every parameter and buffer on the device in that dtype, and
  runs like the CPU module holding the same state;
* ``pickle`` (``test_pickle``): ``torch.save``/``torch.load`` of the device
  module keeps it on the device and its results; its ``state_dict`` loaded into
  a CPU module gives the CPU's results;
* ``device_moves`` (``test_to``): CPU -> neuron -> CPU three times, each time
  equal to a CPU module run the same way;
* ``errors`` (``test_errors``): every ``module_error_inputs_func`` sample raises
  on the device the error type and message upstream expects (a sample the CPU
  does not reject that way either is a SKIP).

Checks of an optimizer (per OptimizerInfo configuration, float32): a small
least-squares problem (``W`` 4x3 and ``b``; an embedding with sparse gradients
for SparseAdam), four ``step(closure)`` calls, parameters and losses compared:

* ``steps`` (``test_forloop_goes_right_direction``): the configuration as given;
* ``foreach`` (``test_foreach_matches_forloop``): ``foreach=True`` equals
  ``foreach=False`` on the device;
* ``fused`` (``test_fused_matches_forloop``): ``fused=True`` on the device against
  ``fused=True`` on the CPU, for the optimizers with a fused implementation;
* ``param_groups`` (``test_param_groups_lr``): ``W`` and ``b`` in two parameter
  groups, the second with half the learning rate, compared with the CPU;
* ``state_dict`` (``test_state_dict_with_cuda_params``): two steps on the
  device, its ``state_dict`` loaded into a CPU optimizer, two more steps on
  each: equal;
* ``scheduler`` (``test_param_group_with_lrscheduler_goes_right_direction``):
  upstream's LR scheduler sets (``scheduler_inputs``) stepped with the
  optimizer: parameters and learning rates equal;
* ``sparse`` (``test_rosenbrock_sparse``): sparse gradients, for the
  optimizers that support them.

A sample the CPU itself rejects is recorded as such (SKIP, with the CPU's
error).  A float32 MISMATCH is judged against a float64 CPU run of the same
sample: when the device is as close to it as the CPU is, the row says
"rounding" (as in the OpInfo sweep).
"""
from __future__ import annotations

import copy
import io
import traceback
import unittest
import zlib

from .conformance_worker import (_Fallbacks, _compare, _exc, _map, _ref_errors, _ref_verdict,
                                 _short, _tensors, serve, worker_setup)

MODULE_CHECKS = ("forward", "backward", "noncontiguous", "channels_last", "factory_kwargs", "pickle",
                 "device_moves", "errors")
OPTIM_CHECKS = ("steps", "foreach", "fused", "param_groups", "state_dict", "scheduler", "sparse")
# upstream test -> the checks it carries (its DecorateInfo skips apply to them)
MODULE_TESTS = {
    "test_cpu_gpu_parity": ("forward", "backward"),
    "test_non_contiguous_tensors": ("noncontiguous",),
    "test_memory_format": ("channels_last",),
    "test_factory_kwargs": ("factory_kwargs",),
    "test_pickle": ("pickle",),
    "test_to": ("device_moves",),
    "test_errors": ("errors",),
}
OPTIM_TESTS = {
    "test_forloop_goes_right_direction": ("steps",),
    "test_foreach_matches_forloop": ("foreach",),
    "test_fused_matches_forloop": ("fused",),
    "test_param_groups_lr": ("param_groups",),
    "test_state_dict_with_cuda_params": ("state_dict",),
    "test_param_group_with_lrscheduler_goes_right_direction": ("scheduler",),
    "test_rosenbrock_sparse": ("sparse",),
}
STEPS = 4
# at most this many samples per module x dtype x mode (0: all)
MAX_SAMPLES = 16


class _CpuRejects(Exception):
    """The CPU raised on this sample: nothing to compare with."""


class _Skip(Exception):
    """The check does not apply to this sample (the reason is the message)."""


# ---------------------------------------------------------------------------
# helpers


def _wide_dtype(t):
    import torch

    return torch.float64 if t.is_floating_point() and t.dtype != torch.float64 else None


def _leaf(t, device, *, dtype=None, noncontig=False):
    """A fresh leaf copy of `t` on `device` (keeping requires_grad), optionally widened or strided."""
    import torch

    with torch.no_grad():
        c = t.detach().to(device=device, dtype=dtype or t.dtype)
        if noncontig and c.dim() > 0 and c.numel() > 1:
            big = torch.zeros(c.shape + (2,), dtype=c.dtype, device=c.device)
            big[..., 0] = c
            c = big[..., 0]
            assert not c.is_contiguous()
    if t.requires_grad and c.is_floating_point():
        c.requires_grad_(True)
    return c


def _copy_args(args, kwargs, device, *, wide=False, noncontig=False):
    def f(t):
        return _leaf(t, device, dtype=_wide_dtype(t) if wide else None, noncontig=noncontig)

    return _map(list(args), f), _map(dict(kwargs), f)


def _diff_outputs(out):
    return [t for t in _tensors(out, []) if t.requires_grad]


def _cpu(x):
    return _map(x, lambda t: t.detach().cpu())


def _judge(test, actual, expected, ref_fn, dtype, rec, check):
    """Compare; on a mismatch measure against the float64 reference; returns [status, msg]."""
    import torch

    try:
        _compare(test, actual, expected)
        return ["PASS", ""]
    except AssertionError as e:
        if getattr(e, "near_miss", False):
            rec.setdefault("near", {})[check] = True
        if dtype == torch.float32 and ref_fn is not None:
            try:
                ref = ref_fn()
                verdict = _ref_verdict(_ref_errors(actual, expected, ref))
            except Exception:  # noqa: BLE001  (no float64 kernel, ...: no verdict)
                verdict = None
            if verdict is not None:
                rec.setdefault("ref", {})[check] = verdict
        return ["MISMATCH", _exc(e)]


def _record(rec, check, status, fb=None):
    if fb is not None and status[0] == "PASS" and fb.fallback:
        status = ["FALLBACK", "ran through the CPU fallback: " + ", ".join(fb.fallback)]
    rec.setdefault("checks", {})[check] = status
    if fb is not None and fb.fallback:
        rec.setdefault("fb", {})[check] = fb.fallback


# ---------------------------------------------------------------------------
# modules


def _construct(mi, inp, to_dtype, seed, factory=None):
    """The module of a sample, seeded; `factory` ({"device", "dtype"}) passed to the constructor."""
    import torch

    torch.manual_seed(seed)
    ci = inp.constructor_input
    if factory:
        # tensors given to the constructor (a loss's class weights, ...) go where the module is
        # built, as a user building it there would pass them
        args, kwargs = _map(list(ci.args), lambda t: t.to(factory["device"])), \
            _map(dict(ci.kwargs), lambda t: t.to(factory["device"]))
        return mi.module_cls(*args, **dict(kwargs, **factory))
    return mi.module_cls(*ci.args, **ci.kwargs).to(to_dtype)


def _materialize(m, inp, device="cpu"):
    """A lazy module's parameters get their shapes from a first forward (on `device`)."""
    import torch

    from torch.nn.modules.lazy import LazyModuleMixin

    if isinstance(m, LazyModuleMixin) and m.has_uninitialized_params():
        with torch.no_grad():
            fi = inp.forward_input
            args, kwargs = _copy_args(fi.args, fi.kwargs, device)
            m(*args, **kwargs)
    return m


def _in_format(x, fmt):
    """Tensors of `fmt`'s rank (4-d channels_last, 5-d channels_last_3d) in that format."""
    import torch

    rank = 4 if fmt == torch.channels_last else 5

    def f(t):
        if t.dim() != rank:
            return t
        c = t.detach().to(memory_format=fmt)
        return c.requires_grad_(t.requires_grad) if c.is_floating_point() else c
    return _map(x, f)


def _out_formats(out):
    """(rank, empty, channels-last in its rank's format, contiguous) of each 4-d / 5-d output."""
    import torch

    fmts = []
    for t in _tensors(out, []):
        fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(t.dim())
        fmts.append(None if fmt is None else
                    (t.dim(), t.numel() == 0, t.is_contiguous(memory_format=fmt), t.is_contiguous()))
    return fmts


def _format_ok(dev, cpu, rank):
    """The device's output memory format is the CPU's, or the one PyTorch's test_memory_format
    requires (an output of the input format's rank in that format, others contiguous)."""
    if dev is None or dev == cpu or dev[1]:
        return True
    return dev[2] if dev[0] == rank else dev[3]


def _memory_format_case(test, mi, tmpl, fi, dtype, device, training, seed, cots, fmt, ref, rec):
    """One memory format: the module and the inputs of its rank in `fmt` on both sides.
    Values and gradients are compared with the CPU's; each output's memory format too
    (:func:`_format_ok`).  False when the check did not pass."""
    import torch

    rank = 4 if fmt == torch.channels_last else 5

    def in_fmt(m):
        for t in list(m.parameters()) + list(m.buffers()):
            if t.dim() == rank:
                t.data = t.data.contiguous(memory_format=fmt)
        return m

    cpu_f, dev_f = [], []
    cpu_cl = _run_module(in_fmt(copy.deepcopy(tmpl)), fi, "cpu", training=training, seed=seed,
                         cots=cots, memory_format=fmt, formats=cpu_f)
    try:
        with _Fallbacks() as fb:
            dev = _run_module(in_fmt(copy.deepcopy(tmpl).to(device)), fi, device, training=training,
                              seed=seed, cots=cots, memory_format=fmt, formats=dev_f)
    except Exception as e:  # noqa: BLE001
        _record(rec, "channels_last", ["ERROR", _exc(e)])
        return False
    bad = [(d, c) for d, c in zip(dev_f, cpu_f) if not _format_ok(d, c, rank)]
    if bad:
        _record(rec, "channels_last", ["MISMATCH", f"{fmt}: output memory format (rank, empty, "
                                       f"channels-last, contiguous): device {bad[0][0]}, CPU {bad[0][1]}"])
        return False
    st = _judge(test, [dev[0], dev[2]], [cpu_cl[0], cpu_cl[2]], ref((0, 2)), dtype, rec, "channels_last")
    _record(rec, "channels_last", st, fb)
    return st[0] == "PASS"


def _run_module(m, fi, device, *, training, seed, wide=False, noncontig=False, cots=None,
                memory_format=None, formats=None):
    """Forward (and backward with `cots`) of module `m` (already on `device`) on a copy of the
    forward input; returns (outputs, buffers, grads) on the CPU and the cotangents used.
    With `memory_format`, the inputs go in that format and `formats` (a list) receives the
    outputs' formats (:func:`_out_formats`)."""
    import torch

    m.train(training)
    args, kwargs = _copy_args(fi.args, fi.kwargs, device, wide=wide, noncontig=noncontig)
    if memory_format is not None:
        args, kwargs = _in_format(args, memory_format), _in_format(kwargs, memory_format)
    torch.manual_seed(seed)
    out = m(*args, **kwargs)
    if formats is not None:
        formats.extend(_out_formats(out))
    outs = _diff_outputs(out)
    grads = None
    if cots is not None and outs:
        cs = [c.to(device=o.device, dtype=o.dtype) for c, o in zip(cots, outs)]
        torch.autograd.backward(outs, cs)
        ins = [t for t in _tensors([args, kwargs], []) if t.requires_grad]
        grads = {"inputs": [t.grad for t in ins],
                 "params": [p.grad for p in m.parameters() if p.requires_grad]}
        grads = _cpu(grads)
    return _cpu(out), _cpu(dict(m.named_buffers())), grads


def _cotangents(out_cpu_module_run, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in out_cpu_module_run]


def _module_sample(test, group, mi, inp, dtype, device, training, seed, rec):
    """Run one sample's checks of `group` (an upstream test's checks); fills rec["checks"]."""
    import torch

    fi = inp.forward_input
    tmpl = _materialize(_construct(mi, inp, dtype, seed), inp)
    backward = dtype in (torch.float32, torch.float64)

    # the CPU reference (also tells us whether the CPU accepts this sample)
    try:
        cpu_m = copy.deepcopy(tmpl)
        cpu_m.train(training)
        args, kwargs = _copy_args(fi.args, fi.kwargs, "cpu")
        torch.manual_seed(seed)
        out = cpu_m(*args, **kwargs)
        outs = _diff_outputs(out)
        cots = _cotangents(outs, seed + 1) if (backward and outs) else None
    except Exception as e:  # noqa: BLE001
        raise _CpuRejects("the CPU raises: " + _exc(e))
    cpu_res = _run_module(copy.deepcopy(tmpl), fi, "cpu", training=training, seed=seed, cots=cots)

    wide = []

    def ref(which):
        """The float64 CPU run of the same sample (computed once, on a float32 mismatch)."""
        def f():
            if not wide:
                wide.append(_run_module(copy.deepcopy(tmpl).to(torch.float64), fi, "cpu",
                                        training=training, seed=seed, wide=True, cots=cots))
            r = wide[0]
            return [r[i] for i in which] if isinstance(which, tuple) else r[which]
        return f

    if group == "test_cpu_gpu_parity":
        try:
            with _Fallbacks() as fb:
                dev = _run_module(copy.deepcopy(tmpl).to(device), fi, device, training=training,
                                  seed=seed, cots=cots)
        except Exception as e:  # noqa: BLE001
            _record(rec, "forward", ["ERROR", _exc(e)])
            if cots is not None:
                _record(rec, "backward", ["ERROR", "forward/backward raised: " + _exc(e)])
            return
        st = _judge(test, [dev[0], dev[1]], [cpu_res[0], cpu_res[1]],
                    ref((0, 1)), dtype, rec, "forward")
        _record(rec, "forward", st, fb)
        if cots is not None:
            st = _judge(test, dev[2], cpu_res[2], ref(2), dtype, rec, "backward")
            _record(rec, "backward", st, fb)
    elif group == "test_non_contiguous_tensors":
        if not any(t.dim() > 0 and t.numel() > 1 for t in _tensors([fi.args, fi.kwargs], [])):
            raise _Skip("no input tensor with more than one element")
        try:
            with _Fallbacks() as fb:
                dev = _run_module(copy.deepcopy(tmpl).to(device), fi, device, training=training,
                                  seed=seed, noncontig=True, cots=cots)
        except Exception as e:  # noqa: BLE001
            _record(rec, "noncontiguous", ["ERROR", _exc(e)])
            return
        actual, expected = [dev[0], dev[2]], [cpu_res[0], cpu_res[2]]
        st = _judge(test, actual, expected, ref((0, 2)), dtype, rec, "noncontiguous")
        _record(rec, "noncontiguous", st, fb)
    elif group == "test_memory_format":
        dims = {t.dim() for t in _tensors([fi.args, fi.kwargs], [])}
        fmts = [f for d, f in ((4, torch.channels_last), (5, torch.channels_last_3d)) if d in dims]
        if not fmts:
            raise _Skip("no 4-D or 5-D input")
        for fmt in fmts:
            if not _memory_format_case(test, mi, tmpl, fi, dtype, device, training, seed, cots, fmt,
                                       ref, rec):
                return
    elif group == "test_factory_kwargs":
        try:
            cpu_f = _construct(mi, inp, dtype, seed, factory={"device": "cpu", "dtype": dtype})
        except TypeError as e:
            raise _Skip("the constructor takes no device=/dtype= (the CPU rejects them too): " + _exc(e))
        try:
            with _Fallbacks() as fb:
                dev_m = _construct(mi, inp, dtype, seed, factory={"device": device, "dtype": dtype})
                dev_m = _materialize(dev_m, inp, device)
                wrong = [f"{n}: {t.device}/{t.dtype}" for n, t in
                         list(dev_m.named_parameters()) + list(dev_m.named_buffers())
                         if t.device.type != torch.device(device).type or
                         (t.is_floating_point() and t.dtype != dtype)]
                if wrong:
                    _record(rec, "factory_kwargs", ["MISMATCH", "not on the device in " + str(dtype) +
                                                    ": " + ", ".join(wrong)[:400]])
                    return
                cpu_f = _materialize(cpu_f, inp)
                cpu_f.load_state_dict({k: v.cpu() for k, v in dev_m.state_dict().items()})
                dev = _run_module(dev_m, fi, device, training=training, seed=seed)
            cpu_r = _run_module(cpu_f, fi, "cpu", training=training, seed=seed)
        except Exception as e:  # noqa: BLE001
            _record(rec, "factory_kwargs", ["ERROR", _exc(e)])
            return
        _record(rec, "factory_kwargs", _judge(test, dev[0], cpu_r[0], None, dtype, rec, "factory_kwargs"), fb)
    elif group == "test_pickle":
        try:
            with _Fallbacks() as fb:
                dev_m = copy.deepcopy(tmpl).to(device)
                buf = io.BytesIO()
                torch.save(dev_m, buf)
                buf.seek(0)
                loaded = torch.load(buf, weights_only=False)
                off = [n for n, p in loaded.named_parameters() if p.device.type != torch.device(device).type]
                if off:
                    _record(rec, "pickle", ["MISMATCH", "torch.load put parameters off the device: " + ", ".join(off)])
                    return
                dev = _run_module(loaded, fi, device, training=training, seed=seed)
                cpu_sd = copy.deepcopy(tmpl)
                cpu_sd.load_state_dict(dev_m.state_dict())
            cpu_sd_r = _run_module(cpu_sd, fi, "cpu", training=training, seed=seed)
        except Exception as e:  # noqa: BLE001
            _record(rec, "pickle", ["ERROR", _exc(e)])
            return
        _record(rec, "pickle", _judge(test, [dev[0], cpu_sd_r[0]], [cpu_res[0], cpu_res[0]], None, dtype,
                                      rec, "pickle"), fb)
    elif group == "test_to":
        try:
            with _Fallbacks() as fb:
                m = copy.deepcopy(tmpl)
                ref_m = copy.deepcopy(tmpl)
                actual, expected = [], []
                with torch.no_grad():
                    for _ in range(3):
                        m.to(device)
                        actual.append(_run_module(m, fi, device, training=training, seed=seed)[0])
                        expected.append(_run_module(ref_m, fi, "cpu", training=training, seed=seed)[0])
                        m.to("cpu")
                        off = [n for n, t in list(m.named_parameters()) + list(m.named_buffers())
                               if t.device.type != "cpu"]
                        if off:
                            raise AssertionError("after .to('cpu') still on the device: " + ", ".join(off))
                        actual.append(_run_module(m, fi, "cpu", training=training, seed=seed)[0])
                        expected.append(_run_module(ref_m, fi, "cpu", training=training, seed=seed)[0])
        except Exception as e:  # noqa: BLE001
            _record(rec, "device_moves", ["ERROR", _exc(e)])
            return
        _record(rec, "device_moves", _judge(test, actual, expected, None, dtype, rec, "device_moves"), fb)


def _error_sample(mi, ei, device, training, seed, rec):
    """One ModuleErrorInput: the expected error on the CPU, then on the device."""
    import re

    import torch
    from torch.testing._internal.common_modules import ModuleErrorEnum

    inp = ei.module_error_input
    ci, fi = inp.constructor_input, inp.forward_input

    def attempt(dev):
        torch.manual_seed(seed)
        try:
            if ei.error_on == ModuleErrorEnum.CONSTRUCTION_ERROR:
                mi.module_cls(*ci.args, **ci.kwargs)
            else:
                m = mi.module_cls(*ci.args, **ci.kwargs).to(dev)
                m.train(training)
                args, kwargs = _copy_args(fi.args, fi.kwargs, dev)
                m(*args, **kwargs)
        except Exception as e:  # noqa: BLE001
            return e
        return None

    def matches(e):
        return isinstance(e, ei.error_type) and re.search(ei.error_regex, str(e)) is not None

    want = f"{ei.error_type.__name__} matching {ei.error_regex!r}"
    cpu = attempt("cpu")
    if not matches(cpu):
        raise _Skip(f"the CPU does not raise {want} either ({_exc(cpu) if cpu else 'no error'})")
    got = attempt(device)
    if got is None:
        _record(rec, "errors", ["MISMATCH", f"did not raise; expected {want}"])
    elif not matches(got):
        _record(rec, "errors", ["MISMATCH", f"raised {_exc(got)}; expected {want}"])
    else:
        _record(rec, "errors", ["PASS", ""])


def _describe_module_input(inp, training):
    ci, fi = inp.constructor_input, inp.forward_input

    def d(x):
        import torch

        if isinstance(x, torch.Tensor):
            return f"T{list(x.shape)}"
        if isinstance(x, (list, tuple)):
            return "(" + ", ".join(d(v) for v in x) + ")"
        if isinstance(x, dict):
            return "{" + ", ".join(f"{k}={d(v)}" for k, v in x.items()) + "}"
        return repr(x)[:40]

    fwd = f"{d(fi.args)} {d(fi.kwargs)}" if fi is not None else "(construction)"
    return _short(f"{'train' if training else 'eval'}: {d(ci.args)} {d(ci.kwargs)} -> {fwd}", 300)


# ---------------------------------------------------------------------------
# optimizers


def _problem(optim_info, device, dtype, seed):
    """(params, closure factory) of the small problem an optimizer is stepped on."""
    import torch

    if optim_info.only_supports_sparse_grads:
        return _sparse_problem(device, dtype, seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 3, generator=g, dtype=torch.float64)
    y = torch.randn(8, 4, generator=g, dtype=torch.float64)
    w = torch.randn(4, 3, generator=g, dtype=torch.float64)
    b = torch.randn(4, generator=g, dtype=torch.float64)
    only_2d = optim_info.name == "Muon"
    params = [t.to(device=device, dtype=dtype).requires_grad_() for t in ([w] if only_2d else [w, b])]
    xd, yd = x.to(device=device, dtype=dtype), y.to(device=device, dtype=dtype)

    def loss_fn():
        out = xd @ params[0].T
        if len(params) > 1:
            out = out + params[1]
        return ((out - yd) ** 2).mean()
    return params, loss_fn


def _sparse_problem(device, dtype, seed):
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(seed)
    w = torch.randn(10, 3, generator=g, dtype=torch.float64)
    tgt = torch.randn(4, 3, generator=g, dtype=torch.float64)
    params = [w.to(device=device, dtype=dtype).requires_grad_()]
    idx, t_d = torch.tensor([1, 3, 3, 7]).to(device), tgt.to(device=device, dtype=dtype)

    def loss_fn():
        return ((F.embedding(idx, params[0], sparse=True) - t_d) ** 2).sum()
    return params, loss_fn


def _run_optim(optim_info, kwargs, device, dtype, seed, *, steps=STEPS, schedulers=(), problem=None,
               groups=False):
    """Steps of the optimizer; returns (params, losses, lrs) on the CPU and the optimizer."""
    import torch

    if problem is None:
        params, loss_fn = _problem(optim_info, device, dtype, seed)
    else:
        params, loss_fn = problem(device, dtype, seed)
    if groups:
        import inspect

        lr = kwargs.get("lr", inspect.signature(optim_info.optim_cls.__init__).parameters["lr"].default)
        second = {"params": params[1:]}
        if isinstance(lr, (int, float)):
            second["lr"] = lr / 2
        opt = optim_info.optim_cls([{"params": params[:1]}, second], **kwargs)
    else:
        opt = optim_info.optim_cls(params, **kwargs)
    scheds = [s(opt) for s in schedulers]

    def closure():
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    losses, lrs = [], []
    for _ in range(steps):
        loss = opt.step(closure)
        losses.append(float(loss) if loss is not None else None)
        for s in scheds:
            if type(s).__name__ == "ReduceLROnPlateau":
                s.step(losses[-1])
            else:
                s.step()
        lrs.append([float(g["lr"]) if not isinstance(g["lr"], torch.Tensor) else float(g["lr"].item())
                    for g in opt.param_groups])
    return _cpu([p.detach() for p in params]), losses, lrs, opt


def _optim_sample(test, group, optim_info, oinp, dtype, device, seed, rec):
    import torch

    kwargs = dict(oinp.kwargs)

    def ref(**kw):
        def f():
            r = _run_optim(optim_info, kwargs, "cpu", torch.float64, seed, **kw)
            return [r[0], torch.tensor(r[1], dtype=torch.float64)]
        return f

    def both(check, kw_dev, kw_cpu=None, *, compare_lrs=False, **kw):
        kw_cpu = kw_dev if kw_cpu is None else kw_cpu
        try:
            cpu = _run_optim(optim_info, kw_cpu, "cpu", dtype, seed, **kw)
        except Exception as e:  # noqa: BLE001
            raise _CpuRejects("the CPU rejects this configuration: " + _exc(e))
        try:
            with _Fallbacks() as fb:
                dev = _run_optim(optim_info, kw_dev, device, dtype, seed, **kw)
        except Exception as e:  # noqa: BLE001
            _record(rec, check, ["ERROR", _exc(e)])
            return
        actual = [dev[0], torch.tensor(dev[1], dtype=dtype)]
        expected = [cpu[0], torch.tensor(cpu[1], dtype=dtype)]
        if compare_lrs:
            actual.append(dev[2])
            expected.append(cpu[2])
        st = _judge(test, actual, expected, None if compare_lrs else ref(**kw), dtype, rec, check)
        _record(rec, check, st, fb)

    if group == "test_forloop_goes_right_direction":
        both("steps", kwargs)
    elif group == "test_foreach_matches_forloop":
        if "foreach" not in optim_info.supported_impls:
            raise _Skip(f"{optim_info.name} has no foreach implementation")
        if "foreach" in kwargs:
            raise _Skip("the configuration sets foreach itself")
        try:
            with _Fallbacks() as fb:
                a = _run_optim(optim_info, dict(kwargs, foreach=True), device, dtype, seed)
                b = _run_optim(optim_info, dict(kwargs, foreach=False), device, dtype, seed)
        except Exception as e:  # noqa: BLE001
            try:
                _run_optim(optim_info, dict(kwargs, foreach=True), "cpu", dtype, seed)
            except Exception as e2:  # noqa: BLE001
                raise _CpuRejects("the CPU rejects foreach=True here too: " + _exc(e2))
            _record(rec, "foreach", ["ERROR", _exc(e)])
            return
        st = _judge(test, [a[0], torch.tensor(a[1], dtype=dtype)], [b[0], torch.tensor(b[1], dtype=dtype)],
                    None, dtype, rec, "foreach")
        _record(rec, "foreach", st, fb)
    elif group == "test_fused_matches_forloop":
        if "fused" not in optim_info.supported_impls:
            raise _Skip(f"{optim_info.name} has no fused implementation")
        if "foreach" in kwargs or "fused" in kwargs:
            raise _Skip("the configuration sets foreach/fused itself")
        both("fused", dict(kwargs, fused=True))
    elif group == "test_param_groups_lr":
        if not optim_info.supports_param_groups:
            raise _Skip(f"{optim_info.name} does not support parameter groups")
        if optim_info.name == "Muon" or optim_info.only_supports_sparse_grads:
            raise _Skip("the problem has one parameter for this optimizer")
        both("param_groups", kwargs, groups=True)
    elif group == "test_state_dict_with_cuda_params":
        try:
            cpu = _run_optim(optim_info, kwargs, "cpu", dtype, seed)
        except Exception as e:  # noqa: BLE001
            raise _CpuRejects("the CPU rejects this configuration: " + _exc(e))
        try:
            with _Fallbacks() as fb:
                half = _run_optim(optim_info, kwargs, device, dtype, seed, steps=STEPS // 2)
                opt = half[3]
                buf = io.BytesIO()
                torch.save({"params": [p.detach() for g in opt.param_groups for p in g["params"]],
                            "optim": opt.state_dict()}, buf)
                buf.seek(0)
                saved = torch.load(buf, map_location="cpu", weights_only=False)
                p_dev = [p.detach() for g in opt.param_groups for p in g["params"]]

                # continue on the device with the same optimizer
                params_d, loss_d = _problem(optim_info, device, dtype, seed)
                with torch.no_grad():
                    for p, v in zip(params_d, p_dev):
                        p.copy_(v)
                opt_d = optim_info.optim_cls(params_d, **kwargs)
                opt_d.load_state_dict(opt.state_dict())
                dev_rest = _continue(opt_d, loss_d, STEPS - STEPS // 2)
            params_c, loss_c = _problem(optim_info, "cpu", dtype, seed)
            with torch.no_grad():
                for p, v in zip(params_c, saved["params"]):
                    p.copy_(v)
            opt_c = optim_info.optim_cls(params_c, **kwargs)
            opt_c.load_state_dict(saved["optim"])
            cpu_rest = _continue(opt_c, loss_c, STEPS - STEPS // 2)
            state_dev = [v.device.type for s in opt_c.state.values() for v in s.values()
                         if isinstance(v, torch.Tensor) and v.dim() > 0]
            if any(t != "cpu" for t in state_dev):
                raise AssertionError(f"the CPU optimizer's loaded state is on {set(state_dev)}")
        except AssertionError as e:
            _record(rec, "state_dict", ["MISMATCH", _exc(e)])
            return
        except Exception as e:  # noqa: BLE001
            _record(rec, "state_dict", ["ERROR", _exc(e)])
            return
        del cpu
        actual = [_cpu([p.detach() for p in params_d]), torch.tensor(dev_rest, dtype=dtype)]
        expected = [_cpu([p.detach() for p in params_c]), torch.tensor(cpu_rest, dtype=dtype)]
        _record(rec, "state_dict", _judge(test, actual, expected, None, dtype, rec, "state_dict"), fb)
    elif group == "test_param_group_with_lrscheduler_goes_right_direction":
        if oinp.desc != "default":
            raise _Skip("schedulers are checked on the default configuration")
        for k, scheds in enumerate(optim_info.scheduler_inputs):
            both("scheduler", kwargs, schedulers=scheds, compare_lrs=True)
            if rec.get("checks", {}).get("scheduler", ["PASS"])[0] not in ("PASS",):
                break
    elif group == "test_rosenbrock_sparse":
        if not optim_info.supports_sparse and not optim_info.only_supports_sparse_grads:
            raise _Skip(f"{optim_info.name} does not support sparse gradients")
        if optim_info.only_supports_sparse_grads:
            raise _Skip("checked by 'steps' (this optimizer only takes sparse gradients)")
        both("sparse", kwargs, problem=_sparse_problem)


def _continue(opt, loss_fn, steps):
    losses = []

    def closure():
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    for _ in range(steps):
        losses.append(float(opt.step(closure)))
    return losses


# ---------------------------------------------------------------------------
# the device-generic tests and the unit runner


class _Unit:
    def __init__(self, send, max_samples):
        self.send, self.max_samples = send, max_samples
        self.n = 0
        self.started = False

    def _picked(self, total):
        if self.max_samples and total > self.max_samples:
            k = self.max_samples
            return sorted({round(i * (total - 1) / max(k - 1, 1)) for i in range(k)})
        return list(range(total))

    def run_module(self, group, test, device, dtype, mi, training):
        import torch

        self.started = True
        seed = zlib.crc32(f"{mi.name}|{dtype}|{training}".encode())
        torch.manual_seed(seed)  # the samples' random values: the same whatever ran before
        if group == "test_errors":
            self._run_errors(mi, dtype, device, training, seed)
            return
        try:
            inputs = [i for i in mi.module_inputs_func(mi, device="cpu", dtype=dtype, requires_grad=True,
                                                       training=training) if i.forward_input is not None]
        except Exception as e:  # noqa: BLE001
            self.send(("note", {"checks": MODULE_TESTS[group], "sample_error": "module_inputs_func: " + _exc(e)}))
            return
        for i in self._picked(len(inputs)):
            inp = inputs[i]
            rec = {"i": f"{'t' if training else 'e'}{i}", "desc": _describe_module_input(inp, training)}
            try:
                _module_sample(test, group, mi, inp, dtype, device, training, seed + i, rec)
            except _CpuRejects as e:
                for c in MODULE_TESTS[group]:
                    rec.setdefault("checks", {})[c] = ["SKIP", str(e)]
            except _Skip as e:
                for c in MODULE_TESTS[group]:
                    rec.setdefault("checks", {})[c] = ["SKIP", str(e)]
            except Exception as e:  # noqa: BLE001  (a harness bug on an unusual sample: say so, go on)
                for c in MODULE_TESTS[group]:
                    rec.setdefault("checks", {}).setdefault(c, ["ERROR", "harness error: " + _exc(e)])
            self.send(("sample", rec))
            torch.neuron.synchronize() if hasattr(torch, "neuron") else None

    def _run_errors(self, mi, dtype, device, training, seed):
        if mi.module_error_inputs_func is None:
            self.send(("note", {"checks": ("errors",), "sample_error": "the ModuleInfo has no error inputs"}))
            return
        try:
            inputs = list(mi.module_error_inputs_func(mi, device="cpu", dtype=dtype, requires_grad=False,
                                                       training=training))
        except Exception as e:  # noqa: BLE001
            self.send(("note", {"checks": ("errors",), "sample_error": "module_error_inputs_func: " + _exc(e)}))
            return
        for i in self._picked(len(inputs)):
            ei = inputs[i]
            rec = {"i": f"{'t' if training else 'e'}{i}",
                   "desc": _describe_module_input(ei.module_error_input, training)}
            try:
                _error_sample(mi, ei, device, training, seed + i, rec)
            except _Skip as e:
                rec.setdefault("checks", {})["errors"] = ["SKIP", str(e)]
            except Exception as e:  # noqa: BLE001
                rec.setdefault("checks", {})["errors"] = ["ERROR", "harness error: " + _exc(e)]
            self.send(("sample", rec))

    def run_optim(self, group, test, device, dtype, oi):
        self.started = True
        seed = zlib.crc32(f"{oi.name}|{dtype}".encode())
        try:
            configs = list(oi.optim_inputs_func(device="cpu", dtype=dtype))
        except TypeError:
            configs = list(oi.optim_inputs_func(device="cpu"))
        for i in self._picked(len(configs)):
            oinp = configs[i]
            rec = {"i": str(i), "desc": _short(f"{oinp.desc}: {oinp.kwargs}", 300)}
            try:
                _optim_sample(test, group, oi, oinp, dtype, device, seed + i, rec)
            except (_CpuRejects, _Skip) as e:
                for c in OPTIM_TESTS[group]:
                    rec.setdefault("checks", {})[c] = ["SKIP", str(e)]
            except Exception as e:  # noqa: BLE001
                for c in OPTIM_TESTS[group]:
                    rec.setdefault("checks", {}).setdefault(c, ["ERROR", "harness error: " + _exc(e)])
            self.send(("sample", rec))


_unit: _Unit | None = None


def build_test_class(db, items, dtypes):
    """Upstream-named device-generic tests, instantiated for the neuron device."""
    import torchneuron  # noqa: F401

    from .opdb import _clean_argv

    with _clean_argv():
        from torch.testing._internal.common_device_type import instantiate_device_type_tests
        from torch.testing._internal.common_utils import TestCase

    scope = {}
    if db == "modules":
        from torch.testing._internal.common_modules import modules

        def make(group):
            @modules(items, allowed_dtypes=dtypes)
            def t(self, device, dtype, module_info, training):
                _unit.run_module(group, self, device, dtype, module_info, training)
            t.__name__ = group
            return t

        body = {g: make(g) for g in MODULE_TESTS}
        scope["TestModule"] = type("TestModule", (TestCase,), body)
        generic = "TestModule"
    else:
        from torch.testing._internal.common_optimizers import optims

        def make(group):
            @optims(items, dtypes=dtypes)
            def t(self, device, dtype, optim_info):
                _unit.run_optim(group, self, device, dtype, optim_info)
            t.__name__ = group
            return t

        body = {g: make(g) for g in OPTIM_TESTS}
        scope["TestOptimRenewed"] = type("TestOptimRenewed", (TestCase,), body)
        generic = "TestOptimRenewed"
    instantiate_device_type_tests(scope[generic], scope, only_for=("privateuse1",))
    classes = [c for n, c in scope.items() if n != generic]
    if len(classes) != 1:
        raise RuntimeError("torchneuron conformance: PyTorch's device-generic test machinery did not "
                           "instantiate a PrivateUse1 (neuron) test class")
    return classes[0]


def _test_names(cls, db, item, dtype, group):
    from torch.testing._internal.common_device_type import _dtype_test_suffix

    suffix = f"_neuron{_dtype_test_suffix(dtype)}"
    modes = ("", "_train_mode", "_eval_mode") if db == "modules" else ("",)
    return [n for n in (f"{group}_{item.formatted_name if db == 'modules' else item.name}{m}{suffix}"
                        for m in modes) if hasattr(cls, n)]


def run_unit(cls, db, item, dtype, send, max_samples):
    """Every upstream-named test of one module/optimizer x dtype, in this process."""
    import torch

    global _unit
    _unit = unit = _Unit(send, max_samples)
    tests = MODULE_TESTS if db == "modules" else OPTIM_TESTS
    device = f"neuron:{torch.neuron.current_device()}"
    for group, checks in tests.items():
        names = _test_names(cls, db, item, dtype, group)
        if not names:
            send(("note", {"checks": checks, "sample_error": f"no instantiated {group} for this dtype"}))
            continue
        for name in names:
            method = getattr(cls, name)
            if getattr(method, "__unittest_expecting_failure__", False):
                send(("note", {"checks": checks, "xfail": f"PyTorch marks {group} an expected failure"}))
            inst = cls(name)
            unit.started = False
            try:
                inst.setUp()
                getattr(inst, name)()
            except unittest.SkipTest as e:
                send(("note", {"checks": checks, "skip": _short(f"PyTorch skips {group}: {e}", 300)}))
            finally:
                try:
                    inst.tearDown()
                except Exception:  # noqa: BLE001
                    pass


def _items(db):
    if db == "modules":
        from torch.testing._internal.common_modules import module_db

        return {m.name: m for m in module_db}
    from torch.testing._internal.common_optimizers import optim_db

    return {o.name: o for o in optim_db}


def main(conn, db, ids, dtype_names, log_path, max_samples=MAX_SAMPLES):
    """Entry point of a worker process (multiprocessing, spawn)."""
    worker_setup(log_path)
    try:
        import torch

        import torchneuron

        from .opdb import DTYPES, _clean_argv

        torchneuron.set_fallback_policy("silent")
        torch.set_num_threads(1)
        with _clean_argv():
            by_name = _items(db)
        items = [by_name[i] for i in ids if i in by_name] if ids else list(by_name.values())
        dtypes = [DTYPES[n] for n in dtype_names]
        cls = build_test_class(db, items, dtypes)
        cls.setUpClass()
    except BaseException:
        conn.send(("fatal", traceback.format_exc()))
        return
    serve(conn, lambda name, dtname: run_unit(cls, db, by_name[name], DTYPES[dtname], conn.send,
                                              max_samples))

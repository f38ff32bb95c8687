"""Shared test helpers: run the same program on CPU and on the neuron device, compare.

``check(fn, *args)`` runs ``fn`` on CPU tensors and on neuron copies of them
(under ``TORCHNEURON_FALLBACK=error`` unless ``native=False``, so a pass means
the op ran natively), then compares results and the arguments afterwards (so
in-place effects are compared too).  With ``grad=True`` it also backpropagates
a fixed random cotangent and compares the gradients of every float input.
"""
from __future__ import annotations

import contextlib

import pytest
import torch

import torchneuron

DEV = torch.device("neuron:0")


def rand_of(shape, dtype=torch.float32):
    """Random CPU values of any dtype: normal floats, ints in [-9, 9], fair bools."""
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, dtype=dtype)
    return torch.randint(-9, 10, shape, dtype=dtype)


def to_dev(x, device=DEV):
    if isinstance(x, torch.Tensor):
        y = x.detach().to(device)
        if x.requires_grad:
            y.requires_grad_(True)
        return y
    if isinstance(x, (list, tuple)):
        return type(x)(to_dev(v, device) for v in x)
    if isinstance(x, dict):
        return {k: to_dev(v, device) for k, v in x.items()}
    return x


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v) for v in x)
    if isinstance(x, dict):
        return {k: to_cpu(v) for k, v in x.items()}
    return x


def clone_args(x):
    if isinstance(x, torch.Tensor):
        y = x.detach().clone()
        if x.requires_grad:
            y.requires_grad_(True)
        return y
    if isinstance(x, (list, tuple)):
        return type(x)(clone_args(v) for v in x)
    if isinstance(x, dict):
        return {k: clone_args(v) for k, v in x.items()}
    return x


def assert_same(actual, expected, atol=None, rtol=None, equal_nan=True, check_stride=False,
                msg=""):
    """`actual` (from the device) equals `expected` (from CPU): type, shape, dtype, values."""
    actual = to_cpu(actual)
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{msg}: expected a tensor, got {type(actual)}"
        assert actual.shape == expected.shape, f"{msg}: shape {actual.shape} != {expected.shape}"
        assert actual.dtype == expected.dtype, f"{msg}: dtype {actual.dtype} != {expected.dtype}"
        if check_stride and expected.numel() > 1:
            assert actual.stride() == expected.stride(), f"{msg}: stride {actual.stride()} != {expected.stride()}"
        kw = {}
        if atol is not None or rtol is not None:
            kw = dict(atol=atol or 0.0, rtol=rtol or 0.0)
        torch.testing.assert_close(actual, expected, equal_nan=equal_nan, msg=lambda m: f"{msg}: {m}", **kw)
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), \
            f"{msg}: structure {type(actual)} len {len(actual) if hasattr(actual, '__len__') else '-'} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, atol, rtol, equal_nan, check_stride, msg=f"{msg}[{i}]")
    elif isinstance(expected, float):
        assert abs(actual - expected) <= (atol or 1e-6) + (rtol or 1e-6) * abs(expected) or \
            (expected != expected and actual != actual), f"{msg}: {actual} != {expected}"
    else:
        assert actual == expected, f"{msg}: {actual} != {expected}"


@contextlib.contextmanager
def native_only(enabled=True):
    """Fail if anything inside falls back to the CPU."""
    if not enabled:
        yield
        return
    with torchneuron.fallback_policy("error"):
        yield


def _float_leaves(x, out):
    if isinstance(x, torch.Tensor):
        if x.requires_grad:
            out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _float_leaves(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _float_leaves(v, out)
    return out


def _outputs(x, out):
    if isinstance(x, torch.Tensor):
        if x.requires_grad:
            out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _outputs(v, out)
    return out


def check(fn, *args, atol=None, rtol=None, grad=False, native=True, check_stride=False,
          grad_atol=None, grad_rtol=None, seed=0, **kwargs):
    """Run fn on CPU and on the neuron device; compare results, args, and grads."""
    cpu_args = clone_args(args)
    cpu_kwargs = clone_args(kwargs)
    dev_args = to_dev(clone_args(args))
    dev_kwargs = to_dev(clone_args(kwargs))
    expected = fn(*cpu_args, **cpu_kwargs)
    with native_only(native):
        actual = fn(*dev_args, **dev_kwargs)
    assert_same(actual, to_cpu(expected), atol, rtol, check_stride=check_stride, msg="result")
    assert_same(to_cpu(dev_args), to_cpu(cpu_args), atol, rtol, msg="args after call")
    if grad:
        e_outs = _outputs(expected, [])
        a_outs = _outputs(actual, [])
        assert len(e_outs) == len(a_outs) and e_outs, "no differentiable outputs"
        g = torch.Generator().manual_seed(seed)
        cots = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in e_outs]
        try:
            torch.autograd.backward(e_outs, cots)
        except RuntimeError as e:
            # this torch has no derivative for the op (torch 2.11: narrow_copy, aminmax):
            # the device must refuse the same way
            if "is not implemented" not in str(e):
                raise
            with native_only(native), pytest.raises(type(e)) as info:
                torch.autograd.backward(a_outs, [to_dev(c) for c in cots])
            assert str(info.value) == str(e)
            return actual
        with native_only(native):
            torch.autograd.backward(a_outs, [to_dev(c) for c in cots])
        e_leaves = _float_leaves((cpu_args, cpu_kwargs), [])
        a_leaves = _float_leaves((dev_args, dev_kwargs), [])
        for i, (el, al) in enumerate(zip(e_leaves, a_leaves)):
            if el.grad is None:
                assert al.grad is None, f"grad[{i}]: expected None"
                continue
            assert al.grad is not None, f"grad[{i}]: missing on device"
            assert_same(al.grad, el.grad, grad_atol if grad_atol is not None else atol,
                        grad_rtol if grad_rtol is not None else rtol, msg=f"grad[{i}]")
    return actual

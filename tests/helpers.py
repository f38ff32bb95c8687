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


def rand(shape, dtype=torch.float32, low=-5, high=5, *, normal=False, seed=None, grad=False):
    """Random CPU values of any dtype: floats uniform in [low, high) (normal ones with
    `normal=True`), complex with both parts so, ints in [low, high) (from 0 for uint8),
    fair bools; from the global generator, or a fresh one seeded with `seed`."""
    g = None if seed is None else torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        t = torch.rand(shape, generator=g) > 0.5
    elif dtype.is_complex and normal:
        t = torch.randn(shape, generator=g, dtype=dtype)
    elif dtype.is_complex:
        part = torch.float64
        t = torch.complex(rand(shape, part, low=low, high=high, seed=seed),
                          rand(shape, part, low=low, high=high,
                               seed=None if seed is None else seed + 1)).to(dtype)
    elif dtype.is_floating_point:
        if normal:
            t = torch.randn(shape, generator=g, dtype=dtype)
        else:
            t = (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
    else:
        lo = max(low, 0) if dtype == torch.uint8 else low
        t = torch.randint(lo, high, shape, generator=g, dtype=dtype)
    return t.requires_grad_(grad) if grad else t


def rand_of(shape, dtype=torch.float32):
    """Random CPU values of any dtype: normal floats, ints in [-9, 9], fair bools."""
    return rand(shape, dtype, low=-9, high=10, normal=True)


# One tolerance table (atol, rtol) for every test: per kind of computation and dtype.
# Integer results compare exactly (the table has no entry for them).
_TOL = {
    "elementwise": {torch.bfloat16: (1e-2, 1.6e-2), torch.float16: (1e-3, 1e-3),
                    torch.float32: (1e-5, 1.3e-5), torch.complex64: (1e-5, 1.3e-5),
                    torch.float64: (1e-7, 1e-7), torch.complex128: (1e-7, 1e-7)},
    "activation": {torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3),
                   torch.float32: (2e-5, 2e-5), torch.float64: (1e-10, 1e-10)},
    "loss": {torch.bfloat16: (3e-2, 3e-2), torch.float16: (3e-3, 3e-3),
             torch.float32: (2e-5, 2e-5), torch.float64: (1e-10, 1e-10)},
    "reduction": {torch.bfloat16: (1e-2, 1e-2), torch.float16: (1e-2, 1e-2),
                  torch.float32: (1e-5, 1e-5), torch.complex64: (1e-5, 1e-5)},
    "linalg": {torch.float32: (1e-4, 1e-4), torch.float64: (1e-10, 1e-10),
               torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3),
               torch.complex64: (1e-4, 1e-4)},
    "attention": {torch.float32: (2e-5, 1e-4), torch.float64: (1e-10, 1e-10),
                  torch.bfloat16: (3e-2, 3e-2), torch.float16: (3e-3, 3e-3)},
    "conv_pool": {torch.float32: (1e-4, 1e-4), torch.float64: (1e-10, 1e-10),
                  torch.bfloat16: (3e-2, 3e-2), torch.float16: (3e-3, 3e-3)},
    "norm": {torch.float32: (1e-4, 1e-4), torch.float64: (1e-10, 1e-10),
             torch.bfloat16: (5e-2, 3e-2), torch.float16: (5e-3, 3e-3)},
    "upsample": {torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-10),
                 torch.bfloat16: (3e-2, 3e-2), torch.float16: (3e-3, 3e-3)},
}
# what a dtype without an entry falls back to, per kind (None: PyTorch's default rule)
_TOL_ELSE = {"elementwise": torch.float64, "activation": torch.float64, "loss": torch.float64}


def tol(dtype, kind="elementwise", loose=1):
    """dict(atol=..., rtol=...) for comparing a `kind` result of `dtype` with CPU's
    (empty: torch.testing's defaults).  `loose` scales both."""
    table = _TOL[kind]
    if kind == "elementwise" and not (dtype.is_floating_point or dtype.is_complex):
        dtype = torch.float32  # a float result computes in the default dtype
    pair = table.get(dtype)
    if pair is None and kind in _TOL_ELSE:
        pair = table[_TOL_ELSE[kind]]
    if pair is None:
        return {}
    return dict(atol=pair[0] * loose, rtol=pair[1] * loose)


def raises_like(cpu_call, device_call, exact=True, native=True, expected=None,
                exact_type=False):
    """`cpu_call()` raises (or `expected` is what it raised), and `device_call()` raises
    the same: the same type (a subclass too, unless `exact_type`) and, with `exact`, the
    same message.  Returns the device's exception.  The one way tests say "raises the
    same error as CPU"."""
    if expected is None:
        try:
            cpu_call()
        except Exception as e:  # noqa: BLE001
            expected = e
        else:
            raise AssertionError("the CPU call did not raise")
    with native_only(native), pytest.raises(type(expected)) as info:
        device_call()
    if exact_type:
        assert type(info.value) is type(expected), (info.value, expected)
    if exact:
        assert str(info.value) == str(expected)
    return info.value


def check_raises(fn, *args, exact=True, native=True, **kwargs):
    """fn raises on these CPU arguments and the same on neuron copies of them."""
    return raises_like(lambda: fn(*clone_args(args), **clone_args(kwargs)),
                       lambda: fn(*to_dev(clone_args(args)), **to_dev(clone_args(kwargs))),
                       exact=exact, native=native)


def check_or_raises(fn, *args, exact=False, **kw):
    """Like check, but if PyTorch's CPU kernel rejects the input, the device must too."""
    try:
        fn(*clone_args(args))
    except Exception as e:  # noqa: BLE001
        raises_like(None, lambda: fn(*to_dev(clone_args(args))), exact=exact, expected=e)
        return None
    return check(fn, *args, **kw)


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
            raises_like(None, lambda: torch.autograd.backward(a_outs, [to_dev(c) for c in cots]),
                        native=native, expected=e)
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


def tiny_gpt2_pair():
    """A tiny Hugging Face GPT-2 (2 layers, 4 heads, 64 wide, 1000 tokens) in eval mode on
    the CPU, and the same weights on the device."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=1000)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    d = transformers.GPT2LMHeadModel(cfg).eval()
    d.load_state_dict(m.state_dict())
    return m, d.to(DEV)

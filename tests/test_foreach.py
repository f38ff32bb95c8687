"""_foreach_* ops, fused optimizer kernels and AMP scaler ops vs PyTorch's CPU results."""
import pytest
import torch

from torchneuron import dispatch
from helpers import DEV, check, check_raises, native_only, raises_like, to_dev

F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16


def _lists(n=3, lo=-2.0, hi=2.0, dtypes=(F32, F32, F64), seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(3, 4), (5,), (2, 1, 3), (), (0, 2)]
    out = []
    for i in range(n):
        dt = dtypes[i % len(dtypes)]
        out.append((torch.rand(shapes[i % len(shapes)], generator=g, dtype=F64) * (hi - lo) + lo).to(dt))
    return out


def _pos(n=3, dtypes=(F32, F32, F64), seed=0):
    return _lists(n, 0.1, 0.9, dtypes, seed)


TOL = dict(atol=1e-6, rtol=1e-5)

UNARY = ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
         "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round",
         "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc"]


@pytest.mark.parametrize("name", UNARY)
def test_unary(name):
    xs = _pos(4) if name in ("acos", "asin", "log", "log10", "log1p", "log2", "rsqrt", "sqrt",
                             "lgamma", "reciprocal") else _lists(4, -3, 3)
    fn = getattr(torch, f"_foreach_{name}")
    fn_ = getattr(torch, f"_foreach_{name}_")
    check(lambda a: fn(a), xs, **TOL)

    def inplace(a):
        fn_(a)
        return a

    check(inplace, xs, **TOL)


def test_unary_noncontiguous_and_half():
    xs = [torch.randn(4, 6).t(), torch.randn(3, 8)[:, ::2], torch.randn(5).to(F16), torch.randn(2, 3).to(BF16)]
    check(lambda a: torch._foreach_exp(a), xs, atol=1e-3, rtol=1e-3)

    def f(a):
        torch._foreach_neg_(a)
        torch._foreach_abs_(a)
        return a

    check(f, xs)


BINARY = ["add", "sub", "mul", "div", "clamp_min", "clamp_max", "maximum", "minimum"]


# (only add, mul and div have a Tensor-scalar overload)
BINARY_CASES = [(n, v) for n in BINARY for v in ["List", "Scalar", "ScalarList", "Tensor", "CpuTensor"]
                if v not in ("Tensor", "CpuTensor") or n in ("add", "mul", "div")]


@pytest.mark.parametrize("name,variant", BINARY_CASES, ids=[f"{v}-{n}" for n, v in BINARY_CASES])
@pytest.mark.parametrize("inplace", [False, True], ids=["func", "inplace"])
def test_binary(name, variant, inplace):
    xs, ys = _lists(4), _lists(4, 0.5, 2.0, seed=1)
    fn = getattr(torch, f"_foreach_{name}{'_' if inplace else ''}")
    alpha = {"alpha": 0.5} if name in ("add", "sub") and variant in ("List", "Tensor", "CpuTensor") else {}

    if variant == "List":
        call = lambda a, b: fn(a, b, **alpha)  # noqa: E731
        args = (xs, ys)
    elif variant == "Scalar":
        call = lambda a: fn(a, 1.25)  # noqa: E731
        args = (xs,)
    elif variant == "ScalarList":
        call = lambda a: fn(a, [0.5, -1.0, 2, 3.5])  # noqa: E731
        args = (xs,)
    elif variant == "Tensor":
        call = lambda a, t: fn(a, t, **alpha)  # noqa: E731
        args = (xs, torch.tensor(1.75))
    else:  # a CPU 0-d tensor mixed into a device list, as optimizers do
        def call(a):
            return fn(a, torch.tensor(1.75), **alpha)
        args = (xs,)

    def f(*a):
        r = call(*a)
        return a[0] if inplace else r

    check(f, *args, **TOL)


def test_binary_int_and_promotion():
    ints = [torch.arange(6).reshape(2, 3), torch.arange(1, 5, dtype=torch.int32)]
    check(lambda a: torch._foreach_add(a, 2), ints)
    check(lambda a: torch._foreach_div(a, 2), ints)  # true division -> float
    check(lambda a: torch._foreach_mul(a, 1.5), ints)
    check(lambda a, b: torch._foreach_add(a, b), ints, [torch.ones(2, 3), torch.ones(4, dtype=F64)])
    check(lambda a: torch._foreach_maximum(a, 3), ints)


def test_binary_broadcast_list():
    xs = [torch.randn(3, 4), torch.randn(2, 5)]
    ys = [torch.randn(4), torch.randn(2, 1)]
    check(lambda a, b: torch._foreach_mul(a, b), xs, ys, **TOL)


def test_pow():
    xs = _pos(4)
    check(lambda a, b: torch._foreach_pow(a, b), xs, _lists(4, 0.5, 2.5, seed=3), **TOL)
    check(lambda a: torch._foreach_pow(a, 2), xs, **TOL)
    check(lambda a: torch._foreach_pow(a, 0.5), xs, **TOL)
    check(lambda a: torch._foreach_pow(a, [2, 3.0, 0.5, -1]), xs, **TOL)
    check(lambda a: torch._foreach_pow(2.0, a), xs, **TOL)

    def f(a):
        torch._foreach_pow_(a, 3)
        return a

    check(f, xs, **TOL)


def test_lerp():
    xs, ys = _lists(4), _lists(4, seed=2)
    ws = _pos(4, seed=5)
    check(lambda a, b, w: torch._foreach_lerp(a, b, w), xs, ys, ws, **TOL)
    check(lambda a, b: torch._foreach_lerp(a, b, 0.3), xs, ys, **TOL)
    if hasattr(torch.ops.aten._foreach_lerp, "ScalarList"):
        check(lambda a, b: torch.ops.aten._foreach_lerp.ScalarList(a, b, [0.1, 0.7, 0.5, 0.9]),
              xs, ys, **TOL)

    def f(a, b):
        torch._foreach_lerp_(a, b, 0.9)
        return a

    check(f, xs, ys, **TOL)


@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
@pytest.mark.parametrize("inplace", [False, True], ids=["func", "inplace"])
def test_addc(name, inplace):
    xs, t1, t2 = _lists(4), _lists(4, seed=1), _lists(4, 0.5, 2, seed=2)
    fn = getattr(torch, f"_foreach_{name}{'_' if inplace else ''}")

    def run(args):
        r = fn(*args)
        return args[0] if inplace else r

    check(lambda a, b, c: run((a, b, c)), xs, t1, t2, **TOL)
    check(lambda a, b, c: run((a, b, c, -0.5)), xs, t1, t2, **TOL)
    check(lambda a, b, c: run((a, b, c, [0.5, -1.0, 2.0, 0.25])), xs, t1, t2, **TOL)
    check(lambda a, b, c: run((a, b, c, torch.tensor([0.5, -1.0, 2.0, 0.25]))), xs, t1, t2, **TOL)


def test_addc_tensor_scalars_errors():
    xs = to_dev(_lists(2))
    with pytest.raises(RuntimeError, match="Expected scalars to be on CPU"):
        torch._foreach_addcmul(xs, xs, xs, torch.ones(2, device=DEV))
    raises_like(lambda: torch._foreach_addcmul(_lists(2), _lists(2), _lists(2), torch.ones(3)),
                lambda: torch._foreach_addcmul(xs, xs, xs, torch.ones(3)))


@pytest.mark.parametrize("ord", [2, 1, 0, 3, float("inf"), float("-inf")])
def test_norm(ord):
    xs = _lists(5, -3, 3)
    xs = [x for x in xs if x.numel()] if ord in (float("inf"), float("-inf")) else xs + [torch.zeros(0)]
    check(lambda a: torch._foreach_norm(a, ord), xs, **TOL)


def test_norm_inf_empty_error():
    check_raises(lambda xs: torch._foreach_norm(xs, float("inf")), [torch.ones(2), torch.zeros(0)])


def test_norm_dtype_and_half():
    xs = [torch.randn(10).to(F16), torch.randn(3, 3).to(BF16)]
    check(lambda a: torch._foreach_norm(a), xs, atol=1e-2, rtol=1e-2)
    check(lambda a: torch.ops.aten._foreach_norm.Scalar(a, 2, dtype=F32), xs, atol=1e-4, rtol=1e-4)


def test_max_zero_copy_clone():
    xs, ys = _lists(4, dtypes=(F32, F64)), _lists(4, seed=9, dtypes=(F32, F64))
    check(lambda a: torch._foreach_max([x for x in a if x.numel()]), xs)

    def zero(a):
        torch._foreach_zero_(a)
        return a

    check(zero, xs)

    def copy(a, b):
        torch._foreach_copy_(a, b)
        return a

    check(copy, xs, ys)
    # copy casts and broadcasts into each destination
    check(copy, [torch.zeros(3, 4), torch.zeros(5, dtype=torch.int64)],
          [torch.randn(4, dtype=F64), torch.tensor([1.7, -2.2, 3.9, 0.0, 5.5])])
    if hasattr(torch.ops.aten, "_foreach_clone"):  # torch 2.11 has no such op
        check(lambda a: torch.ops.aten._foreach_clone.default(a), xs)


def test_inplace_on_views():
    base = torch.randn(6, 8)

    def f(b):
        views = [b[:3], b[3:, ::2], b.t()[1][3:]]  # non-overlapping views
        torch._foreach_mul_(views, 2.0)
        torch._foreach_add_(views, [torch.ones(3, 8, device=b.device), torch.ones(3, 4, device=b.device),
                                   torch.ones(3, device=b.device)], alpha=-1)
        return b

    check(f, base, **TOL)


def test_length_mismatch_error():
    check_raises(torch._foreach_add, _lists(2), _lists(3))


def test_one_executable_per_call():
    xs = to_dev([torch.randn(7, i + 1) for i in range(12)])
    ys = to_dev([torch.randn(7, i + 1) for i in range(12)])
    with native_only():
        torch._foreach_add_(xs, ys, alpha=0.1)  # build
        before = sum(dispatch.cache_hits.values()) + sum(dispatch.cache_misses.values())
        torch._foreach_add_(xs, ys, alpha=0.2)  # a new alpha must not recompile
        torch._foreach_mul_(xs, [float(i) for i in range(12)])
        torch._foreach_mul_(xs, [float(i) + 1 for i in range(12)])
        after = sum(dispatch.cache_hits.values()) + sum(dispatch.cache_misses.values())
        misses = dispatch.cache_misses["aten::_foreach_add_.List"]
        torch._foreach_add_(xs, ys, alpha=0.3)
        assert dispatch.cache_misses["aten::_foreach_add_.List"] == misses
    assert after - before == 3  # one executable call per foreach call


# ---------------------------------------------------------------- AMP scaler ops
def test_amp_non_finite_check_and_unscale():
    gs = [torch.randn(3, 4), torch.randn(5, dtype=F64), torch.randn(2).to(F16)]

    def f(g, found, inv):
        torch._amp_foreach_non_finite_check_and_unscale_(g, found, inv)
        return g, found

    check(f, gs, torch.zeros(1), torch.tensor([0.25]))
    bad = [g.clone() for g in gs]
    bad[1][2] = float("inf")
    check(f, bad, torch.zeros(1), torch.tensor([0.5]))
    bad[1][2] = float("nan")
    check(f, bad, torch.zeros(1), torch.tensor([0.5]))
    check(f, gs, torch.ones(1), torch.tensor([1.0]))  # found_inf stays set


@pytest.mark.parametrize("found,tracker", [(0.0, 0), (0.0, 2), (1.0, 2), (0.0, 1)])
def test_amp_update_scale(found, tracker):
    def f(scale, tr, fi):
        torch._amp_update_scale_(scale, tr, fi, 2.0, 0.5, 3)
        return scale, tr

    check(f, torch.tensor([1024.0]), torch.tensor([tracker], dtype=torch.int32), torch.tensor([found]))
    # growth would overflow float32: the scale stays
    check(f, torch.tensor([3e38]), torch.tensor([2], dtype=torch.int32), torch.tensor([0.0]))


# ---------------------------------------------------------------- fused optimizer kernels
def _adam_args(amsgrad, dtype=F32):
    g = torch.Generator().manual_seed(4)
    shapes = [(4, 3), (7,)]
    mk = lambda: [torch.randn(s, generator=g).to(dtype) for s in shapes]  # noqa: E731
    params, grads, m = mk(), mk(), mk()
    v = [x.abs() for x in mk()]
    mx = [x.abs() + 0.5 for x in mk()] if amsgrad else []
    steps = [torch.tensor(3.0), torch.tensor(3.0)]
    return params, grads, m, v, mx, steps


@pytest.mark.parametrize("op", ["_fused_adam_", "_fused_adamw_"])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("scaled", [None, "scale", "inf"])
def test_fused_adam(op, amsgrad, scaled):
    fn = getattr(torch.ops.aten, op)

    def f(p, g, m, v, mx, steps, gs, fi):
        fn(p, g, m, v, mx, steps, lr=0.01, beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-8,
           amsgrad=amsgrad, maximize=False, grad_scale=gs, found_inf=fi)
        return p, g, m, v, mx

    gs = None if scaled is None else torch.tensor(4.0)
    fi = None if scaled is None else torch.tensor(1.0 if scaled == "inf" else 0.0)
    check(f, *_adam_args(amsgrad), gs, fi, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("momentum,nesterov,first", [(0.0, False, False), (0.9, False, True),
                                                     (0.9, True, False), (0.5, False, False)])
def test_fused_sgd(momentum, nesterov, first):
    params, grads, bufs, *_ = _adam_args(False)
    if momentum == 0:
        bufs = []

    def f(p, g, b):
        torch.ops.aten._fused_sgd_(p, g, b, weight_decay=0.01, momentum=momentum, lr=0.1,
                                   dampening=0.1 if not nesterov else 0.0, nesterov=nesterov,
                                   maximize=False, is_first_step=first)
        return p, g, b

    check(f, params, grads, bufs, atol=1e-6, rtol=1e-5)


def test_fused_adagrad():
    params, grads, _, sums, _, steps = _adam_args(False)

    def f(p, g, s, st):
        torch.ops.aten._fused_adagrad_(p, g, s, st, lr=0.1, lr_decay=0.01, weight_decay=0.1,
                                       eps=1e-10, maximize=True)
        return p, g, s, st

    check(f, params, grads, sums, steps, atol=1e-6, rtol=1e-5)


AMP_ERRORS = [
    ("inv_scale_numel", lambda d: torch._amp_foreach_non_finite_check_and_unscale_(
        [torch.ones(3, device=d)], torch.zeros(1, device=d), torch.ones(2, device=d))),
    ("found_inf_int", lambda d: torch._amp_foreach_non_finite_check_and_unscale_(
        [torch.ones(3, device=d)], torch.zeros(1, device=d, dtype=torch.int32), torch.ones(1, device=d))),
    ("inv_scale_double", lambda d: torch._amp_foreach_non_finite_check_and_unscale_(
        [torch.ones(3, device=d)], torch.zeros(1, device=d), torch.ones(1, device=d, dtype=F64))),
    ("tracker_float", lambda d: torch._amp_update_scale_(
        torch.ones(1, device=d), torch.zeros(1, device=d), torch.zeros(1, device=d), 2.0, 0.5, 2)),
    ("scale_numel", lambda d: torch._amp_update_scale_(
        torch.ones(2, device=d), torch.zeros(1, device=d, dtype=torch.int32), torch.zeros(1, device=d),
        2.0, 0.5, 2)),
    ("update_found_int", lambda d: torch._amp_update_scale_(
        torch.ones(1, device=d), torch.zeros(1, device=d, dtype=torch.int32),
        torch.zeros(1, device=d, dtype=torch.int32), 2.0, 0.5, 2)),
]


@pytest.mark.parametrize("name,fn", AMP_ERRORS, ids=[e[0] for e in AMP_ERRORS])
def test_amp_errors(name, fn):
    raises_like(lambda: fn("cpu"), lambda: fn(DEV))


def test_foreach_copy_converts_like_cpu():
    def copy(a, b):
        torch._foreach_copy_(a, b)
        return a

    check(copy, [torch.zeros(4, dtype=torch.int8), torch.zeros(3, dtype=torch.int32)],
          [torch.tensor([300.5, -1.5, float("nan"), 1e10]), torch.tensor([3e9, -2.7, float("inf")])])


@pytest.mark.parametrize("name,fn", [
    ("mul_bool_by_int", lambda xs: torch._foreach_mul_(xs, 3)),
    ("add_int_by_float", lambda xs: torch._foreach_add_(xs, 1.5)),
    ("div_int", lambda xs: torch._foreach_div_(xs, 2)),
    ("sqrt_int", lambda xs: torch._foreach_sqrt_(xs)),
    ("add_list_float_into_int", lambda xs: torch._foreach_add_(xs, [x.float() for x in xs])),
])
def test_inplace_cast_check_like_cpu(name, fn):
    """An in-place foreach op whose result cannot be cast back into a self tensor raises
    CPU's error (was: accepted; the cast check looked at the first result only)."""
    for dt in (torch.bool, torch.int64):
        xs = [torch.ones(3, dtype=torch.float32), torch.ones(2, dtype=dt)]
        try:
            fn([x.clone() for x in xs])
        except RuntimeError:
            check_raises(fn, xs)
        else:
            check(fn, xs)

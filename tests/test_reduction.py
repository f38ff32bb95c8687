"""Reductions, scans, sorting, searching: neuron vs CPU (values, dtypes, indices, grads)."""
import math

import pytest
import torch

import torchneuron
from helpers import DEV, assert_same, check, check_raises, native_only, rand, tol

NAN = float("nan")
INF = float("inf")
F = [torch.float32, torch.float64]
INTS = [torch.int64, torch.int32, torch.uint8, torch.bool]
ALL = F + INTS + [torch.float16, torch.bfloat16]


def _distinct(shape, dtype=torch.float64):
    """Values without ties (so index results are unique)."""
    n = math.prod(shape)
    return (torch.randperm(max(n, 1))[:n].to(torch.float64) - n / 2).reshape(shape).to(dtype)


# input views applied inside the checked function, so the device sees real
# non-contiguous tensors (clone/.to() would make them contiguous)
VIEWS = {
    "contig": lambda x: x,
    "t": lambda x: x.transpose(0, -1) if x.dim() >= 2 else x,
    "step": lambda x: x[..., ::2] if x.dim() >= 1 else x,
}

# (shape, input view, dim, keepdim); dim None = the all-reduce overload.  Each
# case runs one or two dtypes, rotating through a list, to keep the run short.
CASE_LIST = [
    ((), "contig", None, False),
    ((), "contig", 0, True),
    ((7,), "contig", None, False),
    ((7,), "step", -1, True),
    ((7,), "contig", [], False),
    ((4, 6), "contig", 0, False),
    ((4, 6), "t", 1, True),
    ((4, 6), "step", -1, False),
    ((4, 6), "t", [0, 1], False),
    ((2, 3, 4), "contig", [0, 2], True),
    ((2, 3, 4), "t", 1, False),
    ((2, 3, 4), "step", (-1, 0), False),
    ((0, 4), "contig", None, False),
    ((0, 4), "contig", 1, True),
    ((0, 4), "step", 0, False),
]
CASE_IDS = [f"{s}-{v}-{d}-{'k' if k else 'nk'}" for s, v, d, k in CASE_LIST]
CASE_PARAMS = [(i,) + c for i, c in enumerate(CASE_LIST)]


def _pick(dtypes, i, n=1):
    return [dtypes[(i * n + j) % len(dtypes)] for j in range(n)]


def _dimfn(all_fn, dim_fn):
    def f(x, d, k):
        return all_fn(x) if d is None else dim_fn(x, d, k)
    return f


SUMLIKE = {
    "sum": _dimfn(torch.sum, lambda x, d, k: torch.sum(x, d, keepdim=k)),
    "sum_dtype": _dimfn(lambda x: torch.sum(x, dtype=torch.float64),
                        lambda x, d, k: torch.sum(x, d, keepdim=k, dtype=torch.float64)),
    "nansum": _dimfn(torch.nansum, lambda x, d, k: torch.nansum(x, d, keepdim=k)),
    "count_nonzero": _dimfn(torch.count_nonzero, lambda x, d, k: torch.count_nonzero(x, d)),
}

FLOATLIKE = {
    "mean": _dimfn(torch.mean, lambda x, d, k: torch.mean(x, d, keepdim=k)),
    "var": _dimfn(torch.var, lambda x, d, k: torch.var(x, d, keepdim=k)),
    "std_mean0": _dimfn(lambda x: torch.std_mean(x, correction=0),
                        lambda x, d, k: torch.std_mean(x, d, correction=0, keepdim=k)),
    "norm2": _dimfn(torch.linalg.vector_norm, lambda x, d, k: torch.linalg.vector_norm(x, 2, d, k)),
    "norm0": _dimfn(lambda x: torch.linalg.vector_norm(x, 0),
                    lambda x, d, k: torch.linalg.vector_norm(x, 0, d, k)),
    "norm3.5": _dimfn(lambda x: torch.linalg.vector_norm(x, 3.5),
                      lambda x, d, k: torch.linalg.vector_norm(x, 3.5, d, k)),
}

# all these reject a reduction over an empty dimension (tested separately)
MAXLIKE = {
    "amax": _dimfn(torch.amax, lambda x, d, k: torch.amax(x, d, keepdim=k)),
    "amin": _dimfn(torch.amin, lambda x, d, k: torch.amin(x, d, keepdim=k)),
    "norm_inf": _dimfn(lambda x: torch.linalg.vector_norm(x, INF),
                       lambda x, d, k: torch.linalg.vector_norm(x, INF, d, k)),
}

BOOLLIKE = {
    "all": _dimfn(torch.all, lambda x, d, k: torch.all(x, d, keepdim=k)),
    "any": _dimfn(torch.any, lambda x, d, k: torch.any(x, d, keepdim=k)),
}


def _with_nans(x):
    if x.dtype.is_floating_point and x.numel() > 2:
        x = x.clone()
        x.view(-1)[1] = NAN
    return x


def _empty_reduce(shape, d):
    """Does reducing `shape` over `d` reduce an empty dimension?"""
    if not shape or 0 not in shape:
        return False
    if d is None or (isinstance(d, (list, tuple)) and len(d) == 0):
        return True
    dims = [d] if isinstance(d, int) else list(d)
    return any(shape[i % len(shape)] == 0 for i in dims)


CASE_ARGS = "i,shape,view,dim,keepdim"


@pytest.mark.parametrize(CASE_ARGS, CASE_PARAMS, ids=CASE_IDS)
@pytest.mark.parametrize("name", list(SUMLIKE))
def test_sumlike(name, i, shape, view, dim, keepdim):
    fn, v = SUMLIKE[name], VIEWS[view]
    for dtype in _pick([torch.float32, torch.int32, torch.bool, torch.float16, torch.int64,
                        torch.uint8, torch.bfloat16], i + len(name)):
        check(lambda x: fn(v(x), dim, keepdim), _with_nans(rand(shape, dtype)), **tol(dtype, "reduction"))


@pytest.mark.parametrize(CASE_ARGS, CASE_PARAMS, ids=CASE_IDS)
@pytest.mark.parametrize("name", list(FLOATLIKE))
def test_floatlike(name, i, shape, view, dim, keepdim):
    fn, v = FLOATLIKE[name], VIEWS[view]
    for dtype in _pick([torch.float32, torch.float64, torch.bfloat16], i + len(name)):
        check(lambda x: fn(v(x), dim, keepdim), rand(shape, dtype), **tol(dtype, "reduction"))


@pytest.mark.parametrize(CASE_ARGS, CASE_PARAMS, ids=CASE_IDS)
@pytest.mark.parametrize("name", list(MAXLIKE))
def test_maxlike(name, i, shape, view, dim, keepdim):
    fn, v = MAXLIKE[name], VIEWS[view]
    dtypes = [torch.float32, torch.float16, torch.float64] if name.startswith("norm") else \
        [torch.float32, torch.int64, torch.bool, torch.float16, torch.uint8]
    for dtype in _pick(dtypes, i):
        x = _with_nans(rand(shape, dtype, -2, 2))  # small range: ties
        if _empty_reduce(tuple(v(x).shape), dim):
            with pytest.raises((RuntimeError, IndexError)):
                with torchneuron.fallback_policy("error"):
                    fn(v(x.to(DEV)), dim, keepdim)
            continue
        check(lambda x: fn(v(x), dim, keepdim), x, **tol(dtype, "reduction"))


@pytest.mark.parametrize(CASE_ARGS, CASE_PARAMS, ids=CASE_IDS)
@pytest.mark.parametrize("name", list(BOOLLIKE))
def test_boollike(name, i, shape, view, dim, keepdim):
    fn, v = BOOLLIKE[name], VIEWS[view]
    for dtype in _pick([torch.bool, torch.uint8, torch.float32, torch.int64], i + len(name)):
        x = rand(shape, dtype, 0, 2)
        check(lambda x: fn(v(x), dim, keepdim), x)


def test_all_any_dims_overload():
    x = rand((3, 4, 2), torch.float32, 0, 2)
    check(lambda x: torch.ops.aten.all.dims(x, [0, 2], True), x)
    check(lambda x: torch.ops.aten.any.dims(x, [], False), x)  # [] reduces nothing
    check(lambda x: torch.ops.aten.all.dims(x, None, True), x)
    check(lambda x: torch.ops.aten.any.dims(x), x)
    x = torch.tensor([NAN, 0.0])
    check(lambda x: (x.all(), x.any(), x[1:].any()), x)  # NaN is nonzero


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool,
                                   torch.float16, torch.bfloat16, torch.float64, torch.complex64], ids=str)
def test_sum_prod_dtypes(dtype):
    x = rand((3, 5), dtype, -3, 4)
    tols = tol(dtype, "reduction")
    check(lambda x: (torch.sum(x), torch.sum(x, 1), torch.prod(x), torch.prod(x, 0, keepdim=True)), x, **tols)
    check(lambda x: (torch.sum(x, dtype=torch.float32), torch.prod(x, 1, dtype=torch.float64)), x, **tols)
    if dtype.is_complex:
        check_raises(lambda x: torch.nansum(x), x, exact=False)
    else:
        check(lambda x: (torch.sum(x, [], dtype=torch.int32), torch.nansum(x, 0, dtype=torch.float64)), x, **tols)
    check(lambda x: (torch.sum(x[:, ::2].t()), torch.prod(x.t()[::2], -1)), x, **tols)
    if dtype.is_floating_point or dtype.is_complex:
        check(lambda x: (torch.mean(x), torch.mean(x, 1, keepdim=True)), x, **tols)
    else:
        check(lambda x: torch.mean(x, dtype=torch.float64), x)
        check(lambda x: torch.mean(x, 1, dtype=torch.float32), x)


def test_identities_and_empty():
    e = torch.zeros(0, 3)
    check(lambda x: (x.sum(), x.sum(0), x.prod(), x.prod(0), x.mean(0), x.mean(), x.nansum(1)), e)
    check(lambda x: (x.all(), x.any(), x.all(0), x.any(1), x.count_nonzero(0)), e)
    check(lambda x: (torch.logsumexp(x, 0), torch.logsumexp(x, 1), torch.linalg.vector_norm(x, 2, 0)), e)
    check(lambda x: (x.var(0), x.std(), torch.var_mean(x, 0)), e)
    check(lambda x: (x.cumsum(0), x.cumprod(1), x.cummax(0), x.logcumsumexp(1)), e)
    check(lambda x: (x.sort(0), x.sort(1), x.topk(0, 1), x.argsort(0)), e)
    check(lambda x: (x.max(1), x.amax(1), x.argmax(1), x.median(1), x.mode(1)), e)
    check(lambda x: (torch.median(x), torch.nanmedian(x)), e)


def test_sum_int_overflow_and_bool():
    x = torch.tensor([2**62, 2**62, 2**62], dtype=torch.int64)
    check(lambda x: x.sum(), x)  # wraps like CPU
    b = torch.ones(300, dtype=torch.bool)
    check(lambda x: (x.sum(), x.sum(dtype=torch.uint8), x.prod(), x.sum(dtype=torch.bool)), b)


def test_complex_reductions():
    x = rand((4, 5), torch.complex64)
    t = tol(torch.complex64, "reduction")
    check(lambda x: (x.sum(1), x.mean(0), x.prod(1), x.var(1), x.std(), torch.var_mean(x, 0)), x, **t)
    check(lambda x: (torch.linalg.vector_norm(x), torch.linalg.vector_norm(x, 1, 1),
                     torch.linalg.vector_norm(x, INF, 0), x.cumsum(1), x.cumprod(0)), x, **t)
    check(lambda x: (torch.logsumexp(x, 1), torch.logcumsumexp(x, 1)), x, **t)


# ---------------------------------------------------------------- max / min / arg
@pytest.mark.parametrize("dtype,view", [(torch.float32, "contig"), (torch.float32, "step"), (torch.float64, "t"),
                                        (torch.int64, "contig"), (torch.int32, "t"), (torch.uint8, "step"),
                                        (torch.bool, "contig"), (torch.float16, "t"), (torch.bfloat16, "contig")],
                         ids=str)
def test_max_min_arg(dtype, view):
    v = VIEWS[view]
    x = _with_nans(rand((5, 6), dtype, 0, 3))  # many ties: first occurrence wins
    arg = dtype != torch.bool  # argmax/argmin reject bool, like CPU
    check(lambda x: (v(x).max(), v(x).min()) + ((v(x).argmax(), v(x).argmin()) if arg else ()), x)
    for d, k in ((0, False), (1, True), (-1, False)):
        check(lambda x: (v(x).max(d, keepdim=k), v(x).min(d, keepdim=k), torch.aminmax(v(x), dim=d, keepdim=k))
              + ((v(x).argmax(d, keepdim=k), v(x).argmin(d, keepdim=k)) if arg else ()), x)
    check(lambda x: (torch.aminmax(v(x)), torch.aminmax(v(x), keepdim=True))
          + ((torch.argmax(v(x), keepdim=True),) if arg else ()), x)
    if not arg:
        check_raises(lambda x: x.argmax(), x, exact=False)
        check_raises(lambda x: x.argmin(0), x, exact=False)


def test_max_nan_first():
    x = torch.tensor([[1.0, NAN, 3.0, NAN], [INF, 2.0, INF, -INF], [-INF, -INF, 0.0, -0.0]])
    for f in (lambda x: x.max(1), lambda x: x.min(1), lambda x: x.argmax(1), lambda x: x.argmin(1),
              lambda x: (x.max(), x.min(), x.argmax(), x.argmin()), lambda x: x.amax(1),
              lambda x: torch.aminmax(x, dim=1), lambda x: x.max(0)):
        check(f, x)


def test_max_0d():
    x = torch.tensor(3.5)
    check(lambda x: (x.max(), x.max(0), x.min(-1, keepdim=True), x.argmax(), x.argmax(0), x.amax(0),
                     torch.aminmax(x), torch.aminmax(x, dim=0)), x)


# ---------------------------------------------------------------- misc reductions
def test_logsumexp():
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        x = rand((3, 4, 5), dtype)
        check(lambda x: (torch.logsumexp(x, 1), torch.logsumexp(x, (0, 2), keepdim=True),
                         torch.logsumexp(x.transpose(0, 2), -1)), x, **tol(dtype, "reduction"))
    x = torch.tensor([[INF, 1.0, 2.0], [-INF, -INF, -INF], [NAN, 1.0, 2.0], [INF, -INF, 0.0], [1e30, 1e30, 1.0]])
    check(lambda x: torch.logsumexp(x, 1), x)
    check(lambda x: torch.logsumexp(x, 0), torch.arange(6).reshape(2, 3))  # ints -> float
    check(lambda x: torch.logsumexp(x, 0), torch.tensor(2.0))


def test_var_corrections():
    x = rand((4, 5), torch.float64)
    for c in (0, 1, 2, 0.5, 5, 7):
        check(lambda x: (torch.var(x, 1, correction=c), torch.std(x, 0, correction=c),
                         torch.var_mean(x, correction=c), torch.std_mean(x, [0, 1], correction=c)), x)
    check(lambda x: (torch.var(x, 1, unbiased=False), torch.std(x, unbiased=True)), x)
    check(lambda x: (x.var(), x.std(), x.var(0), torch.var_mean(x)), torch.tensor(2.0))


def test_norm_overloads():
    x = rand((3, 4), torch.float32)
    a = torch.ops.aten
    check(lambda x: (a.norm.Scalar(x, 3), a.norm.ScalarOpt_dim(x, None, [1]), a.norm.ScalarOpt_dim(x, 1, [0], True),
                     a.norm.ScalarOpt_dim_dtype(x, 2, [1], False, dtype=torch.float64),
                     a.norm.ScalarOpt_dtype(x, INF, dtype=torch.float64)), x, atol=1e-5, rtol=1e-5)
    check(lambda x: (torch.linalg.vector_norm(x, 2, dtype=torch.float64), torch.linalg.norm(x, dim=1),
                     torch.norm(x, 1, dim=0), torch.linalg.vector_norm(x.half(), 2, 1)), x, atol=1e-3, rtol=1e-3)
    check(lambda x: torch.linalg.vector_norm(x, 2, 1), torch.zeros(2, 3))


# ---------------------------------------------------------------- scans
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8,
                                   torch.bool, torch.float16, torch.bfloat16, torch.complex64], ids=str)
def test_cumsum_cumprod(dtype):
    x = rand((4, 5), dtype, -2, 3)
    t = tol(dtype, "reduction")
    for d in (0, -1):
        check(lambda x: (x.cumsum(d), x.cumprod(d), x.t().cumsum(d), x[:, ::2].cumprod(d)), x, **t)
    check(lambda x: (x.cumsum(0, dtype=torch.float64), x.cumprod(1, dtype=torch.float32)), x, **t)
    check(lambda x: (x[0, 0].cumsum(0), x[0, 0].cumprod(-1)), x, **t)


def test_cumsum_inplace_out():
    x = rand((4, 5), torch.float32)

    def f(x):
        x[1:].cumsum_(1)
        out = torch.empty(0, device=x.device)
        torch.cumsum(x, 0, out=out)
        return x, out
    check(f, x, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16], ids=str)
def test_cummax_cummin(dtype):
    x = _with_nans(rand((4, 7), dtype, 0, 3))  # ties: the last index wins, like CPU
    for d in (0, -1):
        check(lambda x: (x.cummax(d), x.cummin(d), x.t().cummax(d), x[:, ::2].cummin(d)), x)
    check(lambda x: (x[0, 0].cummax(0), x[0, 0].cummin(-1)), x)
    x = torch.tensor([1.0, 3, 3, NAN, 2, NAN, 5, INF, -INF])
    check(lambda x: (x.cummax(0), x.cummin(0)), x)


def test_logcumsumexp():
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        x = rand((4, 6), dtype)
        check(lambda x: (x.logcumsumexp(0), x.logcumsumexp(1), x.t().logcumsumexp(-1)), x, **tol(dtype, "reduction"))
    x = torch.tensor([[-INF, -INF, 1.0, INF, 2.0, INF], [INF, INF, -INF, 0.0, NAN, 1.0], [1e30, 1.0, 1e30, -1e30, 0, 0]])
    check(lambda x: x.logcumsumexp(1), x)
    check(lambda x: x.logcumsumexp(0), torch.tensor(1.5))


# ---------------------------------------------------------------- sorting
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8, torch.bool, torch.float16], ids=str)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_stable(dtype, descending):
    x = _with_nans(rand((5, 9), dtype, -2, 3))  # ties: stable order by index
    for d in (0, -1):
        check(lambda x: (torch.sort(x, dim=d, descending=descending, stable=True),
                         torch.sort(x.t(), dim=d, descending=descending, stable=True),
                         torch.argsort(x[:, ::2], dim=d, descending=descending, stable=True)), x)
    check(lambda x: torch.sort(x[0, 0], stable=True, descending=descending), x)


def test_sort_nan_zero_order():
    x = torch.tensor([NAN, 1.0, -0.0, INF, 0.0, -INF, NAN, -1.0, 0.0, -0.0])
    for desc in (False, True):
        check(lambda x: (torch.sort(x, stable=True, descending=desc), torch.argsort(x, stable=True, descending=desc)), x)
        check(lambda x: torch.msort(x.reshape(5, 2)), x)


def test_sort_unstable_distinct():
    x = _distinct((6, 8), torch.float32)
    check(lambda x: (x.sort(1), x.sort(0, descending=True), x.argsort(), torch.msort(x),
                     x.t().sort(descending=True)), x)


def test_sort_out():
    x = _distinct((4, 5))

    def f(x):
        v, i = torch.empty(0, device=x.device, dtype=x.dtype), torch.empty(0, device=x.device, dtype=torch.long)
        torch.sort(x, 1, out=(v, i))
        m, mi = torch.empty(0, device=x.device, dtype=x.dtype), torch.empty(0, device=x.device, dtype=torch.long)
        torch.max(x, 0, out=(m, mi))
        s = torch.empty(0, device=x.device, dtype=x.dtype)
        torch.sum(x, 1, out=s)
        return v, i, m, mi, s
    check(f, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16], ids=str)
def test_topk_distinct(dtype):
    x = _distinct((6, 10), dtype)
    for largest in (True, False):
        for d, k in ((0, 0), (1, 1), (-1, 3), (0, 6)):
                check(lambda x: (x.topk(k, d, largest=largest), x.t().topk(k, -d - 1, largest=largest)), x)
        v, i = x.to(DEV).topk(4, largest=largest, sorted=False)
        ev, ei = x.topk(4, largest=largest, sorted=False)
        assert torch.equal(v.cpu().sort(-1)[0], ev.sort(-1)[0])
        assert torch.equal(torch.gather(x, 1, i.cpu()), v.cpu())


def _check_selection(fn, x, values_idx=True):
    """For ties: values equal CPU's; the indices point at those values."""
    ev, ei = fn(x)
    with torchneuron.fallback_policy("error"):
        v, i = fn(x.to(DEV))
    v, i = v.cpu(), i.cpu()
    torch.testing.assert_close(v, ev, equal_nan=True)
    assert i.dtype == ei.dtype == torch.int64 and i.shape == ei.shape
    return v, i


def test_topk_ties_nan():
    x = torch.tensor([[1.0, 3, 3, 3, 2, 3, NAN], [0, 0, 1, 1, NAN, NAN, 5]])
    for largest in (True, False):
        for k in (1, 2, 4, 7):
            v, i = _check_selection(lambda t: t.topk(k, 1, largest=largest), x)
            torch.testing.assert_close(torch.gather(x, 1, i), v, equal_nan=True)
            assert all(len(set(r.tolist())) == k for r in i)


def test_kthvalue():
    x = _distinct((5, 7))
    for k in (1, 3, 5):
        check(lambda x: (x.kthvalue(k, 0), x.kthvalue(k, 1, keepdim=True), x.t().kthvalue(k, -1)), x)
    check(lambda x: x.kthvalue(1, 0), torch.tensor(2.0))
    check(lambda x: x.kthvalue(3), _distinct((8,), torch.int64))
    x = torch.tensor([[1.0, 3, 3, 3, 2, 3], [NAN, 1, NAN, 0, 0, 2]])
    for k in range(1, 7):
        v, i = _check_selection(lambda t: t.kthvalue(k, 1), x)
        torch.testing.assert_close(torch.gather(x, 1, i[:, None])[:, 0], v, equal_nan=True)


def test_median_nanmedian():
    for shape in ((7,), (5, 6), (4, 3, 5)):
        x = _distinct(shape)
        check(lambda x: (x.median(), x.nanmedian(), x.median(0), x.nanmedian(-1, keepdim=True),
                         x.transpose(0, -1).median(0)), x)
    x = torch.tensor([[1.0, NAN, 3, 2, NAN], [5, 1, 4, 2, 3], [NAN, 7, 1, NAN, NAN], [4, 0, NAN, 2, -1]])
    check(lambda x: (x.median(), x.nanmedian(), x.median(1), x.nanmedian(1), x[1].median(), x[3].nanmedian()), x)
    # an all-NaN row: NaN; CPU's index there comes from nth_element (unspecified)
    x = torch.tensor([[NAN, NAN, NAN], [1.0, NAN, 0.0]])
    v, i = _check_selection(lambda t: t.nanmedian(1), x)
    assert torch.isnan(x[0, i[0]])
    check(lambda x: (x.nanmedian(), x[0].nanmedian(), x.median(1)), x)
    check(lambda x: (x.median(), x.median(0), x.nanmedian(0)), torch.tensor(1.5))
    xi = _distinct((4, 6), torch.int64)
    check(lambda x: (x.median(), x.median(1), x.nanmedian(0)), xi)
    x = torch.tensor([[1.0, 2, 2, 2, 3, 1], [0, 0, 0, 0, 1, 1]])
    v, i = _check_selection(lambda t: t.median(1), x)
    assert torch.equal(torch.gather(x, 1, i[:, None])[:, 0], v)


def test_mode():
    x = torch.tensor([[3.0, 1, 3, 1, 2, 5, 5], [2, 2, 2, 1, 1, 7, 0], [4, 4, 4, 4, 4, 4, 4], [1, 2, 3, 4, 5, 6, 7]])
    check(lambda x: (x.mode(1), x.mode(-1, keepdim=True), x.t().mode(0)), x)
    xi = torch.randint(0, 4, (5, 9))
    check(lambda x: (x.mode(1), x.mode(0)), xi)
    check(lambda x: x.mode(0), torch.tensor(3))
    check(lambda x: x.mode(), torch.tensor([True, False, True]))


# ---------------------------------------------------------------- searching
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_searchsorted(dtype):
    bd = torch.sort(rand((9,), dtype, -4, 4))[0]  # duplicates
    v = rand((3, 5), dtype, -6, 6)
    for right in (False, True):
        check(lambda b, v: (torch.searchsorted(b, v, right=right), torch.searchsorted(b, v.t(), right=right),
                            torch.searchsorted(b, v, out_int32=True, right=right),
                            torch.bucketize(v, b, right=right), torch.bucketize(v, b, out_int32=True, right=right)),
              bd, v)
    check(lambda b, v: (torch.searchsorted(b, v, side="right"), torch.searchsorted(b, v, side="left")), bd, v)
    check(lambda b: (torch.searchsorted(b, 2), torch.searchsorted(b, 2, right=True),
                     torch.bucketize(1, b), torch.bucketize(-1, b, right=True)), bd)
    bnd = torch.sort(rand((3, 7), dtype, -4, 4), 1)[0]
    check(lambda b, v: (torch.searchsorted(b, v), torch.searchsorted(b, v, right=True)), bnd, v)
    un = rand((3, 7), dtype, -4, 4)
    srt = un.argsort(1)
    check(lambda b, s, v: torch.searchsorted(b, v, sorter=s), un, srt, v)
    check(lambda b, v: torch.searchsorted(b, v), torch.zeros(0, dtype=dtype), v)


def test_searchsorted_nan():
    bd = torch.tensor([-1.0, 0.0, 2.0, 2.0, NAN])
    v = torch.tensor([NAN, -INF, 2.0, 5.0, INF, -0.0])
    for right in (False, True):
        check(lambda b, v: (torch.searchsorted(b, v, right=right), torch.bucketize(v, b[:-1], right=right)), bd, v)


def test_histc():
    for dtype in (torch.float32, torch.float64):
        x = rand((50,), dtype, -3, 3)
        check(lambda x: (torch.histc(x), torch.histc(x, 7), torch.histc(x, 10, -1, 1), torch.histc(x, 4, -5, 5)), x)
    x = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 4.0, NAN, -1.0, 5.0, 2.5])
    check(lambda x: (torch.histc(x, 4, 0, 4), torch.histc(x, 3, 0, 4), torch.histc(x[:6], 5)), x)
    check(lambda x: (torch.histc(x, 3), torch.histc(x, 3, 1, 1)), torch.full((4,), 2.0))
    check(lambda x: torch.histc(x, 3), torch.zeros(0))
    check(lambda x: torch.histc(x.reshape(2, 5), 6), x.nan_to_num())


INT_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_histc_integers_follow_cuda(dtype):
    """CPU has no integer histc; CUDA's kernel bins in integer arithmetic, which for these
    ranges is exactly CPU's float64 histc (the reference), cast to the input type."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 100, (200,), generator=g, dtype=dtype)
    cases = [dict(bins=4, min=0, max=3), dict(bins=7), dict(bins=10, min=5, max=60),
             dict(bins=3, min=20, max=20), dict(bins=100, min=0, max=99), dict(bins=1)]
    with native_only():
        for kw in cases:
            ref = torch.histc(x.double(), **kw).to(dtype)
            assert_same(torch.histc(x.to(DEV), **kw), ref, msg=str(kw))
        assert_same(torch.histc(x.to(DEV).reshape(10, 20)[:, ::2], bins=5),
                    torch.histc(x.reshape(10, 20)[:, ::2].double(), bins=5).to(dtype))
        # the MoE idiom of transformers (integrations/moe.py): expert counts
        ids = torch.tensor([[0, 3], [1, 3], [3, 2]], dtype=dtype)
        assert_same(torch.histc(ids.to(DEV), bins=4, min=0, max=3),
                    torch.tensor([1, 1, 1, 3], dtype=dtype))


def test_histc_integer_edge_cases_exact():
    """CUDA's rules where float binning would differ: Scalar bounds truncate to integers,
    bounds wrap into the input type, counts wrap in the input type, an empty data range
    widens in the input type (and a range that wraps over is refused)."""
    u8 = torch.tensor([0, 1, 1, 2, 200, 255], dtype=torch.uint8)
    with native_only():
        assert torch.histc(u8.to(DEV), bins=2, min=0.9, max=2.7).tolist() == [1, 3]  # [0, 2]
        # max=300 is stored in uint8 as 44: the range is [0, 44]
        assert torch.histc(u8.to(DEV), bins=4, min=0, max=300).tolist() == [4, 0, 0, 0]
        many = torch.full((300,), 7, dtype=torch.uint8)
        assert torch.histc(many.to(DEV), bins=2, min=0, max=8).tolist() == [0, 300 - 256]
        same = torch.full((5,), 9, dtype=torch.int16)  # data range [9, 9] -> [8, 10]
        assert torch.histc(same.to(DEV), bins=3).tolist() == [0, 5, 0]
        assert torch.histc(torch.zeros(0, dtype=torch.int32).to(DEV), bins=3).tolist() == [0] * 3
        out = torch.empty(0, dtype=torch.int64, device=DEV)
        torch.histc(torch.tensor([1, 2, 3]).to(DEV), bins=3, out=out)
        assert out.tolist() == [1, 1, 1]
    for fn, msg in [
        (lambda: torch.histc(torch.zeros(3, dtype=torch.uint8, device=DEV)),  # [255, 1]
         "max must be larger than min"),
        (lambda: torch.histc(torch.arange(3, device=DEV), bins=4, min=3, max=1),
         "max must be larger than min"),
        (lambda: torch.histc(torch.arange(3, device=DEV), bins=0), "bins must be > 0"),
    ]:
        with pytest.raises(RuntimeError) as info:
            fn()
        assert str(info.value) == msg


def test_histc_integers_compiled_match_eager():
    def f(x):
        return torch.histc(x, bins=4, min=0, max=3), torch.histc(x * 2, bins=3)

    x = torch.tensor([0, 3, 1, 3, 2, 3], dtype=torch.int32)
    eager = f(x.to(DEV))
    torch._dynamo.reset()
    with native_only():
        got = torch.compile(f, backend="neuron")(x.to(DEV))
    assert_same(got, tuple(t.cpu() for t in eager))
    assert_same(eager[0], torch.tensor([1, 1, 1, 3], dtype=torch.int32))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_histc_half_bin_edges(dtype):
    # CPU computes each bin position in the half type, rounding after every operation;
    # elements near a bin edge land in CPU's bin (float32 intermediates moved some of them)
    for seed in range(40):
        g = torch.Generator().manual_seed(seed)
        x = (torch.rand((5, 1, 5), generator=g) * -10).to(dtype)
        check(lambda x: (torch.histc(x, 100, -10, 0), torch.histc(x, 7, -10, 0),
                         torch.histc(x, 13, -9.7, 0.3)), x)


def test_bincount():
    x = torch.tensor([1, 3, 3, 0, 7, 3])
    check(lambda x: (torch.bincount(x), torch.bincount(x, minlength=12), torch.bincount(x[::2])), x)
    w = rand((6,), torch.float32)
    check(lambda x, w: (torch.bincount(x, w), torch.bincount(x, w.double(), 10), torch.bincount(x, w.int())), x, w)
    check(lambda x: (torch.bincount(x), torch.bincount(x, minlength=3)), torch.zeros(0, dtype=torch.int64))
    check(lambda x: torch.bincount(x), torch.tensor([2, 2, 5], dtype=torch.uint8))
    with torchneuron.fallback_policy("error"):
        with pytest.raises(RuntimeError, match="non-negative"):
            torch.bincount(torch.tensor([1, -1]).to(DEV))
        with pytest.raises(RuntimeError, match="minlength"):
            torch.bincount(x.to(DEV), minlength=-1)
        with pytest.raises(RuntimeError, match="weights"):
            torch.bincount(x.to(DEV), torch.ones(2, device=DEV))
        with pytest.raises(NotImplementedError):
            torch.bincount(torch.ones(2, device=DEV))


def test_histogram():
    x = torch.tensor([0.0, 1, 2, 2.5, 4, 4, NAN, -1, 5])
    r = rand((300,), torch.float64, -3, 4)
    cases = [
        (lambda x: torch.histogram(x, 4, range=(0.0, 4.0)), x),
        (lambda x: torch.histogram(x[:6], 3, density=True), x),
        (lambda x: torch.histogram(x[:6], torch.tensor([0.0, 1, 3, 4], device=x.device),
                                   weight=torch.arange(6.0, device=x.device)), x),
        (lambda x: torch.histogram(x, 3), torch.zeros(0)),
        (lambda x: torch.histogram(x, 2), torch.ones(3)),
        (lambda x: (torch.histogram(x, 17), torch.histogram(x, 1000)), r),
        (lambda x: torch.histogram(x.float(), 13, range=(-1, 2.5), density=True, weight=x.float().abs()), r),
        (lambda x: torch.histogram(x.reshape(10, 30).t(), torch.linspace(-2, 3, 9, dtype=torch.float64,
                                                                          device=x.device), density=True), r),
        (lambda x: torch.histogram(x, torch.tensor([2.0, 1.0], dtype=torch.float64, device=x.device)), r),
    ]
    for f, t in cases:
        check(f, t)
    check_raises(lambda x: torch.histogram(x, 3), x, exact=False)  # NaN: the data range is not finite
    check_raises(lambda x: torch.histogram(x, 3), x.long(), exact=False)
    check_raises(lambda x: torch.histogram(x, 3, range=(2.0, 1.0)), x, exact=False)
    check_raises(lambda x: torch.histogram(x, 0), x, exact=False)
    check_raises(lambda x, w: torch.histogram(x, 3, weight=w), x, torch.ones(2), exact=False)


UNIQUE = [
    lambda x: torch.unique(x),
    lambda x: torch.unique(x, return_inverse=True, return_counts=True),
    lambda x: torch.unique(x, sorted=False, return_counts=True),
    lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True),
    lambda x: torch.ops.aten._unique(x, True, True),
]


@pytest.mark.parametrize("i", range(len(UNIQUE)))
def test_unique(i):
    f = UNIQUE[i]
    xi = torch.randint(0, 4, (5, 6))
    for t in (torch.tensor([NAN, 1, NAN, -0.0, 0.0, 1, 3, 3, 2]), xi, xi.bool(), torch.zeros(0, 2),
              torch.tensor(2.5)):
        check(f, t)
    check(lambda x: f(x.t()), xi)


def test_unique_dim():
    a = torch.tensor([[1, 2], [1, 2], [0, 5], [1, 2]])
    b = torch.randint(0, 2, (6, 3, 2))
    for f in (lambda x: torch.unique(x, dim=0, return_inverse=True, return_counts=True),
              lambda x: torch.unique(x, dim=-1, return_inverse=True),
              lambda x: torch.unique_consecutive(x, dim=0, return_counts=True, return_inverse=True),
              lambda x: torch.unique(x.transpose(0, 1), dim=1)):
        check(f, a)
        check(f, b)
    check(lambda x: torch.unique(x, dim=0, return_inverse=True, return_counts=True), torch.zeros(0, 3))
    check_raises(lambda x: torch.unique(x, dim=1), torch.zeros(0, 3), exact=False)
    check_raises(lambda x: torch.unique(x, dim=0), torch.tensor(3.0), exact=False)
    check_raises(lambda x: torch.unique(x), torch.zeros(3, dtype=torch.complex64), exact=False)


def test_unique_dim_with_nans_matches_cpu():
    """unique(dim=...) with NaNs gives CPU's values, inverse and counts (CPU's std::sort
    over a NaN-broken lexicographic order decides them: such inputs take the counted CPU
    fallback); without NaNs it stays native."""
    rows = [
        [[1.0, NAN], [1.0, NAN], [0.0, 1.0]],
        [[NAN, 1.0], [NAN, 1.0], [NAN, 0.0], [0.0, NAN], [0.0, 0.0]],
        [[2.0, NAN, 1.0], [1.0, 0.0, 0.0], [2.0, NAN, 1.0], [NAN, NAN, NAN], [NAN, NAN, NAN],
         [1.0, 0.0, 0.0]],
    ]
    def f(x):
        return torch.unique(x, dim=0, return_inverse=True, return_counts=True)

    for r in rows:
        x = torch.tensor(r)
        check(f, x, native=False)
        check(lambda x: torch.unique(x.t(), dim=1, return_inverse=True, return_counts=True),
              x, native=False)
        check(f, x.double(), native=False)
    check(lambda x: torch.unique(x, dim=0), torch.tensor([NAN, 1.0, NAN, 0.0, 1.0]), native=False)
    check(f, torch.tensor([[1.0, 2.0], [1.0, 2.0], [0.0, 5.0]]))  # no NaN: native
    g = torch.Generator().manual_seed(0)
    big = torch.randint(0, 3, (40, 2), generator=g).float()
    big[torch.randint(0, 40, (9,), generator=g), 1] = NAN  # past std::sort's insertion cutoff
    check(f, big, native=False)


def test_deprecated_aminmax():
    x = rand((4, 5), torch.float32)
    check(lambda x: (torch.ops.aten._aminmax(x), torch.ops.aten._aminmax.dim(x, 1, True)), x)


def test_equal():
    x = rand((3, 4), torch.float32)
    cases = [
        (x, x.clone()), (x, x + 1), (x, x[:2]), (x, x.t()), (x.t(), x.t().contiguous()),
        (x.int(), x.int().double()), (torch.tensor([NAN]), torch.tensor([NAN])),
        (torch.zeros(0, 3), torch.zeros(0, 3)), (torch.tensor(1), torch.tensor(1.0)),
        (torch.tensor([True, False]), torch.tensor([True, True])),
    ]
    for a, b in cases:
        exp = torch.equal(a, b)
        with torchneuron.fallback_policy("error"):
            got = torch.equal(a.to(DEV), b.to(DEV))
        assert got is exp, (a, b)
    with pytest.raises(RuntimeError, match="different devices"):
        torch.equal(x.to(DEV), x)


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, INF])
def test_cdist(p):
    x1 = rand((2, 5, 3), torch.float64).requires_grad_()
    x2 = rand((2, 4, 3), torch.float64).requires_grad_()
    check(lambda a, b: torch.cdist(a, b, p=p), x1, x2, grad=True, atol=1e-8, rtol=1e-8)
    # repeated points: zero distances (the backward's special cases)
    y1 = torch.tensor([[0.0, 1.0], [2.0, 2.0], [0.0, 1.0]], dtype=torch.float64).requires_grad_()
    y2 = torch.tensor([[0.0, 1.0], [2.0, 3.0]], dtype=torch.float64).requires_grad_()
    check(lambda a, b: torch.cdist(a, b, p=p), y1, y2, grad=True, atol=1e-8, rtol=1e-8)
    check(lambda a, b: torch.cdist(a, b, p=p), rand((6, 3), torch.float32), rand((1, 4, 3), torch.float32),
          atol=1e-4, rtol=1e-4)
    # broadcast batch dims (the backward returns the broadcast shape; autograd sums it)
    z1 = rand((2, 1, 3, 2), torch.float64).requires_grad_()
    z2 = rand((1, 4, 2), torch.float64).requires_grad_()
    check(lambda a, b: torch.cdist(a, b, p=p), z1, z2, grad=True, atol=1e-8, rtol=1e-8)
    # an empty broadcast batch
    e1 = rand((1, 4, 5), torch.float64).requires_grad_()
    e2 = rand((0, 3, 5), torch.float64).requires_grad_()
    check(lambda a, b: torch.cdist(a, b, p=p), e1, e2, grad=True)


def test_cdist_mm_path():
    # p=2 with more than 25 rows takes CPU's matmul-based path: close, not bitwise
    a, b = rand((30, 4), torch.float32), rand((27, 4), torch.float32)
    check(lambda a, b: torch.cdist(a, b), a, b, atol=1e-3, rtol=1e-3, native=True)


# ---------------------------------------------------------------- errors
def test_errors():
    e, i = torch.zeros(0), torch.arange(3)
    check_raises(lambda x: x.max(), e, exact=False)
    check_raises(lambda x: x.min(), e, exact=False)
    check_raises(lambda x: x.amax(), e, exact=False)
    check_raises(lambda x: x.max(0), torch.zeros(0, 2), exact=False)
    check_raises(lambda x: x.median(0), torch.zeros(0, 2), exact=False)
    check_raises(lambda x: x.mode(0), torch.zeros(0, 2), exact=False)
    check_raises(lambda x: x.mean(), i, exact=False)
    check_raises(lambda x: x.var(), i, exact=False)
    check_raises(lambda x: torch.linalg.vector_norm(x), i, exact=False)
    check_raises(lambda x: x.kthvalue(4), i.float(), exact=False)
    check_raises(lambda x: x.topk(4), i.float(), exact=False)
    check_raises(lambda x: x.sum(2), torch.zeros(2, 2), exact=False)
    check_raises(lambda x: torch.linalg.vector_norm(x, INF), e, exact=False)
    check_raises(lambda x: x.logcumsumexp(0), i, exact=False)
    check_raises(lambda x: x.cummax(0), i.to(torch.complex64), exact=False)
    check_raises(lambda x: x.sort(), i.to(torch.complex64), exact=False)
    check_raises(lambda x: x.amax(), i.to(torch.complex64), exact=False)
    check_raises(lambda x: torch.histc(x, 4), i > 0, exact=False)
    check_raises(lambda x: torch.histc(x, 4, 3, 1), i.float(), exact=False)


# ---------------------------------------------------------------- gradients
def _g(shape=(4, 5)):
    return rand(shape, torch.float64).requires_grad_()


GRADS = {
    "sum": lambda x: (x.sum(), x.sum(1), x.sum([0, 1], keepdim=True), x.t().sum(0)),
    "nansum": lambda x: x.nansum(1),
    "mean": lambda x: (x.mean(), x.mean(0, keepdim=True)),
    "prod": lambda x: (x.prod(1), x.prod(0, keepdim=True)),
    "prod_all": lambda x: x.prod(),
    "amax": lambda x: (x.amax(1), x.amin([0, 1])),
    "max_all": lambda x: (x.max(), x.min()),
    "max_dim": lambda x: (x.max(1)[0], x.min(0, keepdim=True)[0]),
    "aminmax": lambda x: torch.aminmax(x, dim=1),
    "var_std": lambda x: (x.var(1), x.std(), torch.var_mean(x, 0), torch.std_mean(x, 1, correction=0)),
    "norm": lambda x: (torch.linalg.vector_norm(x), torch.linalg.vector_norm(x, 1, 1),
                       torch.linalg.vector_norm(x, INF, 0), torch.linalg.vector_norm(x, 3.5, -1),
                       x.norm(dim=1)),
    "logsumexp": lambda x: torch.logsumexp(x, 1),
    "cumsum": lambda x: (x.cumsum(1), x.cumsum(0)),
    "cumprod": lambda x: x.cumprod(1),
    "cummax": lambda x: (x.cummax(1)[0], x.cummin(0)[0]),
    "logcumsumexp": lambda x: x.logcumsumexp(1),
    "sort": lambda x: (x.sort(1)[0], x.sort(0, descending=True)[0]),
    "topk": lambda x: x.topk(2, 1)[0],
    "kthvalue": lambda x: x.kthvalue(2, 1)[0],
    "median": lambda x: (x.median(), x.median(1)[0], x.nanmedian(0)[0]),
    "mode": lambda x: x.mode(1)[0],
}


@pytest.mark.parametrize("name", list(GRADS))
def test_grad(name):
    check(GRADS[name], _g(), grad=True, atol=1e-8, rtol=1e-8)


def test_grad_zeros_and_ties():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 0.0, 0.0, 5.0], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    for f in (lambda x: x.prod(1), lambda x: x.amax(1), lambda x: x.max(), lambda x: x.max(1)[0],
              lambda x: torch.linalg.vector_norm(x, INF, 1), lambda x: x.cumprod(1),
              lambda x: torch.linalg.vector_norm(x - 1, 2, 1), lambda x: x.std(1)):
        check(f, x.clone().requires_grad_(), grad=True, atol=1e-8, rtol=1e-8)


ISIN = [
    ("float_vs_float_nan", lambda: (torch.tensor([1., 2., float("nan"), 4., 5.]), torch.tensor([4., float("nan"), 1.]))),
    ("float_vs_long", lambda: (torch.tensor([1., 2.5, 4.]), torch.tensor([4, 1, 7]))),
    ("long_2d", lambda: (torch.arange(12).reshape(3, 4) % 5, torch.tensor([[0, 3], [9, 9]]))),
    ("tensor_scalar", lambda: (torch.arange(6.0), 2.0)),
    ("scalar_tensor", lambda: (3, torch.arange(6))),
    ("empty_test_set", lambda: (torch.arange(6), torch.tensor([], dtype=torch.long))),
]


@pytest.mark.parametrize("name,make", ISIN, ids=[i[0] for i in ISIN])
@pytest.mark.parametrize("invert", [False, True])
def test_isin(name, make, invert):
    e, t = make()
    dev = [v.to(DEV) if isinstance(v, torch.Tensor) else v for v in (e, t)]
    with native_only():
        got = torch.isin(*dev, invert=invert)
    assert_same(got, torch.isin(e, t, invert=invert))


# ---------------------------------------------------------------- pdist, renorm
@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, INF])
def test_pdist(p):
    x = rand((6, 3), torch.float64)
    x[4] = x[1]  # a zero distance (the backward's special cases)
    check(lambda a: torch.nn.functional.pdist(a, p), x.requires_grad_(), grad=True, atol=1e-8,
          rtol=1e-8)
    check(lambda a: torch.nn.functional.pdist(a, p), rand((5, 4), torch.float32), atol=1e-5,
          rtol=1e-5)
    # one row (no pairs) and no columns
    check(lambda a: torch.nn.functional.pdist(a, p), rand((1, 3), torch.float64).requires_grad_(),
          grad=True)
    check(lambda a: torch.nn.functional.pdist(a, p), torch.zeros(4, 0, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.complex64], ids=str)
@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, INF])
def test_renorm(p, dtype):
    x = (torch.randn(4, 5, 3, dtype=torch.float64) * 3).to(dtype)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype in (torch.float32, torch.complex64) else {}
    for dim in (0, 1, -1):
        # maxnorm below and above the slices' norms: some slices scaled, some left alone
        check(lambda a: torch.renorm(a, p, dim, 4.0), x, **tol)
    check(lambda a: a.renorm_(p, 0, 1.0), x.clone(), **tol)
    if dtype == torch.float64:
        check(lambda a: torch.renorm(a, p, 1, 2.0), x.clone().requires_grad_(), grad=True)


def test_renorm_errors():
    for args in [(torch.randn(3), 2, 0, 1.0), (torch.randn(3, 3), 0, 0, 1.0),
                 (torch.randn(3, 3), 2, 0, -1.0)]:
        check_raises(torch.renorm, *args, native=False)


# ---------------------------------------------------------------- segment_reduce
SEG_REDUCTIONS = ["sum", "mean", "max", "min", "prod", "amax", "amin"]


@pytest.mark.parametrize("initial", [None, 2.0])
@pytest.mark.parametrize("reduce", SEG_REDUCTIONS)
def test_segment_reduce(reduce, initial):
    # ties (max/min), zeros (prod), an empty segment; gradients of both signs
    x = torch.tensor([1.0, 3.0, 3.0, 0.0, 2.0, 0.0, 0.0, 4.0, -1.0], dtype=torch.float64)
    lengths = torch.tensor([3, 0, 2, 3, 1])
    check(lambda x, L: torch.segment_reduce(x, reduce, lengths=L, initial=initial),
          x.requires_grad_(), lengths, grad=True, atol=1e-12, rtol=1e-12)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    check(lambda x, o: torch.segment_reduce(x, reduce, offsets=o, initial=initial),
          x.detach().requires_grad_(), offsets, grad=True, atol=1e-12, rtol=1e-12)
    # along axis 1 of a 3-d tensor, lengths per row
    y = rand((2, 6, 3), torch.float32)
    L2 = torch.tensor([[2, 4], [3, 3]])
    check(lambda y, L: torch.segment_reduce(y, reduce, lengths=L, axis=1, initial=initial), y, L2,
          atol=1e-5, rtol=1e-5)


def test_segment_reduce_errors():
    d = torch.arange(6.0)
    cases = [dict(reduce="sum", lengths=torch.tensor([2, 3])), dict(reduce="sum"),
             dict(reduce="sum", indices=torch.tensor([0, 1])),
             dict(reduce="foo", lengths=torch.tensor([2, 4]))]
    for kw in cases:
        check_raises(torch.segment_reduce, d, native=False, **kw)


# ---------------------------------------------------------------- hash_tensor
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool],
                         ids=str)
def test_hash_tensor(dtype):
    # the exact uint64 XOR of the widened bits (negative integers sign-extended)
    x = rand((3, 4, 5), torch.float64).to(dtype) if dtype != torch.bool else torch.rand(3, 4, 5) > 0.5
    if dtype in (torch.int8, torch.int32, torch.int64):
        x = torch.randint(-100, 100, (3, 4, 5), dtype=dtype)
    for kw in ({}, dict(dim=1), dict(dim=[0], keepdim=True), dict(dim=[0, -1])):
        check(lambda t: torch.hash_tensor(t, **kw), x)
    check(lambda t: torch.hash_tensor(t, 1), x[:0])  # no rows: an empty result


def test_hash_tensor_errors():
    for fn, x in ((torch.hash_tensor, torch.tensor([1 + 2j])),
                  (lambda t: torch.hash_tensor(t, mode=1), torch.tensor([1.0])),
                  (torch.hash_tensor, torch.zeros(0)),
                  (lambda t: torch.hash_tensor(t, 1), torch.zeros(3, 0))):
        check_raises(fn, x)

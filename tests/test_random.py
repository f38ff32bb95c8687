"""Random ops on the neuron device.

The device's streams differ from CPU's, so values are checked against exact
expectations: reproducibility under the seed APIs, ranges, dtypes and shapes,
and distribution moments on large samples (tolerances of about 6 standard
errors).  Deterministic corners (dropout p=0/p=1/eval, argument errors) are
compared with CPU.  Everything runs under fallback policy "error": a pass
proves the op is native.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from helpers import DEV, check, check_raises, native_only, raises_like

N = 200_000


def _cpu(x):
    return x.detach().cpu()


def _d(x):
    return _cpu(x).double()


def _moments_ok(x, mean, std, n=None):
    x = _d(x).reshape(-1)
    n = n or x.numel()
    assert abs(x.mean().item() - mean) < 6 * std / math.sqrt(n) + 1e-9, (x.mean().item(), mean)
    assert abs(x.std().item() - std) < 6 * std * math.sqrt(2.0 / n) + 0.01 * std, (x.std().item(), std)


# ---------------------------------------------------------------- reproducibility
FACTORIES = [
    ("rand", lambda: torch.rand(64, device=DEV)),
    ("randn", lambda: torch.randn(8, 8, device=DEV)),
    ("randn_f64", lambda: torch.randn(33, device=DEV, dtype=torch.float64)),
    ("rand_like", lambda: torch.rand_like(torch.zeros(10, device=DEV))),
    ("randn_like", lambda: torch.randn_like(torch.zeros(10, device=DEV, dtype=torch.float16))),
    ("randint", lambda: torch.randint(0, 1000, (50,), device=DEV)),
    ("randint_like", lambda: torch.randint_like(torch.zeros(50, device=DEV), 3, 1000)),
    ("randperm", lambda: torch.randperm(100, device=DEV)),
    ("uniform_", lambda: torch.empty(40, device=DEV).uniform_(-3, 5)),
    ("normal_", lambda: torch.empty(40, device=DEV).normal_(2, 3)),
    ("normal_TT", lambda: torch.normal(torch.zeros(40, device=DEV), torch.ones(40, device=DEV))),
    ("normal_ff", lambda: torch.normal(1.0, 2.0, (40,), device=DEV)),
    ("bernoulli", lambda: torch.bernoulli(torch.full((100,), 0.5, device=DEV))),
    ("bernoulli_", lambda: torch.empty(100, device=DEV).bernoulli_(0.3)),
    ("random_", lambda: torch.empty(40, device=DEV, dtype=torch.int64).random_()),
    ("multinomial", lambda: torch.multinomial(torch.ones(5, 10, device=DEV), 4)),
    ("multinomial_r", lambda: torch.multinomial(torch.ones(5, 10, device=DEV), 40, True)),
    ("exponential_", lambda: torch.empty(40, device=DEV).exponential_()),
    ("geometric_", lambda: torch.empty(40, device=DEV).geometric_(0.2)),
    ("log_normal_", lambda: torch.empty(40, device=DEV).log_normal_()),
    ("cauchy_", lambda: torch.empty(40, device=DEV).cauchy_()),
    ("dropout", lambda: F.dropout(torch.ones(100, device=DEV), 0.5)),
]


@pytest.mark.parametrize("name,fn", FACTORIES, ids=[f[0] for f in FACTORIES])
def test_reproducible(name, fn):
    with native_only():
        torch.manual_seed(123)
        a = _cpu(fn())
        b = _cpu(fn())
        torch.manual_seed(123)
        a2 = _cpu(fn())
        b2 = _cpu(fn())
        torch.manual_seed(124)
        c = _cpu(fn())
        torch.neuron.manual_seed(123)
        a3 = _cpu(fn())
    assert torch.equal(a, a2) and torch.equal(b, b2) and torch.equal(a, a3)
    assert not torch.equal(a, b), "consecutive draws must differ"
    assert not torch.equal(a, c), "different seeds must differ"


def test_rng_state_roundtrip():
    with native_only():
        torch.manual_seed(7)
        torch.rand(3, device=DEV)
        state = torch.neuron.get_rng_state()
        a = _cpu(torch.randn(20, device=DEV))
        b = _cpu(torch.randint(0, 100, (20,), device=DEV))
        torch.neuron.set_rng_state(state)
        a2 = _cpu(torch.randn(20, device=DEV))
        b2 = _cpu(torch.randint(0, 100, (20,), device=DEV))
    assert torch.equal(a, a2) and torch.equal(b, b2)
    assert state.dtype == torch.uint8 and state.device.type == "cpu"


def test_fork_rng():
    with native_only():
        torch.manual_seed(3)
        with torch.random.fork_rng(device_type="neuron"):
            x = _cpu(torch.rand(10, device=DEV))
        y = _cpu(torch.rand(10, device=DEV))
    assert torch.equal(x, y)


def test_seed_does_not_touch_cpu_stream():
    torch.manual_seed(5)
    a = torch.rand(10)
    torch.manual_seed(5)
    with native_only():
        torch.rand(10, device=DEV).uniform_(2, 3)
        torch.empty(1, device=DEV).random_(0, 5)
    b = torch.rand(10)
    assert torch.equal(a, b)


# ---------------------------------------------------------------- uniform / normal
UNIFORM_CASES = [(torch.float32, 0.0, 1.0), (torch.float32, -3.0, 5.0), (torch.float32, 2.0, 2.0),
                 (torch.float64, -3.0, 5.0), (torch.float16, 0.0, 1.0), (torch.bfloat16, -3.0, 5.0)]


@pytest.mark.parametrize("dtype,lo,hi", UNIFORM_CASES)
def test_uniform(dtype, lo, hi):
    with native_only():
        x = torch.empty(N, device=DEV, dtype=dtype).uniform_(lo, hi)
    assert x.dtype == dtype and x.shape == (N,)
    c = _d(x)
    assert c.min() >= lo
    if hi > lo:
        assert c.max() < hi if dtype in (torch.float32, torch.float64) else c.max() <= hi
        w = hi - lo
        tol = 0.02 if dtype == torch.bfloat16 else 0.0
        _moments_ok(x, (lo + hi) / 2 + (0 if not tol else (c.mean().item() - (lo + hi) / 2)),
                    w / math.sqrt(12) * (1 + tol) if tol else w / math.sqrt(12))
    else:
        assert (c == lo).all()


def test_rand_randn_shapes_dtypes():
    cases = [(torch.rand, (), torch.float32), (torch.randn, (3, 0, 2), torch.float32),
             (torch.rand, (2, 3, 4), torch.float16), (torch.randn, (2, 3, 4), torch.bfloat16),
             (torch.rand, (2, 3), torch.complex128), (torch.randn, (2, 3), torch.complex64),
             (torch.randn, (2, 3), torch.float64)]
    with native_only():
        for fn, shape, dt in cases:
            x = fn(shape, device=DEV, dtype=dt)
            assert x.shape == shape and x.dtype == dt and x.device.type == "neuron"
        torch.set_default_dtype(torch.float64)
        try:
            assert torch.rand(3, device=DEV).dtype == torch.float64
        finally:
            torch.set_default_dtype(torch.float32)


def test_rand_complex():
    with native_only():
        x = torch.rand(N, device=DEV, dtype=torch.complex64)
        z = torch.randn(N, device=DEV, dtype=torch.complex128)
    c = _cpu(x)
    assert (c.real >= 0).all() and (c.real < 1).all() and (c.imag >= 0).all() and (c.imag < 1).all()
    _moments_ok(c.real, 0.5, 1 / math.sqrt(12))
    _moments_ok(c.imag, 0.5, 1 / math.sqrt(12))
    # complex normal: each part has variance 1/2
    zc = _cpu(z)
    _moments_ok(zc.real, 0.0, math.sqrt(0.5))
    _moments_ok(zc.imag, 0.0, math.sqrt(0.5))


NORMAL_CASES = [(torch.float32, 0.0, 1.0), (torch.float32, -2.0, 4.0), (torch.float64, 3.0, 0.5),
                (torch.float16, 0.0, 1.0), (torch.bfloat16, -2.0, 4.0)]


@pytest.mark.parametrize("dtype,mean,std", NORMAL_CASES)
def test_normal_(dtype, mean, std):
    with native_only():
        x = torch.empty(N, device=DEV, dtype=dtype).normal_(mean, std)
    assert x.dtype == dtype
    tol_scale = 1.0 if dtype in (torch.float32, torch.float64) else 1.0
    _moments_ok(x, mean, std * tol_scale)
    c = _d(x)
    # quantiles of a normal: P(X < mean + std) ~= 0.8413
    q = (c < mean + std).double().mean().item()
    assert abs(q - 0.8413) < 0.01


def test_normal_std_zero():
    with native_only():
        x = torch.empty(100, device=DEV).normal_(2.5, 0.0)
        y = torch.normal(torch.full((10,), 1.5, device=DEV), torch.zeros(10, device=DEV))
    assert (_cpu(x) == 2.5).all() and (_cpu(y) == 1.5).all()


def test_normal_tensor_forms():
    mean = torch.linspace(-5, 5, 10).repeat(20000)
    std = torch.linspace(0.5, 2, 10).repeat(20000)
    with native_only():
        a = torch.normal(mean.to(DEV), std.to(DEV))
        b = torch.normal(mean.to(DEV), 2.0)
        c = torch.normal(1.0, std.to(DEV))
        d = torch.normal(-1.0, 3.0, size=(N,), device=DEV)
        f = torch.normal(mean.view(-1, 10)[:, :1].to(DEV), std[:10].to(DEV))  # broadcast
    assert a.shape == mean.shape and a.dtype == torch.float32
    assert d.shape == (N,)
    assert f.shape == (20000, 10)
    for k in range(10):
        _moments_ok(_cpu(a).view(-1, 10)[:, k], mean[k].item(), std[k].item())
        _moments_ok(_cpu(b).view(-1, 10)[:, k], mean[k].item(), 2.0)
        _moments_ok(_cpu(c).view(-1, 10)[:, k], 1.0, std[k].item())
        _moments_ok(_cpu(f)[:, k], -5.0, std[k].item())
    _moments_ok(d, -1.0, 3.0)


def test_normal_out_and_views():
    with native_only():
        out = torch.empty(5, device=DEV)
        r = torch.normal(torch.zeros(1000, device=DEV), torch.ones(1000, device=DEV), out=out)
        assert r is out and out.shape == (1000,)
        base = torch.zeros(6, 8, device=DEV)
        base[:, ::2].uniform_(10, 11)
        base.t()[1:3].normal_(100, 1)
    c = _cpu(base)
    assert ((c[:, 0::2][:, [0, 2, 3]] >= 10) & (c[:, 0::2][:, [0, 2, 3]] < 11)).all()
    assert (c[:, [1, 2]] > 50).all()
    assert (c[:, [3, 5, 7]] == 0).all()


# ---------------------------------------------------------------- bernoulli
BERNOULLI_CASES = ([(dt, 0.3) for dt in (torch.float32, torch.float64, torch.float16, torch.bool,
                                         torch.int64, torch.uint8, torch.int32)]
                   + [(torch.float32, 0.0), (torch.bool, 1.0)])


@pytest.mark.parametrize("dtype,p", BERNOULLI_CASES)
def test_bernoulli_float_p(dtype, p):
    with native_only():
        x = torch.empty(N, device=DEV, dtype=dtype).bernoulli_(p)
        ts = [x]
        if dtype == torch.float32:
            ts.append(torch.ops.aten.bernoulli.p(torch.empty(N, device=DEV, dtype=dtype), p))
    for t in ts:
        assert t.dtype == dtype
        c = _d(t)
        assert ((c == 0) | (c == 1)).all()
        assert abs(c.mean().item() - p) < 6 * math.sqrt(p * (1 - p) / N) + 1e-12


def test_bernoulli_tensor_p():
    p = torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0]).repeat(40000)
    with native_only():
        a = torch.bernoulli(p.to(DEV))
        b = torch.empty(p.shape, device=DEV, dtype=torch.int64).bernoulli_(p.to(DEV))
        c = torch.bernoulli(p.to(DEV, torch.float64)[:5000])
        d = torch.zeros(40000, 5, device=DEV, dtype=torch.bool).bernoulli_(p[:5].to(DEV))  # broadcast p
    assert a.dtype == torch.float32 and b.dtype == torch.int64 and c.dtype == torch.float64
    assert set(_cpu(c).view(-1, 5)[:, 0].tolist()) == {0.0} and set(_cpu(c).view(-1, 5)[:, 4].tolist()) == {1.0}
    assert d.dtype == torch.bool
    for t in (a, b, d):
        f = _d(t).reshape(-1, 5)
        for k, pk in enumerate([0.0, 0.1, 0.5, 0.9, 1.0]):
            assert abs(f[:, k].mean().item() - pk) < 6 * math.sqrt(pk * (1 - pk) / f.shape[0]) + 1e-12


# ---------------------------------------------------------------- random_ / randint
INT_RANGES = [
    (torch.uint8, 0, 255), (torch.int8, 0, 127), (torch.int16, 0, 2**15 - 1),
    (torch.int32, 0, 2**31 - 1), (torch.int64, 0, 2**63 - 1), (torch.bool, 0, 1),
    (torch.float32, 0, 2**24), (torch.float64, 0, 2**53), (torch.float16, 0, 2**11),
    (torch.bfloat16, 0, 2**8),
]


@pytest.mark.parametrize("dtype,lo,hi", INT_RANGES, ids=[str(r[0]) for r in INT_RANGES])
def test_random_default_range(dtype, lo, hi):
    with native_only():
        x = torch.empty(N, device=DEV, dtype=dtype).random_()
    assert x.dtype == dtype
    c = _cpu(x)
    if dtype == torch.int64:
        assert c.min().item() >= 0
        assert c.max().item() > 2**62  # the full range is used
        assert abs(c.double().mean().item() / 2**63 - 0.5) < 0.01
        return
    c = c.double()
    assert c.min().item() >= lo and c.max().item() <= hi
    assert c.min().item() < lo + (hi - lo) * 0.01 and c.max().item() > hi - (hi - lo) * 0.01
    assert (c == c.round()).all()
    assert abs(c.mean().item() - (lo + hi) / 2) < 0.01 * (hi - lo) + 0.01


FROM_TO_CASES = ([(dt, -7, 3) for dt in (torch.int64, torch.int32, torch.int16, torch.int8,
                                          torch.float32, torch.float64, torch.float16,
                                          torch.bfloat16)]
                 + [(torch.uint8, 100, 120), (torch.int64, 5, 6), (torch.float32, 0, 10)])


@pytest.mark.parametrize("dtype,lo,hi", FROM_TO_CASES)
def test_random_from_to(dtype, lo, hi):
    with native_only():
        x = torch.empty(N, device=DEV, dtype=dtype).random_(lo, hi)
        y = torch.randint(lo, hi, (N,), device=DEV, dtype=dtype)
    for t in (x, y):
        assert t.dtype == dtype
        c = _cpu(t).double()
        counts = torch.bincount((c - lo).long(), minlength=hi - lo)
        assert c.min() >= lo and c.max() < hi and counts.numel() == hi - lo
        expect = N / (hi - lo)
        assert (counts - expect).abs().max() < 6 * math.sqrt(expect) + 1


def test_random_to_and_from_only():
    with native_only():
        a = torch.empty(N, device=DEV, dtype=torch.int32).random_(17)
        b = torch.empty(N, device=DEV, dtype=torch.int16).random_(-5, None)
        c = torch.empty(N, device=DEV, dtype=torch.int64).random_(-2**63, None)  # full 64-bit range
        d = torch.empty(N, device=DEV, dtype=torch.int64).random_(-2**63, 2**63 - 1)
        e = torch.randint(2**40, 2**40 + 3, (1000,), device=DEV)
        f = torch.empty(N, device=DEV, dtype=torch.uint8).random_(250, None)
    ca = _cpu(a)
    assert ca.min() == 0 and ca.max() == 16
    cb = _cpu(b)
    assert cb.min().item() < -4000 // 1 or cb.min().item() >= -5
    assert cb.min().item() >= -5 and cb.max().item() > 30000
    cc = _cpu(c)
    assert cc.min().item() < -2**62 and cc.max().item() > 2**62
    cd = _cpu(d)
    assert cd.min().item() < -2**62 and cd.max().item() > 2**62
    ce = _cpu(e)
    assert set(ce.tolist()) == {2**40, 2**40 + 1, 2**40 + 2}
    cf = _cpu(f)
    assert set(cf.tolist()) == {250, 251, 252, 253, 254, 255}


def test_randint_variants():
    with native_only():
        a = torch.randint(10, (N,), device=DEV)
        b = torch.randint(0, 2, (1000,), device=DEV, dtype=torch.bool)
        c = torch.randint(-3, 3, (2, 3, 4), device=DEV, dtype=torch.float32)
        d = torch.randint_like(torch.zeros(3, 4, device=DEV, dtype=torch.int32), 5)
        e = torch.randint_like(torch.zeros(3, 4, device=DEV), -2, 2)
        f = torch.randint(5, (0,), device=DEV)
    assert a.dtype == torch.int64 and a.shape == (N,)
    assert set(_cpu(a).tolist()) == set(range(10))
    assert b.dtype == torch.bool and set(_cpu(b).tolist()) == {False, True}
    assert c.dtype == torch.float32 and c.shape == (2, 3, 4)
    assert ((_cpu(c) >= -3) & (_cpu(c) < 3)).all()
    assert d.dtype == torch.int32 and ((_cpu(d) >= 0) & (_cpu(d) < 5)).all()
    assert e.dtype == torch.float32 and ((_cpu(e) >= -2) & (_cpu(e) < 2)).all()
    assert f.shape == (0,)


# ---------------------------------------------------------------- randperm
@pytest.mark.parametrize("n", [0, 1, 10, 1 << 20])
def test_randperm(n):
    with native_only():
        p = torch.randperm(n, device=DEV)
    assert p.dtype == torch.int64 and p.shape == (n,)
    assert torch.equal(_cpu(p).sort().values, torch.arange(n))
    if n >= 10:
        assert not torch.equal(_cpu(p), torch.arange(n))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8, torch.float32,
                                   torch.float64, torch.float16])
def test_randperm_dtypes(dtype):
    with native_only():
        p = torch.randperm(200, device=DEV, dtype=dtype)
    assert p.dtype == dtype
    assert torch.equal(_cpu(p).double().sort().values, torch.arange(200).double())


def test_randperm_uniform_first_position():
    with native_only():
        first = torch.stack([_cpu(torch.randperm(4, device=DEV))[0] for _ in range(400)])
    counts = torch.bincount(first, minlength=4)
    assert (counts - 100).abs().max() < 40


def test_randperm_out():
    with native_only():
        out = torch.empty(0, device=DEV, dtype=torch.int64)
        r = torch.randperm(50, out=out)
    assert r is out and torch.equal(_cpu(out).sort().values, torch.arange(50))


# ---------------------------------------------------------------- multinomial
def test_multinomial_with_replacement_freq():
    p = torch.tensor([0.1, 0.0, 0.3, 0.6, 0.0])
    with native_only():
        s = torch.multinomial(p.to(DEV), N, replacement=True)
    assert s.dtype == torch.int64 and s.shape == (N,)
    counts = torch.bincount(_cpu(s), minlength=5).double()
    assert counts[1] == 0 and counts[4] == 0
    for k in (0, 2, 3):
        pk = p[k].item()
        assert abs(counts[k].item() / N - pk) < 6 * math.sqrt(pk * (1 - pk) / N)


def test_multinomial_2d_unnormalized():
    p = torch.tensor([[1.0, 3.0, 0.0, 4.0], [0.0, 0.0, 5.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    with native_only():
        s = torch.multinomial(p.to(DEV), 50000, replacement=True)
        s64 = torch.multinomial(p.to(DEV, torch.float64), 10, replacement=True)
    assert s.shape == (3, 50000) and s64.shape == (3, 10)
    c = _cpu(s)
    for r in range(3):
        freq = torch.bincount(c[r], minlength=4).double() / 50000
        expect = p[r] / p[r].sum()
        assert (freq - expect).abs().max() < 0.015, (r, freq, expect)
    assert (_cpu(s64)[1] == 2).all()


def test_multinomial_without_replacement():
    p = torch.tensor([[0.5, 0.0, 1.0, 2.0, 0.0, 4.0, 8.0]] * 3000)
    with native_only():
        s = torch.multinomial(p.to(DEV), 5)
        one = torch.multinomial(p.to(DEV), 1)
        full = torch.multinomial(torch.ones(20, device=DEV), 20)
    c = _cpu(s)
    assert c.shape == (3000, 5) and one.shape == (3000, 1)
    for row in c:
        assert len(set(row.tolist())) == 5
        assert 1 not in row.tolist() and 4 not in row.tolist()
    # the first draw follows p exactly
    freq = torch.bincount(c[:, 0], minlength=7).double() / 3000
    expect = p[0] / p[0].sum()
    assert (freq - expect).abs().max() < 0.04
    f1 = torch.bincount(_cpu(one)[:, 0], minlength=7).double() / 3000
    assert (f1 - expect).abs().max() < 0.04
    assert torch.equal(_cpu(full).sort().values, torch.arange(20))


def test_multinomial_zero_prob_never_drawn_single():
    p = torch.zeros(1000)
    p[123] = 1.0
    with native_only():
        a = torch.multinomial(p.to(DEV), 100, replacement=True)
        b = torch.multinomial(p.to(DEV), 1)
    assert (_cpu(a) == 123).all() and (_cpu(b) == 123).all()


MULTINOMIAL_ERRORS = [
    ("nsample_gt", torch.ones(4), 5, False),
    ("neg_fast", torch.tensor([1.0, -1.0, 0.0]), 1, True),
    ("neg_repl", torch.tensor([1.0, -1.0, 0.0]), 2, True),
    ("nan_repl", torch.tensor([1.0, float("nan")]), 2, True),
    ("inf_repl", torch.tensor([1.0, float("inf")]), 2, True),
    ("inf_fast", torch.tensor([1.0, float("inf")]), 1, False),
    ("sum0_repl", torch.zeros(4), 2, True),
    ("sum0_2d", torch.tensor([[1.0, 1.0], [0.0, 0.0]]), 2, False),
    ("zero_samples", torch.ones(3), 0, True),
    ("int_input", torch.ones(3, dtype=torch.int64), 1, True),
    ("3d", torch.ones(2, 2, 2), 1, True),
    ("no_categories", torch.ones(2, 0), 1, True),
]


@pytest.mark.parametrize("name,p,n,repl", MULTINOMIAL_ERRORS, ids=[e[0] for e in MULTINOMIAL_ERRORS])
def test_multinomial_errors(name, p, n, repl):
    check_raises(lambda p: torch.multinomial(p, n, repl), p)


# ---------------------------------------------------------------- other distributions
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_exponential(dtype):
    with native_only():
        x = torch.empty(N, device=DEV, dtype=dtype).exponential_(2.0)
    c = _d(x)
    assert x.dtype == dtype and (c > 0).all() and torch.isfinite(c).all()
    _moments_ok(c, 0.5, 0.5 * (1.0 if dtype != torch.bfloat16 else 1.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_geometric(dtype):
    p = 0.25
    with native_only():
        x = torch.empty(N, device=DEV, dtype=dtype).geometric_(p)
    c = _d(x)
    assert x.dtype == dtype and (c >= 1).all() and (c == c.round()).all()
    if dtype != torch.uint8:
        _moments_ok(c, 1 / p, math.sqrt(1 - p) / p)
    assert abs((c == 1).double().mean().item() - p) < 0.01


def test_log_normal():
    with native_only():
        x = torch.empty(N, device=DEV, dtype=torch.float64).log_normal_(0.5, 0.25)
    c = _cpu(x)
    assert (c > 0).all()
    _moments_ok(c.log(), 0.5, 0.25)


def test_cauchy():
    with native_only():
        x = torch.empty(N, device=DEV).cauchy_(2.0, 0.5)
    c = _d(x)
    # median 2, quartiles at median +- sigma
    assert abs(c.median().item() - 2.0) < 0.02
    assert abs(c.quantile(torch.tensor([0.25, 0.75], dtype=torch.float64))
               .sub(torch.tensor([1.5, 2.5], dtype=torch.float64)).abs().max().item()) < 0.03


def test_poisson_gamma():
    lam = torch.tensor([0.5, 3.0, 20.0]).repeat(50000)
    with native_only():
        x = torch.poisson(lam.to(DEV))
        g = torch._standard_gamma(lam.to(DEV, torch.float64))
    assert x.dtype == torch.float32 and g.dtype == torch.float64
    cx, cg = _cpu(x).view(-1, 3), _cpu(g).view(-1, 3)
    assert (cx == cx.round()).all() and (cx >= 0).all()
    for k, lk in enumerate([0.5, 3.0, 20.0]):
        _moments_ok(cx[:, k], lk, math.sqrt(lk))
        _moments_ok(cg[:, k], lk, math.sqrt(lk))


def test_gamma_degenerate_alpha():
    # PyTorch clamps samples to the smallest normal float (alpha <= 0, NaN, tiny alpha)
    check(lambda a: torch._standard_gamma(a), torch.tensor([-1.0, 0.0, float("nan"), 1e-30]))


# ---------------------------------------------------------------- dropout
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_dropout_deterministic_cases(dtype):
    x = torch.randn(6, 7).to(dtype)
    check(lambda t: torch.ops.aten.native_dropout(t, 1.0, True), x)
    check(lambda t: torch.ops.aten.native_dropout_backward(t, t > 0, 1.0 / 0.7), x)
    if dtype != torch.float32:
        return
    check(lambda t: torch.ops.aten.native_dropout(t, 0.0, True), x)
    check(lambda t: torch.ops.aten.native_dropout(t, 0.3, False), x)
    check(lambda t: torch.ops.aten.native_dropout(t, 0.3, True), torch.empty(0, 3).to(dtype))
    check(lambda t: F.dropout(t, 0.0, True), x)
    check(lambda t: F.dropout(t, 1.0, True), x)
    check(lambda t: F.dropout(t, 0.5, False), x)
    check(lambda t: F.dropout(t, 0.0, True), torch.randn(4, 5).to(dtype).requires_grad_(), grad=True)


@pytest.mark.parametrize("dtype,p", [(torch.float32, 0.5), (torch.float32, 0.1), (torch.float64, 0.9),
                                     (torch.float16, 0.5), (torch.bfloat16, 0.3)])
def test_dropout_train(dtype, p):
    x = (torch.rand(N) + 0.5).to(dtype)
    xd = x.to(DEV).requires_grad_()
    with native_only():
        y = F.dropout(xd, p, True)
        out, mask = torch.ops.aten.native_dropout(x.to(DEV), p, True)
        y.backward(torch.ones_like(y))
    assert y.dtype == dtype and mask.dtype == torch.bool
    cy = _cpu(y)
    kept = cy != 0
    assert abs(kept.double().mean().item() - (1 - p)) < 6 * math.sqrt(p * (1 - p) / N)
    scale = 1.0 / (1.0 - p)
    # kept values are x * 1/(1-p), rounded in the dtype as PyTorch does (opmath float)
    expect = (x.float() * scale).to(dtype) if dtype in (torch.float16, torch.bfloat16) else x * scale
    assert torch.equal(cy[kept], expect[kept])
    # backward: grad = mask * scale, the same mask
    g = _cpu(xd.grad)
    assert torch.equal(g != 0, kept)
    assert torch.equal(g[kept], torch.full_like(g[kept], 1.0) * torch.tensor(scale, dtype=torch.float64).to(dtype))
    cm, co = _cpu(mask), _cpu(out)
    assert torch.equal(co[cm], expect[cm]) and (co[~cm] == 0).all()


def test_dropout_module_and_variants():
    m = torch.nn.Dropout(0.25).to(DEV)
    x = torch.ones(1000, device=DEV)
    with native_only():
        y = m(x)
        m.eval()
        z = m(x)
        a = F.dropout(x, 0.25, training=True, inplace=False)
        b = x.clone()
        F.dropout(b, 0.25, training=True, inplace=True)
        d2 = F.dropout2d(torch.ones(2, 50, 3, 3, device=DEV), 0.5, True)
        al = F.alpha_dropout(torch.ones(100, device=DEV), 0.5, True)
    kept = torch.tensor(1.0 / 0.75).item()  # 1/(1-p) in float32
    assert set(_cpu(y).unique().tolist()) == {0.0, kept}
    assert torch.equal(_cpu(z), torch.ones(1000))
    assert set(_cpu(a).unique().tolist()) == {0.0, kept}
    assert set(_cpu(b).unique().tolist()) == {0.0, kept}
    c2 = _cpu(d2).view(2, 50, 9)
    assert ((c2 == c2[..., :1]).all())  # whole channels dropped or kept
    assert set(c2.unique().tolist()) == {0.0, 2.0}
    assert al.shape == (100,)


# ---------------------------------------------------------------- rrelu
def test_rrelu():
    x = torch.randn(10000)
    check(lambda t: F.rrelu(t, 0.1, 0.3, training=False), x)
    xd = x.to(DEV)
    with native_only():
        y = F.rrelu(xd, 0.1, 0.3, training=True)
    c = _cpu(y)
    pos = x >= 0
    assert torch.equal(c[pos], x[pos])
    ratio = c[~pos] / x[~pos]
    assert (ratio >= 0.1 - 1e-6).all() and (ratio <= 0.3 + 1e-6).all()
    assert ratio.std() > 0.03


# ---------------------------------------------------------------- errors
ERRORS = [
    ("uniform_int", lambda d: torch.empty(3, device=d, dtype=torch.int64).uniform_()),
    ("uniform_from_gt_to", lambda d: torch.empty(3, device=d).uniform_(2, 1)),
    ("uniform_inf", lambda d: torch.empty(3, device=d).uniform_(0, float("inf"))),
    ("uniform_huge", lambda d: torch.empty(3, device=d).uniform_(-3e38, 3e38)),
    ("rand_int", lambda d: torch.rand(3, device=d, dtype=torch.int64)),
    ("randn_int", lambda d: torch.randn(3, device=d, dtype=torch.int32)),
    ("normal_std_neg", lambda d: torch.empty(3, device=d).normal_(0, -1)),
    ("normal_tensor_std_neg", lambda d: torch.normal(torch.zeros(3, device=d),
                                                     torch.tensor([1.0, -1.0, 1.0], device=d))),
    ("normal_float_tensor_nan", lambda d: torch.normal(0.0, torch.tensor([1.0, float("nan")], device=d))),
    ("normal_tensor_float_neg", lambda d: torch.normal(torch.zeros(3, device=d), -2.0)),
    ("bernoulli_p_gt_1", lambda d: torch.empty(3, device=d).bernoulli_(1.5)),
    ("bernoulli_tensor_p_bad", lambda d: torch.bernoulli(torch.tensor([0.5, 2.0], device=d))),
    ("bernoulli_tensor_p_nan", lambda d: torch.bernoulli(torch.tensor([0.5, float("nan")], device=d))),
    ("bernoulli_int_p", lambda d: torch.bernoulli(torch.tensor([0, 1], device=d))),
    ("bernoulli_inplace_bad_p", lambda d: torch.empty(2, device=d).bernoulli_(torch.tensor([-0.1, 0.5], device=d))),
    ("random_bool_range", lambda d: torch.empty(3, device=d, dtype=torch.bool).random_(0, 3)),
    ("random_from_ge_to", lambda d: torch.empty(3, device=d).random_(3, 3)),
    ("random_u8_range", lambda d: torch.empty(3, device=d, dtype=torch.uint8).random_(0, 300)),
    ("random_i8_from", lambda d: torch.empty(3, device=d, dtype=torch.int8).random_(-200, 3)),
    ("random_to_neg", lambda d: torch.empty(3, device=d).random_(-5)),
    ("random_complex", lambda d: torch.empty(3, device=d, dtype=torch.complex64).random_()),
    ("random_full64_int32", lambda d: torch.empty(3, device=d, dtype=torch.int32).random_(-2**63, None)),
    ("random_full64_half", lambda d: torch.empty(3, device=d, dtype=torch.half).random_(-2**63, None)),
    ("randint_low_ge_high", lambda d: torch.randint(5, 3, (3,), device=d)),
    ("randperm_half_big", lambda d: torch.randperm(5000, device=d, dtype=torch.half)),
    ("randperm_u8_big", lambda d: torch.randperm(300, device=d, dtype=torch.uint8)),
    ("randperm_neg", lambda d: torch.randperm(-1, device=d)),
    ("exponential_neg", lambda d: torch.empty(3, device=d).exponential_(-1)),
    ("exponential_int", lambda d: torch.empty(3, device=d, dtype=torch.int32).exponential_()),
    ("geometric_p", lambda d: torch.empty(3, device=d).geometric_(1.5)),
    ("geometric_bool", lambda d: torch.empty(3, device=d, dtype=torch.bool).geometric_(0.5)),
    ("log_normal_std", lambda d: torch.empty(3, device=d).log_normal_(1, -2)),
    ("log_normal_int", lambda d: torch.empty(3, device=d, dtype=torch.int32).log_normal_()),
    ("cauchy_int", lambda d: torch.empty(3, device=d, dtype=torch.int32).cauchy_()),
    ("dropout_p", lambda d: torch.ops.aten.native_dropout(torch.ones(3, device=d), 1.5, True)),
    ("poisson_negative", lambda d: torch.poisson(torch.tensor([1.0, -1.0], device=d))),
    ("poisson_nan", lambda d: torch.poisson(torch.tensor([float("nan")], device=d))),
    ("poisson_int", lambda d: torch.poisson(torch.tensor([1, 2], device=d))),
    ("gamma_int", lambda d: torch._standard_gamma(torch.tensor([1, 2], device=d))),
    ("F_dropout_p", lambda d: F.dropout(torch.ones(3, device=d), 1.5, True)),
]


@pytest.mark.parametrize("name,fn", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_match_cpu(name, fn):
    raises_like(lambda: fn("cpu"), lambda: fn(DEV), exact_type=True)


def test_generator_argument():
    g = torch.Generator()
    with native_only():
        for fn in (lambda: torch.rand(3, device=DEV, generator=g),
                   lambda: torch.randn(3, device=DEV, generator=g),
                   lambda: torch.randint(0, 3, (3,), device=DEV, generator=g),
                   lambda: torch.randperm(5, device=DEV, generator=g),
                   lambda: torch.empty(3, device=DEV).uniform_(generator=g),
                   lambda: torch.bernoulli(torch.full((3,), 0.5, device=DEV), generator=g),
                   lambda: torch.multinomial(torch.ones(3, device=DEV), 2, generator=g)):
            with pytest.raises(RuntimeError, match="Expected a 'neuron' device type for generator"):
                fn()
    with pytest.raises((RuntimeError, NotImplementedError)):
        torch.Generator(device="neuron")


def test_empty_and_zero_dim():
    with native_only():
        for fn in (lambda s: torch.rand(s, device=DEV), lambda s: torch.randn(s, device=DEV),
                   lambda s: torch.randint(0, 4, s, device=DEV),
                   lambda s: torch.empty(s, device=DEV).exponential_(),
                   lambda s: torch.empty(s, device=DEV).bernoulli_(0.5)):
            assert fn((0, 3)).shape == (0, 3)
            x = fn(())
            assert x.shape == () and x.dim() == 0

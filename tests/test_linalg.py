"""Matrix products and linear algebra: neuron vs CPU, forward and gradients."""
import pytest
import torch
import torch.nn.functional as F

from helpers import DEV, assert_same, check, check_raises, native_only, rand, tol

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def rand_normal(shape, dtype, grad=False):
    return rand(shape, dtype, normal=True, grad=grad)


def _nc(t):
    """A non-contiguous tensor with t's values (transposed storage)."""
    return t.detach().mT.contiguous().mT.requires_grad_(t.requires_grad) if t.dim() >= 2 else \
        torch.stack([t.detach(), t.detach()], 1)[:, 0].requires_grad_(t.requires_grad)


# (name, fn, shapes)
PRODUCTS = [
    ("mm", torch.mm, [(3, 4), (4, 5)]),
    ("mm_empty_k", torch.mm, [(3, 0), (0, 5)]),
    ("mm_empty_m", torch.mm, [(0, 4), (4, 5)]),
    ("bmm", torch.bmm, [(2, 3, 4), (2, 4, 5)]),
    ("addmm", lambda c, a, b: torch.addmm(c, a, b), [(5,), (3, 4), (4, 5)]),
    ("addmm_beta_alpha", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=-2), [(3, 5), (3, 4), (4, 5)]),
    ("addmm_beta0", lambda c, a, b: torch.addmm(c, a, b, beta=0, alpha=3), [(3, 5), (3, 4), (4, 5)]),
    ("mv", torch.mv, [(3, 4), (4,)]),
    ("addmv", lambda c, a, b: torch.addmv(c, a, b, beta=2, alpha=0.5), [(3,), (3, 4), (4,)]),
    ("dot", torch.dot, [(7,), (7,)]),
    ("vdot", torch.vdot, [(7,), (7,)]),
    ("addbmm", lambda c, a, b: torch.addbmm(c, a, b, beta=0.5, alpha=2), [(3, 5), (2, 3, 4), (2, 4, 5)]),
    ("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2), [(2, 3, 5), (2, 3, 4), (2, 4, 5)]),
    ("addr", lambda c, a, b: torch.addr(c, a, b, beta=2, alpha=3), [(3, 4), (3,), (4,)]),
    ("outer", torch.outer, [(3,), (4,)]),
    ("matmul_1d_1d", torch.matmul, [(4,), (4,)]),
    ("matmul_1d_2d", torch.matmul, [(4,), (4, 5)]),
    ("matmul_2d_1d", torch.matmul, [(3, 4), (4,)]),
    ("matmul_3d_2d", torch.matmul, [(2, 3, 4), (4, 5)]),
    ("matmul_1d_3d", torch.matmul, [(4,), (2, 4, 5)]),
    ("matmul_4d_bcast", torch.matmul, [(2, 1, 3, 4), (3, 4, 5)]),
    ("matmul_4d_4d", torch.matmul, [(2, 3, 3, 4), (2, 3, 4, 5)]),
    ("linear", lambda x, w, b: F.linear(x, w, b), [(2, 3, 4), (5, 4), (5,)]),
    ("linear_nobias", lambda x, w: F.linear(x, w), [(3, 4), (5, 4)]),
    ("einsum", lambda a, b: torch.einsum("bij,bjk->bik", a, b), [(2, 3, 4), (2, 4, 5)]),
    ("einsum_trace_like", lambda a, b: torch.einsum("ij,kj->ik", a, b), [(3, 4), (5, 4)]),
    ("tensordot", lambda a, b: torch.tensordot(a, b, dims=([1, 2], [0, 1])), [(2, 3, 4), (3, 4, 5)]),
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name,fn,shapes", PRODUCTS, ids=[p[0] for p in PRODUCTS])
def test_products(name, fn, shapes, dtype):
    args = [rand_normal(s, dtype) for s in shapes]
    check(fn, *args, **tol(dtype, "linalg"))


@pytest.mark.parametrize("name,fn,shapes", PRODUCTS, ids=[p[0] for p in PRODUCTS])
def test_products_grad(name, fn, shapes):
    args = [rand_normal(s, torch.float32, grad=True) for s in shapes]
    check(fn, *args, grad=True, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name,fn,shapes", PRODUCTS, ids=[p[0] for p in PRODUCTS])
def test_products_noncontiguous(name, fn, shapes):
    args = [_nc(rand_normal(s, torch.float64, grad=True)) for s in shapes]
    check(fn, *args, grad=True, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("name", ["mm", "bmm", "addmm", "mv", "dot", "addbmm", "baddbmm", "addr", "matmul_3d_2d"])
def test_integer_products(name, dtype):
    _, fn, shapes = next(p for p in PRODUCTS if p[0] == name)
    if name.startswith("add") and dtype.is_floating_point is False:
        fn = {"addmm": lambda c, a, b: torch.addmm(c, a, b, beta=2, alpha=3),
              "addbmm": lambda c, a, b: torch.addbmm(c, a, b, beta=2, alpha=3),
              "baddbmm": lambda c, a, b: torch.baddbmm(c, a, b, beta=2, alpha=3),
              "addr": lambda c, a, b: torch.addr(c, a, b, beta=2, alpha=3)}[name]
    check(fn, *[rand_normal(s, dtype) for s in shapes])


def test_complex_products():
    a, b = rand_normal((3, 4), torch.complex64), rand_normal((4, 5), torch.complex64)
    check(torch.mm, a, b, atol=1e-4, rtol=1e-4)
    check(torch.vdot, rand_normal((6,), torch.complex128), rand_normal((6,), torch.complex128))
    check(torch.dot, rand_normal((6,), torch.complex128), rand_normal((6,), torch.complex128))


def test_addmm_beta0_ignores_nan():
    c = torch.full((3, 5), float("nan"))
    check(lambda c, a, b: torch.addmm(c, a, b, beta=0), c, rand_normal((3, 4), torch.float32), rand_normal((4, 5), torch.float32))


def test_addmm_inplace_and_out():
    def f(c, a, b):
        c.addmm_(a, b, alpha=2)
        return c

    check(f, rand_normal((3, 5), torch.float32), rand_normal((3, 4), torch.float32), rand_normal((4, 5), torch.float32), atol=1e-5, rtol=1e-5)

    def g(a, b, o):
        torch.mm(a, b, out=o)
        return o

    check(g, rand_normal((3, 4), torch.float32), rand_normal((4, 5), torch.float32), torch.empty(3, 5), atol=1e-5, rtol=1e-5)


def test_addmm_activation():
    c, a, b = rand_normal((5,), torch.float32), rand_normal((3, 4), torch.float32), rand_normal((4, 5), torch.float32)
    check(lambda c, a, b: torch._addmm_activation(c, a, b), c, a, b, atol=1e-5, rtol=1e-5)
    check(lambda c, a, b: torch._addmm_activation(c, a, b, beta=0.5, alpha=2, use_gelu=True), c, a, b,
          atol=1e-5, rtol=1e-5)


def test_mm_bf16_accumulates_in_fp32():
    # a long contraction: bf16 accumulation would be far off
    a = torch.randn(4, 4096).bfloat16()
    b = torch.randn(4096, 4).bfloat16()
    check(torch.mm, a, b, atol=0.1, rtol=1e-2)


def test_linear_module_train_step():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(6, 8, requires_grad=True)
    check(lambda x, w, b: F.linear(x, w, b).relu(), x, lin.weight.detach().clone().requires_grad_(),
          lin.bias.detach().clone().requires_grad_(), grad=True, atol=1e-5, rtol=1e-5)


def test_errors():
    import torchneuron  # noqa: F401
    a = torch.randn(3, 4, device="neuron")
    b = torch.randn(5, 6, device="neuron")
    with pytest.raises(RuntimeError, match="cannot be multiplied|same reduction dim"):
        torch.mm(a, b)
    with pytest.raises(RuntimeError):
        torch.bmm(a, b)
    with pytest.raises(RuntimeError, match="dtype|same|expected"):
        torch.mm(a, torch.randn(4, 5, device="neuron", dtype=torch.float64))  # checked in the lowering


@pytest.mark.parametrize("fn,shapes", [
    (torch.mm, [(3, 4), (4, 5)]),
    (torch.bmm, [(2, 3, 4), (2, 4, 5)]),
    (torch.mv, [(3, 4), (4,)]),
    (torch.dot, [(3,), (3,)]),
    (lambda c, a, b: torch.addmm(c, a, b), [(5,), (3, 4), (4, 5)]),
    (lambda c, a, b: torch.addbmm(c, a, b), [(3, 5), (2, 3, 4), (2, 4, 5)]),
    (lambda c, a, b: torch.baddbmm(c, a, b), [(2, 3, 5), (2, 3, 4), (2, 4, 5)]),
    (lambda c, a, b: torch.addmv(c, a, b), [(3,), (3, 4), (4,)]),
], ids=["mm", "bmm", "mv", "dot", "addmm", "addbmm", "baddbmm", "addmv"])
def test_dtype_mismatch_errors(fn, shapes):
    args = [torch.randn(s) for s in shapes]
    args[-1] = args[-1].double()
    # the device raises too (a PyTorch wording: CPU's, or the meta kernel's)
    msg = str(check_raises(fn, *args, exact=False, native=False))
    assert "dtype" in msg or "scalar type" in msg, msg


# ---------------------------------------------------------------- dense linear algebra
def _spd(n, batch=(), dtype=torch.float64):
    a = torch.randn(*batch, n, n, dtype=dtype)
    return a @ a.mH + n * torch.eye(n, dtype=dtype)


def _eye(n, like):
    return torch.eye(n, dtype=like.dtype, device=like.device)


def _svd_recon(a):
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    return u @ torch.diag_embed(s).to(u.dtype) @ vh


def _eigh_recon(a):
    w, v = torch.linalg.eigh(a)
    return (v * w[..., None, :].to(v.dtype)) @ v.mH


# (id, fn, arg factories); sign-ambiguous factorizations are checked through invariants
LINALG = [
    ("solve", lambda A, B: torch.linalg.solve(A, B), [(3, 4, 4), (3, 4, 2)]),
    ("solve_vec", lambda A, b: torch.linalg.solve(A, b), [(3, 4, 4), (3, 4)]),
    ("solve_bcast", lambda A, B: torch.linalg.solve(A, B), [(4, 4), (2, 4, 3)]),
    ("solve_right", lambda A, B: torch.linalg.solve(A, B, left=False), [(3, 4, 4), (3, 2, 4)]),
    ("inv", torch.linalg.inv, [(3, 4, 4)]),
    ("inv_ex", torch.linalg.inv_ex, [(4, 4)]),
    ("det", torch.linalg.det, [(3, 4, 4)]),
    ("det_2d", torch.linalg.det, [(5, 5)]),
    ("slogdet", torch.linalg.slogdet, [(3, 4, 4)]),
    ("logdet", torch.logdet, [("spd", 4, (2,))]),
    ("cholesky", torch.linalg.cholesky, [("spd", 4, (2,))]),
    ("cholesky_upper", lambda a: torch.linalg.cholesky(a, upper=True), [("spd", 4, ())]),
    ("cholesky_ex", torch.linalg.cholesky_ex, [("spd", 3, (2,))]),
    ("cholesky_solve", lambda L, B: torch.cholesky_solve(B, L), [("chol", 4, (3,)), (3, 4, 2)]),
    ("cholesky_solve_upper", lambda L, B: torch.cholesky_solve(B, L.mH, upper=True), [("chol", 4, ()), (4, 2)]),
    ("cholesky_inverse", torch.cholesky_inverse, [("chol", 4, ())]),
    ("qr", torch.linalg.qr, [(2, 5, 3)]),
    ("qr_wide", torch.linalg.qr, [(3, 5)]),
    ("qr_complete", lambda a: torch.linalg.qr(a, mode="complete"), [(5, 3)]),
    ("qr_r", lambda a: torch.linalg.qr(a, mode="r")[1], [(5, 3)]),
    ("svdvals", torch.linalg.svdvals, [(2, 5, 3)]),
    ("svd_recon", _svd_recon, [(2, 5, 3)]),
    ("svd_abs_u", lambda a: torch.linalg.svd(a, full_matrices=False)[0].abs(), [(4, 3)]),
    ("eigvalsh", torch.linalg.eigvalsh, [("spd", 4, (2,))]),
    ("eigvalsh_upper", lambda a: torch.linalg.eigvalsh(a, UPLO="U"), [("spd", 4, ())]),
    ("eigh_recon", _eigh_recon, [("spd", 4, (2,))]),
    ("lu_factor", torch.linalg.lu_factor, [(3, 4, 4)]),
    ("lu", torch.linalg.lu, [(3, 4, 4)]),
    ("lu_tall", torch.linalg.lu, [(5, 3)]),
    ("lu_wide", torch.linalg.lu, [(3, 5)]),
    ("lu_unpack", lambda A: torch.lu_unpack(*torch.linalg.lu_factor(A)), [(2, 4, 4)]),
    ("lu_solve", lambda A, B: torch.linalg.lu_solve(*torch.linalg.lu_factor(A), B), [(3, 4, 4), (3, 4, 2)]),
    ("lu_solve_adjoint", lambda A, B: torch.linalg.lu_solve(*torch.linalg.lu_factor(A), B, adjoint=True),
     [(3, 4, 4), (3, 4, 2)]),
    ("lu_solve_right", lambda A, B: torch.linalg.lu_solve(*torch.linalg.lu_factor(A), B, left=False),
     [(3, 4, 4), (3, 2, 4)]),
    ("solve_triangular", lambda A, B: torch.linalg.solve_triangular(A.triu() + 4 * _eye(4, A), B, upper=True),
     [(3, 4, 4), (3, 4, 2)]),
    ("solve_triangular_right_unit", lambda A, B: torch.linalg.solve_triangular(A.tril(), B, upper=False, left=False,
                                                                                unitriangular=True),
     [(3, 4, 4), (3, 2, 4)]),
    ("triangular_solve", lambda A, B: torch.triangular_solve(B, A.triu() + 4 * _eye(4, A), upper=True,
                                                             transpose=True), [(3, 4, 4), (3, 4, 2)]),
    ("matrix_exp", torch.linalg.matrix_exp, [(3, 4, 4)]),
    ("matrix_exp_2d", torch.linalg.matrix_exp, [(5, 5)]),
    ("pinv", torch.linalg.pinv, [(2, 5, 3)]),
    ("pinv_hermitian", lambda a: torch.linalg.pinv(a, hermitian=True), [("spd", 4, ())]),
    ("lstsq", lambda a, b: torch.linalg.lstsq(a, b).solution, [(2, 5, 3), (2, 5, 2)]),
    ("lstsq_full", lambda a, b: torch.linalg.lstsq(a, b), [(3, 5), (3, 2)]),
    ("lstsq_gelsd", lambda a, b: torch.linalg.lstsq(a, b, driver="gelsd"), [(2, 5, 3), (2, 5, 2)]),
    ("lstsq_gelss_vector", lambda a, b: torch.linalg.lstsq(a, b, driver="gelss"), [(5, 3), (5,)]),
    ("lstsq_gelsd_wide", lambda a, b: torch.linalg.lstsq(a, b, driver="gelsd"), [(3, 5), (3, 2)]),
    ("lstsq_gels", lambda a, b: torch.linalg.lstsq(a, b, driver="gels"), [(2, 6, 4), (2, 6, 3)]),
    ("geqrf", torch.geqrf, [(2, 5, 3)]),
    ("geqrf_wide", torch.geqrf, [(3, 5)]),
    ("householder_product", lambda a: torch.linalg.householder_product(*torch.geqrf(a)), [(2, 5, 3)]),
    ("householder_product_cols", lambda a, t: torch.linalg.householder_product(a, t), [(5, 4), (2,)]),
    ("ormqr", lambda a, c: torch.ormqr(*torch.geqrf(a), c), [(2, 5, 3), (2, 5, 4)]),
    ("ormqr_t", lambda a, c: torch.ormqr(*torch.geqrf(a), c, transpose=True), [(5, 3), (5, 2)]),
    ("ormqr_right", lambda a, c: torch.ormqr(*torch.geqrf(a), c, left=False), [(5, 3), (2, 5)]),
    ("ormqr_right_t", lambda a, c: torch.ormqr(*torch.geqrf(a), c, left=False, transpose=True),
     [(2, 4, 4), (2, 3, 4)]),
    ("matrix_norm_2", lambda a: torch.linalg.matrix_norm(a, 2), [(3, 4, 4)]),
    ("matrix_norm_nuc", lambda a: torch.linalg.matrix_norm(a, "nuc"), [(3, 4, 5)]),
    ("cond", torch.linalg.cond, [(3, 4, 4)]),
    ("matrix_power_neg", lambda a: torch.linalg.matrix_power(a, -2), [(3, 3)]),
]


# PyTorch refuses these derivatives (geqrf has none; ormqr/householder_product through geqrf)
NOT_DIFFERENTIABLE = {"qr_complete", "qr_r", "geqrf", "geqrf_wide", "householder_product", "ormqr",
                      "ormqr_t", "ormqr_right", "ormqr_right_t"}


def _make(spec, dtype, grad):
    if isinstance(spec[0], str):
        kind, n, batch = spec
        a = _spd(n, batch, dtype)
        if kind == "chol":
            a = torch.linalg.cholesky(a)
        return a.requires_grad_(grad)
    return torch.randn(spec, dtype=dtype).requires_grad_(grad)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("name,fn,specs", LINALG, ids=[c[0] for c in LINALG])
def test_dense_linalg(name, fn, specs, dtype):
    torch.manual_seed(1)
    grad = name not in NOT_DIFFERENTIABLE
    args = [_make(s, dtype, grad) for s in specs]
    tol = dict(atol=1e-8, rtol=1e-8) if dtype == torch.float64 else dict(atol=2e-3, rtol=2e-3)
    check(fn, *args, grad=grad, **tol)


@pytest.mark.parametrize("name", ["solve", "inv", "slogdet", "cholesky", "qr", "svdvals", "eigvalsh",
                                  "lu_solve", "matrix_exp", "geqrf", "householder_product", "ormqr_t",
                                  "ormqr_right"])
def test_dense_linalg_complex(name):
    _, fn, specs = next(c for c in LINALG if c[0] == name)
    torch.manual_seed(1)
    args = [_make(s, torch.complex128, False) for s in specs]
    if name == "slogdet":  # compare sign and log|det|; its gradient needs conj views (see limitations)
        check(fn, *args, atol=1e-8, rtol=1e-8)
        return
    check(fn, *args, atol=1e-8, rtol=1e-8)


def test_dense_linalg_noncontiguous():
    A = torch.randn(3, 3, 4, dtype=torch.float64).permute(2, 0, 1).requires_grad_()  # (4, 3, 3)
    B = torch.randn(2, 3, 3, dtype=torch.float64).transpose(1, 2).requires_grad_()
    check(lambda A, B: torch.linalg.solve(A[:2], B), A, B, grad=True, atol=1e-8, rtol=1e-8)
    check(lambda A: torch.linalg.det(A[::2]), A, grad=True, atol=1e-8, rtol=1e-8)


def test_dense_linalg_singular_and_errors():
    S = torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=torch.float64)
    check(torch.linalg.det, S)
    check(torch.linalg.inv_ex, torch.tensor([[1.0, 2.0], [2.0, 4.0]]), atol=float("inf"))  # info compared
    check(torch.linalg.lu_factor_ex, S)
    with pytest.raises(RuntimeError, match="singular"):
        torch.linalg.inv(S.to("neuron"))
    with pytest.raises(RuntimeError, match="positive-definite"):
        torch.linalg.cholesky(torch.tensor([[1.0, 2.0], [2.0, 1.0]], device="neuron"))
    check(torch.linalg.cholesky_ex, torch.tensor([[1.0, 2.0], [2.0, 1.0]]), atol=float("inf"))
    with pytest.raises(RuntimeError):
        torch.linalg.solve(torch.randn(3, 3, device="neuron"), torch.randn(4, 2, device="neuron"))


def test_dense_linalg_empty():
    check(torch.linalg.inv, torch.randn(0, 3, 3))
    check(torch.linalg.det, torch.randn(2, 0, 0))
    check(torch.linalg.solve, torch.randn(2, 3, 3), torch.randn(2, 3, 0))
    check(torch.linalg.cholesky, torch.randn(0, 0))


@pytest.mark.parametrize("shapes,dim", [(((4, 3, 5), (1, 3, 5)), 1), (((2, 3), (2, 3)), -1),
                                        (((3,), (3,)), 0), (((5, 3), (5, 3)), 1)])
def test_linalg_cross(shapes, dim):
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(s, generator=g) for s in shapes)
    with native_only():
        got = torch.linalg.cross(a.to(DEV), b.to(DEV), dim=dim)
        got_t = torch.cross(a.to(DEV).double(), b.to(DEV).double(), dim=dim)
    assert_same(got, torch.linalg.cross(a, b, dim=dim), atol=1e-6, rtol=1e-6)
    assert_same(got_t, torch.cross(a.double(), b.double(), dim=dim))


def test_lstsq_rank_deficient_residuals():
    # gelsd/gelss return residuals only when every matrix has full rank (a host read)
    A = torch.randn(2, 6, 3, dtype=torch.float64)
    A[1, :, 2] = A[1, :, 0]  # the second matrix has rank 2
    B = torch.randn(2, 6, 2, dtype=torch.float64)
    for driver in ("gelsd", "gelss", "gelsy"):
        check(lambda a, b: torch.linalg.lstsq(a, b, driver=driver), A, B, atol=1e-8, rtol=1e-8)
        check(lambda a, b: torch.linalg.lstsq(a, b, driver=driver), A[:1], B[:1], atol=1e-8, rtol=1e-8)
    check_raises(lambda a, b: torch.linalg.lstsq(a, b, driver="nope"), A, B, native=False)


def test_householder_product_grad():
    # the derivative of householder_product (A and tau as free inputs)
    a = torch.randn(5, 3, dtype=torch.float64).requires_grad_()
    tau = (torch.rand(3, dtype=torch.float64) + 0.5).requires_grad_()
    check(torch.linalg.householder_product, a, tau, grad=True, atol=1e-8, rtol=1e-8)
    c = torch.randn(5, 2, dtype=torch.float64).requires_grad_()
    check(lambda a, t, c: torch.ormqr(a, t, c), a, tau, c, grad=True, atol=1e-8, rtol=1e-8)


ONE_D_ROWS = {
    "cholesky": torch.linalg.cholesky,
    "cholesky_upper": lambda a: torch.linalg.cholesky(a, upper=True),
    "cholesky_ex": torch.linalg.cholesky_ex,
    "inv": torch.linalg.inv,
    "eigh": torch.linalg.eigh,
    "qr": torch.linalg.qr,
    "svd": torch.linalg.svd,
    "det": torch.linalg.det,
    "slogdet": torch.linalg.slogdet,
    "logdet": torch.logdet,
    "solve": lambda a: torch.linalg.solve(a, a),
}


@pytest.mark.parametrize("name", list(ONE_D_ROWS))
def test_one_d_input_raises_cpu_error(name):
    """A 1-D input raises CPU's RuntimeError ('linalg.cholesky: The input tensor A must
    have at least 2 dimensions.'); the Python meta kernels assert (AssertionError) and
    det's argument normalizer took .mT first."""
    check_raises(ONE_D_ROWS[name], torch.ones(3), exact=True)

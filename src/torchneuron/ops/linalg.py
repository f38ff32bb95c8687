"""Matrix products (mm, bmm, addmm, ...) and dense linear algebra (solve, inv, qr, svd, ...).

Products go straight to ``lax.dot_general``: float32 at HIGHEST precision (so a
GPU does not silently use TF32 and results match the CPU's fp32 BLAS), float16
and bfloat16 accumulated in float32 and rounded once (as PyTorch's CPU and CUDA
kernels do), integers in their own type.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ..numerics import cast, opmath, scalar_type_name
from ..lowering import lower, meta_kernel, out_dtype, out_meta

HIGHEST = lax.Precision.HIGHEST
def dot(a, b, contract, batch=((), ()), dt=None):
    """dot_general in the accumulation type of `dt` (default: a's dtype)."""
    dt = jnp.dtype(dt or a.dtype)
    acc = opmath(dt)
    a, b = cast(a, dt), cast(b, dt)
    prec = HIGHEST if jnp.issubdtype(dt, jnp.inexact) else None
    return lax.dot_general(a, b, (contract, batch), precision=prec, preferred_element_type=acc)


def _scaled(v, s, acc):
    """v * s where s is a Scalar (jax value or Python number); skips a multiply by 1."""
    if isinstance(s, (int, float, bool)) and not isinstance(s, bool) and s == 1:
        return v
    if acc == jnp.bool_:
        return v & cast(jnp.asarray(s), jnp.bool_)
    return v * cast(jnp.asarray(s), acc)


def _add_beta(prod, self, beta, alpha, dt):
    """beta * self + alpha * prod (self ignored when beta == 0, as PyTorch does)."""
    acc = prod.dtype
    r = _scaled(prod, alpha, acc)
    if isinstance(beta, (int, float)) and not isinstance(beta, bool) and beta == 0:
        return cast(jnp.broadcast_to(r, jnp.broadcast_shapes(r.shape, jnp.shape(self))), dt)
    s = cast(jnp.asarray(self), acc)
    sb = _scaled(s, beta, acc)
    if not isinstance(beta, (int, float)):  # dynamic: beta == 0 must drop nan/inf of self
        sb = jnp.where(jnp.asarray(beta) == 0, jnp.zeros_like(sb), sb)
    if acc == jnp.bool_:
        return cast(sb | r, dt)
    return cast(sb + r, dt)


def _same_dtype(msg, *xs):
    """PyTorch's CPU dtype checks that the meta kernels of these ops skip."""
    if len({jnp.dtype(x.dtype) for x in xs}) > 1:
        raise RuntimeError(msg.format(*[scalar_type_name(x.dtype) for x in xs]))


@lower("mm.default")
def mm(a, b):
    _same_dtype("expected m1 and m2 to have the same dtype, but got: {} != {}",
                a, b)
    return dot(a, b, ((1,), (0,)), dt=out_dtype())


@lower("mm.dtype")
def mm_dtype(a, b, out_dtype_):
    return cast(dot(a, b, ((1,), (0,))), out_dtype())


def _expected_scalar_type(a, b):
    if jnp.dtype(a.dtype) != jnp.dtype(b.dtype):
        raise RuntimeError(f"expected scalar type {scalar_type_name(a.dtype)} but found {scalar_type_name(b.dtype)}")


@lower("bmm.default")
def bmm(a, b):
    _expected_scalar_type(a, b)
    return dot(a, b, ((2,), (1,)), ((0,), (0,)), dt=out_dtype())


@lower("bmm.dtype")
def bmm_dtype(a, b, out_dtype_):
    return cast(dot(a, b, ((2,), (1,)), ((0,), (0,))), out_dtype())


@lower("addmm.default")
def addmm(self, m1, m2, *, beta=1, alpha=1):
    if hasattr(self, "dtype"):
        _same_dtype("self and mat2 must have the same dtype, but got {} and {}", self, m2)
    _same_dtype("self and mat2 must have the same dtype, but got {} and {}", m1, m2)
    dt = out_dtype()
    return _add_beta(dot(m1, m2, ((1,), (0,)), dt=dt), self, beta, alpha, dt)


@lower("addmm.dtype")
def addmm_dtype(self, m1, m2, out_dtype_, *, beta=1, alpha=1):
    dt = out_dtype()
    return _add_beta(cast(dot(m1, m2, ((1,), (0,))), opmath(dt)), self, beta, alpha, dt)


@lower("_addmm_activation.default")
def addmm_activation(self, m1, m2, *, beta=1, alpha=1, use_gelu=False):
    dt = out_dtype()
    r = _add_beta(dot(m1, m2, ((1,), (0,)), dt=dt), self, beta, alpha, dt)
    r = cast(r, opmath(dt))  # PyTorch rounds the addmm result, then activates
    if use_gelu:
        r = jax.nn.gelu(r, approximate=False)
    else:
        r = jnp.maximum(r, jnp.zeros_like(r))
    return cast(r, dt)


@lower("baddbmm.default")
def baddbmm(self, b1, b2, *, beta=1, alpha=1):
    dt = out_dtype()
    return _add_beta(dot(b1, b2, ((2,), (1,)), ((0,), (0,)), dt=dt), self, beta, alpha, dt)


@lower("baddbmm.dtype")
def baddbmm_dtype(self, b1, b2, out_dtype_, *, beta=1, alpha=1):
    dt = out_dtype()
    p = cast(dot(b1, b2, ((2,), (1,)), ((0,), (0,))), opmath(dt))
    return _add_beta(p, self, beta, alpha, dt)


@lower("addbmm.default")
def addbmm(self, b1, b2, *, beta=1, alpha=1):
    if hasattr(self, "dtype"):
        _same_dtype("self and mat2 must have the same dtype, but got {} and {}", self, b2)
    _same_dtype("self and mat2 must have the same dtype, but got {} and {}", b1, b2)
    dt = out_dtype()
    # contract the batch dimension too: one dot instead of bmm + sum
    return _add_beta(dot(b1, b2, ((0, 2), (0, 1)), dt=dt), self, beta, alpha, dt)


@lower("mv.default")
def mv(a, v):
    _same_dtype("addmv input tensors must have the same dtype, but got {}, {}, and {}",
                v, a, v)
    return dot(a, v, ((1,), (0,)), dt=out_dtype())


@lower("addmv.default")
def addmv(self, a, v, *, beta=1, alpha=1):
    _expected_scalar_type(a, v)
    dt = out_dtype()
    return _add_beta(dot(a, v, ((1,), (0,)), dt=dt), self, beta, alpha, dt)


@lower("dot.default")
def dot_(a, b):
    return dot(a, b, ((0,), (0,)), dt=out_dtype())


@lower("vdot.default")
def vdot(a, b):
    return dot(jnp.conj(a), b, ((0,), (0,)), dt=out_dtype())


@lower("addr.default")
def addr(self, v1, v2, *, beta=1, alpha=1):
    dt = out_dtype()
    acc = opmath(dt)
    if dt == jnp.bool_:
        prod = cast(v1, jnp.bool_)[:, None] & cast(v2, jnp.bool_)[None, :]
    else:
        prod = cast(v1, acc)[:, None] * cast(v2, acc)[None, :]
    return _add_beta(prod, self, beta, alpha, dt)


# ---------------------------------------------------------------- low-precision products
# FP8 `_scaled_mm` (tensor-wise and row-wise scales) and int8 `_int_mm`, computed as
# PyTorch's CPU kernel defines them: fp8 values widened to float32 and multiplied by
# their scales, one float32 product at HIGHEST precision, the bias added, fp8 results
# divided by `scale_result`, then rounded to the result type once.  XLA picks the
# hardware path (fp8 tensor cores on a GPU that has them) from the same program.
_FP8_OUT = None  # the two fp8 dtypes whose results CPU divides by scale_result


def _fp8_out_dtypes():
    global _FP8_OUT
    if _FP8_OUT is None:
        import torch

        _FP8_OUT = (torch.float8_e4m3fn, torch.float8_e5m2)
    return _FP8_OUT


def _is_float8(t):
    return t.dtype.is_floating_point and t.dtype.itemsize == 1


def _tensorwise(mat, scale):
    import torch

    return _is_float8(mat) and scale.dtype == torch.float32 and scale.numel() == 1


def _rowwise(mat, scale):
    import torch

    return (_is_float8(mat) and scale.dtype == torch.float32 and scale.dim() == 2
            and scale.size(0) == mat.size(0) and scale.size(1) == 1 and scale.is_contiguous())


def _scaled_mm_check(self, mat2, scale_a, scale_b, bias=None, scale_result=None,
                     out_dtype=None, use_fast_accum=False, *, out=None):
    """_scaled_mm_out_cpu's argument checks, in its order (the meta kernel checks only
    ranks and dtypes on devices other than cpu/cuda/xpu)."""
    import torch

    if out is not None and out_dtype is not None and out_dtype != out.dtype:
        raise ValueError("out_dtype must match output matrix type")
    if self.dim() != 2 or mat2.dim() != 2:
        return  # the meta kernel's error
    tensorwise = _tensorwise(self, scale_a) and _tensorwise(mat2.t(), scale_b.t())
    if not tensorwise and not (_rowwise(self, scale_a) and _rowwise(mat2.t(), scale_b.t())):
        raise ValueError(
            "Invalid scaling configuration.\n"
            "- For TensorWise scaling, a and b should be float8, scales should be float and "
            "singletons.\n"
            "- For RowWise scaling, a and b should be float8, scales should be float, scale_a "
            f"should be ({self.size(0)}, 1) and scale_b should be (1, {mat2.size(1)}), and both "
            "should be contiguous.\n"
            f"Got mat_a.dtype()={scalar_type_name(self.dtype)}, "
            f"scale_a.dtype()={scalar_type_name(scale_a.dtype)}, "
            f"scale_a.size()={list(scale_a.shape)}, scale_a.stride()={list(scale_a.stride())}, "
            f"mat_b.dtype()={scalar_type_name(mat2.dtype)}, "
            f"scale_b.dtype()={scalar_type_name(scale_b.dtype)}, "
            f"scale_b.size()={list(scale_b.shape)} and scale_b.stride()={list(scale_b.stride())}")
    if not tensorwise:
        for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
            if s.stride(1) != 1:
                raise ValueError(f"expected {name}.stride(1) to be 1, but got {s.stride(1)}")
    if self.size(1) != mat2.size(0):
        raise RuntimeError(
            f"mat_a and mat_b shapes cannot be multiplied ({self.size(0)}x{self.size(1)} and "
            f"{mat2.size(0)}x{mat2.size(1)})")
    if scale_result is not None and (scale_result.numel() != 1
                                     or scale_result.dtype != torch.float32):
        raise RuntimeError("scale_result must be a float scalar")
    if bias is not None:
        if bias.numel() != mat2.size(1):
            raise RuntimeError(f"Bias must be size {mat2.size(1)} but got {bias.numel()}")
        # CPU adds the bias in place into the float32 product: add_'s shape rule
        out_shape = torch.Size([self.size(0), mat2.size(1)])
        shape = torch._C._infer_size(out_shape, bias.shape)
        if shape != out_shape:
            raise RuntimeError(f"output with shape {list(out_shape)} doesn't match the "
                               f"broadcast shape {list(shape)}")


def _scaled_mm_meta(self, mat2, scale_a, scale_b, bias=None, scale_result=None,
                    out_dtype=None, use_fast_accum=False):
    """PyTorch's meta kernel without CUDA's layout rules (row-major a, column-major b,
    sizes divisible by 16), which it applies to every meta tensor: the CPU has none."""
    import torch

    if self.dim() != 2 or mat2.dim() != 2:
        raise RuntimeError(f"Inputs must be 2D but got self.dim()={self.dim()} and "
                           f"mat2.dim()={mat2.dim()}")
    if not (_is_float8(self) and _is_float8(mat2)):
        raise RuntimeError(f"Expected both inputs to be fp8 or fp4 types but got "
                           f"self.dtype={self.dtype} and mat2.dtype={mat2.dtype}")
    return torch.empty(self.size(0), mat2.size(1), dtype=out_dtype or self.dtype,
                       device=self.device)


@lower("_scaled_mm.default", check=_scaled_mm_check, device_meta=_scaled_mm_meta)
def scaled_mm(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
              use_fast_accum=False):
    f32 = jnp.dtype(jnp.float32)
    if scale_a.size == 1 and scale_b.size == 1:  # tensor-wise: one float each
        scale_a, scale_b = scale_a.reshape(()), scale_b.reshape(())
    else:  # row-wise: (M, 1) and (1, N)
        scale_a, scale_b = scale_a.reshape(-1, 1), scale_b.reshape(1, -1)
    a = cast(self, f32) * cast(scale_a, f32)
    b = cast(mat2, f32) * cast(scale_b, f32)
    r = lax.dot_general(a, b, (((1,), (0,)), ((), ())), precision=HIGHEST,
                        preferred_element_type=f32)
    if bias is not None:  # out_tmp.add_(bias): computed in the common type, kept float32
        bt = jnp.dtype(bias.dtype)
        acc = jnp.promote_types(f32, bt) if jnp.issubdtype(bt, jnp.floating) else f32
        r = cast(cast(r, acc) + cast(bias, acc), f32)
    if scale_result is not None and out_dtype in _fp8_out_dtypes():
        r = r * (jnp.asarray(1, f32) / cast(scale_result.reshape(()), f32))
    return r


@lower("_int_mm.default")
def int_mm(self, mat2):
    i32 = jnp.int32
    return lax.dot_general(cast(self, i32), cast(mat2, i32), (((1,), (0,)), ((), ())),
                           preferred_element_type=i32)


# ---------------------------------------------------------------- dense linear algebra
# jnp.linalg / lax.linalg (LAPACK on CPU, cuSOLVER on GPU).  Factorizations return
# PyTorch's conventions: LAPACK pivots (int32, 1-based), `info` computed on the
# device (first zero pivot / first non-positive minor).  Backward formulas are
# PyTorch's own (derivatives.yaml), built from these ops and products.
from jax import scipy as _jsp  # noqa: E402

_linalg = lax.linalg


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


def _mH(x):
    return jnp.conj(_mT(x)) if jnp.issubdtype(x.dtype, jnp.complexfloating) else _mT(x)


def _diag(x):
    return jnp.diagonal(x, axis1=-2, axis2=-1)


def _first_true(mask):
    """1-based index of the first True along the last axis, 0 if none (int32)."""
    n = mask.shape[-1]
    if n == 0:
        return jnp.zeros(mask.shape[:-1], jnp.int32)
    idx = jnp.argmax(mask, axis=-1).astype(jnp.int32) + 1
    return jnp.where(jnp.any(mask, axis=-1), idx, jnp.zeros_like(idx))


def _lu(A):
    """(LU, pivots 1-based int32, info int32) of a batch of matrices."""
    m, n = A.shape[-2:]
    if m == 0 or n == 0:
        return A, jnp.zeros(A.shape[:-2] + (min(m, n),), jnp.int32), \
            jnp.zeros(A.shape[:-2], jnp.int32)
    lu, piv, _ = _linalg.lu(A)
    info = _first_true(_diag(lu) == 0)
    return lu, piv.astype(jnp.int32) + 1, info


def _perm_from_pivots(piv, m):
    """Row permutation `perm` with (P^T A) = A[perm], from 1-based LAPACK pivots."""
    return _linalg.lu_pivots_to_permutation(piv.astype(jnp.int32) - 1, m)


def _take_rows(B, perm):
    return jnp.take_along_axis(B, jnp.broadcast_to(perm[..., :, None], perm.shape + (B.shape[-1],)),
                               axis=-2)


def _lu_solve(lu, piv, B, left=True, adjoint=False):
    """Solve A X = B (left) or X A = B with A = P L U given as (lu, piv); A^H if adjoint."""
    n = lu.shape[-1]
    batch = jnp.broadcast_shapes(lu.shape[:-2], B.shape[:-2])
    lu = jnp.broadcast_to(lu, batch + lu.shape[-2:])
    piv = jnp.broadcast_to(piv, batch + piv.shape[-1:])
    B = jnp.broadcast_to(B, batch + B.shape[-2:])
    if not left:  # X A = B  <=>  A^H X^H = B^H ;  X A^H = B  <=>  A X^H = B^H
        return _mH(_lu_solve(lu, piv, _mH(B), True, not adjoint))
    if n == 0 or B.shape[-1] == 0:
        return B
    perm = _perm_from_pivots(piv, n)
    if not adjoint:
        y = _linalg.triangular_solve(lu, _take_rows(B, perm), left_side=True, lower=True,
                                     unit_diagonal=True)
        return _linalg.triangular_solve(lu, y, left_side=True, lower=False)
    # A^H = U^H L^H P^T:  U^H z = B, L^H w = z, X = P w
    cplx = jnp.issubdtype(lu.dtype, jnp.complexfloating)
    z = _linalg.triangular_solve(lu, B, left_side=True, lower=False, transpose_a=True,
                                 conjugate_a=cplx)
    w = _linalg.triangular_solve(lu, z, left_side=True, lower=True, transpose_a=True,
                                 conjugate_a=cplx, unit_diagonal=True)
    inv = jnp.argsort(perm, axis=-1)
    return _take_rows(w, inv)


@lower("linalg_lu_factor_ex.default")
def linalg_lu_factor_ex(A, *, pivot=True, check_errors=False):
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    return _lu(A)


def _unpack(lu, piv, unpack_data=True, unpack_pivots=True):
    m, n = lu.shape[-2:]
    k = min(m, n)
    P = L = U = None
    if unpack_pivots:
        perm = _perm_from_pivots(piv, m) if m else jnp.zeros(piv.shape[:-1] + (0,), jnp.int32)
        # A = P L U with (P^T A) = A[perm]:  P[perm[j], j] = 1
        P = jnp.swapaxes(jax.nn.one_hot(perm, m, dtype=lu.dtype), -1, -2)
    if unpack_data:
        L = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=lu.dtype)
        U = jnp.triu(lu[..., :k, :])
    return P, L, U


@lower("lu_unpack.default")
def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    P, L, U = _unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)
    m = out_meta()
    return tuple(v if v is not None else jnp.zeros(tuple(mm.shape), out_dtype(i))
                 for i, (v, mm) in enumerate(zip((P, L, U), m)))


@lower("linalg_lu.default")
def linalg_lu(A, *, pivot=True):
    if not pivot:
        raise RuntimeError("linalg.lu: LU without pivoting is not implemented on the CPU")
    lu, piv, _ = _lu(A)
    return _unpack(lu, piv)


@lower("linalg_lu_solve.default")
def linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    return _lu_solve(LU, pivots, B, left, adjoint)


@lower("_linalg_solve_ex.default")
def linalg_solve_ex(A, B, *, left=True, check_errors=False):
    lu, piv, info = _lu(A)
    res_shape = tuple(out_meta()[0].shape)
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and res_shape == tuple(
        jnp.broadcast_shapes(A.shape[:-1], B.shape)))
    if vector and B.ndim != A.ndim:
        X = _lu_solve(lu, piv, B[..., :, None] if left else B[..., None, :], left)
        X = X[..., 0] if left else X[..., 0, :]
    else:
        X = _lu_solve(lu, piv, B, left)
    return X.reshape(res_shape), lu, piv, info


@lower("linalg_inv_ex.default")
def linalg_inv_ex(A, *, check_errors=False):
    lu, piv, info = _lu(A)
    n = A.shape[-1]
    eye = jnp.broadcast_to(jnp.eye(n, dtype=A.dtype), A.shape)
    return _lu_solve(lu, piv, eye), info


def _perm_sign(piv, dt):
    k = piv.shape[-1]
    swaps = jnp.sum(piv != jnp.arange(1, k + 1, dtype=piv.dtype), axis=-1)
    return jnp.where(swaps % 2 == 0, 1, -1).astype(dt)


# _linalg_det/_linalg_slogdet on CPU factor A^T when A is contiguous and real (det is
# the same) and their backward formulas solve with the LU accordingly: do the same.
def _transpose_contiguous_real(A):
    # (fewer than 2 dims: left for the meta kernel to refuse with CPU's message)
    if A.dim() >= 2 and A.is_contiguous() and not A.is_complex():
        A = A.mT
    return (A,), {}


@lower("_linalg_det.default", normalize=_transpose_contiguous_real)
def linalg_det(A):
    lu, piv, _ = _lu(A)
    det = _perm_sign(piv, A.dtype) * jnp.prod(_diag(lu), axis=-1)
    return det, lu, piv


@lower("_linalg_slogdet.default", normalize=_transpose_contiguous_real)
def linalg_slogdet(A):
    lu, piv, _ = _lu(A)
    d = _diag(lu)
    a = jnp.abs(d)
    if jnp.issubdtype(A.dtype, jnp.complexfloating):
        unit = jnp.where(a == 0, jnp.zeros_like(d), d / jnp.where(a == 0, 1, a).astype(d.dtype))
        sign = _perm_sign(piv, A.dtype) * jnp.prod(unit, axis=-1)
    else:
        sign = _perm_sign(piv, A.dtype) * jnp.prod(jnp.sign(d), axis=-1)
    logabs = jnp.sum(jnp.log(a), axis=-1)
    return sign, logabs, lu, piv


@lower("linalg_cholesky_ex.default")
def linalg_cholesky_ex(A, *, upper=False, check_errors=False):
    if A.shape[-1] == 0:
        return A, jnp.zeros(A.shape[:-2], jnp.int32)
    L = _linalg.cholesky(A, symmetrize_input=False)
    bad = ~jnp.isfinite(jnp.real(_diag(L)))
    info = _first_true(bad)
    L = jnp.where(jnp.any(bad, axis=-1)[..., None, None], jnp.tril(A), L)  # like LAPACK: no NaNs
    return (_mH(L) if upper else L), info


@lower("cholesky.default")
def cholesky(A, upper=False):
    L, _ = linalg_cholesky_ex(A, upper=upper)
    return L


def _chol_solve(L, B, upper):
    """A X = B for A = L L^H (lower) or U^H U (upper): two triangular solves."""
    cplx = jnp.issubdtype(L.dtype, jnp.complexfloating)
    if not upper:
        y = _linalg.triangular_solve(L, B, left_side=True, lower=True)
        return _linalg.triangular_solve(L, y, left_side=True, lower=True, transpose_a=True,
                                        conjugate_a=cplx)
    y = _linalg.triangular_solve(L, B, left_side=True, lower=False, transpose_a=True,
                                 conjugate_a=cplx)
    return _linalg.triangular_solve(L, y, left_side=True, lower=False)


@lower("cholesky_inverse.default")
def cholesky_inverse(L, upper=False):
    eye = jnp.broadcast_to(jnp.eye(L.shape[-1], dtype=L.dtype), L.shape)
    return _chol_solve(L, eye, upper)


@lower("_cholesky_solve_helper.default")
def cholesky_solve_helper(B, L, upper):
    batch = jnp.broadcast_shapes(B.shape[:-2], L.shape[:-2])
    B = jnp.broadcast_to(B, batch + B.shape[-2:])
    L = jnp.broadcast_to(L, batch + L.shape[-2:])
    return _chol_solve(L, B, upper)


@lower("linalg_solve_triangular.default")
def linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    batch = jnp.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    A = jnp.broadcast_to(A, batch + A.shape[-2:])
    B = jnp.broadcast_to(B, batch + B.shape[-2:])
    if 0 in B.shape:
        return B
    return _linalg.triangular_solve(A, B, left_side=left, lower=not upper,
                                    unit_diagonal=unitriangular)


@lower("triangular_solve.default")
def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    batch = jnp.broadcast_shapes(A.shape[:-2], b.shape[:-2])
    Ab = jnp.broadcast_to(A, batch + A.shape[-2:])
    bb = jnp.broadcast_to(b, batch + b.shape[-2:])
    if 0 in bb.shape:
        return bb, Ab
    x = _linalg.triangular_solve(Ab, bb, left_side=True, lower=not upper, transpose_a=transpose,
                                 unit_diagonal=unitriangular)
    return x, Ab


@lower("linalg_qr.default")
def linalg_qr(A, mode="reduced"):
    m, n = A.shape[-2:]
    if mode == "r":
        r = jnp.linalg.qr(A, mode="r") if m and n else jnp.zeros(tuple(out_meta()[1].shape), A.dtype)
        return jnp.zeros(tuple(out_meta()[0].shape), A.dtype), r
    if m == 0 or n == 0:
        return jnp.zeros(tuple(out_meta()[0].shape), A.dtype) + (
            jnp.eye(m, dtype=A.dtype) if mode == "complete" and m else 0), \
            jnp.zeros(tuple(out_meta()[1].shape), A.dtype)
    q, r = jnp.linalg.qr(A, mode="complete" if mode == "complete" else "reduced")
    return q, r


@lower("_linalg_svd.default")
def linalg_svd(A, full_matrices=False, compute_uv=True, *, driver=None):
    metas = out_meta()
    if 0 in A.shape:
        return tuple(jnp.zeros(tuple(mm.shape), out_dtype(i)) + (
            jnp.eye(mm.shape[-1], dtype=out_dtype(i)) if i != 1 and compute_uv and mm.ndim >= 2
            and mm.shape[-1] == mm.shape[-2] else 0) for i, mm in enumerate(metas))
    if not compute_uv:
        s = jnp.linalg.svd(A, compute_uv=False)
        return (jnp.zeros(tuple(metas[0].shape), A.dtype), s,
                jnp.zeros(tuple(metas[2].shape), A.dtype))
    u, s, vh = jnp.linalg.svd(A, full_matrices=full_matrices)
    return u, s, vh


@lower("_linalg_eigh.default")
def linalg_eigh(A, UPLO="L", compute_v=True):
    if A.shape[-1] == 0:
        return jnp.zeros(A.shape[:-1], jnp.real(A).dtype), A
    v, w = _linalg.eigh(A, lower=(UPLO.upper() == "L"), symmetrize_input=False)
    if not compute_v:
        return w, jnp.zeros(tuple(out_meta()[1].shape), A.dtype)
    return w, v


@lower("linalg_matrix_exp.default")
def linalg_matrix_exp(A):
    if A.shape[-1] == 0:
        return A
    flat = A.reshape((-1,) + A.shape[-2:])
    # float32/complex64 in double precision: the squaring phase amplifies rounding (seen 5x
    # CPU's error on a large-norm complex64 matrix against a complex128 reference)
    # (float16/bfloat16, which jax's expm refuses, in float32)
    wide = {jnp.dtype(jnp.float32): jnp.float64, jnp.dtype(jnp.complex64): jnp.complex128,
            jnp.dtype(jnp.float16): jnp.float32, jnp.dtype(jnp.bfloat16): jnp.float32}.get(
        jnp.dtype(flat.dtype))
    r = jax.vmap(_jsp.linalg.expm)(flat.astype(wide) if wide else flat)
    return r.astype(A.dtype).reshape(A.shape)


@lower("linalg_lstsq.default")
def linalg_lstsq(A, B, rcond=None, *, driver=None):
    metas = out_meta()
    vector = B.ndim == A.ndim - 1
    Bm = B[..., None] if vector else B
    batch = jnp.broadcast_shapes(A.shape[:-2], Bm.shape[:-2])
    Ab = jnp.broadcast_to(A, batch + A.shape[-2:])
    Bb = jnp.broadcast_to(Bm, batch + Bm.shape[-2:])
    m, n = A.shape[-2:]
    real = jnp.real(A).dtype
    if driver == "gels" and Ab.size and Bb.size:
        return _lstsq_qr(Ab, Bb, vector, metas)
    u, s, vh = jnp.linalg.svd(Ab, full_matrices=False)
    eps = jnp.finfo(real).eps
    rc = rcond if rcond is not None and rcond >= 0 else eps * max(m, n)
    smax = jnp.max(s, axis=-1, keepdims=True) if s.shape[-1] else jnp.zeros(s.shape[:-1] + (1,), real)
    keep = s > rc * smax
    sinv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0).astype(A.dtype)
    uhb = dot(_mH(u), Bb, ((u.ndim - 1,), (Bb.ndim - 2,)), (tuple(range(len(batch))),) * 2)
    X = dot(_mH(vh), sinv[..., :, None] * uhb, ((vh.ndim - 1,), (uhb.ndim - 2,)),
            (tuple(range(len(batch))),) * 2)
    rank = jnp.sum(keep, axis=-1).astype(jnp.int64)
    sol = X[..., 0] if vector else X
    res = jnp.zeros(tuple(metas[1].shape), real)
    if metas[1].numel() > 0:  # full-rank overdetermined: squared residual norms per column
        r = Bb - dot(Ab, X, ((Ab.ndim - 1,), (X.ndim - 2,)), (tuple(range(len(batch))),) * 2)
        res = jnp.sum(jnp.abs(r) ** 2, axis=-2).reshape(tuple(metas[1].shape))
    rank_o = rank.reshape(tuple(metas[2].shape)) if metas[2].numel() else \
        jnp.zeros(tuple(metas[2].shape), jnp.int64)
    sv = s.reshape(tuple(metas[3].shape)) if metas[3].numel() else \
        jnp.zeros(tuple(metas[3].shape), real)
    return sol.reshape(tuple(metas[0].shape)), res, rank_o, sv


# ---------------------------------------------------------------- Householder QR pieces
# LAPACK's geqrf / orgqr / ormqr through jax's primitives (LAPACK on XLA:CPU, cuSOLVER on
# CUDA): the same packed reflectors and tau as PyTorch's CPU kernels.
def _geqrf_impl(a):
    from jax._src.lax import linalg as _priv

    return _priv.geqrf(a)


def _geqrf_meta(A):
    # PyTorch has none; CPU returns `a` batched column-major, like LAPACK
    import torch

    if A.dim() < 2:
        raise RuntimeError("torch.geqrf: The input tensor A must have at least 2 dimensions.")
    m, n = A.shape[-2:]
    batch = tuple(A.shape[:-2])
    a = torch.empty(batch + (n, m), dtype=A.dtype, device=A.device).mT  # column-major
    return a, A.new_empty(batch + (min(m, n),))


meta_kernel("geqrf", _geqrf_meta)


@lower("geqrf.default")
def geqrf(A):
    if A.size == 0:
        k = min(A.shape[-2], A.shape[-1])
        return A, jnp.zeros(A.shape[:-2] + (k,), A.dtype)
    return _geqrf_impl(A)


@lower("linalg_householder_product.default")
def linalg_householder_product(A, tau):
    if A.size == 0 or tau.shape[-1] == 0:
        # no reflector: the first n columns of the identity
        m, n = A.shape[-2:]
        return jnp.broadcast_to(jnp.eye(m, n, dtype=A.dtype), A.shape)
    return _linalg.householder_product(A, tau)


@lower("ormqr.default")
def ormqr(A, tau, C, left=True, transpose=False):
    if C.size == 0:
        return C
    k = tau.shape[-1]
    if k == 0 or A.size == 0:
        return C
    batch = jnp.broadcast_shapes(A.shape[:-2], tau.shape[:-1], C.shape[:-2])
    A = jnp.broadcast_to(A[..., :, :k], batch + (A.shape[-2], k))
    tau = jnp.broadcast_to(tau, batch + (k,))
    C = jnp.broadcast_to(C, batch + C.shape[-2:])
    return _linalg.ormqr(A, tau, C, left=left, transpose=transpose)


def _lstsq_qr(A, B, vector, metas):
    """LAPACK's gels (full rank assumed): QR of A when m >= n, LQ (QR of A^H) when m < n."""
    m, n = A.shape[-2:]
    nb = A.ndim - 2
    bd = (tuple(range(nb)),) * 2
    if m >= n:
        q, r = jnp.linalg.qr(A, mode="reduced")
        qhb = dot(_mH(q), B, ((q.ndim - 1,), (B.ndim - 2,)), bd)
        X = _linalg.triangular_solve(r, qhb, left_side=True, lower=False)
    else:  # A = L Q with L = R^H from A^H = Q' R: X = Q'^... min-norm solution Q' R^-H B
        q, r = jnp.linalg.qr(_mH(A), mode="reduced")
        y = _linalg.triangular_solve(r, B, left_side=True, lower=False, transpose_a=True,
                                     conjugate_a=jnp.issubdtype(A.dtype, jnp.complexfloating))
        X = dot(q, y, ((q.ndim - 1,), (y.ndim - 2,)), bd)
    real = jnp.real(A).dtype
    res = jnp.zeros(tuple(metas[1].shape), real)
    if metas[1].numel() > 0:
        rr = B - dot(A, X, ((A.ndim - 1,), (X.ndim - 2,)), bd)
        res = jnp.sum(jnp.abs(rr) ** 2, axis=-2).reshape(tuple(metas[1].shape))
    sol = X[..., 0] if vector else X
    return (sol.reshape(tuple(metas[0].shape)), res, jnp.zeros(tuple(metas[2].shape), jnp.int64),
            jnp.zeros(tuple(metas[3].shape), real))


def _lstsq_meta(A, B, rcond=None, *, driver=None):
    """Output shapes of linalg_lstsq (PyTorch has no meta kernel).  gelsd/gelss compute
    residuals only when every matrix has full rank, a data-dependent shape: the meta
    shape assumes full rank and the eager kernel empties them otherwise."""
    import torch

    if driver not in (None, "gelsy", "gelsd", "gelss", "gels"):
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of (gels, "
                           "gelsy, gelsd, gelss)")
    vector = B.dim() == A.dim() - 1
    Bm = B.unsqueeze(-1) if vector else B
    batch = tuple(torch.broadcast_shapes(A.shape[:-2], Bm.shape[:-2]))
    m, n = A.shape[-2:]
    k = Bm.shape[-1]
    sol_shape = batch + ((n,) if vector else (n, k))
    real = A.real.dtype if A.is_complex() else A.dtype
    svd_driver = driver in ("gelsd", "gelss")
    res_shape = batch + (k,) if (m > n and driver in ("gelsd", "gelss", "gels")) else (0,)
    rank_shape = (0,) if driver == "gels" else batch
    sv_shape = batch + (min(m, n),) if svd_driver else (0,)
    return (A.new_empty(sol_shape), A.new_empty(res_shape, dtype=real),
            A.new_empty(rank_shape, dtype=torch.int64), A.new_empty(sv_shape, dtype=real))




# ---------------------------------------------------------------- cross product
@lower("linalg_cross.default", static=("dim",))
def linalg_cross(self, other, *, dim=-1):
    dt = out_dtype()
    a, b = jnp.broadcast_arrays(cast(self, dt), cast(other, dt))
    d = dim % a.ndim
    a0, a1, a2 = (lax.index_in_dim(a, i, d) for i in range(3))
    b0, b1, b2 = (lax.index_in_dim(b, i, d) for i in range(3))
    return jnp.concatenate([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=d)


meta_kernel("linalg_lstsq", _lstsq_meta, replace=True)

"""Sparse COO tensors on the device.

A sparse COO tensor on ``neuron`` is PyTorch's own ``SparseTensorImpl`` (dispatch key
SparsePrivateUse1) whose ``indices`` (int64, sparse_dim x nnz) and ``values`` (nnz x dense
dims) are ordinary device tensors.  Two kinds of kernels serve the key:

* metadata and allocation ops (creation from indices and values, ``_indices``, ``_nnz``,
  ``sparse_resize_``, ``zero_``, ...) redispatch to PyTorch's SparseMeta kernels: they only
  touch the impl's fields and call device ops on the two inner tensors, which land on our
  dense kernels;
* compute ops (``coalesce``, ``to_dense``, dense -> sparse, ``mm``/``addmm`` with a dense
  matrix, ``sparse_mask`` (their gradients), elementwise with scalars, zero-preserving unary
  ops, ``sum``, adding a sparse tensor to a dense one) are compositions of native dense ops
  (``unique``, ``index_add``, ``index_put`` with accumulation, ``nonzero``, gathers), so the
  same arithmetic runs on the device as everywhere else.

Compressed layouts (CSR, CSC, BSR, BSC; batched and with dense dimensions) get the same
kind of compute ops through their (batch, row, column, value) expansion; see the CSR
section.  Any other op on a sparse device tensor
raises NotImplementedError naming the op and the layout: PyTorch's own for the
'SparsePrivateUse1' / 'SparseCsrPrivateUse1' backends, or ours for argument combinations a
kernel here does not cover (docs/limitations.md lists what is covered).
"""
from __future__ import annotations

import math

import torch
from torch._C import DispatchKey, DispatchKeySet

from .. import dispatch
from ..dispatch import kernel

aten = torch.ops.aten
KEY = "SparsePrivateUse1"
_SPARSE_META = DispatchKeySet(DispatchKey.SparseMeta)


# ---------------------------------------------------------------- metadata (SparseMeta)
_META_OPS = [
    "_sparse_coo_tensor_with_dims.default", "_sparse_coo_tensor_with_dims_and_tensors.default",
    "_indices.default", "_values.default", "indices.default", "values.default",
    "_nnz.default", "sparse_dim.default", "dense_dim.default", "_dimV.default",
    "is_coalesced.default", "_coalesced_.default", "sparse_resize_.default",
    "sparse_resize_and_clear_.default", "empty.memory_format", "empty_like.default",
    "zero_.default", "zeros.out", "copy_sparse_to_sparse_.default",
]
dispatch.redispatch(_META_OPS, _SPARSE_META, KEY)


@kernel("_dimI.default", key=KEY)
def _dim_i(self):
    return self.sparse_dim()


# ---------------------------------------------------------------- helpers
def _make(sparse_dim, dense_dim, size, indices, values, coalesced):
    return aten._sparse_coo_tensor_with_dims_and_tensors(
        sparse_dim, dense_dim, list(size), indices, values, dtype=values.dtype,
        layout=torch.sparse_coo, device=values.device, is_coalesced=coalesced)


def _like(self, values, coalesced=None):
    """`self`'s indices with new values."""
    return _make(self.sparse_dim(), self.dense_dim(), self.shape, self._indices(), values,
                 self.is_coalesced() if coalesced is None else coalesced)


def _unsupported(op, *args):
    kinds = ", ".join(
        f"{a.layout} {a.device.type} tensor" if isinstance(a, torch.Tensor) else type(a).__name__
        for a in args)
    raise NotImplementedError(
        f"Could not run '{op}' with arguments ({kinds}) on the neuron device: torchneuron "
        f"supports sparse COO and CSR tensors for the ops listed in docs/limitations.md")


def _strides(size, sparse_dim):
    out, acc = [], 1
    for s in reversed(size[:sparse_dim]):
        out.append(acc)
        acc *= s
    return out[::-1]


def _is_scalar(x):
    return not isinstance(x, torch.Tensor) or (x.dim() == 0 and x.layout == torch.strided)


# ---------------------------------------------------------------- coalesce, clone, copy
@kernel("_coalesce.default", key=KEY)
def _coalesce(self):
    sd, dd = self.sparse_dim(), self.dense_dim()
    idx, vals = self._indices(), self._values()
    if self._nnz() == 0 or sd == 0 and self._nnz() == 1:
        return _make(sd, dd, self.shape, idx.clone(), vals.clone(), True)
    if sd == 0:  # every entry sits at the same (empty) index
        return _make(sd, dd, self.shape, idx[:, :1].clone(), vals.sum(0, keepdim=True), True)
    strides = torch.tensor(_strides(list(self.shape), sd), dtype=torch.int64, device=idx.device)
    lin = (idx * strides[:, None]).sum(0)
    uniq, inv = torch.unique(lin, sorted=True, return_inverse=True)
    new_vals = vals.new_zeros((uniq.shape[0],) + tuple(vals.shape[1:])).index_add_(0, inv, vals)
    sizes = torch.tensor(list(self.shape[:sd]), dtype=torch.int64, device=idx.device)
    new_idx = (uniq[None, :] // strides[:, None]) % sizes[:, None]
    return _make(sd, dd, self.shape, new_idx, new_vals, True)


@kernel("clone.default", key=KEY)
def clone(self, *, memory_format=None):
    if memory_format not in (None, torch.preserve_format):
        raise RuntimeError(
            f"unsupported memory format option {memory_format} for a sparse tensor")
    return _make(self.sparse_dim(), self.dense_dim(), self.shape, self._indices().clone(),
                 self._values().clone(), self.is_coalesced())


@kernel("copy_.default", key=KEY)
def copy_(self, src, non_blocking=False):
    if self.layout != torch.sparse_coo or src.layout != torch.sparse_coo:
        _unsupported("aten::copy_", self, src)
    return aten.copy_sparse_to_sparse_(self, src, non_blocking)


# ---------------------------------------------------------------- sparse <-> dense
@kernel("_to_dense.default", key=KEY)
def _to_dense(self, dtype=None, masked_grad=None):
    if dtype is not None and dtype != self.dtype:
        raise RuntimeError("dtype argument is not supported by sparse_csr_to_dense")
    out = self._values().new_zeros(self.shape)
    if self._nnz():
        out.index_put_(tuple(self._indices()), self._values(), accumulate=True)
    return out


def _dense_to_coo(self, sparse_dim):
    if not 0 <= sparse_dim <= self.dim():
        raise RuntimeError(f"dense_to_sparse: sparse_dim argument must be in "
                           f"[0,{self.dim()}] range, but "
                           f"{sparse_dim} is given")
    if sparse_dim == 0:
        idx = torch.zeros((0, 1), dtype=torch.int64, device=self.device)
        return _make(0, self.dim(), self.shape, idx, self.unsqueeze(0).clone(), True)
    mask = self != 0
    if self.dim() > sparse_dim:
        mask = mask.flatten(sparse_dim).any(-1)
    idx = mask.nonzero().t().contiguous()
    vals = self[tuple(idx)]
    return _make(sparse_dim, self.dim() - sparse_dim, self.shape, idx, vals, True)


@kernel("_to_sparse.sparse_dim")
def _to_sparse_dim(self, sparse_dim):
    return _dense_to_coo(self, sparse_dim)


@kernel("_to_sparse.default")
def _to_sparse(self, *, layout=None, blocksize=None, dense_dim=None):
    if layout == torch.sparse_csr and blocksize is None:
        return _to_sparse_csr(self, dense_dim)
    if layout == torch.sparse_csc and blocksize is None:
        return _to_sparse_csc(self, dense_dim)
    if layout in _BLOCKED and blocksize is not None:
        return _dense_to_blocked(self, tuple(blocksize), dense_dim, layout)
    if layout not in (None, torch.sparse_coo):
        raise NotImplementedError(
            f"torchneuron: conversion of a strided neuron tensor to {layout} is not supported "
            f"(sparse COO, CSR and, with a blocksize, BSR/BSC are; docs/limitations.md)")
    if blocksize is not None:
        raise RuntimeError("to_sparse for Strided to SparseCoo conversion does not use "
                           "specified blocksize")
    return _dense_to_coo(self, self.dim() - (dense_dim or 0))


@kernel("sparse_mask.default", key=KEY)
def sparse_mask(self, mask):
    if mask.layout != torch.sparse_coo or self.layout != torch.strided:
        _unsupported("aten::sparse_mask", self, mask)
    if tuple(self.shape) != tuple(mask.shape):
        raise RuntimeError("sparse_mask(): operands have incompatible sizes; self has size "
                           f"{list(self.shape)} but mask has size {list(mask.shape)}")
    idx = mask._indices()
    vals = self[tuple(idx)] if mask._nnz() else self.new_zeros(
        (0,) + tuple(self.shape[mask.sparse_dim():]))
    return _make(mask.sparse_dim(), mask.dense_dim(), mask.shape, idx.clone(), vals,
                 mask.is_coalesced())


# ---------------------------------------------------------------- matrix products
def _check_2d(name, s):
    if s.dim() != 2:
        raise RuntimeError(f"{name} must be a matrix, got {s.dim()}-D tensor")
    if s.layout == torch.sparse_coo and s.dense_dim() != 0:
        _unsupported("aten::mm", s)


def _scalar_name(dtype):
    """PyTorch's C++ name of a dtype (torch.float32 -> Float)."""
    return torch.empty((), dtype=dtype, device="meta").type().split(".")[-1].replace(
        "Tensor", "")


def _triples(s):
    """(row, column, value) of each stored value of a sparse matrix: COO (in any order),
    CSR or CSC."""
    if s.layout == torch.sparse_coo:
        idx = s._indices()
        return idx[0], idx[1], s._values()
    return _csr_triples(s)


def _mm(a, b):
    """A sparse matrix (COO, CSR or CSC) times a dense one, either side: a scatter-add of
    value-scaled rows of the dense matrix."""
    _check_2d("mat1", a)
    _check_2d("mat2", b)
    # PyTorch's CPU messages: COO products run as addmm(dense, sparse, dense) (with a
    # transposed product for dense @ sparse), compressed ones check mat1 against mat2
    if a.layout == torch.sparse_coo or b.layout == torch.sparse_coo:
        sparse_first = a.layout == torch.sparse_coo
        if a.shape[1] != b.shape[0]:
            want, got = (a.shape[1], b.shape[0]) if sparse_first else (b.shape[0], a.shape[1])
            raise RuntimeError(f"addmm: Argument #3 (dense): Expected dim 0 size {want}, "
                               f"got {got}")
        if a.dtype != b.dtype:
            want, got = (a.dtype, b.dtype) if sparse_first else (b.dtype, a.dtype)
            raise RuntimeError(f"expected scalar type {_scalar_name(want)} but found "
                               f"{_scalar_name(got)}")
    else:
        if a.shape[1] != b.shape[0]:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x"
                               f"{a.shape[1]} and {b.shape[0]}x{b.shape[1]})")
        if a.dtype != b.dtype:
            both = a.layout in _COMPRESSED and b.layout in _COMPRESSED
            want, got = (b.dtype, a.dtype) if both else (a.dtype, b.dtype)
            raise RuntimeError(f"expected scalar type {_scalar_name(want)} but found "
                               f"{_scalar_name(got)}")
        if a.layout in _COMPRESSED and b.layout in _COMPRESSED:
            return _compressed_matmul(a, b)
    if a.layout in _BLOCKED or b.layout in _BLOCKED:
        return _blocked_mm(a, b)
    if a.layout != torch.strided and b.layout == torch.strided:
        rows, cols, vals = _triples(a)
        out = b.new_zeros((a.shape[0], b.shape[1]))
        return out.index_add_(0, rows, vals[:, None] * b[cols]) if vals.numel() else out
    if b.layout != torch.strided and a.layout == torch.strided:
        rows, cols, vals = _triples(b)
        out = a.new_zeros((b.shape[1], a.shape[0]))
        return (out.index_add_(0, cols, vals[:, None] * a.t()[rows]) if vals.numel()
                else out).t()
    _unsupported("aten::mm", a, b)


def _blocked_mm(a, b):
    """BSR/BSC @ dense or dense @ BSR/BSC: one small matrix product per stored block
    (torch.bmm), summed into its block row (column) of the result."""
    sparse_first = a.layout in _BLOCKED
    s, d = (a, b) if sparse_first else (b, a)
    if d.layout != torch.strided or s.dense_dim():
        _unsupported("aten::mm", a, b)
    _, rows, cols, vals, _ = _compressed_parts(s)
    br, bc = vals.shape[1:3]
    if sparse_first:  # (R, C) @ (C, N): block (i, j) times rows j of d, into rows i
        n = d.shape[1]
        contrib = torch.bmm(vals, d.reshape(-1, bc, n)[cols])
        out = d.new_zeros((s.shape[0] // br, br, n))
        return (out.index_add_(0, rows, contrib) if vals.shape[0] else out).reshape(-1, n)
    m = d.shape[0]  # (M, R) @ (R, C): columns i of d times block (i, j), into columns j
    contrib = torch.bmm(d.reshape(m, -1, br).transpose(0, 1)[rows], vals)
    out = d.new_zeros((s.shape[1] // bc, m, bc))
    if vals.shape[0]:
        out.index_add_(0, cols, contrib)
    return out.transpose(0, 1).reshape(m, -1)


def _compressed_matmul(a, b):
    """CSR/CSC @ CSR/CSC -> CSR, as PyTorch's CPU: a value is stored wherever the two
    matrices' stored positions meet (an exact zero sum included).  Every stored (i, j) of
    `a` meets the stored (j, l) of `b`'s row j: those products are enumerated (their count
    read back once), then summed per (i, l).  Time and memory follow the number of
    products, not the matrices' sizes."""
    if a.dtype.is_floating_point is False and not a.dtype.is_complex:
        raise NotImplementedError('"addmm_out_sparse_csr_impl_mkl_sparse" not implemented '
                                  f"for '{_scalar_name(a.dtype)}'")
    (m, k), n = a.shape, b.shape[1]
    ra, ca, va = (x.long() if i < 2 else x for i, x in enumerate(_csr_triples(a)))
    rb, cb, vb = (x.long() if i < 2 else x for i, x in enumerate(_csr_triples(b)))
    order = torch.argsort(rb * n + cb)  # b's stored values in row order (a CSC's are not)
    rb, cb, vb = rb[order], cb[order], vb[order]
    starts = _compress(rb, k)
    first, count = starts[ca], starts[ca + 1] - starts[ca]  # b's row ca[e], for each e of a
    ends = torch.cumsum(count, 0)
    total = int(ends[-1]) if ends.numel() else 0
    if total == 0:
        empty = torch.zeros(0, dtype=torch.int64, device=va.device)
        return _csr_from_rows(empty, empty, va.new_zeros(0), (m, n))
    p = torch.arange(total, dtype=torch.int64, device=va.device)
    e = torch.searchsorted(ends, p, right=True)  # the stored value of a in product p
    jb = first[e] + p - (ends[e] - count[e])  # ... and the one of b
    key, inverse = torch.unique(ra[e] * n + cb[jb], sorted=True, return_inverse=True)
    vals = va.new_zeros(key.shape[0]).index_add_(0, inverse, va[e] * vb[jb])
    return _csr_from_rows(key // n, key % n, vals, (m, n))


@kernel("mm.default", key=KEY)
def mm(self, mat2):
    return _mm(self, mat2)


@kernel("addmm.default", key=KEY)
def addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """beta * self + alpha * (mat1 @ mat2) for a dense `self`; beta=0 ignores `self` (NaN
    included), as PyTorch does."""
    if self.layout == torch.sparse_csr and mat1.layout in _COMPRESSED \
            and mat2.layout in _COMPRESSED:  # torch.sparse.mm(csr, csr) comes this way
        prod = _mm(mat1, mat2)
        out = prod if alpha == 1 else _csr_like(prod, prod.values() * alpha)
        return out if beta == 0 else _csr_add_csr(out, self, beta)
    if self.layout != torch.strided:
        _unsupported("aten::addmm", self, mat1, mat2)
    prod = _mm(mat1, mat2)
    out = prod if alpha == 1 else prod * alpha
    if beta == 0:
        return out
    base = self.expand(out.shape)
    return out + (base if beta == 1 else base * beta)


# ---------------------------------------------------------------- elementwise
@kernel("mul.Tensor", key=KEY)
def mul(self, other):
    if self.layout != torch.sparse_coo:
        self, other = other, self
    if _is_scalar(other):
        return _like(self, self._values() * other)
    if other.layout == torch.strided and tuple(other.shape) == tuple(self.shape) \
            and self.dense_dim() == 0:
        return _like(self, self._values() * other[tuple(self._indices())])
    _unsupported("aten::mul.Tensor", self, other)


@kernel("mul_.Tensor", key=KEY)
def mul_(self, other):
    if self.layout != torch.sparse_coo or not _is_scalar(other):
        _unsupported("aten::mul_.Tensor", self, other)
    self._values().mul_(other)
    return self


@kernel("mul.out", key=KEY)
def mul_out(self, other, *, out):
    """The per-tensor step of ``torch._foreach_mul_`` on sparse tensors (SGD's momentum
    buffers when the gradients are sparse)."""
    if not isinstance(self, torch.Tensor) or self.layout != torch.sparse_coo:
        self, other = other, self  # the scalar can come first (a wrapped number)
    if out.layout != torch.sparse_coo or not isinstance(self, torch.Tensor) \
            or self.layout != torch.sparse_coo:
        _unsupported("aten::mul.out", self, other)
    res = mul(self, other)
    if res.dtype != out.dtype:
        res = _like(res, res._values().to(out.dtype))
    return aten.copy_sparse_to_sparse_(out, res, False)


@kernel("div.Tensor", key=KEY)
def div(self, other):
    if self.layout != torch.sparse_coo or not _is_scalar(other):
        _unsupported("aten::div.Tensor", self, other)
    return _like(self, self._values() / other)


@kernel("div.Tensor_mode", key=KEY)
def div_mode(self, other, *, rounding_mode=None):
    if self.layout != torch.sparse_coo or not _is_scalar(other):
        _unsupported("aten::div.Tensor_mode", self, other)
    if rounding_mode is None:
        return _like(self, self._values() / other)
    c = self if self.is_coalesced() else self.coalesce()  # rounding is not linear
    return _like(c, torch.div(c._values(), other, rounding_mode=rounding_mode), True)


def _add_dense_sparse(dense, sparse, alpha, out=None):
    vals = sparse._values() if alpha == 1 else sparse._values() * alpha
    res = dense.to(torch.result_type(dense, sparse._values())).clone() if out is None else out
    if sparse._nnz():
        res.index_put_(tuple(sparse._indices()), vals.to(res.dtype), accumulate=True)
    return res


@kernel("add.Tensor", key=KEY)
def add(self, other, *, alpha=1):
    if not isinstance(other, torch.Tensor) or tuple(self.shape) != tuple(other.shape):
        _unsupported("aten::add.Tensor", self, other)
    ss, so = self.layout == torch.sparse_coo, other.layout == torch.sparse_coo
    if not ss and so:
        return _add_dense_sparse(self, other, alpha)
    if ss and so and self.sparse_dim() == other.sparse_dim():
        ov = other._values() if alpha == 1 else other._values() * alpha
        dtype = torch.result_type(self._values(), other._values())
        idx = torch.cat([self._indices(), other._indices()], 1)
        vals = torch.cat([self._values().to(dtype), ov.to(dtype)], 0)
        return _make(self.sparse_dim(), self.dense_dim(), self.shape, idx, vals, False)
    _unsupported("aten::add.Tensor", self, other)


@kernel("add_.Tensor", key=KEY)
def add_(self, other, *, alpha=1):
    if self.layout == torch.strided and other.layout == torch.sparse_coo \
            and tuple(self.shape) == tuple(other.shape):
        if torch.result_type(self, other._values()) != self.dtype and not (
                self.dtype.is_floating_point and other.dtype.is_floating_point):
            raise RuntimeError(f"result type {torch.result_type(self, other._values())} "
                               f"can't be cast to the desired output type {self.dtype}")
        return _add_dense_sparse(self, other, alpha, out=self)
    if self.layout == torch.sparse_coo and isinstance(other, torch.Tensor) \
            and other.layout == torch.sparse_coo:  # e.g. SGD's momentum buffer of sparse grads
        res = add(self, other, alpha=alpha)
        if res.dtype != self.dtype:
            if not (self.dtype.is_floating_point or self.dtype.is_complex) and \
                    (res.dtype.is_floating_point or res.dtype.is_complex):
                raise RuntimeError(f"result type {res.dtype} can't be cast to the desired output "
                                   f"type {self.dtype}")
            res = _like(res, res._values().to(self.dtype))
        return aten.copy_sparse_to_sparse_(self, res, False)
    _unsupported("aten::add_.Tensor", self, other)


@kernel("sub.Tensor", key=KEY)
def sub(self, other, *, alpha=1):
    return add(self, other, alpha=-alpha)


@kernel("neg.default", key=KEY)
def neg(self):
    return _like(self, -self._values())


# zero-preserving unary functions: f(sum of duplicates), so coalesce first (as PyTorch does)
_UNARY = ["abs", "sin", "sinh", "tan", "tanh", "asin", "asinh", "atan", "atanh", "sqrt",
          "expm1", "log1p", "ceil", "floor", "round", "trunc", "frac", "sign", "sgn", "erf",
          "erfinv", "deg2rad", "rad2deg", "relu", "signbit", "isnan", "isinf", "isposinf",
          "isneginf"]


def _unary(fn):
    def k(self):
        c = self if self.is_coalesced() else self.coalesce()
        return _like(c, fn(c._values()), True)

    return k


for _name in _UNARY:
    kernel(f"{_name}.default", key=KEY)(_unary(getattr(torch, _name)))


@kernel("pow.Tensor_Scalar", key=KEY)
def pow_scalar(self, exponent):
    if not (isinstance(exponent, (int, float)) and exponent > 0):
        raise ValueError(f"pow(sparse, {exponent}): the exponent must be a positive scalar "
                         "(a sparse tensor keeps its zeros)")
    return _unary(lambda v: torch.pow(v, exponent))(self)


# ---------------------------------------------------------------- reductions
@kernel("sum.default", key=KEY)
def sum_(self, *, dtype=None):
    return self._values().sum(dtype=dtype)


@kernel("sum.dim_IntList", key=KEY)
def sum_dim(self, dim, keepdim=False, *, dtype=None):
    if keepdim:
        raise RuntimeError("sum on sparse tensors doesn't support keepdim=True")
    dims = dim if dim is not None else list(range(self.dim()))
    r = torch._sparse_sum(self, dims) if len(dims) else self
    if dtype is not None:
        r = r.to(dtype)
    return r


@kernel("_sparse_sum_backward.default", key=KEY)
def _sparse_sum_backward(grad, self, dim):
    dims = {d % self.dim() for d in dim}
    idx = self._indices()
    g = grad.to_dense() if grad.layout == torch.sparse_coo else grad
    # the gradient of each stored value: the output gradient at its kept coordinates
    g_full = g
    for d in sorted(dims):
        g_full = g_full.unsqueeze(d)
    g_full = g_full.expand(self.shape)
    sel = g_full[tuple(idx)] if self._nnz() else g_full.new_zeros((0,) + tuple(
        self.shape[self.sparse_dim():]))
    return _make(self.sparse_dim(), self.dense_dim(), self.shape, idx.clone(), sel,
                 self.is_coalesced())



# ---------------------------------------------------------------- CSR
# A compressed tensor (CSR, CSC, BSR, BSC) on the device is PyTorch's SparseCsrTensorImpl (key
# SparseCsrPrivateUse1) over device compressed / plain indices and values; its constructor is
# composite.  Conversions and products are computed here (products of 2-D matrices; batched
# and dense dimensions through _compressed_parts); accessors, clone/copy, values-only unary
# ops and sums redispatch to PyTorch's SparseCsrMeta kernels (device-generic code).
CSR_KEY = "SparseCsrPrivateUse1"
_SPARSE_CSR_META = DispatchKeySet(DispatchKey.SparseCsrMeta)

_CSR_META_OPS = [
    "crow_indices.default", "col_indices.default", "ccol_indices.default",
    "row_indices.default", "values.default", "_nnz.default", "sparse_dim.default",
    "dense_dim.default", "empty.memory_format", "empty_like.default", "resize_.default",
    "clone.default", "copy_.default", "zero_.default", "sum.default",
] + [f"{n}.default" for n in _UNARY if n not in ("isnan", "isinf", "isposinf", "isneginf",
                                                    "signbit", "sign", "sgn", "relu")]


dispatch.redispatch(_CSR_META_OPS, _SPARSE_CSR_META, CSR_KEY)


def _csr_plain(s, what):
    if s.layout not in _COMPRESSED or s.dim() != 2 or s.dense_dim() != 0:
        raise NotImplementedError(
            f"torchneuron: {what} supports 2-D sparse_csr/csc matrices without batch or dense "
            f"dimensions on the neuron device; got a {s.dim()}-D {s.layout} tensor "
            f"(docs/limitations.md)")


_COMPRESSED = (torch.sparse_csr, torch.sparse_csc)
_BLOCKED = (torch.sparse_bsr, torch.sparse_bsc)
_ALL_COMPRESSED = _COMPRESSED + _BLOCKED
_ROW_COMPRESSED = (torch.sparse_csr, torch.sparse_bsr)


def _outer_indices(comp, nnz):
    """Compressed indices (batches, n + 1) expanded: the outer index (row of a CSR, column of
    a CSC) of each of the `nnz` stored positions of every batch, (batches, nnz)."""
    pos = torch.arange(nnz, dtype=comp.dtype, device=comp.device).expand(comp.shape[0], nnz)
    return torch.searchsorted(comp[:, 1:].contiguous(), pos.contiguous(), right=True)


def _compress(outer, n):
    """Outer indices (..., nnz), sorted along the last dimension, compressed: where each of
    the n outer indices starts, (..., n + 1) (the inverse of _outer_indices)."""
    bounds = torch.arange(n + 1, dtype=outer.dtype, device=outer.device)
    return torch.searchsorted(outer.contiguous(),
                              bounds.expand(*outer.shape[:-1], n + 1).contiguous())


def _csr_from_rows(rows, cols, vals, size):
    """A CSR tensor from row-major sorted (row, col, value) triples."""
    crow = _compress(rows, size[0])
    return torch.sparse_csr_tensor(crow, cols, vals, tuple(size), dtype=vals.dtype,
                                   device=vals.device)


def _compressed(s):
    """(compressed indices, plain indices) of a CSR or CSC tensor."""
    if s.layout in _ROW_COMPRESSED:
        return s.crow_indices(), s.col_indices()
    return s.ccol_indices(), s.row_indices()


def _csr_like(s, values):
    """`s`'s indices (CSR or CSC, any batch and dense dimensions) with new values."""
    comp, plain = _compressed(s)
    return torch.sparse_compressed_tensor(comp, plain, values, tuple(s.shape), dtype=values.dtype,
                                          layout=s.layout, device=values.device)


def _compressed_parts(s):
    """(batch, row, column, values) of every stored element of a compressed tensor (CSR,
    CSC, BSR, BSC) with any batch and dense dimensions, in storage order: `batch` indexes
    the flattened batch dimensions, rows and columns count blocks for BSR/BSC, `values` is
    (batches * nnz, *block, *dense dimensions)."""
    comp, plain = _compressed(s)
    nb = comp.dim() - 1
    batches = math.prod(s.shape[:nb])
    nnz = s._nnz()
    comp = comp.reshape(batches, comp.shape[-1])
    outer = _outer_indices(comp, nnz)
    plain = plain.reshape(batches, nnz)
    batch = torch.arange(batches, dtype=comp.dtype, device=comp.device)[:, None] \
        .expand(batches, nnz)
    rows, cols = (outer, plain) if s.layout in _ROW_COMPRESSED else (plain, outer)
    vals = s.values().reshape(batches * nnz, *s.values().shape[nb + 1:])
    return batch.reshape(-1), rows.reshape(-1), cols.reshape(-1), vals, nb


@kernel("_to_dense.default", key=CSR_KEY)
def _csr_to_dense(self, dtype=None, masked_grad=None):
    """CSR/CSC with any batch and dense dimensions: the stored values scattered into zeros."""
    if dtype is not None and dtype != self.dtype:
        raise RuntimeError("dtype argument is not supported by sparse_csr_to_dense")
    batch, rows, cols, vals, nb = _compressed_parts(self)
    batches = math.prod(self.shape[:nb])
    if self.layout in _BLOCKED:  # a grid of blocks, then each block in its place
        (br, bc), dense = vals.shape[1:3], self.shape[nb + 2:]
        r, c = self.shape[nb] // br, self.shape[nb + 1] // bc
        out = vals.new_zeros((batches, r, c, br, bc, *dense))
        if self._nnz():
            out.index_put_((batch, rows, cols), vals, accumulate=True)
        return out.transpose(2, 3).reshape(self.shape)
    out = self.values().new_zeros((batches, *self.shape[nb:]))
    if self._nnz():
        out.index_put_((batch, rows, cols), vals, accumulate=True)
    return out.reshape(self.shape)


def _dense_to_csr(x, dense_dim=None, name="csr"):
    """A strided tensor (..., rows, columns, *dense) as CSR: PyTorch's CPU rules (an
    element block is stored when any of its values is nonzero; every batch must store as
    many as the others: one read back of the counts).  `name` words the errors of a
    conversion to CSC (which converts the transpose)."""
    nd = dense_dim or 0
    if x.dim() < 2:  # the CPU's own error, which differs between the layouts and names the
        # count of nonzeros: raised by the CPU on the (at most 1-D) values themselves
        getattr(x.detach().cpu(), f"to_sparse_{name}")(dense_dim)
        raise RuntimeError(f"to_sparse_{name}: expected a tensor with at least 2 dimensions")
    if not 0 <= nd <= x.dim() - 2:
        raise RuntimeError(f"dense_to_sparse_{name}: dense_dim argument must be in "
                           f"[0,{x.dim() - 2}] range, but {nd} is given")
    nb = x.dim() - 2 - nd
    batches = math.prod(x.shape[:nb])
    r, c = x.shape[nb], x.shape[nb + 1]
    xf = x.reshape(batches, r, c, *x.shape[nb + 2:])
    mask = xf != 0
    if nd:
        mask = mask.flatten(3).any(-1)
    if batches > 1:
        counts = mask.flatten(1).sum(1)
        if not bool((counts == counts[0]).all()):
            raise RuntimeError("Expect the same number of specified elements per batch.")
    idx = mask.nonzero()  # batch-major, then row-major: CSR order
    nnz = idx.shape[0] // max(batches, 1)
    b, rows, cols = idx[:, 0], idx[:, 1].contiguous(), idx[:, 2].contiguous()
    vals = xf[b, rows, cols].reshape(*x.shape[:nb], nnz, *x.shape[nb + 2:])
    crow = _compress(rows.reshape(batches, nnz), r)
    return torch.sparse_csr_tensor(crow.reshape(*x.shape[:nb], r + 1),
                                   cols.reshape(*x.shape[:nb], nnz), vals, tuple(x.shape),
                                   dtype=x.dtype, device=x.device)


@kernel("_to_sparse_csr.default")
def _to_sparse_csr(self, dense_dim=None):
    return _dense_to_csr(self, dense_dim)


@kernel("_to_sparse_csc.default")
def _to_sparse_csc(self, dense_dim=None):
    """CSC of a strided tensor: the CSR of its transpose, read as columns."""
    nb = self.dim() - 2 - (dense_dim or 0)
    t = self.transpose(nb, nb + 1).contiguous() if self.dim() >= 2 and nb >= 0 else self
    grid = _dense_to_csr(t, dense_dim, "csc")
    return torch.sparse_csc_tensor(grid.crow_indices(), grid.col_indices(), grid.values(),
                                   tuple(self.shape), dtype=self.dtype, device=self.device)


def _dense_to_blocked(x, blocksize, dense_dim, layout):
    """A strided tensor as BSR/BSC: its blocks as the elements of a CSR tensor over the
    block grid (BSC: over the transposed grid), each block stored when any value in it is
    nonzero; PyTorch's CPU checks and messages."""
    name = "dense_to_sparse_bsr" if layout == torch.sparse_bsr else "dense_to_sparse_bsc"
    if len(blocksize) != 2:
        raise RuntimeError(f"{name}: blocksize needs to be a tuple of size 2, but got "
                           f"{len(blocksize)}")
    nd = dense_dim or 0
    if x.dim() < 2 + nd:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-max(x.dim(), 1)}, {max(x.dim(), 1) - 1}], but got {-2 - nd})")
    nb = x.dim() - 2 - nd
    (r, c), (br, bc) = x.shape[nb:nb + 2], blocksize
    if r % br or c % bc:
        raise RuntimeError(f"{name}: tensor sparse size ({r},{c}) must be divisible by given "
                           f"blocksize ({br},{bc})")
    dense = x.shape[nb + 2:]
    blocks = x.reshape(*x.shape[:nb], r // br, br, c // bc, bc, *dense) \
        .transpose(nb + 1, nb + 2)  # (..., block row, block column, br, bc, *dense)
    if layout == torch.sparse_bsc:
        blocks = blocks.transpose(nb, nb + 1)
    grid = _dense_to_csr(blocks.contiguous(), 2 + nd)
    return torch.sparse_compressed_tensor(grid.crow_indices(), grid.col_indices(),
                                          grid.values(), tuple(x.shape), dtype=x.dtype,
                                          layout=layout, device=x.device)


@kernel("_to_sparse_bsr.default")
def _to_sparse_bsr(self, blocksize, dense_dim=None):
    return _dense_to_blocked(self, tuple(blocksize), dense_dim, torch.sparse_bsr)


@kernel("_to_sparse_bsc.default")
def _to_sparse_bsc(self, blocksize, dense_dim=None):
    return _dense_to_blocked(self, tuple(blocksize), dense_dim, torch.sparse_bsc)


@kernel("_to_sparse_csr.default", key=KEY)
def _coo_to_sparse_csr(self, dense_dim=None):
    if self.dim() != 2 or self.dense_dim() != 0 or dense_dim not in (None, 0):
        raise NotImplementedError(
            "torchneuron: conversion of a sparse COO tensor to sparse_csr supports 2-D "
            f"matrices without dense dimensions on the neuron device (got {self.dim()}-D with "
            f"{self.dense_dim()} dense dimensions; docs/limitations.md)")
    c = self.coalesce()
    idx = c._indices()
    return _csr_from_rows(idx[0].contiguous(), idx[1].contiguous(), c._values(), self.shape)


def _recompress(s, layout):
    """A compressed tensor (any batch and dense dimensions) in its transposed layout (CSR
    <-> CSC, BSR <-> BSC): its stored elements or blocks (explicit zeros too) sorted into
    the new order, the index dtype kept, as the CPU's conversion."""
    batch, rows, cols, vals, nb = _compressed_parts(s)
    (r, c), nnz = s.shape[nb:nb + 2], s._nnz()
    if s.layout in _BLOCKED:  # rows and columns count blocks
        r, c = r // vals.shape[1], c // vals.shape[2]
    batches = math.prod(s.shape[:nb])
    outer, inner, n, m = (rows, cols, r, c) if layout in _ROW_COMPRESSED else (cols, rows, c, r)
    order = torch.argsort((batch.long() * n + outer.long()) * m + inner.long())
    comp = _compress(outer[order].reshape(batches, nnz), n)
    idx_dtype = _compressed(s)[0].dtype
    bshape = tuple(s.shape[:nb])
    return torch.sparse_compressed_tensor(
        comp.to(idx_dtype).reshape(*bshape, n + 1), inner[order].to(idx_dtype).reshape(
            *bshape, nnz), vals[order].reshape(*bshape, nnz, *vals.shape[1:]),
        tuple(s.shape), dtype=s.dtype, layout=layout, device=s.device)


def _to_blocks(s, layout, blocksize):
    """A 2-D CSR/CSC matrix (dense dimensions allowed) as BSR/BSC: a block is stored where
    any stored element falls (an explicit zero too), as the CPU."""
    _, rows, cols, vals, _ = _compressed_parts(s)
    (br, bc), (r, c) = blocksize, s.shape[:2]
    brow, bcol = rows.long() // br, cols.long() // bc
    outer, inner, n, m = (brow, bcol, r // br, c // bc) if layout == torch.sparse_bsr \
        else (bcol, brow, c // bc, r // br)
    key, which = torch.unique(outer * m + inner, sorted=True, return_inverse=True)
    blocks = vals.new_zeros((key.shape[0], br, bc, *vals.shape[1:]))
    if vals.shape[0]:
        blocks.index_put_((which, rows.long() % br, cols.long() % bc), vals, accumulate=True)
    comp = _compress(key // m, n)
    idx_dtype = _compressed(s)[0].dtype
    return torch.sparse_compressed_tensor(comp.to(idx_dtype), (key % m).to(idx_dtype), blocks,
                                          tuple(s.shape), dtype=s.dtype, layout=layout,
                                          device=s.device)


def _blocks_to_coo(s):
    """A BSR/BSC tensor's stored blocks, element by element, as COO in storage order
    (block by block, each row-major; not coalesced), as the CPU."""
    batch, rows, cols, vals, nb = _compressed_parts(s)
    br, bc = vals.shape[1:3]
    i = torch.arange(br, dtype=rows.dtype, device=rows.device)[None, :, None]
    j = torch.arange(bc, dtype=rows.dtype, device=rows.device)[None, None, :]
    shape = (vals.shape[0], br, bc)
    r = (rows[:, None, None] * br + i).expand(shape).reshape(-1)
    c = (cols[:, None, None] * bc + j).expand(shape).reshape(-1)
    b = batch[:, None, None].expand(shape).reshape(-1)
    bidx = torch.stack(torch.unravel_index(b, tuple(s.shape[:nb]))) if nb \
        else b.new_zeros((0, b.shape[0]))
    idx = torch.cat([bidx, r[None], c[None]])
    return _make(nb + 2, s.dense_dim(), s.shape, idx, vals.reshape(-1, *vals.shape[3:]).clone(),
                 False)


def _layout_name(layout):
    return {torch.sparse_csr: "SparseCsr", torch.sparse_csc: "SparseCsc",
            torch.sparse_bsr: "SparseBsr", torch.sparse_bsc: "SparseBsc"}.get(layout, "Sparse")


def _convert_compressed(self, layout, blocksize, dense_dim, entry):
    """A compressed tensor (CSR, CSC, BSR, BSC) converted to `layout` (None: COO), with the
    CPU's rules and messages; `entry` names the aten op ("to_sparse", "to_sparse_csr",
    ...): the CPU's messages say it when the layout stays, else sparse_compressed_<entry>."""
    src = self.layout
    name = entry if layout == src else f"sparse_compressed_{entry}"
    what = f"conversion from {_layout_name(src)} to {_layout_name(layout)}"
    if dense_dim is not None and layout is not None:
        raise RuntimeError(f"{name}: {what} with dense_dim argument given is not supported")
    nb = self.dim() - 2 - self.dense_dim()
    if layout in _BLOCKED:
        if blocksize is None:
            raise RuntimeError(f"{name}: {what} without blocksize argument given is not "
                               "supported")
        blocksize = tuple(blocksize)
        if src in _BLOCKED:
            current = tuple(self.values().shape[nb + 1:nb + 3])
            if blocksize != current:
                raise RuntimeError(f"{name}: {what} with blocksize changed from "
                                   f"{list(current)} to {list(blocksize)} is not supported")
            return self if layout == src else _recompress(self, layout)
        if nb:
            raise RuntimeError(f"{name}: {what} for batched inputs is not supported")
        (r, c), (br, bc) = self.shape[:2], blocksize
        if r % br or c % bc:
            raise RuntimeError(f"{name}: tensor sparse size ({r},{c}) must be divisible by "
                               f"given blocksize ({br},{bc})")
        return _to_blocks(self, layout, blocksize)
    if blocksize is not None:
        raise RuntimeError(f"{name}: {what} with blocksize argument given is not supported")
    if layout in _COMPRESSED:
        if src in _BLOCKED:
            raise RuntimeError(f"sparse_compressed_to_sparse_{str(layout)[-3:]}: expected "
                               f"SparseCsr or SparseCsc layout but got {_layout_name(src)}")
        return self if layout == src else _recompress(self, layout)
    if src in _BLOCKED:
        return _blocks_to_coo(self)
    # COO over the batch, row and column dimensions, in storage order (sorted, so
    # coalesced, for CSR; column-major within a batch for CSC), as the CPU
    batch, rows, cols, vals, nb = _compressed_parts(self)
    bidx = torch.stack(torch.unravel_index(batch, tuple(self.shape[:nb]))) if nb \
        else batch.new_zeros((0, batch.shape[0]))
    idx = torch.cat([bidx, rows[None], cols[None]])
    return _make(nb + 2, self.dense_dim(), self.shape, idx, vals.clone(),
                 self.layout == torch.sparse_csr)


@kernel("_to_sparse_csr.default", key=CSR_KEY)
def _compressed_to_csr(self, dense_dim=None):
    return _convert_compressed(self, torch.sparse_csr, None, dense_dim, "to_sparse_csr")


@kernel("_to_sparse_csc.default", key=CSR_KEY)
def _compressed_to_csc(self, dense_dim=None):
    return _convert_compressed(self, torch.sparse_csc, None, dense_dim, "to_sparse_csc")


@kernel("_to_sparse_bsr.default", key=CSR_KEY)
def _compressed_to_bsr(self, blocksize, dense_dim=None):
    return _convert_compressed(self, torch.sparse_bsr, blocksize, dense_dim, "to_sparse_bsr")


@kernel("_to_sparse_bsc.default", key=CSR_KEY)
def _compressed_to_bsc(self, blocksize, dense_dim=None):
    return _convert_compressed(self, torch.sparse_bsc, blocksize, dense_dim, "to_sparse_bsc")


@kernel("_to_sparse.default", key=CSR_KEY)
def _csr_to_sparse(self, *, layout=None, blocksize=None, dense_dim=None):
    if layout == torch.sparse_coo:
        layout = None
    if layout == self.layout and blocksize is None and layout in _COMPRESSED \
            and dense_dim is None:
        return self
    return _convert_compressed(self, layout, blocksize, dense_dim, "to_sparse")


@kernel("_to_sparse.sparse_dim", key=CSR_KEY)
def _csr_to_sparse_dim(self, sparse_dim):
    if sparse_dim != 2:  # (2 keeps the batch dimensions sparse too, as the CPU)
        raise RuntimeError(f"sparse_compressed_to_sparse: conversion from "
                           f"{_layout_name(self.layout)} to Sparse with sparse_dim argument "
                           "!=2 is not supported")
    return _csr_to_sparse(self)


def _csr_triples(s):
    """(row, column, value) of each stored value of a CSR or CSC matrix."""
    _csr_plain(s, "matrix products")
    _, rows, cols, vals, _ = _compressed_parts(s)
    return rows, cols, vals


# the matrix products above serve compressed layouts too
kernel("mm.default", key=CSR_KEY)(mm)
kernel("addmm.default", key=CSR_KEY)(addmm)


_MM_REDUCE = ("sum", "mean", "amax", "amin")


def _mm_reduce_parts(self, other, reduce):
    if reduce not in _MM_REDUCE:
        raise RuntimeError(f"sparse_mm_reduce: reduce type of {reduce} has not been enabled.")
    if self.layout != torch.sparse_csr or other.layout != torch.strided:
        _unsupported("aten::_sparse_mm_reduce_impl", self, other)
    _csr_plain(self, "sparse.mm with reduce")
    if other.dim() != 2 or other.shape[0] != self.shape[1]:
        raise RuntimeError(f"Expected a tensor of dimension 2 and tensor.size[0] == "
                           f"{self.shape[1]} but got: dimension {other.dim()} and "
                           f"tensor.size[0] = {other.shape[0] if other.dim() else 1}")
    if other.dtype != self.dtype:
        raise RuntimeError(f"Expected tensor for argument #1 'other' to have scalar type "
                           f"{_scalar_name(self.dtype)}; but got "
                           f"{other.type().replace('neuron.', '')} instead (while checking "
                           "arguments for sparse_mm_reduce)")
    rows, cols, vals = _csr_triples(self)
    counts = torch.zeros(self.shape[0], dtype=other.dtype, device=other.device).index_add_(
        0, rows, torch.ones_like(vals, dtype=other.dtype)) if reduce == "mean" else None
    return rows, cols, vals, counts


@kernel("_sparse_mm_reduce_impl.default", key=CSR_KEY)
def sparse_mm_reduce(self, other, reduce):
    """torch.sparse.mm(csr, dense, reduce): each output row reduces its stored values'
    scaled rows of `other` (empty rows give 0); for amax/amin under autograd also the
    position (in the values) that won, or nnz for an empty row, as PyTorch's CPU kernel."""
    rows, cols, vals, counts = _mm_reduce_parts(self, other, reduce)
    m, n = self.shape[0], other.shape[1]
    contrib = vals[:, None] * other[cols]
    out = other.new_zeros((m, n))
    arg = torch.empty((0,), dtype=torch.int64, device=other.device)
    if reduce in ("sum", "mean"):
        out.index_add_(0, rows, contrib)
        if counts is not None:
            out = out / counts.clamp(min=1)[:, None]
        return out, arg
    out.index_reduce_(0, rows, contrib, reduce, include_self=False)
    if self.requires_grad or other.requires_grad:
        nnz = vals.shape[0]
        pos = torch.arange(nnz, device=other.device)[:, None].expand(nnz, n)
        won = torch.where(contrib == out[rows], pos, nnz)
        arg = torch.full((m, n), nnz, dtype=torch.int64, device=other.device)
        arg.index_reduce_(0, rows, won, "amin", include_self=True)
    return out, arg


@kernel("_sparse_mm_reduce_impl_backward.default", key=CSR_KEY)
def sparse_mm_reduce_backward(self, grad_out, weight, reduce, arg_out, output_mask):
    rows, cols, vals, counts = _mm_reduce_parts(self, weight, reduce)
    nnz = vals.shape[0]
    g = grad_out[rows]  # (nnz, n): each stored value's output row
    if counts is not None:
        g = g / counts.clamp(min=1)[rows, None]
    if reduce in ("amax", "amin"):  # only the value that won each output element
        g = g * (arg_out[rows] == torch.arange(nnz, device=g.device)[:, None])
    grad_self = grad_weight = None
    if output_mask[0]:
        grad_self = _csr_like(self, (g * weight[cols]).sum(-1).to(vals.dtype))
    if output_mask[1]:
        grad_weight = torch.zeros_like(weight).index_add_(0, cols, vals[:, None] * g)
    return grad_self, grad_weight


@kernel("mul.Tensor", key=CSR_KEY)
def csr_mul(self, other):
    if self.layout not in _ALL_COMPRESSED:
        self, other = other, self
    if _is_scalar(other):
        return _csr_like(self, self.values() * other)
    _unsupported("aten::mul.Tensor", self, other)


@kernel("mul.Scalar", key=CSR_KEY)
def csr_mul_scalar(self, other):
    return _csr_like(self, self.values() * other)


@kernel("neg.default", key=CSR_KEY)
def csr_neg(self):
    return _csr_like(self, -self.values())


@kernel("sparse_mask.default", key=CSR_KEY)
def csr_sparse_mask(self, mask):
    if mask.layout != torch.sparse_csr or self.layout != torch.strided:
        _unsupported("aten::sparse_mask", self, mask)
    rows, cols, _ = _csr_triples(mask)
    return _csr_like(mask, self[rows, cols])


@kernel("sparse_sampled_addmm.default", key=CSR_KEY)
def sparse_sampled_addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """beta * self + alpha * (mat1 @ mat2) at self's stored positions (the gradient of a
    CSR matrix in a product)."""
    if self.layout != torch.sparse_csr or mat1.layout != torch.strided \
            or mat2.layout != torch.strided or mat1.dim() != 2 or mat2.dim() != 2:
        _unsupported("aten::sparse_sampled_addmm", self, mat1, mat2)
    rows, cols, vals = _csr_triples(self)
    prod = (mat1[rows] * mat2.t()[cols]).sum(-1)
    out = prod if alpha == 1 else prod * alpha
    if beta != 0:
        out = out + (vals if beta == 1 else vals * beta)
    return _csr_like(self, out)


@kernel("add.Tensor", key=CSR_KEY)
def csr_add(self, other, *, alpha=1):
    if self.layout == torch.sparse_csr and isinstance(other, torch.Tensor) \
            and other.layout == torch.sparse_csr:
        return _csr_add_csr(self, other, alpha)
    if self.layout == torch.strided and isinstance(other, torch.Tensor) \
            and other.layout == torch.sparse_csr and tuple(self.shape) == tuple(other.shape):
        rows, cols, vals = _csr_triples(other)
        res = self.to(torch.result_type(self, vals)).clone()
        if other._nnz():
            res.index_put_((rows, cols), (vals if alpha == 1 else vals * alpha).to(res.dtype),
                           accumulate=True)
        return res
    _unsupported("aten::add.Tensor", self, other)


def _csr_add_csr(a, b, alpha):
    """CSR + alpha * CSR: CSR over the union of the stored positions (a sum that cancels
    stays stored), as PyTorch's CPU."""
    if tuple(a.shape) != tuple(b.shape):
        raise RuntimeError(f"torch.add: Expected input tensors to have the same shape, but got "
                           f"tensor `self` with shape {list(a.shape)} and tensor `other` with "
                           f"shape {list(b.shape)}")
    if a.dtype != b.dtype:
        raise RuntimeError(f"expected scalar type {_scalar_name(b.dtype)} but found "
                           f"{_scalar_name(a.dtype)}")
    _csr_plain(a, "add")
    ra, ca, va = _csr_triples(a)
    rb, cb, vb = _csr_triples(b)
    idx = torch.stack([torch.cat([ra, rb]), torch.cat([ca, cb])])
    vals = torch.cat([va, vb if alpha == 1 else vb * alpha])
    coo = _make(2, 0, a.shape, idx, vals, False).coalesce()  # sorted row-major, summed
    rows, cols = coo._indices()
    return _csr_from_rows(rows.contiguous(), cols.contiguous(), coo._values(), a.shape)


@kernel("_validate_compressed_sparse_indices.default")
def _validate_compressed_sparse_indices(is_crow, compressed_idx, plain_idx, cdim, dim, nnz):
    """The invariants of compressed indices (sparse_csr_tensor(..., check_invariants=True)),
    batched or not, checked on the device with one read back; PyTorch's messages."""
    c, p, pn = ("crow", "col", "ncols") if is_crow else ("ccol", "row", "nrows")
    cn = "nrows" if is_crow else "ncols"
    # one row per batch: (batches, cdim + 1) and (batches, nnz)
    batches = compressed_idx.shape[:-1].numel()
    comp = compressed_idx.reshape(batches, compressed_idx.shape[-1])
    plain = plain_idx.reshape(batches, plain_idx.shape[-1])
    diff = comp[:, 1:] - comp[:, :-1]
    segment = _outer_indices(comp, plain.shape[-1])
    same_segment = segment[:, 1:] == segment[:, :-1]
    flags = torch.stack([
        (comp[:, 0] == 0).all(), (comp[:, -1] == nnz).all(),
        ((diff >= 0) & (diff <= dim)).all(), ((plain >= 0) & (plain < dim)).all(),
        ((plain[:, 1:] > plain[:, :-1]) | ~same_segment).all(),
    ]).cpu().tolist()
    messages = [
        f"`{c}_indices[..., 0] == 0` is not satisfied.",
        f"`{c}_indices[..., -1] == nnz` is not satisfied.",
        f"`0 <= {c}_indices[..., 1:] - {c}_indices[..., :-1] <= {pn}` is not satisfied.",
        f"`0 <= {p}_indices < {pn}` is not satisfied.",
        f"`{p}_indices[..., {c}_indices[..., i - 1]:{c}_indices[..., i]] for all i = 1, ..., "
        f"{cn} are sorted and distinct along the last dimension values` is not satisfied.",
    ]
    for ok, msg in zip(flags, messages):
        if not ok:
            raise RuntimeError(msg)

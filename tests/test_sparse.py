"""Sparse COO and CSR tensors on the device, against the same program on the CPU, natively
(fallback policy "error"): creation, coalesce, to_dense, dense -> sparse, sparse.mm/addmm
with dense matrices and their gradients, elementwise with scalars, zero-preserving unary
ops, sums, dense + sparse (nn.Embedding(sparse=True) training with SGD and SparseAdam);
batched and hybrid CSR/CSC, CSR @ CSR and CSR + CSR; BSR/BSC.
Unsupported ops raise NotImplementedError naming the op and the layout."""
from __future__ import annotations

import warnings

import pytest
import torch

from helpers import DEV, native_only

warnings.filterwarnings("ignore", message="Sparse invariant checks")
warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta")


def _coo(device, uncoalesced=True, size=(4, 5), dense=(), seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    nnz = 7
    idx = torch.stack([torch.randint(0, s, (nnz,), generator=g) for s in size])
    if uncoalesced:  # a repeated coordinate
        idx[:, -1] = idx[:, 0]
    vals = torch.randn((nnz,) + tuple(dense), generator=g).to(dtype)
    return torch.sparse_coo_tensor(idx, vals, tuple(size) + tuple(dense)).to(device)


def _dense(t):
    if isinstance(t, torch.Tensor) and t.layout == torch.sparse_coo:
        return t.to_dense()
    return t


def _meta(t):
    if isinstance(t, torch.Tensor) and t.layout == torch.sparse_coo:
        return (t.layout, t.sparse_dim(), t.dense_dim(), t.is_coalesced(), t.dtype)
    return (t.layout, t.dtype) if isinstance(t, torch.Tensor) else type(t)


def _same(fn, atol=1e-6, **kw):
    out = {}
    for device in ("cpu", DEV):
        ctx = native_only() if device == DEV else warnings.catch_warnings()
        with ctx:
            r = fn(device, **kw)
            if device == DEV and isinstance(r, torch.Tensor):
                assert r.device.type == "neuron", r.device
            out[device] = (_meta(r), _dense(r).cpu() if isinstance(r, torch.Tensor) else r)
    (em, e), (am, a) = out["cpu"], out[DEV]
    assert am == em
    torch.testing.assert_close(a, e, atol=atol, rtol=1e-5)


_D = torch.randn(5, 3, generator=torch.Generator().manual_seed(9))
_L = torch.randn(6, 4, generator=torch.Generator().manual_seed(10))
_B = torch.randn(4, 3, generator=torch.Generator().manual_seed(11))
_X = torch.tensor([[0.0, 1.5, 0.0, 0.0], [2.0, 0.0, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0]])

CASES = {
    "sparse_coo_tensor on device": lambda d: torch.sparse_coo_tensor(
        torch.tensor([[0, 1, 1], [2, 0, 2]], device=d), torch.tensor([3.0, 4, 5], device=d),
        (2, 3)),
    "sparse_coo_tensor device=": lambda d: torch.sparse_coo_tensor(
        torch.tensor([[0, 1, 1], [2, 0, 2]]), torch.tensor([3.0, 4, 5]), (2, 3), device=d),
    "sparse_coo_tensor inferred size": lambda d: torch.sparse_coo_tensor(
        torch.tensor([[0, 3], [2, 1]], device=d), torch.tensor([1.0, 2], device=d)),
    ".to(device)": lambda d: _coo(d),
    "indices/values": lambda d: _coo(d).coalesce().indices().float() + 0,
    "values": lambda d: _coo(d).coalesce().values(),
    "nnz": lambda d: _coo(d)._nnz(),
    "coalesce": lambda d: _coo(d).coalesce(),
    "coalesce indices order": lambda d: _coo(d).coalesce()._indices(),
    "coalesce dense dims": lambda d: _coo(d, dense=(2,)).coalesce(),
    "coalesce 3 sparse dims": lambda d: _coo(d, size=(3, 4, 2)).coalesce(),
    "coalesce float64": lambda d: _coo(d, dtype=torch.float64).coalesce(),
    "coalesce int64": lambda d: _coo(d, dtype=torch.int64).coalesce(),
    "to_dense": lambda d: _coo(d).to_dense(),
    "to_dense dense dims": lambda d: _coo(d, dense=(2,)).to_dense(),
    "to_sparse": lambda d: _X.to(d).to_sparse(),
    "to_sparse sparse_dim=1": lambda d: _X.to(d).to_sparse(1),
    "to_sparse layout": lambda d: _X.to(d).to_sparse(layout=torch.sparse_coo),
    "to_sparse int": lambda d: _X.long().to(d).to_sparse(),
    "round trip": lambda d: _X.to(d).to_sparse().to_dense(),
    "clone": lambda d: _coo(d).clone(),
    "copy_": lambda d: torch.sparse_coo_tensor(size=(4, 5)).to(d).copy_(_coo(d)),
    "copy_ from cpu": lambda d: torch.sparse_coo_tensor(size=(4, 5)).to(d).copy_(_coo("cpu")),
    "cpu() and back": lambda d: _coo(d).cpu().to(d),
    "sparse.mm": lambda d: torch.sparse.mm(_coo(d), _D.to(d)),
    "mm": lambda d: torch.mm(_coo(d), _D.to(d)),
    "matmul": lambda d: _coo(d) @ _D.to(d),
    "dense @ sparse": lambda d: torch.mm(_L.to(d), _coo(d)),
    "sparse.addmm": lambda d: torch.sparse.addmm(_B.to(d), _coo(d), _D.to(d)),
    "addmm beta alpha": lambda d: torch.addmm(_B.to(d), _coo(d), _D.to(d), beta=0.5,
                                              alpha=2.0),
    "addmm beta 0 ignores nan": lambda d: torch.addmm(
        torch.full((4, 3), float("nan"), device=d), _coo(d), _D.to(d), beta=0),
    "mul scalar": lambda d: _coo(d) * 2.5,
    "rmul scalar": lambda d: 3 * _coo(d),
    "mul 0-dim": lambda d: _coo(d) * torch.tensor(1.5, device=d),
    "mul_ scalar": lambda d: _coo(d).mul_(-2),
    "mul dense": lambda d: _coo(d) * torch.arange(20.0).reshape(4, 5).to(d),
    "div scalar": lambda d: _coo(d) / 4,
    "floor div scalar": lambda d: torch.div(_coo(d), 0.7, rounding_mode="floor"),
    "neg": lambda d: -_coo(d),
    "int mul float": lambda d: _coo(d, dtype=torch.int64) * 0.5,
    "sin": lambda d: torch.sin(_coo(d)),
    "abs": lambda d: _coo(d).abs(),
    "sqrt abs": lambda d: _coo(d).abs().sqrt(),
    "tanh dense dims": lambda d: _coo(d, dense=(2,)).tanh(),
    "relu": lambda d: torch.relu(_coo(d)),
    "pow": lambda d: _coo(d).pow(2),
    "isnan": lambda d: torch.isnan(_coo(d)),
    "sum": lambda d: _coo(d).sum(),
    "sum dtype": lambda d: _coo(d).sum(dtype=torch.float64),
    "sparse.sum dim": lambda d: torch.sparse.sum(_coo(d), 0),
    "sparse.sum dims": lambda d: torch.sparse.sum(_coo(d, size=(3, 4, 2)), (0, 2)),
    "sparse.sum dense dim": lambda d: torch.sparse.sum(_coo(d, dense=(3,)), 2),
    "sum dim": lambda d: torch.sum(_coo(d), 1),
    "add sparse sparse": lambda d: _coo(d) + _coo(d, seed=3),
    "sub sparse sparse": lambda d: _coo(d) - _coo(d, seed=3),
    "add dense sparse": lambda d: torch.arange(20.0).reshape(4, 5).to(d) + _coo(d),
    "add_ dense sparse alpha": lambda d: torch.arange(20.0).reshape(4, 5).to(d).add_(
        _coo(d), alpha=-0.5),
    # in place on a sparse tensor (SGD's momentum buffer of sparse gradients)
    "add_ sparse sparse alpha": lambda d: _coo(d).add_(_coo(d, seed=3), alpha=0.25),
    "_foreach_mul_ sparse": lambda d: _foreach_mul_first(_coo(d), 0.9),
    "transpose": lambda d: _coo(d).t(),
    "zero_": lambda d: _coo(d).zero_(),
    "empty sparse": lambda d: torch.empty((3, 2), layout=torch.sparse_coo, device=d),
    "zeros sparse": lambda d: torch.zeros((3, 2), layout=torch.sparse_coo, device=d),
    "empty nnz to_dense": lambda d: torch.sparse_coo_tensor(size=(3, 2)).to(d).to_dense(),
    "empty nnz coalesce": lambda d: torch.sparse_coo_tensor(size=(3, 2)).to(d).coalesce(),
}


def _foreach_mul_first(s, k):
    torch._foreach_mul_([s], k)
    return s


@pytest.mark.parametrize("name", list(CASES))
def test_sparse_matches_cpu(name):
    _same(CASES[name])


def _mm_grads(device, op):
    s = _coo(device).coalesce().requires_grad_()
    dm = _D.clone().to(device).requires_grad_()
    w = torch.randn(4, 3, generator=torch.Generator().manual_seed(4)).to(device)
    (op(s, dm) * w).sum().backward()
    return s.grad, dm.grad


@pytest.mark.parametrize("op", ["sparse.mm", "mm", "addmm", "to_dense"])
def test_sparse_gradients_match_cpu(op):
    fns = {
        "sparse.mm": torch.sparse.mm,
        "mm": torch.mm,
        "addmm": lambda s, m: torch.sparse.addmm(_B.to(m.device), s, m, beta=0.3, alpha=1.7),
        "to_dense": lambda s, m: s.to_dense()[:, :3] * m[:4],
    }
    res = {}
    for device in ("cpu", DEV):
        ctx = native_only() if device == DEV else warnings.catch_warnings()
        with ctx:
            gs, gd = _mm_grads(device, fns[op])
        res[device] = (_meta(gs), _dense(gs).cpu(), gd.cpu())
    (em, es, ed), (am, as_, ad) = res["cpu"], res[DEV]
    assert am == em
    torch.testing.assert_close(as_, es, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ad, ed, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("optim", ["SGD", "SGD momentum foreach", "SGD momentum for-loop", "SparseAdam"])
def test_sparse_embedding_training_matches_cpu(optim):
    """nn.Embedding(sparse=True): sparse gradients, applied by SGD (dense += sparse) or
    SparseAdam (sparse_mask, sparse arithmetic)."""
    res = {}
    for device in ("cpu", DEV):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 4, sparse=True)
        lin = torch.nn.Linear(4, 1)
        emb, lin = emb.to(device), lin.to(device)
        if optim.startswith("SGD"):
            kw = {} if optim == "SGD" else {"momentum": 0.9, "dampening": 0.1,
                                            "foreach": optim.endswith("foreach")}
            opt = torch.optim.SGD(list(emb.parameters()) + list(lin.parameters()), lr=0.1, **kw)
        else:
            opt = torch.optim.SparseAdam(list(emb.parameters()), lr=0.1)
        ids = torch.tensor([[1, 2, 2, 7], [0, 7, 9, 1]]).to(device)
        losses = []
        ctx = native_only() if device == DEV else warnings.catch_warnings()
        with ctx:
            for _ in range(3):
                opt.zero_grad()
                loss = lin(emb(ids)).square().mean()
                loss.backward()
                assert emb.weight.grad.layout == torch.sparse_coo
                opt.step()
                losses.append(loss.item())
        res[device] = (losses, emb.weight.detach().cpu())
    assert res[DEV][0] == pytest.approx(res["cpu"][0], rel=1e-6, abs=1e-7)
    torch.testing.assert_close(res[DEV][1], res["cpu"][1], atol=1e-6, rtol=1e-6)


UNSUPPORTED = {
    "sparse @ sparse": (lambda s: torch.mm(s, s.t()), "aten::mm"),
    "mul sparse sparse": (lambda s: s * s, "aten::mul.Tensor"),
    "cat": (lambda s: torch.cat([s, s]), "aten::cat"),
    "softmax": (lambda s: torch.sparse.softmax(s, 0), "_sparse_softmax"),
}


@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_unsupported_sparse_ops_raise_not_implemented(name):
    fn, op = UNSUPPORTED[name]
    s = _coo(DEV).coalesce()
    with pytest.raises(NotImplementedError, match=op) as e:
        fn(s)
    assert "sparse" in str(e.value).lower()


_C = torch.randn(5, 6, generator=torch.Generator().manual_seed(12)) * (
    torch.rand(5, 6, generator=torch.Generator().manual_seed(13)) > 0.6)
_C[2] = 0  # an empty row


def _csr(device):
    return _C.to_sparse_csr().to(device)


CSR_CASES = {
    ".to(device)": lambda d: _csr(d),
    "sparse_csr_tensor on device": lambda d: torch.sparse_csr_tensor(
        torch.tensor([0, 2, 2, 3], device=d), torch.tensor([0, 3, 1], device=d),
        torch.tensor([1.0, 2, 3], device=d), (3, 4)),
    "crow_indices": lambda d: _csr(d).crow_indices(),
    "col_indices": lambda d: _csr(d).col_indices(),
    "to_dense": lambda d: _csr(d).to_dense(),
    "to_sparse_csr": lambda d: _C.to(d).to_sparse_csr(),
    "to_sparse layout": lambda d: _C.to(d).to_sparse(layout=torch.sparse_csr),
    "to COO": lambda d: _csr(d).to_sparse(),
    "cpu() and back": lambda d: _csr(d).cpu().to(d),
    "clone": lambda d: _csr(d).clone(),
    "mm": lambda d: torch.mm(_csr(d), _D[:, :2].repeat(2, 1)[:6].to(d)),
    "sparse.mm": lambda d: torch.sparse.mm(_csr(d), torch.arange(18.0).reshape(6, 3).to(d)),
    "dense @ csr": lambda d: torch.arange(10.0).reshape(2, 5).to(d) @ _csr(d),
    "addmm": lambda d: torch.addmm(torch.ones(5, 3).to(d), _csr(d),
                                   torch.arange(18.0).reshape(6, 3).to(d), beta=0.5, alpha=2),
    "mul scalar": lambda d: _csr(d) * 2.5,
    "sin": lambda d: _csr(d).sin(),
    "sum": lambda d: _csr(d).sum(),
    "dense + csr": lambda d: torch.ones(5, 6).to(d) + _csr(d),
    "addmm beta 0 ignores nan": lambda d: torch.addmm(
        torch.full((5, 3), float("nan"), device=d), _csr(d),
        torch.arange(18.0).reshape(6, 3).to(d), beta=0),
    "COO to_sparse_csr": lambda d: _coo(d).to_sparse_csr(),
    "csc mm": lambda d: torch.mm(_C.to_sparse_csc().to(d), torch.arange(18.0).reshape(6, 3)
                                 .to(d)),
    "dense @ csc": lambda d: torch.arange(10.0).reshape(2, 5).to(d) @ _C.to_sparse_csc().to(d),
}


@pytest.mark.parametrize("name", list(CSR_CASES))
def test_csr_matches_cpu(name):
    _same(CSR_CASES[name])


def test_csr_mm_gradients_match_cpu():
    res = {}
    w = torch.randn(5, 3, generator=torch.Generator().manual_seed(14))
    for device in ("cpu", DEV):
        s = _csr(device).requires_grad_()
        m = torch.randn(6, 3, generator=torch.Generator().manual_seed(15)).to(device)
        m.requires_grad_()
        ctx = native_only() if device == DEV else warnings.catch_warnings()
        with ctx:
            (torch.sparse.mm(s, m) * w.to(device)).sum().backward()
        res[device] = (s.grad.layout, s.grad.to_dense().cpu(), m.grad.cpu())
    assert res[DEV][0] == res["cpu"][0]
    torch.testing.assert_close(res[DEV][1], res["cpu"][1], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(res[DEV][2], res["cpu"][2], atol=1e-6, rtol=1e-5)


_BATCHED = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(14)) * torch.tensor(
    [[[1, 0, 1, 0], [0, 0, 1, 1], [1, 0, 0, 0]], [[0, 1, 1, 0], [1, 0, 0, 1], [0, 0, 1, 0]]])
_HYBRID = torch.randn(3, 4, 2, generator=torch.Generator().manual_seed(15))
_HYBRID[_HYBRID.abs() < 0.6] = 0  # some blocks all zero, some half
_BLOCKS = torch.randn(4, 6, generator=torch.Generator().manual_seed(18))
_BLOCKS[:2, :2] = 0  # whole blocks of zeros: not stored
_BLOCKS[2:, 4:] = 0
_D6 = torch.arange(18.0).reshape(6, 3) / 7
_MM_A = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 2.0, 3.0]])
_MM_B = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 4.0]])  # row 0 @ it: a stored exact zero
_OTHER = (torch.randn(5, 6, generator=torch.Generator().manual_seed(16))
          * (torch.rand(5, 6, generator=torch.Generator().manual_seed(17)) > 0.5))


def _band(n):
    """An n x n CSR matrix with a stored diagonal and superdiagonal (int32 indices)."""
    i = torch.arange(n)
    rows, cols = torch.cat([i, i[:-1]]), torch.cat([i, i[:-1] + 1])
    order = torch.argsort(rows * n + cols)
    coo = torch.sparse_coo_tensor(torch.stack([rows[order], cols[order]]),
                                  torch.linspace(-1, 1, len(rows))[order], (n, n)).coalesce()
    return coo.to_sparse_csr()


def _stored(t):
    """A sparse result's structure as plain tensors: compressed indices, plain indices and
    values (a 2-D matrix's entries sorted within each row: PyTorch's CPU CSR @ CSR leaves
    them in its accumulation order, not the sorted order the CSR invariants ask for)."""
    if t.layout in (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc):
        comp, plain = ((t.crow_indices(), t.col_indices())
                       if t.layout in (torch.sparse_csr, torch.sparse_bsr)
                       else (t.ccol_indices(), t.row_indices()))
        comp, plain, vals = comp.cpu(), plain.cpu(), t.values().cpu()
        if comp.dim() == 1:
            outer = torch.repeat_interleave(torch.arange(len(comp) - 1), comp.diff())
            order = torch.argsort(outer * (plain.max() + 1 if len(plain) else 1) + plain)
            plain, vals = plain[order], vals[order]
        return [comp, plain, vals, t.layout]
    if t.layout == torch.sparse_coo:
        return [t._indices().cpu(), t._values().cpu(), t.is_coalesced(), t.sparse_dim()]
    return [t.cpu()]


BATCHED_CASES = {
    "batched csr to_dense": lambda d: _BATCHED.to_sparse_csr().to(d).to_dense(),
    "batched csc to_dense": lambda d: _BATCHED.to_sparse_csc().to(d).to_dense(),
    "4-d batched to_dense": lambda d: torch.stack([_BATCHED, -_BATCHED]).to_sparse_csr().to(d)
    .to_dense(),
    "batched csr to COO": lambda d: _BATCHED.to_sparse_csr().to(d).to_sparse(),
    "batched csc to COO": lambda d: _BATCHED.to_sparse_csc().to(d).to_sparse(),
    "batched dense to csr": lambda d: _BATCHED.to(d).to_sparse_csr(),
    "4-d batched dense to csr": lambda d: torch.stack([_BATCHED, 2 * _BATCHED]).to(d)
    .to_sparse_csr(),
    "batched mul scalar": lambda d: _BATCHED.to_sparse_csr().to(d) * -1.5,
    "batched csc mul scalar": lambda d: _BATCHED.to_sparse_csc().to(d) * 2,
    "batched sum": lambda d: _BATCHED.to_sparse_csr().to(d).sum(),
    "hybrid to_dense": lambda d: _HYBRID.to_sparse_csr(dense_dim=1).to(d).to_dense(),
    "hybrid to COO": lambda d: _HYBRID.to_sparse_csr(dense_dim=1).to(d).to_sparse(),
    "hybrid dense to csr": lambda d: _HYBRID.to(d).to_sparse_csr(dense_dim=1),
    "hybrid mul scalar": lambda d: _HYBRID.to_sparse_csr(dense_dim=1).to(d) * 3,
    "empty batched dense to csr": lambda d: torch.zeros(2, 3, 4).to(d).to_sparse_csr(),
    "csr @ csr": lambda d: _C.to_sparse_csr().to(d) @ _C.t().contiguous().to_sparse_csr().to(d),
    "csr @ csr stored zero": lambda d: _MM_A.to_sparse_csr().to(d) @ _MM_B.to_sparse_csr().to(d),
    "csc @ csr": lambda d: torch.mm(_MM_A.to_sparse_csc().to(d), _MM_B.to_sparse_csr().to(d)),
    "csc @ csc": lambda d: _C.to_sparse_csc().to(d) @ _C.t().contiguous().to_sparse_csc().to(d),
    "csr @ csr nothing meets": lambda d: _MM_A[:, :1].to_sparse_csr().to(d)
    @ torch.tensor([[0.0, 0.0]]).to_sparse_csr().to(d),
    "csr @ csr complex": lambda d: (_MM_A * (1 - 2j)).to_sparse_csr().to(d)
    @ (_MM_B * 1j).to_sparse_csr().to(d),
    # dense 50000 x 50000 factors would take 10 GB each: the product follows the stored values
    "csr @ csr 50000x50000": lambda d: _band(50000).to(d) @ _band(50000).t().to_sparse_csr().to(d),
    "sparse.mm csr csr": lambda d: torch.sparse.mm(_MM_A.to_sparse_csr().to(d),
                                                   _MM_A.t().to_sparse_csr().to(d)),
    "addmm csr csr csr": lambda d: torch.addmm(_MM_A[:, :2].to_sparse_csr().to(d),
                                               _MM_A.to_sparse_csr().to(d),
                                               _MM_B.to_sparse_csr().to(d), beta=0.5, alpha=2),
    # between the compressed layouts (stored zeros and int32 indices kept), and dense to CSC
    "csr to csc": lambda d: _C.to_sparse_csr().to(d).to_sparse_csc(),
    "csc to csr": lambda d: _C.to_sparse_csc().to(d).to_sparse_csr(),
    "csr to_sparse(layout=csc)": lambda d: _OTHER.to_sparse_csr().to(d)
    .to_sparse(layout=torch.sparse_csc),
    "csr with a stored zero, int32, to csc": lambda d: torch.sparse_csr_tensor(
        torch.tensor([0, 1, 3], dtype=torch.int32), torch.tensor([1, 0, 2], dtype=torch.int32),
        torch.tensor([0.0, 5.0, -1.0]), (2, 3)).to(d).to_sparse_csc(),
    "batched csr to csc": lambda d: _BATCHED.to_sparse_csr().to(d).to_sparse_csc(),
    "batched csc to csr": lambda d: torch.stack([_BATCHED, -_BATCHED]).to_sparse_csc().to(d)
    .to_sparse_csr(),
    "hybrid csr to csc": lambda d: _HYBRID.to_sparse_csr(dense_dim=1).to(d).to_sparse_csc(),
    "empty csr to csc": lambda d: torch.zeros(3, 4).to_sparse_csr().to(d).to_sparse_csc(),
    "csc to csc is itself": lambda d: _C.to_sparse_csc().to(d).to_sparse_csc(),
    "dense to csc": lambda d: _C.to(d).to_sparse_csc(),
    # to and from the block layouts
    "csr with a stored zero to bsr": lambda d: torch.sparse_csr_tensor(
        torch.tensor([0, 1, 1, 2, 2]), torch.tensor([1, 3]), torch.tensor([0.0, 5.0]), (4, 4))
    .to(d).to_sparse_bsr((2, 2)),
    "csr to bsc": lambda d: _BLOCKS.to_sparse_csr().to(d).to_sparse_bsc((2, 3)),
    "csc to bsr, int32": lambda d: torch.sparse_csc_tensor(
        torch.tensor([0, 1, 2, 2, 3], dtype=torch.int32), torch.tensor([0, 3, 1],
                                                                       dtype=torch.int32),
        torch.tensor([1.0, 2.0, 3.0]), (4, 4)).to(d).to_sparse_bsr((2, 1)),
    "hybrid csr to bsr": lambda d: _HYBRID.to_sparse_csr(dense_dim=1).to(d)
    .to_sparse_bsr((1, 2)),
    "empty csr to bsr": lambda d: torch.zeros(4, 4).to_sparse_csr().to(d).to_sparse_bsr((2, 2)),
    "csr to_sparse(layout=bsr)": lambda d: _BLOCKS.to_sparse_csr().to(d)
    .to_sparse(layout=torch.sparse_bsr, blocksize=(1, 2)),
    "bsr to bsc": lambda d: _BLOCKS.to_sparse_bsr((2, 3)).to(d).to_sparse_bsc((2, 3)),
    "batched bsc to bsr": lambda d: torch.stack([_BLOCKS, _BLOCKS.roll(2, 1)])
    .to_sparse_bsc((2, 2)).to(d).to_sparse_bsr((2, 2)),
    "bsr to bsr is itself": lambda d: _BLOCKS.to_sparse_bsr((2, 2)).to(d).to_sparse_bsr((2, 2)),
    "bsr to COO": lambda d: _BLOCKS.to_sparse_bsr((2, 2)).to(d).to_sparse(),
    "bsc to COO": lambda d: _BLOCKS.to_sparse_bsc((2, 3)).to(d).to_sparse(),
    "batched bsr to COO": lambda d: torch.stack([_BLOCKS, -_BLOCKS]).to_sparse_bsr((1, 3)).to(d)
    .to_sparse(2),
    "batched csr to_sparse(2)": lambda d: _BATCHED.to_sparse_csr().to(d).to_sparse(2),
    "hybrid bsr to COO": lambda d: _BLOCKS.reshape(4, 3, 2).to_sparse_bsr((2, 1), dense_dim=1)
    .to(d).to_sparse(),
    "dense to_sparse(layout=csc)": lambda d: _OTHER.to(d).to_sparse(layout=torch.sparse_csc),
    "batched dense to csc": lambda d: _BATCHED.to(d).to_sparse_csc(),
    "hybrid dense to csc": lambda d: _HYBRID.to(d).to_sparse_csc(dense_dim=1),
    "csr + csr": lambda d: _csr(d) + _OTHER.to_sparse_csr().to(d),
    "csr + csr alpha": lambda d: torch.add(_csr(d), _OTHER.to_sparse_csr().to(d), alpha=-0.5),
    "csr - itself keeps positions": lambda d: _csr(d) + (-_csr(d)),
    # block layouts
    "dense to bsr": lambda d: _BLOCKS.to(d).to_sparse_bsr((2, 2)),
    "dense to bsc": lambda d: _BLOCKS.to(d).to_sparse_bsc((2, 3)),
    "to_sparse(layout=bsr)": lambda d: _BLOCKS.to(d).to_sparse(layout=torch.sparse_bsr,
                                                               blocksize=(1, 2)),
    "batched dense to bsr": lambda d: torch.stack([_BLOCKS, _BLOCKS.roll(2, 1)]).to(d)
    .to_sparse_bsr((2, 2)),
    "hybrid dense to bsr": lambda d: _BLOCKS.reshape(4, 3, 2).to(d)
    .to_sparse_bsr((2, 1), dense_dim=1),
    "bsr to_dense": lambda d: _BLOCKS.to_sparse_bsr((2, 2)).to(d).to_dense(),
    "bsc to_dense": lambda d: _BLOCKS.to_sparse_bsc((2, 3)).to(d).to_dense(),
    "batched bsr to_dense": lambda d: torch.stack([_BLOCKS, -_BLOCKS]).to_sparse_bsr((1, 3))
    .to(d).to_dense(),
    "bsr @ dense": lambda d: _BLOCKS.to_sparse_bsr((2, 2)).to(d) @ _D6.to(d),
    "addmm bsr": lambda d: torch.addmm(torch.ones(4, 3).to(d), _BLOCKS.to_sparse_bsr((2, 2))
                                       .to(d), _D6.to(d), beta=0.5, alpha=2),
    "linear with a bsr weight": lambda d: torch.nn.functional.linear(
        _D6.t().to(d), _BLOCKS.to_sparse_bsr((2, 2)).to(d), torch.ones(4).to(d)),
    "bsr * scalar": lambda d: _BLOCKS.to_sparse_bsr((2, 2)).to(d) * 2.5,
    "bsr sum": lambda d: _BLOCKS.to_sparse_bsr((2, 2)).to(d).sum(),
    "bsr sin": lambda d: _BLOCKS.to_sparse_bsr((2, 2)).to(d).sin(),
}


@pytest.mark.parametrize("name", list(BATCHED_CASES))
def test_batched_hybrid_block_csr_and_csr_products_match_cpu(name):
    """Batched and hybrid compressed tensors, BSR/BSC, CSR @ CSR and CSR + CSR: the stored
    indices, values and layout equal the CPU's (values within float32 rounding)."""
    res = {}
    for device in ("cpu", DEV):
        ctx = native_only() if device == DEV else warnings.catch_warnings()
        with ctx:
            r = BATCHED_CASES[name](device)
        assert r.device.type == torch.device(device).type
        res[device] = _stored(r)
    for a, e in zip(res[DEV], res["cpu"]):
        if isinstance(e, torch.Tensor):
            assert a.dtype == e.dtype and a.shape == e.shape
            torch.testing.assert_close(a, e, atol=1e-6, rtol=1e-5)
        else:
            assert a == e


COMPRESSED_ERRORS = {
    "batches with other counts": lambda d: torch.stack([_BATCHED[0], _BATCHED[1] * 0]).to(d)
    .to_sparse_csr(),
    "dense_dim out of range": lambda d: _HYBRID.to(d).to_sparse_csr(dense_dim=2),
    "csc dense_dim out of range": lambda d: _HYBRID.to(d).to_sparse_csc(dense_dim=2),
    "1-d to csr": lambda d: torch.ones(3).to(d).to_sparse_csr(),
    "1-d with zeros to csr": lambda d: torch.tensor([0.0, 2.0, 0.0]).to(d).to_sparse_csr(),
    "1-d to csc": lambda d: torch.ones(3).to(d).to_sparse_csc(),
    "csr to csc with dense_dim": lambda d: _C.to_sparse_csr().to(d).to_sparse_csc(dense_dim=0),
    "csc to csr with dense_dim": lambda d: _C.to_sparse_csc().to(d).to_sparse_csr(dense_dim=0),
    "csr to csr with dense_dim": lambda d: _C.to_sparse_csr().to(d).to_sparse_csr(dense_dim=0),
    "csr to_sparse(1)": lambda d: _C.to_sparse_csr().to(d).to_sparse(1),
    "bsr to_sparse(3)": lambda d: _BLOCKS.to_sparse_bsr((2, 2)).to(d).to_sparse(3),
    "bsr to csr": lambda d: _BLOCKS.to_sparse_bsr((2, 2)).to(d).to_sparse_csr(),
    "bsr to_sparse(layout=csc)": lambda d: _BLOCKS.to_sparse_bsr((2, 2)).to(d)
    .to_sparse(layout=torch.sparse_csc),
    "bsr to bsc with another blocksize": lambda d: _BLOCKS.to_sparse_bsr((2, 2)).to(d)
    .to_sparse_bsc((1, 2)),
    "bsr to bsr with another blocksize": lambda d: _BLOCKS.to_sparse_bsr((2, 2)).to(d)
    .to_sparse_bsr((1, 3)),
    "bsr to_sparse(layout=bsr) without blocksize": lambda d: _BLOCKS.to_sparse_bsr((2, 2))
    .to(d).to_sparse(layout=torch.sparse_bsr),
    "csr to_sparse(layout=bsc) without blocksize": lambda d: _BLOCKS.to_sparse_csr().to(d)
    .to_sparse(layout=torch.sparse_bsc),
    "csr to bsr with dense_dim": lambda d: _BLOCKS.to_sparse_csr().to(d)
    .to_sparse_bsr((2, 2), dense_dim=0),
    "batched csr to bsr": lambda d: _BATCHED.to_sparse_csr().to(d).to_sparse_bsr((1, 1)),
    "csr to bsr blocksize does not divide": lambda d: _BLOCKS.to_sparse_csr().to(d)
    .to_sparse_bsr((3, 2)),
    "csr to_sparse(layout=csc) with blocksize": lambda d: _C.to_sparse_csr().to(d)
    .to_sparse(layout=torch.sparse_csc, blocksize=(1, 1)),
    "csr to COO with blocksize": lambda d: _C.to_sparse_csr().to(d).to_sparse(blocksize=(1, 1)),
    "csr @ csr dtypes": lambda d: _MM_A.double().to_sparse_csr().to(d) @ _MM_B.to_sparse_csr()
    .to(d),
    "csr @ csr shapes": lambda d: _MM_A.to_sparse_csr().to(d) @ _MM_A[:2].to_sparse_csr().to(d),
    "csr + csr shapes": lambda d: _csr(d) + _MM_A.to_sparse_csr().to(d),
    "csr + csr dtypes": lambda d: _csr(d) + _C.double().to_sparse_csr().to(d),
    "bsr blocksize does not divide": lambda d: _BLOCKS.to(d).to_sparse_bsr((3, 2)),
    "bsc blocksize does not divide": lambda d: _BLOCKS.to(d).to_sparse_bsc((2, 4)),
    "bsr blocksize of one": lambda d: _BLOCKS.to(d).to_sparse_bsr((2,)),
    "bsr @ dense shapes": lambda d: _BLOCKS.to_sparse_bsr((2, 2)).to(d) @ _D6[:5].to(d),
    "bsr @ dense dtypes": lambda d: _BLOCKS.to_sparse_bsr((2, 2)).to(d) @ _D6.double().to(d),
}


@pytest.mark.parametrize("name", list(COMPRESSED_ERRORS))
def test_compressed_errors_match_cpu(name):
    with pytest.raises((RuntimeError, IndexError)) as cpu_err:
        COMPRESSED_ERRORS[name]("cpu")
    with native_only(), pytest.raises((RuntimeError, IndexError)) as dev_err:
        COMPRESSED_ERRORS[name](DEV)
    assert type(dev_err.value) is type(cpu_err.value)
    assert str(dev_err.value) == str(cpu_err.value)


def test_integer_csr_product_raises_like_cpu():
    a = torch.tensor([[1, 0, 2]]).to_sparse_csr()
    b = torch.tensor([[1], [0], [2]]).to_sparse_csr()
    with pytest.raises(NotImplementedError) as cpu_err:
        a @ b
    with native_only(), pytest.raises(NotImplementedError) as dev_err:
        a.to(DEV) @ b.to(DEV)
    assert str(dev_err.value) == str(cpu_err.value)


_LAYOUTS = {"coo": lambda t: t.to_sparse(), "csr": lambda t: t.to_sparse_csr(),
            "csc": lambda t: t.to_sparse_csc()}
ERRORS = {
    "sparse @ dense shapes": lambda s, d: torch.mm(s, torch.randn(4, 3).to(d)),
    "sparse @ dense dtypes": lambda s, d: torch.mm(s, _D.double().to(d)),
    "dense @ sparse shapes": lambda s, d: torch.mm(torch.randn(3, 5).to(d), s),
    "dense @ sparse dtypes": lambda s, d: torch.mm(torch.randn(3, 4).double().to(d), s),
    "addmm shapes": lambda s, d: torch.addmm(torch.zeros(4, 3).to(d), s,
                                             torch.randn(4, 3).to(d)),
    "addmm dtypes": lambda s, d: torch.addmm(torch.zeros(4, 3).to(d), s, _D.double().to(d)),
}


@pytest.mark.parametrize("layout", list(_LAYOUTS))
@pytest.mark.parametrize("name", list(ERRORS))
def test_sparse_errors_match_cpu(name, layout):
    """Bad products raise PyTorch's CPU error, message included, for each layout."""
    def run(device):
        s = _LAYOUTS[layout](_coo("cpu").to_dense()).to(device)
        return ERRORS[name](s, device)

    with pytest.raises(RuntimeError) as cpu_err:
        run("cpu")
    with native_only(), pytest.raises(RuntimeError) as dev_err:
        run(DEV)
    assert type(dev_err.value) is type(cpu_err.value)
    assert str(dev_err.value) == str(cpu_err.value)


def test_compressed_product_with_a_3d_dense_matrix_raises_cpu_error():
    def run(device):
        return torch.mm(_csr(device), torch.randn(6, 3, 2).to(device))

    with pytest.raises(RuntimeError) as cpu_err:
        run("cpu")
    with native_only(), pytest.raises(RuntimeError) as dev_err:
        run(DEV)
    assert str(dev_err.value) == str(cpu_err.value)


def test_to_sparse_dim_error_matches_cpu():
    with pytest.raises(RuntimeError) as cpu_err:
        _X.to_sparse(3)
    with native_only(), pytest.raises(RuntimeError) as dev_err:
        _X.to(DEV).to_sparse(3)
    assert str(dev_err.value) == str(cpu_err.value)


def test_cpu_fallback_returns_sparse_coo_on_the_device():
    """An op run by the CPU fallback that returns a sparse tensor hands back a device one of
    the same layout (its indices and values moved)."""
    from torchneuron import dispatch
    aten = torch.ops.aten
    r = dispatch.cpu_fallback(aten._to_sparse.sparse_dim, _X.to(DEV), 2)
    assert r.layout == torch.sparse_coo and r.device.type == "neuron"
    assert r._indices().device.type == "neuron" and r._values().device.type == "neuron"
    torch.testing.assert_close(r.to_dense().cpu(), _X, rtol=0, atol=0)
    for op, args in [(aten._to_sparse_csr.default, ()),
                     (aten._to_sparse_bsr.default, ((1, 2),))]:
        r = dispatch.cpu_fallback(op, _X.to(DEV), *args)
        e = op(_X, *args)
        assert r.layout == e.layout and r.values().device.type == "neuron"
        assert r.crow_indices().device.type == "neuron"
        assert torch.equal(r.crow_indices().cpu(), e.crow_indices())
        assert torch.equal(r.col_indices().cpu(), e.col_indices())
        assert torch.equal(r.values().cpu(), e.values())


def test_gradient_through_to_sparse_matches_cpu():
    res = {}
    for device in ("cpu", DEV):
        x = _X.clone().to(device).requires_grad_()
        ctx = native_only() if device == DEV else warnings.catch_warnings()
        with ctx:
            y = torch.sparse.mm(x.to_sparse(), _D[:4].clone().to(device))
            (y * torch.arange(3.0).to(device)).sum().backward()
        res[device] = x.grad.cpu()
    torch.testing.assert_close(res[DEV], res["cpu"], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("crow, col", [
    ([0, 2, 3], [0, 2, 1]),  # valid
    ([1, 2, 3], [0, 1, 2]),  # first != 0
    ([0, 2, 1], [0, 1]),  # last != nnz
    ([0, 2, 3], [0, 5, 1]),  # column out of range
    ([0, 2, 2], [1, 1]),  # repeated column in a row
    ([0, 2, 3], [2, 0, 1]),  # unsorted row
])
def test_csr_invariant_checks_match_cpu(crow, col):
    def make(d):
        return torch.sparse_csr_tensor(torch.tensor(crow, device=d), torch.tensor(col, device=d),
                                       torch.ones(len(col), device=d), (2, 3),
                                       check_invariants=True)
    try:
        expected = make("cpu").to_dense()
    except RuntimeError as e:
        with native_only(), pytest.raises(RuntimeError) as got:
            make(DEV)
        assert str(got.value) == str(e)
        return
    with native_only():
        torch.testing.assert_close(make(DEV).to_dense().cpu(), expected)


@pytest.mark.parametrize("crow, col", [
    ([[0, 2, 3], [0, 1, 3]], [[0, 2, 1], [1, 0, 2]]),  # valid
    ([[0, 2, 3], [1, 1, 3]], [[0, 2, 1], [1, 0, 2]]),  # second batch's first != 0
    ([[0, 2, 3], [0, 1, 2]], [[0, 2, 1], [1, 0, 2]]),  # second batch's last != nnz
    ([[0, 2, 3], [0, 3, 0]], [[0, 2, 1], [1, 0, 2]]),  # a negative row length
    ([[0, 2, 3], [0, 1, 3]], [[0, 2, 1], [1, 0, 5]]),  # column out of range
    ([[0, 2, 3], [0, 1, 3]], [[0, 2, 1], [1, 2, 0]]),  # unsorted row in the second batch
    ([[0, 2, 3], [0, 1, 3]], [[0, 2, 1], [1, 2, 2]]),  # repeated column
])
def test_batched_csr_invariant_checks_match_cpu(crow, col):
    """check_invariants on batched compressed indices runs natively with CPU's messages."""
    def make(d):
        return torch.sparse_csr_tensor(torch.tensor(crow, device=d), torch.tensor(col, device=d),
                                       torch.ones(2, 3, device=d), (2, 2, 3),
                                       check_invariants=True)
    try:
        expected = make("cpu")
    except RuntimeError as e:
        with native_only(), pytest.raises(RuntimeError) as got:
            make(DEV)
        assert str(got.value) == str(e)
        return
    with native_only():
        got = make(DEV)
    assert got.crow_indices().cpu().tolist() == expected.crow_indices().tolist()
    assert got.col_indices().cpu().tolist() == expected.col_indices().tolist()


_R = torch.tensor([[0.0, 2, 0, 1], [0, 0, 0, 0], [3, 0, -1, 0], [1, 1, 1, 1]])


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("ties", [False, True])
def test_sparse_mm_reduce_matches_cpu(reduce, ties):
    """torch.sparse.mm(csr, dense, reduce) and its gradients (amax/amin: the first of tied
    values wins, as on the CPU); bit-equal."""
    other = torch.ones(4, 2) if ties else torch.arange(8.0).reshape(4, 2)
    grad = torch.tensor([[1.0, 2], [3, 4], [5, 6], [7, 8]])
    res = {}
    for device in ("cpu", DEV):
        a = _R.to_sparse_csr().to(device).requires_grad_()
        b = other.detach().clone().to(device).requires_grad_()
        ctx = native_only() if device == DEV else warnings.catch_warnings()
        with ctx:
            out = torch.sparse.mm(a, b, reduce)
            out.backward(grad.to(device))
            plain = torch.sparse.mm(_R.to_sparse_csr().to(device), other.detach().to(device),
                                    reduce)
        res[device] = [out.detach().cpu(), plain.cpu(), a.grad.to_dense().cpu(), b.grad.cpu()]
    assert res[DEV][2].layout == torch.strided
    for got, want in zip(res[DEV], res["cpu"]):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_sparse_mm_reduce_errors_match_cpu():
    for fn in (lambda d: torch.sparse.mm(_R.to_sparse_csr().to(d), torch.ones(4, 2).to(d),
                                         "prod"),
               lambda d: torch.sparse.mm(_R.to_sparse_csr().to(d), torch.ones(3, 2).to(d),
                                         "sum"),
               lambda d: torch.sparse.mm(_R.to_sparse_csr().to(d), torch.ones(4, 2, 1).to(d),
                                         "amax"),
               lambda d: torch.sparse.mm(_R.to_sparse_csr().to(d),
                                         torch.ones(4, 2).double().to(d), "mean")):
        with pytest.raises(RuntimeError) as cpu_err:
            fn("cpu")
        with native_only(), pytest.raises(RuntimeError) as dev_err:
            fn(DEV)
        assert str(dev_err.value) == str(cpu_err.value)

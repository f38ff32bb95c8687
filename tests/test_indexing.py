"""Indexing against PyTorch's CPU results: Python-level x[...] reads and writes, index_put,
gather/scatter, index_* ops, masks, nonzero, take/put, embedding; gradients; errors."""
import pytest
import torch
import torch.nn.functional as F

import torchneuron
from helpers import DEV, check, rand_of

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32, torch.bool]
FLOATS = [torch.float32, torch.float64]




def _grad(dtype):
    return dtype.is_floating_point and dtype != torch.bfloat16


def _leaf(t):
    return t.requires_grad_() if _grad(t.dtype) else t


LAYOUTS = {
    "contig": lambda x: x,
    "transposed": lambda x: x.transpose(0, 1),
    "strided": lambda x: x[:, ::2],
}


def _i(*v):
    return torch.tensor(v, dtype=torch.int64)


# ---------------------------------------------------------------- x[...] reads
# (name, fn(x) -> result); x has shape (6, 6, 5) after the layout view
READS = [
    ("list", lambda x: x[[0, 2, 2]]),
    ("neg_list", lambda x: x[[-1, 0, -6]]),
    ("cols", lambda x: x[:, [0, 2]]),
    ("last_dim", lambda x: x[..., [4, 0]]),
    ("newaxis", lambda x: x[..., None]),
    ("none_then_idx", lambda x: x[None, [1, 3]]),
    ("two_adjacent", lambda x: x[[0, 1], [2, 3]]),
    ("two_separated", lambda x: x[[0, 1], :, [2, 3]]),
    ("broadcast_idx", lambda x: x[_dev(x, _i(0, 1, 2))[:, None], _dev(x, _i(3, 4))]),
    ("idx_2d", lambda x: x[_dev(x, torch.tensor([[0, 5], [1, 1]]))]),
    ("dev_idx_slice", lambda x: x[1:, _dev(x, _i(1, -1))]),
    ("cpu_idx", lambda x: x[_i(3, 1)]),
    ("cpu_idx_cols", lambda x: x[:, _i(3, 1), 1:]),
    ("int32_idx", lambda x: x[_dev(x, torch.tensor([1, 2], dtype=torch.int32))]),
    ("scalar_tensor_idx", lambda x: x[_dev(x, torch.tensor(2)), [0, 1]]),
    ("int_and_list", lambda x: x[1, [0, 2]]),
    ("empty_idx", lambda x: x[_dev(x, _i())]),
    ("mask_full", lambda x: x[_dev(x, _mask(x.shape, 0))]),
    ("mask_rows", lambda x: x[_dev(x, _mask(x.shape[:1], 1))]),
    ("mask_two_dims", lambda x: x[_dev(x, _mask(x.shape[:2], 2))]),
    ("mask_cols", lambda x: x[:, _dev(x, _mask(x.shape[1:2], 3))]),
    ("mask_last", lambda x: x[..., _dev(x, _mask(x.shape[2:], 4))]),
    ("mask_cpu", lambda x: x[_mask(x.shape[:1], 5)]),
    ("mask_and_idx", lambda x: x[_dev(x, _mask(x.shape[:1], 6)).nonzero().flatten()[:1] * 0 + 1,
                                 _dev(x, _i(0))]),
    ("mask_all_false", lambda x: x[_dev(x, torch.zeros(x.shape[0], dtype=torch.bool))]),
    ("mask_all_true", lambda x: x[_dev(x, torch.ones(x.shape[:2], dtype=torch.bool))]),
    ("mask_from_values", lambda x: x[x > 0] if x.dtype != torch.bool else x[x]),
    ("mask_with_list", lambda x: x[_dev(x, torch.tensor([True, False, True, True, False, True])),
                                   [0, 1, 2, 3]]),
]


def _dev(x, t):
    return t.to(x.device)


def _mask(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) > 0.5


@pytest.mark.parametrize("layout", list(LAYOUTS), ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name,fn", READS, ids=[r[0] for r in READS])
def test_getitem(name, fn, dtype, layout):
    shape = (6, 12, 5) if layout == "strided" else (6, 6, 5)
    x = _leaf(rand_of(shape, dtype))
    lay = LAYOUTS[layout]
    check(lambda x: fn(lay(x)), x, grad=_grad(dtype))


# ---------------------------------------------------------------- x[...] = v, x[...] += v
def _set(idx_fn, value_fn, op="set"):
    def f(x, v):
        x = x.clone()
        idx = idx_fn(x)
        val = value_fn(x, v)
        if op == "set":
            x[idx] = val
        else:
            x[idx] += val
        return x
    return f


WRITES = [
    ("scalar", _set(lambda x: [0, 2], lambda x, v: 3)),
    ("tensor_bcast", _set(lambda x: [0, 2], lambda x, v: v[0])),
    ("tensor_full", _set(lambda x: _dev(x, _i(-1, 0)), lambda x, v: v[:2])),
    ("cols", _set(lambda x: (slice(None), [1, 3]), lambda x, v: v[:, :2])),
    ("two_idx", _set(lambda x: ([0, 1, 2], [3, 3, 0]), lambda x, v: v[0, :3])),
    ("cpu_idx", _set(lambda x: _i(4, 1), lambda x, v: v[2:4])),
    ("mask_scalar", _set(lambda x: _dev(x, _mask(x.shape, 1)), lambda x, v: 7)),
    ("mask_rows_scalar", _set(lambda x: _dev(x, _mask(x.shape[:1], 2)), lambda x, v: 7)),
    ("mask_cols_scalar", _set(lambda x: (slice(None), _dev(x, _mask(x.shape[1:], 3))),
                              lambda x, v: 7)),
    ("mask_tensor", _set(lambda x: _dev(x, torch.tensor([True, False, True, False, False, True])),
                         lambda x, v: v[:3])),
    ("mask_bcast_row", _set(lambda x: _dev(x, _mask(x.shape[:1], 4)), lambda x, v: v[0])),
    ("mask_cpu", _set(lambda x: _mask(x.shape, 5), lambda x, v: 1)),
    ("iadd_idx", _set(lambda x: [0, 3], lambda x, v: v[:2], "iadd")),
    ("iadd_dup_idx", _set(lambda x: [1, 1, 4], lambda x, v: 1, "iadd")),
    ("iadd_mask", _set(lambda x: _dev(x, _mask(x.shape, 6)), lambda x, v: 2, "iadd")),
    ("iadd_mask_rows", _set(lambda x: _dev(x, _mask(x.shape[:1], 7)), lambda x, v: v[0], "iadd")),
    ("ellipsis_idx", _set(lambda x: (Ellipsis, [0, 2]), lambda x, v: v[:, :2])),
]


# `+=` on bool tensors is not defined (CPU raises too): those pairs are not generated
SETITEM_CASES = [(n, f, d) for n, f in WRITES for d in DTYPES
                 if not (d == torch.bool and "iadd" in n)]


@pytest.mark.parametrize("name,fn,dtype", SETITEM_CASES,
                         ids=[f"{n}-{d}" for n, _, d in SETITEM_CASES])
def test_setitem(name, fn, dtype):
    x = _leaf(rand_of((6, 4), dtype))
    v = _leaf(rand_of((6, 4), dtype))
    check(fn, x, v, grad=_grad(dtype))


def test_setitem_inplace_view_direct():
    def f(base, v):
        view = base.t()[:, 1:]
        view[[0, 2]] = v[:2]
        view[view > 0] = 0.5
        view[:, [1, 2]] += 1
        return base
    check(f, rand_of((5, 6)), rand_of((6, 4)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(dtype, accumulate):
    x = _leaf(rand_of((5, 4, 3), dtype))
    v = _leaf(rand_of((3, 3), dtype))
    idx0 = _i(0, 4, 0) if accumulate else _i(0, 4, 2)  # duplicates only when accumulating
    idx1 = _i(1, -1, 2)
    g = _grad(dtype)
    check(lambda x, v, a, b: x.index_put((a, b), v, accumulate=accumulate), x, v, idx0, idx1,
          grad=g)
    check(lambda x, v, a: torch.ops.aten.index_put(x, [None, a], v[0], accumulate), x, v, idx1,
          grad=g)
    check(lambda x, v, a: torch.ops.aten._unsafe_index_put(x, [a], v[0, 0], accumulate), x, v, idx0,
          grad=g)
    check(lambda x, v, a: torch.ops.aten._index_put_impl_(x.clone(), [a], v[0], accumulate),
          x.detach(), v.detach(), idx0)
    check(lambda x, v, a: x.clone().index_put_((a,), v[0, :1], accumulate=accumulate), x, v, idx0,
          grad=g)


def test_index_put_accumulate_many_dups():
    x = torch.zeros(4, 3)
    idx = torch.randint(0, 4, (100,))
    v = torch.randn(100, 3)
    check(lambda x, i, v: x.index_put((i,), v, accumulate=True), x, idx, v, atol=1e-5, rtol=1e-5)
    xi = torch.zeros(4, dtype=torch.int64)
    check(lambda x, i: x.index_put((i,), torch.ones_like(i), accumulate=True), xi, idx)


def test_unsafe_index():
    x = rand_of((4, 5)).requires_grad_()
    check(lambda x, i: torch.ops.aten._unsafe_index(x, [None, i]), x, _i(4, 0, 0), grad=True)
    check(lambda x, i: torch.ops.aten._unsafe_index(x, [i[:, None], i]), x, _i(3, 1), grad=True)


def test_getitem_empty_and_0d():
    x = rand_of((0, 3)).requires_grad_()
    check(lambda x: x[[]], x)
    check(lambda x: x[:, [0, 2]], x, grad=True)
    check(lambda x: x[x > 0], x, grad=True)
    y = torch.tensor(3.5, requires_grad=True)
    check(lambda y: y[None], y, grad=True)
    check(lambda y: y[..., None][[0, 0]], y, grad=True)
    z = rand_of((4, 0, 2))
    check(lambda z: z[[1, 2]], z)
    check(lambda z: z[:, :, [1]], z)


# ---------------------------------------------------------------- gather / scatter
@pytest.mark.parametrize("layout", ["contig", "transposed"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dim, dtype, layout):
    x = _leaf(rand_of((5, 6), dtype))
    n = 5 if dim == 0 and layout == "contig" or dim != 0 and layout == "transposed" else 6
    idx = torch.randint(0, n, (4, 3))
    lay = LAYOUTS[layout]
    check(lambda x, i: torch.gather(lay(x), dim, i), x, idx, grad=_grad(dtype))
    check(lambda x, i: torch.gather(lay(x), dim, i.t()), x, idx[:3, :3], grad=_grad(dtype))
    check(lambda x, i: torch.take_along_dim(lay(x), i, dim), x, idx[:1, :1], grad=_grad(dtype))


def test_gather_edge():
    x = torch.tensor(2.0, requires_grad=True)
    check(lambda x: torch.gather(x, 0, torch.tensor(0, device=x.device)), x, grad=True)
    y = rand_of((3, 4)).requires_grad_()
    check(lambda y, i: torch.gather(y, 1, i), y, torch.zeros(3, 0, dtype=torch.long), grad=True)
    check(lambda y, i: torch.take_along_dim(y, i), y, _i(11, 0, 5), grad=True)


SCATTER_REDUCES = ["sum", "prod", "mean", "amax", "amin"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32,
                                   torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter(dtype, dim):
    x = _leaf(rand_of((4, 5), dtype))
    src = _leaf(rand_of((3, 4), dtype))
    n = x.shape[dim]
    # unique targets along dim for scatter (a set without duplicates is deterministic)
    idx = torch.stack([torch.randperm(n)[:3] for _ in range(4)], 1) if dim == 0 else \
        torch.stack([torch.randperm(n)[:4] for _ in range(3)], 0)
    g = _grad(dtype)
    atol = 1e-2 if dtype == torch.bfloat16 else None
    check(lambda x, s, i: x.scatter(dim, i, s), x, src, idx, grad=g)
    check(lambda x, i: x.scatter(dim, i, 2.5 if dtype.is_floating_point else 3), x, idx, grad=g)
    dup = torch.randint(0, n, idx.shape)
    check(lambda x, s, i: x.scatter_add(dim, i, s), x, src, dup, grad=g, atol=atol, rtol=atol)
    check(lambda x, s, i: x.scatter(dim, i, s, reduce="add"), x.detach(), src.detach(), dup,
          atol=atol, rtol=atol)
    check(lambda x, s, i: x.scatter(dim, i, s, reduce="multiply"), x.detach(), src.detach(), dup,
          atol=atol, rtol=atol)
    check(lambda x, i: x.scatter(dim, i, 2, reduce="multiply"), x.detach(), dup)
    check(lambda x, s, i: x.clone().scatter_add_(dim, i, s), x, src, dup, grad=g, atol=atol,
          rtol=atol)
    check(lambda x, s, i: x.t().scatter(1 - dim, i.t(), s.t()), x, src, idx, grad=g)


def _reduce_operands(xshape, sshape, dtype):
    """Operands for reducing scatters: floats in [0.5, 1.5) keep prod gradients well
    conditioned and ties out of amax/amin."""
    if dtype.is_floating_point:
        return torch.rand(xshape, dtype=dtype) + 0.5, torch.rand(sshape, dtype=dtype) + 0.5
    return rand_of(xshape, dtype), rand_of(sshape, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32],
                         ids=str)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", SCATTER_REDUCES)
def test_scatter_reduce(reduce, include_self, dtype):
    x, src = _reduce_operands((4, 5), (6, 5), dtype)
    idx = torch.randint(0, 4, (6, 5))
    g = _grad(dtype)
    check(lambda x, s, i: x.scatter_reduce(0, i, s, reduce, include_self=include_self),
          _leaf(x), _leaf(src), idx, grad=g, atol=1e-5, rtol=1e-5)
    check(lambda x, s, i: x.clone().scatter_reduce_(1, i[:4, :3], s[:4], reduce,
                                                    include_self=include_self),
          x, src, idx % 5)


# ---------------------------------------------------------------- index_* ops
@pytest.mark.parametrize("layout", ["contig", "transposed"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1])
def test_index_select(dim, dtype, layout):
    x = _leaf(rand_of((5, 5), dtype))
    lay = LAYOUTS[layout]
    idx = _i(4, 0, 0, 2)
    check(lambda x, i: torch.index_select(lay(x), dim, i), x, idx, grad=_grad(dtype))
    check(lambda x, i: torch.index_select(lay(x), dim, i[:0]), x, idx, grad=_grad(dtype))
    check(lambda x, i: torch.index_select(lay(x), dim, i[::2].int()), x, idx)


def test_index_select_0d():
    x = torch.tensor(1.5, requires_grad=True)
    check(lambda x: torch.index_select(x, 0, torch.tensor([0], device=x.device)), x, grad=True)
    check(lambda x: torch.index_select(x, 0, torch.tensor(0, device=x.device)), x, grad=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32,
                                   torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_add_copy_fill(dim, dtype):
    x = _leaf(rand_of((4, 5), dtype))
    n = x.shape[dim]
    m = 3
    src_shape = list(x.shape)
    src_shape[dim] = m
    src = _leaf(rand_of(tuple(src_shape), dtype))
    dup = torch.randint(0, n, (m,))
    uniq = torch.randperm(n)[:m]
    g = _grad(dtype)
    atol = 1e-2 if dtype == torch.bfloat16 else None
    check(lambda x, s, i: x.index_add(dim, i, s), x, src, dup, grad=g, atol=atol, rtol=atol)
    alpha = 2 if not dtype.is_floating_point else 0.5
    check(lambda x, s, i: x.index_add(dim, i, s, alpha=alpha), x, src, dup, grad=g, atol=atol,
          rtol=atol)
    check(lambda x, s, i: x.index_copy(dim, i, s), x, src, uniq, grad=g)
    check(lambda x, i: x.index_fill(dim, i, 3), x, dup, grad=g)
    check(lambda x, i: x.index_fill(dim, -i - 1, 3), x, dup, grad=g)
    check(lambda x, v, i: x.index_fill(dim, i, v), x, torch.tensor(2, dtype=dtype), dup, grad=g)
    check(lambda x, s, i: x.clone().index_add_(dim, i, s), x, src, dup, grad=g, atol=atol,
          rtol=atol)
    check(lambda x, s, i: x.t().index_add(1 - dim % 2, i, s.t()), x, src, dup, grad=g, atol=atol,
          rtol=atol)


def test_index_fill_bool_and_0d():
    x = rand_of((3, 4), torch.bool)
    check(lambda x: x.index_fill(1, torch.tensor([0, 3], device=x.device), True), x)
    y = torch.tensor(1.0, requires_grad=True)
    check(lambda y: y.index_fill(0, torch.tensor([0], device=y.device), 5.0), y, grad=True)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64], ids=str)
def test_index_reduce(reduce, include_self, dtype):
    x, src = _reduce_operands((5, 3), (4, 3), dtype)
    idx = _i(0, 4, 0, 2)
    g = _grad(dtype)
    check(lambda x, s, i: x.index_reduce(0, i, s, reduce, include_self=include_self),
          _leaf(x), _leaf(src), idx, grad=g, atol=1e-5, rtol=1e-5)
    check(lambda x, s, i: x.t().index_reduce(0, i[:3] % 3, s.t(), reduce,
                                             include_self=include_self), x, x.flip(0), idx)


# ---------------------------------------------------------------- masks
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masked_fill(dtype):
    x = _leaf(rand_of((4, 5), dtype))
    m = _mask((4, 5), 0)
    g = _grad(dtype)
    val = True if dtype == torch.bool else 3
    check(lambda x, m: x.masked_fill(m, val), x, m, grad=g)
    check(lambda x, m: x.masked_fill(m[0], val), x, m, grad=g)            # broadcast mask
    check(lambda x, m: x.t().masked_fill(m.t(), val), x, m, grad=g)
    check(lambda x, m, v: x.masked_fill(m, v), x, m, _leaf(rand_of((), dtype)), grad=g)
    check(lambda x, m: x.masked_fill(m, torch.tensor(val)), x, m, grad=g)   # CPU 0-d value
    check(lambda x, m: x.clone().masked_fill_(m[:, :1], val), x, m, grad=g)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masked_scatter_select(dtype):
    x = _leaf(rand_of((4, 5), dtype))
    m = _mask((4, 5), 1)
    src = _leaf(rand_of((4, 5), dtype))
    g = _grad(dtype)
    check(lambda x, m, s: x.masked_scatter(m, s), x, m, src, grad=g)
    check(lambda x, m, s: x.masked_scatter(m[1], s), x, m, src, grad=g)
    check(lambda x, m, s: x.t().masked_scatter(m.t(), s[:, :4]), x, m, src, grad=g)
    check(lambda x, m: x.masked_select(m), x, m, grad=g)
    check(lambda x, m: x.masked_select(m[2]), x, m, grad=g)
    check(lambda x, m: x[0].masked_select(m), x, m, grad=g)              # broadcast self
    check(lambda x, m: x.t().masked_select(m.t()), x, m, grad=g)
    check(lambda x, m: x.masked_select(m & False), x, m, grad=g)
    check(lambda x, m: torch.masked_select(x, m, out=torch.empty(0, dtype=x.dtype,
                                                                 device=x.device)),
          x.detach(), m)


@pytest.mark.parametrize("dtype", DTYPES + [torch.uint8, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (0, 3), ()], ids=str)
def test_nonzero(dtype, shape):
    x = rand_of(shape, dtype) if dtype != torch.uint8 else torch.randint(0, 2, shape,
                                                                        dtype=torch.uint8)
    if dtype.is_floating_point and x.numel():
        x = torch.where(x > 0, x, torch.zeros_like(x))
    check(torch.nonzero, x)
    check(lambda x: torch.nonzero(x, as_tuple=True), x)
    check(torch.argwhere, x)
    if x.dim():
        check(lambda x: torch.where(x != 0), x)
        check(lambda x: torch.nonzero_static(x, size=5), x)
        check(lambda x: torch.nonzero_static(x, size=40, fill_value=-7), x)
        check(lambda x: torch.nonzero(x.transpose(0, -1)), x)
        check(lambda x: torch.nonzero(x, out=torch.empty(0, dtype=torch.long, device=x.device)), x)


def test_nonzero_buckets():
    """Counts that share a power-of-two bucket reuse one executable and stay exact."""
    for k in [0, 1, 2, 3, 5, 8, 9, 31, 32, 33, 64]:
        x = torch.zeros(64)
        x[torch.randperm(64)[:k]] = 1
        check(torch.nonzero, x)
        check(lambda x: x[x > 0], x)
        check(lambda x: x.masked_select(x > 0), x)


# ---------------------------------------------------------------- take / put
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_take_put(dtype):
    x = _leaf(rand_of((4, 5), dtype))
    idx = torch.tensor([[0, 19], [-1, 7], [3, 3]])
    g = _grad(dtype)
    check(lambda x, i: torch.take(x, i), x, idx, grad=g)
    check(lambda x, i: torch.take(x.t(), i), x, idx, grad=g)
    check(lambda x, i: torch.take(x, i[:0]), x, idx, grad=g)
    src = _leaf(rand_of((4,), dtype))
    uniq = _i(0, -1, 7, 12)
    check(lambda x, i, s: x.put(i, s), x, uniq, src, grad=g)
    check(lambda x, i, s: x.clone().put_(i, s), x, uniq, src, grad=g)
    if dtype != torch.bool:
        dup = _i(0, 0, -20, 5)
        atol = 1e-2 if dtype == torch.bfloat16 else None
        check(lambda x, i, s: x.put(i, s, accumulate=True), x, dup, src, grad=g, atol=atol)
        check(lambda x, i, s: x.t().put(i, s, accumulate=True), x, dup, src, grad=g, atol=atol)


# ---------------------------------------------------------------- embedding
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
@pytest.mark.parametrize("scale", [False, True])
def test_embedding(dtype, padding_idx, scale):
    w = _leaf(rand_of((10, 4), dtype))
    idx = torch.tensor([[0, 2, 9], [2, 2, 5]])
    atol = 2e-2 if dtype == torch.bfloat16 else 1e-6
    check(lambda w, i: F.embedding(i, w, padding_idx=padding_idx, scale_grad_by_freq=scale), w,
          idx, grad=_grad(dtype), atol=atol, rtol=atol)
    check(lambda w, i: F.embedding(i.t(), w.t().contiguous().t(), padding_idx=padding_idx,
                                   scale_grad_by_freq=scale), w, idx, grad=_grad(dtype),
          atol=atol, rtol=atol)
    check(lambda w, i: F.embedding(i[0, 0], w, padding_idx=padding_idx), w, idx,
          grad=_grad(dtype), atol=atol, rtol=atol)
    check(lambda w, i: F.embedding(i[:0], w, padding_idx=padding_idx), w, idx, grad=_grad(dtype))


def test_embedding_module_training_step():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(20, 8, padding_idx=0)
    idx = torch.randint(0, 20, (4, 6))
    ref = torch.nn.Embedding(20, 8, padding_idx=0)
    ref.load_state_dict(emb.state_dict())
    emb = emb.to(DEV)
    with torchneuron.fallback_policy("error"):
        out = emb(idx.to(DEV)).sum()
        out.backward()
    ref(idx).sum().backward()
    torch.testing.assert_close(emb.weight.grad.cpu(), ref.weight.grad)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_embedding_bag(mode, dtype):
    w = rand_of((10, 3), dtype).requires_grad_()
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    offsets = torch.tensor([0, 3, 3, 6])
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode), w, idx, offsets, grad=True)
    check(lambda w, i: F.embedding_bag(i.view(2, 4), w, mode=mode), w, idx, grad=True)
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, include_last_offset=True), w, idx,
          torch.tensor([0, 3, 3, 6, 8]), grad=True)
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=4), w, idx, offsets,
          grad=True)
    if mode == "sum":
        psw = torch.rand(8, dtype=dtype).requires_grad_()
        check(lambda w, i, o, p: F.embedding_bag(i, w, o, mode=mode, per_sample_weights=p), w, idx,
              offsets, psw, grad=True)
    # the auxiliary results (offset2bag, bag_size, max_indices) are backend-specific
    check(lambda w, i, o: torch.ops.aten._embedding_bag(w, i, o, False,
                                                        ["sum", "mean", "max"].index(mode))[0],
          w.detach(), idx, offsets)
    check(lambda w, i, o: torch.ops.aten._embedding_bag_forward_only(
        w, i, o, False, ["sum", "mean", "max"].index(mode))[0], w.detach(), idx, offsets)


def test_one_hot():
    idx = torch.tensor([[0, 3], [2, 1]])
    check(lambda i: F.one_hot(i, 5), idx)
    check(lambda i: F.one_hot(i), idx)


# ---------------------------------------------------------------- out-of-range indices
OOB = [
    ("getitem", lambda x, i: x[i], IndexError, "index 10 is out of bounds for dimension 0 with size 5"),
    ("getitem_neg", lambda x, i: x[-i - 1], IndexError, "index -11 is out of bounds for dimension 0 with size 5"),
    ("getitem_cols", lambda x, i: x[:, i], IndexError, "index 10 is out of bounds for dimension 0 with size 4"),
    ("getitem_two", lambda x, i: x[[1, 1], i], IndexError, "index 10 is out of bounds for dimension 1 with size 4"),
    ("setitem", lambda x, i: x.index_put_((i,), torch.tensor(1.0, device=x.device)), IndexError,
     "index 10 is out of bounds for dimension 0 with size 5"),
    ("setitem_acc", lambda x, i: x.index_put_((i,), torch.tensor(1.0, device=x.device), True),
     IndexError, "index 10 is out of bounds"),
    ("gather", lambda x, i: x.gather(0, i[:, None]), RuntimeError,
     "index 10 is out of bounds for dimension 0 with size 5"),
    ("gather_neg", lambda x, i: x.gather(0, -i[:, None] * 0 - 1), RuntimeError,
     "index -1 is out of bounds for dimension 0 with size 5"),
    ("scatter", lambda x, i: x.scatter(0, i[:, None], 1.0), RuntimeError, "index 10 is out of bounds"),
    ("scatter_add", lambda x, i: x.scatter_add(0, i[:, None], x[:2, :1]), RuntimeError,
     "index 10 is out of bounds"),
    ("scatter_reduce", lambda x, i: x.scatter_reduce(0, i[:, None], x[:2, :1], "amax"),
     RuntimeError, "index 10 is out of bounds"),
    ("index_select", lambda x, i: x.index_select(0, i), IndexError, "index out of range in self"),
    ("index_add", lambda x, i: x.index_add(0, i, x[:2]), RuntimeError, "index 10 is out of bounds"),
    ("index_copy", lambda x, i: x.index_copy(0, i, x[:2]), IndexError, "index_copy_\\(\\): index 10"),
    ("index_fill", lambda x, i: x.index_fill(0, i, 1.0), IndexError, "index 10 is out of bounds"),
    ("index_reduce", lambda x, i: x.index_reduce(0, i, x[:2], "amax"), IndexError,
     "index out of range in self"),
    ("take", lambda x, i: x.take(i * 3), IndexError, "tried to access index 30 on a tensor of 20"),
    ("put", lambda x, i: x.put(i * 3, x[0, :2]), IndexError, "tried to access index 30"),
    ("embedding", lambda x, i: F.embedding(i, x), IndexError, "index out of range in self"),
    ("inplace_scatter", lambda x, i: x.scatter_(0, i[:, None], 1.0), RuntimeError,
     "index 10 is out of bounds"),
]


# index tensors on the device, and (indexing only: other ops refuse a CPU index tensor
# for a device tensor, see test_cpu_index_tensor_for_device_op) on the CPU
OOB_CASES = [(o, "neuron") for o in OOB] + [(o, "cpu") for o in OOB
                                           if o[0].startswith(("getitem", "setitem"))]


@pytest.mark.parametrize("case,where", OOB_CASES, ids=[f"{o[0]}-{w}" for o, w in OOB_CASES])
def test_out_of_range(case, where):
    name, fn, exc, msg = case
    x = torch.randn(5, 4)
    i = torch.tensor([0, 10])
    with pytest.raises(exc, match=msg):
        fn(x.clone(), i)  # PyTorch's own error on CPU
    xd = x.to(DEV)
    idev = i.to(DEV) if where == "neuron" else i
    with torchneuron.fallback_policy("error"):
        with pytest.raises(exc, match=msg):
            fn(xd, idev)
    torch.testing.assert_close(xd.cpu(), x)  # nothing was written


def test_bounds_check_is_remembered_while_the_buffer_is_unchanged(monkeypatch):
    """An index view found in range is not read back again while its buffer is the same
    array; a write to the index (a new array) or another view of it is checked again."""
    from torchneuron.dispatch import bounds

    reads = []
    real = bounds._bad_on_device
    monkeypatch.setattr(bounds, "_bad_on_device", lambda ts, b: reads.append(1) or real(ts, b))
    x = torch.randn(5, 4)
    xd = x.to(DEV)
    i = torch.tensor([0, 3, 1, 10], device=DEV)
    for _ in range(3):
        torch.testing.assert_close(xd.index_select(0, i[:3]).cpu(), x[[0, 3, 1]])
    assert len(reads) == 1
    with pytest.raises(IndexError, match="index out of range in self"):
        xd.index_select(0, i[1:])  # another view of the same buffer: checked
    with pytest.raises(IndexError, match="index out of range in self"):
        xd.index_select(0, i)
    i[1] = 7  # a write: the view checked before is checked again
    with pytest.raises(IndexError, match="index out of range in self"):
        xd.index_select(0, i[:3])
    i[1] = 4
    torch.testing.assert_close(xd.index_select(0, i[:3]).cpu(), x[[0, 4, 1]])
    torch.testing.assert_close(F.embedding(i[:3], xd).cpu(), x[[0, 4, 1]])
    with pytest.raises(IndexError, match="index out of range in self"):
        F.embedding(i[:3], xd[:4])  # the same view against a smaller bound


# (gather_neg makes its own out-of-range index: not a device question)
CPU_INDEX_OPS = [o for o in OOB if not o[0].startswith(("getitem", "setitem", "gather_neg"))]


@pytest.mark.parametrize("case", CPU_INDEX_OPS, ids=[o[0] for o in CPU_INDEX_OPS])
def test_cpu_index_tensor_for_device_op(case):
    # like CUDA: a (non-0-d) CPU index tensor is a device mismatch outside Python indexing
    fn = case[1]
    xd = torch.randn(5, 4, device=DEV)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        fn(xd, torch.tensor([0, 1]))


def test_index_errors():
    x = torch.randn(3, 4, device=DEV)
    with pytest.raises(IndexError, match="The shape of the mask \\[2\\] at index 0 does not match "
                                         "the shape of the indexed tensor \\[3, 4\\] at index 1"):
        x[:, torch.tensor([True, False], device=DEV)]
    with pytest.raises(IndexError, match="tensors used as indices must be long"):
        x[torch.tensor([1.0], device=DEV)]
    with pytest.raises(RuntimeError, match="shape mismatch"):
        x[torch.tensor([0, 1], device=DEV)] = torch.ones(3, 4, device=DEV)
    with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes"):
        x.index_put_((torch.tensor([0], device=DEV),), torch.ones(1, 4, dtype=torch.float64,
                                                                  device=DEV))
    with pytest.raises(RuntimeError, match="masked_select: expected BoolTensor"):
        x.masked_select(torch.ones(4, device=DEV))
    with pytest.raises(RuntimeError, match="must match the size"):
        x.masked_select(torch.ones(5, dtype=torch.bool, device=DEV))
    with pytest.raises(RuntimeError, match="Number of elements of source < number of ones"):
        x.masked_scatter(torch.ones(3, 4, dtype=torch.bool, device=DEV), torch.ones(5, device=DEV))
    with pytest.raises(RuntimeError, match="Expected dtype int32/int64 for index"):
        x.gather(0, torch.tensor([[0]], dtype=torch.int32, device=DEV).float())


def test_index_checks_can_be_disabled():
    x = torch.randn(5, 4, device=DEV)
    prev = torchneuron.set_index_checks(False)
    try:
        r = x.index_select(0, torch.tensor([10], device=DEV))  # no sync, no error: filled
        assert torch.isnan(r.cpu()).all()
    finally:
        torchneuron.set_index_checks(prev)


def test_ops_are_native():
    """Every op here runs through a lowering or kernel: no decomposition, no CPU fallback."""
    torchneuron.reset_fallback_stats()
    x = torch.randn(5, 4, device=DEV, requires_grad=True)
    i = torch.tensor([0, 3, 3], device=DEV)
    ys = [x[i], x[:, i[:2]], x[x > 0], x.gather(0, i[:, None].expand(3, 4)),
          x.index_select(0, i), x.masked_fill(x > 0, 1.0), x.take(i), F.embedding(i, x)]
    sum(y.sum() for y in ys).backward()
    with torch.no_grad():
        x[i] = 1.0
        x[x > 0] = 2.0
        x.index_add_(0, i, torch.ones(3, 4, device=DEV))
        x.scatter_(0, i[:, None].expand(3, 4), 0.0)
        torch.nonzero(x)
    assert torchneuron.decomposition_stats() == {}
    assert torchneuron.fallback_stats() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=str)
@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3.0, float("inf")])
def test_embedding_max_norm(norm_type, dtype):
    # embedding_renorm_: the selected rows above max_norm are scaled in place (repeated
    # indices once); the halves follow CPU's rounding exactly, float32/64 to the norm's ulp
    w = (torch.randn(10, 4, dtype=torch.float64) * 2).to(dtype)
    idx = torch.tensor([[1, 3, 3], [9, 0, 1]])
    tol = {} if dtype in (torch.float16, torch.bfloat16) else dict(atol=1e-12, rtol=1e-6)
    check(lambda w, i: F.embedding(i, w, max_norm=1.5, norm_type=norm_type), w, idx, **tol)
    # through the module, then a training step (the forward after the renorm is differentiable)
    if dtype == torch.float32:
        emb = torch.nn.Embedding(10, 4, max_norm=1.0)
        emb.weight.data.mul_(3)
        check(lambda w, i: F.embedding(i, w, max_norm=1.0).sum(0), emb.weight.detach().clone()
              .requires_grad_(), idx, grad=True, atol=1e-6, rtol=1e-6)


def _warnings_and_result(fn, device):
    import warnings
    x = torch.arange(6.0).reshape(2, 3)[:1].to(device).expand(4, 3)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            fn(x, device)
            out = x.cpu()
        except RuntimeError as e:
            out = str(e)
    return out, sorted({str(m.message).split(" (Triggered internally")[0] for m in w})


EXPANDED_WRITES = {
    "index_put_": lambda x, d: x.index_put_((torch.tensor([1], device=d),),
                                            torch.tensor(9.0, device=d)),
    "setitem_index": lambda x, d: x.__setitem__(
        (torch.tensor([1, 2], device=d), torch.tensor([2, 0], device=d)), 5.0),
    "masked_fill_": lambda x, d: x.masked_fill_(torch.tensor([True, False, True], device=d), 2.0),
    "setitem_mask": lambda x, d: x.__setitem__(torch.tensor([[True, False, True]] * 4, device=d),
                                               7.0),
    "index_fill_": lambda x, d: x.index_fill_(1, torch.tensor([0], device=d), -1.0),
    "fill_": lambda x, d: x.fill_(3.0),
    "zero_": lambda x, d: x.zero_(),
    "add_": lambda x, d: x.add_(1.0),  # refused: TensorIterator's overlap error
    "copy_": lambda x, d: x.copy_(torch.ones(4, 3, device=d)),
}


@pytest.mark.parametrize("name", list(EXPANDED_WRITES))
def test_writes_into_expanded_tensors_like_cpu(name):
    """CPU writes fill_/zero_ through an expanded (self-overlapping) tensor, index_put_,
    masked_fill_ and index_fill_ with a deprecation warning, and refuses the others
    (was: every write refused)."""
    fn = EXPANDED_WRITES[name]
    expected = _warnings_and_result(fn, "cpu")
    actual = _warnings_and_result(fn, DEV)
    assert actual[1] == expected[1]
    if isinstance(expected[0], str):
        assert actual[0] == expected[0]
    else:
        assert torch.equal(actual[0], expected[0])


UINT8_MASK_ROWS = {
    "get": lambda x, m, d: x[m],
    "get_mask_and_int": lambda x, m, d: x[m, 1],
    "set_tensor": lambda x, m, d: x.__setitem__(m, torch.ones(3, device=d)),
    "set_scalar": lambda x, m, d: x.__setitem__(m, 1.0),  # CPU: masked_fill_ refuses
    "index_put_scalar": lambda x, m, d: x.index_put_((m,), torch.tensor(2.0, device=d)),
    "index_put_accumulate": lambda x, m, d: x.index_put_((m,), torch.tensor(2.0, device=d),
                                                         accumulate=True),
    "bool_control": lambda x, m, d: x[m.bool()],
}


@pytest.mark.parametrize("name", list(UINT8_MASK_ROWS))
def test_uint8_masks_warn_and_refuse_like_cpu(name):
    """A uint8 mask index warns 'indexing with dtype torch.uint8 is now deprecated' like
    CPU's expandTensors (was: silent), and where CPU's index_put_ dispatches to
    masked_fill_ (one mask, one value, no accumulate) it refuses the byte mask."""
    import warnings

    def run(d):
        x = torch.arange(6.0).reshape(2, 3).to(d)
        m = torch.tensor([1, 0], dtype=torch.uint8).to(d)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                r = UINT8_MASK_ROWS[name](x, m, d)
                out = (r if r is not None else x).cpu()
            except RuntimeError as e:
                out = str(e)
        return out, [str(a.message).split(" (Triggered internally")[0] for a in w]

    expected, got = run("cpu"), run(DEV)
    assert got[1] == expected[1]
    if isinstance(expected[0], str):
        assert got[0] == expected[0]
    else:
        assert torch.equal(got[0], expected[0])

"""Eager `cat` into bucket-sized cells (kernels/shape.py): a tensor grown by one `cat` a
step compiles one executable per bucket, not per length, and every result equals the
CPU's (values, shape, strides, storage size, errors)."""
import pytest
import torch

from helpers import DEV, assert_same, tiny_gpt2_pair
from torchneuron import storage
from torchneuron.dispatch import entry
from torchneuron.kernels import shape as shape_kernels
from torchneuron.storage import lazy
from torchneuron.storage import transfer

FUSED = lazy.fused  # fused eager records cat in its programs: no bucket-sized cells


def _built(kind):
    return sum(1 for k in transfer._device_fns if isinstance(k, tuple) and k[0] == kind)


def _same(got, want, msg=""):
    assert got.shape == want.shape and got.dtype == want.dtype, (msg, got.shape, want.shape)
    assert got.stride() == want.stride(), (msg, got.stride(), want.stride())
    assert got.untyped_storage().nbytes() == want.untyped_storage().nbytes(), msg
    assert_same(got, want, atol=0, rtol=0, msg=msg)


def _key(qkv):
    """The key as GPT-2 makes it from its projection: split, then transposed (a strided
    view at an offset)."""
    return qkv.split(64, dim=2)[1].view(1, 1, 4, 16).transpose(1, 2)


COPIES = pytest.mark.parametrize("rows", [shape_kernels.WINDOW_ROWS, 0],
                                 ids=["windowed copies", "one gather"])


@pytest.fixture
def copies(monkeypatch, rows):
    """Both of the kernel's executables: windowed row copies where rows are contiguous
    and few, else one gather (WINDOW_ROWS=0 forces it)."""
    monkeypatch.setattr(shape_kernels, "WINDOW_ROWS", rows)


@pytest.fixture
def at_once(monkeypatch):
    """Every eligible cat buckets at its first call (no churn needed first)."""
    monkeypatch.setattr(shape_kernels, "CHURN", 0)
    monkeypatch.setattr(shape_kernels, "_lengths", {})


@COPIES
@pytest.mark.skipif(FUSED, reason="fused eager records cat in its programs")
def test_a_growing_tensor_compiles_once_per_bucket(copies):
    """Ids, a float mask and a 4-d key/value cache grow by one for 150 steps (lengths
    9-158); the last position is read back each step (`x[:, -1:]`, as Hugging Face's
    stopping criteria do) and written from the host.  Executables are counted before any value is read."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (1, 8), generator=g)
    mask = torch.ones(1, 8)
    keys = torch.randn(1, 4, 8, 16, generator=g)
    d_ids, d_mask, d_keys = ids.to(DEV), mask.to(DEV), keys.to(DEV)
    eos = torch.tensor([7])
    d_eos = eos.to(DEV)
    entry.cache_misses.clear()
    cats, reads, writes = _built("bucket cat"), _built("materialize"), _built("assign")
    steps = []
    for i in range(150):
        tok = torch.randint(0, 1000, (1,), generator=g)
        qkv = torch.randn(1, 1, 3 * 64, generator=g)
        ids = torch.cat([ids, tok[:, None]], dim=-1)
        d_ids = torch.cat([d_ids, tok.to(DEV)[:, None]], dim=-1)
        mask = torch.cat([mask, mask.new_ones((1, 1))], dim=-1)
        d_mask = torch.cat([d_mask, d_mask.new_ones((1, 1))], dim=-1)
        w = torch.full((1, 1), i / 4)  # a host value written to the last position
        mask[:, -1:].copy_(w)
        d_mask[:, -1:].copy_(w)
        keys = torch.cat([keys, _key(qkv)], dim=-2)
        d_keys = torch.cat([d_keys, _key(qkv.to(DEV))], dim=-2)
        done = torch.isin(ids[:, -1:], eos).any(dim=-1)
        d_done = torch.isin(d_ids[:, -1:], d_eos).any(dim=-1)
        steps.append(((d_ids, d_mask, d_keys, d_done), (ids, mask, keys, done)))
    made_cats, made_reads = _built("bucket cat") - cats, _built("materialize") - reads
    made_writes = _built("assign") - writes
    lowered = entry.cache_misses["aten::cat"]
    for n, (got, want) in enumerate(steps):
        for a, b in zip(got, want):
            _same(a, b, f"step {n}")
    assert storage.cell_of(d_ids).numel == 256 > d_ids.numel()
    # the first CHURN lengths of each signature (ids and the mask differ in dtype) take
    # the lowered op; from then on every result is in a bucket-sized cell
    assert lowered <= 3 * shape_kernels.CHURN, entry.cache_misses
    # per stream and bucket (five each), two: the cat that enters it from the last
    # bucket's cell and the one within it; 450 (one per length) with buckets off
    assert made_cats <= 3 * 2 * 5, made_cats
    # x[:, -1:] densified for isin, and written from the host: one read and one write
    # per bucket (and per exact length before the churn), not per length (the stride of
    # a size-1 dimension is not in the key)
    assert made_reads <= 6 + shape_kernels.CHURN, made_reads
    assert made_writes <= 6 + shape_kernels.CHURN, made_writes


@pytest.mark.skipif(FUSED, reason="fused eager records cat in its programs")
def test_a_growing_tensor_with_buckets_off_compiles_per_length(monkeypatch):
    """The count above is the buckets' doing: with TORCHNEURON_EAGER_BUCKETS=0 the
    same loop builds a cat executable per length."""
    monkeypatch.setattr(shape_kernels, "LIMIT", 0)
    d_ids = torch.zeros(1, 8, dtype=torch.long, device=DEV)
    entry.cache_misses.clear()
    entry.cache_hits.clear()
    for i in range(40):
        d_ids = torch.cat([d_ids, torch.full((1, 1), i, device=DEV)], dim=-1)
    # every call the lowered op, an executable per length (unless an earlier test built it)
    assert entry.cache_misses["aten::cat"] + entry.cache_hits["aten::cat"] == 40
    assert storage.cell_of(d_ids).numel == d_ids.numel()
    assert torch.equal(d_ids.cpu()[0, 8:], torch.arange(40))


def _t(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(*shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(*shape, generator=g, dtype=dtype)
    if not dtype.is_floating_point:
        return torch.randint(-100, 100, shape, generator=g).to(dtype)
    return torch.randn(*shape, generator=g).to(dtype)


# (name, make the CPU inputs, dim, takes the bucket path)
CASES = [
    ("rows", lambda: [_t(3, 5), _t(2, 5, seed=1)], 0, True),
    ("columns", lambda: [_t(3, 5), _t(3, 1, seed=1)], 1, True),
    ("negative dim, three inputs", lambda: [_t(2, 3, 4), _t(2, 3, 1, seed=1),
                                            _t(2, 3, 7, seed=2)], -1, True),
    ("middle dim", lambda: [_t(2, 3, 4), _t(2, 5, 4, seed=1)], 1, True),
    ("one input twice", lambda: [_t(4, 4)] * 2, 1, True),
    ("transposed input", lambda: [_t(4, 3).t(), _t(3, 2, seed=1)], 1, True),
    ("slice at an offset", lambda: [_t(6, 8)[2:5, 1:7], _t(3, 2, seed=1)], 1, True),
    ("expanded (stride 0)", lambda: [_t(1, 5).expand(4, 5), _t(2, 5, seed=1)], 0, True),
    ("4-d key/value views", lambda: [_t(1, 4, 9, 16), _t(1, 1, 4, 16, seed=1).transpose(1, 2)],
     -2, True),
    ("int64", lambda: [_t(2, 9, dtype=torch.int64), _t(2, 1, dtype=torch.int64, seed=1)], 1, True),
    ("bool", lambda: [_t(5, dtype=torch.bool), _t(3, dtype=torch.bool, seed=1)], 0, True),
    ("bfloat16", lambda: [_t(2, 3, dtype=torch.bfloat16), _t(2, 3, dtype=torch.bfloat16)], 0, True),
    ("complex64", lambda: [_t(3, dtype=torch.complex64), _t(2, dtype=torch.complex64)], 0, True),
    ("a power of two (no room)", lambda: [_t(4, 4), _t(4, 4, seed=1)], 0, True),
    # the lowered op: PyTorch's promotion and layouts
    ("mixed dtypes", lambda: [_t(2, 3), _t(2, 3, dtype=torch.int64)], 0, False),
    ("channels last", lambda: [_t(2, 3, 4, 5).to(memory_format=torch.channels_last)] * 2, 1,
     False),
    ("an empty input", lambda: [_t(2, 3), _t(0, 3)], 0, False),
    ("legacy 1-d empty", lambda: [_t(2, 3), torch.tensor([])], 0, True),
    ("legacy 1-d empty first", lambda: [torch.tensor([]), _t(1, 4, 9, 16)], -2, True),
    # PyTorch's Conjugate fallback resolves the view before cat's kernel runs
    ("conjugate view", lambda: [_t(3, dtype=torch.complex64).conj(),
                                _t(2, dtype=torch.complex64)], 0, True),
    ("a single input", lambda: [_t(2, 3)], 0, False),
]


@COPIES
@pytest.mark.parametrize("name,make,dim,bucketed", CASES, ids=[c[0] for c in CASES])
def test_cat_equals_the_cpu(copies, at_once, name, make, dim, bucketed):
    xs = make()
    want = torch.cat(xs, dim)
    d = [x.to(DEV) for x in xs]
    if name == "one input twice":
        d = [d[0], d[0]]
    if name == "conjugate view":
        d = [xs[0].conj().to(DEV).conj(), d[1]]  # a lazy conjugate on the device
        assert d[0].is_conj()
    entry.cache_misses.clear()
    entry.cache_hits.clear()
    got = torch.cat(d, dim)
    _same(got, want, name)
    if not FUSED:
        lowered = entry.cache_misses["aten::cat"] + entry.cache_hits["aten::cat"]
        assert (lowered == 0) == bucketed, (entry.cache_misses, entry.cache_hits)
        cell = storage.cell_of(got)
        if bucketed:
            assert cell.numel == storage.size_class(want.numel(), 16)
        else:
            assert cell.numel == want.numel()


def test_the_result_behaves_as_its_tensor(at_once):
    """A bucket-sized result in views, eager ops, in-place writes, autograd, a second
    cat, host reads and memory statistics, as on the CPU."""
    a, b = _t(3, 5), _t(3, 2, seed=1)
    want = torch.cat([a, b], 1)
    got = torch.cat([a.to(DEV), b.to(DEV)], 1)
    _same(got.view(-1)[4:11], want.view(-1)[4:11])
    _same(got[:, 2:].sum(0), want[:, 2:].sum(0))
    _same(got.t().contiguous(), want.t().contiguous())
    _same(torch.cat([got, got * 2], 0), torch.cat([want, want * 2], 0))
    g2, w2 = got.clone(), want.clone()
    g2[:, 1] = 5.0
    w2[:, 1] = 5.0
    g2.mul_(2)
    w2.mul_(2)
    _same(g2, w2)
    _same(got, want)  # the clone was written, not the original
    x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
    dx, dy = a.to(DEV).requires_grad_(), b.to(DEV).requires_grad_()
    (torch.cat([x, y], 1) * torch.arange(7.0)).sum().backward()
    (torch.cat([dx, dy], 1) * torch.arange(7.0, device=DEV)).sum().backward()
    _same(dx.grad, x.grad)
    _same(dy.grad, y.grad)
    if not FUSED:
        before = torch.neuron.memory_allocated()
        r = torch.cat([got, got], 0)  # 42 elements in a cell of 64
        assert torch.neuron.memory_allocated() - before == 64 * 4
        _same(r, torch.cat([want, want], 0))
        del r
        assert torch.neuron.memory_allocated() == before


@pytest.mark.parametrize("args,kwargs", [
    (([torch.zeros(2, 3), torch.zeros(2, 4)], 0), {}),
    (([torch.zeros(2, 3), torch.zeros(2, 3)], 2), {}),
    (([torch.zeros(2, 3), torch.zeros(3)], 0), {}),
    (([torch.zeros(()), torch.zeros(())], 0), {}),
    (([],), {}),
])
def test_bad_cats_raise_as_on_the_cpu(args, kwargs):
    tensors, *rest = args
    with pytest.raises(Exception) as cpu:
        torch.cat(tensors, *rest, **kwargs)
    with pytest.raises(type(cpu.value)) as dev:
        torch.cat([t.to(DEV) for t in tensors], *rest, **kwargs)
    assert str(dev.value) == str(cpu.value)


@pytest.mark.skipif(FUSED, reason="fused eager records cat in its programs")
def test_a_result_over_the_limit_is_exact(monkeypatch, at_once):
    monkeypatch.setattr(shape_kernels, "LIMIT", 64)
    a = _t(5, 3)
    got = torch.cat([a.to(DEV), a.to(DEV)], 0)  # 30 floats: 120 bytes
    _same(got, torch.cat([a, a], 0))
    assert storage.cell_of(got).numel == 30


def test_hugging_face_eager_generate_grows_its_ids_in_buckets():
    """tiny GPT-2 `generate()` (dynamic cache, 70 tokens) with no host fallback: the
    ids, the attention mask and the key/value cache grow by bucket-sized cats, never
    one lowered cat per length; the tokens equal the CPU's."""
    import torchneuron

    m, d = tiny_gpt2_pair()
    ids = torch.randint(0, 1000, (1, 9), generator=torch.Generator().manual_seed(9))
    kw = dict(max_new_tokens=70, min_new_tokens=70, do_sample=False)
    want = m.generate(ids, **kw)
    entry.cache_misses.clear()
    with torchneuron.fallback_policy("error"):
        got = d.generate(ids.to(DEV), **kw)
    assert torch.equal(got.cpu(), want)
    if not FUSED:
        # the prefill's cache cats, then CHURN lengths of the caches' and of the ids' and
        # mask's signatures: then buckets (70 lowered cats per signature before)
        assert entry.cache_misses["aten::cat"] <= 2 * shape_kernels.CHURN + 1, \
            entry.cache_misses
        assert storage.cell_of(got).numel == 128 > got.numel()


@pytest.mark.skipif(FUSED, reason="fused eager records cat in its programs")
def test_fixed_shapes_keep_the_lowered_cat(monkeypatch):
    """A loop over a few fixed shapes (a training step, an evaluation with a short last
    batch) never sees more than CHURN lengths: its cats stay the lowered op (a
    concatenation, faster per call than a bucket's copies) with exact cells; a fourth
    length makes the signature bucket."""
    monkeypatch.setattr(shape_kernels, "_lengths", {})
    a = torch.randn(4, 8)
    da = a.to(DEV)
    for i in range(200):
        n = (5, 5, 5, 2)[i % 4] if i < 150 else (5, 3)[i % 2]
        b = torch.randn(4, n)
        got = torch.cat([da, b.to(DEV)], 1)
        _same(got, torch.cat([a, b], 1), f"call {i}")
        assert storage.cell_of(got).numel == got.numel(), i
    got = torch.cat([da, torch.zeros(4, 9, device=DEV)], 1)  # a fourth length
    assert storage.cell_of(got).numel == storage.size_class(got.numel(), 16) > got.numel()
    _same(got, torch.cat([a, torch.zeros(4, 9)], 1))

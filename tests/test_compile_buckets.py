"""Shape buckets in torch.compile(backend="neuron") (compile/buckets.py): a graph with
symbolic sizes runs them padded to a size class, one executable per class, where the
graph keeps the true outputs exact -- and per shape where it does not.  Every result is
compared with PyTorch's CPU result."""
import io

import pytest
import torch
import torch.nn.functional as F

from helpers import DEV, assert_same, tiny_gpt2_pair
from torchneuron import compile as tnc
from torchneuron.compile import buckets


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    tnc.reset_stats()
    yield
    torch._dynamo.reset()


def _compile(fn, **kw):
    return torch.compile(fn, backend="neuron", **kw)


def _run(f, make, lengths, **kw):
    """f compiled with dynamic=True over `lengths`, each result against the CPU's."""
    cf = _compile(f, dynamic=True, **kw)
    for n in lengths:
        args = make(n)
        want = f(*args)
        got = cf(*[a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args])
        assert_same(got, want, atol=1e-5, rtol=1e-5, msg=f"length {n}")
        for g, w in zip(got if isinstance(got, tuple) else [got],
                        want if isinstance(want, tuple) else [want]):
            assert g.stride() == w.stride(), (n, g.stride(), w.stride())
    return tnc.stats()


def test_size_classes():
    assert [buckets.size_class(v, 16) for v in (1, 2, 7, 8, 9, 16, 17, 33, 64, 65)] == \
        [1, 2, 7, 16, 16, 16, 32, 64, 64, 128]
    assert [buckets.size_class(v, 24) for v in (11, 12, 24, 25, 49)] == [11, 24, 24, 48, 96]


W = torch.randn(16, 16, generator=torch.Generator().manual_seed(0))


def _seq(n):
    return torch.randn(2, n, 16, generator=torch.Generator().manual_seed(n)), W


def _heads(n):
    return (torch.randn(2, 3, n, 16, generator=torch.Generator().manual_seed(n)),)


def _causal(x):
    return F.scaled_dot_product_attention(x, x * 0.5, x + 1, is_causal=True)


# graphs whose true outputs do not depend on the padding: lengths 9-16 share one bucket
BUCKETED = {
    "linear and gelu": lambda x, w: F.gelu(x @ w + 1),
    "norm and softmax over features": lambda x, w: F.layer_norm(x, (16,)).softmax(-1),
    "cumsum along the sequence": lambda x, w: x.cumsum(1),
    "batch and sequence merged":
        lambda x, w: (x.reshape(-1, 16) @ w).view(x.shape[0], -1, 16),
    "a constant before the sequence":
        lambda x, w: torch.cat([torch.ones(2, 3, 16, device=x.device), x], 1) * 2,
    "a transposed output": lambda x, w: x.transpose(1, 2) * 3,
    "two outputs": lambda x, w: (x.sin(), (x @ w).cos()),
    "the last position": lambda x, w: x[:, -1] * 2,
    "the last three positions": lambda x, w: (x @ w)[:, -3:] + 1,
    "a window at the start": lambda x, w: x[:, 1:4] * 2,
    "the first and the third position": lambda x, w: (x[:, 0] * 2, x[:, 2] + 1),
    # (the bucketed graph reads the true size for these, not the bucket's)
    "a size as a value": lambda x, w: x * x.shape[1],
    # (reductions and matmuls over the sequence: the padding filled with the neutral
    # element, 0 for a sum or a matmul, -inf for a max or a softmax; a mean divides the
    # sum by the true count)
    # (x + 1.5: the padding is not 0 there, so an unmasked sum would count it)
    "mean over the sequence": lambda x, w: x.mean(1),
    "every reduction over the sequence": lambda x, w: (lambda y: (
        y.sum(1), y.amax(1), (-y).amin(-2), (-y).max(1)[0], y.min(1)[1], (-y).argmax(1),
        (-y).argmin(1), (-y * 3).logsumexp(1), (-y).log_softmax(1), (y > 0).any(1),
        (y < 1.4).all(1), (y * 0.1 + 1).prod(1), y.mean([0, 1]), y.mean(), y.sum()))(x + 1.5),
    "a sum over every dimension (dims [])": lambda x, w: (x + 1.5).sum([]) + x,
    "a softmax over the sequence": lambda x, w: x.softmax(1),
    "a matmul over the sequence": lambda x, w: (x + 1.5).transpose(1, 2) @ (x + 1.5),
    "addmm and baddbmm over the sequence": lambda x, w: (lambda y: (
        torch.addmm(w, y[0].t(), y[1]), torch.baddbmm(y[:, :1, :1], y.transpose(1, 2), y)))(
        x + 1.5),
    "a piece after the padded one, then a mean": lambda x, w: torch.cat(
        [x, x[:, :1] * 2, x[:, :2]], 1).mean(1),
    "eager attention (softmax over the keys, then a matmul over them)": lambda x, w: (
        (x @ x.transpose(1, 2) * 0.25).softmax(-1) @ (1.0 / (x + 3))),
    "positions after the sequence (a size minus one as a value)":
        lambda x, w: x * (torch.arange(16, device=x.device) + (x.shape[1] - 1)),
}


@pytest.mark.parametrize("name", list(BUCKETED))
def test_bucketed_graphs_compile_once_per_bucket(name):
    s = _run(BUCKETED[name], _seq, range(9, 17))
    assert s["bucketed_graphs"] == 1 and s["bucket_calls"] == 8, s
    assert s["compilations"] == 1, s


def test_an_output_and_its_view_still_share_storage():
    """Outputs that share storage are not bucketed: cut back one by one, they would be
    two tensors (writing one would not show in the other, as it does on the CPU)."""
    cf = _compile(EXACT["an output and a view of it"][0], dynamic=True)
    for n in (9, 11):
        y, v = cf(*[a.to(DEV) for a in _seq(n)])
        y[0, 0, 0] = 123.0
        assert v[0, 0, 0].item() == 123.0
    assert tnc.stats()["bucket_calls"] == 0


ATTENTION = {
    "causal": _causal,
    "not causal": lambda x: F.scaled_dot_product_attention(x, x * 0.5, x + 1),
    "a float mask": lambda x: F.scaled_dot_product_attention(
        x, x, x, attn_mask=x[..., :1] * x[..., :1].transpose(-1, -2)),
    "three fixed queries": lambda x: F.scaled_dot_product_attention(x[:, :, :3] * 1, x, x),
    # (True: attend; the queries whose mask row is all False get no keys, on the CPU and
    # with buckets alike)
    "a boolean mask": lambda x: F.scaled_dot_product_attention(
        x, x, x, attn_mask=x[..., :1] > -0.5),
    "a boolean mask over the keys": lambda x: F.scaled_dot_product_attention(
        x, x * 0.5, x, attn_mask=(x[..., :1] * x[..., :1].transpose(-1, -2)) >= 0),
}


@pytest.mark.parametrize("name", list(ATTENTION))
def test_attention_is_bucketed(name):
    """Padded keys are masked out of every score (or, causal, never reached by a true
    query): lengths 9-16 in one executable."""
    s = _run(ATTENTION[name], _heads, range(9, 17))
    assert s["bucketed_graphs"] == 1 and s["compilations"] == 1, s


def test_a_growing_cache():
    """A key/value cache growing by a token each step (cat of the padded past and the new
    token): the token is written right after the past's true end, the rest stays exact."""
    def f(past, new, q):
        k = torch.cat([past, new], 2)
        return k, F.scaled_dot_product_attention(q, k, k * 2)

    cf = _compile(f, dynamic=True)
    g = torch.Generator().manual_seed(0)
    past = torch.randn(1, 2, 9, 16, generator=g)
    for _ in range(20):
        new = torch.randn(1, 2, 1, 16, generator=g)
        q = torch.randn(1, 2, 1, 16, generator=g)
        want = f(past, new, q)
        got = cf(past.to(DEV), new.to(DEV), q.to(DEV))
        assert_same(got, want, atol=1e-5, rtol=1e-5, msg=f"past {past.shape[2]}")
        past = want[0]
    s = tnc.stats()
    assert s["bucket_calls"] >= 19 and s["compilations"] <= 3, s


# graphs where padding would reach a true output: compiled per shape, still right
EXACT = {
    "an index computed from the size (with a range check)":
        (lambda x, w: x[:, x.shape[1] - 4 + 1], _seq),
    "a step": (lambda x, w: x[:, ::2] * 2, _seq),
    "a slice of another dimension from a size": (lambda x, w: x[:, :, x.shape[1]:] * 2,
                                                  _seq),
    "an argmax over every dimension (an index into the padded tensor)":
        (lambda x, w: (x + 1.5).argmax(), _seq),
    "an output and a view of it":
        (lambda x, w: (lambda y: (y, y.transpose(1, 2)))(x * 2), _seq),
}


@pytest.mark.parametrize("name", list(EXACT))
def test_graphs_padding_would_change_compile_per_shape(name):
    f, make = EXACT[name]
    s = _run(f, make, range(9, 13))
    assert s["compilations"] == 4, s


def test_padded_values_never_reach_a_true_query():
    """Causal attention over padded keys: the padded values are zeroed, so an infinity
    computed there (1/0 from the zero padding) cannot turn a true row into NaN through
    a zero weight."""
    def f(x):
        return F.scaled_dot_product_attention(x, x, 1.0 / x, is_causal=True)

    def g(x):
        return F.scaled_dot_product_attention(x, x, 1.0 / x)

    def make(n):
        x = torch.rand(1, 2, n, 16, generator=torch.Generator().manual_seed(n)) + 1
        return (x,)

    for fn in (f, g):  # causal (zeroed), not causal (zeroed and masked)
        tnc.reset_stats()
        s = _run(fn, make, (9, 11, 13))
        assert s["bucket_calls"] == 3 and s["compilations"] == 1, s


def test_a_head_dimension_that_varies_is_not_bucketed():
    """The head dimension is attention's contraction (and its default scale): padding it
    would change every score, so only the sequence is bucketed."""
    def make(n):
        return (torch.randn(1, 2, 20 + n % 3, n, generator=torch.Generator().manual_seed(n)),)

    s = _run(_causal, make, (10, 12, 14, 10))
    assert s["compilations"] == 3, s


def test_hugging_face_gpt2_twenty_lengths_three_compiles():
    """Tiny GPT-2 under torch.compile(dynamic=True) over 20 prompt lengths (8-46): three
    executables (buckets 16, 32, 64); logits and the key/value cache equal the CPU's."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=1000,
                                  n_positions=64)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    mn = transformers.GPT2LMHeadModel(cfg).eval()
    mn.load_state_dict(m.state_dict())
    cf = _compile(mn.to(DEV), dynamic=True)
    g = torch.Generator().manual_seed(4)
    for n in range(8, 48, 2):
        ids = torch.randint(0, 1000, (2, n), generator=g)
        with torch.no_grad():
            want = m(ids)
            got = cf(ids.to(DEV))
        assert_same(got.logits, want.logits, atol=1e-5, rtol=1e-5, msg=f"length {n}")
        assert got.logits.is_contiguous()
        for layer in range(2):
            assert_same(got.past_key_values.layers[layer].keys,
                         want.past_key_values.layers[layer].keys, atol=1e-5, rtol=1e-5)
    s = tnc.stats()
    assert s["compilations"] == 3 and s["bucket_calls"] == 20, s


def _tiny_hf(name):
    transformers = pytest.importorskip("transformers")
    if name == "gpt2, eager attention":
        cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=1000,
                                      n_positions=64)
        cls = transformers.GPT2LMHeadModel
    elif name == "bert (pooler: the first position)":
        cfg = transformers.BertConfig(num_hidden_layers=2, num_attention_heads=4,
                                      hidden_size=64, intermediate_size=128, vocab_size=1000,
                                      max_position_embeddings=64)
        cls = transformers.BertModel
    else:
        cfg = transformers.LlamaConfig(num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, hidden_size=64,
                                       intermediate_size=128, vocab_size=1000,
                                       max_position_embeddings=64)
        cls = transformers.LlamaForCausalLM
    if "eager" in name:
        cfg._attn_implementation = "eager"
    return cls, cfg


@pytest.mark.parametrize("name", ["gpt2, eager attention", "bert (pooler: the first position)",
                                  "llama, eager attention"])
def test_hugging_face_models_in_three_buckets(name):
    """Eager attention (a softmax over the keys, then a matmul over them: the padded keys
    filled with -inf, the padded values with 0), BERT's pooler (position 0), Llama's
    rotary positions and grouped keys: 5 lengths in buckets 16, 32, 64, each output
    against the CPU."""
    cls, cfg = _tiny_hf(name)
    torch.manual_seed(0)
    m = cls(cfg).eval()
    mn = cls(cfg).eval()
    mn.load_state_dict(m.state_dict())
    cf = _compile(mn.to(DEV), dynamic=True)
    g = torch.Generator().manual_seed(5)
    for n in (8, 16, 24, 32, 40):
        ids = torch.randint(0, 1000, (2, n), generator=g)
        with torch.no_grad():
            want = m(ids)
            got = cf(ids.to(DEV))
        for k in want.keys():
            if isinstance(want[k], torch.Tensor):
                assert_same(got[k], want[k], atol=1e-5, rtol=1e-5, msg=f"{k}, length {n}")
    s = tnc.stats()
    assert s["compilations"] == 3 and s["bucket_calls"] == 5, s


def test_hugging_face_compiled_generate_with_the_dynamic_cache():
    """model.forward compiled, generate() with Hugging Face's dynamic cache: the decoding
    step's growing key/value cache runs in buckets (not a compile per token); the tokens
    equal the CPU's."""
    m, d = tiny_gpt2_pair()
    d.forward = torch.compile(d.forward, backend="neuron")
    kw = dict(max_new_tokens=30, min_new_tokens=30, do_sample=False)
    for n in (6, 11):  # a second prompt length: the prefill's length becomes symbolic
        ids = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(n))
        want = m.generate(ids, **kw)
        got = d.generate(ids.to(DEV), **kw)
        assert torch.equal(got.cpu(), want), n
    s = tnc.stats()
    # prefill, the first decoding step, two exact past lengths (6, 7), buckets 16 and 32;
    # then the bucketed prefill (its last position read at the true end) and bucket 64
    assert s["bucketed_graphs"] == 2 and s["bucket_calls"] >= 58, s
    assert s["compilations"] <= 8, s


def _grow(past, x):
    kv = torch.cat([past, x], dim=2)
    return kv, kv.softmax(-1) * 3


def test_a_growing_cache_pads_and_cuts_once_per_bucket():
    """Outputs fed back as inputs, a key/value cache growing by one a step for 150 steps
    (lengths 6-155, five buckets): a cut output keeps its bucket-sized cell, so the next
    step's pad and the cuts are one small executable per bucket, not one per length;
    every step's outputs equal the CPU's, with PyTorch's strides and storage size."""
    from torchneuron.dispatch import entry

    cf = _compile(_grow, dynamic=True)
    g = torch.Generator().manual_seed(3)
    past = torch.randn(1, 4, 5, 16, generator=g)
    dpast = past.to(DEV)
    entry.cache_misses.clear()
    moves = len(buckets._moves)
    steps = []
    for _ in range(150):
        x = torch.randn(1, 4, 1, 16, generator=g)
        want = _grow(past, x)
        got = cf(dpast, x.to(DEV))
        steps.append((got, want))
        past, dpast = want[0], got[0]
    # counted before any value is read (a host read compiles a read function per shape)
    pads = entry.cache_misses["aten::constant_pad_nd"] + entry.cache_misses["aten::clone"]
    made = len(buckets._moves) - moves
    s = tnc.stats()
    for got, want in steps:
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.stride() == b.stride(), (a.shape, a.stride())
            assert a.untyped_storage().nbytes() == b.untyped_storage().nbytes()
            assert_same(a, b, atol=1e-6, rtol=1e-6, msg=f"length {b.shape[2]}")
    # the exact first calls, then buckets 16, 32, 64, 128, 256
    assert s["bucket_calls"] >= 145 and s["compilations"] <= 9, s
    # pads per shape only where a bucket's first past is an exact cell: the first
    # bucketed call, and the full output of each bucket (no room left to cut), so one
    # per bucket, not one per length
    assert pads <= 6, entry.cache_misses
    # per bucket: a cut of each output shape and the past's pad from the last bucket
    assert made <= 3 * 5, made


def test_a_bucket_sized_cell_behaves_as_its_tensor():
    """A cut output (its cell keeps the bucket's room) in eager ops, views, in-place
    writes, host reads, another compiled function and as an input again: everything
    as on the CPU."""
    cf = _compile(_grow, dynamic=True)
    past = torch.randn(1, 4, 5, 16, generator=torch.Generator().manual_seed(4))
    dpast = past.to(DEV)
    for n in range(8):  # lengths 6-13: the bucket of 16
        x = torch.randn(1, 4, 1, 16, generator=torch.Generator().manual_seed(n))
        past, dpast = _grow(past, x)[0], cf(dpast, x.to(DEV))[0]
    from torchneuron import storage
    cell = storage.cell_of(dpast)
    assert cell.numel > dpast.numel(), "the cut did not keep the bucket's cell"
    assert dpast.untyped_storage().nbytes() == past.untyped_storage().nbytes()
    assert_same(dpast, past)
    assert_same(dpast.view(-1)[7:40], past.view(-1)[7:40])
    assert_same(dpast[:, 1:3, 2:9].sum(-1), past[:, 1:3, 2:9].sum(-1))
    assert_same(torch.cat([dpast, dpast * 2], 2), torch.cat([past, past * 2], 2))
    assert_same(dpast.transpose(2, 3).contiguous(), past.transpose(2, 3).contiguous())
    assert_same(dpast.to(torch.float16), past.to(torch.float16))
    assert torch.equal(torch.from_numpy(dpast.cpu().numpy()), past)
    buf = io.BytesIO()
    torch.save({"t": dpast, "v": dpast[:, :, 2:5]}, buf)
    buf.seek(0)
    back = torch.load(buf)
    assert back["t"].device == dpast.device
    assert torch.equal(back["t"].cpu(), past) and torch.equal(back["v"].cpu(), past[:, :, 2:5])
    host = dpast.untyped_storage().cpu()
    assert host.nbytes() == past.untyped_storage().nbytes()
    assert torch.equal(torch.tensor([]).set_(host).view(past.shape), past)
    stat = _compile(lambda a: (a @ a.transpose(-1, -2)).relu())
    assert_same(stat(dpast), (past @ past.transpose(-1, -2)).relu(), atol=1e-5, rtol=1e-5)
    c = dpast.clone()
    dpast.mul_(2)
    past.mul_(2)
    assert_same(dpast, past)
    assert_same(c, past / 2)
    dpast[:, :, -1] = 7.0
    past[:, :, -1] = 7.0
    assert_same(dpast, past)
    x = torch.randn(1, 4, 1, 16, generator=torch.Generator().manual_seed(99))
    for a, b in zip(cf(dpast, x.to(DEV)), _grow(past, x)):  # back in, after the writes
        assert_same(a, b, atol=1e-6, rtol=1e-6)
    # the device's memory statistics count the bucket's room, not the storage's size
    room = storage.cell_of(dpast).numel * dpast.element_size()
    held = torch.neuron.memory_allocated()
    del dpast, cell
    assert held - torch.neuron.memory_allocated() == room > past.nbytes


def test_mark_dynamic_is_bucketed():
    def f(x, w):
        return F.gelu(x @ w)

    cf = _compile(f)
    wd = W.to(DEV)
    for n in (9, 12, 15):
        x = torch.randn(2, n, 16)
        dx = x.to(DEV)
        torch._dynamo.mark_dynamic(dx, 1)
        assert_same(cf(dx, wd), f(x, W), atol=1e-5, rtol=1e-5)
    s = tnc.stats()
    assert s["compilations"] == 1 and s["bucket_calls"] == 3, s


def test_a_hundred_lengths_four_buckets():
    """A loop over 100 lengths (8-107), back to a short one every tenth step: four
    buckets (16 ... 128), every result equal to the CPU's."""
    cf = _compile(_causal, dynamic=True)
    short = _heads(9)[0]
    for n in range(8, 108):
        x = _heads(n)[0]
        assert_same(cf(x.to(DEV)), _causal(x), atol=1e-5, rtol=1e-5, msg=f"length {n}")
        if n % 10 == 0:
            assert_same(cf(short.to(DEV)), _causal(short), atol=1e-5, rtol=1e-5)
    s = tnc.stats()
    assert s["compilations"] == 4 and s["bucket_calls"] == 100 + 10, s


def test_the_bucket_path_never_runs_on_the_host():
    """Padding, the bucketed graph (its masks, offsets and index reads) and the cut all run
    on the device: with the CPU fallback forbidden, a growing cache and a last-position
    read still compute the CPU's values."""
    import torchneuron

    def f(past, new, q):
        k = torch.cat([past, new], 2)
        return F.scaled_dot_product_attention(q, k, k), k[:, :, -1] * 2  # the new token

    cf = _compile(f, dynamic=True)
    g = torch.Generator().manual_seed(3)
    with torchneuron.fallback_policy("error"):
        for n in (9, 10, 13):
            args = [torch.randn(1, 2, n, 16, generator=g), torch.randn(1, 2, 1, 16, generator=g),
                    torch.randn(1, 2, 4, 16, generator=g)]
            assert_same(cf(*[a.to(DEV) for a in args]), f(*args), atol=1e-5, rtol=1e-5)
    assert tnc.stats()["bucket_calls"] == 3


def test_buckets_off(monkeypatch):
    monkeypatch.setenv("TORCHNEURON_COMPILE_BUCKETS", "0")
    s = _run(BUCKETED["linear and gelu"], _seq, range(9, 13))
    assert s["compilations"] == 4 and s["bucketed_graphs"] == 0, s


def test_a_smaller_least_bucket(monkeypatch):
    monkeypatch.setenv("TORCHNEURON_COMPILE_BUCKETS", "4")
    s = _run(BUCKETED["linear and gelu"], _seq, (3, 4, 5, 7, 8))
    # no size is under half of 4: buckets 4 (3, 4) and 8 (5, 7, 8)
    assert s["compilations"] == 2, s


def test_a_negative_least_bucket_is_refused(monkeypatch):
    monkeypatch.setenv("TORCHNEURON_COMPILE_BUCKETS", "-2")
    with pytest.raises(ValueError, match="TORCHNEURON_COMPILE_BUCKETS must be 0"):
        buckets.minimum()


def test_an_analysis_that_fails_compiles_per_shape(monkeypatch):
    """A graph the analysis does not understand (here: it raises) is compiled per shape,
    never an error."""
    def boom(gm, syms):
        raise KeyError("val")

    monkeypatch.setattr(buckets, "analyse", boom)
    s = _run(BUCKETED["linear and gelu"], _seq, (9, 10))
    assert s["compilations"] == 2 and s["unbucketed_graphs"] == 1, s


@pytest.mark.parametrize("buckets_on", ["16", "0"])
def test_symbolic_metadata_comes_from_the_trace(monkeypatch, buckets_on):
    """A symbolic graph's concrete metadata (shapes, strides, storage sharing) is the
    metadata Dynamo traced, evaluated at the call's sizes: no fake re-run of the graph
    (which disagreed with the trace on torch 2.11).  Outputs sharing storage, views and
    a transposed output over several sizes, each against the CPU."""
    from torchneuron.compile import graph

    def no_rerun(gm, args):
        raise AssertionError("fake re-run of a symbolic graph")

    monkeypatch.setattr(graph, "_propagate", no_rerun)
    monkeypatch.setenv("TORCHNEURON_COMPILE_BUCKETS", buckets_on)
    for f, make in (EXACT["an output and a view of it"], (_causal, _heads),
                    (BUCKETED["a transposed output"], _seq),
                    (BUCKETED["the last three positions"], _seq)):
        torch._dynamo.reset()
        _run(f, make, (9, 11, 13))
    cf = _compile(EXACT["an output and a view of it"][0], dynamic=True)
    for n in (9, 11):
        y, v = cf(*[a.to(DEV) for a in _seq(n)])
        y[0, 0, 0] = 123.0
        assert v[0, 0, 0].item() == 123.0


def test_an_unbound_size_falls_back_to_a_fake_run(monkeypatch):
    """A size the inputs do not bind (here: the binding is refused) re-derives the
    metadata by running the graph on fake tensors; results unchanged."""
    from torchneuron.compile import graph

    def unbound(gm, args):
        raise ValueError("unbound size symbols [u0]")

    monkeypatch.setattr(graph, "_concrete_metas", unbound)
    monkeypatch.setenv("TORCHNEURON_COMPILE_BUCKETS", "0")
    _run(BUCKETED["the last three positions"], _seq, (9, 11))

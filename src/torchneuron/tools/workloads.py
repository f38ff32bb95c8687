"""The workloads users run, long, on the neuron device against the same program on the CPU.

Each workload is one user program run twice in one process, on the CPU and on neuron, from
the same weights and seeds, and judged by comparing what the user would look at:

- generation (the real ``transformers``; GPT-2 and Llama decoder-only, T5 encoder-decoder,
  Whisper speech, all from tiny configs): greedy tokens with EOS unset, EOS set (it stops
  the run part-way), beam search, sampling under a seed (the device's random numbers are
  not the CPU's: shapes, termination, vocabulary and determinism across two runs),
  prompts of 5 lengths in one process, a batch of 2 padded prompts, Hugging Face's static
  cache (eager, and compiled: generate() compiles the decoding step with the ``neuron``
  backend itself), and ``torch.compile(forward, backend="neuron")`` with the dynamic cache;
- training: a small CNN on scikit-learn's digits and a tiny GPT-2 language model, AdamW,
  gradient clipping, a warm-up + cosine LR schedule and gradient accumulation; losses
  against the CPU's, ``torch.neuron.memory_allocated()`` equal at two steps of the steady
  state and no XLA compile between them;
- varying shapes: a DataLoader whose dynamic-padding collate changes the batch size and the
  sequence length every step, training then evaluation (``no_grad``, argmax accuracy).

A workload returns a record: status PASS / MISMATCH / ERROR with a detail, CPU and device
seconds, device memory at its start and end and XLA compiles.  ``size`` is ``"ci"`` (the
reduced run CI's tests make, tests/workloads/) or ``"full"`` (``torchneuron workloads``,
tools/workloads_report.py, which writes reports/workloads.json and docs/workloads.md).
"""
from __future__ import annotations

import copy
import math
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {
    # tokens: new tokens of most generation workloads; long: the long greedy run
    "ci": dict(tokens=20, long=24, prompts=(3, 6, 9, 12, 15), steps=70, check_from=20,
               accumulate=2, shape_steps=24, lengths=(6, 12), batches=(4, 8), eval_batches=6),
    "full": dict(tokens=32, long=128, prompts=(3, 7, 12, 20, 33), steps=300, check_from=50,
                 accumulate=2, shape_steps=200, lengths=(6, 24), batches=(3, 5, 8),
                 eval_batches=20),
}

VOCAB = 1000
PAD, BOS, EOS = 0, 1, 2


# ---------------------------------------------------------------------------- models
def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(
        n_layer=2, n_head=4, n_embd=64, vocab_size=VOCAB, n_positions=512, bos_token_id=BOS,
        eos_token_id=EOS, pad_token_id=PAD, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD))


def _t5():
    from transformers import T5Config, T5ForConditionalGeneration

    return T5ForConditionalGeneration(T5Config(
        vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
        num_heads=4, dropout_rate=0.0, decoder_start_token_id=PAD, pad_token_id=PAD,
        eos_token_id=EOS))


def _whisper():
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    return WhisperForConditionalGeneration(WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=16, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, d_model=64, max_source_positions=32, max_target_positions=256,
        pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=3,
        begin_suppress_tokens=None, suppress_tokens=None, dropout=0.0))


MODELS = {"gpt2": _gpt2, "llama": _llama, "t5": _t5, "whisper": _whisper}
KIND = {"gpt2": "decoder", "llama": "decoder", "t5": "seq2seq", "whisper": "speech"}
_built: dict = {}


def model_pair(name):
    """(CPU model, neuron model) with the same weights, built once per process."""
    if name not in _built:
        torch.manual_seed(0)
        cpu = MODELS[name]().eval()
        gc = cpu.generation_config
        gc.eos_token_id = None  # the workloads set EOS themselves
        gc.begin_suppress_tokens = gc.suppress_tokens = None
        _built[name] = (cpu, copy.deepcopy(cpu).to("neuron"))
    return _built[name]


def prompt(name, length, batch=1, seed=0):
    """The model's main input for a prompt of `length` tokens (or audio frames fixed)."""
    g = torch.Generator().manual_seed(1000 * seed + length)
    if KIND[name] == "speech":
        return {"input_features": torch.randn(batch, 16, 64, generator=g)}
    return {"input_ids": torch.randint(3, VOCAB, (batch, length), generator=g)}


def _to(inputs, dev):
    return {k: v.to(dev) for k, v in inputs.items()}


def _generate(model, inputs, dev, seed=None, **kw):
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(**_to(inputs, dev), pad_token_id=PAD, **kw)
    return out.cpu()


class Mismatch(AssertionError):
    pass


def _same_tokens(got, want, what="tokens"):
    if got.shape != want.shape or not torch.equal(got, want):
        diff = "shapes " + f"{tuple(got.shape)} vs {tuple(want.shape)}" if got.shape != want.shape \
            else f"first difference at {[int(i) for i in (got != want).nonzero()[0]]}"
        raise Mismatch(f"{what} differ from the CPU's ({diff}): {got.tolist()[0][-8:]} vs "
                       f"{want.tolist()[0][-8:]}")


def _timed(fn):
    t0 = time.perf_counter()
    r = fn()
    return r, time.perf_counter() - t0


# ---------------------------------------------------------------------------- generation
def gen_greedy(name, sz, long=False):
    cpu, dev = model_pair(name)
    n = sz["long"] if long else sz["tokens"]
    x = prompt(name, 7)
    want, c = _timed(lambda: _generate(cpu, x, "cpu", max_new_tokens=n, min_new_tokens=n))
    got, d = _timed(lambda: _generate(dev, x, "neuron", max_new_tokens=n, min_new_tokens=n))
    _same_tokens(got, want)
    return c, d, f"{n} new tokens equal"


def gen_eos(name, sz):
    """EOS set to a token the CPU's greedy run first makes about half way: both runs stop
    there (the stopping criterion runs every step, as in every user's generate())."""
    cpu, dev = model_pair(name)
    n = sz["tokens"]
    x = prompt(name, 5)
    free = _generate(cpu, x, "cpu", max_new_tokens=n, min_new_tokens=n)
    new = free[0, free.shape[1] - n:].tolist()
    first = {t: new.index(t) for t in new}  # tiny random models repeat tokens: the token
    eos = min(first, key=lambda t: abs(first[t] - n // 2))  # first made nearest half way
    stop = first[eos] + 1
    want, c = _timed(lambda: _generate(cpu, x, "cpu", max_new_tokens=n, eos_token_id=eos))
    got, d = _timed(lambda: _generate(dev, x, "neuron", max_new_tokens=n, eos_token_id=eos))
    _same_tokens(got, want)
    return c, d, f"stopped at EOS after {stop} of {n} tokens, as the CPU"


def gen_beam(name, sz):
    cpu, dev = model_pair(name)
    n = sz["tokens"]
    x = prompt(name, 6)
    kw = dict(max_new_tokens=n, num_beams=3, num_return_sequences=2, eos_token_id=EOS)
    want, c = _timed(lambda: _generate(cpu, x, "cpu", **kw))
    got, d = _timed(lambda: _generate(dev, x, "neuron", **kw))
    _same_tokens(got, want, "beams")
    return c, d, f"3 beams, 2 returned sequences of {want.shape[1]} tokens equal"


def gen_sample(name, sz):
    """Sampling under a seed.  The device's random stream is not the CPU's (CUDA's is not
    either): two seeded runs must give the same tokens, every token in the vocabulary,
    nothing but padding after an EOS, and the CPU's shape rules."""
    cpu, dev = model_pair(name)
    n = sz["tokens"]
    x = prompt(name, 6, batch=2)
    kw = dict(max_new_tokens=n, do_sample=True, top_k=20, temperature=0.9, eos_token_id=EOS)
    want, c = _timed(lambda: _generate(cpu, x, "cpu", seed=7, **kw))
    got, d = _timed(lambda: _generate(dev, x, "neuron", seed=7, **kw))
    again = _generate(dev, x, "neuron", seed=7, **kw)
    other = _generate(dev, x, "neuron", seed=8, **kw)
    _same_tokens(again, got, "two runs under one seed:")
    if torch.equal(other, got):
        raise Mismatch("another seed gave the same samples")
    if got.shape[0] != want.shape[0] or got.shape[1] > want.shape[1] + n or \
            not (0 <= got.min() and got.max() < VOCAB):
        raise Mismatch(f"shape {tuple(got.shape)} or tokens out of range")
    start = x["input_ids"].shape[1] if KIND[name] == "decoder" else 1
    for row in got.tolist():
        tail = row[start:]
        if EOS in tail and any(t != PAD for t in tail[tail.index(EOS) + 1:]):
            raise Mismatch(f"tokens after EOS are not padding: {tail}")
    return c, d, f"seeded runs equal, {tuple(got.shape)}"


def gen_prompts(name, sz):
    """Prompts of 5 lengths, one after another in one process (each a new shape)."""
    cpu, dev = model_pair(name)
    n = sz["tokens"]
    c = d = 0.0
    lengths = sz["prompts"] if KIND[name] != "speech" else (1,)
    seeds = range(5) if KIND[name] == "speech" else (0,) * 5
    for length, seed in zip(lengths if len(lengths) == 5 else lengths * 5, seeds):
        x = prompt(name, length, seed=seed)
        want, c1 = _timed(lambda: _generate(cpu, x, "cpu", max_new_tokens=n, min_new_tokens=n))
        got, d1 = _timed(lambda: _generate(dev, x, "neuron", max_new_tokens=n, min_new_tokens=n))
        _same_tokens(got, want, f"prompt of length {length}:")
        c, d = c + c1, d + d1
    what = "5 audio inputs" if KIND[name] == "speech" else f"prompt lengths {list(lengths)}"
    return c, d, f"{what}, {n} tokens each, equal"


def gen_padded(name, sz):
    """A batch of 2 prompts of different lengths: left-padded for a decoder-only model,
    right-padded encoder inputs for T5, with the attention mask."""
    cpu, dev = model_pair(name)
    n = sz["tokens"]
    a, b = prompt(name, 9)["input_ids"][0], prompt(name, 5, seed=1)["input_ids"][0]
    ids = torch.full((2, 9), PAD)
    mask = torch.zeros(2, 9, dtype=torch.long)
    left = KIND[name] == "decoder"
    ids[0], mask[0] = a, 1
    if left:
        ids[1, 4:], mask[1, 4:] = b, 1
    else:
        ids[1, :5], mask[1, :5] = b, 1
    x = {"input_ids": ids, "attention_mask": mask}
    want, c = _timed(lambda: _generate(cpu, x, "cpu", max_new_tokens=n, min_new_tokens=n))
    got, d = _timed(lambda: _generate(dev, x, "neuron", max_new_tokens=n, min_new_tokens=n))
    _same_tokens(got, want)
    return c, d, f"batch of 2 {'left' if left else 'right'}-padded prompts equal"


def gen_static(name, sz, compiled=False):
    """cache_implementation="static".  On neuron generate() itself compiles the decoding
    step with torch.compile(backend="neuron") (transformers' default for the device);
    `compiled=False` turns that off (disable_compile) to run the static cache eagerly."""
    cpu, dev = model_pair(name)
    n = sz["tokens"]
    x = prompt(name, 6)
    kw = dict(max_new_tokens=n, min_new_tokens=n, cache_implementation="static",
              disable_compile=not compiled)
    want, c = _timed(lambda: _generate(cpu, x, "cpu", **kw))
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters

    dynamo.reset()
    counters.clear()
    got, d = _timed(lambda: _generate(dev, x, "neuron", **kw))
    graphs = counters["stats"].get("unique_graphs", 0)
    dynamo.reset()
    _same_tokens(got, want)
    if compiled and not graphs:
        raise Mismatch("generate() compiled nothing")
    return c, d, f"{n} tokens equal" + (f", {graphs} graphs compiled" if compiled else "")


def gen_static_padded(name, sz):
    """The recipe of docs/huggingface.md: the static cache (its decoding step compiled),
    prompts of three lengths each left-padded to a multiple of 16 with the attention
    mask; every prompt's tokens equal the CPU's."""
    cpu, dev = model_pair(name)
    n = sz["tokens"]
    kw = dict(max_new_tokens=n, min_new_tokens=n, cache_implementation="static")
    c = d = 0.0
    import torch._dynamo as dynamo

    dynamo.reset()
    try:
        for i, length in enumerate((5, 9, 13)):
            ids = prompt(name, length, seed=i)["input_ids"]
            pad = -length % 16
            x = {"input_ids": torch.cat([torch.full((1, pad), PAD), ids], 1),
                 "attention_mask": torch.cat([torch.zeros(1, pad, dtype=torch.long),
                                              torch.ones_like(ids)], 1)}
            want, c1 = _timed(lambda: _generate(cpu, x, "cpu", **kw))
            got, d1 = _timed(lambda: _generate(dev, x, "neuron", **kw))
            _same_tokens(got, want, f"tokens of the prompt of {length}")
            c, d = c + c1, d + d1
    finally:
        dynamo.reset()
    return c, d, f"3 prompt lengths padded to 16, {n} tokens each equal"


def gen_compiled(name, sz):
    """model.forward = torch.compile(model.forward, backend="neuron"), dynamic cache: a new
    sequence length every step (Dynamo's automatic dynamic shapes or recompiles)."""
    cpu, dev = model_pair(name)
    n = sz["tokens"]
    x = prompt(name, 6)
    import torch._dynamo as dynamo

    dynamo.reset()
    fwd = dev.forward
    dev.forward = torch.compile(fwd, backend="neuron")
    try:
        want, c = _timed(lambda: _generate(cpu, x, "cpu", max_new_tokens=n, min_new_tokens=n))
        got, d = _timed(lambda: _generate(dev, x, "neuron", max_new_tokens=n, min_new_tokens=n))
    finally:
        dev.forward = fwd
        dynamo.reset()
    _same_tokens(got, want)
    return c, d, f"{n} tokens equal"


GENERATION = {
    "greedy": lambda m, sz: gen_greedy(m, sz),
    "greedy_long": lambda m, sz: gen_greedy(m, sz, long=True),
    "eos": gen_eos,
    "beam": gen_beam,
    "sample": gen_sample,
    "prompts": gen_prompts,
    "padded": gen_padded,
    "static": lambda m, sz: gen_static(m, sz, compiled=False),
    "static_compiled": lambda m, sz: gen_static(m, sz, compiled=True),
    "static_padded": gen_static_padded,
    "compiled": gen_compiled,
}


# ---------------------------------------------------------------------------- training
class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.conv1(x)))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def _digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    return x, torch.tensor(d.target)


def _lm_batches(steps, batch=4, seq=32, seed=0):
    """A learnable synthetic language: each sequence counts up by a random stride mod VOCAB."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (steps, batch, 1), generator=g)
    stride = torch.randint(1, 7, (steps, batch, 1), generator=g)
    return (start + stride * torch.arange(seq)) % VOCAB


def _schedule(opt, total):
    warm = max(1, total // 10)
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else
        0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, total - warm))))


def _train(model, dev, batches, loss_fn, sz):
    """AdamW, clipping at 1.0, warm-up + cosine, `accumulate` micro-batches per step: the
    losses, and on neuron memory and XLA compiles at step check_from and at the end."""
    from .. import runtime
    from ..dispatch import tiers

    model = model.to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = _schedule(opt, sz["steps"])
    acc = sz["accumulate"]
    losses, marks = [], {}
    for step in range(sz["steps"]):
        total = 0.0
        for k in range(acc):
            loss = loss_fn(model, batches(step * acc + k, dev)) / acc
            loss.backward()
            total = total + loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total.item())  # what a training loop logs (a device value on the host)
        if dev == "neuron" and step + 1 in (sz["check_from"], sz["steps"]):
            torch.neuron.synchronize()
            tiers.wait()  # the optimised compiles of hot executables are not the loop's own
            marks[step + 1] = (torch.neuron.memory_allocated(),
                               runtime.EXE_STATS.compiles - tiers.background_compiles())
    return torch.tensor(losses, dtype=torch.float64), marks


def _judge_training(want, got, marks, sz, wide=None, rtol=2e-3):
    """Losses within `rtol` of the CPU's, or, where training amplified float32 rounding past
    that, no farther from a float64 run (`wide()`) than the CPU's own float32 losses are
    (twice that distance, plus 1e-6); then no memory growth and no compile in the steady
    state."""
    err = ((got - want).abs() / want.abs().clamp_min(1e-3)).max().item()
    a, b = sz["check_from"], sz["steps"]
    (m0, c0), (m1, c1) = marks[a], marks[b]
    judged = ""
    if err > rtol and wide is not None:
        ref = wide().to(torch.float64)
        ours, theirs = (got - ref).abs().max().item(), (want - ref).abs().max().item()
        if ours <= 2 * theirs + 1e-6:
            judged = (f" (rounding: float64 run {ours:.1e} from the device's losses, "
                      f"{theirs:.1e} from the CPU's)")
        else:
            raise Mismatch(f"losses differ from the CPU's by {err:.2e} (relative, > {rtol}); "
                           f"from a float64 run: device {ours:.1e}, CPU {theirs:.1e}")
    elif err > rtol:
        raise Mismatch(f"losses differ from the CPU's by {err:.2e} (relative, > {rtol})")
    if m1 != m0:
        raise Mismatch(f"memory_allocated() {m0} at step {a}, {m1} at step {b}: a leak")
    if c1 != c0:
        raise Mismatch(f"{c1 - c0} XLA compiles between steps {a} and {b} (same shapes)")
    return (f"{b} steps, loss {want[0]:.3f} -> {want[-1]:.3f}, max rel. diff {err:.1e}{judged}; "
            f"memory {m0} B at steps {a} and {b}; 0 compiles after step {a}")


def train_cnn(sz):
    x, y = _digits()
    bs = 32

    def batches(i, dev):
        j = (i * bs) % (len(y) - bs)
        return x[j:j + bs].to(dev), y[j:j + bs].to(dev)

    def loss_fn(model, b):
        return F.cross_entropy(model(b[0]), b[1])

    torch.manual_seed(0)
    model = SmallCNN()
    start, ref = copy.deepcopy(model), copy.deepcopy(model).double()

    def wide():
        def batches64(i, dev):
            xb, yb = batches(i, dev)
            return xb.double(), yb
        return _train(ref, "cpu", batches64, loss_fn, sz)[0]

    (want, _), c = _timed(lambda: _train(model, "cpu", batches, loss_fn, sz))
    (got, marks), d = _timed(lambda: _train(start, "neuron", batches, loss_fn, sz))
    return c, d, _judge_training(want, got, marks, sz, wide)


def train_gpt2(sz):
    data = _lm_batches(sz["steps"] * sz["accumulate"])

    def batches(i, dev):
        return data[i].to(dev)

    def loss_fn(model, ids):
        return model(input_ids=ids, labels=ids).loss

    torch.manual_seed(0)
    model = _gpt2()
    start = copy.deepcopy(model)
    (want, _), c = _timed(lambda: _train(model, "cpu", batches, loss_fn, sz))
    (got, marks), d = _timed(lambda: _train(start, "neuron", batches, loss_fn, sz))
    return c, d, _judge_training(want, got, marks, sz)


# ---------------------------------------------------------------------------- varying shapes
class TextClassifier(nn.Module):
    """Embedding, one transformer encoder layer with a padding mask, masked mean pool."""

    def __init__(self, d=32):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d, padding_idx=PAD)
        self.enc = nn.TransformerEncoderLayer(d, 2, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(d, 2)

    def forward(self, ids):
        keep = ids != PAD
        h = self.enc(self.emb(ids), src_key_padding_mask=~keep)
        w = keep.unsqueeze(-1).to(h.dtype)
        return self.head((h * w).sum(1) / w.sum(1))


class _Texts(torch.utils.data.Dataset):
    """Sequences of random length; the label: are most tokens below VOCAB // 2."""

    def __init__(self, n, lengths, seed):
        g = torch.Generator().manual_seed(seed)
        lo, hi = lengths
        self.items = []
        for _ in range(n):
            k = int(torch.randint(lo, hi + 1, (1,), generator=g))
            ids = torch.randint(3, VOCAB, (k,), generator=g)
            self.items.append((ids, int((ids < VOCAB // 2).float().mean() > 0.5)))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class _VaryingBatches(torch.utils.data.Sampler):
    """Batch sizes cycling through `sizes` (a new batch size every step)."""

    def __init__(self, n, sizes, seed):
        self.n, self.sizes, self.seed = n, sizes, seed

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed)).tolist()
        i = k = 0
        while i < self.n:
            b = self.sizes[k % len(self.sizes)]
            yield order[i:i + b]
            i, k = i + b, k + 1

    def __len__(self):
        return sum(1 for _ in self)


def _pad_collate(items):
    """Dynamic padding: pad to the longest sequence of the batch."""
    n = max(len(ids) for ids, _ in items)
    out = torch.full((len(items), n), PAD)
    for i, (ids, _) in enumerate(items):
        out[i, :len(ids)] = ids
    return out, torch.tensor([y for _, y in items])


def _loader(n, sz, seed):
    ds = _Texts(n, sz["lengths"], seed)
    return torch.utils.data.DataLoader(ds, batch_sampler=_VaryingBatches(n, sz["batches"], seed),
                                       collate_fn=_pad_collate)


def _varying(model, dev, sz):
    model = model.to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sched = _schedule(opt, sz["shape_steps"])
    losses, shapes = [], set()
    steps = 0
    mean = sum(sz["batches"]) / len(sz["batches"])
    train = _loader(int(sz["shape_steps"] * mean) + 8, sz, 0)
    for ids, y in train:
        if steps == sz["shape_steps"]:
            break
        shapes.add(tuple(ids.shape))
        loss = F.cross_entropy(model(ids.to(dev)), y.to(dev))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        steps += 1
    model.eval()
    right = total = 0
    logits = []
    with torch.no_grad():
        for i, (ids, y) in enumerate(_loader(int(sz["eval_batches"] * mean) + 8, sz, 1)):
            if i == sz["eval_batches"]:
                break
            out = model(ids.to(dev))
            right += int((out.argmax(-1).cpu() == y).sum())
            total += len(y)
            logits.append(out.cpu())
    return torch.tensor(losses), right / total, torch.cat(logits), len(shapes)


def varying_shapes(sz):
    torch.manual_seed(0)
    model = TextClassifier()
    start = copy.deepcopy(model)
    (wl, wa, wlog, nshapes), c = _timed(lambda: _varying(model, "cpu", sz))
    (gl, ga, glog, _), d = _timed(lambda: _varying(start, "neuron", sz))
    err = ((gl - wl).abs() / wl.abs().clamp_min(1e-3)).max().item()
    if err > 2e-3:
        raise Mismatch(f"training losses differ from the CPU's by {err:.2e} (relative)")
    if ga != wa:
        raise Mismatch(f"evaluation accuracy {ga} vs the CPU's {wa}")
    torch.testing.assert_close(glog, wlog, atol=1e-3, rtol=1e-3)
    return c, d, (f"{sz['shape_steps']} steps over {nshapes} (batch, length) shapes, loss "
                  f"max rel. diff {err:.1e}; eval accuracy {wa:.3f} as the CPU's")


TRAINING = {"train_cnn": train_cnn, "train_gpt2": train_gpt2, "varying_shapes": varying_shapes}


# ---------------------------------------------------------------------------- the table
def workloads(size="full"):
    """{name: (group, fn(sz) -> (cpu_s, device_s, detail))} in run order.  A group is run
    in one process by the report (its models and executables are shared, as in a user's
    program that generates in several ways)."""
    out = {}
    for m in MODELS:
        for case, fn in GENERATION.items():
            if case == "padded" and KIND[m] == "speech":
                continue  # one audio length: nothing to pad
            if case == "static_padded" and KIND[m] != "decoder":
                continue  # the recipe pads a decoder's prompt
            out[f"{m}/{case}"] = (m, (lambda fn, m: lambda sz: fn(m, sz))(fn, m))
    for name, fn in TRAINING.items():
        out[name] = (name, fn)
    return out


def run(name, size="ci", mode=None):
    """Run one workload in this process; its record."""
    from .. import storage

    table = workloads(size)
    group, fn = table[name]
    sz = SIZES[size]
    rec = {"workload": name, "group": group, "size": size,
           "eager": mode or torchneuron_mode()}
    ctx = _mode_ctx(mode)
    from .. import runtime

    import warnings

    import torchneuron

    if group in MODELS:  # the model lives for the process: built before the measurements
        model_pair(group)
    c0 = runtime.EXE_STATS.compiles
    f0 = torchneuron.fallback_stats()
    rec["mem_start"] = storage.stats(0).allocated
    t0 = time.perf_counter()
    try:
        with ctx, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fallback's warnings: counted below
            cpu_s, dev_s, detail = fn(sz)
        rec.update(status="PASS", cpu_s=round(cpu_s, 3), device_s=round(dev_s, 3), detail=detail)
        fell = {k: v - f0.get(k, 0) for k, v in torchneuron.fallback_stats().items()
                if v != f0.get(k, 0)}
        if fell:  # equal to the CPU, but not all on the device
            rec.update(status="FALLBACK", fallback=sorted(fell))
    except Mismatch as e:
        rec.update(status="MISMATCH", detail=str(e))
    except Exception as e:  # noqa: BLE001
        rec.update(status="ERROR", detail=f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}",
                   trace=traceback.format_exc()[-2000:])
    rec["elapsed_s"] = round(time.perf_counter() - t0, 3)
    rec["compiles"] = runtime.EXE_STATS.compiles - c0
    import gc

    gc.collect()
    rec["mem_end"] = storage.stats(0).allocated
    return rec


def torchneuron_mode():
    import torchneuron

    return torchneuron.get_eager_mode()


def _mode_ctx(mode):
    import contextlib

    import torchneuron

    return torchneuron.eager_mode(mode) if mode else contextlib.nullcontext()

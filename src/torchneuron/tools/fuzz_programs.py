"""Random PyTorch programs for the differential fuzzer (``torchneuron fuzz``).

A program is a list of :class:`Step`: each is one Python expression over the earlier
values (``v0``, ``v1``, ...), the device string ``dev``, ``torch``, ``F``
(``torch.nn.functional``) and ``fz`` (this module's helpers), and its value becomes the
next ``v``. The same text is what runs, what a repro prints and what ``torch.compile``
sees, so the three cannot drift apart.

:func:`programs` is the hypothesis strategy. It builds a program step by step while
running it on the CPU, so every step is drawn against the real shapes, dtypes and
aliasing of the values before it (a step that raises on the CPU stays in the program:
the device must raise the same error). :func:`run` executes a program on a device and
returns a :class:`Trace` (per-step results, errors and warnings; the final values after
every in-place write; gradients; which values share storage), which the oracle in
:mod:`torchneuron.tools.fuzz` compares with the CPU's.
"""
from __future__ import annotations

import contextlib
import copy
import math
import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import strategies as st

# ---------------------------------------------------------------------------------------
# dtypes and values

DTYPES = ("float32", "float64", "float16", "bfloat16", "complex64",
          "int64", "int32", "int16", "int8", "uint8", "bool")
FLOATS = ("float32", "float64", "float16", "bfloat16")
INTS = ("int64", "int32", "int16", "int8", "uint8")
_INT_RANGE = {"int64": (-100, 100), "int32": (-100, 100), "int16": (-100, 100),
              "int8": (-128, 127), "uint8": (0, 255)}

nan = float("nan")
inf = float("inf")


def dt(name):
    return getattr(torch, name)


def T(values, dtype, device, shape):
    """A tensor from a literal list (built on the CPU, cast, then moved)."""
    d = dt(dtype)
    src = torch.float32 if d in (torch.float16, torch.bfloat16) else d
    t = torch.tensor(values, dtype=src).reshape(shape).to(d)
    # a tensor of its own on both devices (on the CPU, reshape and to() could return a view)
    return t.to(device) if torch.device(device).type != "cpu" else t.clone()


def _values(rng, style, dtype, n):
    if dtype == "bool":
        return [bool(b) for b in rng.integers(0, 2, n)]
    if dtype in INTS:
        lo, hi = _INT_RANGE[dtype]
        if style == "small":
            lo, hi = (0, 4) if dtype == "uint8" else (-4, 4)
        return [int(x) for x in rng.integers(lo, hi + 1, n)]
    if style == "small":
        vals = rng.integers(-4, 5, n).astype(float)
    elif style == "dyadic":
        vals = rng.integers(-16, 17, n) / 4.0
    elif style == "normal":
        vals = np.float32(rng.standard_normal(n) * 2.0).astype(float)
    else:  # special
        pool = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, nan, inf, -inf, 1e30, -1e-30, 3.0])
        vals = pool[rng.integers(0, len(pool), n)]
    if dtype == "complex64":
        im = rng.integers(-4, 5, n) / 2.0
        return [complex(float(a), float(b)) for a, b in zip(vals, im)]
    return [float(v) for v in vals]


def lit(x) -> str:
    """Python source for a value (floats exact; nan/inf through this module's names)."""
    if isinstance(x, bool) or x is None:
        return repr(x)
    if isinstance(x, float):
        return repr(x)  # 'nan' and 'inf' resolve to this module's names
    if isinstance(x, complex):
        return f"complex({lit(x.real)}, {lit(x.imag)})"
    if isinstance(x, (list, tuple)):
        inner = ", ".join(lit(v) for v in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner}{',' if len(x) == 1 else ''})"
    if isinstance(x, torch.dtype):
        return str(x)
    return repr(x)


# ---------------------------------------------------------------------------------------
# helpers that program text calls (``fz.name``)

def setitem(t, key, value):
    t[key] = value
    return t


def backward(*ts):
    """Sum every float tensor that has a graph and backpropagate (one loss)."""
    parts = [t.real.sum() if t.is_complex() else t.sum() for t in ts
             if isinstance(t, torch.Tensor) and t.grad_fn is not None
             and (t.is_floating_point() or t.is_complex())]
    if not parts:
        return None
    loss = parts[0].double()
    for p in parts[1:]:
        loss = loss + p.double()
    loss.backward()
    return None


def hook(t, k):
    t.register_hook(lambda g: g * k)
    return t


def retain(t):
    t.retain_grad()
    return t


_autocast = []


def autocast_enter(device, dtype):
    ctx = torch.autocast(device_type=torch.device(device).type, dtype=dt(dtype))
    ctx.__enter__()
    _autocast.append(ctx)


def autocast_exit():
    if _autocast:
        _autocast.pop().__exit__(None, None, None)


def deterministic(on, fill):
    torch.use_deterministic_algorithms(on)
    torch.utils.deterministic.fill_uninitialized_memory = fill


def module(recipe, seed, device, opt, steps, dup):
    """Build a small module on the CPU (seeded), ``.to(device)``, optionally deepcopy it or
    round-trip its state_dict, take ``steps`` optimizer steps; returns the last output,
    every parameter, and whether the weight tie survived."""
    torch.manual_seed(seed)
    if recipe == "tied_lm":
        m = torch.nn.ModuleDict({"emb": torch.nn.Embedding(7, 4), "norm": torch.nn.LayerNorm(4),
                                 "head": torch.nn.Linear(4, 7, bias=False)})
        m.head.weight = m.emb.weight
        x = torch.tensor([[1, 2, 3], [4, 5, 6]])

        def fwd(mod, inp):
            return mod.head(mod.norm(mod.emb(inp)))
    elif recipe == "conv":
        m = torch.nn.Sequential(torch.nn.Conv1d(2, 3, 3, padding=1, bias=False),
                                torch.nn.BatchNorm1d(3),
                                torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(15, 2))
        x = torch.arange(20, dtype=torch.float32).reshape(2, 2, 5) / 10

        def fwd(mod, inp):
            return mod(inp)
    elif recipe == "gru":
        m = torch.nn.GRU(3, 4, batch_first=True)
        x = torch.arange(18, dtype=torch.float32).reshape(2, 3, 3) / 9

        def fwd(mod, inp):
            return mod(inp)[0]
    else:  # mlp with a shared layer used twice
        lin = torch.nn.Linear(4, 4)
        m = torch.nn.Sequential(lin, torch.nn.Tanh(), lin, torch.nn.GELU(), torch.nn.Linear(4, 3))
        x = torch.arange(8, dtype=torch.float32).reshape(2, 4) / 8

        def fwd(mod, inp):
            return mod(inp)
    m = m.to(device)
    x = x.to(device)
    if dup == "deepcopy":
        m = copy.deepcopy(m)
    elif dup == "state_dict":
        fresh = copy.deepcopy(m)
        with torch.no_grad():
            for p in fresh.parameters():
                p.zero_()
        fresh.load_state_dict(m.state_dict())
        m = fresh
    o = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
         "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
         "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1)}[opt](m.parameters())
    out = None
    for _ in range(steps):
        o.zero_grad()
        out = fwd(m, x)
        out.float().square().mean().backward()
        o.step()
    if out is None:
        out = fwd(m, x)
    tied = (m.head.weight is m.emb.weight) if recipe == "tied_lm" else None
    return [out.detach(), *[p.detach() for p in m.parameters()], tied]


# ---------------------------------------------------------------------------------------
# program steps


@dataclass
class Step:
    name: str        # the operation, for grouping failures ("add_", "view_dtype", ...)
    src: str         # Python expression; its value becomes v<index>
    uses: tuple = ()  # the v indices the expression reads
    opaque: bool = False   # the value is random: compare metadata only (and taint users)
    compilable: bool = True  # may run inside torch.compile (no global state, no backward)
    is_input: bool = False   # created before the compiled function (compile mode input)


# ---------------------------------------------------------------------------------------
# running a program

_SAVED_STATE = None


@contextlib.contextmanager
def pristine_state():
    """Run with PyTorch's default global state, and restore whatever the program changed."""
    saved = (torch.get_default_dtype(), torch.is_grad_enabled(),
             torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.utils.deterministic.fill_uninitialized_memory,
             torch.is_warn_always_enabled())
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)
    torch.use_deterministic_algorithms(False)
    torch.utils.deterministic.fill_uninitialized_memory = True
    torch.set_warn_always(True)  # TORCH_WARN_ONCE warns on both devices, every program
    depth = len(_autocast)
    try:
        yield
    finally:
        while len(_autocast) > depth:
            autocast_exit()
        torch.set_default_dtype(saved[0])
        torch.set_grad_enabled(saved[1])
        torch.use_deterministic_algorithms(saved[2], warn_only=saved[3])
        torch.utils.deterministic.fill_uninitialized_memory = saved[4]
        torch.set_warn_always(saved[5])


_CODE = {}


def _code(src):
    c = _CODE.get(src)
    if c is None:
        if len(_CODE) > 50000:
            _CODE.clear()
        c = _CODE[src] = compile(src, "<fuzz step>", "eval")
    return c


def namespace(device):
    import sys

    return {"torch": torch, "F": F, "fz": sys.modules[__name__], "dev": device,
            "nan": nan, "inf": inf, "math": math}


_DEV_RE = re.compile(r"\b(?:neuron|cpu|privateuseone)(?::\d+)?\b", re.IGNORECASE)
_ADDR_RE = re.compile(r"0x[0-9a-f]+")
_TRIGGERED_RE = re.compile(r"\s*\(Triggered internally at [^)]*\)")


def normalize(msg: str) -> str:
    """An error or warning message with device names and addresses blanked."""
    msg = msg.split("\n\nWhile executing")[0]
    msg = _TRIGGERED_RE.sub("", msg)
    msg = _ADDR_RE.sub("0x?", _DEV_RE.sub("DEV", msg)).strip()
    return msg.replace("torch.DEV.", "torch.")  # tensor type names: torch.neuron.FloatTensor


def _ignored_warning(w) -> bool:
    text = str(w.message)
    return text.startswith("torchneuron: ") and "no native lowering" in text


@dataclass
class Value:
    """What a step produced, as the oracle compares it."""
    kind: str                 # tensor | list | scalar | none | other | error
    dtype: str = ""
    shape: tuple = ()
    stride: tuple = ()
    device: str = ""
    requires_grad: bool = False
    data: object = None       # a CPU tensor (tensors), the value (scalars), items (lists)
    opaque: bool = False


def describe(v, opaque=False) -> Value:
    try:
        return _describe(v, opaque)
    except Exception as e:  # noqa: BLE001 - e.g. reading a view invalidated by autograd
        return Value("error", data=(type(e).__name__, normalize(str(e))))


def _describe(v, opaque=False) -> Value:
    if isinstance(v, torch.Tensor):
        data = None
        if not opaque:
            data = v.detach().to("cpu", copy=True)
        return Value("tensor", str(v.dtype).replace("torch.", ""), tuple(v.shape), tuple(v.stride()),
                     v.device.type, v.requires_grad, data, opaque)
    if isinstance(v, (list, tuple)):
        return Value("list", data=[_describe(x, opaque) for x in v])
    if v is None:
        return Value("none")
    if isinstance(v, (bool, int, float, complex)):
        return Value("scalar", data=v, opaque=opaque)
    if isinstance(v, str):  # (a repr: the device suffix, and where lines wrap, may differ)
        return Value("scalar", data=" ".join(normalize(v).replace(", device='DEV'", "").split()),
                     opaque=opaque)
    if isinstance(v, (torch.dtype, torch.Size)):
        return Value("scalar", data=str(v))
    return Value("other", data=type(v).__name__)


@dataclass
class Record:
    error: tuple = None       # (type name, normalized message) or None
    value: Value = None
    warnings: tuple = ()      # sorted (category, normalized message)


@dataclass
class Trace:
    steps: list = field(default_factory=list)    # Record per step (eager mode)
    final: list = field(default_factory=list)    # Value per v after the whole program
    grads: list = field(default_factory=list)    # Value of v.grad (or None) per v
    shares: frozenset = frozenset()              # {(i, j)}: v_i and v_j share storage
    error: tuple = None                           # compile mode: the whole call raised
    error_step: int = -1                          # compile mode: an input step raised
    fallbacks: dict = field(default_factory=dict)


def _shares(env):
    seen = {}
    for i, v in enumerate(env):
        if isinstance(v, torch.Tensor):
            s = v.untyped_storage()
            if s.nbytes() == 0:
                continue
            seen.setdefault(s.data_ptr(), []).append(i)
    pairs = set()
    for group in seen.values():
        for a in range(len(group)):
            for b in range(a + 1, len(group)):
                pairs.add((group[a], group[b]))
    return frozenset(pairs)


def tainted(steps):
    """Indices whose value is random (opaque) or derived from one."""
    out = set()
    for i, s in enumerate(steps):
        if s.opaque or any(u in out for u in s.uses):
            out.add(i)
            # an in-place write of random data into an earlier value taints it too
            out.update(u for u in s.uses if s.name.endswith("_") or "out=" in s.src)
    return out


def _final(env, taint):
    final, grads = [], []
    for i, v in enumerate(env):
        final.append(describe(v, opaque=i in taint))
        g = None
        try:
            if isinstance(v, torch.Tensor) and v.requires_grad and (v.is_leaf or v.retains_grad):
                g = v.grad
        except Exception:  # noqa: BLE001
            g = None
        grads.append(describe(g, opaque=i in taint) if g is not None else None)
    return final, grads


def run(steps, device, *, stop=None, env_out=None) -> Trace:
    """Run ``steps`` (up to ``stop``) op by op on ``device``."""
    from .. import dispatch

    taint = tainted(steps)
    ns = namespace(device)
    env = []
    trace = Trace()
    before = dict(dispatch.fallback_stats())
    with pristine_state():
        for i, s in enumerate(steps[:stop]):
            rec = Record()
            with warnings.catch_warnings(record=True) as ws:
                warnings.simplefilter("always")
                try:
                    val = eval(_code(s.src), ns)
                except Exception as e:  # noqa: BLE001 - the oracle compares errors
                    val = None
                    rec.error = (type(e).__name__, normalize(str(e)))
                if rec.error is None:
                    rec.value = describe(val, opaque=i in taint)
            rec.warnings = tuple(sorted({(w.category.__name__, normalize(str(w.message)))
                                         for w in ws if not _ignored_warning(w)}))
            trace.steps.append(rec)
            env.append(val)
            ns[f"v{i}"] = val
        trace.final, trace.grads = _final(env, taint)
        trace.shares = _shares(env)
    after = dispatch.fallback_stats()
    trace.fallbacks = {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
    if env_out is not None:
        env_out.extend(env)
    return trace


def function_source(steps) -> tuple:
    """``def program(<inputs>): ...; return [v0, ...]`` for compile mode; (source, inputs)."""
    inputs = [i for i, s in enumerate(steps) if s.is_input]
    body = [f"    v{i} = {s.src}" for i, s in enumerate(steps) if not s.is_input]
    names = ", ".join(f"v{i}" for i in range(len(steps)))
    args = ", ".join(f"v{i}" for i in inputs)
    src = f"def program({args}):\n" + "\n".join(body + [f"    return [{names}]"]) + "\n"
    return src, inputs


def run_compiled(steps, device, backend) -> Trace:
    """Create the inputs op by op, then run the rest as one ``torch.compile``d function."""
    from .. import dispatch

    src, inputs = function_source(steps)
    ns = namespace(device)
    trace = Trace()
    taint = tainted(steps)
    before = dict(dispatch.fallback_stats())
    with pristine_state():
        args = []
        for i in inputs:
            try:
                ns[f"v{i}"] = eval(_code(steps[i].src), ns)
            except Exception as e:  # noqa: BLE001 - the oracle compares errors
                trace.error, trace.error_step = (type(e).__name__, normalize(str(e))), i
                return trace
            args.append(ns[f"v{i}"])
        exec(compile(src, "<fuzz program>", "exec"), ns)
        fn = ns["program"]
        if backend is not None:
            torch._dynamo.reset()
            fn = torch.compile(fn, backend=backend, fullgraph=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                env = fn(*args)
            except Exception as e:  # noqa: BLE001
                trace.error = (type(e).__name__, normalize(str(e)).split("\n")[0])
                env = None
        if env is not None:
            trace.final, trace.grads = _final(env, taint)
            trace.shares = _shares(env)
    after = dispatch.fallback_stats()
    trace.fallbacks = {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
    return trace


def repro_source(steps, compiled=False, backend="neuron") -> str:
    """A standalone script that runs the program on neuron and on the CPU and compares."""
    lines = ["# torchneuron fuzz repro: the program on neuron against the CPU",
             "import torch", "import torch.nn.functional as F", "import torchneuron",
             "from torchneuron.tools import fuzz_programs as fz", "from math import inf, nan",
             ""]
    if compiled:
        src, inputs = function_source(steps)
        lines += [src.rstrip(), "", "", "def run(dev, compiled):"]
        lines += [f"    v{i} = {steps[i].src}" for i in inputs]
        args = ", ".join(f"v{i}" for i in inputs)
        lines += [f"    fn = torch.compile(program, backend={backend!r}) if compiled else program",
                  f"    return fn({args})", "",
                  "want = run('cpu', False)", "got = run('neuron', True)"]
    else:
        lines += ["def run(dev):", "    out = []", "", "    def step(f):  # a step's value, or the error it raises",
                  "        try:", "            v = f()", "        except Exception as e:",
                  "            v = e", "        out.append(v)", "        return v", ""]
        lines += [f"    v{i} = step(lambda: {s.src})" for i, s in enumerate(steps)]
        lines += ["    return out", "", "want = run('cpu')", "got = run('neuron')"]
    lines += ["for i, (g, w) in enumerate(zip(got, want)):",
              "    if isinstance(w, Exception) or isinstance(g, Exception):",
              "        assert type(g) is type(w) and str(g).replace('neuron:0', 'cpu') == str(w), \\",
              "            f'v{i}: {g!r} vs {w!r}'",
              "    elif isinstance(w, torch.Tensor):",
              "        assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride(), \\",
              "            f'v{i}: {g.dtype} {tuple(g.shape)} {g.stride()} vs {w.dtype} {tuple(w.shape)} {w.stride()}'",
              "        torch.testing.assert_close(g.cpu(), w, equal_nan=True, check_device=False,",
              "                                   msg=lambda m: f'v{i}: {m}')",
              "    elif not isinstance(w, list):",
              "        assert g == w or g != g, (i, g, w)",
              "print('no difference in values, dtypes, shapes, strides or errors')", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# the generator

class Gen:
    """The program being drawn, with its values on the CPU (run as it is drawn)."""

    def __init__(self, draw, grad, compiled, max_steps):
        self.draw = draw
        self.grad = grad
        self.compiled = compiled
        self.steps = []
        self.env = []
        self.on_dev = []
        self.ns = namespace("cpu")
        self.base_shape = draw(st_shape(1, 3))
        self.autocast_depth = 0
        self.max_steps = max_steps

    def add(self, step):
        i = len(self.steps)
        on_dev = (re.search(r"\bdev\b", step.src) is not None
                  or any(self.on_dev[u] for u in step.uses)) and step.name != "cpu"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                val = eval(_code(step.src), self.ns)
            except Exception:  # noqa: BLE001 - kept: the device must raise the same
                if self.compiled:
                    return  # compile mode compares whole programs that run
                val = None
        self.steps.append(step)
        self.env.append(val)
        self.on_dev.append(on_dev)
        self.ns[f"v{i}"] = val

    # picking earlier values ------------------------------------------------------------
    def tensors(self, pred=lambda t: True):
        # (a value that stays on the CPU in the neuron run mixes with device tensors only
        # as a 0-dim tensor, as on CUDA: other mixes raise there and pass on the CPU)
        return [i for i, v in enumerate(self.env)
                if isinstance(v, torch.Tensor) and v.device.type == "cpu"
                and (self.on_dev[i] or v.dim() == 0) and _ok(pred, v)]

    def pick(self, pred=lambda t: True):
        c = self.tensors(pred)
        if not c:
            return None
        return c[self.draw(st.integers(0, len(c) - 1))]

    def t(self, i):
        return self.env[i]


def _ok(pred, v):
    try:
        return bool(pred(v))
    except Exception:  # noqa: BLE001
        return False


def st_shape(min_dims=0, max_dims=3):
    return st.lists(st.sampled_from([1, 2, 3, 4, 2, 3, 0, 5]), min_size=min_dims,
                    max_size=max_dims).map(tuple)


def _shape_like(g):
    """A shape related to the program's base shape (so values broadcast together)."""
    base = g.base_shape
    how = g.draw(st.sampled_from(["same", "same", "ones", "drop", "free", "scalar"]))
    if how == "same":
        return base
    if how == "ones":
        return tuple(1 if g.draw(st.booleans()) else s for s in base)
    if how == "drop":
        return base[g.draw(st.integers(0, len(base))):]
    if how == "scalar":
        return ()
    return g.draw(st_shape())


def _dtype(g, pool=DTYPES):
    return g.draw(st.sampled_from(pool))


def _scalar(g, kind=None):
    kind = kind or g.draw(st.sampled_from(["int", "float", "float", "bool", "complex"]))
    if kind == "int":
        return g.draw(st.integers(-3, 3))
    if kind == "bool":
        return g.draw(st.booleans())
    if kind == "complex":
        return complex(g.draw(st.sampled_from([0.5, 1.0, -2.0])), g.draw(st.sampled_from([1.0, -0.5])))
    return g.draw(st.sampled_from([0.5, -1.5, 2.0, 0.0, 3.25, -0.0, 1e-3]))


def b_make(g):
    dtype = _dtype(g)
    shape = _shape_like(g)
    n = math.prod(shape)
    kind = g.draw(st.sampled_from(["values"] * 4 + ["arange", "full", "zeros", "eye", "linspace",
                                                     "like", "scalar", "cpu_scalar", "random"]))
    rg = ".requires_grad_()" if g.grad and dtype in ("float32", "float64") else ""
    if kind == "values":
        style = g.draw(st.sampled_from(["small", "dyadic", "normal", "special"]))
        rng = np.random.default_rng(g.draw(st.integers(0, 2 ** 16)))
        vals = _values(rng, style, dtype, n)
        return Step("tensor", f"fz.T({lit(vals)}, {dtype!r}, dev, {lit(tuple(shape))}){rg}",
                    is_input=True)
    dtarg = "" if g.draw(st.booleans()) else f", dtype=torch.{dtype}"
    if kind == "arange":
        if g.draw(st.booleans()):
            return Step("arange", f"torch.arange({n}{dtarg}, device=dev).reshape({lit(tuple(shape))})",
                        is_input=True)
        start, step = g.draw(st.sampled_from([(0, 0.5), (1.5, -0.25), (-2, 1), (0.1, 0.3)]))
        if dtype not in FLOATS and step != int(step):
            # an integer dtype truncates a fractional step to 0: torch 2.11's CPU kernel dies
            # of SIGFPE there (2.13 raises, 2.14 fills): the generator runs on the CPU
            dtarg = ""
        return Step("arange", f"torch.arange({start}, {start + step * n}, {step}{dtarg}, device=dev)",
                    is_input=True)
    if kind == "full":
        fill = _scalar(g)
        return Step("full", f"torch.full({lit(tuple(shape))}, {lit(fill)}{dtarg}, device=dev)",
                    is_input=True)
    if kind == "zeros":
        fn = g.draw(st.sampled_from(["zeros", "ones", "empty"]))
        src = f"torch.{fn}({lit(tuple(shape))}{dtarg}, device=dev)"
        if fn == "empty":  # values are defined only with fill_uninitialized_memory (floats: NaN)
            src += f".fill_({lit(_scalar(g, 'int'))})"
        return Step(fn, src, is_input=True)
    if kind == "eye":
        a, b = g.draw(st.integers(0, 4)), g.draw(st.integers(0, 4))
        return Step("eye", f"torch.eye({a}, {b}{dtarg}, device=dev)", is_input=True)
    if kind == "linspace":
        a, b = g.draw(st.sampled_from([(0, 1), (-2.5, 3), (1, -1), (0, 10)]))
        return Step("linspace", f"torch.linspace({a}, {b}, {g.draw(st.integers(0, 7))}{dtarg}, device=dev)",
                    is_input=True)
    if kind == "like":
        i = g.pick()
        if i is None:
            return None
        fn = g.draw(st.sampled_from(["zeros_like", "ones_like", "full_like", "rand_like"]))
        if fn == "rand_like":
            if not g.t(i).is_floating_point():
                return None
            return Step("rand_like", f"torch.rand_like(v{i})", (i,), opaque=True)
        extra = f", {lit(_scalar(g, 'int'))}" if fn == "full_like" else ""
        return Step(fn, f"torch.{fn}(v{i}{extra}{dtarg})", (i,))
    if kind == "scalar":
        return Step("tensor0d", f"torch.tensor({lit(_scalar(g))}, device=dev)", is_input=True)
    if kind == "cpu_scalar":  # a 0-dim CPU tensor: PyTorch lets it mix with device tensors
        return Step("cpu_tensor0d", f"torch.tensor({lit(_scalar(g))}{dtarg})", is_input=True)
    fn = g.draw(st.sampled_from(["rand", "randn", "randint", "randperm", "bernoulli"]))
    if fn == "randint":
        return Step(fn, f"torch.randint(0, 5, {lit(tuple(shape))}, device=dev)", opaque=True,
                    is_input=True)
    if fn == "randperm":
        return Step(fn, f"torch.randperm({n}, device=dev)", opaque=True, is_input=True)
    if fn == "bernoulli":
        return Step(fn, f"torch.bernoulli(torch.full({lit(tuple(shape))}, 0.5, device=dev))",
                    opaque=True, is_input=True)
    return Step(fn, f"torch.{fn}({lit(tuple(shape))}, device=dev)", opaque=True, is_input=True)


def b_view(g):
    i = g.pick()
    if i is None:
        return None
    t = g.t(i)
    nd = t.dim()
    opts = ["detach", "unsqueeze", "flatten", "reshape", "view_dtype", "as_strided", "expand",
            "ellipsis"]
    if nd >= 1:
        opts += ["select", "slice", "slice", "narrow", "unfold", "squeeze", "split", "unbind",
                 "movedim"]
    if nd >= 2:
        opts += ["transpose", "transpose", "permute", "mT", "diagonal"]
    if nd <= 2:
        opts += ["t"]
    if t.is_complex():
        opts += ["real", "imag", "view_as_real"]
    op = g.draw(st.sampled_from(opts))
    d = g.draw(st.integers(-nd, nd - 1)) if nd else 0
    if op == "select":
        s = t.shape[d]
        return Step("select", f"v{i}.select({d}, {g.draw(st.integers(-max(s, 1), max(s, 1) - 1))})", (i,))
    if op == "slice":
        a = g.draw(st.sampled_from([None, 0, 1, -2]))
        b = g.draw(st.sampled_from([None, 3, -1, 100]))
        s = g.draw(st.sampled_from([None, 1, 2, 3]))
        sl = ":".join("" if x is None else str(x) for x in (a, b)) + ("" if s is None else f":{s}")
        dd = d % nd
        return Step("slice", f"v{i}[{':, ' * dd}{sl}]", (i,))
    if op == "narrow":
        s = t.shape[d]
        st0 = g.draw(st.integers(0, s))
        return Step("narrow", f"v{i}.narrow({d}, {st0}, {g.draw(st.integers(0, s - st0))})", (i,))
    if op == "unfold":
        s = t.shape[d]
        size = g.draw(st.integers(0, max(s, 0)))
        step = g.draw(st.integers(max(size, 1), max(size, 1) + 2))
        return Step("unfold", f"v{i}.unfold({d}, {size}, {step})", (i,))
    if op == "squeeze":
        return Step("squeeze", f"v{i}.squeeze({d})", (i,))
    if op == "unsqueeze":
        return Step("unsqueeze", f"v{i}.unsqueeze({g.draw(st.integers(-nd - 1, nd))})", (i,))
    if op == "split":
        k = g.draw(st.integers(1, 3))
        fn = g.draw(st.sampled_from(["split", "chunk", "tensor_split"]))
        j = g.draw(st.integers(0, 2))
        return Step(fn, f"v{i}.{fn}({k}, {d})[{j}]", (i,))
    if op == "unbind":
        s = t.shape[d]
        return Step("unbind", f"v{i}.unbind({d})[{g.draw(st.integers(0, max(s - 1, 0)))}]", (i,))
    if op == "movedim":
        return Step("movedim", f"v{i}.movedim({d}, {g.draw(st.integers(-nd, nd - 1))})", (i,))
    if op == "transpose":
        return Step("transpose", f"v{i}.transpose({d}, {g.draw(st.integers(-nd, nd - 1))})", (i,))
    if op == "permute":
        perm = g.draw(st.permutations(list(range(nd))))
        return Step("permute", f"v{i}.permute({lit(tuple(perm))})", (i,))
    if op == "diagonal":
        return Step("diagonal", f"v{i}.diagonal({g.draw(st.integers(-2, 2))}, {d}, "
                                f"{g.draw(st.integers(-nd, nd - 1))})", (i,))
    if op in ("t", "mT", "real", "imag"):
        return Step(op, f"v{i}.{op}" + ("()" if op == "t" else ""), (i,))
    if op == "view_as_real":
        return Step(op, f"torch.view_as_real(v{i})", (i,))
    if op == "detach":
        return Step(op, f"v{i}.detach()", (i,))
    if op == "ellipsis":
        return Step("index_none", f"v{i}[None, ..., {g.draw(st.sampled_from(['None', '0', '-1', ':']))}]", (i,))
    if op == "flatten":
        return Step(op, f"v{i}.flatten()", (i,))
    if op == "reshape":
        n = t.numel()
        shapes = [(-1,), (1, -1), (n, 1)] + [(a, n // a) for a in (2, 3) if n and n % a == 0]
        fn = g.draw(st.sampled_from(["reshape", "view"]))
        return Step(fn, f"v{i}.{fn}({lit(g.draw(st.sampled_from(shapes)))})", (i,))
    if op == "view_dtype":
        to = g.draw(st.sampled_from([x for x in DTYPES if x != "bool"]))
        return Step("view_dtype", f"v{i}.view(torch.{to})", (i,))
    if op == "expand":
        shape = [(g.draw(st.sampled_from([1, 2, 3])) if s == 1 else -1) for s in t.shape]
        if g.draw(st.booleans()):
            shape = [g.draw(st.integers(1, 3))] + shape
        return Step("expand", f"v{i}.expand({lit(tuple(shape))})", (i,))
    # as_strided within the storage
    avail = t.untyped_storage().nbytes() // max(t.element_size(), 1)
    if avail == 0:
        return None
    size = tuple(g.draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    stride = tuple(g.draw(st.integers(0, 2)) for _ in size)
    span = sum((s - 1) * k for s, k in zip(size, stride))
    if span >= avail:
        return None
    off = g.draw(st.integers(0, avail - 1 - span))
    return Step("as_strided", f"v{i}.as_strided({lit(size)}, {lit(stride)}, {off})", (i,))


UNARY = {  # name: dtypes it is drawn for (None: all)
    "abs": None, "neg": None, "exp": FLOATS + ("complex64",), "log": FLOATS, "log1p": FLOATS,
    "expm1": FLOATS, "sin": FLOATS + ("complex64",), "cos": FLOATS, "tanh": FLOATS + ("complex64",),
    "sigmoid": FLOATS, "sqrt": FLOATS + ("complex64",), "rsqrt": FLOATS, "reciprocal": FLOATS,
    "floor": FLOATS + INTS, "ceil": FLOATS, "round": FLOATS, "trunc": FLOATS, "frac": FLOATS,
    "sign": FLOATS + INTS + ("bool",), "sgn": None, "relu": FLOATS + INTS, "square": None,
    "erf": FLOATS, "bitwise_not": INTS + ("bool",), "logical_not": None, "isnan": None,
    "isinf": None, "nan_to_num": FLOATS, "angle": FLOATS + ("complex64",), "conj": None,
    "exp2": FLOATS, "sinh": FLOATS, "atan": FLOATS, "asin": FLOATS, "digamma": FLOATS,
    "signbit": FLOATS + INTS, "positive": None, "deg2rad": FLOATS,
}
UNARY_INPLACE = {"abs", "neg", "exp", "log", "log1p", "expm1", "sin", "cos", "tanh", "sigmoid",
                 "sqrt", "rsqrt", "reciprocal", "floor", "ceil", "round", "trunc", "frac", "sign",
                 "relu", "square", "erf", "bitwise_not", "logical_not", "nan_to_num", "exp2",
                 "sinh", "atan", "asin", "digamma", "deg2rad"}
UNARY_FN = {"relu": "torch.relu", "gelu": "F.gelu", "silu": "F.silu", "softplus": "F.softplus"}


def b_unary(g):
    i = g.pick()
    if i is None:
        return None
    t = g.t(i)
    dname = str(t.dtype).replace("torch.", "")
    names = [k for k, ds in UNARY.items() if ds is None or dname in ds]
    extra = ["to", "clamp", "clone", "contiguous", "fill_", "zero_"]
    if t.is_floating_point():
        extra += ["gelu", "silu", "softplus", "softmax", "log_softmax", "dropout"]
    op = g.draw(st.sampled_from(names + extra))
    if op == "to":
        to = _dtype(g)
        form = g.draw(st.sampled_from(["to", "type", "method"]))
        if form == "method":
            m = {"float32": "float", "float64": "double", "float16": "half", "int64": "long",
                 "int32": "int", "bool": "bool", "bfloat16": "bfloat16", "int16": "short",
                 "int8": "char", "uint8": "byte", "complex64": "cfloat"}[to]
            return Step("to", f"v{i}.{m}()", (i,))
        return Step("to", f"v{i}.{form}(torch.{to})", (i,))
    if op == "clamp":
        lo, hi = sorted([_scalar(g, "int"), _scalar(g, "int")])
        args = g.draw(st.sampled_from([f"{lo}, {hi}", f"min={lo}", f"max={hi * 0.5}", f"{hi}, {lo}"]))
        return Step("clamp", f"v{i}.clamp{'_' if g.draw(st.booleans()) else ''}({args})", (i,))
    if op in ("clone", "contiguous"):
        return Step(op, f"v{i}.{op}()", (i,))
    if op == "fill_":
        return Step("fill_", f"v{i}.fill_({lit(_scalar(g))})", (i,))
    if op == "zero_":
        return Step("zero_", f"v{i}.zero_()", (i,))
    if op in ("softmax", "log_softmax"):
        d = g.draw(st.integers(-t.dim(), t.dim() - 1)) if t.dim() else 0
        return Step(op, f"F.{op}(v{i}, {d})", (i,))
    if op == "dropout":  # p=0 and eval mode are exact; training dropout is random
        p = g.draw(st.sampled_from([0.0, 0.5]))
        return Step("dropout", f"F.dropout(v{i}, {p}, training={p > 0})", (i,), opaque=p > 0)
    form = g.draw(st.sampled_from(["fn", "method", "inplace", "out"]))
    fn = UNARY_FN.get(op, f"torch.{op}")
    if op in UNARY_FN:
        form = "fn"
    if form == "inplace" and op in UNARY_INPLACE:
        return Step(op + "_", f"v{i}.{op}_()", (i,))
    if form == "out" and op not in ("conj", "positive", "angle"):
        j = g.pick()
        if j is not None:
            return Step(op + "_out", f"torch.{op}(v{i}, out=v{j})", (i, j))
    if form == "method" and op not in UNARY_FN:
        return Step(op, f"v{i}.{op}()", (i,))
    return Step(op, f"{fn}(v{i})", (i,))


BINARY = ("add", "sub", "mul", "div", "div_floor", "div_trunc", "floor_divide", "remainder",
          "fmod", "pow", "maximum", "minimum", "atan2", "eq", "ne", "lt", "le", "gt", "ge",
          "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
          "hypot", "copysign", "fmax", "fmin", "where", "lerp", "addcmul", "add_alpha", "xlogy")
OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floor_divide": "//",
             "remainder": "%", "pow": "**", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
             "gt": ">", "ge": ">=", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
NO_TENSOR_OTHER_SCALAR = {"maximum", "minimum", "atan2", "hypot", "fmax", "fmin", "copysign",
                          "logical_and", "logical_or", "logical_xor"}


def _broadcasts(a, b):
    try:
        torch.broadcast_shapes(a.shape, b.shape)
        return True
    except RuntimeError:
        return False


def b_binary(g):
    i = g.pick()
    if i is None:
        return None
    a = g.t(i)
    op = g.draw(st.sampled_from(BINARY))
    which = g.draw(st.sampled_from(["tensor", "tensor", "scalar", "cpu0d"]))
    uses = [i]
    if which == "tensor" or op in NO_TENSOR_OTHER_SCALAR:
        j = g.pick(lambda b: _broadcasts(a, b) and b.dim() > 0 or b.shape == a.shape)
        if j is None:
            j = i
        other = f"v{j}"
        uses.append(j)
    elif which == "cpu0d":
        other = f"torch.tensor({lit(_scalar(g))})"
    else:
        other = lit(_scalar(g))
    if op == "where":
        j = uses[-1]
        return Step("where", f"torch.where(v{i} > 0, v{i}, {other})", tuple(uses))
    if op == "lerp":
        return Step("lerp", f"torch.lerp(v{i}, {other}, 0.25)", tuple(uses))
    if op == "addcmul":
        return Step("addcmul", f"torch.addcmul(v{i}, v{i}, {other}, value=0.5)", tuple(uses))
    if op == "add_alpha":
        return Step("add", f"torch.add(v{i}, {other}, alpha={lit(_scalar(g, 'int'))})", tuple(uses))
    if op.startswith("div_"):
        mode = op[4:]
        form = g.draw(st.sampled_from(["fn", "inplace"]))
        if form == "inplace":
            return Step("div_", f"v{i}.div_({other}, rounding_mode={mode!r})", tuple(uses))
        return Step("div", f"torch.div(v{i}, {other}, rounding_mode={mode!r})", tuple(uses))
    form = g.draw(st.sampled_from(["fn", "method", "inplace", "out", "operator", "ioperator",
                                   "reflected"]))
    if form in ("operator", "ioperator", "reflected") and op in OPERATORS:
        sym = OPERATORS[op]
        if form == "reflected" and which != "tensor":
            return Step(op, f"{other} {sym} v{i}", tuple(uses))
        if form == "ioperator" and op in ("add", "sub", "mul", "div", "floor_divide", "remainder",
                                          "pow", "bitwise_and", "bitwise_or", "bitwise_xor"):
            dunder = {"add": "iadd", "sub": "isub", "mul": "imul", "div": "itruediv",
                      "floor_divide": "ifloordiv", "remainder": "imod", "pow": "ipow",
                      "bitwise_and": "iand", "bitwise_or": "ior", "bitwise_xor": "ixor"}[op]
            return Step(op + "_", f"v{i}.__{dunder}__({other})", tuple(uses))
        return Step(op, f"(v{i} {sym} {other})", tuple(uses))
    if form == "inplace" and op not in ("fmax", "fmin", "maximum", "minimum"):
        return Step(op + "_", f"v{i}.{op}_({other})", tuple(uses))
    if form == "out":
        k = g.pick()
        if k is not None:
            return Step(op + "_out", f"torch.{op}(v{i}, {other}, out=v{k})", tuple(uses) + (k,))
    if form == "method":
        return Step(op, f"v{i}.{op}({other})", tuple(uses))
    return Step(op, f"torch.{op}(v{i}, {other})", tuple(uses))


REDUCTIONS = ("sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "std", "var", "norm",
              "logsumexp", "cumsum", "cumprod", "all", "any", "count_nonzero", "max", "min",
              "median", "nansum", "aminmax")


def b_reduce(g):
    i = g.pick()
    if i is None:
        return None
    t = g.t(i)
    op = g.draw(st.sampled_from(REDUCTIONS))
    nd = t.dim()
    dim = g.draw(st.sampled_from(["none", "int", "tuple"])) if nd else "none"
    keep = g.draw(st.booleans())
    if op in ("cumsum", "cumprod"):
        d = g.draw(st.integers(-nd, nd - 1)) if nd else 0
        dt_ = f", dtype=torch.{_dtype(g)}" if g.draw(st.booleans()) else ""
        return Step(op, f"torch.{op}(v{i}, {d}{dt_})", (i,))
    if op in ("max", "min", "median") and dim != "none":
        d = g.draw(st.integers(-nd, nd - 1))
        return Step(op + "_dim", f"list(torch.{op}(v{i}, {d}, keepdim={keep}))", (i,))
    if op == "aminmax":
        return Step(op, f"list(torch.aminmax(v{i}))", (i,))
    if dim == "none" or op in ("max", "min", "median", "logsumexp"):
        if op == "logsumexp":
            d = g.draw(st.integers(-nd, nd - 1)) if nd else 0
            return Step(op, f"torch.logsumexp(v{i}, {d})", (i,))
        args = ""
        if op in ("sum", "mean", "prod", "nansum") and g.draw(st.booleans()):
            args = f", dtype=torch.{_dtype(g)}"
        if op in ("std", "var"):
            args = f", correction={g.draw(st.integers(0, 2))}"
        return Step(op, f"torch.{op}(v{i}{args})", (i,))
    if dim == "int" or op in ("argmax", "argmin", "count_nonzero", "all", "any"):
        d = g.draw(st.integers(-nd, nd - 1))
        if op == "count_nonzero":
            return Step(op, f"torch.count_nonzero(v{i}, {d})", (i,))
        return Step(op, f"torch.{op}(v{i}, {d}, keepdim={keep})", (i,))
    dims = tuple(sorted(set(g.draw(st.lists(st.integers(-nd, nd - 1), min_size=1, max_size=nd)))))
    return Step(op, f"torch.{op}(v{i}, {lit(dims)}, keepdim={keep})", (i,))


def b_matmul(g):
    i = g.pick(lambda t: t.dim() >= 1 and (t.is_floating_point() or t.is_complex()))
    if i is None:
        return None
    t = g.t(i)
    form = g.draw(st.sampled_from(["self_t", "pick", "linear", "einsum", "baddbmm"]))
    if form == "self_t" and t.dim() >= 2:
        return Step("matmul", f"(v{i} @ v{i}.mT)", (i,))
    if form == "linear" and t.dim() >= 1:
        j = g.pick(lambda w: w.dim() == 2 and w.shape[1] == t.shape[-1] and w.dtype == t.dtype)
        if j is not None:
            return Step("linear", f"F.linear(v{i}, v{j})", (i, j))
    if form == "einsum" and t.dim() == 2:
        return Step("einsum", f"torch.einsum('ij,kj->ik', v{i}, v{i})", (i,))
    if form == "baddbmm" and t.dim() == 3:
        return Step("baddbmm", f"torch.baddbmm(v{i}.sum(2, keepdim=True), v{i}, v{i}.mT, beta=0.5)",
                    (i,))
    j = g.pick(lambda w: w.dim() >= 1 and w.dtype == t.dtype)
    return Step("matmul", f"torch.matmul(v{i}, v{j if j is not None else i})",
                (i, j if j is not None else i))


def _index_lit(g, size, k):
    if size == 0:
        return "[]"
    return lit([g.draw(st.integers(-size, size - 1)) for _ in range(k)])


def b_index(g):
    i = g.pick(lambda t: t.dim() >= 1)
    if i is None:
        return None
    t = g.t(i)
    s0 = t.shape[0]
    k = g.draw(st.integers(0, 4))
    idx = f"fz.T({_index_lit(g, s0, k)}, 'int64', dev, ({k if s0 else 0},))"
    op = g.draw(st.sampled_from(["getitem", "mask", "index_select", "index_put_", "index_add_",
                                 "masked_fill", "setitem_slice", "setitem_index", "gather",
                                 "scatter_", "scatter_add_", "nonzero", "take", "mask_where"]))
    if op == "getitem":
        return Step("index", f"v{i}[{idx}]", (i,))
    if op == "mask":
        return Step("index_mask", f"v{i}[v{i} != 0]", (i,))
    if op == "index_select":
        return Step(op, f"torch.index_select(v{i}, 0, {idx})", (i,))
    if op == "index_put_":
        acc = g.draw(st.booleans())
        val = lit(_scalar(g, "int"))
        return Step(op, f"v{i}.index_put_(({idx},), torch.tensor({val}, dtype=v{i}.dtype, "
                        f"device=dev), accumulate={acc})", (i,))
    if op == "index_add_":
        return Step(op, f"v{i}.index_add_(0, {idx}, torch.ones(({k if s0 else 0},) + v{i}.shape[1:], "
                        f"dtype=v{i}.dtype, device=dev), alpha=2)", (i,))
    if op == "masked_fill":
        ip = "_" if g.draw(st.booleans()) else ""
        return Step("masked_fill" + ip, f"v{i}.masked_fill{ip}(v{i} == 0, {lit(_scalar(g, 'int'))})",
                    (i,))
    if op == "setitem_slice":
        return Step("setitem", f"fz.setitem(v{i}, (slice(None, None, 2),), {lit(_scalar(g, 'int'))})",
                    (i,))
    if op == "setitem_index":
        j = g.pick(lambda b: b.dim() <= t.dim() - 1 or b.dim() == 0)
        val = f"v{j}" if j is not None else lit(_scalar(g, "int"))
        return Step("setitem", f"fz.setitem(v{i}, {idx}, {val})", (i,) + ((j,) if j is not None else ()))
    if op in ("gather", "scatter_", "scatter_add_"):
        shape = tuple(t.shape)
        n = math.prod(shape)
        if n == 0:
            return None
        d = g.draw(st.integers(0, t.dim() - 1))
        vals = [g.draw(st.integers(0, shape[d] - 1)) for _ in range(n)]
        ix = f"fz.T({lit(vals)}, 'int64', dev, {lit(shape)})"
        if op == "gather":
            return Step(op, f"torch.gather(v{i}, {d}, {ix})", (i,))
        return Step(op, f"v{i}.{op}({d}, {ix}, torch.ones_like(v{i}))", (i,))
    if op == "nonzero":
        return Step(op, f"torch.nonzero(v{i})", (i,))
    if op == "take":
        n = t.numel()
        return Step(op, f"torch.take(v{i}, fz.T({_index_lit(g, n, k)}, 'int64', dev, ({k if n else 0},)))",
                    (i,))
    return Step("where1", f"list(torch.where(v{i} > 0))", (i,))


def b_shape(g):
    i = g.pick()
    if i is None:
        return None
    t = g.t(i)
    nd = t.dim()
    d = g.draw(st.integers(-nd, nd - 1)) if nd else 0
    op = g.draw(st.sampled_from(["cat", "stack", "flip", "roll", "repeat", "tril", "sort", "topk",
                                 "cpu", "new_zeros", "broadcast_to", "tile", "clone_cl", "cat_other"]))
    if op == "cat" and nd:
        return Step("cat", f"torch.cat([v{i}, v{i}], {d})", (i,))
    if op == "cat_other" and nd:
        j = g.pick(lambda b: b.dim() == nd)
        if j is not None:
            return Step("cat", f"torch.cat([v{i}, v{j}], {d})", (i, j))
    if op == "stack":
        return Step("stack", f"torch.stack([v{i}, v{i}.clone()], {g.draw(st.integers(0, nd))})", (i,))
    if op == "flip" and nd:
        return Step("flip", f"v{i}.flip({d})", (i,))
    if op == "roll" and nd:
        return Step("roll", f"v{i}.roll({g.draw(st.integers(-3, 3))}, {d})", (i,))
    if op == "repeat":
        reps = tuple(g.draw(st.integers(1, 2)) for _ in range(nd)) + ((2,) if g.draw(st.booleans()) else ())
        return Step("repeat", f"v{i}.repeat({lit(reps) if reps else '()'})", (i,))
    if op == "tile":
        return Step("tile", f"v{i}.tile((2,))", (i,))
    if op == "tril" and nd >= 2:
        fn = g.draw(st.sampled_from(["tril", "triu"]))
        ip = "_" if g.draw(st.booleans()) else ""
        return Step(fn + ip, f"v{i}.{fn}{ip}({g.draw(st.integers(-1, 1))})", (i,))
    if op == "sort":
        stable = g.draw(st.booleans())
        return Step("sort", f"list(torch.sort(v{i}, {d}, descending={g.draw(st.booleans())}, "
                            f"stable={stable}))", (i,))
    if op == "topk" and nd and t.shape[d] > 0:
        return Step("topk", f"torch.topk(v{i}, {g.draw(st.integers(0, t.shape[d]))}, {d})[0]", (i,))
    if op == "cpu":
        return Step("cpu", f"v{i}.cpu()", (i,))
    if op == "new_zeros":
        return Step("new_zeros", f"v{i}.new_zeros((2,)) + v{i}.new_tensor([1, 2])", (i,))
    if op == "broadcast_to":
        return Step("broadcast_to", f"torch.broadcast_to(v{i}, (2,) + v{i}.shape)", (i,))
    if op == "clone_cl" and nd == 4:
        return Step("clone", f"v{i}.clone(memory_format=torch.channels_last)", (i,))
    return Step("clone", f"v{i}.clone()", (i,))


def b_read(g):
    i = g.pick()
    if i is None:
        return None
    op = g.draw(st.sampled_from(["item", "tolist", "bool", "float", "repr", "is_contiguous",
                                 "storage_offset", "numel", "equal", "allclose", "data_ptr"]))
    if op == "item":
        return Step("item", f"v{i}.sum().item()", (i,))
    if op == "tolist":
        return Step("tolist", f"v{i}.tolist()", (i,))
    if op == "bool":
        return Step("bool", f"bool(v{i}.any())", (i,))
    if op == "float":
        return Step("float", f"float(v{i}.reshape(-1)[0])", (i,))
    if op == "repr":
        return Step("repr", f"repr(v{i})", (i,))
    if op in ("is_contiguous", "storage_offset", "numel"):
        return Step(op, f"v{i}.{op}()", (i,))
    j = g.pick() or i
    if op == "equal":
        return Step(op, f"torch.equal(v{i}, v{j})", (i, j))
    if op == "allclose":
        return Step(op, f"torch.allclose(v{i}, v{j}, equal_nan=True)", (i, j))
    return Step("same_data_ptr", f"v{i}.data_ptr() == v{j}.data_ptr()", (i, j))


def b_state(g):
    op = g.draw(st.sampled_from(["default_dtype", "grad_mode", "seed", "deterministic",
                                 "autocast", "autocast_exit"]))
    if op == "default_dtype":
        return Step(op, f"torch.set_default_dtype(torch.{g.draw(st.sampled_from(['float64', 'float32']))})",
                    compilable=False)
    if op == "grad_mode":
        return Step(op, f"torch.set_grad_enabled({g.draw(st.booleans())})", compilable=False)
    if op == "seed":
        return Step(op, f"torch.manual_seed({g.draw(st.integers(0, 3))}) and None", compilable=False)
    if op == "deterministic":
        on = g.draw(st.booleans())
        return Step(op, f"fz.deterministic({on}, {g.draw(st.booleans())})", compilable=False)
    if op == "autocast" and g.autocast_depth < 2:
        g.autocast_depth += 1
        return Step(op, f"fz.autocast_enter(dev, {g.draw(st.sampled_from(['bfloat16', 'float16']))!r})",
                    compilable=False)
    if g.autocast_depth:
        g.autocast_depth -= 1
    return Step("autocast_exit", "fz.autocast_exit()", compilable=False)


def b_autograd(g):
    op = g.draw(st.sampled_from(["backward", "backward", "hook", "retain", "detach_"]))
    grads = g.tensors(lambda t: t.requires_grad)
    if not grads:
        return None
    if op == "backward":
        picked = sorted(set(g.draw(st.lists(st.sampled_from(grads), min_size=1, max_size=3))))
        return Step("backward", f"fz.backward({', '.join(f'v{k}' for k in picked)})", tuple(picked),
                    compilable=False)
    i = grads[g.draw(st.integers(0, len(grads) - 1))]
    if op == "hook":
        return Step("hook", f"fz.hook(v{i}, {g.draw(st.sampled_from([2.0, -1.0, 0.5]))})", (i,),
                    compilable=False)
    if op == "retain":
        return Step("retain_grad", f"fz.retain(v{i})", (i,), compilable=False)
    return Step("detach", f"v{i}.detach()", (i,))


def b_module(g):
    recipe = g.draw(st.sampled_from(["mlp", "tied_lm", "conv", "gru"]))
    opt = g.draw(st.sampled_from(["sgd", "adam", "adamw"]))
    dup = g.draw(st.sampled_from(["none", "deepcopy", "state_dict"]))
    return Step("module_" + recipe, f"fz.module({recipe!r}, {g.draw(st.integers(0, 3))}, dev, {opt!r}, "
                                    f"{g.draw(st.integers(0, 2))}, {dup!r})",
                compilable=False, is_input=True)


BUILDERS = (
    (b_make, 4), (b_view, 5), (b_unary, 4), (b_binary, 5), (b_reduce, 2), (b_matmul, 1),
    (b_index, 2), (b_shape, 2), (b_read, 1), (b_state, 1), (b_autograd, 2), (b_module, 0.3),
)


def _choices():
    out = []
    for fn, w in BUILDERS:
        out += [fn] * max(1, int(w * 3))
    return out


_CHOICES = _choices()


@st.composite
def programs(draw, mode="eager", max_steps=10):
    """A program (a list of :class:`Step`); ``mode`` is ``eager``, ``compiled`` or ``mixed``."""
    compiled = mode == "compiled" or (mode == "mixed" and draw(st.integers(0, 3)) == 3)
    grad = draw(st.booleans())
    with pristine_state():
        g = Gen(draw, grad, compiled, max_steps)
        g.add(b_make(g) or Step("tensor", "fz.T([1.0], 'float32', dev, (1,))", is_input=True))
        n = draw(st.integers(1, max_steps))
        for _ in range(n):
            fn = draw(st.sampled_from(_CHOICES))
            step = fn(g)
            if step is None or (compiled and not step.compilable):
                continue
            if compiled and step.is_input and any(not s.is_input for s in g.steps):
                step.is_input = False  # created inside the compiled function
            g.add(step)
    return Program(g.steps, compiled)


@dataclass
class Program:
    steps: list
    compiled: bool = False

    def source(self, backend="neuron"):
        return repro_source(self.steps, self.compiled, backend)

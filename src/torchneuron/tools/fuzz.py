"""``torchneuron fuzz``: random PyTorch programs on neuron against the CPU, with shrinking.

Programs come from hypothesis strategies (:mod:`torchneuron.tools.fuzz_programs`); each
runs op by op on the CPU and on neuron (or, in compile mode, as one
``torch.compile(backend="neuron")`` function against the same function run eagerly on the
CPU), and :func:`judge` compares everything PyTorch defines: values (at the dtype's
tolerance), dtypes, shapes, strides, which values share storage, errors (type and message),
warnings and gradients. A difference explained by rounding is told apart from a real one by
re-running the step that first differs on the device with the CPU's exact inputs. Known,
explained differences live in ``src/torchneuron/tools/data/fuzz_allowlist.csv``, one reason each.

A new kind of failure is shrunk by hypothesis to a minimal program and written as a
standalone Python repro (``--out``). The run prints a JSON summary (``--json``).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
import time
from dataclasses import dataclass

import torch

from . import fuzz_programs as fp
from .conformance import data_path, repo_root

ROOT = repo_root()
DEFAULT_ALLOWLIST = data_path("fuzz_allowlist.csv")
DEFAULT_OUT = os.path.join(ROOT, "reports", "fuzz")

_TOL = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
        "float64": (1e-7, 1e-7), "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7)}
# values go through several ops: allow a few roundings more than one op's tolerance
_CHAIN = 4.0


@dataclass
class Mismatch:
    kind: str      # value | dtype | shape | stride | device | error | warning | alias | grad | ...
    step: int      # the first step whose result differs (-1: the program as a whole)
    name: str      # that step's operation
    detail: str
    src: str = ""

    @property
    def signature(self):
        return f"{self.kind}:{self.name}"


def _close(a, b, dtype):
    rtol, atol = _TOL.get(dtype, (0.0, 0.0))
    try:
        torch.testing.assert_close(a, b, rtol=rtol * _CHAIN, atol=atol * _CHAIN, equal_nan=True,
                                   check_device=False, check_dtype=False, check_stride=False,
                                   check_layout=False)
        return None
    except AssertionError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return "; ".join(lines[:3])


def _scalar_close(a, b):
    if isinstance(a, float) and isinstance(b, float):
        if a != a and b != b:
            return True
        return a == b or abs(a - b) <= 1e-5 * max(abs(a), abs(b)) + 1e-6
    if isinstance(a, complex) and isinstance(b, complex):
        return _scalar_close(a.real, b.real) and _scalar_close(a.imag, b.imag)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_scalar_close(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def compare_values(got: fp.Value, want: fp.Value, expect_device: str, strides=True):
    """[(kind, detail)] where ``got`` (neuron) differs from ``want`` (CPU)."""
    if got is None or want is None:
        return [] if got is want else [("kind", f"{_brief(got)} vs {_brief(want)}")]
    if got.kind != want.kind:
        return [("kind", f"{got.kind} vs {want.kind}")]
    if got.kind == "list":
        if len(got.data) != len(want.data):
            return [("shape", f"{len(got.data)} items vs {len(want.data)}")]
        out = []
        for a, b in zip(got.data, want.data):
            out += compare_values(a, b, expect_device, strides)
        return out
    if got.kind == "scalar":
        if got.opaque or want.opaque:
            return [] if type(got.data) is type(want.data) else [("kind", "scalar types")]
        return [] if _scalar_close(got.data, want.data) else [("value", f"{got.data!r} vs {want.data!r}")]
    if got.kind != "tensor":
        return [] if got.data == want.data else [("kind", f"{got.data} vs {want.data}")]
    out = []
    if got.dtype != want.dtype:
        return [("dtype", f"{got.dtype} vs {want.dtype}")]
    if got.opaque or want.opaque:  # random data: a data-dependent shape may differ too
        return [("device", f"{got.device} vs {expect_device}")] if got.device != expect_device else []
    if got.shape != want.shape:
        return [("shape", f"{got.shape} vs {want.shape}")]
    if got.device != expect_device:
        out.append(("device", f"{got.device} vs {expect_device}"))
    if got.requires_grad != want.requires_grad:
        out.append(("requires_grad", f"{got.requires_grad} vs {want.requires_grad}"))
    # (a size-1 dimension's stride means nothing: PyTorch's contiguity ignores it)
    if strides and math_numel(got.shape) > 1 and any(
            a != b for a, b, n in zip(got.stride, want.stride, got.shape) if n > 1):
        out.append(("stride", f"{got.stride} vs {want.stride}"))
    if not (got.opaque or want.opaque):
        d = _close(got.data, want.data, got.dtype)
        if d:
            out.append(("value", d))
    return out


def math_numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _brief(v):
    return "nothing" if v is None else v.kind


def on_device(steps):
    """Per step: whether its tensor result lives on the device in the neuron run."""
    flags = []
    for s in steps:
        dev = (re.search(r"\bdev\b", s.src) is not None or any(flags[u] for u in s.uses))
        flags.append(dev and s.name != "cpu")
    return flags


def under_autocast(steps):
    """Per step: whether it runs inside an autocast region."""
    depth, out = 0, []
    for s in steps:
        if s.name == "autocast":
            depth += 1
        elif s.name == "autocast_exit":
            depth = max(depth - 1, 0)
        out.append(depth > 0)
    return out


def diff_traces(steps, got: fp.Trace, want: fp.Trace, compiled=False):
    """Every difference, as :class:`Mismatch` (first step first)."""
    devs = on_device(steps)
    amp = under_autocast(steps)
    out = []

    def add(kind, i, detail):
        if i >= 0 and amp[i] and kind.split("_")[-1] in ("value", "dtype", "kind"):
            detail += " [under autocast]"
        name = steps[i].name if i >= 0 else "program"
        out.append(Mismatch(kind, i, name, detail, steps[i].src if i >= 0 else ""))

    if compiled and (got.error_step >= 0 or want.error_step >= 0) and got.error != want.error:
        add("error", max(got.error_step, want.error_step), f"{got.error} vs {want.error}")
        return out
    if compiled:
        if (got.error is None) != (want.error is None) or got.error != want.error:
            add("error", -1, f"{got.error} vs {want.error}")
            return out
    for i, (g, w) in enumerate(zip(got.steps, want.steps)):
        if g.error != w.error:
            add("error", i, f"{g.error} vs {w.error}")
            continue
        if g.warnings != w.warnings:
            add("warning", i, f"{list(g.warnings)} vs {list(w.warnings)}")
        if g.error is None:
            for kind, d in compare_values(g.value, w.value, "neuron" if devs[i] else "cpu"):
                add(kind, i, d)
    for i, (g, w) in enumerate(zip(got.final, want.final)):
        if not devs[i] and steps[i].name == "cpu":
            continue  # .cpu() of a CPU tensor is the tensor: later writes to it show there
        for kind, d in compare_values(g, w, "neuron" if devs[i] else "cpu"):
            add("final_" + kind, i, d)
    for i, (g, w) in enumerate(zip(got.grads, want.grads)):
        for kind, d in compare_values(g, w, "neuron" if devs[i] else "cpu", strides=False):
            add("grad_" + kind, i, d)
    # a CPU-resident value (``.cpu()``) is its own source in the CPU run, a copy on neuron
    # (and two .cpu() copies on neuron are the same tensor on the CPU): only device values
    gs = {p for p in got.shares if devs[p[0]] and devs[p[1]]}
    ws = {p for p in want.shares if devs[p[0]] and devs[p[1]]}
    if gs != ws:
        extra = sorted(gs - ws)
        missing = sorted(ws - gs)
        first = min([p[1] for p in extra + missing])
        add("alias", first, f"shared only on neuron {extra}, only on CPU {missing}")
    # a step's own difference first: a later value, gradient or alias differs because of it
    out.sort(key=lambda m: (m.kind.split("_")[0] in ("final", "grad", "alias"), m.step))
    return out


# ---------------------------------------------------------------------------------------
# the allowlist


def load_allowlist(path=DEFAULT_ALLOWLIST):
    rows = []
    if path and os.path.exists(path):
        with open(path, newline="") as f:
            for r in csv.DictReader(line for line in f if not line.startswith("#")):
                rows.append((r["kind"], re.compile(r["step"]), re.compile(r["source"]),
                             re.compile(r["detail"]), r["reason"]))
    return rows


def allowed(m: Mismatch, allowlist):
    for kind, step, src, detail, reason in allowlist:
        if (re.fullmatch(kind, m.kind) and step.fullmatch(m.name) and src.search(m.src)
                and detail.search(m.detail)):
            return reason
    return None


# ---------------------------------------------------------------------------------------
# judging one program

ROUNDING = "rounding"


def _rounding_only(steps, m: Mismatch, device):
    """A value difference that is only rounding: the step that first differs gives the CPU's
    result on the device when it gets the CPU's exact inputs."""
    if m.step < 0 or m.kind not in ("value", "final_value", "grad_value", "kind", "shape", "dtype",
                                    "error", "alias", "final_shape", "warning"):
        return False
    k = m.step
    want_env, got_env = [], []
    fp.run(steps, "cpu", stop=k, env_out=want_env)
    fp.run(steps, device, stop=k, env_out=got_env)
    uses = set(steps[k].uses)
    exact = True
    for u in uses:
        a, b = got_env[u], want_env[u]
        if not isinstance(b, torch.Tensor):
            continue
        if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        ga = a.detach().cpu()
        if _close(ga, b.detach(), str(b.dtype).replace("torch.", "")):
            return False  # the inputs already differ more than rounding
        if not _bitwise_equal(ga, b.detach()):
            exact = False
    if exact:
        return False  # same inputs, different result: the op itself
    # the CPU's inputs, on the device, in the same layout
    subst = {}
    for u in uses:
        b = want_env[u]
        if isinstance(b, torch.Tensor):
            t = torch.empty_strided(b.shape, b.stride(), dtype=b.dtype, device=device)
            with torch.no_grad():
                t.copy_(b.detach())
            subst[u] = t.requires_grad_(b.requires_grad) if b.is_leaf and b.requires_grad else t
    ns = fp.namespace(device)
    ns.update({f"v{i}": v for i, v in enumerate(got_env)})
    ns.update({f"v{u}": t for u, t in subst.items()})
    with fp.pristine_state():
        # replay the global-state steps before k (default dtype, grad mode, autocast...)
        for s in steps[:k]:
            if not s.compilable and s.name != "backward" and not s.name.startswith("module"):
                try:
                    eval(fp._code(s.src), ns)
                except Exception:  # noqa: BLE001
                    pass
        try:
            val = eval(fp._code(steps[k].src), ns)
            got = fp.describe(val)
        except Exception:  # noqa: BLE001
            return False
    want = fp.run(steps, "cpu", stop=k + 1).steps[k]
    if want.error is not None:
        return False
    return not compare_values(got, want.value, got.device if got.kind == "tensor" else "", strides=False)


def _localize(steps, m: Mismatch, device):
    """A difference seen only at the end (a value changed later, a gradient, aliasing):
    named after the first step whose prefix of the program shows it."""
    for k in range(m.step, len(steps)):
        got, want = fp.run(steps, device, stop=k + 1), fp.run(steps, "cpu", stop=k + 1)
        for d in diff_traces(steps[:k + 1], got, want):
            if d.kind == m.kind:
                detail = d.detail
                if want.steps[k].error is not None and want.steps[k].error == got.steps[k].error:
                    detail += " [after an error]"
                return Mismatch(m.kind, k, steps[k].name, detail, steps[k].src)
    return m


_BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bitwise_equal(a, b):
    """The same bits (so the same sign on every zero and the same NaNs)."""
    if a.is_complex():
        return _bitwise_equal(torch.view_as_real(a), torch.view_as_real(b))
    if not a.is_floating_point():
        return torch.equal(a, b)
    bits = _BITS[a.element_size()]
    return torch.equal(a.contiguous().view(bits), b.contiguous().view(bits))


def execute(program, device="neuron", backend="neuron"):
    """(neuron trace, CPU trace) of one program."""
    if program.compiled:
        want = fp.run_compiled(program.steps, "cpu", None)
        got = fp.run_compiled(program.steps, device, backend)
        if got.error is not None and want.error is None:
            # what PyTorch's own compile stack does with the program on the CPU (AOTAutograd
            # refuses some programs eager mode runs: a derivative that is not implemented)
            ref = fp.run_compiled(program.steps, "cpu", "aot_eager")
            if ref.error is not None and ref.error[0] == got.error[0]:
                want = ref
    else:
        want = fp.run(program.steps, "cpu")
        got = fp.run(program.steps, device)
    return got, want


def judge(program, allowlist=(), device="neuron", backend="neuron"):
    """``(status, mismatch or None, reason, fallbacks)``; status is ``pass``, ``rounding``,
    ``allowed`` or ``mismatch``."""
    try:
        got, want = execute(program, device, backend)
    except Exception as e:  # noqa: BLE001 - a defect of the harness or a crash of the device
        m = Mismatch("harness", -1, "program", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return "mismatch", m, None, {}
    ms = diff_traces(program.steps, got, want, program.compiled)
    if ms and program.compiled:
        # what PyTorch's own compile stack gives on the CPU (a compiled function may return
        # a copy where eager mode returns its input itself: F.dropout(x, 0.0, False))
        ref = fp.run_compiled(program.steps, "cpu", "aot_eager")
        if ref.error is None or ref.error == got.error:
            ms = diff_traces(program.steps, got, ref, True)
    if not ms:
        return "pass", None, None, got.fallbacks
    first = ms[0]
    if not program.compiled and first.kind.split("_")[0] in ("final", "grad", "alias"):
        first = _localize(program.steps, first, device)
    reason = allowed(first, allowlist)
    if reason:
        return "allowed", first, reason, got.fallbacks
    if not program.compiled and _rounding_only(program.steps, first, device):
        return ROUNDING, first, None, got.fallbacks
    if program.compiled:
        # fused programs round differently: explained when the same program op by op on the
        # device (which rounds per op, like the CPU) differs from the CPU in the same way
        # and that difference is rounding
        eager = fp.Program(program.steps, False)
        st, m2, r2, _ = judge(eager, allowlist, device, backend)
        if st in (ROUNDING, "allowed"):
            return ROUNDING, first, r2, got.fallbacks
    return "mismatch", first, None, got.fallbacks


# ---------------------------------------------------------------------------------------
# the hypothesis driver


_V = re.compile(r"\bv(\d+)\b")


def drop_step(steps, j):
    """The program without step ``j`` (later values renumbered); None if a later step uses it."""
    if any(re.search(rf"\bv{j}\b", s.src) for s in steps[j + 1:]):
        return None
    out = []
    for i, s in enumerate(steps):
        if i == j:
            continue
        src = _V.sub(lambda mo: f"v{int(mo.group(1)) - (int(mo.group(1)) > j)}", s.src)
        uses = tuple(u - (u > j) for u in s.uses)
        out.append(fp.Step(s.name, src, uses, s.opaque, s.compilable, s.is_input))
    return out


def minimize(program, signature, allowlist=(), backend="neuron"):
    """Drop every step the failure does not need (after hypothesis's shrinking, which keeps
    steps whose removal would change what later draws pick)."""
    steps = list(program.steps)
    m = None
    changed = True
    while changed:
        changed = False
        for j in range(len(steps) - 1, -1, -1):
            cand = drop_step(steps, j)
            if not cand:
                continue
            st, m2, _, _ = judge(fp.Program(cand, program.compiled), allowlist, backend=backend)
            if st == "mismatch" and m2.signature == signature:
                steps, m, changed = cand, m2, True
    return fp.Program(steps, program.compiled), m


class _Failure(AssertionError):
    pass


def _fail(signature):
    # one raise site: hypothesis tells bugs apart by where they are raised, and the shrinker
    # must see the generated failure and its smaller copies as the same bug
    raise _Failure(signature)


class Fuzzer:
    def __init__(self, n, seed, mode="mixed", max_steps=10, allowlist=DEFAULT_ALLOWLIST, out=None,
                 progress=True, max_failures=25, backend="neuron", verbose=False):
        self.n, self.seed, self.mode, self.max_steps = n, seed, mode, max_steps
        self.allowlist = load_allowlist(allowlist) if isinstance(allowlist, str) else list(allowlist)
        self.out, self.progress, self.max_failures = out, progress, max_failures
        self.backend, self.verbose = backend, verbose
        self.counts = {"programs": 0, "eager": 0, "compiled": 0, "pass": 0, ROUNDING: 0, "allowed": 0,
                       "mismatch": 0, "steps": 0, "shrink_runs": 0}
        self.failures = {}   # signature -> dict
        self.allowed_counts = {}
        self.fallbacks = {}

    def _bar(self):
        from tqdm import tqdm

        return tqdm(total=self.n, desc="fuzz", unit="program", dynamic_ncols=True,
                    disable=not self.progress, file=sys.stderr)

    def run(self):
        from hypothesis import HealthCheck, Phase, given, settings, Verbosity
        from hypothesis import seed as hseed

        import logging

        import torchneuron

        logging.getLogger("torch._dynamo").setLevel(logging.ERROR)  # graph-break notices
        bar = self._bar()
        t0 = time.time()
        rnd = 0
        with torchneuron.fallback_policy("silent"):
            while self.counts["programs"] < self.n and len(self.failures) < self.max_failures:
                state = {"target": None, "last": None, "generated": 0}
                remaining = self.n - self.counts["programs"]

                @settings(max_examples=remaining, database=None, deadline=None,
                          suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                          phases=[Phase.generate, Phase.shrink], verbosity=Verbosity.quiet,
                          print_blob=False)
                @hseed(self.seed * 7919 + rnd)
                @given(fp.programs(mode=self.mode, max_steps=self.max_steps))
                def check(program):
                    status, m, reason, fb = judge(program, self.allowlist, backend=self.backend)
                    if state["target"] is not None:  # shrinking the round's failure
                        self.counts["shrink_runs"] += 1
                        if status == "mismatch" and m.signature == state["target"]:
                            state["last"] = (program, m)
                            _fail(m.signature)
                        return
                    self._count(program, status, m, reason, fb)
                    state["generated"] += 1
                    bar.update(1)
                    if status == "mismatch" and m.signature not in self.failures:
                        state["target"] = m.signature
                        state["last"] = (program, m)
                        self.failures[m.signature] = {"count": 1, "first_seen": self.counts["programs"]}
                        _fail(m.signature)
                    if status == "mismatch":
                        self.failures[m.signature]["count"] += 1

                try:
                    check()
                except AssertionError:
                    pass
                except Exception as e:  # noqa: BLE001 - e.g. hypothesis giving up
                    print(f"fuzz: round {rnd} stopped: {type(e).__name__}: {e}", file=sys.stderr)
                if state["target"] is not None and state["last"] is not None:
                    self._record_failure(state["target"], *state["last"])
                elif state["generated"] == 0:
                    break  # hypothesis could not generate more
                rnd += 1
        bar.close()
        self.counts["seconds"] = round(time.time() - t0, 1)
        return self.summary()

    def _count(self, program, status, m, reason, fb):
        c = self.counts
        c["programs"] += 1
        c["compiled" if program.compiled else "eager"] += 1
        c["steps"] += len(program.steps)
        c[status] += 1
        key = "compiled" if program.compiled else "eager"
        c[f"{key}_{status}"] = c.get(f"{key}_{status}", 0) + 1
        if status == "allowed":
            self.allowed_counts[reason] = self.allowed_counts.get(reason, 0) + 1
        for op, k in fb.items():
            self.fallbacks[op] = self.fallbacks.get(op, 0) + k
        if self.verbose and status == "mismatch":
            print(f"\n{m.signature}: {m.detail}\n{program.source()}", file=sys.stderr)

    def _record_failure(self, sig, program, m):
        small, m2 = minimize(program, sig, self.allowlist, self.backend)
        if m2 is not None:
            program, m = small, m2
        f = self.failures[sig]
        f.update(kind=m.kind, op=m.name, detail=m.detail[:500], step=m.step, source=m.src,
                 compiled=program.compiled, steps=len(program.steps),
                 program=[[s.name, s.src, list(s.uses), s.opaque, s.compilable, s.is_input]
                          for s in program.steps])
        if self.out:
            os.makedirs(self.out, exist_ok=True)
            fname = re.sub(r"[^A-Za-z0-9_]+", "_", sig).strip("_") + ".py"
            path = os.path.join(self.out, fname)
            with open(path, "w") as fh:
                fh.write(f"# {sig}: {m.detail[:300]}\n# first differing step: v{m.step} = {m.src}\n")
                fh.write(program.source(self.backend))
            f["repro"] = os.path.relpath(path, ROOT) if path.startswith(ROOT) else path
        print(f"\nfuzz: new failure {sig} (shrunk to {len(program.steps)} steps): {m.detail[:200]}",
              file=sys.stderr)

    def summary(self):
        return {"seed": self.seed, "mode": self.mode, "max_steps": self.max_steps,
                "torch": torch.__version__, "counts": self.counts,
                "unexplained": len(self.failures), "failures": self.failures,
                "allowed": self.allowed_counts, "fallbacks": self.fallbacks}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="torchneuron fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--programs", type=int, default=200, help="programs to run (default 200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mode", default="mixed", choices=("eager", "compiled", "mixed"),
                   help="op-by-op programs, torch.compile'd programs, or both (1 in 4 compiled)")
    p.add_argument("--max-steps", type=int, default=10, help="steps per program (at most)")
    p.add_argument("--allowlist", default=DEFAULT_ALLOWLIST)
    p.add_argument("--out", default=DEFAULT_OUT, help="folder for the shrunk repros")
    p.add_argument("--json", help="write the summary here (also printed)")
    p.add_argument("--max-failures", type=int, default=25, help="stop after this many kinds")
    p.add_argument("--verbose", action="store_true", help="print every mismatching program")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    fz = Fuzzer(a.programs, a.seed, a.mode, a.max_steps, a.allowlist, a.out, not a.no_progress,
                a.max_failures, verbose=a.verbose)
    s = fz.run()
    text = json.dumps(s, indent=1, default=str)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            f.write(text + "\n")
    print(text)
    return 1 if s["unexplained"] else 0


if __name__ == "__main__":
    sys.exit(main())

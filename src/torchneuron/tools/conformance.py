"""``torchneuron conformance``: PyTorch's OpInfo database run on the neuron device.

Every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db``
(and variant) × dtype × sample input is run on the CPU and on the neuron
device through PyTorch's device-generic test machinery (see
``conformance_worker``), in parallel worker processes, and classified per
op × dtype × check (forward; float32 backward) as PASS, MISMATCH, ERROR,
FALLBACK, TIMEOUT, UNSUPPORTED_DTYPE or SKIP.

Results are appended to a JSONL file as they come, so an interrupted run
resumes where it stopped.  At the end the reports are (re)built from every
result in that file: ``reports/conformance.json``, ``docs/coverage.md`` and
``docs/coverage.png``.

    torchneuron conformance                      # full sweep (resumes), then reports
    torchneuron conformance --ops add,mul,nn.functional.conv2d --dtypes float32
    torchneuron conformance --shard 1/2          # half of the ops (by op)
    torchneuron conformance --report-only        # rebuild the reports from the results
    torchneuron conformance --gate               # the CI sample vs the baseline
    torchneuron conformance --gate --update-baseline
"""
from __future__ import annotations

import argparse
import collections
import csv
import datetime as _dt
import fnmatch
import io
import json
import multiprocessing
import multiprocessing.connection
import os
import platform
import shlex
import sys
import tempfile
import time

from .. import config
from .status import PRECEDENCE

_HERE = os.path.dirname(os.path.abspath(__file__))


def checkout() -> str | None:
    """The source checkout torchneuron runs from (editable install), None for a wheel."""
    root = os.path.abspath(os.path.join(_HERE, "..", "..", ".."))
    return root if os.path.exists(os.path.join(root, "pyproject.toml")) else None


def repo_root() -> str:
    """The source checkout (where reports/ and docs/ live), else the current directory."""
    if config.get("TORCHNEURON_CONFORMANCE_ROOT"):  # set by --snapshot
        return config.get("TORCHNEURON_CONFORMANCE_ROOT")
    return checkout() or os.getcwd()


def data_path(name: str) -> str:
    """A file shipped with the package (the gates' baselines, the fuzzer's allowlist)."""
    return os.path.join(_HERE, "data", name)


ROOT = repo_root()
DEFAULT_RESULTS = os.path.join(ROOT, "reports", "conformance.jsonl")
DEFAULT_JSON = os.path.join(ROOT, "reports", "conformance.json")
DEFAULT_MD = os.path.join(ROOT, "docs", "coverage.md")
DEFAULT_PNG = os.path.join(ROOT, "docs", "coverage.png")
DEFAULT_BASELINE = data_path("conformance_baseline.csv")

CHECKS = ("forward", "backward")
# sample-status precedence when several samples of a unit disagree

# ---------------------------------------------------------------------------
# The CI gate: a fixed, deterministic sample of the sweep.  Chosen across the
# families, cheap (few samples, small shapes), and including ops that do not
# pass yet, so both directions of the baseline check are exercised.

GATE_OPS = [
    # elementwise unary
    "abs", "neg", "exp", "log", "rsqrt", "sigmoid", "erf", "floor", "logical_not", "nan_to_num",
    # elementwise binary / n-ary
    "add", "mul", "div.floor_rounding", "pow", "maximum", "atan2", "eq", "remainder", "bitwise_and",
    "clamp", "where", "lerp",
    # reductions
    "sum", "amax", "argmax", "var", "logsumexp", "cumsum", "topk",
    # indexing
    "gather", "index_select", "masked_fill", "scatter_add", "take_along_dim", "nn.functional.embedding",
    # linalg
    "mm", "bmm", "addmm", "matmul",
    # conv / pool
    "nn.functional.conv2d", "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d",
    # norm
    "nn.functional.layer_norm", "nn.functional.batch_norm",
    # loss / activation
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "softmax", "log_softmax",
    "nn.functional.mse_loss",
    # shape / view
    "cat", "stack", "reshape", "permute", "transpose", "flip", "tril", "split", "squeeze", "roll",
    # random, creation, other
    "bernoulli", "nn.functional.dropout", "zeros_like", "full", "clone",
]
# ops the gate also runs in these dtypes (besides float32)
GATE_EXTRA = {
    "bfloat16": ["add", "mul", "exp", "sum", "mm", "softmax", "nn.functional.gelu",
                 "nn.functional.layer_norm", "cat", "where"],
    "int64": ["add", "mul", "sum", "cumsum", "gather", "eq", "cat", "abs", "remainder",
              "bitwise_and"],
}


# ---------------------------------------------------------------------------
# the catalog of OpInfos (in the parent)


def op_info(op, with_family=True):
    """What the parent needs to know about an OpInfo."""
    from .opdb import DTYPE_NAMES, cpu_dtypes, family, has_backward

    return {
        "name": op.name,
        "variant": op.variant_test_name or "",
        "family": family(op) if with_family else None,
        "dtypes": sorted(DTYPE_NAMES[d] for d in cpu_dtypes(op) if d in DTYPE_NAMES),
        "backward": has_backward(op),
    }


_OPINFOS: dict = {}  # op id -> OpInfo, for families computed on demand


def catalog():
    """{op id: info} for every OpInfo in op_db, in op_db order (families are filled in
    for the ops a run selects: :func:`fill_families`)."""
    from .opdb import load_op_db, op_id

    cat = {}
    for op in load_op_db():
        oid = op_id(op)
        _OPINFOS[oid] = op
        cat[oid] = op_info(op, with_family=False)
    return cat


def fill_families(cat, op_ids):
    """Each selected op's family, from the registry (tracing a sample for composite ops)."""
    from .opdb import family

    for oid in op_ids:
        if cat[oid]["family"] is None:
            cat[oid]["family"] = family(_OPINFOS[oid])


def select_ops(cat, patterns):
    """Op ids matching any pattern: an op id, an op name (all its variants) or a glob."""
    if not patterns:
        return list(cat)
    chosen, missing = [], []
    for p in patterns:
        hits = [i for i, v in cat.items() if i == p or v["name"] == p or fnmatch.fnmatchcase(i, p)]
        if not hits:
            missing.append(p)
        chosen.extend(h for h in hits if h not in chosen)
    if missing:
        print(f"torchneuron conformance: no OpInfo matches {', '.join(missing)}", file=sys.stderr)
    order = {k: n for n, k in enumerate(cat)}
    return sorted(chosen, key=order.__getitem__)


def expected_checks(info, dtype):
    return ["forward", "backward"] if (dtype == "float32" and info["backward"]) else ["forward"]


# ---------------------------------------------------------------------------
# results file


def row_key(r):
    return (r["op"], r["dtype"], r["check"])


def load_results(path):
    """(rows by key, run records) from a JSONL results file; later lines win."""
    rows, runs = {}, []
    if not os.path.exists(path):
        return rows, runs
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a kill: ignore it
                continue
            if "run" in obj:
                runs.append(obj["run"])
            else:
                rows[row_key(obj)] = obj
    return rows, runs


class ResultsFile:
    def __init__(self, path):
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def append(self, objs):
        data = "".join(json.dumps(o, sort_keys=True) + "\n" for o in objs)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            try:
                import fcntl

                fcntl.flock(fd, fcntl.LOCK_EX)
            except Exception:
                pass
            os.write(fd, data.encode())
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------
# aggregation of a unit's samples into rows


def aggregate(oid, info, dtype, begin, samples, end, timeout=None, crashed=None):
    """Rows (forward, and backward for float32 differentiable ops) of one unit."""
    begin = begin or {}
    end = end or {}
    rows = []
    for check in expected_checks(info, dtype):
        key = "fwd" if check == "forward" else "bwd"
        counts = collections.Counter()
        first = {}
        fallback, decomposed = set(), set()
        near = 0
        random = sum(bool(s.get("random")) for s in samples)
        for s in samples:
            st = s.get(key)
            if st is None:
                continue
            counts[st[0]] += 1
            near += bool(st[0] == "MISMATCH" and s.get("near_" + key))
            first.setdefault(st[0], (st[1], s.get("desc", ""), s.get("i")))
            fallback.update(s.get("fb_" + key, ()))
            decomposed.update(s.get("dec_" + key, ()))
        decomposed -= fallback
        refs = [s.get("ref_" + key) for s in samples
                if (s.get(key) or ("",))[0] == "MISMATCH"]
        n = begin.get("n")
        if timeout is not None:
            status = "TIMEOUT"
            done = len(samples)
            so_far = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            message = (f"no result within {timeout:.0f} s ({done}/{n if n is not None else '?'} "
                       f"samples done{': ' + so_far if so_far else ''})")
            sample = ""
        elif crashed is not None:
            status, message, sample = "ERROR", crashed, ""
            if samples:
                sample = f"after sample {samples[-1].get('i')}"
        elif end.get("harness_error"):
            status, message, sample = "ERROR", "harness error: " + end["harness_error"], ""
        elif not counts:
            status = "SKIP"
            message = begin.get("sample_error") or ("no sample inputs for this dtype" if n == 0
                                                    else "no sample was checked")
            sample = ""
        else:
            status = next(s for s in PRECEDENCE if counts.get(s))
            message, sample, idx = first[status]
            if status == "FALLBACK":
                message = "ran through the CPU fallback: " + ", ".join(sorted(fallback))
            if idx is not None and sample:
                sample = f"#{idx}: {sample}"
        rounding = bool(status == "MISMATCH" and refs and all(r and r["rounding"] for r in refs))
        reason = ""
        if rounding:
            dev = max(r["dev"] for r in refs)
            cpu = max(r["cpu"] for r in refs)
            reason = (f"rounding: against a float64 CPU reference the device's largest error is "
                      f"{dev:.2g} and the CPU kernel's {cpu:.2g} ({len(refs)} mismatching "
                      f"sample{'s' if len(refs) != 1 else ''})")
        rows.append({
            "op": oid, "name": info["name"], "variant": info["variant"], "family": info["family"],
            "dtype": dtype, "check": check, "status": status, "message": message, "sample": sample,
            "samples": n if n is not None else 0, "samples_total": begin.get("total", n or 0),
            "counts": dict(counts),
            "fallback_ops": sorted(fallback), "decomposed_ops": sorted(decomposed),
            "values_compared": bool(begin.get("values", True)) and random < len(samples or [0]),
            "note": begin.get("note", "") or (
                f"random: values not compared for {random} sample(s) (the CPU reference ran "
                f"{next(s['random'] for s in samples if s.get('random'))}, a seeded random op)"
                if random else ""),
            "pytorch_xfail": bool(end.get("xfail")), "seconds": round(end.get("seconds", 0.0), 2),
            # every mismatching sample is within PyTorch's test_compare_cpu tolerance (1e-3)
            "near_miss": bool(status == "MISMATCH" and near and near == counts.get("MISMATCH", 0)),
            # every mismatching sample is as close to a float64 reference as the CPU's result
            "rounding": rounding, "reason": reason,
        })
    return rows


def unsupported_row(oid, info, dtype):
    return {
        "op": oid, "name": info["name"], "variant": info["variant"], "family": info["family"],
        "dtype": dtype, "check": "forward", "status": "UNSUPPORTED_DTYPE",
        "message": f"the OpInfo lists no {dtype} support on the CPU", "sample": "", "samples": 0,
        "samples_total": 0,
        "counts": {}, "fallback_ops": [], "decomposed_ops": [], "values_compared": False,
        "note": "", "pytorch_xfail": False, "seconds": 0.0, "near_miss": False,
    }


# ---------------------------------------------------------------------------
# worker pool


class _Worker:
    _ids = 0

    def __init__(self, ctx, op_ids, dtypes, log_path, max_samples, db=None):
        _Worker._ids += 1
        self.wid = _Worker._ids
        self.conn, child = ctx.Pipe()
        if db is None:  # the OpInfo sweep
            from . import conformance_worker

            target, args = conformance_worker.main, (child, op_ids, dtypes, log_path, max_samples)
        else:  # module_db / optim_db
            from . import nn_conformance_worker

            target, args = nn_conformance_worker.main, (child, db, op_ids, dtypes, log_path, max_samples)
        self.proc = ctx.Process(target=target, args=args,
                                name=f"conformance-worker-{self.wid}", daemon=True)
        self.proc.start()
        child.close()
        self.ready = False
        self.started = time.monotonic()
        self.unit = None
        self.reset_unit()

    def reset_unit(self):
        self.unit = None
        self.t0 = None
        self.begin, self.samples, self.end = None, [], {}

    def assign(self, unit):
        self.unit = unit
        self.t0 = time.monotonic()
        self.begin, self.samples, self.end = None, [], {}
        self.conn.send(("unit",) + unit)

    def kill(self):
        try:
            self.proc.kill()
        except Exception:
            pass
        self.proc.join(5)
        try:
            self.conn.close()
        except Exception:
            pass

    def stop(self):
        try:
            self.conn.send(("stop",))
        except Exception:
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.kill()


def run_units(units, cat, results: ResultsFile, *, workers=2, timeout=300.0, op_ids=None,
              dtypes=(), log_path=None, max_rss_mb=3000, progress=True, desc="conformance",
              max_samples=None, db=None, aggregate_fn=None):
    """Run (op id, dtype) units in a pool of spawned workers; append rows to `results`.

    `db` None runs OpInfos (conformance_worker); "modules" / "optims" run ModuleInfos /
    OptimizerInfos (nn_conformance_worker), whose rows `aggregate_fn` builds."""
    from tqdm import tqdm

    from .conformance_worker import MAX_SAMPLES

    if max_samples is None:
        max_samples = MAX_SAMPLES
    aggregate_fn = aggregate_fn or aggregate
    ctx = multiprocessing.get_context("spawn")
    queue = collections.deque(units)
    nworkers = max(1, min(workers, len(units)))
    pool = [_Worker(ctx, op_ids, list(dtypes), log_path, max_samples, db) for _ in range(nworkers)]
    counts = collections.Counter()
    stats = {"max_rss_mb": 0.0, "worker_starts": nworkers}
    bar = tqdm(total=len(units), desc=desc, unit="unit", dynamic_ncols=True, disable=not progress,
               smoothing=0.05)
    bar.set_postfix_str(f"starting {nworkers} worker(s)")
    startup_limit = max(900.0, timeout)
    fatal = None

    def finish(w, **kw):
        oid, dt = w.unit
        rows = aggregate_fn(oid, cat[oid], dt, w.begin, w.samples, w.end, **kw)
        results.append(rows)
        for r in rows:
            counts[r["status"]] += 1
        bar.update(1)
        bar.set_postfix_str(" ".join(f"{k[:4]}={v}" for k, v in sorted(counts.items())) +
                            f" | {oid} {dt}", refresh=False)
        w.reset_unit()

    def replace(w):
        pool[pool.index(w)] = _Worker(ctx, op_ids, list(dtypes), log_path, max_samples, db)
        stats["worker_starts"] += 1

    try:
        while queue or any(w.unit for w in pool):
            for w in pool:
                if w.ready and w.unit is None and queue:
                    w.assign(queue.popleft())
            waitables = [w.conn for w in pool] + [w.proc.sentinel for w in pool]
            ready = multiprocessing.connection.wait(waitables, timeout=1.0)
            for w in list(pool):
                if w.conn in ready:
                    try:
                        while w.conn.poll():
                            msg = w.conn.recv()
                            kind = msg[0]
                            if kind == "ready":
                                w.ready = True
                            elif kind == "fatal":
                                fatal = msg[1]
                                raise RuntimeError("a conformance worker failed to start:\n" + msg[1])
                            elif kind == "begin":
                                w.begin = msg[1]
                            elif kind == "sample":
                                w.samples.append(msg[1])
                            elif kind == "note":  # module/optimizer sweeps: a test-level note
                                w.samples.append({"note": msg[1]})
                            elif kind == "xfail":
                                w.end["xfail"] = True
                            elif kind == "end":
                                w.end.update(msg[1])
                                stats["max_rss_mb"] = max(stats["max_rss_mb"], msg[1].get("rss_mb", 0))
                                finish(w)
                                if msg[1].get("rss_mb", 0) > max_rss_mb:
                                    w.stop()
                                    replace(w)
                                    break
                    except (EOFError, OSError):
                        pass
                if not w.proc.is_alive() and w in pool:
                    code = w.proc.exitcode
                    if w.unit is not None:
                        finish(w, crashed=f"the worker process died (exit code {code}) while running "
                                          "this unit")
                    elif not w.ready:
                        raise RuntimeError(f"a conformance worker died while starting (exit code {code}); "
                                           f"see {log_path}")
                    w.kill()
                    replace(w)
            now = time.monotonic()
            for w in list(pool):
                if w.unit is not None and now - w.t0 > timeout:
                    w.kill()
                    finish(w, timeout=timeout)
                    replace(w)
                elif not w.ready and now - w.started > startup_limit:
                    raise RuntimeError(f"a conformance worker did not start within {startup_limit:.0f} s")
    finally:
        bar.close()
        for w in pool:
            if w.proc.is_alive():
                if w.unit is None and w.ready:
                    w.stop()
                else:
                    w.kill()
    if fatal:
        raise RuntimeError(fatal)
    run_units.last_stats = stats
    return counts


# ---------------------------------------------------------------------------
# baseline (expected non-passes) and the gate


BASELINE_HEADER = """\
# Expected non-passes of the OpInfo conformance sweep (torchneuron conformance).
# One line per op x dtype x check that does not PASS; anything not listed is expected to PASS.
# status: MISMATCH | ERROR | FALLBACK | TIMEOUT | SKIP (UNSUPPORTED_DTYPE is never listed).
# note: why (free text, kept by --update-baseline while the status stays the same).
# tests/test_conformance_gate.py fails when the gate sample disagrees with this file in either
# direction; regenerate with: torchneuron conformance --gate --update-baseline
# (or after a full sweep: torchneuron conformance --update-baseline).
"""


def load_baseline(path):
    """{(op, dtype, check): {"status", "note"}}"""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path, newline="") as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    for rec in csv.DictReader(lines):
        out[(rec["op"], rec["dtype"], rec["check"])] = {"status": rec["status"],
                                                         "note": rec.get("note") or ""}
    return out


def write_baseline(path, entries, meta_line="", header=None):
    from .opdb import DTYPES

    dorder = {d: i for i, d in enumerate(DTYPES)}
    buf = io.StringIO()
    buf.write(header or BASELINE_HEADER)
    if meta_line:
        buf.write(f"# {meta_line}\n")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["op", "dtype", "check", "status", "note"])
    for k in sorted(entries, key=lambda k: (k[0], dorder.get(k[1], 99), k[2])):
        e = entries[k]
        w.writerow([k[0], k[1], k[2], e["status"], e.get("note", "")])
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        f.write(buf.getvalue())


def update_baseline(path, rows, meta_line="", header=None):
    """Replace the baseline entries of the units in `rows` by their current status."""
    entries = load_baseline(path)
    units = {(r["op"], r["dtype"]) for r in rows}
    kept = {k: v for k, v in entries.items() if (k[0], k[1]) not in units}
    changed = 0
    for r in rows:
        k = row_key(r)
        if r["status"] in ("PASS", "UNSUPPORTED_DTYPE"):
            changed += k in entries
            continue
        old = entries.get(k)
        note = old["note"] if old and old["status"] == r["status"] else ""
        if r.get("reason") and (not note or is_rounding_note(note)):
            note = r["reason"]  # measured now: replaces an older measurement
        changed += (old is None or old["status"] != r["status"])
        kept[k] = {"status": r["status"], "note": note}
    write_baseline(path, kept, meta_line, header)
    return changed, len(kept)


def compare_to_baseline(rows, baseline):
    """Disagreements between gate rows and the baseline: list of (key, expected, got, message)."""
    problems = []
    for r in rows:
        if r["status"] == "UNSUPPORTED_DTYPE":
            continue
        k = row_key(r)
        entry = baseline.get(k, {"status": "PASS", "note": ""})
        want, got = entry["status"], r["status"]
        # The CPU reference's own rounding depends on the machine (its BLAS / vector
        # kernels differ between AVX2 and AVX512): a measured rounding MISMATCH counts as
        # a PASS, and a rounding baseline entry may pass on another machine.
        if got == "MISMATCH" and r.get("rounding") and want == "PASS":
            continue
        if want == "MISMATCH" and got == "PASS" and is_rounding_note(entry.get("note", "")):
            continue
        if got != want:
            problems.append((k, want, got, r.get("message", "")))
    seen_units = {(r["op"], r["dtype"]) for r in rows}
    seen = {row_key(r) for r in rows}
    for k, v in baseline.items():
        if (k[0], k[1]) in seen_units and k not in seen:
            problems.append((k, v["status"], "(no such row)", "the baseline lists a check the sweep no longer makes"))
    return problems


ROUNDING_NOTE = "rounding: against a float64"


def is_rounding_note(note: str) -> bool:
    return note.startswith(ROUNDING_NOTE)


def format_problem(p):
    (op, dt, check), want, got, msg = p
    if want == "PASS":
        kind = "REGRESSION"
    elif got == "PASS":
        kind = "NOW PASSES (update the baseline)"
    else:
        kind = "CHANGED"
    return f"{kind}: {op} {dt} {check}: baseline {want}, now {got}" + (f" -- {msg[:300]}" if msg else "")


def gate_units(cat, only=None):
    """The gate's (op, dtype) units; `only` (op ids) keeps those ops of the sample."""
    units = []
    for oid in GATE_OPS:
        if oid in cat and "float32" in cat[oid]["dtypes"]:
            units.append((oid, "float32"))
    for dt, ops in GATE_EXTRA.items():
        for oid in ops:
            if oid in cat and dt in cat[oid]["dtypes"]:
                units.append((oid, dt))
    if only:
        unknown = sorted(set(only) - {u[0] for u in units})
        if unknown:
            raise ValueError(f"not in the conformance gate's sample: {', '.join(unknown)}")
        units = [u for u in units if u[0] in only]
    return units


def run_gate(workers=2, timeout=300.0, results_path=None, progress=True, log_path=None,
             only=None):
    """Run the CI sample of the sweep (the ops in `only`, if given); returns its rows."""
    from .opdb import DTYPES

    cat = catalog()
    units = gate_units(cat, only)
    fill_families(cat, sorted({u[0] for u in units}))
    tmp = None
    if results_path is None:
        tmp = tempfile.mkdtemp(prefix="tn-conformance-gate-")
        results_path = os.path.join(tmp, "gate.jsonl")
    if os.path.exists(results_path):
        os.remove(results_path)
    res = ResultsFile(results_path)
    op_ids = sorted({u[0] for u in units})
    dts = [d for d in DTYPES if any(u[1] == d for u in units)]
    run_units(units, cat, res, workers=workers, timeout=timeout, op_ids=op_ids, dtypes=dts,
              log_path=log_path or os.path.join(tempfile.gettempdir(), "tn-conformance-gate.log"),
              progress=progress, desc="conformance gate")
    rows, _ = load_results(results_path)
    return [rows[k] for k in sorted(rows)]


# ---------------------------------------------------------------------------
# command line


def _parse_shard(s):
    try:
        i, n = (int(x) for x in s.split("/"))
    except Exception:
        raise argparse.ArgumentTypeError("--shard takes i/n, e.g. 1/4 (1-based)")
    if not (n >= 1 and 1 <= i <= n):
        raise argparse.ArgumentTypeError("--shard takes i/n with 1 <= i <= n")
    return i, n


def _split(s):
    return [x.strip() for x in s.split(",") if x.strip()] if s else []


def build_parser():
    from .opdb import DTYPES
    from .status import STATUSES

    p = argparse.ArgumentParser(
        prog="torchneuron conformance",
        description="Run PyTorch's OpInfo test database (op_db) on the neuron device and compare "
                    "with the CPU; write reports/conformance.json, docs/coverage.md and a chart.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="statuses:\n" + "\n".join(f"  {k:18s}{v}" for k, v in STATUSES.items()))
    p.add_argument("--db", choices=("ops", "modules", "optims"), default="ops",
                   help="which of PyTorch's databases: ops (op_db, OpInfo; default), modules "
                        "(module_db, ModuleInfo) or optims (optim_db, OptimizerInfo)")
    p.add_argument("--ops", type=_split, default=[],
                   help="comma-separated op ids, names (all variants) or globs, e.g. "
                        "'add,div.trunc_rounding,nn.functional.conv*'")
    p.add_argument("--dtypes", type=_split, default=list(DTYPES),
                   help=f"comma-separated dtypes (default: {','.join(DTYPES)})")
    p.add_argument("--shard", type=_parse_shard, default=None, metavar="I/N",
                   help="run the I-th of N slices of the selected ops (1-based, by op)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds one op x dtype may run before it is recorded as TIMEOUT (default 600)")
    p.add_argument("--results", default=DEFAULT_RESULTS,
                   help="JSONL results file, appended to and resumed from (default reports/conformance.jsonl)")
    p.add_argument("--rerun", action="store_true",
                   help="run the selected units again even if the results file has them")
    p.add_argument("--retry", type=_split, default=[], metavar="STATUSES",
                   help="run again the selected units whose recorded rows have one of these statuses "
                        "(e.g. TIMEOUT,ERROR)")
    p.add_argument("--fresh", action="store_true",
                   help="start a new results file (the old one is kept as .old)")
    p.add_argument("--report-only", action="store_true", help="only rebuild the reports from the results file")
    p.add_argument("--no-report", action="store_true", help="do not rebuild the reports after the run")
    p.add_argument("--json", default=DEFAULT_JSON, help="machine-readable report (reports/conformance.json)")
    p.add_argument("--md", default=DEFAULT_MD, help="Markdown report (docs/coverage.md)")
    p.add_argument("--png", default=DEFAULT_PNG, help="chart (docs/coverage.png)")
    p.add_argument("--gate", action="store_true",
                   help="run the fixed CI sample (GATE_OPS) and compare with the baseline")
    p.add_argument("--update-baseline", action="store_true",
                   help="rewrite the baseline entries of the units run (with --gate: the gate units; "
                        "otherwise every selected unit in the results file)")
    p.add_argument("--baseline", default=DEFAULT_BASELINE, help="baseline file (src/torchneuron/tools/data/conformance_baseline.csv)")
    p.add_argument("--max-samples", type=int, default=64,
                   help="at most this many sample inputs per op x dtype, spread evenly over the "
                        "OpInfo's samples (default 64; 0: all)")
    p.add_argument("--max-rss-mb", type=float, default=3000,
                   help="restart a worker whose memory grows past this (default 3000)")
    p.add_argument("--snapshot", nargs="?", const="HEAD", default=None, metavar="REF",
                   help="run the committed code of git REF (default HEAD) from a temporary export, "
                        "not the working tree: edits landing during a long sweep cannot break it")
    p.add_argument("--list", action="store_true", help="print the selected units and exit")
    p.add_argument("--inline", action="store_true",
                   help="run the units in this process (no workers, no timeout): for debugging one op")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="with --inline: print every sample that does not pass")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return p


def _command_line(argv):
    return "torchneuron conformance" + ("" if not argv else " " + " ".join(shlex.quote(a) for a in argv))


def _git(*args):
    import subprocess

    try:
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:
        return ""


def _code_state():
    snap = config.get("TORCHNEURON_CONFORMANCE_SNAPSHOT")
    if snap:
        return {"commit": snap, "code": "snapshot of the commit"}
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--", "src"))
    return {"commit": commit, "code": "working tree" + (" (with uncommitted changes)" if dirty else "")}


def _reexec_snapshot(ref, argv):
    """Export `ref`'s src/ to a temporary directory and re-run this command from there."""
    import subprocess

    commit = _git("rev-parse", "--short", ref)
    if not commit:
        print(f"torchneuron conformance: cannot resolve git ref {ref!r} in {ROOT}", file=sys.stderr)
        return 2
    dest = tempfile.mkdtemp(prefix=f"tn-conformance-{commit}-")
    archive = subprocess.run(["git", "-C", ROOT, "archive", commit, "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", dest], input=archive.stdout, check=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(dest, "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["TORCHNEURON_CONFORMANCE_ROOT"] = ROOT
    env["TORCHNEURON_CONFORMANCE_SNAPSHOT"] = commit
    rest, skip = [], False
    for a in argv:  # drop --snapshot [REF]
        if skip:
            skip = False
            if not a.startswith("-"):
                continue
        if a == "--snapshot":
            skip = True
            continue
        if a.startswith("--snapshot="):
            continue
        rest.append(a)
    print(f"torchneuron conformance: running commit {commit} from {dest}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "torchneuron.cli", "conformance", *rest], env)


def _versions():
    import torch

    try:
        import jax

        jv = jax.__version__
    except Exception:
        jv = "?"
    return {"torch": torch.__version__, "jax": jv, "python": platform.python_version(),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", **_code_state()}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.snapshot:
        return _reexec_snapshot(args.snapshot, argv)
    if args.db != "ops":
        from . import nn_conformance

        return nn_conformance.main(args, _command_line(argv))
    from .opdb import DTYPES

    bad = [d for d in args.dtypes if d not in DTYPES]
    if bad:
        print(f"torchneuron conformance: unknown dtype(s) {bad}; choose from {list(DTYPES)}", file=sys.stderr)
        return 2
    cmd = _command_line(argv)

    if args.gate:
        t0 = time.time()
        try:
            rows = run_gate(workers=args.workers, timeout=args.timeout, progress=not args.quiet,
                            only=args.ops or None)
        except ValueError as e:
            print(f"torchneuron conformance --gate --ops: {e}", file=sys.stderr)
            return 2
        if args.update_baseline:
            changed, n = update_baseline(args.baseline, rows, f"gate units last updated {_today()} by: {cmd}")
            print(f"baseline {os.path.relpath(args.baseline)}: {changed} entries changed, {n} entries")
            return 0
        problems = compare_to_baseline(rows, load_baseline(args.baseline))
        c = collections.Counter(r["status"] for r in rows)
        print(f"gate: {len(rows)} rows in {time.time() - t0:.0f} s: " +
              ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
        for p in problems:
            print(format_problem(p))
        print("gate: OK, matches the baseline" if not problems else
              f"gate: {len(problems)} disagreement(s) with {os.path.relpath(args.baseline)}")
        return 1 if problems else 0

    if args.fresh and os.path.exists(args.results) and not args.report_only:
        os.replace(args.results, args.results + ".old")

    if not args.report_only:
        print("torchneuron conformance: loading PyTorch's OpInfo database ...", file=sys.stderr)
        cat = catalog()
        ops = select_ops(cat, args.ops)
        if args.shard:
            i, n = args.shard
            ops = [o for k, o in enumerate(ops) if k % n == i - 1]
        fill_families(cat, ops)
        dtypes = [d for d in DTYPES if d in args.dtypes]
        done, _ = load_results(args.results)
        retry = set(args.retry)
        units, unsupported, skipped_done = [], [], 0
        for oid in ops:
            info = cat[oid]
            for dt in dtypes:
                if dt not in info["dtypes"]:
                    if args.rerun or (oid, dt, "forward") not in done:
                        unsupported.append(unsupported_row(oid, info, dt))
                    continue
                keys = [(oid, dt, c) for c in expected_checks(info, dt)]
                have = [done.get(k) for k in keys]
                if (not args.rerun and all(have) and
                        not any(h["status"] in retry for h in have)):
                    skipped_done += 1
                    continue
                units.append((oid, dt))
        # dtype by dtype (float32 first, then float16, bfloat16, ...): the headline numbers of a long
        # sweep are there early, and an interrupted sweep still has whole dtypes
        drank = {d: i for i, d in enumerate(DTYPES)}
        oorder = {o: i for i, o in enumerate(ops)}
        units.sort(key=lambda u: (drank[u[1]], oorder[u[0]]))
        if args.list:
            for u in units:
                print(*u)
            print(f"{len(units)} units to run, {skipped_done} already in {args.results}, "
                  f"{len(unsupported)} unsupported dtypes", file=sys.stderr)
            return 0
        results = ResultsFile(args.results)
        if unsupported:
            results.append(unsupported)
        if args.inline:
            from . import conformance_worker

            conformance_worker.MAX_SAMPLES = args.max_samples
            return _run_inline(units, cat, results, dtypes, args.verbose)
        print(f"torchneuron conformance: {len(ops)} OpInfos x {len(dtypes)} dtypes: {len(units)} units to run "
              f"({skipped_done} already done, {len(unsupported)} dtypes the CPU does not list); "
              f"{args.workers} workers, {args.timeout:.0f} s per unit; results -> {os.path.relpath(args.results)}",
              file=sys.stderr)
        if units:
            t0 = time.time()
            start = _now()
            results.append([{"run": {"start": start, "command": cmd, "units": len(units),
                                     "workers": args.workers, **_versions()}}])
            log_path = os.path.splitext(args.results)[0] + ".log"

            def _term(signum, frame):  # kill -TERM: stop like Ctrl-C (workers stopped, run recorded)
                raise KeyboardInterrupt

            import signal

            signal.signal(signal.SIGTERM, _term)
            if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background
                signal.signal(signal.SIGINT, signal.default_int_handler)
            try:
                counts = run_units(units, cat, results, workers=args.workers, timeout=args.timeout,
                                   op_ids=ops if args.ops else None, dtypes=dtypes, log_path=log_path,
                                   max_rss_mb=args.max_rss_mb, progress=not args.quiet,
                                   max_samples=args.max_samples)
                interrupted = False
            except KeyboardInterrupt:
                counts, interrupted = {}, True
            elapsed = time.time() - t0
            results.append([{"run": {"start": start, "end": _now(), "elapsed_s": round(elapsed, 1),
                                     "command": cmd, "units": len(units), "workers": args.workers,
                                     "interrupted": interrupted, "max_samples": args.max_samples,
                                     "timeout_s": args.timeout, **getattr(run_units, "last_stats", {}),
                                     **_versions()}}])
            print(f"torchneuron conformance: {len(units)} units in {elapsed / 60:.1f} min: " +
                  ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), file=sys.stderr)
            if interrupted:
                print("interrupted: run the same command again to resume", file=sys.stderr)
                return 130

    rows, runs = load_results(args.results)
    if args.update_baseline:
        sel = list(rows.values())
        if args.ops or args.shard or args.dtypes != list(DTYPES):
            sel_units = None
            if not args.report_only:
                sel_units = {(o, d) for o in ops for d in dtypes}
            if sel_units is not None:
                sel = [r for r in sel if (r["op"], r["dtype"]) in sel_units]
        changed, n = update_baseline(args.baseline, sel, f"last updated {_today()} by: {cmd}")
        print(f"baseline {os.path.relpath(args.baseline)}: {changed} entries changed, {n} entries")
    if not args.no_report:
        from . import conformance_report

        if not rows:
            print(f"torchneuron conformance: no results in {args.results}", file=sys.stderr)
            return 1
        conformance_report.write_reports(list(rows.values()), runs, json_path=args.json, md_path=args.md,
                                         png_path=args.png, baseline=load_baseline(args.baseline),
                                         command=cmd)
        print(f"reports: {os.path.relpath(args.json)}, {os.path.relpath(args.md)}, "
              f"{os.path.relpath(args.png)}", file=sys.stderr)
    return 0


def _run_inline(units, cat, results, dtypes, verbose):
    """Run units in this process and print their rows (and failing samples with -v)."""
    import warnings

    import torchneuron

    from .conformance_worker import build_test_class, collect_unit
    from .opdb import DTYPES, load_op_db, op_id

    warnings.simplefilter("ignore")
    prev = torchneuron.set_fallback_policy("silent")
    try:
        by_id = {op_id(op): op for op in load_op_db()}
        ops = [by_id[o] for o in dict.fromkeys(u[0] for u in units)]
        cls = build_test_class(ops, [DTYPES[d] for d in dtypes])
        cls.setUpClass()
        for oid, dt in units:
            begin, samples, end = collect_unit(cls, by_id[oid], DTYPES[dt])
            rows = aggregate(oid, cat[oid], dt, begin, samples, end)
            results.append(rows)
            for r in rows:
                print(f"{oid} {dt} {r['check']}: {r['status']} ({r['samples']} samples, {r['seconds']} s)"
                      + (f" -- {r['message']}" if r["message"] else "") + (f" [{r['sample']}]" if r["sample"] else ""))
            if verbose:
                for s in samples:
                    for key in ("fwd", "bwd"):
                        st = s.get(key)
                        if st and st[0] != "PASS":
                            fb = s.get("fb_" + key) or ""
                            print(f"   #{s['i']} {key} {st[0]} {st[1]} {fb} | {s['desc']}")
    finally:
        torchneuron.set_fallback_policy(prev)
    return 0


def _now():
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _today():
    return _dt.date.today().isoformat()


if __name__ == "__main__":
    sys.exit(main())

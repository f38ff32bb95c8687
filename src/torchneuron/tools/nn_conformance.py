"""``torchneuron conformance --db modules|optims``: PyTorch's ModuleInfo and OptimizerInfo
databases (``module_db``, ``optim_db``) run on the neuron device against the CPU.

The same worker pool, JSONL results file (resumable), progress bar, gate and baseline
mechanics as the OpInfo sweep (``conformance``); the checks are in
``nn_conformance_worker``.  Units are (module or optimizer, dtype); rows are
(unit, check) with the OpInfo sweep's statuses.

    torchneuron conformance --db modules                       # every ModuleInfo, float32 + float64
    torchneuron conformance --db optims                        # every OptimizerInfo, float32
    torchneuron conformance --db modules --ops nn.Linear,nn.LSTM --dtypes float32
    torchneuron conformance --db modules --gate                # the CI sample vs its baseline
    torchneuron conformance --db modules --report-only
"""
from __future__ import annotations

import collections
import json
import os
import sys
import tempfile
import time

from . import conformance as C
from .nn_conformance_worker import MAX_SAMPLES, MODULE_CHECKS, OPTIM_CHECKS
from .status import PRECEDENCE

DB_DTYPES = {"modules": ["float32", "float64"], "optims": ["float32"]}
CHECKS = {"modules": MODULE_CHECKS, "optims": OPTIM_CHECKS}
UPSTREAM = {"modules": "torch.testing._internal.common_modules.module_db",
            "optims": "torch.testing._internal.common_optimizers.optim_db"}


def paths(db):
    root = C.ROOT
    return {"results": os.path.join(root, "reports", f"conformance_{db}.jsonl"),
            "json": os.path.join(root, "reports", f"conformance_{db}.json"),
            "md": os.path.join(root, "docs", "coverage-nn.md"),
            "png": os.path.join(root, "docs", f"coverage-{db}.png"),
            "baseline": C.data_path(f"conformance_{db}_baseline.csv")}


# The CI gate's sample: cheap, across the families, including what does not pass yet.
GATE = {
    "modules": ["nn.Linear", "nn.Conv2d", "nn.BatchNorm2d", "nn.LayerNorm", "nn.Embedding",
                "nn.MaxPool2d", "nn.ReLU", "nn.GELU", "nn.CrossEntropyLoss", "nn.MultiLabelMarginLoss",
                "nn.GRUCell", "nn.ReflectionPad2d", "nn.MultiheadAttention", "nn.LazyConv1d"],
    "optims": ["SGD", "Adam", "AdamW", "LBFGS", "SparseAdam"],
}
GATE_DTYPES = {"modules": ["float32"], "optims": ["float32"]}

BASELINE_HEADER = """\
# Expected non-passes of the {what} conformance sweep (torchneuron conformance --db {db}).
# One line per {unit} x dtype x check that does not PASS; anything not listed is expected to PASS.
# tests/test_nn_conformance.py fails when the gate sample disagrees with this file in either
# direction; regenerate with: torchneuron conformance --db {db} --gate --update-baseline
"""


def family(db, name):
    if db == "optims":
        return "optimizer"
    n = name.lower()
    for key, fam in (("loss", "loss"), ("conv", "conv"), ("pool", "pool"), ("norm", "norm"),
                     ("pad", "padding"), ("rnn", "recurrent"), ("gru", "recurrent"),
                     ("lstm", "recurrent"), ("transformer", "transformer"), ("attention", "transformer"),
                     ("linear", "linear"), ("bilinear", "linear"), ("embedding", "embedding")):
        if key in n:
            return fam
    return "activation"


def catalog(db):
    """{name: info} for every entry of the database, in its order."""
    from .opdb import DTYPE_NAMES, _clean_argv

    with _clean_argv():
        if db == "modules":
            from torch.testing._internal.common_modules import module_db as items
        else:
            from torch.testing._internal.common_optimizers import optim_db as items
    cat = {}
    for it in items:
        if db == "modules":
            dts = [DTYPE_NAMES[d] for d in it.supported_dtypes("privateuse1") if d in DTYPE_NAMES]
        else:
            dts = ["float32", "float64"]
        cat[it.name] = {"name": it.name, "variant": "", "family": family(db, it.name),
                        "dtypes": sorted(dts), "backward": True, "db": db}
    return cat


def aggregate_for(db):
    checks = CHECKS[db]

    def agg(name, info, dtype, begin, samples, end, timeout=None, crashed=None):
        end = end or {}
        rows = []
        recs = [s for s in samples if "note" not in s]
        notes = [s["note"] for s in samples if "note" in s]
        for check in checks:
            counts = collections.Counter()
            first, fallback, refs, near = {}, set(), [], 0
            for s in recs:
                st = (s.get("checks") or {}).get(check)
                if st is None:
                    continue
                counts[st[0]] += 1
                first.setdefault(st[0], (st[1], s.get("desc", ""), s.get("i")))
                fallback.update((s.get("fb") or {}).get(check, ()))
                if st[0] == "MISMATCH":
                    refs.append((s.get("ref") or {}).get(check))
                    near += bool((s.get("near") or {}).get(check))
            cnotes = [n for n in notes if check in n.get("checks", ())]
            skip = next((n["skip"] for n in cnotes if n.get("skip")), "")
            xfail = next((n["xfail"] for n in cnotes if n.get("xfail")), "")
            err = next((n["sample_error"] for n in cnotes if n.get("sample_error")), "")
            sample = ""
            if timeout is not None:
                status, message = "TIMEOUT", f"no result within {timeout:.0f} s ({len(recs)} samples done)"
            elif crashed is not None:
                status, message = "ERROR", crashed
            elif end.get("harness_error"):
                status, message = "ERROR", "harness error: " + end["harness_error"]
            elif not counts:
                status, message = "SKIP", skip or err or "no sample applies"
            else:
                status = next(s for s in PRECEDENCE if counts.get(s))
                message, desc, idx = first[status]
                sample = f"#{idx}: {desc}" if desc else ""
            rounding = bool(status == "MISMATCH" and refs and all(r and r["rounding"] for r in refs))
            reason = ""
            if rounding:
                reason = (f"rounding: against a float64 CPU reference the device's largest error is "
                          f"{max(r['dev'] for r in refs):.2g} and the CPU's "
                          f"{max(r['cpu'] for r in refs):.2g} ({len(refs)} mismatching sample"
                          f"{'s' if len(refs) != 1 else ''})")
            rows.append({
                "db": db, "op": name, "name": name, "variant": "", "family": info["family"],
                "dtype": dtype, "check": check, "status": status, "message": message, "sample": sample,
                "samples": sum(counts.values()), "counts": dict(counts), "fallback_ops": sorted(fallback),
                "note": skip if (skip and status != "SKIP") else "", "pytorch_xfail": bool(xfail),
                "seconds": round(end.get("seconds", 0.0), 2),
                "near_miss": bool(status == "MISMATCH" and near and near == counts.get("MISMATCH", 0)),
                "rounding": rounding, "reason": reason,
            })
        return rows

    return agg


def run_units(db, units, cat, results, **kw):
    return C.run_units(units, cat, results, db=db, aggregate_fn=aggregate_for(db), **kw)


def run_gate(db, workers=2, timeout=600.0, results_path=None, progress=True, log_path=None):
    cat = catalog(db)
    units = [(n, d) for n in GATE[db] if n in cat for d in GATE_DTYPES[db] if d in cat[n]["dtypes"]]
    tmp = None
    if results_path is None:
        tmp = tempfile.mkdtemp(prefix=f"tn-conformance-{db}-gate-")
        results_path = os.path.join(tmp, "gate.jsonl")
    if os.path.exists(results_path):
        os.remove(results_path)
    res = C.ResultsFile(results_path)
    run_units(db, units, cat, res, workers=workers, timeout=timeout, op_ids=[u[0] for u in units],
              dtypes=GATE_DTYPES[db], max_samples=MAX_SAMPLES, progress=progress,
              log_path=log_path or os.path.join(tempfile.gettempdir(), f"tn-conformance-{db}-gate.log"),
              desc=f"{db} gate")
    rows, _ = C.load_results(results_path)
    return [rows[k] for k in sorted(rows)]


def header(db):
    return BASELINE_HEADER.format(what="ModuleInfo" if db == "modules" else "OptimizerInfo", db=db,
                                  unit="module" if db == "modules" else "optimizer")


# ---------------------------------------------------------------------------
# reports


def summarize(rows):
    """{dtype: {check: Counter(status)}} and per-dtype totals."""
    by = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
    for r in rows:
        by[r["dtype"]][r["check"]][r["status"]] += 1
    out = {}
    for dt, checks in by.items():
        total = collections.Counter()
        for c in checks.values():
            total.update(c)
        tested = sum(total[s] for s in ("PASS", "MISMATCH", "ERROR", "FALLBACK", "TIMEOUT"))
        rounding = sum(1 for r in rows if r["dtype"] == dt and r["status"] == "MISMATCH" and r.get("rounding"))
        out[dt] = {"checks": {k: dict(v) for k, v in checks.items()}, "total": dict(total),
                   "tested": tested, "pass": total["PASS"],
                   "pass_rate": round(100.0 * total["PASS"] / tested, 2) if tested else None,
                   "pass_or_rounding_rate": round(100.0 * (total["PASS"] + rounding) / tested, 2)
                   if tested else None,
                   "units": len({r["op"] for r in rows if r["dtype"] == dt})}
    return out


def _units_line(db, rows):
    return len({(r["op"], r["dtype"]) for r in rows})


def write_json(path, db, rows, runs, command):
    data = {"db": db, "source": UPSTREAM[db], "command": command, "runs": runs[-6:],
            "summary": summarize(rows),
            "rows": sorted(rows, key=lambda r: (r["dtype"], r["op"], r["check"]))}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)


def write_chart(path, db, rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    checks = CHECKS[db]
    dts = sorted({r["dtype"] for r in rows})
    colors = {"PASS": "#2e7d32", "FALLBACK": "#f9a825", "MISMATCH (rounding)": "#ef9a9a",
              "MISMATCH": "#c62828", "ERROR": "#6a1b9a", "TIMEOUT": "#37474f", "SKIP": "#b0bec5"}

    def cat(r):
        return "MISMATCH (rounding)" if r["status"] == "MISMATCH" and r.get("rounding") else r["status"]

    labels = [f"{c}\n{d}" for d in dts for c in checks]
    fig, ax = plt.subplots(figsize=(max(6, 1.0 * len(labels)), 4.6))
    bottom = [0] * len(labels)
    for st in colors:
        vals = [sum(1 for r in rows if r["dtype"] == d and r["check"] == c and cat(r) == st)
                for d in dts for c in checks]
        if any(vals):
            ax.bar(range(len(labels)), vals, bottom=bottom, color=colors[st], label=st)
            bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("modules" if db == "modules" else "optimizers")
    ax.set_title(f"torchneuron vs CPU over PyTorch's {'module_db' if db == 'modules' else 'optim_db'}")
    ax.legend(fontsize=7, ncol=len(colors), loc="upper center", bbox_to_anchor=(0.5, -0.16),
              frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _md_table(db, rows):
    checks = CHECKS[db]
    s = summarize(rows)
    out = ["| dtype | units | " + " | ".join(checks) + " | pass rate (rows tested) | pass or rounding |",
           "|---|---|" + "---|" * len(checks) + "---|---|"]
    for dt in sorted(s):
        cells = []
        for c in checks:
            cnt = s[dt]["checks"].get(c, {})
            tested = sum(v for k, v in cnt.items() if k not in ("SKIP", "UNSUPPORTED_DTYPE"))
            cells.append(f"{cnt.get('PASS', 0)}/{tested}" + (f" ({cnt['SKIP']} skip)" if cnt.get("SKIP") else ""))
        out.append(f"| {dt} | {s[dt]['units']} | " + " | ".join(cells) +
                   f" | {s[dt]['pass_rate']}% of {s[dt]['tested']} | {s[dt]['pass_or_rounding_rate']}% |")
    return out


def _md_failures(rows):
    bad = [r for r in rows if r["status"] in ("MISMATCH", "ERROR", "TIMEOUT", "FALLBACK")]
    out = ["| unit | dtype | check | status | message | sample |", "|---|---|---|---|---|---|"]
    for r in sorted(bad, key=lambda r: (r["op"], r["dtype"], r["check"])):
        msg = (r.get("reason") or r["message"]).replace("|", "\\|")[:220]
        out.append(f"| {r['op']} | {r['dtype']} | {r['check']} | {r['status']} | {msg} | "
                   f"{r.get('sample', '').replace('|', '/')[:120]} |")
    return out if bad else ["(none)"]


def write_markdown(path, all_rows, all_runs):
    """docs/coverage-nn.md: both databases (whichever have results)."""
    lines = ["# Conformance beyond ops: PyTorch's module_db and optim_db on neuron", "",
             "Generated by `torchneuron conformance --db modules` and `--db optims` (see "
             "src/torchneuron/tools/nn_conformance_worker.py for what each check does). Every "
             "ModuleInfo / OptimizerInfo PyTorch ships is run on the neuron device and on the CPU "
             "with the same state and inputs; upstream's DecorateInfo skips and tolerances for "
             "the test of the same name apply. A float32 MISMATCH is judged against a float64 "
             "CPU run: 'pass or rounding' counts those whose device error is the CPU's order "
             "(at most 2x the CPU's own error against float64).", "",
             "A row is one module (optimizer) x dtype x check; its status is the worst over the "
             "samples (at most 16 per module x dtype x train/eval mode, spread over the "
             "ModuleInfo's list; every optimizer configuration). A SKIP is a check that does not "
             "apply (no 4-d/5-d input for channels_last, a constructor without device=/dtype=, no "
             "foreach/fused implementation, no error inputs), a configuration the CPU itself "
             "rejects, or upstream's own skip for the test of that name, with its reason.", "",
             "Not covered: complex and reduced-precision dtypes (module_db lists float32 and "
             "float64 for a PrivateUse1 device), double backward (gradgrad), the optimizers' "
             "`capturable` and `differentiable` flags, and the four input x module memory "
             "format combinations of upstream's test_memory_format (both are channels-last "
             "here).", ""]
    for db in ("modules", "optims"):
        rows, runs = all_rows.get(db), all_runs.get(db) or []
        if not rows:
            continue
        last = runs[-1] if runs else {}
        lines += [f"## {'Modules (module_db)' if db == 'modules' else 'Optimizers (optim_db)'}", "",
                  f"Last run: {last.get('end', last.get('start', '?'))}, commit {last.get('commit', '?')}, "
                  f"torch {last.get('torch', '?')}, jax {last.get('jax', '?')}, {last.get('machine', '?')}; "
                  f"command `{last.get('command', '')}`; {_units_line(db, rows)} units.", "",
                  f"![{db}](coverage-{db}.png)", ""]
        lines += _md_table(db, rows) + ["", "Rows that do not pass:", ""] + _md_failures(rows) + [""]
        skips = collections.Counter(r["message"][:120] for r in rows if r["status"] == "SKIP")
        if skips:
            lines += ["Most common SKIP reasons:", ""]
            lines += [f"- {n} x {m}" for m, n in skips.most_common(8)] + [""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def write_reports(db, p, command):
    all_rows, all_runs = {}, {}
    for d in ("modules", "optims"):
        rows, runs = C.load_results(paths(d)["results"] if d != db else p["results"])
        if rows:
            all_rows[d], all_runs[d] = list(rows.values()), runs
    rows = all_rows.get(db, [])
    if not rows:
        return False
    write_json(p["json"], db, rows, all_runs.get(db, []), command)
    write_chart(p["png"], db, rows)
    write_markdown(p["md"], all_rows, all_runs)
    return True


# ---------------------------------------------------------------------------
# command line (called from conformance.main with its parsed arguments)


def main(args, command) -> int:
    from .opdb import DTYPES

    db = args.db
    p = paths(db)
    if args.results != C.DEFAULT_RESULTS:
        p["results"] = args.results
    for k, default in (("json", C.DEFAULT_JSON), ("md", C.DEFAULT_MD), ("png", C.DEFAULT_PNG),
                       ("baseline", C.DEFAULT_BASELINE)):
        if getattr(args, k) != default:
            p[k] = getattr(args, k)
    dtypes = DB_DTYPES[db] if args.dtypes == list(DTYPES) else args.dtypes
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        print(f"torchneuron conformance: unknown dtype(s) {bad}", file=sys.stderr)
        return 2
    max_samples = args.max_samples if args.max_samples != 64 else MAX_SAMPLES

    if args.gate:
        t0 = time.time()
        rows = run_gate(db, workers=args.workers, timeout=args.timeout, progress=not args.quiet)
        if args.update_baseline:
            changed, n = C.update_baseline(p["baseline"], rows, f"gate units last updated {C._today()} by: {command}",
                                           header=header(db))
            print(f"baseline {os.path.relpath(p['baseline'])}: {changed} entries changed, {n} entries")
            return 0
        problems = C.compare_to_baseline(rows, C.load_baseline(p["baseline"]))
        c = collections.Counter(r["status"] for r in rows)
        print(f"{db} gate: {len(rows)} rows in {time.time() - t0:.0f} s: " +
              ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
        for pr in problems:
            print(C.format_problem(pr))
        print("gate: OK, matches the baseline" if not problems else
              f"gate: {len(problems)} disagreement(s) with {os.path.relpath(p['baseline'])}")
        return 1 if problems else 0

    if args.fresh and os.path.exists(p["results"]) and not args.report_only:
        os.replace(p["results"], p["results"] + ".old")
    if not args.report_only:
        print(f"torchneuron conformance: loading {UPSTREAM[db]} ...", file=sys.stderr)
        cat = catalog(db)
        names = C.select_ops(cat, args.ops)
        if args.shard:
            i, n = args.shard
            names = [o for k, o in enumerate(names) if k % n == i - 1]
        done, _ = C.load_results(p["results"])
        retry = set(args.retry)
        units, skipped = [], 0
        for name in names:
            for dt in dtypes:
                if dt not in cat[name]["dtypes"]:
                    continue
                have = [done.get((name, dt, c)) for c in CHECKS[db]]
                if not args.rerun and all(have) and not any(h["status"] in retry for h in have):
                    skipped += 1
                    continue
                units.append((name, dt))
        if args.list:
            for u in units:
                print(*u)
            return 0
        results = C.ResultsFile(p["results"])
        print(f"torchneuron conformance --db {db}: {len(units)} units to run ({skipped} already done); "
              f"{args.workers} workers; results -> {os.path.relpath(p['results'])}", file=sys.stderr)
        if units:
            import signal

            def _term(signum, frame):  # kill -TERM: stop like Ctrl-C (workers stopped, run recorded)
                raise KeyboardInterrupt

            signal.signal(signal.SIGTERM, _term)
            t0 = time.time()
            start = C._now()
            results.append([{"run": {"start": start, "command": command, "units": len(units),
                                     "workers": args.workers, **C._versions()}}])
            try:
                counts = run_units(db, units, cat, results, workers=args.workers, timeout=args.timeout,
                                   op_ids=names, dtypes=dtypes, max_samples=max_samples,
                                   log_path=os.path.splitext(p["results"])[0] + ".log",
                                   max_rss_mb=args.max_rss_mb, progress=not args.quiet,
                                   desc=f"conformance {db}")
                interrupted = False
            except KeyboardInterrupt:
                counts, interrupted = {}, True
            elapsed = time.time() - t0
            results.append([{"run": {"start": start, "end": C._now(), "elapsed_s": round(elapsed, 1),
                                     "command": command, "units": len(units), "workers": args.workers,
                                     "interrupted": interrupted, "max_samples": max_samples,
                                     **C._versions()}}])
            print(f"torchneuron conformance --db {db}: {len(units)} units in {elapsed / 60:.1f} min: " +
                  ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), file=sys.stderr)
            if interrupted:
                return 130
    if args.update_baseline:
        rows, _ = C.load_results(p["results"])
        gate_units = {(n, d) for n in GATE[db] for d in GATE_DTYPES[db]}
        sel = [r for r in rows.values() if (r["op"], r["dtype"]) in gate_units]
        changed, n = C.update_baseline(p["baseline"], sel, f"last updated {C._today()} by: {command}",
                                       header=header(db))
        print(f"baseline {os.path.relpath(p['baseline'])}: {changed} entries changed, {n} entries")
    if not args.no_report:
        if not write_reports(db, p, command):
            print(f"torchneuron conformance: no results in {p['results']}", file=sys.stderr)
            return 1
        print(f"reports: {os.path.relpath(p['json'])}, {os.path.relpath(p['md'])}, "
              f"{os.path.relpath(p['png'])}", file=sys.stderr)
    return 0

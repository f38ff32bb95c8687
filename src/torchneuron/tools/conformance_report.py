"""Reports of the conformance sweep: reports/conformance.json, docs/coverage.md, a PNG chart."""
from __future__ import annotations

import collections
import datetime as _dt
import json
import os

from .opdb import DTYPES, families
from .status import CODE, FAILED, ORDER, STATUSES, TESTED


def _families(rows):
    """The families the rows name, in the registry's order (the sweep records each row's
    family; a report of an older sweep keeps the families it was made with)."""
    present = {r["family"] for r in rows}
    known = [f for f in families() if f in present]
    return known + sorted(present - set(known))



def _dorder():
    return {d: i for i, d in enumerate(DTYPES)}


def sort_rows(rows):
    d = _dorder()
    return sorted(rows, key=lambda r: (r["op"], d.get(r["dtype"], 99), r["check"] != "forward"))


def _native_decomposed(r):
    return r["status"] == "PASS" and bool(r.get("decomposed_ops"))


def _pct(a, b):
    return f"{100.0 * a / b:.1f}%" if b else "n/a"


def summarize(rows, baseline=None):
    baseline = baseline or {}
    c = collections.Counter(r["status"] for r in rows)
    total = len(rows)
    failed = sum(c[s] for s in FAILED)
    skipped = c["SKIP"] + c["UNSUPPORTED_DTYPE"] + c["FALLBACK"]
    head = {
        "total": total, "passed": c["PASS"], "failed": failed, "skipped": skipped,
        "skipped_no_native_lowering": c["FALLBACK"], "by_status": {s: c[s] for s in ORDER},
        "passed_via_decomposition": sum(1 for r in rows if _native_decomposed(r)),
        "ops": len({r["op"] for r in rows}),
    }

    def goal(dtypes, check):
        sel = [r for r in rows if r["dtype"] in dtypes and r["check"] == check]
        tested = [r for r in sel if r["status"] in TESTED]
        passed = sum(r["status"] == "PASS" for r in tested)
        mism = [r for r in tested if r["status"] == "MISMATCH"]
        unexplained = [r for r in mism if not r.get("pytorch_xfail") and not r.get("rounding") and
                       not (baseline.get((r["op"], r["dtype"], r["check"])) or {}).get("note")]
        return {"entries": len(sel), "tested": len(tested), "passed": passed,
                "pass_rate": round(passed / len(tested), 4) if tested else None,
                "mismatch": len(mism), "mismatch_without_reason": len(unexplained),
                "mismatch_near_miss": sum(bool(r.get("near_miss")) for r in mism),
                "mismatch_rounding": sum(bool(r.get("rounding")) for r in mism),
                "fallback": sum(r["status"] == "FALLBACK" for r in tested),
                "error": sum(r["status"] == "ERROR" for r in tested),
                "timeout": sum(r["status"] == "TIMEOUT" for r in tested)}

    goals = {
        "float32 forward": dict(goal({"float32"}, "forward"), target=0.90),
        "float32 backward": dict(goal({"float32"}, "backward"), target=0.85),
        "bfloat16 forward": dict(goal({"bfloat16"}, "forward"), target=0.80),
        "float16 forward": dict(goal({"float16"}, "forward"), target=0.80),
    }
    by_dtype = {}
    for dt in DTYPES:
        for check in ("forward", "backward"):
            sel = [r for r in rows if r["dtype"] == dt and r["check"] == check]
            if sel:
                by_dtype[f"{dt} {check}"] = {s: sum(r["status"] == s for r in sel) for s in ORDER}
    by_family = {}
    for fam in _families(rows):
        sel = [r for r in rows if r["family"] == fam]
        if not sel:
            continue
        d = {s: sum(r["status"] == s for r in sel) for s in ORDER}
        d["ops"] = len({r["op"] for r in sel})
        d["decomposed"] = sum(1 for r in sel if _native_decomposed(r))
        tested = sum(d[s] for s in TESTED)
        d["tested"] = tested
        d["native_rate"] = round(d["PASS"] / tested, 4) if tested else None
        by_family[fam] = d
    fallback_ops = collections.defaultdict(set)
    fallback_rows = collections.Counter()
    decomp_ops = collections.defaultdict(set)
    for r in rows:
        for a in r.get("fallback_ops", ()):
            fallback_ops[a].add(r["op"])
            fallback_rows[a] += 1
        if r["status"] == "PASS":
            for a in r.get("decomposed_ops", ()):
                decomp_ops[a].add(r["op"])
    return {
        "headline": head,
        "goals": goals,
        "by_dtype": by_dtype,
        "by_family": by_family,
        "fallback_aten_ops": {a: {"rows": fallback_rows[a], "opinfos": sorted(v)}
                              for a, v in sorted(fallback_ops.items(), key=lambda kv: (-fallback_rows[kv[0]], kv[0]))},
        "decomposed_aten_ops": {a: sorted(v) for a, v in sorted(decomp_ops.items())},
    }


def failing_ops(rows, statuses=("MISMATCH", "ERROR", "TIMEOUT", "FALLBACK")):
    """{status: [(op, n rows, [dtype/check...], first message, sample)]}, most rows first."""
    out = {}
    for st in statuses:
        by_op = collections.defaultdict(list)
        for r in rows:
            if r["status"] == st:
                by_op[r["op"]].append(r)
        items = []
        for op, rs in by_op.items():
            rs = sort_rows(rs)
            where = [r["dtype"] + ("" if r["check"] == "forward" else " bwd") +
                     ("~" if r.get("near_miss") else "") + ("ʳ" if r.get("rounding") else "")
                     for r in rs]
            items.append({"op": op, "rows": len(rs), "where": where, "message": rs[0].get("message", ""),
                          "sample": rs[0].get("sample", ""), "family": rs[0]["family"],
                          "near_miss_rows": sum(bool(r.get("near_miss")) for r in rs),
                          "rounding_rows": sum(bool(r.get("rounding")) for r in rs),
                          "pytorch_xfail": any(r.get("pytorch_xfail") for r in rs)})
        items.sort(key=lambda t: (-t["rows"], t["op"]))
        out[st] = items
    return out


def top_failing(rows, n=30):
    """The n ops with the most failing rows (MISMATCH/ERROR/TIMEOUT/FALLBACK), grouped by reason."""
    per_op = collections.Counter(r["op"] for r in rows if r["status"] in FAILED + ("FALLBACK",))
    top = {op for op, _ in per_op.most_common(n)}
    groups = failing_ops([r for r in rows if r["op"] in top])
    return groups


# ---------------------------------------------------------------------------


def _md_escape(s, n=160):
    s = " ".join(str(s).split()).replace("|", "\\|")
    return s if len(s) <= n else s[: n - 1] + "…"


def _runs_text(runs):
    done = [r for r in runs if "elapsed_s" in r]
    total = sum(r["elapsed_s"] for r in done)
    return done, total


def write_markdown(path, rows, summary, runs, command, png_rel):
    h = summary["headline"]
    done_runs, total_s = _runs_text(runs)
    last = done_runs[-1] if done_runs else {}
    dates = sorted({r.get("start", "")[:10] for r in done_runs if r.get("start")})
    L = []
    L.append("# Conformance: PyTorch's OpInfo tests on the neuron device\n")
    L.append("Every OpInfo in `torch.testing._internal.common_methods_invocations.op_db` (and variant), "
             f"for each of {', '.join(f'`{d}`' for d in DTYPES)}, every sample input: the op runs on the CPU and on "
             "the neuron device with identical inputs, and the results (and float32 gradients) are compared "
             "with `TestCase.assertEqual` under the OpInfo's own tolerance overrides for "
             "`TestCommon.test_compare_cpu` (else `torch.testing.assert_close`'s defaults for the dtype). "
             "A row is one op × dtype × check (forward, float32 backward); its status is the worst over the "
             "samples. Ops that ran through the CPU fallback count as FALLBACK (not native), even when their values "
             "match; ops run through a traced PyTorch decomposition count as native (PASS) and are listed "
             "separately. Generated by `torchneuron conformance` (src/torchneuron/tools/conformance.py).\n")
    cmds = list(dict.fromkeys(r.get("command", "") for r in done_runs))
    if cmds:
        L.append(f"- Produced by {len(done_runs)} run(s) on {', '.join(dates)}: " +
                 "; ".join(f"`{c}`" for c in cmds[:6]) + (f" and {len(cmds) - 6} more" if len(cmds) > 6 else ""))
    commits = list(dict.fromkeys(f"{r.get('commit', '?')} ({r.get('code', '?')})" for r in done_runs))
    if commits:
        L.append(f"- Code: {'; '.join(commits)}")
    L.append(f"- Report built by: `{command}`")
    if last:
        L.append(f"- Versions: torch {last.get('torch')}, jax {last.get('jax')}, Python {last.get('python')}, "
                 f"{last.get('machine')}; {last.get('workers')} worker processes")
    L.append(f"- Sweep time: {total_s / 3600:.2f} h of wall-clock over {len(done_runs)} run(s) "
             "(resumed runs add up; the machine was shared with other jobs)")
    L.append(f"- Report written {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; "
             "machine-readable: `reports/conformance.json`\n")

    L.append("## Summary\n")
    L.append("| Total results | Passed | Failed | Skipped | of which skipped for no native lowering |")
    L.append("|---:|---:|---:|---:|---:|")
    L.append(f"| {h['total']} | {h['passed']} | {h['failed']} | {h['skipped']} | {h['skipped_no_native_lowering']} |\n")
    L.append(f"{h['ops']} OpInfo entries. Passed: ran natively and matched the CPU "
             f"({h['passed_via_decomposition']} of them through a traced decomposition). Failed: MISMATCH "
             f"{h['by_status']['MISMATCH']}, ERROR {h['by_status']['ERROR']}, TIMEOUT {h['by_status']['TIMEOUT']}. "
             f"Skipped: FALLBACK {h['by_status']['FALLBACK']} (no native lowering: ran on the CPU), "
             f"UNSUPPORTED_DTYPE {h['by_status']['UNSUPPORTED_DTYPE']} (the OpInfo does not list the dtype for "
             f"the CPU), SKIP {h['by_status']['SKIP']} (the CPU rejects the samples / no samples).\n")

    L.append("### Goals\n")
    L.append("Pass rate = PASS / rows that ran (PASS, FALLBACK, MISMATCH, ERROR, TIMEOUT).\n")
    L.append("MISMATCH: all (near misses within 1e-3 / rounding: every mismatching sample is at most "
             "2x as far from a float64 CPU reference as the CPU kernel is / without a written reason: "
             "no PyTorch xfail, not rounding and no note in src/torchneuron/tools/data/conformance_baseline.csv).\n")
    L.append("| | rows that ran | PASS | rate | target | FALLBACK | MISMATCH (near / rounding / no reason) | ERROR | TIMEOUT |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k, g in summary["goals"].items():
        rate = f"{100 * g['pass_rate']:.1f}%" if g["pass_rate"] is not None else "n/a"
        ok = "" if g["pass_rate"] is None else (" ✅" if g["pass_rate"] >= g["target"] else " ❌")
        L.append(f"| {k} | {g['tested']} | {g['passed']} | {rate}{ok} | {100 * g['target']:.0f}% | {g['fallback']} | "
                 f"{g['mismatch']} ({g['mismatch_near_miss']} / {g.get('mismatch_rounding', 0)} / "
                 f"{g['mismatch_without_reason']}) | {g['error']} | {g['timeout']} |")
    L.append("")

    L.append("## By op family\n")
    L.append(f"![native coverage by family]({png_rel})\n")
    L.append("Families come from the OpInfo class (UnaryUfuncInfo, BinaryUfuncInfo, ReductionOpInfo, "
             "ShapeFuncInfo) and name. Native = PASS / rows that ran.\n")
    L.append("| family | ops | rows | ran | PASS | (via decomposition) | FALLBACK | MISMATCH | ERROR | TIMEOUT | SKIP | UNSUPPORTED_DTYPE | native |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for fam, d in summary["by_family"].items():
        rows_n = sum(d[s] for s in ORDER)
        L.append(f"| {fam} | {d['ops']} | {rows_n} | {d['tested']} | {d['PASS']} | {d['decomposed']} | {d['FALLBACK']} | "
                 f"{d['MISMATCH']} | {d['ERROR']} | {d['TIMEOUT']} | {d['SKIP']} | {d['UNSUPPORTED_DTYPE']} | "
                 f"{_pct(d['PASS'], d['tested'])} |")
    L.append("")

    L.append("## By dtype\n")
    L.append("| dtype / check | " + " | ".join(ORDER) + " |")
    L.append("|---|" + "---:|" * len(ORDER))
    for k, d in summary["by_dtype"].items():
        L.append(f"| {k} | " + " | ".join(str(d[s]) for s in ORDER) + " |")
    L.append("")

    L.append("## Ops that still fall back to the CPU\n")
    fb = summary["fallback_aten_ops"]
    if not fb:
        L.append("None.\n")
    else:
        L.append(f"{len(fb)} aten ops ran through the CPU fallback during the sweep (rows: op × dtype × check "
                 "rows in which the aten op fell back; OpInfos: which entries hit it).\n")
        L.append("| aten op | rows | OpInfos |")
        L.append("|---|---:|---|")
        for a, v in fb.items():
            ops = ", ".join(v["opinfos"][:8]) + (f", … ({len(v['opinfos'])})" if len(v["opinfos"]) > 8 else "")
            L.append(f"| `{a}` | {v['rows']} | {_md_escape(ops, 300)} |")
        L.append("")
    dec = summary["decomposed_aten_ops"]
    L.append("## Ops that run natively through a traced decomposition\n")
    if not dec:
        L.append("None.\n")
    else:
        L.append("| aten op | OpInfos (passing rows) |")
        L.append("|---|---|")
        for a, v in dec.items():
            ops = ", ".join(v[:8]) + (f", … ({len(v)})" if len(v) > 8 else "")
            L.append(f"| `{a}` | {_md_escape(ops, 300)} |")
        L.append("")

    L.append("## Failing ops by reason\n")
    L.append("Each entry: the OpInfo, how many rows (dtype × check) have this status, where, and the first "
             "message with its sample input (`#i` = index in `op.sample_inputs('cpu', dtype)`).\n")
    groups = failing_ops(rows)
    for st in ("MISMATCH", "ERROR", "TIMEOUT", "FALLBACK"):
        items = groups.get(st, [])
        L.append(f"### {st} ({len(items)} ops, {sum(i['rows'] for i in items)} rows)\n")
        if st == "MISMATCH":
            near = sum(i["near_miss_rows"] for i in items)
            L.append(f"{near} of these rows are near misses (marked `~`): every mismatching sample is within "
                     "atol=rtol=1e-3, the tolerance of PyTorch's own `TestCommon.test_compare_cpu`; they differ "
                     "only beyond the OpInfo's / assert_close's default tolerance (rounding, summation order). "
                     f"{sum(i['rounding_rows'] for i in items)} rows are measured rounding (marked `ʳ`): against "
                     "a float64 CPU reference of the same sample, the device's largest error is at most twice "
                     "the CPU kernel's (or within 4 ulps); the others are less accurate than the CPU and "
                     "carry a note in the baseline or are bugs.\n")
        if not items:
            L.append("None.\n")
            continue
        L.append("<details><summary>list</summary>\n")
        L.append("| op | family | rows | where | first message | sample |")
        L.append("|---|---|---:|---|---|---|")
        for it in items:
            op = f"`{it['op']}`" + (" (PyTorch xfail)" if it["pytorch_xfail"] else "")
            L.append(f"| {op} | {it['family']} | {it['rows']} | {', '.join(it['where'])} | "
                     f"{_md_escape(it['message'])} | {_md_escape(it['sample'], 100)} |")
        L.append("\n</details>\n")

    L.append("## All OpInfos\n")
    L.append("Legend: " + ", ".join(f"{v} {k}" for k, v in CODE.items()) + ". `fwd`/`bwd` = float32 forward / backward.\n")
    L.append("<details><summary>table</summary>\n")
    cols = ["float32 fwd", "float32 bwd"] + [d for d in DTYPES if d != "float32"]
    L.append("| op | family | " + " | ".join(cols) + " |")
    L.append("|---|---|" + "---|" * len(cols))
    by_op = collections.defaultdict(dict)
    fam = {}
    for r in rows:
        by_op[r["op"]][(r["dtype"], r["check"])] = r["status"]
        fam[r["op"]] = r["family"]
    for op in sorted(by_op):
        d = by_op[op]
        cells = [CODE.get(d.get(("float32", "forward")), ""), CODE.get(d.get(("float32", "backward")), "")]
        cells += [CODE.get(d.get((dt, "forward")), "") for dt in DTYPES if dt != "float32"]
        L.append(f"| `{op}` | {fam[op]} | " + " | ".join(cells) + " |")
    L.append("\n</details>\n")

    L.append("## How to run\n")
    L.append("```\n"
             "torchneuron conformance                      # full sweep (2 workers, resumable), then these reports\n"
             "torchneuron conformance --fresh              # start over (the old results file is kept as .old)\n"
             "torchneuron conformance --ops add,nn.functional.conv2d --dtypes float32,bfloat16 --rerun\n"
             "torchneuron conformance --shard 1/2          # one half of the ops (run 2/2 elsewhere, same results file)\n"
             "torchneuron conformance --report-only        # rebuild the reports from reports/conformance.jsonl\n"
             "torchneuron conformance --gate               # the CI sample vs src/torchneuron/tools/data/conformance_baseline.csv\n"
             "torchneuron conformance --gate --update-baseline\n"
             "```\n")
    L.append("Statuses: " + "; ".join(f"**{k}**: {v}" for k, v in STATUSES.items()) + ".\n")
    L.append("## Limitations\n")
    L.append("- Only the functional form of each OpInfo is run (`op.op`); method, in-place and `out=` variants, "
             "`reference_inputs`/`error_inputs`, forward-mode AD and gradgrad are not swept.\n"
             "- Gradients are compared for float32 only, with one random cotangent (not gradcheck).\n"
             "- Where PyTorch skips `TestCommon.test_compare_cpu` (random ops, undefined outputs) the op must run "
             "and return the right structure, shapes and dtypes; values are not compared (`values_compared: false` in the JSON).\n"
             "- A TIMEOUT row means the op × dtype did not finish within the per-unit limit on this (shared, 2-core) "
             "machine; most time goes to compiling one XLA executable per new shape.\n"
             "- Statuses reflect the code at the time each unit ran; a sweep takes hours while other work lands.\n")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(L))


def write_chart(path, summary, rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fams = list(summary["by_family"])
    fams = fams[::-1]
    segs = [("native (lowered)", "#2e7d32"), ("native (decomposition)", "#81c784"), ("FALLBACK", "#ffb300"),
            ("MISMATCH", "#e53935"), ("ERROR", "#8e24aa"), ("TIMEOUT", "#546e7a")]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(14, 6), gridspec_kw={"width_ratios": [3, 2]})
    for i, fam in enumerate(fams):
        d = summary["by_family"][fam]
        tested = d["tested"] or 1
        vals = [d["PASS"] - d["decomposed"], d["decomposed"], d["FALLBACK"], d["MISMATCH"], d["ERROR"], d["TIMEOUT"]]
        left = 0.0
        for (label, color), v in zip(segs, vals):
            w = 100.0 * v / tested
            ax.barh(i, w, left=left, color=color, label=label if i == 0 else None, edgecolor="white", linewidth=0.5)
            left += w
        ax.text(101, i, f"{100.0 * d['PASS'] / tested:.0f}%  ({d['tested']})", va="center", fontsize=9)
    ax.set_yticks(range(len(fams)))
    ax.set_yticklabels(fams)
    ax.set_xlim(0, 118)
    ax.set_xlabel("% of rows that ran (op × dtype × check); right: native %, (rows)")
    ax.set_title("Native coverage by op family")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, -0.28), ncol=3, fontsize=8, frameon=False)

    goals = summary["goals"]
    names = list(goals)
    rates = [100.0 * (goals[k]["pass_rate"] or 0.0) for k in names]
    targets = [100.0 * goals[k]["target"] for k in names]
    y = range(len(names))
    ax2.barh(list(y), rates, color=["#2e7d32" if r >= t else "#e53935" for r, t in zip(rates, targets)])
    for i, (r, t) in enumerate(zip(rates, targets)):
        ax2.plot([t, t], [i - 0.4, i + 0.4], color="black", linewidth=2)
        txt = f"{r:.1f}%" if goals[names[i]]["pass_rate"] is not None else "n/a (not run)"
        ax2.text(min(r, 100) + 1, i, txt, va="center", fontsize=9)
    ax2.set_yticks(list(y))
    ax2.set_yticklabels(names)
    ax2.invert_yaxis()
    ax2.set_xlim(0, 110)
    ax2.set_xlabel("native pass rate (black: target)")
    ax2.set_title("Goals")
    h = summary["headline"]
    fig.suptitle(f"torchneuron OpInfo conformance: {h['passed']} / {h['total']} rows pass natively "
                 f"({h['ops']} OpInfos × {len({r['dtype'] for r in rows})} dtypes)", fontsize=12)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_reports(rows, runs, *, json_path, md_path, png_path, baseline=None, command=""):
    rows = sort_rows(rows)
    summary = summarize(rows, baseline)
    done_runs, total_s = _runs_text(runs)
    meta = {
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "runs": runs,
        "sweep_seconds": round(total_s, 1),
        "dtypes": list(DTYPES),
        "statuses": STATUSES,
        "row": "one row per OpInfo (op id = name[.variant]) x dtype x check (forward | backward)",
    }
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump({"meta": meta, "summary": summary, "top_failing": top_failing(rows), "rows": rows}, f,
                  indent=1, sort_keys=False)
        f.write("\n")
    write_chart(png_path, summary, rows)
    png_rel = os.path.relpath(png_path, os.path.dirname(os.path.abspath(md_path)))
    write_markdown(md_path, rows, summary, runs, command, png_rel)
    return summary

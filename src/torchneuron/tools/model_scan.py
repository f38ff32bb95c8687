"""``torchneuron scan``: the Hugging Face model zoo on the neuron device.

Every Transformers model type that can be built from a tiny random config, plus
Diffusers' UNet2D / UNet2DCondition / AutoencoderKL / DiT Transformer2D models
and a tiny DDPM sampling loop (tools/model_scan_models.py), each in its own
process with a timeout (tools/model_scan_worker.py), against the same weights
on the CPU: forward, backward (gradients), greedy ``generate()`` tokens,
``torch.compile(backend="neuron")`` forward (with its graph breaks), bfloat16
forward and bf16 autocast.  Per model and stage: PASS / MISMATCH / ERROR /
FALLBACK / TIMEOUT / CRASH / SKIP, plus warm eager and first-call times.

Results are appended to ``reports/model_scan.jsonl`` as they come (an
interrupted run resumes); the reports ``reports/model_scan.json``,
``docs/model-scan.md`` and ``docs/model-scan.png`` are rebuilt from it.

    torchneuron scan                         # the whole zoo (resumes), then the reports
    torchneuron scan --only gpt2,llama,bert* --stages forward,backward
    torchneuron scan --shard 1/4
    torchneuron scan --report-only
    torchneuron scan --gate                  # the CI sample against src/torchneuron/tools/data/model_scan_baseline.csv
    torchneuron scan --gate --update-baseline
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import csv
import datetime as _dt
import fnmatch
import hashlib
import io
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time

from .. import config, persist
from .conformance import data_path, repo_root

ROOT = repo_root()
DEFAULT_RESULTS = os.path.join(ROOT, "reports", "model_scan.jsonl")
DEFAULT_JSON = os.path.join(ROOT, "reports", "model_scan.json")
DEFAULT_MD = os.path.join(ROOT, "docs", "model-scan.md")
DEFAULT_PNG = os.path.join(ROOT, "docs", "model-scan.png")
DEFAULT_BASELINE = data_path("model_scan_baseline.csv")

STAGES = ("forward", "backward", "generate", "compile", "bf16", "autocast")
STATUSES = {
    "PASS": "ran natively and matched the CPU (same weights, same inputs)",
    "MISMATCH": "ran, but differs from the CPU beyond the stage's tolerance (max error recorded)",
    "ERROR": "raised on the neuron device while the CPU did not (first line recorded)",
    "FALLBACK": "matched the CPU, but some aten ops ran through the CPU fallback (listed)",
    "TIMEOUT": "the model's process ran past its time limit in this stage",
    "CRASH": "the model's process died in this stage",
    "SKIP": "the CPU itself fails the stage (nothing to compare with)",
}
ORDER = ["PASS", "FALLBACK", "MISMATCH", "ERROR", "TIMEOUT", "CRASH", "SKIP"]
FAILED = ("MISMATCH", "ERROR", "TIMEOUT", "CRASH")
COLORS = {"PASS": "#2e7d32", "FALLBACK": "#ffb300", "MISMATCH": "#e53935", "ERROR": "#8e24aa",
          "TIMEOUT": "#546e7a", "CRASH": "#212121", "SKIP": "#bdbdbd"}

# The CI sample: one of each kind of model (tests/test_model_scan_gate.py).
GATE_MODELS = ["bert", "gpt2", "llama", "t5", "vit", "whisper", "clip", "mixtral", "mamba",
               "diffusers:unet2d"]
GATE_STAGES = ("forward", "backward", "generate", "compile")

# Written root causes of failures (docs/model-scan.md groups failures by these).
# (stage regex, status regex, message regex) -> cause.
CAUSES: list = [
    ("forward|backward|compile|bf16", r"^TIMEOUT",
     "SAM-family models are slow on the CPU too: they keep SAM's 1024x1024 image (the milder "
     "config variant); the warm CPU forward alone takes 19-23 s for sam2 and sam3_tracker "
     "(device 23-25 s) and 12 s for sam2_hiera_det_model, and the remaining stages with their "
     "CPU references run past the 300 s per-model limit (sam3_lite_text: not measured). Not a "
     "device failure; a smaller image config would fit. The same budget also ends align, "
     "efficientnet (the milder variant keeps 64M parameters), textnet (bf16) and, when the "
     "machine is shared, a few others: their stage times were not measured separately; "
     "`torchneuron scan --redo --only NAME` on an idle machine or a larger --timeout decides."),
    ("backward|bf16|autocast", r"^MISMATCH: values",
     "grounding-dino only, not a device bug: the reference is discontinuous. Backward: the "
     "gradient of bilinear grid_sample w.r.t. the sampling location jumps at pixel-cell edges, "
     "and the model samples 535,040 coordinates per encoder layer, 12 of them within 1e-5 px "
     "of an edge; point (0, 845, 0, 0, 1, x) of encoder layer 1 lies 1.9e-6 px (about one "
     "float32 ulp of the location) from one, and moving it 3.9e-6 px across changes the CPU's "
     "own sampling_offsets.weight gradient by 0.00429 = 34.3x the bound, the recorded mismatch "
     "(err 0.00429, bound 0.000125); the float64 judge picks a side by chance (in layer 0 its "
     "point at px 20.9999997 vs float32's 21.0 puts the CPU itself 4.9x off). With identical "
     "module inputs the device matches the CPU to 1e-7. bf16/autocast: the two-stage top-900 "
     "query selection picks other proposals in bf16 on both devices (init_reference_points off "
     "0.965 from float32 on CPU and device alike; last_hidden_state CPU bf16 2.81, device 2.88 "
     "from float32), which the float32 judge passes as rounding. Which side the near-edge "
     "points land on varies between runs on this machine (one run passed every stage with "
     "backward worst 1.2x, rounding; the scan's rerun flagged backward again)."),
    ("compile", r"^ERROR: RuntimeError: torchneuron: boolean mask indices have a data-dependent",
     "a boolean-mask index (aten.index with a bool mask) reached the compiled graph: its result "
     "size depends on the mask's values, which a static-shape XLA executable cannot express "
     "(dynamic shapes are a listed gap, docs/limitations.md); eager mode runs it (nonzero and "
     "one host read), so forward, backward and generate pass."),
    ("compile", r"^MISMATCH: values",
     "paligemma only, not a device bug: PyTorch's own compiled CPU program gives the same "
     "output. With input_ids alone, torch.compile(backend='aot_eager') and backend='inductor' "
     "on the CPU, and aot_eager on neuron, all differ from CPU eager by 0.29670 in "
     "last_hidden_state (whole token rows, decreasing along the sequence), and "
     "backend='neuron' by 0.29670 as well: the traced program (transformers' mask building "
     "under Dynamo) is not the eager one. Eager forward, backward, bf16 and autocast pass."),
    ("autocast", r"^ERROR: RuntimeError: Unsupported dtype BFloatN",
     "fnet only; the device follows CUDA here. FNet applies torch.fft.fftn to a linear "
     "layer's output. CUDA's autocast lists, which torch.autocast('neuron') uses, leave the "
     "FFT ops out, so the FFT gets bfloat16, and PyTorch's FFT has no bfloat16 (there is no "
     "complex bfloat16): CUDA and the CPU raise this same error for a bfloat16 fftn. CPU "
     "autocast passes because its own lists run the FFT ops in float32. The bf16 stage is "
     "skipped for the same reason (the CPU raises it)."),
]


def _progress_bar(total, desc, disable):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="model", dynamic_ncols=True, disable=disable,
                file=sys.stderr)


# ---------------------------------------------------------------------------
# running models

def _worker_cmd(model, stages, seed):
    return [sys.executable, "-m", "torchneuron.tools.model_scan_worker", model,
            "--stages", ",".join(stages), "--seed", str(seed)]


def scan_env():
    env = dict(os.environ, TRANSFORMERS_VERBOSITY="error", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore",
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    # the executables of one model's ops are the next one's (same tiny shapes): share them,
    # in a folder of this user's only (persist.private_dir: jax loads and runs what it
    # holds, so never a shared or predictable one such as $TMPDIR/...)
    cache = config.get("TORCHNEURON_SCAN_XLA_CACHE") or os.path.join(
        config.cache_root(), "scan-xla")
    if cache != "off":
        if "JAX_COMPILATION_CACHE_DIR" not in env:
            env["JAX_COMPILATION_CACHE_DIR"] = persist.private_dir(cache)
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")
    return env


def run_worker(cmd, timeout, **popen_kw):
    """Run a worker process to its end or `timeout` (then kill it): (stdout, stderr,
    timed_out, returncode)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen_kw)
    try:
        out, err = proc.communicate(timeout=timeout)
        return out, err, False, proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return out, err, True, proc.returncode


def run_model(model, stages, timeout=300.0, seed=0):
    """Run one model in a subprocess; returns its record."""
    t0 = time.time()
    out, err, timed_out, returncode = run_worker(_worker_cmd(model, stages, seed), timeout,
                                                 env=scan_env(), cwd=tempfile.gettempdir())
    recs = []
    for line in out.splitlines():
        if line.startswith("@@stage "):
            try:
                recs.append(json.loads(line[8:]))
            except json.JSONDecodeError:
                pass
    rec = {"model": model, "elapsed_s": round(time.time() - t0, 1), "stages": {}}
    for r in recs:
        st = r.pop("stage")
        if st == "build":
            rec["build"] = r
        else:
            rec["stages"][st] = r
    if "build" not in rec:
        why = "TIMEOUT" if timed_out else "CRASH"
        rec["build"] = {"status": why, "reason": _last_line(err) if not timed_out else
                        f"no result within {timeout:.0f} s"}
    elif rec["build"]["status"] == "PASS" and (timed_out or returncode != 0):
        # the first stage that did not report is where it stopped
        left = [s for s in stages if s not in rec["stages"] and _applies(s, rec["build"])]
        if left:
            rec["stages"][left[0]] = {"status": "TIMEOUT" if timed_out else "CRASH",
                                      "error": f"no result within {timeout:.0f} s" if timed_out
                                      else f"exit {returncode}: {_last_line(err)}"}
    return rec


def _applies(stage, build):
    kind = build.get("kind")
    if kind == "pipeline":
        return stage == "forward"
    if stage == "generate":
        return kind in ("causal", "seq2seq")
    return True


def _last_line(text):
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def load_results(path):
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        r = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    out[r["model"]] = r  # the last record of a model wins
    return out


def scan(models, stages, results_path, workers=2, timeout=300.0, progress=True, desc="scan",
         redo=False):
    """Run `models` not yet in `results_path` (resume; `redo`: run them again); returns every
    record of `models`."""
    done = load_results(results_path)
    todo = [m for m in models if redo or m not in done
            or not set(stages) <= set(done[m].get("ran", []))]
    # a stable shuffle: an interrupted run has scanned a sample of the zoo, not its first letters
    todo.sort(key=lambda m: hashlib.md5(m.encode()).hexdigest())
    os.makedirs(os.path.dirname(os.path.abspath(results_path)), exist_ok=True)
    lock = threading.Lock()
    counts = collections.Counter()
    bar = _progress_bar(len(todo), desc, not progress)

    def one(m):
        rec = run_model(m, stages, timeout)
        rec["ran"] = list(stages)
        prev = done.get(m)
        if prev and prev.get("build", {}).get("status") == "PASS":  # keep other stages' results
            rec["stages"] = {**prev.get("stages", {}), **rec["stages"]}
            rec["ran"] = sorted(set(prev.get("ran", [])) | set(stages), key=STAGES.index)
        with lock:
            with open(results_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
            done[m] = rec
            counts[_headline(rec)] += 1
            bar.update(1)
            bar.set_postfix(dict(counts), refresh=False)

    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as ex:
        list(ex.map(one, todo))
    bar.close()
    return {m: done[m] for m in models if m in done}


def _headline(rec):
    b = rec["build"]["status"]
    if b != "PASS":
        return "unbuildable" if b == "UNBUILDABLE" else b.lower()
    sts = [s["status"] for s in rec["stages"].values()]
    bad = [s for s in sts if s in FAILED or s == "FALLBACK"]
    return "pass" if not bad else "fail"


# ---------------------------------------------------------------------------
# reports

def _cause_key(stage, st):
    """A grouping key for one failing stage: its status and normalised message."""
    if st["status"] == "FALLBACK":
        return f"FALLBACK: {', '.join(st.get('fallback', []))}"
    if st["status"] == "MISMATCH":
        w = st.get("worst", {})
        if isinstance(w.get("err"), str):
            return f"MISMATCH: {w['err']}"
        return "MISMATCH: values beyond tolerance"
    msg = st.get("error", "")
    msg = re.sub(r"0x[0-9a-f]+", "0x…", msg)
    msg = re.sub(r"\d+", "N", msg)
    return f"{st['status']}: {msg[:160]}"


def explain(stage, key):
    for s_re, k_re, cause in CAUSES:
        if re.search(s_re, stage) and re.search(k_re, key):
            return cause
    return None


def summarize(results, stages=STAGES):
    from .model_scan_models import family

    models = sorted(results)
    built_all = [m for m in models if results[m]["build"]["status"] == "PASS"]
    # a model whose CPU forward is itself random has no reference to compare with
    random_fwd = [m for m in built_all if results[m]["build"].get("random_forward")]
    built = [m for m in built_all if m not in random_fwd]
    unbuildable = collections.defaultdict(list)
    for m in models:
        b = results[m]["build"]
        if b["status"] != "PASS":
            unbuildable[f"{b['status']}: {_norm_reason(b.get('reason', ''))}"].append(m)
    per_stage = {s: collections.Counter() for s in stages}
    fam = collections.defaultdict(lambda: collections.Counter())
    groups = collections.defaultdict(list)
    fwd_bwd_pass = 0
    for m in built:
        r = results[m]
        f = family(m)
        fam[f]["built"] += 1
        ok_fb = True
        for s in stages:
            st = r["stages"].get(s)
            if st is None:
                if s in ("forward", "backward") and _applies(s, r["build"]):
                    ok_fb = False
                continue
            per_stage[s][st["status"]] += 1
            fam[f][f"{s}:{st['status']}"] += 1
            if st["status"] in FAILED or st["status"] == "FALLBACK":
                groups[(s, _cause_key(s, st))].append(m)
            if s in ("forward", "backward") and st["status"] != "PASS":
                ok_fb = False
        if ok_fb:
            fwd_bwd_pass += 1
            fam[f]["fwd_bwd_pass"] += 1

    def pct(a, b):
        return round(100.0 * a / b, 1) if b else None

    gen = per_stage.get("generate", collections.Counter())
    comp = per_stage.get("compile", collections.Counter())
    gen_n = sum(v for k, v in gen.items() if k != "SKIP")
    comp_n = sum(v for k, v in comp.items() if k != "SKIP")
    times = [(results[m]["stages"]["forward"].get("warm_s"), results[m]["stages"]["forward"].get("cpu_s"),
              results[m]["stages"]["forward"].get("first_s"))
             for m in built if results[m]["stages"].get("forward", {}).get("warm_s")]
    ratios = sorted(w / c for w, c, _ in times if c)
    firsts = sorted(f for _, _, f in times if f is not None)
    return {
        "models": len(models), "built": len(built), "random_forward": random_fwd,
        "unbuildable": {k: sorted(v) for k, v in sorted(unbuildable.items(), key=lambda kv: -len(kv[1]))},
        "headline": {
            "fwd_bwd_native_pass": fwd_bwd_pass, "fwd_bwd_native_pass_pct": pct(fwd_bwd_pass, len(built)),
            "generate_parity": gen["PASS"], "generate_tested": gen_n,
            "generate_parity_pct": pct(gen["PASS"], gen_n),
            "compile_pass": comp["PASS"], "compile_tested": comp_n,
            "compile_pass_pct": pct(comp["PASS"], comp_n),
            "warm_eager_vs_cpu_median": round(ratios[len(ratios) // 2], 2) if ratios else None,
            "first_forward_s_median": firsts[len(firsts) // 2] if firsts else None,
        },
        "per_stage": {s: dict(c) for s, c in per_stage.items()},
        "by_family": {f: dict(c) for f, c in sorted(fam.items())},
        "failures": [{"stage": s, "key": k, "models": sorted(v), "cause": explain(s, k)}
                     for (s, k), v in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))],
    }


def _norm_reason(reason):
    reason = re.sub(r"\d+", "N", reason)
    return reason[:140]


def write_reports(results, meta, json_path=DEFAULT_JSON, md_path=DEFAULT_MD, png_path=DEFAULT_PNG):
    summary = summarize(results)
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump({"meta": meta, "summary": summary, "results": results}, f, indent=1, sort_keys=True)
    _chart(summary, png_path)
    with open(md_path, "w") as f:
        f.write(markdown(summary, results, meta, os.path.relpath(png_path, os.path.dirname(md_path))))
    return summary


def _chart(summary, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = [s for s in STAGES if summary["per_stage"].get(s)]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for i, s in enumerate(stages[::-1]):
        c = summary["per_stage"][s]
        left = 0
        for st in ORDER:
            v = c.get(st, 0)
            if v:
                ax.barh(i, v, left=left, color=COLORS[st], label=st)
                if v >= 8:
                    ax.text(left + v / 2, i, str(v), ha="center", va="center", fontsize=8,
                            color="white" if st not in ("SKIP", "FALLBACK") else "black")
                left += v
    ax.set_yticks(range(len(stages)))
    ax.set_yticklabels(stages[::-1])
    h = summary["headline"]
    ax.set_xlabel("models")
    ax.set_title(f"torchneuron scan: {summary['built']} tiny Hugging Face models built of "
                 f"{summary['models']}; forward+backward native PASS {h['fwd_bwd_native_pass_pct']}%")
    hs, ls = ax.get_legend_handles_labels()
    uniq = dict(zip(ls, hs))
    ax.legend(uniq.values(), uniq.keys(), loc="lower right", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(summary, results, meta, png_rel):
    h = summary["headline"]
    out = io.StringIO()
    w = out.write
    w("# Model scan: the Hugging Face zoo on neuron\n\n")
    w("Generated by `torchneuron scan` (src/torchneuron/tools/model_scan.py); do not edit by hand.\n\n")
    w(f"- command: `{meta.get('command')}`\n- date: {meta.get('date')}\n")
    for up in meta.get("updates", []):
        w(f"- then: `{up['command']}` ({up['date']})\n")
    w(f"- machine: {meta.get('machine')}\n")
    w(f"- versions: {meta.get('versions')}\n")
    zoo = meta.get("zoo")
    if zoo and summary["models"] < zoo:
        w(f"- **coverage: {summary['models']} of the {zoo} zoo entries scanned so far** (the run "
          f"goes through the zoo in a fixed pseudo-random order, so this is a sample, not the "
          f"first letters); `torchneuron scan` resumes with the rest\n")
    w(f"- models: {summary['models']} scanned, {summary['built'] + len(summary['random_forward'])} "
      f"built from a tiny random config (the rest are listed below with the reason); "
      f"{summary['built']} compared (not compared: {len(summary['random_forward'])} whose CPU "
      f"forward itself samples random numbers: {', '.join(summary['random_forward']) or 'none'})\n\n")
    w("Each model is built from its type's default config shrunk to a tiny one (hidden 32, 2 layers, "
      "4 heads, vocabulary 96, images 32x32; dropout off), with the same weights and inputs on the "
      "CPU and on the device, in its own process. Tolerances (against max|CPU| of each tensor): "
      "forward and compile 1e-4, gradients 1e-3, bfloat16 and autocast 6e-2 (autocast is compared "
      "with the float32 CPU run). `generate()` is greedy, up to 32 new tokens with the EOS stopping criterion on (the model's own EOS id where it lies in the tiny vocabulary, else id 2), compared token for token, stopping point included.\n\n")
    w(f"![scan]({png_rel})\n\n## Headline\n\n| measure | value |\n|---|---|\n")
    w(f"| forward + backward PASS natively (no fallback) | {h['fwd_bwd_native_pass']} / "
      f"{summary['built']} compared ({h['fwd_bwd_native_pass_pct']}%) |\n")
    w(f"| generate() token parity (causal and seq2seq LMs) | {h['generate_parity']} / "
      f"{h['generate_tested']} ({h['generate_parity_pct']}%) |\n")
    w(f"| torch.compile forward PASS | {h['compile_pass']} / {h['compile_tested']} "
      f"({h['compile_pass_pct']}%) |\n")
    w(f"| warm eager forward, device time / CPU time (median) | {h['warm_eager_vs_cpu_median']}x |\n")
    w(f"| first forward on the device, compiles included (median) | {h['first_forward_s_median']} s |\n\n")
    w("## Per stage\n\n| stage | " + " | ".join(ORDER) + " |\n|---|" + "---|" * len(ORDER) + "\n")
    for s, c in summary["per_stage"].items():
        if c:
            w(f"| {s} | " + " | ".join(str(c.get(st, 0)) for st in ORDER) + " |\n")
    w("\nStatuses: " + "; ".join(f"**{k}** {v}" for k, v in STATUSES.items()) + ".\n\n")
    w("## Per family\n\n| family | built | fwd+bwd native PASS | generate PASS | compile PASS | "
      "bf16 PASS | autocast PASS |\n|---|---|---|---|---|---|---|\n")
    for f, c in summary["by_family"].items():
        w(f"| {f} | {c.get('built', 0)} | {c.get('fwd_bwd_pass', 0)} | {c.get('generate:PASS', 0)} | "
          f"{c.get('compile:PASS', 0)} | {c.get('bf16:PASS', 0)} | {c.get('autocast:PASS', 0)} |\n")
    w("\n## Failures by root cause\n\n")
    if not summary["failures"]:
        w("None.\n")
    for g in summary["failures"]:
        w(f"- **{g['stage']}** `{g['key']}` ({len(g['models'])}): {', '.join(g['models'][:25])}"
          f"{' …' if len(g['models']) > 25 else ''}\n")
        w(f"  - cause: {g['cause'] or '(not yet explained)'}\n")
    w("\n## Model types that cannot be built from a tiny config\n\n")
    for reason, ms in summary["unbuildable"].items():
        w(f"- `{reason}` ({len(ms)}): {', '.join(ms[:30])}{' …' if len(ms) > 30 else ''}\n")
    return out.getvalue()


def meta_info(argv):
    import importlib.metadata as md

    vers = []
    for d in ("torchneuron", "torch", "jax", "transformers", "accelerate", "diffusers"):
        try:
            vers.append(f"{d} {md.version(d)}")
        except md.PackageNotFoundError:
            pass
    from .model_scan_models import all_models

    shown = [a for a in argv if a != "--report-only"]
    return {"command": "torchneuron scan " + " ".join(shlex.quote(a) for a in shown),
            "zoo": len(all_models()),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}, XLA:CPU",
            "versions": ", ".join(vers)}


# ---------------------------------------------------------------------------
# baseline and gate

BASELINE_HEADER = """\
# Expected non-passes of the CI sample of the model scan (torchneuron scan --gate).
# One line per model x stage that does not PASS; anything not listed is expected to PASS.
# tests/test_model_scan_gate.py fails when the gate disagrees with this file in either direction;
# regenerate with: torchneuron scan --gate --update-baseline
"""


def gate_rows(results, stages=GATE_STAGES):
    rows = {}
    for m, r in results.items():
        if r["build"]["status"] != "PASS":
            rows[(m, "build")] = r["build"]["status"]
            continue
        for s in stages:
            if _applies(s, r["build"]):
                st = r["stages"].get(s, {"status": "CRASH"})
                rows[(m, s)] = st["status"]
    return rows


def load_baseline(path):
    out = {}
    if os.path.exists(path):
        with open(path, newline="") as f:
            for rec in csv.DictReader(ln for ln in f if not ln.startswith("#")):
                out[(rec["model"], rec["stage"])] = {"status": rec["status"], "note": rec["note"]}
    return out


def write_baseline(path, rows, results):
    old = load_baseline(path)
    buf = io.StringIO()
    buf.write(BASELINE_HEADER)
    wr = csv.writer(buf, lineterminator="\n")
    wr.writerow(["model", "stage", "status", "note"])
    for (m, s), st in sorted(rows.items()):
        if st == "PASS":
            continue
        note = old.get((m, s), {}).get("note") if old.get((m, s), {}).get("status") == st else ""
        if not note:
            rec = results[m]["build"] if s == "build" else results[m]["stages"].get(s, {})
            note = rec.get("error") or rec.get("reason") or ", ".join(rec.get("fallback", [])) or \
                str(rec.get("worst", ""))[:200]
        wr.writerow([m, s, st, note])
    with open(path, "w", newline="") as f:
        f.write(buf.getvalue())


def compare_to_baseline(rows, baseline):
    problems = []
    for k, got in sorted(rows.items()):
        want = baseline.get(k, {"status": "PASS"})["status"]
        if got != want:
            kind = "REGRESSION" if want == "PASS" else ("NOW PASSES (update the baseline)"
                                                        if got == "PASS" else "CHANGED")
            problems.append(f"{kind}: {k[0]} {k[1]}: baseline {want}, now {got}")
    for k in baseline:
        if k[0] in {m for m, _ in rows} and k not in rows:
            problems.append(f"STALE: {k[0]} {k[1]}: listed in the baseline, not run")
    return problems


def run_gate(workers=1, timeout=400.0, progress=True, only=None):
    """The CI sample (the models matching `only`'s patterns, if given)."""
    models = GATE_MODELS
    if only:
        pats = [p.strip() for p in only.split(",") if p.strip()]
        models = [m for m in GATE_MODELS if any(fnmatch.fnmatchcase(m, p) for p in pats)]
        if not models:
            raise ValueError(f"{only!r} matches none of the gate's models ({', '.join(GATE_MODELS)})")
    tmp = tempfile.mkdtemp(prefix="tn-scan-gate-")
    return scan(models, GATE_STAGES, os.path.join(tmp, "gate.jsonl"), workers=workers,
                timeout=timeout, progress=progress, desc="scan gate")


# ---------------------------------------------------------------------------

def select(only=None, shard=None):
    from .model_scan_models import all_models

    models = all_models()
    if only:
        pats = [p.strip() for p in only.split(",") if p.strip()]
        models = [m for m in models if any(fnmatch.fnmatchcase(m, p) for p in pats)]
        models += [p for p in pats if p not in models and not any(c in p for c in "*?[")]
    if shard:
        i, n = (int(x) for x in shard.split("/"))
        if not 1 <= i <= n:
            raise SystemExit(f"--shard {shard}: expected i/n with 1 <= i <= n")
        models = models[i - 1::n]
    return models


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="torchneuron scan", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="comma-separated model types / patterns (diffusers:* for Diffusers)")
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, of {','.join(STAGES)}")
    p.add_argument("--shard", help="i/n: every n-th model, starting at the i-th")
    p.add_argument("--workers", type=int, default=2, help="models run at once (processes)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per model")
    p.add_argument("--results", default=DEFAULT_RESULTS, help="the JSONL results (resumed)")
    p.add_argument("--fresh", action="store_true", help="discard earlier results first")
    p.add_argument("--redo", action="store_true", help="run the selected models again (the "
                   "stages run replace their old results; other stages' results are kept)")
    p.add_argument("--report-only", action="store_true", help="rebuild the reports from the results")
    p.add_argument("--no-report", action="store_true", help="do not rebuild the reports")
    p.add_argument("--list", action="store_true", help="print the models that would run")
    p.add_argument("--gate", action="store_true", help="the CI sample against the baseline")
    p.add_argument("--update-baseline", action="store_true", help="with --gate: rewrite the baseline")
    p.add_argument("--baseline", default=DEFAULT_BASELINE)
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    stages = [s for s in a.stages.split(",") if s]
    bad = [s for s in stages if s not in STAGES]
    if bad:
        p.error(f"unknown stage(s) {bad}; expected some of {list(STAGES)}")
    if a.gate:
        if a.only and a.update_baseline:
            p.error("--update-baseline rewrites the whole baseline: run the whole gate (no --only)")
        try:
            results = run_gate(workers=a.workers if a.workers != 2 else 1,
                               timeout=max(a.timeout, 400.0), progress=not a.no_progress,
                               only=a.only)
        except ValueError as e:
            p.error(f"--gate --only: {e}")
        rows = gate_rows(results)
        if a.update_baseline:
            write_baseline(a.baseline, rows, results)
            print(f"baseline written: {a.baseline}")
            return 0
        problems = compare_to_baseline(rows, load_baseline(a.baseline))
        for pr in problems:
            print(pr)
        print(f"scan gate: {len(rows)} model x stage checks, {len(problems)} disagreements")
        return 1 if problems else 0
    models = select(a.only, a.shard)
    if a.list:
        print("\n".join(models))
        return 0
    if a.fresh and os.path.exists(a.results):
        os.remove(a.results)
    if not a.report_only:
        scan(models, stages, a.results, workers=a.workers, timeout=a.timeout,
             progress=not a.no_progress, redo=a.redo)
    if a.no_report:
        return 0
    results = load_results(a.results)
    meta = meta_info(argv)
    if (a.only or a.shard or a.redo or a.report_only) and os.path.exists(DEFAULT_JSON):
        # a partial run updates the whole scan's report: keep that scan's command and date
        with open(DEFAULT_JSON) as f:
            old = json.load(f).get("meta", {})
        if old.get("command"):
            ups = old.get("updates", [])
            if not a.report_only:
                ups = ups + [{"command": meta["command"], "date": meta["date"]}]
            meta.update(command=old["command"], date=old["date"], updates=ups)
    summary = write_reports(results, meta)
    print(json.dumps(summary["headline"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Dynamic shapes: what a new shape costs, on the neuron device against torch CPU.

    python bench/dynamic_shapes.py [--quick] [--full]

Each scenario runs in fresh processes, side by side in this one run, on torch CPU and on
the neuron device with an empty persistent cache ("cold"), then again on the neuron device
with the cache the cold run wrote ("warm disk").  Inside a process it also times the same
work again ("steady") and with new shapes.  Scenarios (a tiny GPT-2: n_layer=2, n_head=4,
n_embd=64, vocab 1000):

  gen_dynamic_N   generate(N new tokens), greedy, Hugging Face's dynamic cache; then the
                  same call again; then prompts of 10 other lengths (each a new length in
                  a warm process).  N = 16 and 64 (and 256 with --full).
  gen_static_N    the same with cache_implementation="static".
  gen_padded_N    the static cache with every prompt left-padded to a multiple of 16
                  (and its attention mask): the recipe of docs/huggingface.md.
  gen_compiled_N  the dynamic cache with the model's forward compiled
                  (torch.compile(model.forward, backend="neuron"): shape buckets),
                  against the CPU's eager generate(), which needs no compile.
  train           AdamW training: 20 steps at one sequence length, then 20 steps over 20
                  sequence lengths (its compile time against the one length's).
  eval            evaluation batches of 16 with a short last batch (5).
  compile         torch.compile(dynamic=True) and mark_dynamic over 20 sequence lengths
                  (backend "neuron" against inductor on the CPU): XLA compiles of the
                  model graph and Dynamo's recompiles.

For the neuron device each figure comes with where its time went: executables compiled,
XLA compile, jax lowering, jax tracing and PyTorch's meta kernels (from jax's monitoring
events and a timer on the meta step), the rest being the calls themselves and Python.
Writes reports/dynamic_shapes.json and reports/dynamic_shapes.png.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROMPTS = [5, 6, 7, 9, 10, 11, 12, 13, 14, 15]  # 10 lengths beside the first (8)
TRAIN_LENGTHS = list(range(8, 48, 2))  # 20 sequence lengths


# --- the child: one scenario in one fresh process ------------------------------------

class Probe:
    """Where the time went since the last `take()` (neuron only)."""

    def __init__(self, device):
        self.on = device != "cpu"
        self.d = {"compile_s": 0.0, "lower_s": 0.0, "trace_s": 0.0, "meta_s": 0.0,
                  "compiles": 0}
        if not self.on:
            return
        from jax import monitoring

        from torchneuron.dispatch import meta

        def on_duration(event, duration_secs=None, **kw):
            if event.endswith("backend_compile_duration"):
                self.d["compile_s"] += duration_secs
                self.d["compiles"] += 1
            elif event.endswith("jaxpr_to_mlir_module_duration"):
                self.d["lower_s"] += duration_secs
            elif event.endswith("jaxpr_trace_duration"):
                self.d["trace_s"] += duration_secs

        monitoring.register_event_duration_secs_listener(on_duration)
        run_meta = meta.run_meta

        def timed_meta(*a, **k):
            t = time.perf_counter()
            try:
                return run_meta(*a, **k)
            finally:
                self.d["meta_s"] += time.perf_counter() - t

        meta.run_meta = timed_meta

    def take(self):
        out = dict(self.d)
        if self.on:
            from torchneuron.dispatch import entry

            out["executables_built"] = sum(entry.cache_misses.values())
            entry.cache_misses.clear()
        for k in self.d:
            self.d[k] = 0 if k == "compiles" else 0.0
        return out


def _gpt2(torch, positions=512):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=1000,
                                      n_positions=positions))


def child(device, scenario):
    t0 = time.perf_counter()
    import torch

    if device != "cpu":
        import torchneuron  # noqa: F401
    probe = Probe(device)
    out = {"import_s": time.perf_counter() - t0}

    def sync():
        if device != "cpu":
            torch.neuron.synchronize()

    def timed(name, fn):
        probe.take()
        t = time.perf_counter()
        r = fn()
        sync()
        out[name] = {"s": time.perf_counter() - t, **probe.take()}
        return r

    if scenario.startswith("gen_"):
        _, cache, n = scenario.split("_")
        n = int(n)
        m = _gpt2(torch).eval().to(device)
        if cache == "compiled" and device != "cpu":
            m.forward = torch.compile(m.forward, backend="neuron")
        kw = {"cache_implementation": "static"} if cache in ("static", "padded") else {}
        g = torch.Generator().manual_seed(1)

        def gen(length):
            ids = torch.randint(0, 1000, (1, length), generator=g)
            if cache == "padded":  # the recipe: left-pad prompts to a multiple of 16
                pad = -length % 16
                kw["attention_mask"] = torch.cat(
                    [torch.zeros(1, pad, dtype=torch.long), torch.ones_like(ids)], 1).to(device)
                ids = torch.cat([torch.zeros(1, pad, dtype=torch.long), ids], 1)
            ids = ids.to(device)
            with torch.no_grad():
                return m.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=0,
                                  **kw)[0].tolist()

        out["tokens"] = timed("first", lambda: gen(8))
        timed("again", lambda: gen(8))
        lens = []
        for L in PROMPTS:
            timed("_p", lambda: gen(L))
            lens.append(out.pop("_p"))
        out["new_prompt_lengths"] = lens
        if cache == "compiled" and device != "cpu":
            from torchneuron import compile as tnc

            out["neuron_compile_stats"] = tnc.stats()
    elif scenario in ("train", "train1"):
        m = _gpt2(torch, 64).to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(2)

        def steps(lengths):
            loss = None
            for L in lengths:
                ids = torch.randint(0, 1000, (4, L), generator=g).to(device)
                opt.zero_grad()
                loss = m(ids, labels=ids).loss
                loss.backward()
                opt.step()
            return loss.item()

        out["loss_one"] = timed("one_length", lambda: steps([16] * 20))
        out["loss_many"] = timed("lengths_20", lambda: steps(TRAIN_LENGTHS))
        out["loss_many_again"] = timed("lengths_20_again", lambda: steps(TRAIN_LENGTHS))
    elif scenario == "eval":
        m = _gpt2(torch, 64).eval().to(device)
        g = torch.Generator().manual_seed(3)
        data = torch.randint(0, 1000, (165, 24), generator=g)

        def evaluate():
            tot = 0.0
            with torch.no_grad():
                for i in range(0, len(data), 16):
                    b = data[i:i + 16].to(device)
                    tot += m(b, labels=b).loss.item() * len(b)
            return tot / len(data)

        out["loss"] = timed("first_epoch", evaluate)
        timed("second_epoch", evaluate)
    elif scenario.startswith("compile"):
        import torch._dynamo as dynamo

        how = scenario.split("_", 1)[1]  # dynamic | mark
        m = _gpt2(torch, 64).eval().to(device)
        backend = "inductor" if device == "cpu" else "neuron"
        dynamo.reset()
        f = torch.compile(m, backend=backend, dynamic=True if how == "dynamic" else None)
        g = torch.Generator().manual_seed(4)
        logits = []

        def run(lengths):
            for L in lengths:
                ids = torch.randint(0, 1000, (2, L), generator=g)
                ids = ids.to(device)
                if how == "mark":
                    dynamo.mark_dynamic(ids, 1)
                with torch.no_grad():
                    logits.append(f(ids).logits[0, -1, :4].tolist())

        if device != "cpu":
            import torchneuron.compile as tc

            tc.reset_stats()
        timed("lengths_20", lambda: run(TRAIN_LENGTHS))
        timed("lengths_20_again", lambda: run(TRAIN_LENGTHS))
        from torch._dynamo.utils import counters

        out["dynamo_unique_graphs"] = counters["stats"]["unique_graphs"]
        if device != "cpu":
            st = tc.stats()
            out["neuron_compile_stats"] = {k: v for k, v in st.items()
                                           if isinstance(v, (int, float))}
        out["logits"] = logits[-1]
    if device != "cpu":
        from torchneuron.dispatch import store

        out["eager_store"] = {k: v for k, v in vars(store.STATS).items()}
        from torchneuron.dispatch import tiers

        out["tiers"] = tiers.stats()
    print(json.dumps(out))


# --- the parent -----------------------------------------------------------------------

def run_child(device, scenario, cache, extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHNEURON_COMPILE_CACHE")}
    env["TORCHNEURON_COMPILE_CACHE_DIR"] = cache or "off"
    env.update(extra or {})
    env.setdefault("TORCHNEURON_FALLBACK", "silent")
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", device, scenario],
                       env=env, capture_output=True, text=True, timeout=3600, cwd=ROOT)
    if p.returncode:
        raise RuntimeError(f"{scenario} on {device}:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def chart(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = []  # (label, cpu, cold, warm, breakdown of cold)
    for sc, r in results.items():
        for fig in ("first", "again", "one_length", "lengths_20", "first_epoch"):
            if fig in r["cpu"]:
                rows.append((f"{sc}\n{fig}", r["cpu"][fig]["s"], r["cold"][fig]["s"],
                             r["warm"][fig]["s"], r["cold"][fig]))
        if "new_prompt_lengths" in r["cpu"]:
            med = {k: sorted(x["s"] for x in r[k]["new_prompt_lengths"])[len(PROMPTS) // 2]
                   for k in ("cpu", "cold", "warm")}
            cold = r["cold"]["new_prompt_lengths"][len(PROMPTS) // 2]
            rows.append((f"{sc}\nnew prompt (median)", med["cpu"], med["cold"], med["warm"],
                         cold))
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(max(10, 0.9 * len(rows)), 9))
    xs = range(len(rows))
    w = 0.27
    for j, (name, idx) in enumerate((("torch CPU", 1), ("neuron, empty cache", 2),
                                     ("neuron, warm disk cache", 3))):
        ax.bar([x + (j - 1) * w for x in xs], [r[idx] for r in rows], w, label=name)
    ax.set_yscale("log")
    ax.set_ylabel("seconds")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r[0] for r in rows], fontsize=7)
    ax.set_title("dynamic shapes: tiny GPT-2, neuron (XLA:CPU) vs torch CPU")
    ax.legend(fontsize=8)
    bottom = [0.0] * len(rows)
    for part in ("compile_s", "lower_s", "trace_s", "meta_s"):
        vals = [r[4].get(part, 0.0) for r in rows]
        bx.bar(list(xs), vals, 0.6, bottom=bottom, label=part.removesuffix("_s"))
        bottom = [b + v for b, v in zip(bottom, vals)]
    bx.bar(list(xs), [max(r[2] - b, 0.0) for r, b in zip(rows, bottom)], 0.6, bottom=bottom,
           label="calls + Python", color="lightgrey")
    bx.set_ylabel("seconds (neuron, empty cache)")
    bx.set_xticks(list(xs))
    bx.set_xticklabels([r[0] for r in rows], fontsize=7)
    bx.set_title("where the neuron device's time went")
    bx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "reports"))
    ap.add_argument("--quick", action="store_true", help="generate(16) and eval only")
    ap.add_argument("--full", action="store_true", help="also generate(256)")
    ap.add_argument("--only", nargs="*", help="these scenarios only")
    ap.add_argument("--untiered", action="store_true",
                    help="also run each cold case with tiered compilation off")
    ap.add_argument("--unbucketed", action="store_true",
                    help="also run each cold compile_* case with shape buckets off")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return child(*a.child)
    scenarios = ["gen_dynamic_16", "gen_dynamic_64", "gen_static_16", "gen_static_64",
                 "gen_padded_64", "gen_compiled_64", "train", "eval", "compile_dynamic",
                 "compile_mark"]
    if a.full:
        scenarios[2:2] = ["gen_dynamic_256"]
    if a.quick:
        scenarios = ["gen_dynamic_16", "eval"]
    if a.only:
        scenarios = a.only
    results = {}
    failed = {}
    tmp = tempfile.mkdtemp(prefix="tn-dynamic-")
    t_all = time.perf_counter()
    try:
        for i, sc in enumerate(scenarios):
            cache = os.path.join(tmp, sc)
            results[sc] = {}
            modes = [("cpu", "cpu", None, None), ("cold", "neuron", cache, None),
                     ("warm", "neuron", cache, None)]
            if a.untiered:
                modes.append(("cold_untiered", "neuron", cache + "-untiered",
                              {"TORCHNEURON_TIERED": "0"}))
            if a.unbucketed and sc.startswith("compile"):
                modes.append(("cold_unbucketed", "neuron", cache + "-unbucketed",
                              {"TORCHNEURON_COMPILE_BUCKETS": "0"}))
            for mode, device, c, extra in modes:
                print(f"[{i + 1}/{len(scenarios)} {time.perf_counter() - t_all:6.0f}s] "
                      f"{sc} {mode} ...", file=sys.stderr, flush=True)
                try:
                    results[sc][mode] = run_child(device, sc, c, extra)
                except RuntimeError as e:  # reported, and the other scenarios still run
                    print(str(e)[-2000:], file=sys.stderr)
                    failed[f"{sc}.{mode}"] = str(e)[-2000:]
                    break
            if len(results[sc]) < len(modes):
                del results[sc]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    dates = {sc: time.strftime("%Y-%m-%d") for sc in results}
    report = os.path.join(a.out, "dynamic_shapes.json")
    if a.only and os.path.exists(report):  # the other scenarios stay as last measured
        with open(report) as f:
            old = json.load(f)
        for sc, r in old.get("results", {}).items():
            if sc not in results:
                results[sc] = r
                dates[sc] = old.get("dates", {}).get(sc, old.get("date"))
        scenarios = [sc for sc in old.get("scenarios", []) if sc in results] + \
            [sc for sc in scenarios if sc not in old.get("scenarios", [])]
        results = {sc: results[sc] for sc in scenarios}

    def row(name, cpu, cold, warm):
        print(f"{name:<44}{cpu['s']:>8.2f}{cold['s']:>9.2f}{warm['s']:>9.2f}"
              f"{cold['s'] / cpu['s']:>9.1f}x{cold.get('compiles', 0):>7}"
              f"{cold.get('compile_s', 0):>8.2f}{cold.get('lower_s', 0):>7.2f}"
              f"{cold.get('trace_s', 0):>7.2f}{cold.get('meta_s', 0):>7.2f}")

    print(f"{'figure (seconds)':<44}{'cpu':>8}{'cold':>9}{'warm':>9}{'cold/cpu':>10}"
          f"{'comp#':>7}{'comp':>8}{'lower':>7}{'trace':>7}{'meta':>7}")
    summary = {}
    for sc, r in results.items():
        for fig in ("first", "again", "one_length", "lengths_20", "lengths_20_again",
                    "first_epoch", "second_epoch"):
            if fig in r["cpu"]:
                row(f"{sc}.{fig}", r["cpu"][fig], r["cold"][fig], r["warm"][fig])
                summary[f"{sc}.{fig}"] = {k: r[k][fig]["s"] for k in ("cpu", "cold", "warm")}
        if "new_prompt_lengths" in r["cpu"]:
            for k in ("cpu", "cold", "warm"):
                ls = sorted(x["s"] for x in r[k]["new_prompt_lengths"])
                summary.setdefault(f"{sc}.new_prompt_median", {})[k] = ls[len(ls) // 2]
            mid = len(PROMPTS) // 2
            row(f"{sc}.new_prompt (median of {len(PROMPTS)})",
                *(sorted(r[k]["new_prompt_lengths"], key=lambda x: x["s"])[mid]
                  for k in ("cpu", "cold", "warm")))
        if "cold_untiered" in r:
            for fig in ("first", "lengths_20", "first_epoch"):
                if fig in r["cpu"]:
                    u, t = r["cold_untiered"][fig]["s"], r["cold"][fig]["s"]
                    summary[f"{sc}.{fig}.tiered_over_untiered"] = t / u
                    print(f"  {sc}.{fig}: cold, tiering off {u:.2f} s, on {t:.2f} s "
                          f"(on/off {t / u:.2f})")
        if "tokens" in r["cpu"]:
            same = r["cpu"]["tokens"] == r["cold"]["tokens"] == r["warm"]["tokens"]
            summary[f"{sc}.tokens_match_cpu"] = same
            print(f"  {sc}: tokens equal to the CPU's: {same}")
        if "one_length" in r["cpu"]:
            c1 = r["cold"]["one_length"]
            c20 = r["cold"]["lengths_20"]
            ratio = (c20["compile_s"] + c20["lower_s"] + c20["trace_s"]) / max(
                c1["compile_s"] + c1["lower_s"] + c1["trace_s"], 1e-9)
            summary["train.compile_20_lengths_over_one"] = ratio
            print(f"  train: trace+lower+compile over 20 lengths / one length: {ratio:.1f}x")
        if "dynamo_unique_graphs" in r["cpu"]:
            st = r["cold"].get("neuron_compile_stats", {})
            summary[f"{sc}.counts"] = {
                "xla_compiles_of_graphs": st.get("compilations"),
                "neuron_dynamo_graphs": r["cold"]["dynamo_unique_graphs"],
                "xla_recompilations": st.get("recompilations"),
                "inductor_dynamo_graphs": r["cpu"]["dynamo_unique_graphs"]}
            print(f"  {sc}: {summary[sc + '.counts']}")
            if "logits" in r["cpu"]:
                d = max(abs(x - y) for x, y in zip(r["cpu"]["logits"], r["cold"]["logits"]))
                summary[f"{sc}.logits_max_abs_diff_vs_cpu"] = d
                print(f"  {sc}: last logits against the CPU's: max abs diff {d:.2e}")
            if "cold_unbucketed" in r:
                u = r["cold_unbucketed"]
                us = u.get("neuron_compile_stats", {})
                summary[f"{sc}.unbucketed"] = {
                    "s": u["lengths_20"]["s"], "xla_compiles_of_graphs": us.get("compilations")}
                print(f"  {sc}: buckets off: {u['lengths_20']['s']:.2f} s, "
                      f"{us.get('compilations')} XLA compiles of the graph; buckets on: "
                      f"{r['cold']['lengths_20']['s']:.2f} s, {st.get('compilations')} "
                      f"(on/off {r['cold']['lengths_20']['s'] / u['lengths_20']['s']:.2f})")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "dynamic_shapes.json"), "w") as f:
        json.dump({"summary": summary, "results": results, "scenarios": scenarios,
                   "failed": failed, "dates": dates,
                   "machine": os.uname().nodename, "cpus": os.cpu_count(),
                   "date": time.strftime("%Y-%m-%d")}, f, indent=1)
    chart(results, os.path.join(a.out, "dynamic_shapes.png"))
    print(f"wrote {a.out}/dynamic_shapes.json and dynamic_shapes.png "
          f"({time.perf_counter() - t_all:.0f} s)")
    if failed:
        print(f"FAILED: {sorted(failed)}")
        return 1


if __name__ == "__main__":
    sys.exit(main())

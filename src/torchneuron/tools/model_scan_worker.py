"""One model of ``torchneuron scan``, in its own process:

    python -m torchneuron.tools.model_scan_worker MODEL --stages forward,backward,...

Builds the model on the CPU (tiny config, fixed seed), copies the same weights to
the neuron device and runs each stage on both, printing one line per stage:
``@@stage {"stage": ..., "status": ..., ...}`` (the driver keeps what was printed
if the process times out or dies).  Statuses: PASS, MISMATCH (max error and
tolerance), ERROR (first line), FALLBACK (the ops), SKIP (the stage does not apply
or the CPU itself fails), UNBUILDABLE (the model, with the reason).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import sys
import time
import traceback
import warnings

from .conformance_worker import _Fallbacks  # the ops that ran through the CPU fallback

STAGES = ("forward", "backward", "generate", "compile", "bf16", "autocast")
# (rtol, atol) against max|expected| of each tensor: err <= atol + rtol * max|expected|
TOL = {"forward": (1e-4, 1e-5), "backward": (1e-3, 1e-5), "compile": (1e-4, 1e-5),
       "bf16": (6e-2, 6e-2), "autocast": (6e-2, 6e-2)}
GEN_TOKENS = 32  # new tokens per generate(), past the ~16 where layout churn starts
EOS_STAND_IN = 2  # the EOS id for models whose own is unset or outside the tiny vocabulary


def _eos_id(model):
    """The model's own EOS token id when it lies in the (tiny) vocabulary, else a stand-in:
    generate() then runs its EOS stopping criterion every step, as users' runs do."""
    cfg = model.config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    vocab = getattr(text, "vocab_size", None) or getattr(cfg, "vocab_size", None)
    ids = getattr(model.generation_config, "eos_token_id", None)
    if ids is None:
        ids = getattr(text, "eos_token_id", None)
    ids = ids if isinstance(ids, (list, tuple)) else [ids]
    ok = [i for i in ids if isinstance(i, int) and vocab and 0 <= i < vocab]
    return ok[0] if ok else EOS_STAND_IN
RANDOM_REASON = ("the model's forward samples random numbers (two CPU runs with different seeds "
                 "differ); the device's generator is not the CPU's, so there is no reference")


def _emit(rec):
    print("@@stage " + json.dumps(rec), flush=True)


def _first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:300] if msg else ''}"


def _tensors(obj, prefix="out", seen=None):
    """(name, tensor) of every tensor in a model output (ModelOutput, tuples, dicts)."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif hasattr(obj, "to_tuple") and hasattr(obj, "keys"):
        for k in obj:
            yield from _tensors(obj[k], f"{prefix}.{k}")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{prefix}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}[{i}]")
    elif hasattr(obj, "sample") and hasattr(obj, "__dataclass_fields__"):
        yield from _tensors(vars(obj), prefix)


def compare(got, want, tol):
    """(ok, worst: {name, err, bound}) over matching tensors of two outputs."""
    import torch

    g, w = dict(_tensors(got)), dict(_tensors(want))
    if set(g) != set(w):
        return False, {"name": "structure", "err": f"outputs {sorted(set(g) ^ set(w))[:4]} differ"}
    rtol, atol = tol
    worst = {"name": None, "err": 0.0, "bound": None, "ratio": 0.0}
    for k, b in w.items():
        a = g[k].detach().cpu()
        b = b.detach()
        if a.shape != b.shape:
            return False, {"name": k, "err": f"shape {tuple(a.shape)} vs {tuple(b.shape)}"}
        if not (b.is_floating_point() or b.is_complex()):
            if not torch.equal(a.to(b.dtype), b):
                return False, {"name": k, "err": "integer values differ"}
            continue
        a, b = a.double(), b.double()
        na, nb = torch.isnan(a), torch.isnan(b)
        if not torch.equal(na, nb):
            return False, {"name": k, "err": "NaN positions differ"}
        same = (a == b) | na  # equal infinities (masked scores) compare equal
        a, b = a.masked_fill(same, 0), b.masked_fill(same, 0)
        if b.numel() == 0:
            continue
        err = (a - b).abs().max().item()
        bound = atol + rtol * b.abs().max().item()
        ratio = (float("inf") if math.isnan(err) or (err and not bound)  # inf - inf is NaN
                 else (err / bound if bound else 0.0))
        if ratio > worst["ratio"] or worst["name"] is None:
            worst = {"name": k, "err": err, "bound": bound, "ratio": ratio}
    return bool(worst["ratio"] <= 1.0), worst


def rounding_only(got, want, ref64, tol):
    """A float32 MISMATCH against the CPU is rounding when, against a float64 CPU run of the
    same program, the device is within the bound or at most twice as far as the CPU's own
    float32 result (cancellation makes some values' float32 rounding large)."""
    g, w, r = dict(_tensors(got)), dict(_tensors(want)), dict(_tensors(ref64))
    if not set(g) == set(w) <= set(r):
        return False
    rtol, atol = tol
    for k, ref in r.items():
        if k not in w or not ref.is_floating_point():
            continue
        ref = ref.detach().cpu().double()
        a, b = g[k].detach().cpu().double(), w[k].detach().double()
        if a.shape != ref.shape or _nan_positions_differ(a, ref):
            return False
        if not ref.numel():
            continue
        dev_err = (a - ref).masked_fill(a == ref, 0).nan_to_num(0.0).abs().max().item()
        cpu_err = (b - ref).masked_fill(b == ref, 0).nan_to_num(0.0).abs().max().item()
        scale = ref.masked_fill(ref.isinf(), 0).nan_to_num(0.0).abs().max().item()
        if dev_err > max(2 * cpu_err, atol + rtol * scale):
            return False
    return True


def _nan_positions_differ(a, b):
    import torch

    return not torch.equal(torch.isnan(a), torch.isnan(b))


def _double(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.double() if obj.is_floating_point() else obj
    if isinstance(obj, dict):
        return {k: _double(v) for k, v in obj.items()}
    return obj


@contextlib.contextmanager
def _float64_default():
    """The float64 judge runs with float64 as the default dtype, and `Tensor.float()` widens
    to float64 in it: models that make float tensors inside forward (torch.zeros(...),
    torch.arange(...).float()) stay in float64. Only the judge's own CPU run sees this."""
    import torch

    old, old_float = torch.get_default_dtype(), torch.Tensor.float
    torch.set_default_dtype(torch.float64)
    torch.Tensor.float = lambda self, *a, **k: self.to(torch.float64, *a, **k)
    try:
        yield
    finally:
        torch.set_default_dtype(old)
        torch.Tensor.float = old_float


def _to(obj, device, dtype=None):
    import torch

    if isinstance(obj, torch.Tensor):
        if dtype is not None and obj.is_floating_point():
            obj = obj.to(dtype)
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to(v, device, dtype) for k, v in obj.items()}
    return obj


def _loss(out):

    ts = [t for _, t in _tensors(out) if t.is_floating_point() and t.requires_grad]
    if not ts:
        raise RuntimeError("no differentiable output")
    return sum((t.float() ** 2).mean() for t in ts)


def _seed(seed):
    import torch

    torch.manual_seed(seed)  # every device's generator too


def _sync():
    import torch

    torch.neuron.synchronize()


def _status(ok, window, rec, worst=None):
    if worst is not None:
        rec.update(worst={k: (round(v, 8) if isinstance(v, float) else v) for k, v in worst.items()})
    if not ok:
        rec["status"] = "MISMATCH"
    elif window.fallback:
        rec["status"], rec["fallback"] = "FALLBACK", window.fallback
    else:
        rec["status"] = "PASS"
    return rec


def _timed(fn, n=3):
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def run(name, stages, seed=0):
    import torch

    import torchneuron
    from torchneuron.tools import model_scan_models as zoo

    torchneuron.set_fallback_policy("silent")
    dev = torch.device("neuron")
    inputs, cpu_out, reasons = None, None, []
    for variant in zoo.VARIANTS:
        try:
            kind, model, cands = zoo.build(name, seed, variant)
        except zoo.BuildError as e:
            reasons.append(str(e))
            continue
        # the device copy is taken before any CPU run: some models cache tensors as plain
        # attributes in their first forward, which `.to()` does not move (as with CUDA)
        pristine = copy.deepcopy(model)
        if kind == "pipeline":
            inputs = cands[0]
            break
        cpu_err = None
        for c in cands:
            try:
                with torch.no_grad():
                    _seed(seed)  # the same random stream on both sides (dropout-free models still sample)
                    cpu_out = model(**c)
                inputs = c
                break
            except Exception as e:  # noqa: BLE001
                cpu_err = cpu_err or _first_line(e)
        if inputs is not None:
            break
        reasons.append(f"CPU forward: {cpu_err}")
    if inputs is None:
        # the tiny variant's reason first (the milder one is a second try)
        _emit({"stage": "build", "status": "UNBUILDABLE", "reason": reasons[0],
               "reasons": reasons})
        return
    nparams = sum(p.numel() for p in model.parameters())
    random_forward = False
    if kind != "pipeline":
        _seed(seed + 1)
        with torch.no_grad():
            again = model(**inputs)
        random_forward = not compare(again, cpu_out, (0.0, 0.0))[0]
    _emit({"stage": "build", "status": "PASS", "kind": kind, "cls": type(model).__name__,
           "params": nparams, "inputs": sorted(inputs), "variant": variant,
           "random_forward": random_forward})
    if random_forward:
        # the device's generator is not the CPU's (nor is CUDA's): no value to compare with
        for stage in stages:
            if stage != "generate" or kind in ("causal", "seq2seq"):
                _emit({"stage": stage, "status": "SKIP", "reason": RANDOM_REASON})
        return
    dmodel = pristine.to(dev)
    wide = {}

    def judged(rec, got, tol):
        """rounding_only against the float64 CPU forward (run once); a model that casts to
        float32 itself has no float64 run: the mismatch stands, with the reason."""
        if "out" not in wide:
            try:
                with torch.no_grad(), _float64_default():
                    _seed(seed)
                    wide["out"] = copy.deepcopy(model).double()(**_double(inputs))
            except Exception as e:  # noqa: BLE001
                wide["out"], wide["err"] = None, f"no float64 judge: {_first_line(e)}"
        if wide["out"] is None:
            rec["judge"] = wide["err"]
            return False
        rec["rounding"] = rounding_only(got, cpu_out, wide["out"], tol)
        return rec["rounding"]
    dinputs = _to(inputs, dev)

    for stage in stages:
        rec = {"stage": stage}
        try:
            if kind == "pipeline":
                if stage != "forward":
                    continue
                with _Fallbacks() as w:
                    t0 = time.perf_counter()
                    _seed(seed)  # the same random stream on both sides (dropout-free models still sample)
                    got = zoo.ddpm_loop(dmodel, dev, seed=seed).cpu()
                    rec["first_s"] = round(time.perf_counter() - t0, 3)
                _seed(seed)  # the same random stream on both sides (dropout-free models still sample)
                want = zoo.ddpm_loop(model, "cpu", seed=seed)
                ok, worst = compare(got, want, TOL["forward"])
                _emit(_status(ok, w, rec, worst))
                continue
            if stage == "forward":
                with torch.no_grad(), _Fallbacks() as w:
                    t0 = time.perf_counter()
                    _seed(seed)  # the same random stream on both sides (dropout-free models still sample)
                    got = dmodel(**dinputs)
                    _sync()
                    rec["first_s"] = round(time.perf_counter() - t0, 3)
                    ok, worst = compare(got, cpu_out, TOL["forward"])
                if not ok:
                    ok = judged(rec, got, TOL["forward"])
                with torch.no_grad():
                    rec["warm_s"] = round(_timed(lambda: (dmodel(**dinputs), _sync())), 5)
                    rec["cpu_s"] = round(_timed(lambda: model(**inputs)), 5)
                _emit(_status(ok, w, rec, worst))
            elif stage == "backward":
                model.zero_grad(set_to_none=True)
                try:
                    _seed(seed)  # the same random stream on both sides (dropout-free models still sample)
                    _loss(model(**inputs)).backward()
                except Exception as e:  # noqa: BLE001
                    _emit(dict(rec, status="SKIP", reason=f"CPU backward: {_first_line(e)}"))
                    continue
                with _Fallbacks() as w:
                    dmodel.zero_grad(set_to_none=True)
                    _seed(seed)  # the same random stream on both sides (dropout-free models still sample)
                    _loss(dmodel(**dinputs)).backward()
                    want = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
                    gotg = {k: p.grad for k, p in dmodel.named_parameters() if p.grad is not None}
                    ok, worst = compare(gotg, want, TOL["backward"])
                if not ok:
                    m64 = copy.deepcopy(model).double()
                    m64.zero_grad(set_to_none=True)
                    _seed(seed)  # the same random stream on both sides (dropout-free models still sample)
                    try:
                        with _float64_default():
                            _loss(m64(**_double(inputs))).backward()
                    except Exception as e:  # noqa: BLE001  (the model casts to float32 itself)
                        # no float64 run: the second judge is the CPU's own float32 without
                        # oneDNN (its native kernels); agreeing with it is not a device defect
                        rec["judge"] = f"no float64 judge: {_first_line(e)}"
                        mn = copy.deepcopy(model)
                        mn.zero_grad(set_to_none=True)
                        with torch.backends.mkldnn.flags(enabled=False):
                            _seed(seed)
                            _loss(mn(**inputs)).backward()
                        native = {k: p.grad for k, p in mn.named_parameters()
                                  if p.grad is not None}
                        ok, _ = compare(gotg, native, TOL["backward"])
                        if ok:
                            rec["judge"] = "the CPU without oneDNN (no float64 judge)"
                    else:
                        ref = {k: p.grad for k, p in m64.named_parameters() if p.grad is not None}
                        ok = rec["rounding"] = rounding_only(gotg, want, ref, TOL["backward"])
                rec["grads"] = len(want)
                _emit(_status(ok, w, rec, worst))
            elif stage == "generate":
                if kind not in ("causal", "seq2seq") or not hasattr(model, "generate"):
                    continue
                main = getattr(model, "main_input_name", "input_ids")
                gin = {main: inputs[main]}
                eos = _eos_id(model)
                gkw = dict(max_new_tokens=GEN_TOKENS, do_sample=False, num_beams=1,
                           pad_token_id=0, eos_token_id=eos)
                rec["eos"] = eos
                if kind == "seq2seq" and getattr(model.generation_config, "decoder_start_token_id",
                                                 None) is None:
                    gkw["decoder_start_token_id"] = 0  # tiny configs have no tokenizer's ids
                try:
                    _seed(seed)  # the same random stream on both sides (dropout-free models still sample)
                    want = model.generate(**gin, **gkw)
                except Exception as e:  # noqa: BLE001
                    _emit(dict(rec, status="SKIP", reason=f"CPU generate: {_first_line(e)}"))
                    continue
                with torch.no_grad(), _Fallbacks() as w:
                    t0 = time.perf_counter()
                    _seed(seed)  # the same random stream on both sides (dropout-free models still sample)
                    got = dmodel.generate(**_to(gin, dev), **gkw).cpu()
                    rec["first_s"] = round(time.perf_counter() - t0, 3)
                    ok = got.shape == want.shape and torch.equal(got, want)
                rec["new_tokens"] = int(want.shape[-1] - (1 if kind == "seq2seq"
                                                          else gin[main].shape[-1]))
                if not ok:
                    rec["worst"] = {"name": "tokens", "err": "tokens differ",
                                    "got": got.tolist()[0][-GEN_TOKENS:],
                                    "want": want.tolist()[0][-GEN_TOKENS:]}
                _emit(_status(ok, w, rec))
            elif stage == "compile":
                import torch._dynamo as dynamo
                from torch._dynamo.utils import counters

                dynamo.reset()
                counters.clear()
                cm = torch.compile(dmodel, backend="neuron")
                with torch.no_grad(), _Fallbacks() as w:
                    _seed(seed)  # the same random stream on both sides (dropout-free models still sample)
                    got = cm(**dinputs)
                    ok, worst = compare(got, cpu_out, TOL["compile"])
                if not ok:
                    ok = judged(rec, got, TOL["compile"])
                rec["graph_breaks"] = sum(counters["graph_break"].values())
                rec["graphs"] = counters["stats"].get("unique_graphs", 0)
                _emit(_status(ok, w, rec, worst))
                dynamo.reset()
            elif stage == "bf16":
                cb = copy.deepcopy(model).to(torch.bfloat16)
                binp = _to(inputs, "cpu", torch.bfloat16)
                try:
                    with torch.no_grad():
                        _seed(seed)  # the same random stream on both sides (dropout-free models still sample)
                        want = cb(**binp)
                except Exception as e:  # noqa: BLE001
                    _emit(dict(rec, status="SKIP", reason=f"CPU bf16: {_first_line(e)}"))
                    continue
                db = copy.deepcopy(cb).to(dev)
                with torch.no_grad(), _Fallbacks() as w:
                    _seed(seed)  # the same random stream on both sides (dropout-free models still sample)
                    got = db(**_to(binp, dev))
                    ok, worst = compare(got, want, TOL["bf16"])
                if not ok:  # bf16 rounding: judged against the float32 CPU run
                    ok = rec["rounding"] = rounding_only(got, want, cpu_out, TOL["bf16"])
                _emit(_status(ok, w, rec, worst))
                del db, cb
            elif stage == "autocast":
                with torch.no_grad(), _Fallbacks() as w, torch.autocast("neuron", dtype=torch.bfloat16):
                    _seed(seed)  # the same random stream on both sides (dropout-free models still sample)
                    got = dmodel(**dinputs)
                ok, worst = compare(got, cpu_out, TOL["autocast"])
                if not ok:
                    # as far from float32 as the CPU's own bf16 autocast is: rounding
                    try:
                        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                            _seed(seed)
                            cpu_ac = model(**inputs)
                        ok = rec["rounding"] = rounding_only(got, cpu_ac, cpu_out, TOL["autocast"])
                    except Exception:  # noqa: BLE001  (CPU autocast lacks an op: no judge)
                        pass
                _emit(_status(ok, w, rec, worst))
        except Exception as e:  # noqa: BLE001
            rec.update(status="ERROR", error=_first_line(e), where=_where(e))
            _emit(rec)


def _where(e):
    """The innermost frame in torch/torchneuron/transformers (for grouping errors)."""
    tb = traceback.extract_tb(e.__traceback__)
    for fr in reversed(tb):
        if "torchneuron" in fr.filename or "/torch/" in fr.filename:
            return f"{os.path.basename(fr.filename)}:{fr.lineno} {fr.name}"
    return f"{os.path.basename(tb[-1].filename)}:{tb[-1].lineno} {tb[-1].name}" if tb else ""


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--stages", default=",".join(STAGES))
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import logging

    logging.disable(logging.WARNING)
    with contextlib.redirect_stderr(sys.stderr):
        run(a.model, [s for s in a.stages.split(",") if s], a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())

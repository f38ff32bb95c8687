"""On a GPU host: installing torchneuron leaves CUDA programs and torch.accelerator alone.

    python scripts/gpu_install_checks.py

Needs a CUDA build of torch and a visible GPU (the lent GPU machine; on this project's
CPU machines tests/test_install_effects.py simulates it). Runs one probe program in fresh
processes three ways and compares:

  * without   ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` (torch as if torchneuron were absent);
  * auto      the default ``TORCHNEURON_AUTOLOAD=auto``: must equal ``without``;
  * opted in  ``TORCHNEURON_AUTOLOAD=1`` (printed, not compared: it makes neuron the
              accelerator on purpose).

The probe records torch.accelerator, the PrivateUse1 name, whether torchneuron/jax were
imported, init_process_group()'s default backends, pinned memory (page-locked by CUDA's
allocator) and a non_blocking copy, a CUDA matmul, and Hugging Face's default device
(transformers/accelerate, when installed). Exit status 1 on any difference.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

PROBE = r"""
import datetime, json, os, sys, tempfile
import torch
import torch.distributed as dist
out = {}
out["privateuse1"] = torch._C._get_privateuse1_backend_name()
out["accelerator"] = str(torch.accelerator.current_accelerator())
out["imported"] = sorted(m for m in ("torchneuron", "jax") if m in sys.modules)
out["cuda"] = torch.cuda.is_available()
x = torch.empty(1 << 20).pin_memory()
out["pinned"] = x.is_pinned()
# CUDA's caching host allocator owns page-locked blocks: cudaHostGetFlags succeeds on them
flags = torch.cuda.cudart().cudaHostGetFlags(x.data_ptr()) if hasattr(
    torch.cuda.cudart(), "cudaHostGetFlags") else None
out["page_locked"] = None if flags is None else int(flags[0]) == 0
y = x.to("cuda", non_blocking=True)
torch.cuda.synchronize()
out["copy"] = bool(torch.equal(y.cpu(), x))
a = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
out["matmul"] = float((a.cuda() @ a.cuda()).sum().cpu())
out["default_backends"] = dict(dist.Backend.default_device_backend_map)
store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "s"), 1)
dist.init_process_group(store=store, rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=60))
out["pg_backend"] = dist.get_backend()
dist.destroy_process_group()
try:
    from accelerate import PartialState
    out["accelerate"] = str(PartialState().device)
except Exception as e:
    out["accelerate"] = f"unavailable: {type(e).__name__}"
try:
    from transformers import TrainingArguments
    out["transformers"] = str(TrainingArguments(output_dir=tempfile.mkdtemp()).device)
except Exception as e:
    out["transformers"] = f"unavailable: {type(e).__name__}"
print(json.dumps(out))
"""

CASES = {"without": {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
         "auto": {"TORCHNEURON_AUTOLOAD": "auto"},
         "opted in": {"TORCHNEURON_AUTOLOAD": "1"}}


def probe(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TORCHNEURON_") and k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    env.update(extra)
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env,
                       timeout=600, cwd=tempfile.gettempdir())
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-2000:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu_install_checks: no CUDA device visible to torch: nothing to check here "
              "(tests/test_install_effects.py simulates a GPU host)")
        return 0
    got = {name: probe(env) for name, env in CASES.items()}
    print(json.dumps(got, indent=1))
    base, auto = got["without"], got["auto"]
    diff = {k: (base.get(k), auto.get(k)) for k in set(base) | set(auto)
            if base.get(k) != auto.get(k)}
    if diff:
        print("DIFFERENT with torchneuron installed (autoload auto):")
        for k, (b, a) in sorted(diff.items()):
            print(f"  {k}: without {b!r}, with {a!r}")
        return 1
    print("OK: with torchneuron installed, a CUDA program sees exactly what it sees without")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Hugging Face on neuron, with the real transformers / accelerate / diffusers packages:
they pick the device by themselves (torchneuron answers the module name ``torch_neuronx`` they
look for), and Trainer trains tiny models exactly as on the CPU.

Each run is its own process (Accelerate keeps process-wide state); models are built
from tiny configs (nothing is downloaded)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINER = os.path.join(ROOT, "tests", "programs", "hf_trainer.py")
ENV = dict(os.environ, TRANSFORMERS_VERBOSITY="error", HF_HUB_OFFLINE="1",
           TOKENIZERS_PARALLELISM="false")


def _json_out(args, timeout=600, env=None):
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                       timeout=timeout, env=env or ENV)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _py(code, env=None):
    return _json_out(["-c", textwrap.dedent(code)], env=env)


def test_libraries_pick_the_device():
    got = _py("""
        import json, tempfile, torch
        from transformers import TrainingArguments
        from transformers.utils.import_utils import (is_torch_bf16_gpu_available,
                                                     is_torch_neuron_available)
        from accelerate import Accelerator
        from accelerate.utils import is_neuron_available
        from diffusers.utils.torch_utils import get_device
        d = tempfile.mkdtemp()
        import torch_neuronx
        print(json.dumps({
            "transformers": is_torch_neuron_available(), "accelerate": is_neuron_available(),
            "args": str(TrainingArguments(output_dir=d).device),
            "compile": TrainingArguments(output_dir=d, torch_compile=True).torch_compile_backend,
            "accelerator": str(Accelerator().device), "diffusers": get_device(),
            "bf16": is_torch_bf16_gpu_available(), "shim": torch_neuronx.TORCHNEURON,
        }))
    """)
    assert got == {"transformers": True, "accelerate": True, "args": "neuron:0",
                   "compile": "neuron", "accelerator": "neuron", "diffusers": "neuron",
                   "bf16": True, "shim": True}


def test_use_cpu_still_means_cpu(tmp_path):
    got = _json_out([TRAINER, "gpt2", str(tmp_path), "--cpu", "--steps", "2"])
    assert got["device"] == "cpu" and got["param_device"] == "cpu"


def _losses_close(a, b, rel):
    assert len(a) == len(b) and a
    for x, y in zip(a, b):
        assert abs(x - y) <= rel * max(1.0, abs(y)), (a, b)


@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_trainer_defaults_train_like_cpu(model, tmp_path):
    cpu = _json_out([TRAINER, model, str(tmp_path / "cpu"), "--cpu"])
    dev = _json_out([TRAINER, model, str(tmp_path / "dev")])
    assert dev["device"] == "neuron:0" and dev["param_device"] == "neuron:0"
    assert dev["pin_memory"]  # Trainer's default pins the batches: it must work
    assert dev["tied"] == cpu["tied"] == (model == "gpt2")
    _losses_close(dev["losses"], cpu["losses"], 1e-5)
    for k, v in cpu["params"].items():
        assert dev["params"][k] == pytest.approx(v, rel=1e-4, abs=1e-5), k


def test_trainer_torch_compile(tmp_path):
    cpu = _json_out([TRAINER, "gpt2", str(tmp_path / "cpu"), "--cpu"])
    dev = _json_out([TRAINER, "gpt2", str(tmp_path / "dev"), "--compile"])
    assert dev["backend"] == "neuron"
    _losses_close(dev["losses"], cpu["losses"], 1e-4)


def test_trainer_bf16(tmp_path):
    fp32 = _json_out([TRAINER, "llama", str(tmp_path / "fp32"), "--cpu"])
    dev = _json_out([TRAINER, "llama", str(tmp_path / "bf16"), "--bf16"])
    assert dev["device"] == "neuron:0"
    # bf16 autocast: the same curve to bf16 precision
    _losses_close(dev["losses"], fp32["losses"], 3e-2)


def test_trainer_checkpoint_and_resume(tmp_path):
    # the uninterrupted reference runs on the CPU: the resumed device run must equal it
    whole = _json_out([TRAINER, "gpt2", str(tmp_path / "whole"), "--steps", "6", "--cpu"])
    _json_out([TRAINER, "gpt2", str(tmp_path / "part"), "--steps", "6", "--save-steps", "3"])
    ckpt = tmp_path / "part" / "checkpoint-3"
    assert (ckpt / "model.safetensors").exists() and (ckpt / "optimizer.pt").exists()
    resumed = _json_out([TRAINER, "gpt2", str(tmp_path / "resumed"), "--steps", "6",
                         "--resume", str(ckpt)])
    # the resumed run's history holds the checkpoint's three logged losses, then its own
    _losses_close(resumed["losses"], whole["losses"], 1e-5)
    for k, v in whole["params"].items():
        assert resumed["params"][k] == pytest.approx(v, rel=1e-4, abs=1e-5), k


def test_aws_package_wins_and_autoload_steps_aside(tmp_path):
    """AWS's torch_neuronx importable (a stand-in package on the path): torchneuron ships
    no file under that name, so AWS's module is the one imported, and ``import torch``
    leaves PrivateUse1 to it instead of registering ``neuron`` first."""
    pkg = tmp_path / "torch_neuronx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("AWS = True\n")
    env = dict(ENV, PYTHONPATH=str(tmp_path) + os.pathsep + ENV.get("PYTHONPATH", ""))
    got = _py("""
        import json, sys, torch
        registered = torch._C._get_privateuse1_backend_name()
        import torch_neuronx
        print(json.dumps({"backend": registered, "aws": getattr(torch_neuronx, "AWS", False),
                          "ours": hasattr(torch_neuronx, "TORCHNEURON"),
                          "loaded": "torchneuron" in sys.modules}))
    """, env=env)
    assert got == {"backend": "privateuseone", "aws": True, "ours": False, "loaded": False}

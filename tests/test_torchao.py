"""TorchAO (the registry's package) on the neuron device, each recipe against the same
recipe on the CPU, with the fallback policy "error" (so every op of the quantized
model ran natively).

Inference recipes (`quantize_`): int8 weight-only, int8 dynamic activation + int8
weight, float8 weight-only: the same int8/fp8 codes and scales as on the CPU and the
same outputs bit for bit (a correctly rounded division by a broadcast divisor makes the
scales equal).  Training: `convert_to_float8_training` (tensor-wise and row-wise
recipes, eager and compiled with backend "neuron") through native `_scaled_mm`.
Float8 dynamic activation + float8 weight refuses both devices in torchao itself (it
asks for CUDA capability >= 8.9 or XPU): docs/limitations.md.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

from helpers import DEV, native_only

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torchao's CUDA-only extensions do not load here
    # (requirements-ci.txt installs it; the torch 2.11 venv does not)
    pytest.importorskip("torchao", reason="torchao is not installed")
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from torchao.quantization import (Float8WeightOnlyConfig,
                                      Int8DynamicActivationInt8WeightConfig,
                                      Int8WeightOnlyConfig, quantize_)

from torchneuron.models.gpt import GPT, GPTConfig

RECIPES = {
    "int8_weight_only": Int8WeightOnlyConfig,
    "int8_dynamic_act_int8_weight": Int8DynamicActivationInt8WeightConfig,
    "float8_weight_only": Float8WeightOnlyConfig,
}


def _mlp(dtype):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 32)).to(dtype)


def _quantized_tensors(w):
    names, _ = w.__tensor_flatten__()
    return {n: getattr(w, n) for n in names}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_quantize_mlp(recipe, dtype):
    model = _mlp(dtype)
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(1)).to(dtype)
    cpu, dev = copy.deepcopy(model), copy.deepcopy(model).to(DEV)
    quantize_(cpu, RECIPES[recipe]())
    with native_only():
        quantize_(dev, RECIPES[recipe]())
        actual = dev(x.to(DEV))
    expected = cpu(x)
    # the same quantized weights (codes, scales, zero points) ...
    for i in (0, 2):
        exp_w, act_w = _quantized_tensors(cpu[i].weight), _quantized_tensors(dev[i].weight)
        assert type(dev[i].weight) is type(cpu[i].weight)
        assert exp_w.keys() == act_w.keys()
        for name, e in exp_w.items():
            a = act_w[name]
            assert a.device.type == "neuron", name
            assert a.dtype == e.dtype and a.shape == e.shape, name
            assert torch.equal(a.cpu().view(torch.uint8) if e.dtype.itemsize == 1 else a.cpu(),
                               e.view(torch.uint8) if e.dtype.itemsize == 1 else e), name
    # ... and the same outputs: bit for bit, except float32 ones, whose CPU product is MKL's
    # sgemm with a summation order that follows the CPU's vector width (bit-equal on AVX2
    # machines, within 1e-6 relative on AVX-512 ones)
    assert actual.device.type == "neuron" and actual.dtype == expected.dtype
    if expected.dtype == torch.float32:
        torch.testing.assert_close(actual.cpu(), expected, rtol=1e-6,
                                   atol=1e-6 * expected.abs().max().item())
    else:
        assert torch.equal(actual.cpu(), expected)


def test_int8_weight_only_gpt_generates_cpu_tokens():
    """A small GPT quantized int8 weight-only, greedy decoding: the CPU's tokens."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_embd=64, n_head=4, block_size=32, vocab_size=96))
    model.eval()
    cpu, dev = copy.deepcopy(model), copy.deepcopy(model).to(DEV)
    quantize_(cpu, Int8WeightOnlyConfig())
    prompt = torch.randint(0, 96, (2, 5), generator=torch.Generator().manual_seed(3))

    def greedy(m, idx, steps=8):
        with torch.no_grad():
            for _ in range(steps):
                nxt = m(idx)[:, -1].argmax(-1, keepdim=True)
                idx = torch.cat([idx, nxt], dim=1)
        return idx

    with native_only():
        quantize_(dev, Int8WeightOnlyConfig())
        tokens = greedy(dev, prompt.to(DEV)).cpu()
    assert torch.equal(tokens, greedy(cpu, prompt))


def _train_float8(recipe, device, compiled, steps=3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 32)).to(device)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 64, generator=g).to(device), torch.randn(32, 32, generator=g).to(device)
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe))
    assert type(model[0]).__name__ == "Float8Linear"
    fwd = model
    if compiled:
        torch._dynamo.reset()
        fwd = torch.compile(model, backend="neuron" if device != "cpu" else "aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(fwd(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("recipe,compiled,tol", [
    ("tensorwise", False, 1e-7),
    ("tensorwise", True, 1e-7),
    # row-wise: an fp8 code of a gradient can round the other way after a float32
    # reduction in another order (4.6e-5 in the weights after 3 steps, measured)
    ("rowwise", False, 2e-4),
])
def test_float8_training(recipe, compiled, tol):
    exp_losses, exp_params = _train_float8(recipe, "cpu", compiled)
    with native_only():
        losses, params = _train_float8(recipe, DEV, compiled)
    assert losses == pytest.approx(exp_losses, rel=1e-5, abs=1e-6)
    for a, e in zip(params, exp_params):
        torch.testing.assert_close(a, e, atol=tol, rtol=0)

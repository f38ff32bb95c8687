"""Pinned host memory: with torchneuron installed, `neuron` is the accelerator, so
PyTorch pins CPU tensors through its hooks (as it does with CUDA).  Pinning must
work (native hooks, hostmem.cpp), copies to the device must read from it, and a
program that never touches the device must compute exactly what it computes
without torchneuron."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from helpers import DEV, assert_same, native_only
from torchneuron import native

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code, env_extra=None, timeout=240):
    env = dict(os.environ)
    env.update(env_extra or {})
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=env, timeout=timeout, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_native_hooks_are_in_use():
    assert native.active(), native.error()


@pytest.mark.parametrize("make", [
    lambda: torch.randn(3, 5).pin_memory(),
    lambda: torch.empty(7, pin_memory=True).fill_(2.5),
    lambda: torch.zeros(2, 3, dtype=torch.float64, pin_memory=True),
    lambda: torch.randn(4, pin_memory=True),
    lambda: torch.tensor([1, 2, 3], pin_memory=True),
    lambda: torch.randn(3, 4).t().pin_memory(),  # a non-contiguous source keeps its strides
], ids=["pin_memory", "empty", "zeros", "randn", "tensor", "strided"])
def test_pinned_tensors(make):
    t = make()
    assert t.device.type == "cpu" and t.is_pinned()
    assert t[1:].is_pinned()  # a view into the pinned block
    assert t.pin_memory() is t  # already pinned: the same tensor, as on CUDA
    assert not t.clone().is_pinned()
    d = t.to(DEV, non_blocking=True)
    assert_same(d, t)
    into = torch.empty(t.shape, dtype=t.dtype, device=DEV)
    into.copy_(t, non_blocking=True)
    torch.neuron.synchronize()
    assert_same(into, t)


def test_pin_copies_values_and_strides():
    src = torch.randn(4, 6)[:, ::2]
    p = src.pin_memory()
    assert p.data_ptr() != src.data_ptr() and not src.is_pinned()
    assert p.stride() == src.stride() or p.is_contiguous()
    assert torch.equal(p, src)


def test_device_tensors_are_not_pinned_and_cannot_be():
    d = torch.ones(2, device=DEV)
    assert not d.is_pinned()
    with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
        d.pin_memory()


def test_pinned_blocks_are_freed():
    gc.collect()
    n0, b0 = native.host_stats()
    ts = [torch.empty(1000, pin_memory=True) for _ in range(5)]
    n1, b1 = native.host_stats()
    assert n1 - n0 == 5 and b1 - b0 == 5 * 4000
    del ts
    gc.collect()
    assert native.host_stats() == (n0, b0)


def _batches():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 10, generator=g)
    y = (x.sum(1) > 0).long()
    return TensorDataset(x, y)


def _train(device, pin):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(_batches(), batch_size=16, shuffle=False, pin_memory=pin)
    losses, pinned = [], []
    for _ in range(2):
        for x, y in loader:
            pinned.append(x.is_pinned() and y.is_pinned())
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, pinned


def test_dataloader_pin_memory_feeds_neuron_training():
    ref, _ = _train("cpu", pin=False)
    with native_only():
        losses, pinned = _train(DEV, pin=True)
    assert all(pinned) and len(pinned) == 8
    assert losses == pytest.approx(ref, rel=1e-5, abs=1e-6)


_CPU_PROGRAM = """
    import json, torch
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(12, 3), torch.arange(12))
    out = []
    for x, y in DataLoader(ds, batch_size=5, shuffle=True, pin_memory=True):
        out.append([x.sum().item(), y.tolist()])
    lin = torch.nn.Linear(3, 1)
    out.append(lin(torch.randn(2, 3)).tolist())
    print(json.dumps(out))
"""


def test_cpu_only_program_unchanged_by_install():
    """The same CPU program with and without torchneuron: same numbers (without it,
    DataLoader warns that no accelerator exists and does not pin)."""
    with_tn = _run(_CPU_PROGRAM)
    without = _run(_CPU_PROGRAM, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert json.loads(with_tn) == json.loads(without)


def test_python_pinning_without_native_hooks():
    out = _run("""
        import json, torch
        from torchneuron import native
        p = torch.randn(3).pin_memory()
        res = {"active": native.active(), "pinned": p.is_pinned(), "view": p[1:].is_pinned(),
               "plain": torch.randn(2).is_pinned(),
               "to": torch.equal(p.to("neuron", non_blocking=True).cpu(), p)}
        try:
            torch.empty(2, pin_memory=True)
            res["empty"] = "ok"
        except NotImplementedError:
            res["empty"] = "NotImplementedError"
        print(json.dumps(res))
    """, {"TORCHNEURON_NATIVE": "0"})
    assert json.loads(out) == {"active": False, "pinned": True, "view": True, "plain": False,
                               "to": True, "empty": "NotImplementedError"}


def test_hooks_library_is_built_into_the_cache_dir(tmp_path):
    out = _run("""
        import torch
        from torchneuron import native
        print(native.active(), native.library_path())
        print(torch.empty(3, pin_memory=True).is_pinned())
    """, {"TORCHNEURON_CACHE_DIR": str(tmp_path)})
    first, second = out.split("\n")[:2]
    assert first.startswith("True ") and str(tmp_path) in first
    assert second == "True"
    assert list((tmp_path / "native").glob("hostmem-*.so"))

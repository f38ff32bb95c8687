"""UntypedStorage.resize_ on neuron storages (FSDP2 frees and refills parameter storage
with it): every tensor over the storage sees the new size, and the bytes kept are CPU's
(the prefix up to the smaller size).  Both ways of replacing the StorageImpl's memory
are exercised: the native helper and torch's ``_swap_data_ptr_``."""
from __future__ import annotations

import pytest
import torch

from torchneuron import native


@pytest.fixture(params=["native", "swap"])
def path(request, monkeypatch):
    if request.param == "native":
        if not native.active():
            pytest.skip(f"the native helper is not built here: {native.error()}")
    else:
        if not hasattr(torch.UntypedStorage, "_swap_data_ptr_"):
            pytest.skip("torch < 2.13 has no UntypedStorage._swap_data_ptr_")
        monkeypatch.setattr(native, "set_storage_memory", lambda *a: False)
    return request.param


def _over(st, n, dtype=torch.float32, device="cpu"):
    return torch.empty(0, dtype=dtype, device=device).set_(st, 0, (n,), (1,))


@pytest.mark.parametrize("sizes", [(0, 24), (16,), (40,), (0, 0, 8), (12, 32, 4)])
def test_resize_matches_cpu(path, sizes):
    base = torch.arange(6, dtype=torch.float32) * 1.5 - 2
    cpu = base.clone()
    dev = base.to("neuron")
    cst, dst = cpu.untyped_storage(), dev.untyped_storage()
    view = dev[2:]  # a view made before the resizes sees them
    for nb in sizes:
        cst.resize_(nb)
        assert dst.resize_(nb) is dst
        assert dst.nbytes() == cst.nbytes() == nb
        assert dev.untyped_storage().nbytes() == nb
        assert view.untyped_storage().data_ptr() == dst.data_ptr()
    n = min(sizes[-1], 24) // 4
    keep = min([24] + [s for s in sizes]) // 4  # bytes that survived every resize
    if keep:
        torch.testing.assert_close(_over(dst, keep, device="neuron").cpu(),
                                   _over(cst, keep), rtol=0, atol=0)
    if n:  # the storage is usable at its new size
        t = _over(dst, n, device="neuron")
        t.copy_(torch.arange(n, dtype=torch.float32))
        torch.testing.assert_close(t.cpu(), torch.arange(n, dtype=torch.float32))


def test_free_and_refill_like_fsdp(path):
    """resize_(0), resize_(n), then a copy into the original tensor (FSDP2's unshard)."""
    p = torch.randn(4, 5).to("neuron")
    st = p.untyped_storage()
    before = torch.neuron.memory_allocated()
    st.resize_(0)
    assert torch.neuron.memory_allocated() == before - 80
    st.resize_(80)
    src = torch.randn(4, 5)
    with torch.no_grad():
        p.copy_(src)
    torch.testing.assert_close(p.cpu(), src, rtol=0, atol=0)
    torch.testing.assert_close((p * 2).cpu(), src * 2)


def test_resize_negative_raises():
    st = torch.ones(2, device="neuron").untyped_storage()
    with pytest.raises(RuntimeError, match="non-negative"):
        st.resize_(-1)


# Result tensors: dense results on device 0 are made with their sizes over an empty
# storage that takes the fake address (no set_); everything PyTorch reads of them must be
# what set_ made, and later set_/resize_/storage resizes must behave as on the CPU.
@pytest.mark.parametrize("shape", [(), (1,), (5,), (3, 1, 4), (2, 3), (4, 0)])
def test_result_tensors_match_cpu(shape):
    from torchneuron.storage import cells

    c = torch.arange(max(1, torch.Size(shape).numel()), dtype=torch.float32)[
        :torch.Size(shape).numel()].reshape(shape)
    r_cpu = c * 2 + 1
    r = (c.to("neuron") * 2) + 1
    if torch.Size(shape).numel():
        assert cells._dense_shell == hasattr(torch.UntypedStorage, "_swap_data_ptr_")
    for got, want in [(r.shape, r_cpu.shape), (r.stride(), r_cpu.stride()),
                      (r.storage_offset(), 0), (r.is_contiguous(), True),
                      (r.untyped_storage().nbytes(), r_cpu.untyped_storage().nbytes()),
                      (r.device, torch.device("neuron", 0)), (r.dtype, torch.float32)]:
        assert got == want
    torch.testing.assert_close(r.cpu(), r_cpu)
    if r.numel():
        assert r.data_ptr() != 0 and cells.cell_at(r.data_ptr()) is cells.cell_of(r)
    # a second tensor over the same storage sees writes through the first
    alias = torch.empty(0, device="neuron").set_(r.untyped_storage(), 0, r.shape, r.stride())
    alias_cpu = torch.empty(0).set_(r_cpu.untyped_storage(), 0, r_cpu.shape, r_cpu.stride())
    r.add_(5)
    r_cpu.add_(5)
    torch.testing.assert_close(alias.cpu(), alias_cpu)
    # growing the tensor regrows its storage; the old elements stay
    n = min(r.numel(), 7)
    r.resize_(7)
    r_cpu.resize_(7)
    assert r.shape == r_cpu.shape and r.untyped_storage().nbytes() >= 28
    torch.testing.assert_close(r[:n].cpu(), r_cpu[:n])


def test_result_tensor_memory_accounting():
    base = torch.neuron.memory_allocated()
    x = torch.ones(64, 64, device="neuron")
    y = x + x
    assert torch.neuron.memory_allocated() == base + 2 * 64 * 64 * 4
    del y
    assert torch.neuron.memory_allocated() == base + 64 * 64 * 4
    del x
    assert torch.neuron.memory_allocated() == base

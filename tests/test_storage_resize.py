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

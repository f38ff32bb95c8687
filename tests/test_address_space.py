"""Fake device addresses stay inside a window no real mapping can meet, however much is
allocated over the process's life: released ranges are reused (live storages never share
an address), the window is a PROT_NONE reservation on Linux, and data stays right."""
from __future__ import annotations

import gc
import random
import sys

import jax.numpy as jnp
import pytest
import torch

from torchneuron.storage import cells

TIB = 1 << 40
GIB = 1 << 30


def _maps():
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(v, 16) for v in line.split()[0].split("-"))
            yield lo, hi, line.split()[1]


def _check_disjoint(live):
    """Live [addr, addr + nbytes] ranges (ends included: the guard) never meet."""
    spans = sorted(live)
    for (a, n), (b, _) in zip(spans, spans[1:]):
        assert a + n + cells._ADDR_ALIGN <= b, (hex(a), n, hex(b))


def _in_window(w, addr, nbytes):
    return w.base <= addr and addr + nbytes < w.end and addr % cells._ADDR_ALIGN == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/maps")
def test_window_is_reserved_and_no_mapping_meets_it():
    keep = [torch.randn(1000, device="neuron") for _ in range(10)]
    w = cells.address_window()
    assert all(_in_window(w, t.data_ptr(), t.untyped_storage().nbytes()) for t in keep)
    meeting = [(lo, hi, perms) for lo, hi, perms in _maps() if lo < w.end and w.base < hi]
    if w.reserved:
        # our reservation, inaccessible: the kernel places nothing else there (/proc/self/maps
        # may show it merged with an adjacent PROT_NONE region, a thread stack's guard or
        # another reservation, as one line reaching past the window)
        shown = [(hex(a), hex(b), p) for a, b, p in meeting]
        assert meeting and all(p == "---p" for _, _, p in meeting), shown
        assert min(lo for lo, _, _ in meeting) <= w.base and \
            max(hi for _, hi, _ in meeting) >= w.end, shown
        spans = sorted(meeting)
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), shown  # no gap
        assert w.size >= 64 * GIB
    else:  # RLIMIT_AS is finite: a fixed window, checked unmapped at start-up
        assert meeting == []
    assert w.end <= 0x8000_0000_0000 or sys.maxsize > 2**32  # inside user space
    assert w.base > 0 and w.end < 2**63  # a valid int64 data pointer


def test_storages_past_2tib_cumulative_stay_in_the_window():
    """Storages claiming 64-512 GiB each (over tiny device arrays: addresses only), a few
    live at a time, allocated and released until far more than the window (and 2 TiB) has
    passed through: every address lies in the window and live ones never overlap."""
    w = cells.address_window()
    target = max(2 * TIB, 3 * w.size) + TIB
    rng = random.Random(0)
    tiny = jnp.zeros((1,), jnp.uint8)
    gc.collect()  # earlier tests' garbage (reference cycles) is not this test's to count
    before = torch.neuron.memory_allocated() if hasattr(torch, "neuron") else None
    live = []  # (storage, cell, nbytes)
    total = 0
    seen = set()
    reused = 0
    while total < target:
        nbytes = rng.choice([64, 128, 256, 512]) * GIB + rng.randrange(0, 4096)
        cell = cells.Cell(tiny, nbytes, 0)
        st = cells.new_storage(cell)
        addr = st.data_ptr()
        assert addr == cell.addr and cells.cell_at(addr) is cell
        assert _in_window(w, addr, nbytes), (hex(addr), nbytes)
        reused += addr in seen
        seen.add(addr)
        total += nbytes
        live.append((st, cell, nbytes))
        _check_disjoint([(s.data_ptr(), n) for s, _, n in live])
        if len(live) > 3 or rng.random() < 0.3:
            del st, cell
            live.pop(rng.randrange(len(live)))
    assert total > 2 * TIB and total > w.size and reused > 0
    del live
    gc.collect()
    if before is not None:
        assert torch.neuron.memory_allocated() == before


def test_real_tensors_reuse_addresses_and_keep_their_data():
    """Tensors allocated and freed in churn: freed addresses are handed out again, live
    tensors never overlap, and every live tensor still holds its own values (as on CPU)."""
    w = cells.address_window()
    rng = random.Random(1)
    live = []  # (neuron tensor, cpu tensor)
    seen = set()
    reused = 0
    for i in range(300):
        n = rng.choice([1, 7, 64, 128, 1000, 4096])
        c = torch.randn(n, generator=torch.Generator().manual_seed(i))
        t = c.to("neuron") * 3 - 1  # a result tensor: make_tensor's address
        ptr = t.data_ptr()
        assert _in_window(w, ptr, t.untyped_storage().nbytes())
        reused += ptr in seen
        seen.add(ptr)
        live.append((t, c * 3 - 1))
        _check_disjoint([(x.data_ptr(), x.untyped_storage().nbytes()) for x, _ in live])
        if len(live) > 8:
            live.pop(rng.randrange(len(live)))
        if i % 37 == 0:
            for x, ref in live:
                torch.testing.assert_close(x.cpu(), ref)
    assert reused > 50
    for x, ref in live:
        torch.testing.assert_close(x.cpu(), ref)
    # writes through a tensor at a reused address reach only it
    a = torch.zeros(64, device="neuron")
    pa = a.data_ptr()
    del a
    b = torch.ones(64, device="neuron")
    other = torch.full((64,), 5.0, device="neuron")
    assert b.data_ptr() == pa  # the freed address came back
    b.add_(1)
    torch.testing.assert_close(b.cpu(), torch.full((64,), 2.0))
    torch.testing.assert_close(other.cpu(), torch.full((64,), 5.0))


def test_resized_storage_releases_its_old_address():
    t = torch.arange(10.0, device="neuron")
    st = t.untyped_storage()
    old = st.data_ptr()
    st.resize_(80)
    assert st.data_ptr() != old and cells.cell_at(old) is None
    torch.testing.assert_close(t.cpu(), torch.arange(10.0))
    # the old address is free again: holding as many new storages of its size as there
    # are free ranges of that size, one of them gets it
    w = cells.address_window()
    free = len(w.free.get(cells._span(40), [])) + len(w.released)
    keep = [torch.empty(10, device="neuron") for _ in range(free + 2)]
    assert old in {x.data_ptr() for x in keep}
    torch.testing.assert_close(t.cpu(), torch.arange(10.0))


# ---------------------------------------------------------------- the allocator alone
def _window(size):
    return cells.AddressWindow(0x1000_0000_0000, size)


def test_window_exact_reuse_merge_split_and_exhaustion():
    w = _window(64 * 1024)
    inner = w.size - 2 * cells._ADDR_ALIGN  # the first 1 KiB is the scratch address
    a = w.alloc(1000)  # span (1 + 2) * 512
    b = w.alloc(1000)
    assert a == w.base + 1024 and b == a + 1536
    w.release(a)
    assert w.alloc(1000) == a  # the same size: the same range
    w.release(a)
    w.release(b)
    # the bump pointer reaches the end: released ranges merge back into it
    big = w.alloc(inner - 1024)
    assert big == w.base + 1024
    with pytest.raises(torch.OutOfMemoryError, match="out of fake address space"):
        w.alloc(0)
    w.release(big)
    # fragment: every other range live, then a large request that no hole fits
    spans = [w.alloc(512) for _ in range(inner // 1536)]
    for x in spans[::2]:
        w.release(x)
    with pytest.raises(torch.OutOfMemoryError):
        w.alloc(4096)
    assert w.alloc(512) in spans[::2]  # a hole of its size fits
    for x in spans[1::2]:
        w.release(x)
    # freeing neighbours merges the holes: the large request fits now
    got = w.alloc(4096)
    assert w.base + 1024 <= got < w.end


def test_window_stress_past_2tib_with_small_window():
    """A 64 GiB window, random sizes and lifetimes, 2 TiB cumulative: live ranges stay
    disjoint with their guards, inside the window; running out is only ever reported with
    the window genuinely full of live ranges."""
    w = _window(64 * GIB)
    rng = random.Random(2)
    live = {}
    total = 0
    ooms = 0
    while total < 2 * TIB:
        n = rng.choice([0, 1, 511, 512, 4096, 1 << 20, GIB, 3 * GIB, 7 * GIB + 5])
        try:
            a = w.alloc(n)
        except torch.OutOfMemoryError:
            ooms += 1
            held = sum(cells._span(m) for m in live.values())
            assert held + cells._span(n) > w.size // 2  # fragmentation at most halves it
            for x in rng.sample(sorted(live), len(live) // 2):
                w.release(x)
                del live[x]
            continue
        assert a not in live and _in_window(w, a, n)
        live[a] = n
        total += n
        if rng.random() < 0.45:
            x = rng.choice(sorted(live))
            w.release(x)
            del live[x]
        if len(live) % 16 == 0:
            _check_disjoint(list(live.items()))
    _check_disjoint(list(live.items()))
    for x in list(live):
        w.release(x)
    # everything released: the whole window is one range again
    assert w.alloc(w.size - 4 * cells._ADDR_ALIGN) == w.base + 2 * cells._ADDR_ALIGN


def test_fallback_window_avoids_mapped_ranges(monkeypatch):
    """Without a reservation (RLIMIT_AS finite, no mmap): a fixed window that
    /proc/self/maps shows unmapped."""
    monkeypatch.setattr(cells, "_reserve", lambda size: None)
    first = cells._FALLBACK_BASES[0]
    monkeypatch.setattr(cells, "_mapped_ranges", lambda: [(first + 4096, first + 8192)])
    w = cells._open_window()
    assert not w.reserved and w.base == cells._FALLBACK_BASES[1]
    assert w.size == cells._FALLBACK_SIZE

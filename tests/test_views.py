"""Aliasing: every view shares its base's storage on the device exactly as on CPU.

Each row builds a view of a fresh base, writes through the view and through the
base, and returns base and view; `check` runs the same program on CPU and
compares everything (values, shapes) and the base argument afterwards.
"""
import pytest
import torch

from helpers import DEV, check, to_dev

VIEWS = {
    "index": lambda b: b[1],
    "index_neg": lambda b: b[-1, 1:],
    "slice_step": lambda b: b[::2, 1::2],
    "select": lambda b: b.select(1, 2),
    "narrow": lambda b: b.narrow(0, 1, 2),
    "view": lambda b: b.view(-1),
    "view_split": lambda b: b.view(2, 2, 6),
    "reshape_view": lambda b: b.reshape(6, 4),
    "flatten": lambda b: b.flatten(),
    "transpose": lambda b: b.transpose(0, 1),
    "t": lambda b: b.t(),
    "permute": lambda b: b.view(2, 2, 6).permute(2, 0, 1),
    "movedim": lambda b: b.view(2, 2, 6).movedim(0, 2),
    "expand": lambda b: b[:, :1].expand(4, 6),
    "squeeze": lambda b: b[:1].squeeze(0),
    "unsqueeze": lambda b: b.unsqueeze(1),
    "diagonal": lambda b: b.diagonal(),
    "diagonal_off": lambda b: b.diagonal(offset=1),
    "unfold": lambda b: b.unfold(1, 2, 2),
    "as_strided": lambda b: b.as_strided((2, 3), (5, 2), 1),
    "split0": lambda b: b.split(2)[1],
    "chunk1": lambda b: b.chunk(3, dim=1)[2],
    "unbind": lambda b: b.unbind(1)[3],
    "data": lambda b: b.data,
    "detach": lambda b: b.detach(),
    "view_dtype": lambda b: b.view(torch.int32),
    "real": lambda b: torch.view_as_real(b.to(torch.complex64)),  # not a view: control row
    "ellipsis_none": lambda b: b[..., None],
    "T_of_slice": lambda b: b[1:3].T,
}

WRITES = {
    "fill": lambda v: v.fill_(7),
    "add_": lambda v: v.add_(1),
    "mul_": lambda v: v.mul_(-2),
    "zero_": lambda v: v.zero_(),
    "setitem": lambda v: v.__setitem__(Ellipsis, 3),
    "copy_": lambda v: v.copy_(torch.arange(v.numel(), dtype=v.dtype, device=v.device).reshape(v.shape) if v.dim() else torch.tensor(5, dtype=v.dtype, device=v.device)),
}


@pytest.mark.parametrize("wname", list(WRITES))
@pytest.mark.parametrize("vname", [v for v in VIEWS if v not in ("expand",)])
def test_write_through_view(vname, wname):
    make, write = VIEWS[vname], WRITES[wname]

    def prog(base):
        v = make(base)
        write(v)
        return base.clone(), v.clone()

    check(prog, torch.arange(24, dtype=torch.float32).reshape(4, 6))


@pytest.mark.parametrize("vname", list(VIEWS))
def test_base_write_seen_by_view(vname):
    def prog(base):
        v = make(base)
        base.mul_(3)
        base[0].add_(100)
        return v.clone()

    make = VIEWS[vname]
    check(prog, torch.arange(24, dtype=torch.float32).reshape(4, 6))


def test_expand_write_raises_like_cpu():
    for dev in ("cpu", DEV):
        b = torch.zeros(4, 6, device=dev)
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            b[:, :1].expand(4, 6).add_(1)


def test_views_share_storage_and_data_ptr():
    b = torch.arange(24.0).reshape(4, 6).to(DEV)
    v = b[1:, 2:]
    assert v.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert v.data_ptr() == b.data_ptr() + (6 + 2) * 4
    assert v._base is b
    assert v.stride() == (6, 1) and v.storage_offset() == 8
    other = torch.arange(24.0).reshape(4, 6).to(DEV)
    assert other.data_ptr() != b.data_ptr()


def test_view_of_view_chain():
    def prog(b):
        v = b.view(4, 6)[1:].t()[2:4].unsqueeze(0)
        v.add_(10)
        w = b.view(2, 12)[:, 3:9:2]
        w.sub_(1)
        return b.clone(), v.clone(), w.clone()

    check(prog, torch.arange(24, dtype=torch.float32))


def test_two_views_overlap():
    def prog(b):
        v1 = b[:, 1:4]
        v2 = b[2:4, 4:]
        v1.mul_(2)
        v2.add_(v1[0:2, 0:2])
        return b.clone()

    check(prog, torch.arange(24, dtype=torch.float32).reshape(4, 6))


def test_real_imag_views():
    def prog(z):
        r = torch.view_as_real(z)
        r[..., 0].add_(1)
        z.imag.mul_(3)
        z.real.sub_(0.5)
        return z.clone(), torch.view_as_real(z).clone()

    z = torch.complex(torch.arange(6.0), torch.arange(6.0, 12.0))
    check(prog, z)


def test_view_as_complex():
    def prog(x):
        c = torch.view_as_complex(x)
        c.mul_(2j)
        return x.clone()

    check(prog, torch.arange(12, dtype=torch.float32).reshape(6, 2))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8, torch.float16])
def test_view_dtype_roundtrip(dtype):
    def prog(x):
        v = x.view(dtype)
        v[0] = 1
        return x.clone(), v.clone()

    check(prog, torch.arange(8, dtype=torch.float32) + 0.5)


BIT_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
              torch.complex128]


def _bit_source(dtype):
    """3 rows of 16 random bytes as `dtype`: denormals, NaN payloads, negative zeros and
    infinities among them (bools only 0/1 bytes)."""
    g = torch.Generator().manual_seed(13)
    b = torch.randint(0, 256, (3, 16), generator=g, dtype=torch.uint8)
    b[0, :8] = torch.tensor([1, 0, 0, 0, 0, 0, 0, 0], dtype=torch.uint8)  # tiny denormals
    b[1, :4] = torch.tensor([1, 0, 0xC0, 0x7F], dtype=torch.uint8)  # a NaN with a payload
    if dtype == torch.bool:
        b = b & 1
    return b.view(dtype)


def _bits(t):
    t = t.cpu()
    if t.dtype == torch.bool:
        return t
    return t.view(torch.uint8)


@pytest.mark.parametrize("dst", BIT_DTYPES, ids=str)
@pytest.mark.parametrize("src", BIT_DTYPES, ids=str)
def test_view_dtype_bits_exact(src, dst):
    """view(dtype) reinterprets the bytes exactly for every pair of dtypes, also across
    element sizes (was: complex pairing of ints, wrong lengths)."""
    x = _bit_source(src)
    expected = x.view(dst)
    if dst == torch.bool:
        expected = expected.view(torch.uint8) != 0
    d = x.to(DEV)
    got = d.view(dst)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert torch.equal(_bits(got), _bits(expected))
    # a slice of the view and the view's view back to the source dtype
    assert torch.equal(_bits(got[:, 1:]), _bits(expected[:, 1:]))
    if src != torch.bool:
        assert torch.equal(_bits(got.view(src)), _bits(x))


def test_view_dtype_examples_match_cpu():
    x = torch.arange(8, dtype=torch.int32)
    assert torch.equal(x.to(DEV).view(torch.float64).cpu().view(torch.int64),
                       x.view(torch.float64).view(torch.int64))
    y = torch.arange(8, dtype=torch.float64)
    assert torch.equal(y.to(DEV).view(torch.int32)[:4].cpu(), y.view(torch.int32)[:4])
    assert torch.equal(y.to(DEV).view(torch.int32).cpu(), y.view(torch.int32))


@pytest.mark.parametrize("dtype", [torch.int16, torch.float64, torch.complex64])
def test_view_dtype_write_across_sizes(dtype):
    def prog(x):
        v = x.view(dtype)
        v[1] = 3
        return x.clone(), v.view(torch.uint8).clone()

    check(prog, torch.arange(32, dtype=torch.int32).reshape(2, 16))


def test_out_variant_writes_into_view():
    def prog(a, b, out):
        torch.add(a, b, out=out[1])
        torch.mul(a, b, out=out[2:3].squeeze(0))
        return out.clone()

    check(prog, torch.randn(5), torch.randn(5), torch.zeros(4, 5))


def test_out_resize_and_dtype_check():
    def prog(a, b):
        out = torch.empty(0, device=a.device)
        torch.add(a, b, out=out)
        return out

    check(prog, torch.randn(3, 4), torch.randn(4))
    a = torch.randn(3, device=DEV)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        torch.add(a, a, out=torch.empty(3, dtype=torch.int64, device=DEV))


def test_resize_and_set():
    def prog(x):
        y = x.clone()
        y.resize_(2, 3)
        z = torch.empty(0, device=x.device)
        z.set_(x.untyped_storage(), 2, (2, 2), (1, 2))
        z.add_(100)
        return y.clone(), x.clone(), z.clone()

    check(prog, torch.arange(12, dtype=torch.float32))


def test_resize_grow_keeps_data():
    x = torch.arange(4.0).to(DEV)
    x.resize_(10)
    assert x.shape == (10,)
    assert torch.equal(x[:4].cpu(), torch.arange(4.0))


def test_inplace_on_noncontig_with_broadcast_other():
    def prog(x, y):
        x.t()[1:].add_(y)
        return x.clone()

    check(prog, torch.zeros(5, 4), torch.arange(5, dtype=torch.float32))


def test_grad_through_views():
    def prog(x):
        y = x * 1.0
        y[1:, ::2].mul_(3)
        return y.t()[2]

    check(prog, torch.randn(4, 6, requires_grad=True), grad=True, native=False)


def test_no_copy_for_view_on_device():
    b = torch.zeros(3, 3, device=DEV)
    v = b.view(9)
    assert v.untyped_storage()._tn_cell is b.untyped_storage()._tn_cell
    assert to_dev(torch.zeros(2)).device == DEV


# ---------------------------------------------------------------- lazy conj / neg bits
# conj() and imag-of-conj are views with PyTorch's lazy conjugate / negative bits; ops
# that PyTorch's Conjugate fallback passes through (copy_, clone, mul, add, mm, ...)
# reach the device with the bits set and must honour them.
def _cx(seed=0, shape=(3, 4)):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=torch.complex64, generator=g)


CONJ_READS = [
    ("clone", lambda a, b: a.conj().clone()),
    ("resolve_conj", lambda a, b: a.conj().resolve_conj()),
    ("to_cpu", lambda a, b: a.conj()),
    ("mul", lambda a, b: a.conj() * b),
    ("add", lambda a, b: a.conj() + b),
    ("sub_rev", lambda a, b: b - a.conj()),
    ("mm", lambda a, b: a.conj() @ b.t()),
    ("mm_both", lambda a, b: a.conj() @ b.conj().t()),
    ("sum", lambda a, b: a.conj().sum(0)),
    ("imag_of_conj", lambda a, b: a.conj().imag * 2),
    ("real_of_conj", lambda a, b: a.conj().real + 1),
    ("neg_view", lambda a, b: torch._neg_view(a) + b),
    ("view_as_real", lambda a, b: torch.view_as_real(a.conj().resolve_conj())),
    ("transposed_conj", lambda a, b: a.t().conj().contiguous()),
    ("slice_conj", lambda a, b: a[:, 1:3].conj() * 2),
]


@pytest.mark.parametrize("name,fn", CONJ_READS, ids=[c[0] for c in CONJ_READS])
def test_conj_and_neg_views_read(name, fn):
    check(fn, _cx(0), _cx(1))


def test_writes_through_conj_views():
    def prog(a, b):
        a = a.clone()
        a.conj().copy_(b)          # stores conj(b)
        c = b.clone()
        c.conj().mul_(2)           # in place through the conj view
        d = b.clone()
        d[1].conj().add_(1j)
        return a, c, d

    check(prog, _cx(0), _cx(1))


def test_polar_gradient_uses_conj_views():
    # polar's backward multiplies by grad.conj(): it was wrong when conj views were
    a = torch.randn(5, requires_grad=True)
    t = torch.randn(5, requires_grad=True)
    y = torch.polar(a, t)
    (y.real * 2 + y.imag * 3).sum().backward()
    ad = a.detach().to(DEV).requires_grad_()
    td = t.detach().to(DEV).requires_grad_()
    yd = torch.polar(ad, td)
    (yd.real * 2 + yd.imag * 3).sum().backward()
    torch.testing.assert_close(ad.grad.cpu(), a.grad)
    torch.testing.assert_close(td.grad.cpu(), t.grad)

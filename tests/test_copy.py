"""Copies between CPU and the device, host reads, serialization."""
import copy
import io
import pickle

import pytest
import torch

from helpers import DEV, assert_same, check

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
          torch.complex128]


def _sample(dtype, shape=(3, 5)):
    g = torch.Generator().manual_seed(1)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=g, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_roundtrip(dtype):
    x = _sample(dtype)
    d = x.to("neuron")
    assert d.device == DEV and d.dtype == dtype and d.shape == x.shape
    assert type(d) is torch.Tensor and d.is_neuron
    assert torch.equal(d.cpu(), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_noncontiguous_and_empty(dtype):
    x = _sample(dtype, (6, 8))
    for v in (x.t(), x[::2, 1::3], x[:, :0], x[2], x.unsqueeze(0).expand(3, 6, 8)):
        d = v.to("neuron")
        assert d.shape == v.shape
        assert torch.equal(d.cpu(), v)
        assert torch.equal(d.t().cpu() if d.dim() == 2 else d.cpu(), v.t() if v.dim() == 2 else v)


def test_preserve_strides_on_transfer():
    x = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    d = x.to("neuron")
    assert d.stride() == x.stride()
    assert d.cpu().stride() == x.stride()
    assert torch.equal(d.cpu(), x)


@pytest.mark.parametrize("src", DTYPES, ids=str)
@pytest.mark.parametrize("dst", [torch.float32, torch.int64, torch.bool, torch.bfloat16, torch.complex64], ids=str)
def test_copy_cast(src, dst):
    x = _sample(src)
    if src.is_complex and not dst.is_complex:
        return  # CPU warns and discards imag: covered by the conversion tests
    check(lambda a: a.to(dst), x)
    out_cpu = torch.zeros(3, 5, dtype=dst)
    out_dev = out_cpu.to("neuron")
    out_cpu.copy_(x)
    out_dev.copy_(x.to("neuron"))
    assert_same(out_dev, out_cpu)
    # cpu -> device and device -> cpu copies with a cast
    out_dev.zero_()
    out_dev.copy_(x)
    assert_same(out_dev, out_cpu)
    back = torch.zeros(3, 5, dtype=dst)
    back.copy_(x.to("neuron"))
    assert_same(back, out_cpu)


def test_copy_broadcast_into_view():
    d = torch.zeros(4, 5, device="neuron")
    d[1:3].copy_(torch.arange(5.0))
    d[:, 4].copy_(torch.tensor([9.0, 8.0, 7.0, 6.0]).to("neuron"))
    exp = torch.zeros(4, 5)
    exp[1:3].copy_(torch.arange(5.0))
    exp[:, 4].copy_(torch.tensor([9.0, 8.0, 7.0, 6.0]))
    assert torch.equal(d.cpu(), exp)


def test_copy_device_to_cpu_view():
    c = torch.zeros(4, 5)
    c[:, 1:3].copy_(torch.ones(4, 2, device="neuron"))
    assert c.sum().item() == 8 and c[:, 1:3].eq(1).all()


def test_non_blocking():
    x = torch.randn(100)
    d = x.to("neuron", non_blocking=True)
    y = d.to("cpu", non_blocking=True)
    torch.neuron.synchronize()
    assert torch.equal(y, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16, torch.float64, torch.complex64], ids=str)
def test_item_tolist(dtype):
    x = _sample(dtype, (2, 3))
    d = x.to("neuron")
    assert d.tolist() == x.tolist()
    assert d[1, 2].item() == x[1, 2].item()
    assert d.sum().item() == pytest.approx(x.sum().item(), rel=1e-2) if dtype != torch.bool else True
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        d.item()


def test_bool_int_float_conversions_of_0d():
    d = torch.tensor(3.7).to("neuron")
    assert float(d) == pytest.approx(3.7) and int(d) == 3 and bool(d)
    assert bool(torch.tensor(0.0).to("neuron")) is False


def test_repr():
    x = torch.tensor([[1.5, -2.0], [3.25, 4.0]])
    r = repr(x.to("neuron"))
    assert "device='neuron:0'" in r
    assert repr(x).replace(")", "") in r.replace(", device='neuron:0')", "")
    assert "device='neuron:0', dtype=torch.int32" in repr(torch.arange(3, dtype=torch.int32).to("neuron"))


def test_equal_allclose():
    x = torch.randn(4, 4)
    a, b = x.to("neuron"), x.clone().to("neuron")
    assert torch.equal(a, b)
    b[0, 0] += 1
    assert not torch.equal(a, b)
    assert torch.allclose(a, a + 1e-9)
    assert not torch.allclose(a, b)


def test_save_load(tmp_path):
    x = torch.randn(3, 4)
    d = x.to("neuron")
    p = tmp_path / "t.pt"
    torch.save({"w": d, "view": d[1:]}, p)
    loaded = torch.load(p)
    assert loaded["w"].device == DEV
    assert torch.equal(loaded["w"].cpu(), x)
    assert loaded["view"].untyped_storage().data_ptr() == loaded["w"].untyped_storage().data_ptr()
    on_cpu = torch.load(p, map_location="cpu")
    assert on_cpu["w"].device.type == "cpu" and torch.equal(on_cpu["w"], x)
    torch.save(x, p)
    moved = torch.load(p, map_location="neuron")
    assert moved.device == DEV and torch.equal(moved.cpu(), x)


def test_state_dict_roundtrip():
    m = torch.nn.Linear(3, 2).to("neuron")
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf)
    m2 = torch.nn.Linear(3, 2)
    m2.load_state_dict(sd)
    assert torch.equal(m2.weight, m.weight.cpu())


def test_pickle_deepcopy():
    x = torch.randn(5)
    d = x.to("neuron")
    p = pickle.loads(pickle.dumps(d))
    assert p.device == DEV and torch.equal(p.cpu(), x)
    c = copy.deepcopy(d)
    assert c.device == DEV and torch.equal(c.cpu(), x)
    assert c.data_ptr() != d.data_ptr()
    c.add_(1)
    assert torch.equal(d.cpu(), x)
    m = copy.deepcopy(torch.nn.Linear(2, 2).to("neuron"))
    assert m.weight.device == DEV


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_deepcopy_every_dtype(dtype):
    """deepcopy goes through an untyped (byte) storage copy retyped by its first user:
    the retype must reinterpret the bytes exactly (float64 raised a TypeError)."""
    x = _sample(dtype)
    c = copy.deepcopy(x.to(DEV))
    assert c.dtype == dtype and torch.equal(c.cpu(), copy.deepcopy(x))
    v = copy.deepcopy(x.to(DEV)[1:, ::2])
    assert torch.equal(v.cpu(), copy.deepcopy(x[1:, ::2]))


def test_deepcopy_float64_rnn_module():
    torch.manual_seed(0)
    ref = torch.nn.LSTM(3, 4, num_layers=2).double()
    m = copy.deepcopy(copy.deepcopy(ref).to(DEV))
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    assert_same(m(x.to(DEV)), ref(x), atol=1e-10, rtol=1e-10)


def test_neuron_to_neuron_copy_is_a_copy():
    d = torch.arange(5.0).to("neuron")
    e = d.clone()
    e.add_(1)
    assert torch.equal(d.cpu(), torch.arange(5.0))
    f = d.to("neuron")
    assert f is d
    g = d.to("neuron", copy=True)
    assert g.data_ptr() != d.data_ptr()


def test_upload_of_a_tensor_that_requires_grad_is_differentiable():
    a = torch.randn(3, 4, requires_grad=True)
    b = a.to("neuron")
    assert b.requires_grad and b.grad_fn is not None
    assert_same(b, a.detach())
    (b * torch.arange(4.0, device="neuron")).sum().backward()
    assert torch.equal(a.grad, torch.arange(4.0).expand(3, 4))
    # copy_ from a CPU tensor that requires grad, into a device tensor
    d = torch.zeros(3, 4, device="neuron", requires_grad=True).clone()
    d.copy_(a)
    d.sum().backward()
    assert torch.equal(a.grad, torch.arange(4.0).expand(3, 4) + 1)
    assert_same(d.detach(), a.detach())


@pytest.mark.parametrize("make", [
    lambda: torch.ones(1, 16).t(),                       # strides (1, 16): size-1 dim
    lambda: torch.arange(6.).reshape(2, 1, 3).permute(1, 2, 0),
    lambda: torch.arange(12.).reshape(3, 4).t(),
    lambda: torch.arange(4.).reshape(4, 1)[:, :1].expand(4, 1),
], ids=["size1-transposed", "permuted-size1", "transposed", "column"])
def test_copies_keep_strides_like_cuda(make):
    """`.to()` with preserve_format keeps a dense tensor's strides, size-1 dims included
    (as CUDA's copies do, through empty_like), both ways."""
    x = make()
    d = x.to(DEV)
    assert d.stride() == x.stride()
    assert torch.equal(d.cpu(), x) and d.cpu().stride() == x.stride()


@pytest.mark.parametrize("dtype", DTYPES)
def test_new_shapes_go_up_and_come_back_without_a_compile(dtype):
    """A contiguous upload is flattened on the host and a contiguous read takes its
    buffer whole: 60 new shapes of every dtype (a prompt or a batch of a new length)
    compile no executable (a device reshape or read function compiled per shape), and
    the values, shapes and dtypes are the CPU's."""
    from jax import monitoring

    compiles = []

    def on(event, duration_secs=None, **kw):
        if event.endswith("backend_compile_duration"):
            compiles.append(event)

    base = _sample(dtype, (60, 70))
    torch.zeros(2, device=DEV)  # the device is up before counting
    monitoring.register_event_duration_secs_listener(on)
    try:
        for n in range(1, 61):
            for x in (base[:2, :n], base[:n, :3], base[:n, :n].reshape(1, n, n),
                      base[n - 1, n]):
                # contiguous strides (a copy keeps a size-1 dimension's stride)
                x = x.reshape(-1).reshape(x.shape)
                d = x.to(DEV)
                back = d.cpu()
                assert back.dtype == x.dtype and back.shape == x.shape, n
                assert torch.equal(back, x), n
                assert back.untyped_storage().nbytes() == x.numel() * x.element_size()
    finally:
        monitoring.unregister_event_duration_listener(on)
    assert not compiles, f"{len(compiles)} executables compiled for uploads and reads"


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_upload_does_not_alias_its_source(dtype):
    """Writes to the CPU tensor after an upload never show on the device: XLA:CPU would
    keep a numpy array's memory as the device buffer (1-d uploads did, until 2026-12-07)."""
    for shape in [(7,), (3, 5), ()]:
        src = _sample(dtype, shape)
        keep = src.clone()
        ups = [src.to(DEV), torch.empty(shape, dtype=dtype, device=DEV).copy_(src),
               torch.as_tensor(src, device=DEV)]
        st = src.untyped_storage().to(device=DEV)
        src.zero_() if dtype != torch.bool else src.logical_not_()
        for d in ups:
            assert torch.equal(d.cpu(), keep), (shape, d)
        back = torch.empty(0, dtype=dtype).set_(st.cpu()).view(shape)
        assert torch.equal(back, keep), shape

"""The torch.neuron module, torch.accelerator, errors, memory accounting, OOM."""
import gc
import os
import subprocess
import sys

import pytest
import torch

import torchneuron
from helpers import DEV


def test_registration():
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    assert torch.neuron.is_available()
    assert torch.neuron.device_count() >= 1
    assert torch.neuron.current_device() == 0
    assert "neuron" in torch.neuron.get_device_name()
    props = torch.neuron.get_device_properties(0)
    assert props.total_memory > 0
    assert torch.neuron.is_bf16_supported()
    assert torch.float16 in torch.neuron.get_amp_supported_dtype()
    torchneuron._register()  # registering twice is harmless
    t = torch.ones(2, device="neuron")
    assert type(t) is torch.Tensor and t.is_neuron and t.device == DEV
    assert not torch.ones(2).is_neuron
    assert t.neuron() is t
    assert torch.ones(2).neuron().device == DEV
    m = torch.nn.Linear(2, 2).neuron()
    assert m.weight.device == DEV


def test_accelerator():
    acc = torch.accelerator.current_accelerator()
    assert acc is not None and acc.type == "neuron"
    assert torch.accelerator.is_available()
    assert torch.accelerator.device_count() >= 1


def test_device_context_and_set_device():
    with torch.neuron.device(0):
        assert torch.neuron.current_device() == 0
    torch.neuron.set_device(0)
    torch.neuron.set_device("neuron:0")
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        torch.neuron.set_device(99)


def test_bad_device_index_raises():
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        torch.zeros(2, device="neuron:99")
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        torch.ones(2).to("neuron:99")


def test_device_mismatch_raises_like_cuda():
    a = torch.ones(3, device="neuron")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.ones(3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3) * a
    # 0-dim CPU tensors are allowed, like CUDA
    b = a * torch.tensor(2.0)
    assert b.device == DEV and torch.equal(b.cpu(), torch.full((3,), 2.0))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.nn.functional.linear(torch.ones(2, 3), torch.ones(4, 3, device="neuron"))


def test_shape_and_dtype_errors_have_pytorch_wording():
    a = torch.ones(3, device="neuron")
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        a + torch.ones(4, device="neuron")
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        torch.ones(3, dtype=torch.long, device="neuron").add_(1.5)


def test_synchronize_stream_event():
    x = torch.randn(64, 64, device="neuron")
    y = x * 2
    torch.neuron.synchronize()
    s = torch.neuron.Stream()
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream() == s
        z = y + 1
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    s.synchronize()
    e1 = torch.neuron.Event(enable_timing=True)
    e2 = torch.neuron.Event(enable_timing=True)
    e1.record()
    w = z * 3
    e2.record()
    e2.synchronize()
    assert e1.elapsed_time(e2) >= 0
    assert torch.equal(w.cpu(), (x.cpu() * 2 + 1) * 3)


@pytest.mark.parametrize("how", ["synchronize", "event"])
def test_synchronize_waits_for_work_whose_result_was_dropped(how):
    """CUDA's synchronize waits for every queued kernel, whoever holds its output: a loop
    that drops its results (a timing loop) is waited for too, by synchronize() and by a
    timing Event's record().  Seen through the results' buffers (kept here, not their
    tensors): each has been computed when the wait returns."""
    from torchneuron import storage

    end = torch.neuron.Event(enable_timing=True)
    for n in (1024, 2048, 4096):  # until some work is still queued when it is dropped
        a = torch.randn(n, n, device=DEV)
        torch.neuron.synchronize()
        buffers = []
        for _ in range(3):
            y = a @ a @ a  # ~0.1 s each at n = 1024 on a CPU
            buffers.append(storage.cell_of(y).arr)
            del y
        queued = not buffers[-1].is_ready()
        if how == "synchronize":
            torch.neuron.synchronize()
        else:
            end.record()
        assert all(b.is_ready() for b in buffers)
        if queued:
            break
    assert queued, "every product finished before it was dropped: nothing was tested"


def test_rng_api():
    torch.manual_seed(123)
    assert torch.neuron.initial_seed() == 123
    torch.neuron.manual_seed(5)
    st = torch.neuron.get_rng_state()
    assert st.dtype == torch.uint8 and st.device.type == "cpu"
    torch.neuron.set_rng_state(st)
    torch.neuron.manual_seed_all(7)
    assert len(torch.neuron.get_rng_state_all()) == torch.neuron.device_count()
    torch.neuron.set_rng_state_all(torch.neuron.get_rng_state_all())
    torch.neuron.seed()
    torch.neuron.seed_all()
    assert torch.neuron.initial_seed() != 7


def test_memory_accounting():
    # tensors earlier tests left in reference cycles (tracebacks of pytest.raises) must not
    # be collected between `base` and the peak: the peak would then be below base + 8 MiB
    gc.collect()
    torch.neuron.synchronize()
    base = torch.neuron.memory_allocated()
    x = torch.empty(1024, 1024, device="neuron")
    assert torch.neuron.memory_allocated() - base == 4 * 1024 * 1024
    torch.neuron.reset_peak_memory_stats()
    y = x + 1
    peak = torch.neuron.max_memory_allocated()
    assert peak >= base + 8 * 1024 * 1024
    del x, y
    assert torch.neuron.memory_allocated() == base
    st = torch.neuron.memory_stats()
    assert st["allocated_bytes.all.current"] == base
    assert st["allocated_bytes.all.peak"] == peak
    torch.neuron.empty_cache()
    free, total = torch.neuron.mem_get_info()
    assert 0 < free <= total
    assert "allocated_bytes" in torch.neuron.memory_summary()


def test_views_do_not_allocate():
    x = torch.zeros(256, 256, device="neuron")
    before = torch.neuron.memory_allocated()
    views = [x[1:], x.t(), x.view(-1), x[:, 3]]
    assert torch.neuron.memory_allocated() == before
    del views


def test_out_of_memory_is_recoverable():
    prev = torch.neuron.get_device_properties().total_memory
    torch.neuron.set_memory_limit(torch.neuron.memory_allocated() + 10 * 1024 * 1024)
    try:
        keep = torch.zeros(1024, 1024, device="neuron")  # 4 MiB: fits
        with pytest.raises(torch.OutOfMemoryError, match="NEURON out of memory. Tried to allocate"):
            torch.zeros(2048, 2048, device="neuron")  # 16 MiB: does not
        def add_one_more():
            big = torch.ones(1024, 1024).to("neuron")  # fits: 8 of 10 MiB in use
            return big + keep  # a third 4 MiB tensor does not

        with pytest.raises(torch.OutOfMemoryError):
            add_one_more()
        import gc

        gc.collect()
        assert torch.neuron.memory_stats()["num_ooms"] >= 2
        # the process keeps working
        y = keep + 1
        assert y.sum().item() == 1024 * 1024
    finally:
        torch.neuron.set_memory_limit(None)
    assert prev > 0


def test_memory_limit_env_var_in_subprocess():
    code = (
        "import torch, torchneuron\n"
        "try:\n"
        "    torch.zeros(1 << 22, device='neuron')\n"
        "    print('no-oom')\n"
        "except torch.OutOfMemoryError as e:\n"
        "    print('oom')\n"
        "print(torch.zeros(10, device='neuron').sum().item())\n"
    )
    env = dict(os.environ, TORCHNEURON_MEMORY_LIMIT="1MiB")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["oom", "0.0"]


def test_autoload_entry_point_and_opt_out():
    code = "import torch; print(hasattr(torch, 'neuron'), torch.ones(1, device='neuron').device)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True neuron:0"
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", "import torch; print(hasattr(torch, 'neuron'))"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "False"


def test_two_devices_in_subprocess():
    code = (
        "import torch, torchneuron\n"
        "assert torch.neuron.device_count() == 2\n"
        "a = torch.arange(4.0).to('neuron:1')\n"
        "assert a.device == torch.device('neuron:1')\n"
        "b = (a * 2).to('neuron:0')\n"
        "assert b.device == torch.device('neuron:0')\n"
        "assert torch.equal(b.cpu(), torch.arange(4.0) * 2)\n"
        "c = torch.zeros(3, device='neuron:1')\n"
        "assert c.device.index == 1\n"
        "try:\n"
        "    a + b\n"
        "    print('no error')\n"
        "except RuntimeError as e:\n"
        "    assert 'same device' in str(e), e\n"
        "with torch.neuron.device(1):\n"
        "    assert torch.neuron.current_device() == 1\n"
        "    assert torch.ones(2, device='neuron').device.index == 1\n"
        "    d = b + b\n"  # a device-0 result made while device 1 is current
        "    assert d.device.index == 0 and d.untyped_storage().device.index == 0\n"
        "    assert torch.equal(d.cpu(), torch.arange(4.0) * 4)\n"
        "print('ok')\n"
    )
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               TORCHNEURON_PLATFORM="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")


# an op with only a CPU kernel: on the device it can only run through the CPU fallback
# (an aten op would get lowered one day and stop testing the fallback)
_fb_lib = torch.library.Library("tnfallbacktest", "DEF")
_fb_lib.define("plus_one(Tensor x) -> Tensor")
_fb_lib.impl("plus_one", lambda x: x + 1, "CPU")
_fb_lib.impl("plus_one", lambda x: torch.empty_like(x), "Meta")


def test_fallback_policy_and_stats():
    torchneuron.reset_fallback_stats()
    plus_one = torch.ops.tnfallbacktest.plus_one
    x = torch.randn(4, device="neuron")
    with torchneuron.fallback_policy("silent"):
        y = plus_one(x)
    assert y.device == DEV and torch.equal(y.cpu(), x.cpu() + 1)
    assert torchneuron.fallback_stats() == {"tnfallbacktest::plus_one": 1}
    with torchneuron.fallback_policy("error"):
        with pytest.raises(NotImplementedError, match="has no native lowering"):
            plus_one(x)
    with pytest.warns(UserWarning, match="no native lowering"):
        from torchneuron.dispatch import fallback
        fallback._warned.clear()
        with torchneuron.fallback_policy("warn"):
            plus_one(x)

"""torch.autocast("neuron") follows CUDA's autocast op lists."""
import pytest
import torch
import torch.nn.functional as F

from helpers import DEV, assert_same

LOW = [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dt", LOW, ids=str)
def test_lower_precision_ops(dt):
    a = torch.randn(8, 8)
    w = torch.randn(4, 8)
    img = torch.randn(1, 2, 6, 6)
    k = torch.randn(3, 2, 3, 3)
    ad, wd, imgd, kd = (t.to(DEV) for t in (a, w, img, k))
    with torch.autocast("neuron", dtype=dt):
        assert torch.is_autocast_enabled("neuron")
        mm = ad @ ad
        lin = F.linear(ad, wd)
        conv = F.conv2d(imgd, kd)
        bmm = torch.bmm(ad[None], ad[None])
    for r in (mm, lin, conv, bmm):
        assert r.dtype == dt
    # values: the same as casting the inputs by hand
    assert_same(mm, a.to(dt).float().matmul(a.to(dt).float()).to(dt), atol=0.1, rtol=0.02)
    assert_same(lin, F.linear(a.to(dt).float(), w.to(dt).float()).to(dt), atol=0.1, rtol=0.02)
    assert_same(conv, F.conv2d(img.to(dt).float(), k.to(dt).float()).to(dt), atol=0.1, rtol=0.02)


@pytest.mark.parametrize("dt", LOW, ids=str)
def test_fp32_and_promote_ops(dt):
    x = torch.randn(4, 5).to(DEV)
    with torch.autocast("neuron", dtype=dt):
        h = x @ x.t()  # low precision
        assert h.dtype == dt
        assert torch.exp(h).dtype == torch.float32
        assert torch.log_softmax(h, -1).dtype == torch.float32
        assert torch.softmax(h, -1, dtype=torch.float64).dtype == torch.float64
        assert h.sum().dtype == torch.float32
        assert F.mse_loss(h, torch.zeros(4, 4, device=DEV)).dtype == torch.float32
        assert torch.cat([h, x[:, :4]]).dtype == torch.float32
        assert torch.addcmul(x[:, :4], h, h).dtype == torch.float32
        assert (h + 1).dtype == dt  # not listed: runs in its input dtype
        assert F.relu(h).dtype == dt


def test_not_applied_outside_and_for_cpu_tensors():
    x = torch.randn(3, 3)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        assert (x @ x).dtype == torch.float32  # CPU tensors are not neuron's business
    xd = x.to(DEV)
    assert (xd @ xd).dtype == torch.float32
    with torch.autocast("neuron", dtype=torch.bfloat16, enabled=False):
        assert (xd @ xd).dtype == torch.float32
    with torch.autocast("neuron", dtype=torch.bfloat16):
        with torch.autocast("neuron", enabled=False):
            assert (xd @ xd).dtype == torch.float32


def test_training_step_under_autocast_gives_fp32_grads():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    ref = [p.detach().clone() for p in model.parameters()]
    model = model.to(DEV)
    x = torch.randn(10, 6)
    y = torch.randint(0, 3, (10,))
    with torch.autocast("neuron", dtype=torch.bfloat16):
        out = model(x.to(DEV))
        assert out.dtype == torch.bfloat16
        loss = F.cross_entropy(out, y.to(DEV))
    assert loss.dtype == torch.float32
    loss.backward()
    for p in model.parameters():
        assert p.grad.dtype == torch.float32
    # same step on CPU autocast(bf16) for comparison
    cpu_model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    with torch.no_grad():
        for p, r in zip(cpu_model.parameters(), ref):
            p.copy_(r)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cpu_loss = F.cross_entropy(cpu_model(x), y)
    cpu_loss.backward()
    assert abs(loss.item() - cpu_loss.item()) < 0.05
    for p, c in zip(model.parameters(), cpu_model.parameters()):
        assert_same(p.grad, c.grad, atol=0.05, rtol=0.05)


def test_autocast_device_module_alias():
    x = torch.randn(3, 3).to(DEV)
    with torch.neuron.amp.autocast(dtype=torch.float16):
        assert (x @ x).dtype == torch.float16

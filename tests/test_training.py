"""End-to-end training on the device: natively (fallback policy 'error'), like CPU."""
import torch
import torch.nn.functional as F

from helpers import DEV, assert_same, native_only


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def test_memory_stays_flat_over_500_steps():
    torch.manual_seed(0)
    model = _mlp().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(64, 16, device=DEV)
    y = torch.randint(0, 4, (64,), device=DEV)
    marks = {}
    with native_only():
        for step in range(500):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if step in (20, 499):
                del loss
                marks[step] = torch.neuron.memory_allocated()
    assert marks[499] == marks[20], marks


def test_mlp_training_matches_cpu_step_by_step():
    torch.manual_seed(0)
    cpu_model = _mlp()
    dev_model = _mlp().to(DEV)
    dev_model.load_state_dict(cpu_model.state_dict())
    copt = torch.optim.SGD(cpu_model.parameters(), lr=0.1, momentum=0.9)
    dopt = torch.optim.SGD(dev_model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    with native_only():
        for _ in range(20):
            x = torch.randn(32, 16, generator=g)
            y = torch.randint(0, 4, (32,), generator=g)
            closs = F.cross_entropy(cpu_model(x), y)
            copt.zero_grad()
            closs.backward()
            copt.step()
            dloss = F.cross_entropy(dev_model(x.to(DEV)), y.to(DEV))
            dopt.zero_grad()
            dloss.backward()
            dopt.step()
            assert abs(dloss.item() - closs.item()) < 1e-4
    for pc, pd in zip(cpu_model.parameters(), dev_model.parameters()):
        assert_same(pd, pc.detach(), atol=1e-4, rtol=1e-4)


def test_demo_reaches_95_percent_natively():
    from torchneuron.demo import train

    with native_only():
        r = train("neuron", epochs=4, progress=False)
    assert r["fallback_ops"] == 0, r["fallback_detail"]
    assert r["test_accuracy"] >= 0.95, r
    assert r["steps_per_s"] and r["steps_per_s"] > 0


def test_demo_cli_exit_code(capsys):
    from torchneuron.demo import main

    rc = main(["--epochs", "3", "--no-progress"])
    out = capsys.readouterr().out
    assert "test accuracy" in out and "CPU fallback ops  0" in out, out
    assert rc == 0

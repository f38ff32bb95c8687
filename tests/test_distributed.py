"""Distributed training on neuron through the "neuron" c10d backend, under real torchrun.

Each launch runs tests/programs/dist_worker.py in 2 (or 4) processes; every scenario
compares the distributed neuron run with a single-process CPU reference over the same
global batch (or with the same distributed recipe on CPU tensors, gloo), and each row
below reads one scenario's verdict from every rank.  Launches are bounded (process-group
timeout, subprocess timeout, the whole process tree killed on expiry) and use
``torchrun --standalone`` (a free port)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "programs" / "dist_worker.py"
TORCH_213 = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)

TWO = ["collectives", "mismatch_errors", "ddp", "ddp_bucket_view", "ddp_no_sync",
       "ddp_find_unused", "ddp_static_graph", "ddp_hooks", "ddp_compile", "zero", "fsdp",
       "fsdp_grad_accum", "fsdp_divide_factor", "fsdp_mixed_precision", "dtensor",
       "tensor_parallel", "sequence_parallel", "pipeline", "dcp_save"]
FOUR = ["mesh_2d", "collectives"]
XLA = ["collectives", "ddp", "fsdp", "fsdp_mixed_precision", "dtensor", "tensor_parallel"]


def torchrun(nproc, names, out, timeout=600, env=None):
    """Run the worker under torchrun; (returncode, seconds, output, per-rank results)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", str(WORKER), str(out), *names]
    e = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         cwd=ROOT, env=e, start_new_session=True)
    try:
        text, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        text, _ = p.communicate()
        pytest.fail(f"torchrun did not finish in {timeout} s:\n{text[-4000:]}")
    took = time.monotonic() - t0
    ranks = {}
    for r in range(nproc):
        f = Path(out) / f"rank{r}.json"
        if f.exists():
            ranks[r] = json.loads(f.read_text())
    return p.returncode, took, text, ranks


def _no_orphans(out):
    r = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
    assert r.stdout.strip() == "", f"worker processes left behind: {r.stdout}"


def launch(nproc, names, out, timeout=600, env=None):
    """torchrun, then a check that no worker outlived it."""
    res = torchrun(nproc, names, out, timeout=timeout, env=env)
    _no_orphans(out)
    return res


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    dcp = tmp_path_factory.mktemp("dcp")
    rc, _, text, ranks = launch(2, TWO, tmp_path_factory.mktemp("dist2"),
                                env={"TN_DCP_DIR": str(dcp)})
    return rc, text, ranks, dcp


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    rc, _, text, ranks = launch(4, FOUR, tmp_path_factory.mktemp("dist4"),
                                env={"TN_INIT_BACKEND": "neuron", "TN_DEVICE_ID": "1"})
    return rc, text, ranks


@pytest.fixture(scope="module")
def xla(tmp_path_factory):
    rc, _, text, ranks = launch(2, XLA, tmp_path_factory.mktemp("distxla"),
                                env={"TORCHNEURON_COLLECTIVES": "xla",
                                     "TN_INIT_BACKEND": "cpu:gloo,neuron:neuron"})
    return rc, text, ranks


def _verdict(run, name, nproc):
    rc, text, ranks = run[:3]
    assert set(ranks) == set(range(nproc)), f"ranks without results (rc {rc}):\n{text[-4000:]}"
    for r in range(nproc):
        assert name in ranks[r], f"rank {r} did not reach {name} (rc {rc}):\n{text[-4000:]}"
        ok, detail = ranks[r][name]
        assert ok, f"rank {r}: {detail}"
    return ranks[0][name][1]


def test_backend_is_picked_by_default(two):
    """init_process_group() with no backend: the neuron group; one device per process
    (torch.neuron.set_device(LOCAL_RANK) names it)."""
    rc, text, ranks, _ = two
    assert rc == 0, text[-4000:]
    for r, res in ranks.items():
        assert res["world"] == 2
        assert res["group_type"] == "NeuronProcessGroup"
        assert res["device_count"] == 1 and res["current_device"] == 0


@pytest.mark.parametrize("launch", ["four", "xla"])
def test_backend_spellings(request, launch):
    """backend="neuron" with device_id=..., and "cpu:gloo,neuron:neuron"."""
    rc, text, ranks = request.getfixturevalue(launch)
    assert rc == 0, text[-4000:]
    for res in ranks.values():
        assert res["group_type"] == "NeuronProcessGroup", res


@pytest.mark.parametrize("name", [n for n in TWO if n != "fsdp_divide_factor" or TORCH_213])
def test_two_processes(two, name):
    _verdict(two, name, 2)


@pytest.mark.skipif(TORCH_213, reason="torch < 2.13 only: PREMUL_SUM's factor is not visible")
def test_premul_sum_needs_newer_torch(two):
    ok, detail = two[2][0]["fsdp_divide_factor"]
    assert not ok and "PREMUL_SUM on the neuron process group needs torch >= 2.13" in detail


@pytest.mark.parametrize("name", FOUR)
def test_four_processes(four, name):
    _verdict(four, name, 4)


@pytest.mark.parametrize("name", XLA)
def test_xla_engine(xla, name):
    """TORCHNEURON_COLLECTIVES=xla: the same scenarios with collectives inside XLA
    (jax.distributed; gloo inside XLA on CPU)."""
    _verdict(xla, name, 2)


def test_xla_engine_ran_inside_xla(xla, two):
    for r, res in xla[2].items():
        calls = res["xla_calls"]
        for op in ("all_reduce", "broadcast", "all_gather", "reduce_scatter"):
            assert calls.get(op, 0) > 0, (r, calls)
    assert all(not res["xla_calls"] for res in two[2].values())  # the default is gloo


def test_checkpoint_loads_in_another_world_size(two):
    """The FSDP2 checkpoint written by 2 processes loads into one process (no process
    group) on neuron and equals the parameters the ranks had."""
    import torch.distributed.checkpoint as dcp
    import torch.nn as nn

    _verdict(two, "dcp_save", 2)
    ckpt = two[3]
    want = torch.load(ckpt / "full_params.pt")
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("neuron")
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=str(ckpt))
    model.load_state_dict(state["model"])
    for k, v in model.state_dict().items():
        assert v.device.type == "neuron"
        torch.testing.assert_close(v.cpu(), want[k], rtol=0, atol=0)


def test_timeout_fails_clearly(tmp_path):
    """A rank that never joins makes the other's collective raise with the group's
    timeout (3 s), not hang; every process exits."""
    rc, took, text, ranks = launch(2, ["timeout_fault"], tmp_path, timeout=180)
    ok, detail = ranks[0]["timeout_fault"]
    assert ok, detail
    assert "Timed out" in detail or "timeout" in detail.lower(), detail


def test_mismatch_raises_in_detail_mode(tmp_path):
    rc, took, text, ranks = launch(2, ["mismatch_detected"], tmp_path, timeout=300,
                                   env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    for r in (0, 1):
        assert r in ranks, text[-3000:]
        ok, detail = ranks[r]["mismatch_detected"]
        assert ok, detail


def test_dead_rank_fails_the_job(tmp_path):
    """A rank that dies mid-job: torchrun stops the others and fails, within the timeout."""
    rc, took, text, ranks = launch(2, ["rank_dies"], tmp_path, timeout=180,
                                   env={"TN_PG_TIMEOUT": "20"})
    assert rc != 0, text[-3000:]
    assert took < 150, f"the job took {took:.0f} s to fail"
    if 0 in ranks and "rank_dies" in ranks[0]:
        assert not ranks[0]["rank_dies"][0]  # rank 0's collective raised


def test_demo_ddp(tmp_path):
    """The main job under torchrun --ddp: the same global batches as one process."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "torchneuron.demo", "--ddp", "--epochs", "2", "--json", "--no-progress"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads(p.stdout[p.stdout.index("{"):])
    assert r["world_size"] == 2 and r["parallel"] == "ddp"
    assert r["fallback_ops"] == 0
    assert r["test_accuracy"] >= 0.9, r

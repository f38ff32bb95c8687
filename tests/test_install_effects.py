"""What installing torchneuron changes for programs, and what it must not.

Every test runs fresh processes (``import torch`` is what is measured) and compares
with the same program under ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` (torch as if
torchneuron were not installed) or with the CPU.  Import time and memory are
measured in bench/import_cost.py, not here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = {k: v for k, v in os.environ.items() if not k.startswith("TORCHNEURON_")}
BASE["TORCHNEURON_COMPILE_CACHE_DIR"] = "off"
OFF = dict(BASE, TORCH_DEVICE_BACKEND_AUTOLOAD="0")


def _run(code, env=None, ok=True):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=env or BASE, timeout=300, cwd=ROOT)
    if ok:
        assert r.returncode == 0, r.stderr[-4000:]
    return r


def _json(code, env=None):
    r = _run(code, env)
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


# ---------------------------------------------------------------- 1. autoload is light
def test_import_torch_registers_without_loading_jax():
    got, err = _json("""
        import json, sys, torch
        mods = lambda: sorted(m for m in ("jax", "jaxlib", "torchneuron.dispatch",
                                          "torchneuron.runtime", "torchneuron.ops")
                              if m in sys.modules)
        out = {"registered": torch._C._get_privateuse1_backend_name(),
               "after_import": mods(), "available": torch.neuron.is_available()}
        torch.manual_seed(1)  # calls torch.neuron.manual_seed_all / _is_in_bad_fork
        x = torch.randn(4, 4) @ torch.randn(4, 4)
        out["after_cpu_work"] = mods()
        out["accelerator"] = str(torch.accelerator.current_accelerator())
        y = torch.ones(3, device="neuron") * 2
        out["after_first_use"] = mods()
        out["value"] = y.cpu().tolist()
        print(json.dumps(out))
    """)
    assert got["registered"] == "neuron"
    assert got["after_import"] == [] and got["after_cpu_work"] == []
    assert got["available"] is True and got["accelerator"] == "neuron"
    assert "jax" in got["after_first_use"] and "torchneuron.dispatch" in got["after_first_use"]
    assert got["value"] == [2.0, 2.0, 2.0]
    assert err == ""


# each first use, with the exact result it must give (None: the result an explicitly
# loaded device gives, found by running the same program after ``torchneuron._register()``)
FIRST_USES = {
    "factory": ("t = torch.arange(5, device='neuron'); r = (t * t).cpu().tolist()",
                [0, 1, 4, 9, 16]),
    "to": ("t = torch.arange(5).to('neuron'); r = (t + 1).cpu().tolist()", [1, 2, 3, 4, 5]),
    "tensor_method": ("t = torch.arange(5).neuron(); r = t.sum().item()", 10),
    "module_attr": ("r = torch.neuron.device_count()", 1),
    "untyped_storage": ("s = torch.UntypedStorage(8, device='neuron'); r = [s.nbytes(), "
                        "s.device.type]", [8, "neuron"]),
    "compile": ("f = torch.compile(lambda a: a * 3 + 1, backend='neuron'); "
                "r = f(torch.arange(4.0)).tolist()", [1.0, 4.0, 7.0, 10.0]),
    "manual_seed_then_rand": ("torch.manual_seed(7); r = torch.rand(3, device='neuron')"
                              ".cpu().tolist()", None),
}


@pytest.mark.parametrize("name", sorted(FIRST_USES))
def test_every_first_use_loads_the_device(name):
    """Each way a program first meets the device loads it, and gives the right result."""
    code = """
        import json, sys, torch
        {pre}
        {use}
        print(json.dumps({{"r": r, "jax": "jax" in sys.modules}}))
    """
    use, expected = FIRST_USES[name]
    lazy, _ = _json(code.format(pre="", use=use))
    assert lazy["jax"] is True
    if expected is None:
        eager, _ = _json(code.format(pre="import torchneuron; torchneuron._register()",
                                     use=use))
        assert lazy == eager
    else:
        assert lazy["r"] == expected


# ---------------------------------------------------------------- 2. nothing process-wide
JAX_PROGRAM = """
    import json, torch, jax, jax.numpy as jnp
    f = jax.jit(lambda a: a * 2)
    f(jnp.arange(3))
    torch.manual_seed(0); torch.randn(3).sum()
    print(json.dumps({
        "arange": str(jnp.arange(3).dtype), "float": str(jnp.array(1.0).dtype),
        "x64": bool(jax.config.jax_enable_x64),
        "cache_dir": jax.config.jax_compilation_cache_dir,
        "jit_cache": f._cache_size(), "backends": sorted(jax.config.values.get(
            "jax_platforms") or []),
    }))
"""


def test_a_jax_program_beside_torch_is_untouched():
    with_tn, _ = _json(JAX_PROGRAM)
    without, _ = _json(JAX_PROGRAM, env=OFF)
    assert with_tn == without
    assert with_tn["arange"] == "int32" and with_tn["float"] == "float32"
    assert with_tn["x64"] is False and with_tn["jit_cache"] == 1


def test_torch_programs_behave_as_without_the_package():
    code = """
        import json, torch, torch.distributed as dist
        out = {"map": {k: str(v) for k, v in
                       dist.Backend.default_device_backend_map.items()},
               "pin": None, "autocast": str(torch.get_autocast_dtype("cpu"))}
        try:
            out["pin"] = torch.ones(2).pin_memory().is_pinned()
        except RuntimeError as e:
            out["pin"] = "error"
        out["sum"] = float(torch.arange(10.0).sum())
        print(json.dumps(out))
    """
    with_tn, _ = _json(code)
    without, _ = _json(code, env=OFF)
    # the registered accelerator's c10d backend joins torch's default map (PyTorch refuses
    # init_process_group() without a backend for an accelerator it has no entry for)
    assert with_tn["map"] == dict(without["map"], neuron="neuron")
    assert with_tn["sum"] == without["sum"] and with_tn["autocast"] == without["autocast"]
    # pinning: without an accelerator torch cannot pin; the registered device pins
    assert without["pin"] == "error" and with_tn["pin"] is True


# ---------------------------------------------------------------- 3. another accelerator
SIMULATE = """
    import json, os, sys, importlib.util
    import torch
    {patch}
    torch._import_device_backends()  # the autoload, as import torch runs it
    out = {{"backend": torch._C._get_privateuse1_backend_name(),
           "neuron_module": hasattr(torch, "neuron"),
           "torchneuron": "torchneuron" in sys.modules,
           "shim": importlib.util.find_spec("torch_neuronx") is not None,
           "accelerator": str(torch.accelerator.current_accelerator())}}
    from transformers.utils.import_utils import is_torch_neuron_available
    out["hf"] = is_torch_neuron_available()
    {after}
    print(json.dumps(out))
"""
# what can be forced without a GPU: torch believes a CUDA build sees one GPU through NVML
FAKE_CUDA = ("torch.backends.cuda.is_built = lambda: True; "
             "torch.cuda._device_count_nvml = lambda: 1")


def test_a_gpu_host_keeps_its_accelerator():
    got, _ = _json(SIMULATE.format(patch=FAKE_CUDA, after=""), env=OFF)
    assert got == {"backend": "privateuseone", "neuron_module": False, "torchneuron": False,
                   "shim": False, "accelerator": "None", "hf": False}


def test_a_gpu_host_opts_in_by_import_or_environment():
    after = ("import torchneuron; out['opted_in'] = [torch._C._get_privateuse1_backend_name(), "
             "(torch.arange(3, device='neuron') + 1).cpu().tolist()]")
    got, _ = _json(SIMULATE.format(patch=FAKE_CUDA, after=after), env=OFF)
    assert got["backend"] == "privateuseone" and got["opted_in"] == ["neuron", [1, 2, 3]]
    env = dict(OFF, TORCHNEURON_AUTOLOAD="1")
    got, _ = _json(SIMULATE.format(patch=FAKE_CUDA, after=""), env=env)
    assert got["backend"] == "neuron" and got["hf"] is True


@pytest.mark.parametrize("value,gpu,registers", [
    ("auto", False, True), ("auto", True, False), ("", True, False),
    ("1", True, True), ("on", True, True), ("0", False, False), ("off", False, False),
])
def test_autoload_decision(value, gpu, registers):
    env = dict(OFF, TORCHNEURON_AUTOLOAD=value)
    got, _ = _json(SIMULATE.format(patch=FAKE_CUDA if gpu else "", after=""), env=env)
    assert (got["backend"] == "neuron") is registers
    assert got["torchneuron"] is registers  # a declined autoload imports nothing of ours


# ---------------------------------------------------------------- 4. nothing breaks import torch
def test_a_malformed_setting_is_a_warning_at_import_and_an_error_at_use():
    env = dict(BASE, TORCHNEURON_EXECUTABLE_CACHE="lots", TORCHNEURON_EXECUTABLE_CACHES="1")
    r = _run("import torch; print(torch.arange(3).sum().item())", env=env)
    assert r.stdout.strip() == "3"
    assert "TORCHNEURON_EXECUTABLE_CACHE='lots' is not valid: expected an integer" in r.stderr
    assert ("TORCHNEURON_EXECUTABLE_CACHES is not a torchneuron setting (ignored); did you "
            "mean") in r.stderr
    r = _run("import torch; torch.ones(2, device='neuron') + 1", env=env, ok=False)
    assert r.returncode != 0
    assert "ValueError: TORCHNEURON_EXECUTABLE_CACHE='lots' is not valid" in r.stderr


@pytest.mark.parametrize("name,value", [
    ("TORCHNEURON_AUTOLOAD", "maybe"), ("TORCHNEURON_NATIVE", "perhaps"),
    ("TORCHNEURON_MEMORY_LIMIT", "lots"), ("TORCHNEURON_FALLBACK", "loud"),
    ("TORCHNEURON_MAPS_FRACTION", "half"), ("TORCHNEURON_COMPILE_CACHE_MAX_SIZE", "big"),
])
def test_no_setting_can_fail_import_torch(name, value):
    r = _run("import torch; print(torch.ones(2).sum().item())", env=dict(BASE, **{name: value}))
    assert r.stdout.strip() == "2.0"
    assert f"{name}={value!r}" in r.stderr  # named, with the bad value


def test_a_failure_inside_the_autoload_is_a_warning():
    r = _run("""
        import warnings, torch
        torch.utils.rename_privateuse1_backend("other")  # PrivateUse1 taken: cannot register
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            torch._import_device_backends()
        print([str(x.message) for x in w])
    """, env=OFF)
    assert "the neuron device was not registered at import torch" in r.stdout
    assert "already registered as 'other'" in r.stdout


def test_config_parsing_names_the_variable(monkeypatch):
    from torchneuron import config

    monkeypatch.setenv("TORCHNEURON_FUSE_MAX_OPS", "many")
    with pytest.raises(ValueError, match=r"TORCHNEURON_FUSE_MAX_OPS='many' is not valid: "
                                         r"expected an integer"):
        config.get("TORCHNEURON_FUSE_MAX_OPS")
    monkeypatch.setenv("TORCHNEURON_EAGER", "lazy")
    with pytest.raises(ValueError, match=r"expected one of 'op', 'fused'"):
        config.get("TORCHNEURON_EAGER")
    assert any("TORCHNEURON_EAGER='lazy'" in p for p in config.problems())
    monkeypatch.setenv("TORCHNEURON_EAGER", "FUSED")
    assert config.get("TORCHNEURON_EAGER") == "fused"


# ---------------------------------------------------------------- 5. the torch_neuronx name
def test_no_file_of_torchneuron_is_named_torch_neuronx():
    import importlib.metadata as md

    files = md.distribution("torchneuron").files or []
    assert not [f for f in files if str(f).startswith("torch_neuronx")]
    got, _ = _json("""
        import json, torch, torch_neuronx
        print(json.dumps({"ours": torch_neuronx.TORCHNEURON, "file": getattr(
            torch_neuronx, "__file__", None)}))
    """)
    assert got == {"ours": True, "file": None}


def test_the_c10d_backend_name_works_before_the_first_use(tmp_path):
    """backend="neuron" names the group before any tensor met the device; making the
    group loads the device."""
    got, _ = _json(f"""
        import json, datetime, torch, torch.distributed as dist
        import sys
        before = "jax" in sys.modules
        store = dist.FileStore({str(tmp_path / "store")!r}, 1)
        dist.init_process_group("neuron", store=store, rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=60))
        t = torch.arange(4.0, device="neuron")
        dist.all_reduce(t)
        out = {{"group": type(dist.distributed_c10d._get_default_group()).__name__,
               "value": t.cpu().tolist(), "before": before,
               "map": dist.Backend.default_device_backend_map.get("neuron")}}
        dist.destroy_process_group()
        print(json.dumps(out))
    """)
    assert got == {"group": "NeuronProcessGroup", "value": [0.0, 1.0, 2.0, 3.0],
                   "before": False, "map": "neuron"}


def test_our_own_shim_is_not_mistaken_for_aws_package():
    """After ``import torchneuron`` (whose finder answers ``torch_neuronx``), the autoload
    decision still sees no AWS package."""
    got, _ = _json("""
        import json, torchneuron, torch_neuronx
        from _torchneuron_autoload import decision
        print(json.dumps(list(decision())))
    """, env=dict(BASE, TORCHNEURON_AUTOLOAD="auto"))
    assert got == [True, "auto"]


# ---------------------------------------------------------------- 6. the command
def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "_torchneuron_cli", *args], capture_output=True,
                          text=True, env=env or BASE, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("args,rc,out,err", [
    (["--help"], 0, "usage: torchneuron [--version] [--help] <command>", ""),
    ([], 0, "commands:", ""),
    (["--version"], 0, "torchneuron 0.1.0", ""),
    (["-V"], 0, "torchneuron 0.1.0", ""),
    (["bogus"], 2, "", "torchneuron: error: unknown command 'bogus'"),
])
def test_the_command_answers_without_importing_torch(args, rc, out, err):
    code = ("import sys, _torchneuron_cli as c; rc = c.main(%r); "
            "print('IMPORTED', sorted(m for m in ('torch', 'torchneuron', 'jax') "
            "if m in sys.modules)); sys.exit(rc)" % (args,))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=BASE,
                       timeout=120, cwd=ROOT)
    assert r.returncode == rc, r.stderr
    assert out in r.stdout and err in r.stderr
    assert "IMPORTED []" in r.stdout


def test_version_is_the_package_version():
    import torchneuron

    r = _cli("--version")
    assert r.stdout.strip() == f"torchneuron {torchneuron.__version__}"


def test_a_missing_optional_dependency_names_the_extra(tmp_path):
    """A command whose optional dependency is absent says which and how to install it
    (a stand-in that hides hypothesis from the finder)."""
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""
        import importlib.abc, sys
        class Hide(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "hypothesis" or name.startswith("hypothesis."):
                    raise ModuleNotFoundError(name)
                return None
        sys.meta_path.insert(0, Hide())
    """))
    env = dict(BASE, PYTHONPATH=str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "_torchneuron_cli", "fuzz"], capture_output=True,
                       text=True, env=env, timeout=120, cwd=ROOT)
    assert r.returncode == 2
    assert "torchneuron fuzz needs hypothesis" in r.stderr
    assert "pip install 'torchneuron[fuzz]'" in r.stderr


def test_python_m_torchneuron_runs_the_command():
    r = subprocess.run([sys.executable, "-m", "torchneuron", "info"], capture_output=True,
                       text=True, env=BASE, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(None, 1) for line in r.stdout.splitlines() if " " in line)
    assert lines["torchneuron"] == "0.1.0"
    assert lines["hooks"].startswith(("native (built", "python ("))
    assert lines["autoload"].startswith("registers neuron at import torch (auto)")
    assert lines["accelerator"] == "neuron"


def test_ops_prints_the_page_outside_a_checkout(monkeypatch, capsys):
    """An installed wheel has no docs/ to write: ``torchneuron ops`` prints the page (the
    same text the checkout's docs/native-ops.md holds)."""
    from torchneuron.tools import conformance, native_ops

    monkeypatch.setattr(conformance, "checkout", lambda: None)
    assert native_ops.main([]) == 0
    printed = capsys.readouterr().out
    with open(os.path.join(ROOT, "docs", "native-ops.md")) as f:
        assert printed == f.read()
    with pytest.raises(SystemExit):
        native_ops.main(["--check"])  # nothing to compare with
    assert "--check needs the page to compare with" in capsys.readouterr().err


def test_the_gates_data_ships_inside_the_package():
    from torchneuron.tools import conformance, fuzz, model_scan

    pkg = os.path.dirname(os.path.abspath(conformance.__file__))
    for path in (conformance.DEFAULT_BASELINE, model_scan.DEFAULT_BASELINE,
                 fuzz.DEFAULT_ALLOWLIST):
        assert os.path.dirname(path) == os.path.join(pkg, "data") and os.path.getsize(path)
    assert conformance.load_baseline(conformance.DEFAULT_BASELINE)
    assert "data/*.csv" in open(os.path.join(ROOT, "pyproject.toml")).read()


def test_a_gate_sample_must_name_gate_units(capsys):
    from torchneuron.tools import conformance, model_scan

    with pytest.raises(ValueError, match="not in the conformance gate's sample: no_such_op"):
        conformance.gate_units(conformance.catalog(), ["add", "no_such_op"])
    units = conformance.gate_units(conformance.catalog(), ["add"])
    assert {u[0] for u in units} == {"add"} and len(units) == 3  # float32, bfloat16, int64
    with pytest.raises(ValueError, match="matches none of the gate's models"):
        model_scan.run_gate(only="no_such_model")
    with pytest.raises(SystemExit):
        model_scan.main(["--gate", "--only", "bert", "--update-baseline"])
    assert "rewrites the whole baseline" in capsys.readouterr().err

"""The torch-mlir frontend: ``torch.compile(m, backend="neuron", options={"frontend": "torch-mlir"})``.

AOTAutograd's functional graphs (forward, backward, inference) are imported by
torch-mlir's FX importer (``torch_mlir.fx.stateless_fx_import``, the graph-level
form of ``torch_mlir.fx.export_and_import``) and lowered by torch-mlir to
StableHLO; the text is compiled by the same PJRT client the device uses
(``client.compile_and_load``) and run on the inputs' device buffers.

Differences from the default frontend: input mutations go back through
AOTAutograd's runtime copies (one eager ``copy_`` per mutated input) rather
than inside the executable; random ops use torch-mlir's lowering, not the
device generator; dynamic shapes are specialised by re-tracing per shape; the
persistent compilation cache is not used.  An op torch-mlir cannot lower
raises an error naming it.

Needs the optional dependency: ``pip install 'torchneuron[torch-mlir]'``.
"""
from __future__ import annotations

import copy
import logging
import os
import re
import tempfile
import time

import torch

from .. import runtime, storage
from . import graph as _graph

log = logging.getLogger("torchneuron.compile")
Tensor = torch.Tensor


def _torch_mlir():
    try:
        from torch_mlir import fx
        from torch_mlir.compiler_utils import OutputType
    except ImportError as e:
        raise ImportError(
            "torch.compile(backend='neuron', options={'frontend': 'torch-mlir'}) needs torch-mlir, "
            "an optional dependency: pip install 'torchneuron[torch-mlir]' (or pip install "
            f"torch-mlir) ({e})") from None
    return fx, OutputType


class TorchMlirLoweringError(RuntimeError):
    """torch-mlir could not lower an op of the graph to StableHLO."""


def compile_graph(gm, example_inputs, name, options):
    _torch_mlir()  # fail early, with the install hint
    from torch._dynamo.backends.common import aot_autograd

    def compiler(kind):
        def fn(g, ex):
            return MlirGraph(g, f"{name}_{kind}_torch_mlir")

        return fn

    fx, _ = _torch_mlir()
    try:  # the decompositions torch-mlir's own export_and_import applies
        decomps = fx.get_decomposition_table()
    except Exception:  # noqa: BLE001
        decomps = None
    be = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                      inference_compiler=compiler("inference"), decompositions=decomps,
                      keep_inference_input_mutations=False)
    return be(gm, example_inputs)


def _fd_capture(fn):
    """Run fn() with the process's stderr (fd 2) captured: MLIR prints diagnostics there."""
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            return fn(), None
        except Exception as e:  # noqa: BLE001
            os.dup2(saved, 2)
            tmp.seek(0)
            return None, (e, tmp.read().decode("utf-8", "replace"))
        finally:
            os.dup2(saved, 2)
            os.close(saved)


_OPERATOR = re.compile(r"""failed to legalize operation 'torch\.operator'.*?name = "([^"]+)\"""")
_LEGALIZE = re.compile(r"failed to legalize operation '([^']+)'")


def _failed_op(diag: str):
    m = _OPERATOR.search(diag) or _LEGALIZE.search(diag)
    if not m:
        return None
    name = m.group(1)
    if name.startswith("torch."):
        name = name[len("torch."):]
    ns, _, op = name.partition(".")
    return f"{ns}::{op}" if op else name


def _isolate(gm, fx, OutputType):
    """The first op of gm that torch-mlir cannot lower on its own (None if each can)."""
    import operator

    tried = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if not isinstance(node.target, torch._ops.OpOverload) or node.target in tried:
            continue
        tried.add(node.target)
        g = torch.fx.Graph()
        env = {}

        def arg(n):
            if n not in env:
                p = g.placeholder(n.name)
                p.meta = dict(n.meta)
                env[n] = p
            return env[n]

        new = g.node_copy(node, arg)
        val = node.meta.get("val")
        if isinstance(val, (list, tuple)):
            outs = []
            for i, v in enumerate(val):
                gi = g.call_function(operator.getitem, (new, i))
                gi.meta["val"] = v
                outs.append(gi)
            g.output(tuple(outs))
        else:
            g.output(new)
        one = torch.fx.GraphModule(torch.nn.Module(), g)
        _, err = _fd_capture(lambda: fx.stateless_fx_import(one, output_type=OutputType.STABLEHLO))
        if err is not None:
            return node.target.name()
    return None


class MlirGraph:
    """An AOTAutograd graph compiled through torch-mlir (boxed calling convention)."""

    def __init__(self, gm, name):
        self._boxed_call = True
        self.gm = gm
        self.name = name
        self.cache = runtime.JitCache("compiled graphs (torch-mlir)", _graph.CACHE_SIZE)
        out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        leaves = []
        self.out_tmpl = _graph._flatten_out(out.args[0], leaves)
        self.out_leaves = leaves
        self.symbolic = _graph._static_metas(gm) is None
        _graph.STATS.graphs += 1

    def __call__(self, args):
        args = list(args)
        key = tuple((tuple(a.shape), a.dtype, a.device.type) if isinstance(a, Tensor) else
                    ("v", a) for a in args)
        ent = self.cache.get(key)
        if ent is None:
            ent = self._build(args)
            if len(self.cache) >= _graph.CACHE_SIZE:
                _graph.STATS.evictions += 1
            self.cache.put(key, ent)
        else:
            _graph.STATS.cache_hits += 1
        exe, tensor_inputs, outs, index = ent

        arrays = []
        for i in tensor_inputs:
            a = args[i]
            if a.device.type == "neuron":
                arrays.append(storage.materialize(a))
            else:
                arrays.append(storage.to_device_array(a, index))
        res = exe.execute(arrays)
        values = []
        k = 0
        for p in outs:
            if p is None:
                values.append(storage.from_array(res[k], index))
                k += 1
            else:
                values.append(p[0])
        return _unflatten(self.out_tmpl, values)

    def _build(self, args):
        fx, OutputType = _torch_mlir()
        t0 = time.perf_counter()
        gm = self.gm
        tensor_inputs = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        if self.symbolic or len(tensor_inputs) != len(args):
            # torch-mlir + XLA want static shapes and tensor inputs: re-trace for these
            # shapes, with the Python scalars (symbolic sizes) as constants
            from torch.fx.experimental.proxy_tensor import make_fx

            def run(*ts):
                full = list(args)
                for i, t in zip(tensor_inputs, ts):
                    full[i] = t
                return torch.fx.Interpreter(self.gm).run(*full)

            gm = make_fx(run, tracing_mode="fake")(*[args[i] for i in tensor_inputs])
        index = next((a.device.index or 0 for a in args
                      if isinstance(a, Tensor) and a.device.type == "neuron"), 0)
        # StableHLO functions return tensors only: import a copy that returns just the
        # tensor leaves (None gradients, symbolic sizes are put back after the call)
        out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        leaves = []
        _graph._flatten_out(out_node.args[0], leaves)
        outs = []
        for leaf in leaves:
            v = leaf.meta.get("val") if isinstance(leaf, torch.fx.Node) else leaf
            outs.append(None if isinstance(v, Tensor) else (v,))
        tensor_leaves = [leaf for leaf, p in zip(leaves, outs) if p is None]
        if len(tensor_leaves) != len(leaves) or not isinstance(out_node.args[0], tuple):
            gm = copy.deepcopy(gm)
            out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
            new_leaves = []
            _graph._flatten_out(out_node.args[0], new_leaves)
            out_node.args = (tuple(lf for lf, p in zip(new_leaves, outs) if p is None),)
            gm.graph.eliminate_dead_code()
            gm.recompile()
        module, err = _fd_capture(lambda: fx.stateless_fx_import(
            gm, output_type=OutputType.STABLEHLO, model_name="main"))
        if err is not None:
            e, diag = err
            op = _failed_op(diag + "\n" + str(e))
            if op is None or not op.startswith(("aten::", "prims::")):
                op = _isolate(gm, fx, OutputType)
            if op is not None:
                raise TorchMlirLoweringError(
                    f"torch-mlir frontend: torch-mlir cannot lower {op} to StableHLO (in graph "
                    f"{self.name}); use the default frontend for this model") from None
            first = next((ln for ln in diag.splitlines() if "error" in ln), None) or \
                (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise TorchMlirLoweringError(
                f"torch-mlir frontend: torch-mlir could not lower graph {self.name} to "
                f"StableHLO: {first[:500]}") from e
        text = str(module)
        dev = runtime.jax_device(index)
        from jax._src.lib import xla_client as xc

        exe = dev.client.compile_and_load(text, xc.DeviceList((dev,)), xc.CompileOptions())
        dt = time.perf_counter() - t0
        _graph.STATS.compilations += 1
        _graph.STATS.compile_time_s += dt
        log.info("torchneuron.compile: compiled %s with torch-mlir: %d inputs, %d outputs in %.2fs",
                 self.name, len(args), len(outs), dt)
        from . import dump

        d = dump.dump_dir()
        if d is not None:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, self.name + ".mlir"), "w") as f:
                f.write(text)
            with open(os.path.join(d, "summary.txt"), "a") as f:
                f.write(f"{self.name}: frontend=torch-mlir inputs={len(args)} "
                        f"outputs={len(outs)} compile_s={dt:.3f}\n")
        return exe, tensor_inputs, outs, index


def _unflatten(tmpl, values):
    """The output structure (compile/graph.py's _flatten_out template) with its leaves."""
    if isinstance(tmpl, int):
        return values[tmpl]
    kind, parts = tmpl
    return kind(_unflatten(p, values) for p in parts)

"""Shape buckets for dynamic compiled graphs: one XLA executable serves a range of sizes.

A graph Dynamo captured with symbolic sizes (``torch.compile(dynamic=True)``,
``mark_dynamic``, or a dimension Dynamo saw change) is compiled per concrete input
signature.  With buckets, a symbolic size ``s`` is rounded up to a size class ``S``
(a power of two, at least ``TORCHNEURON_COMPILE_BUCKETS``): the inputs are padded with
zeros at the end of every dimension whose size involves ``s``, the graph runs at size
``S`` (its executable shared by every ``s`` of the class), and each output is cut back
to its true extent (a fresh tensor with PyTorch's strides).

That is exact only for graphs in which every element of the true region of an output
depends on the true region of the inputs alone ("prefix-causal" in every bucketed
symbol).  :func:`analyse` proves it node by node, or says why not (the graph is then
compiled per shape, as without buckets):

- elementwise ops (``torch.Tag.pointwise``), copies, and views that keep each padded
  dimension whole (a reshape may merge or split dimensions as long as the padded
  factors stay in order);
- reductions, norms and softmaxes over dimensions that are not padded;
- matmuls whose contraction dimension is not padded;
- attention: padded keys are masked out of every score with the true key count, an
  extra runtime input of the bucketed graph (or, causal with queries padded by the same
  symbol, never reached by a true query); their keys and values are zeroed;
- ``cat`` along a padded dimension: the pieces after a padded one are written again
  right after its true end (a growing key/value cache); ``slice`` of a padded dimension
  that keeps it whole, or a fixed window inside it; the last k positions (``x[:, -1]``)
  read at the true end; ``embedding``; ``arange(s)``;
- a symbolic size used only as a size (``view``'s shape, ``arange``'s end, ``full``'s
  size), never as a value.

Anything else that sees a padded dimension or a bucketed size keeps the graph exact:
a reduction over the sequence, ``x[:, ::2]``, a boolean attention mask, a graph that
mutates its inputs, returns an input, a size or outputs sharing storage, or draws
random numbers.  Only inference graphs are bucketed
(forward graphs of training save activations for backward at their true sizes).
"""
from __future__ import annotations

import logging
import math
import operator

import jax.numpy as jnp
import numpy as np
import sympy
import torch

from .. import config, interpret, runtime, storage
from ..storage import index_dtype, size_class

aten = torch.ops.aten
Tensor = torch.Tensor
log = logging.getLogger("torchneuron.compile")


def minimum() -> int:
    v = config.get("TORCHNEURON_COMPILE_BUCKETS")
    if v < 0:
        raise ValueError(f"TORCHNEURON_COMPILE_BUCKETS must be 0 (no buckets) or the smallest "
                         f"bucket size, a positive integer; got {v}")
    return v


def _expr(x):
    if isinstance(x, torch.SymInt):
        return x.node.expr
    if isinstance(x, (int, bool)):
        return sympy.Integer(int(x))
    return None


def _syms(x):
    e = _expr(x)
    return e.free_symbols if e is not None else set()


# ---------------------------------------------------------------- op tables
_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
_SAME_DIMS = {  # ops that move, copy or insert dimensions but never merge or reduce
    aten.clone.default, aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default,
    aten._to_copy.default, aten.contiguous.default, aten.permute.default,
    aten.transpose.int, aten.t.default, aten.unsqueeze.default, aten.squeeze.dim,
    aten.squeeze.dims, aten.squeeze.default, aten.expand.default, aten.expand_as.default,
    torch.ops.prims.convert_element_type.default, aten.stack.default,
    aten.native_dropout.default,
}
# reductions: (dims argument index, keepdim's) -- None dims = all dims
_REDUCE = {
    aten.sum.dim_IntList: 1, aten.mean.dim: 1, aten.amax.default: 1, aten.amin.default: 1,
    aten.max.dim: 1, aten.min.dim: 1, aten.argmax.default: 1, aten.argmin.default: 1,
    aten.var.correction: 1, aten.std.correction: 1, aten.prod.dim_int: 1, aten.any.dim: 1,
    aten.all.dim: 1, aten.logsumexp.default: 1, aten._softmax.default: 1,
    aten._log_softmax.default: 1, aten.softmax.int: 1, aten.log_softmax.int: 1,
    aten.var_mean.correction: 1,
}
_REDUCE_ALL = {aten.sum.default, aten.mean.default, aten.amax.default, aten.max.default,
               aten.min.default, aten.prod.default, aten.any.default, aten.all.default}
_PREFIX = {aten.cumsum.default: 1, aten.cumprod.default: 1}  # along a padded dim: exact
_SDPA = {
    getattr(aten, name).default for name in (
        "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention", "scaled_dot_product_attention",
        "_scaled_dot_product_attention_math", "_scaled_dot_product_fused_attention_overrideable")
    if hasattr(aten, name)}
_SIZE_ARGS = {  # ops whose argument at these positions is a size (a bucketed size is fine)
    aten.view.default: (1,), aten._unsafe_view.default: (1,), aten.reshape.default: (1,),
    aten.expand.default: (1,), aten.arange.default: (0,), aten.arange.start: (1,),
    aten.arange.start_step: (1,), aten.full.default: (0,), aten.zeros.default: (0,),
    aten.ones.default: (0,), aten.empty.memory_format: (0,), aten.new_zeros.default: (1,),
    aten.new_ones.default: (1,), aten.new_empty.default: (1,), aten.new_full.default: (1,),
    aten.empty_strided.default: (0, 1), aten.slice.Tensor: (2, 3), aten.select.int: (2,),
}  # (slice's start and select's index: only as "k from the end", which the rules check)
_SPLITS = {aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int}
# ops whose result views their first argument's storage
_VIEW_OPS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default,
             aten.alias.default, aten.permute.default, aten.transpose.int, aten.t.default,
             aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims,
             aten.squeeze.default, aten.expand.default, aten.slice.Tensor, aten.select.int,
             aten.narrow.default, aten.detach.default, aten.diagonal.default,
             aten.as_strided.default}
_SYM_ARITH = {operator.mul, operator.add, operator.sub, operator.floordiv, operator.neg,
              torch.sym_max, torch.sym_min} | interpret._SYM_SIZE


class Rejected(Exception):
    """The graph is not prefix-causal in a bucketed symbol (the message says where)."""

    def __init__(self, msg, syms=()):
        super().__init__(msg)
        self.syms = set(syms)


class Plan:
    """How a graph is bucketed: the symbols padded, where their values come from."""

    def __init__(self, syms, sources, placeholders, outputs, least, gm, order):
        self.gm = gm                # the graph the buckets run (extra inputs: true sizes)
        self.order = order          # the bucketed symbols in the order of those inputs
        self.syms = syms            # the bucketed symbols
        self.sources = sources      # [(arg index, dim or None, symbol)]
        self.placeholders = placeholders  # [(arg index, dims exprs or expr)]
        self.outputs = outputs      # per output leaf: (shape exprs, stride exprs) or None
        self.least = least

    def bind(self, args):
        """(the bucketed graph's arguments, the true sizes) for a call, or None when the
        sizes do not fit the plan (the call then runs exactly)."""
        vals = {}
        for i, d, s in self.sources:
            a = args[i]
            v = int(a.shape[d]) if d is not None else a
            if not isinstance(v, int) or vals.setdefault(s, v) != v:
                return None
        if any(s not in vals for s in self.syms):
            return None
        bucket = dict(vals)
        for s in self.syms:
            bucket[s] = size_class(vals[s], self.least)
        padded = list(args)
        for i, spec in self.placeholders:
            a = args[i]
            if isinstance(spec, list):  # a tensor: pad the dimensions that grow
                pads = []
                for d in reversed(range(len(spec))):
                    want = int(spec[d].xreplace(bucket))
                    have = int(a.shape[d])
                    if want < have:
                        return None
                    pads += [0, want - have]
                while pads and pads[-1] == 0:
                    pads = pads[:-2]
                # from a bucket-sized cell (an earlier cut), even when no dimension
                # grows: the graph's executable is keyed on its inputs' cell lengths
                x = _expand(a, [int(e.xreplace(bucket)) for e in spec])
                if x is not None:
                    padded[i] = x
                elif pads:  # one executable per true shape
                    padded[i] = torch.constant_pad_nd(a, pads, 0)
            else:
                padded[i] = int(spec.xreplace(bucket))
        padded += [torch.tensor(vals[s], dtype=torch.int64) for s in self.order]
        return padded, vals

    def cut(self, outs, vals):
        """The outputs at their true sizes."""
        res = list(outs)
        for k, spec in enumerate(self.outputs):
            if spec is None or not isinstance(res[k], Tensor):
                continue
            shape_e, stride_e = spec
            shape = [int(e.xreplace(vals)) for e in shape_e]
            t = res[k]
            if list(t.shape) == shape:
                continue
            strides = [int(e.xreplace(vals)) for e in stride_e]
            if all(n <= 1 or a == b for n, a, b
                   in zip(shape, storage.contiguous_strides(shape), strides)):
                out = _compact(t, shape)
                if out is not None:
                    res[k] = out
                    continue
            for d, n in enumerate(shape):
                if n != t.shape[d]:
                    t = t.narrow(d, 0, n)
            out = t.clone(memory_format=torch.contiguous_format)  # one executable
            if any(n > 1 and a != b for n, a, b in zip(shape, out.stride(), strides)):
                out = torch.empty_strided(shape, strides, dtype=t.dtype,
                                          device=t.device).copy_(t)
            res[k] = out
        return type(outs)(res) if isinstance(outs, tuple) else res


# Bucket-sized cells.  A bucketed output cut back to its true extent is a contiguous
# tensor whose cell keeps the bucket's length: its flat array holds the true elements
# first, in order, then unused room (the storage's size is the true one).  The cut and
# the pad of such a tensor when it comes back as an input (a growing key/value cache)
# are then one executable per bucket, the true sizes runtime values, instead of one per
# true shape.
_moves = runtime.JitCache("bucket cut and pad", runtime.SMALL_FNS_MAX)


def _compact(t, shape):
    """`t` (a padded output) cut to `shape`, in a cell of t's length, or None."""
    cell = storage.whole_cell(t, prefix=True)
    if cell is None or cell.numel != t.numel() or not t.numel():
        return None
    padded = tuple(t.shape)
    key = ("cut", cell.numel, cell.dt, padded)
    f = _moves.get(key)
    if f is None:
        it = index_dtype(cell.numel)
        pstr = storage.contiguous_strides(padded)

        def cut(a, true):  # position p of the true layout reads padded[coords(p)]
            p = jnp.arange(a.shape[0], dtype=it)
            rem, src = p, jnp.zeros_like(p)
            for d in reversed(range(len(padded))):
                n = jnp.maximum(true[d], 1)
                src = src + (rem % n) * pstr[d]
                rem = rem // n
            inside = p < jnp.prod(true)
            return jnp.where(inside, a[jnp.where(inside, src, 0)], jnp.zeros((), a.dtype))

        f = _moves.put(key, runtime.jit(cut))
    true = np.asarray(shape, dtype=index_dtype(cell.numel))
    index = t.device.index or 0
    room = cell.numel * t.element_size()
    storage.check_room(index, room)
    return storage.make_tensor(f(cell.arr, true), t.dtype, tuple(shape),
                               storage.contiguous_strides(shape), 0, index,
                               math.prod(shape) * t.element_size(), room)


def _expand(a, padded):
    """`a` zero-padded to `padded` from a bucket-sized cell (one executable per cell
    length and bucket), or None when `a` is its cell's exact size or not contiguous."""
    cell = storage.whole_cell(a, prefix=True)
    if cell is None or cell.numel == a.numel():
        return None
    padded = tuple(padded)
    key = ("pad", cell.numel, cell.dt, padded)
    f = _moves.get(key)
    if f is None:
        total = math.prod(padded)
        it = index_dtype(max(total, cell.numel))
        pstr = storage.contiguous_strides(padded)

        def pad(x, true):  # padded position q reads x at its place in the true layout
            q = jnp.arange(total, dtype=it)
            src, inside, step = jnp.zeros_like(q), jnp.ones(q.shape, bool), 1
            for d in reversed(range(len(padded))):
                c = (q // pstr[d]) % padded[d]
                inside = inside & (c < true[d])
                src = src + c * step
                step = step * true[d]
            return jnp.where(inside, x[jnp.where(inside, src, 0)], jnp.zeros((), x.dtype))

        f = _moves.put(key, runtime.jit(pad))
    true = np.asarray(a.shape, dtype=index_dtype(max(math.prod(padded), cell.numel)))
    index = a.device.index or 0
    nbytes = math.prod(padded) * a.element_size()
    storage.check_room(index, nbytes)
    return storage.make_tensor(f(cell.arr, true), a.dtype, padded,
                               storage.contiguous_strides(padded), 0, index, nbytes)


def plan(gm, kind, least=None):
    """A :class:`Plan` for graph `gm`, or a string saying why it is compiled per shape."""
    least = minimum() if least is None else least
    if not least:
        return "buckets are off (TORCHNEURON_COMPILE_BUCKETS=0)"
    if kind != "inference":
        return f"a {kind} graph (only inference graphs are bucketed)"
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    cands = set()
    for n in phs:
        v = n.meta.get("val")
        if isinstance(v, Tensor):
            for s in v.shape:
                cands |= _syms(s)
        elif isinstance(v, torch.SymInt):
            cands |= _syms(v)
    if not cands:
        return "no symbolic sizes"
    syms = set(cands)
    reasons = []
    masks = []
    try:
        while syms:
            try:
                masks = analyse(gm, syms)
                break
            except Rejected as e:
                reasons.append(str(e))
                bad = e.syms & syms
                if not bad:
                    return "; ".join(reasons)
                syms -= bad
        if not syms:
            return "; ".join(reasons)
        return _make_plan(gm, phs, syms, least, masks)
    except Exception as e:  # noqa: BLE001  (a graph the analysis does not understand)
        log.debug("bucket analysis failed", exc_info=True)
        return f"the bucket analysis failed ({type(e).__name__}: {e})"


def _make_plan(gm, phs, syms, least, masks):
    sources = []
    placeholders = []
    for i, n in enumerate(phs):
        v = n.meta.get("val")
        if isinstance(v, Tensor):
            exprs = [_expr(s) for s in v.shape]
            for d, e in enumerate(exprs):
                if isinstance(e, sympy.Symbol):
                    sources.append((i, d, e))
            if any(e.free_symbols & syms for e in exprs):
                placeholders.append((i, exprs))
        elif isinstance(v, torch.SymInt):
            e = _expr(v)
            if isinstance(e, sympy.Symbol):
                sources.append((i, None, e))
            if e.free_symbols & syms:
                placeholders.append((i, e))
    have = {s for _, _, s in sources}
    if not syms <= have:
        return f"sizes {sorted(map(str, syms - have))} come from no input dimension"
    out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    outputs = []
    if not isinstance(out_node.args[0], (list, tuple)):
        return "a graph that returns no tuple"
    for leaf in out_node.args[0]:
        v = leaf.meta.get("val") if isinstance(leaf, torch.fx.Node) else None
        if isinstance(v, Tensor) and any(_syms(s) & syms for s in v.shape):
            outputs.append(([_expr(s) for s in v.shape], [_expr(s) for s in v.stride()]))
        else:
            outputs.append(None)
    order = sorted(syms, key=str)
    return Plan(syms, sources, placeholders, outputs, least, _rewrite(gm, order, masks), order)


def _rewrite(gm, order, masks):
    """A copy of `gm` with the true value of each bucketed symbol as an extra input (a
    0-d int64 CPU tensor, in `order`) and the fixes `analyse` asked for: attention's
    padded keys masked and zeroed, cat's later pieces written at the true end, the last
    k positions read there."""
    g = torch.fx.Graph()
    env = {}
    out = g.graph_copy(gm.graph, env)
    g.output(out)
    last = [n for n in g.nodes if n.op == "placeholder"][-1]
    trues = {}
    with g.inserting_after(last):
        for s in reversed(order):
            trues[s] = g.placeholder(f"bucket_true_{s}")
    for fix in masks:
        kind, n = fix[0], env[fix[1]]
        node = fix[1]
        dev = _device_of(node)
        if kind == "cat":
            _, _, d, k, sym, off = fix
            _rewrite_cat(g, n, d, k, trues[sym], off, dev)
            continue
        if kind == "value":  # the true size, a 0-d tensor, for the size used as a value
            _, _, k, sym, off = fix
            with g.inserting_before(n):
                v = _true_of(g, trues, sym, off)
            n.args = (*n.args[:k], v, *n.args[k + 1:])
            continue
        if kind == "reduce":  # the padding filled with the reduction's neutral element
            _, _, pads, neutral, mean = fix
            x = n.args[0]
            ndim = node.args[0].meta["val"].dim()
            with g.inserting_before(n):
                for d, sym, off in pads:
                    x = _mask_along(g, x, ndim, d, _true_of(g, trues, sym, off), dev, neutral)
            n.args = (x, *n.args[1:])
            if mean is not None:  # the masked sum over the true count
                named = _named(n)
                true_d = {d: (sym, off) for d, sym, off in pads}
                with g.inserting_before(n.next):
                    total = g.call_function(
                        aten.sum.dim_IntList, (x, mean, bool(named.get("keepdim", False))),
                        {"dtype": named.get("dtype")})
                    count = None
                    for d in mean:
                        c = _true_of(g, trues, *true_d[d]) if d in true_d else \
                            g.call_function(aten.sym_size.int, (x, d))
                        count = c if count is None else \
                            g.call_function(aten.mul.Tensor, (count, c))
                    r = g.call_function(aten.div.Tensor, (total, count))
                n.replace_all_uses_with(r)
                g.erase_node(n)
            continue
        if kind == "contract":  # both operands zeroed along the contraction
            _, _, (a, da), (b, db), sym, off = fix
            ia, ib = (1, 2) if node.target in (aten.addmm.default, aten.baddbmm.default) \
                else (0, 1)
            args = list(n.args)
            with g.inserting_before(n):
                true = _true_of(g, trues, sym, off)
                args[ia] = _mask_along(g, args[ia], a.meta["val"].dim(), da, true, dev, 0)
                args[ib] = _mask_along(g, args[ib], b.meta["val"].dim(), db, true, dev, 0)
            n.args = tuple(args)
            continue
        if kind in ("tail", "pick"):
            _, _, d, k, sym, off = fix
            x = n.args[0]
            with g.inserting_before(n):
                first = _true_of(g, trues, sym, off - k)
                ar = g.call_function(aten.arange.default, (k if kind == "tail" else 1,),
                                     {"dtype": torch.int64, "device": dev})
                idx = g.call_function(aten.add.Tensor, (ar, first))
                r = g.call_function(aten.index_select.default, (x, d, idx))
                if kind == "pick":
                    r = g.call_function(aten.squeeze.dim, (r, d))
            n.replace_all_uses_with(r)
            g.erase_node(n)
            continue
        _, _, kd, sym, off = fix
        names = [a.name for a in node.target._schema.arguments]
        args = list(n.args)
        kwargs = dict(n.kwargs)

        def get(name):
            i = names.index(name)
            return args[i] if i < len(args) else kwargs.get(name)

        def put(name, v):
            i = names.index(name)
            if i < len(args):
                args[i] = v
            else:
                kwargs[name] = v

        with g.inserting_before(n):
            size, pad = _padding(g, get("key"), kd, _true_of(g, trues, sym, off), dev)
            col = g.call_function(aten.view.default, (pad, [size, 1]))
            for name in ("key", "value"):  # zeroed: no infinity there meets a zero weight
                put(name, g.call_function(aten.masked_fill.Scalar, (get(name), col, 0)))
            if kind == "mask":  # the padded keys out of every score
                mname = "attn_mask" if "attn_mask" in names else "attn_bias"
                old = get(mname)
                dtype = node.meta["val"][0].dtype if isinstance(node.meta.get("val"), tuple) \
                    else node.meta["val"].dtype
                if old is None:
                    z = g.call_function(aten.zeros.default, ([size],),
                                        {"dtype": dtype, "device": dev})
                    new = g.call_function(aten.masked_fill.Scalar, (z, pad, float("-inf")))
                else:  # a boolean mask (True: attend) loses the padded keys too
                    ov = old.meta.get("val") if isinstance(old, torch.fx.Node) else old
                    fill_v = False if getattr(ov, "dtype", None) == torch.bool else float("-inf")
                    new = g.call_function(aten.masked_fill.Scalar, (old, pad, fill_v))
                put(mname, new)
        n.args = tuple(args)
        n.kwargs = kwargs
    g.lint()
    return torch.fx.GraphModule(gm, g)


def _device_of(node):
    v = node.meta.get("val")
    v = v[0] if isinstance(v, (tuple, list)) else v
    return v.device


def _rewrite_cat(g, n, d, k, true_sym, off, dev):
    """cat node `n` along `d` with piece `k` padded: the pieces after it are written
    again right after its true end (index_copy at a runtime offset)."""
    pieces = list(n.args[0])
    made = []

    def call(*a, **kw):
        x = g.call_function(*a, **kw)
        made.append(x)
        return x

    with g.inserting_before(n.next):
        before = [call(aten.sym_size.int, (p, d)) for p in pieces[:k]]
        start = true_sym if not off else call(aten.add.Tensor, (true_sym, off))
        for b in before:
            start = call(aten.add.Tensor, (start, b))
        cur = n
        for p in pieces[k + 1:]:
            ln = call(aten.sym_size.int, (p, d))
            ar = call(aten.arange.default, (ln,), {"dtype": torch.int64, "device": dev})
            idx = call(aten.add.Tensor, (ar, start))
            cur = call(aten.index_copy.default, (cur, d, idx, p))
            start = call(aten.add.Tensor, (start, ln))
    keep = set(made)
    n.replace_all_uses_with(cur, delete_user_cb=lambda u: u not in keep)


def _padded(v, syms):
    """The dimensions of tensor `v` whose size involves a bucketed symbol."""
    return [d for d, s in enumerate(v.shape) if _syms(s) & syms]


def _dim(d, n):
    return d + n if d < 0 else d


def _factors(e):
    """A size expression as its ordered factors: integers and symbolic parts."""
    if isinstance(e, sympy.Mul):
        return list(e.as_ordered_factors())
    return [e]


def _regroup(shape_in, shape_out, orders):
    """A reshape as a regrouping of its input's factors: each output dimension takes the
    next factors of the input, in order (an integer factor may split).  Records the
    factor order of each merged dimension in `orders` (a size expression -> its factors,
    as first formed); False when the reshape is not such a regrouping, or forms a size
    already formed in another order."""
    tokens = []
    for s in shape_in:
        tokens += list(orders.get(_expr(s), _factors(_expr(s))))
    tokens = [t for t in tokens if t != 1]
    for s in shape_out:
        e = _expr(s)
        acc = sympy.Integer(1)
        used = []
        while sympy.expand(acc - e) != 0:
            if not tokens:
                return False
            t = tokens[0]
            r = sympy.cancel(e / acc)
            if t.is_Integer and r.is_Integer and t != r and t % r == 0:
                tokens[0] = t // r  # an integer factor split
                t = r
            else:
                tokens.pop(0)
            acc = acc * t
            used.append(t)
        if len(used) > 1:
            if orders.setdefault(e, tuple(used)) != tuple(used):
                return False
    return all(t == 1 for t in tokens)


def _from_end(i, ext, val):
    """k when index `i` is the k-th from the end of a dimension of size `ext` (-k, or a
    size expression ext - k), else None."""
    if isinstance(i, int):
        return -i if i < 0 else None
    if isinstance(i, torch.fx.Node):
        e = _expr(val(i))
        if e is not None:
            k = sympy.expand(ext - e)
            if k.is_Integer and k > 0:
                return int(k)
    return None


def _affine(e, syms):
    """(symbol, offset) when size `e` is one bucketed symbol plus an integer, else None."""
    f = e.free_symbols & syms
    if len(f) != 1:
        return None
    (x,) = f
    off = sympy.expand(e - x)
    return (x, int(off)) if off.is_Integer else None


def _whole(e, syms):
    """A size made by a size argument (arange's end, full's shape) holds its true values
    as a prefix only when it is one bucketed symbol plus a constant."""
    f = e.free_symbols & syms
    if not f:
        return True
    if len(f) > 1:
        return False
    (x,) = f
    return sympy.expand(e - x).free_symbols.isdisjoint(syms)


def _tensor_arg(t, k):
    """Whether positional argument `k` (not the first) of op `t` is typed Tensor (a 0-d
    tensor may stand for the Python number there, with the same type promotion).  A
    keyword argument is never taken: a size passed by keyword stays per shape."""
    try:
        args = t._schema.arguments
    except AttributeError:
        return False
    return isinstance(k, int) and 0 < k < len(args) and str(args[k].type) == "Tensor"


def _named(n):
    """The node's arguments by schema name."""
    t = n.target
    out = {}
    try:
        names = [a.name for a in t._schema.arguments]
    except AttributeError:
        return dict(n.kwargs)
    for name, v in zip(names, n.args):
        out[name] = v
    out.update(n.kwargs)
    return out


def analyse(gm, syms):
    """Raise :class:`Rejected` unless `gm` is prefix-causal in every symbol of `syms`;
    else the rewrites the bucketed graph needs (attention masks, cat offsets)."""
    syms = set(syms)
    alias_in = set()  # nodes that are (views of) padded placeholders

    def val(x):
        return x.meta.get("val") if isinstance(x, torch.fx.Node) else x

    def bsyms(x):
        v = val(x)
        if isinstance(v, Tensor):
            out = set()
            for s in v.shape:
                out |= _syms(s) & syms
            return out
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return v.node.expr.free_symbols & syms
        return set()

    def where(n):
        return f"{n.format_node()}"

    masks = []
    orders = {}  # merged sizes -> their factors in order (see _regroup)
    base = {}  # node -> the node whose storage it views

    for n in gm.graph.nodes:
        if n.op == "placeholder":
            v = val(n)
            if isinstance(v, Tensor) and _padded(v, syms):
                alias_in.add(n)
            continue
        if n.op == "get_attr":
            continue
        if n.op == "output":
            leaves = n.args[0] if isinstance(n.args[0], (list, tuple)) else [n.args[0]]
            seen = {}
            for leaf in leaves:
                if isinstance(leaf, torch.fx.Node) and isinstance(val(leaf), Tensor) \
                        and bsyms(leaf):
                    b = base.get(leaf, leaf)
                    if seen.setdefault(b, leaf) is not leaf:
                        raise Rejected(f"outputs {seen[b].name} and {leaf.name} share "
                                       "storage (cut back, they would not)", bsyms(leaf))
            for leaf in leaves:
                if isinstance(leaf, (list, tuple)):
                    raise Rejected("a nested output", syms)
                if not isinstance(leaf, torch.fx.Node):
                    continue
                if leaf in alias_in:
                    raise Rejected(f"output {leaf.name} is an input padded in "
                                   f"{sorted(map(str, bsyms(leaf)))}", bsyms(leaf))
                if not isinstance(val(leaf), Tensor) and bsyms(leaf):
                    raise Rejected(f"output {leaf.name} is a bucketed size", bsyms(leaf))
            continue
        t = n.target
        if t is operator.getitem:
            if n.args[0] in alias_in:
                alias_in.add(n)
            if isinstance(n.args[0], torch.fx.Node) and n.args[0].target in _SPLITS:
                base[n] = base.get(n.args[0].args[0], n.args[0].args[0])
            continue
        if t in _VIEW_OPS and n.args and isinstance(n.args[0], torch.fx.Node):
            base[n] = base.get(n.args[0], n.args[0])
        if t in _SYM_ARITH:
            continue
        if t is aten.copy_.default:
            raise Rejected("the graph mutates an input", syms)
        if isinstance(t, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in t.tags \
                and not (t in _SDPA and not _named(n).get("dropout_p", 0.0)):
            raise Rejected(f"random numbers: {where(n)}", syms)
        # a bucketed size used as a value: one symbol plus a constant in a Tensor argument
        # reads the true size (an input of the bucketed graph); anything else is rejected
        size_pos = _SIZE_ARGS.get(t, ())
        for k, a in [*enumerate(n.args), *n.kwargs.items()]:
            if k in size_pos:
                continue
            for x in (a if isinstance(a, (list, tuple)) else [a]):
                if isinstance(x, torch.fx.Node) and not isinstance(val(x), Tensor) and bsyms(x):
                    aff = _affine(val(x).node.expr, syms) \
                        if isinstance(val(x), torch.SymInt) else None
                    if aff is None or x is not a or not _tensor_arg(t, k):
                        raise Rejected(f"a bucketed size used as a value: {where(n)}",
                                       bsyms(x))
                    masks.append(("value", n, k, *aff))
        ins = [x for x in n.all_input_nodes if isinstance(val(x), Tensor)]
        padded_in = [x for x in ins if bsyms(x)]
        if not padded_in:
            # sees no padding; a size it is given makes a dimension that is true up to the
            # true size (arange, full) when that is one symbol
            v = val(n)
            for x in (v if isinstance(v, (list, tuple)) else [v]):
                if isinstance(x, Tensor) and not all(_whole(_expr(s), syms) for s in x.shape):
                    raise Rejected(f"a size made of several bucketed sizes: {where(n)}",
                                   bsyms(n))
            continue
        m = _rule(n, t, syms, val, bsyms, orders)
        if m is not None:
            masks.append(m)
        if isinstance(t, torch._ops.OpOverload) and (t in _VIEWS or t in _SAME_DIMS
                                                     or t is aten.slice.Tensor
                                                     or t is aten.split.Tensor
                                                     or t is aten.split_with_sizes.default):
            if any(x in alias_in for x in ins) and t not in (aten.clone.default,
                                                             aten._to_copy.default,
                                                             aten.lift_fresh_copy.default,
                                                             aten.contiguous.default):
                alias_in.add(n)
    return masks


def _rule(n, t, syms, val, bsyms, orders):
    """Raise Rejected unless op node `n` keeps the true region exact."""
    args = n.args
    if not isinstance(t, torch._ops.OpOverload):
        raise Rejected(f"no bucket rule for {n.format_node()}", bsyms(n) | _in_syms(n, bsyms))
    if torch.Tag.pointwise in t.tags or t in _SAME_DIMS:
        return
    if t in _VIEWS:
        if not _regroup(val(args[0]).shape, val(n).shape, orders):
            raise Rejected(f"a reshape splits a padded dimension: {n.format_node()}",
                           bsyms(args[0]))
        return
    x0 = val(args[0]) if args and isinstance(args[0], torch.fx.Node) else None
    if t in _REDUCE or t in _REDUCE_ALL or t in _PREFIX:
        v = x0
        pad = set(_padded(v, syms))
        if t in _REDUCE_ALL or (t in _REDUCE and (len(args) < 2 or args[1] is None)):
            dims = set(range(v.dim()))
        else:
            k = _REDUCE.get(t, _PREFIX.get(t))
            d = args[k] if len(args) > k else n.kwargs.get("dim")
            if d is None or (isinstance(d, (list, tuple)) and not d):  # [] is every dim
                d = list(range(v.dim()))
            dims = {_dim(x, v.dim()) for x in (d if isinstance(d, (list, tuple)) else [d])}
        if t in _PREFIX:
            return
        if dims & pad:
            fix = _masked_reduction(n, t, v, dims, dims & pad, syms)
            if fix is None:
                raise Rejected(f"a reduction over a padded dimension: {n.format_node()}",
                               _dim_syms(v, dims & pad, syms))
            return fix
        return
    if t in (aten.native_layer_norm.default, aten.layer_norm.default):
        v = x0
        k = len(args[1])
        dims = set(range(v.dim() - k, v.dim()))
        bad = dims & set(_padded(v, syms))
        if bad:
            raise Rejected(f"a norm over a padded dimension: {n.format_node()}",
                           _dim_syms(v, bad, syms))
        return
    if t in (aten._native_batch_norm_legit_no_training.default,):
        if 1 in _padded(x0, syms):
            raise Rejected(f"batch norm over padded channels: {n.format_node()}",
                           _dim_syms(x0, {1}, syms))
        return
    if t in (aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default):
        a, b = (args[1], args[2]) if t in (aten.addmm.default, aten.baddbmm.default) else args[:2]
        va, vb = val(a), val(b)
        if va.dim() - 1 in _padded(va, syms) or vb.dim() - 2 in _padded(vb, syms):
            aff = _affine(_expr(va.shape[-1]), syms)
            if aff is None or _affine(_expr(vb.shape[-2]), syms) != aff:
                raise Rejected(f"a matmul contracts a padded dimension: {n.format_node()}",
                               _dim_syms(va, {va.dim() - 1}, syms)
                               | _dim_syms(vb, {vb.dim() - 2}, syms))
            # both operands zeroed along it: the padded terms add exact zeros
            return ("contract", n, (a, va.dim() - 1), (b, vb.dim() - 2), *aff)
        return
    if t in _SDPA:
        kw = _named(n)
        q, k = val(kw["query"]), val(kw["key"])
        kd = k.dim() - 2
        if q.dim() - 1 in _padded(q, syms) or k.dim() - 1 in _padded(k, syms):
            raise Rejected(f"attention over a padded head dimension: {n.format_node()}",
                           _dim_syms(q, {q.dim() - 1}, syms) | _dim_syms(k, {k.dim() - 1}, syms))
        if kd not in _padded(k, syms):
            return
        mask = kw.get("attn_mask", kw.get("attn_bias"))
        causal = bool(kw.get("is_causal", False))
        drop = kw.get("dropout_p", 0.0)
        qe, ke = _expr(q.shape[q.dim() - 2]), _expr(k.shape[kd])
        aff = _affine(ke, syms)
        if not drop and aff is not None:
            (sym, off) = aff
            if causal and mask is None:
                # a true query attends only to earlier keys, true ones when the queries are
                # padded by the same symbol and there are no fewer keys than queries
                diff = sympy.expand(ke - qe)
                if diff.is_Integer and diff >= 0 and sym in qe.free_symbols:
                    return ("zero", n, kd, sym, off)
            elif not causal:
                mv = val(mask) if isinstance(mask, torch.fx.Node) else mask
                if mv is None or (isinstance(mv, Tensor) and (mv.dtype.is_floating_point
                                                              or mv.dtype == torch.bool)):
                    return ("mask", n, kd, sym, off)
        raise Rejected(f"attention over padded keys the buckets cannot mask: {n.format_node()}",
                       _dim_syms(k, {kd}, syms))
    if t is aten.embedding.default:
        if _padded(val(args[0]), syms):
            raise Rejected(f"an embedding table with a padded dimension: {n.format_node()}",
                           bsyms(args[0]))
        return
    if t is aten.cat.default:
        ts = [val(x) for x in args[0]]
        out = val(n)
        d = _dim(args[1] if len(args) > 1 else n.kwargs.get("dim", 0), out.dim())
        if d in _padded(out, syms):
            ks = [i for i, x in enumerate(ts) if x.dim() == out.dim() and d in _padded(x, syms)]
            if ks == [len(ts) - 1]:
                return
            aff = _affine(_expr(ts[ks[0]].shape[d]), syms) if len(ks) == 1 else None
            if aff is None:
                raise Rejected(f"cat along a padded dimension, padded pieces before the "
                               f"last: {n.format_node()}", _dim_syms(out, {d}, syms))
            # the pieces after the padded one are written after its true end (a key/value
            # cache growing by a token: the past is padded, the new token follows it)
            return ("cat", n, d, ks[0], aff[0], aff[1])
        return
    if t is aten.slice.Tensor:
        v = x0
        d = _dim(args[1] if len(args) > 1 else 0, v.dim())
        start = args[2] if len(args) > 2 else None
        if d not in _padded(v, syms):
            if isinstance(start, torch.fx.Node) and bsyms(start):  # x[:, s:] shifts
                raise Rejected(f"a slice from a bucketed size: {n.format_node()}",
                               bsyms(start))
            return
        end = args[3] if len(args) > 3 else None
        step = args[4] if len(args) > 4 else 1
        ext = _expr(v.shape[d])
        end_e = _expr(val(end)) if end is not None else None
        if start in (None, 0) and step == 1 and (
                end is None or (isinstance(end, int) and end >= 2 ** 62)
                or (end_e is not None and sympy.simplify(end_e - ext) == 0)):
            return
        out_e = _expr(val(n).shape[d])
        if isinstance(start, int) and isinstance(end, int) and 0 <= start <= end and step == 1 \
                and out_e.is_Integer and int(out_e) == end - start:
            return  # a fixed window the guards put inside the true extent
        k = _from_end(start, ext, val)
        aff = _affine(ext, syms)
        if k is not None and aff is not None and step == 1 and out_e == k and (
                end is None or (isinstance(end, int) and end >= 2 ** 62)
                or (end_e is not None and sympy.simplify(end_e - ext) == 0)):
            return ("tail", n, d, k, aff[0], aff[1])  # the last k: read at the true end
        raise Rejected(f"a slice of a padded dimension: {n.format_node()}",
                       _dim_syms(v, {d}, syms))
    if t is aten.select.int:
        v = x0
        d = _dim(args[1], v.dim())
        if d not in _padded(v, syms):
            if isinstance(args[2], torch.fx.Node) and bsyms(args[2]):
                raise Rejected(f"an index from a bucketed size: {n.format_node()}",
                               bsyms(args[2]))
            return
        if isinstance(args[2], int) and args[2] >= 0:
            return  # a fixed position the guards put inside the true extent (x[:, 0])
        k = _from_end(args[2], _expr(v.shape[d]), val)
        aff = _affine(_expr(v.shape[d]), syms)
        if k is not None and aff is not None:
            return ("pick", n, d, k, aff[0], aff[1])  # x[:, -k]: read at the true end
        raise Rejected(f"indexing a padded dimension: {n.format_node()}",
                       _dim_syms(v, {d}, syms))
    if t in (aten.split.Tensor, aten.split_with_sizes.default,
             aten.index_select.default, aten.narrow.default, aten.unbind.int, aten.gather.default,
             aten.flip.default, aten.roll.default):
        v = x0
        d = args[2] if t in (aten.split.Tensor, aten.split_with_sizes.default) else args[1]
        if t in (aten.flip.default, aten.roll.default):
            if _padded(v, syms):
                raise Rejected(f"no bucket rule for {n.format_node()}", bsyms(args[0]))
            return
        if isinstance(d, (list, tuple)):
            d = d[0]
        d = _dim(d if isinstance(d, int) else 0, v.dim())
        if d in _padded(v, syms):
            raise Rejected(f"indexing a padded dimension: {n.format_node()}",
                           _dim_syms(v, {d}, syms))
        return
    raise Rejected(f"no bucket rule for {n.format_node()}", _in_syms(n, bsyms))


# reductions made exact over a padded dimension by filling the padding with their
# neutral element first ("-inf"/"inf": floating inputs only; mean: a sum over the true count)
_NEUTRAL = {
    aten.sum.dim_IntList: 0, aten.sum.default: 0, aten.mean.dim: 0, aten.mean.default: 0,
    aten.amax.default: "-inf", aten.amin.default: "inf", aten.max.dim: "-inf",
    aten.min.dim: "inf", aten.argmax.default: "-inf", aten.argmin.default: "inf",
    aten.logsumexp.default: "-inf", aten._softmax.default: "-inf",
    aten._log_softmax.default: "-inf", aten.softmax.int: "-inf",
    aten.log_softmax.int: "-inf", aten.any.dim: False, aten.all.dim: True,
    aten.prod.dim_int: 1,
}


def _masked_reduction(n, t, v, dims, padded, syms):
    """The fix for reduction `n` over padded dimensions of `v`, or None."""
    neutral = _NEUTRAL.get(t)
    if neutral is None:
        return None
    if t in (aten.argmax.default, aten.argmin.default) and len(dims) > 1 and v.dim() > 1:
        return None  # an index into the flattened tensor: the padding shifts it
    if isinstance(neutral, str):
        if not v.dtype.is_floating_point:
            return None
        neutral = float(neutral)
    elif isinstance(neutral, bool) != (v.dtype == torch.bool):
        return None
    pads = []
    for d in sorted(padded):
        aff = _affine(_expr(v.shape[d]), syms)
        if aff is None:
            return None
        pads.append((d, *aff))
    mean = sorted(dims) if t in (aten.mean.dim, aten.mean.default) else None
    return ("reduce", n, pads, neutral, mean)


def _padding(g, x, d, true, dev):
    """Graph nodes: the size of `x` along `d`, and a (size,) boolean, True on the padding
    (positions >= `true`)."""
    size = g.call_function(aten.sym_size.int, (x, d))
    ar = g.call_function(aten.arange.default, (size,), {"dtype": torch.int64, "device": dev})
    return size, g.call_function(aten.ge.Tensor, (ar, true))


def _mask_along(g, x, ndim, d, true, dev, fill_v):
    """Graph nodes: `x` with `fill_v` at positions >= `true` along dimension `d`."""
    size, pad = _padding(g, x, d, true, dev)
    shape = [1] * ndim
    shape[d] = size
    pad = g.call_function(aten.view.default, (pad, shape))
    return g.call_function(aten.masked_fill.Scalar, (x, pad, fill_v))


def _true_of(g, trues, sym, off):
    return trues[sym] if not off else g.call_function(aten.add.Tensor, (trues[sym], off))


def _in_syms(n, bsyms):
    out = set()
    for x in n.all_input_nodes:
        out |= bsyms(x)
    return out


def _dim_syms(v, dims, syms):
    out = set()
    for d in dims:
        out |= _syms(v.shape[d]) & syms
    return out

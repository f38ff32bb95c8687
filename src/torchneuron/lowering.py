"""The lowering API: aten overload -> jax function, with its eager extras.

One table (``LOWERINGS``) serves eager dispatch and ``torch.compile``.  A lowering
is a plain function over jax values that mirrors the aten schema: tensors arrive
as jax arrays, ``Scalar`` arguments as jax 0-d values (weakly typed, so they
promote like PyTorch's wrapped numbers), everything else (ints, int lists, dtypes,
bools, strings) as Python values.  It returns jax arrays in the schema's return
structure.  The caller casts every result to the dtype PyTorch's own meta kernel
computed, so a lowering only has to get the values right; it may read the
expected outputs with :func:`out_meta` / :func:`out_dtype`.

A lowering declares next to itself what eager execution needs besides it (as
JAX's ``lax.py`` keeps a primitive's shape rule next to its lowering): an argument
normaliser, a check (which may read device values with :func:`read_back`), index
bounds, a meta kernel.  Declaring is all that happens at import: nothing is
registered with PyTorch until ``dispatch.install()`` builds every kernel in one
place, and a second declaration for the same overload raises, naming both places.

Lowering a functional overload (``add.Tensor``) also makes its in-place
(``add_.Tensor``) and ``out=`` (``add.out``) variants native.
"""
from __future__ import annotations

import contextlib
import os
import threading

import jax
import torch

from . import runtime

aten = torch.ops.aten


class Lowering:
    """An overload's lowering and its eager extras.

    static: names of Scalar arguments that are compile-time constants.
    random: draws random numbers with :func:`rng_key`.
    normalize(*args, **kwargs) -> (args, kwargs): rewrites the arguments before the
      executable is chosen (eager only).
    check(*args, **kwargs): raises PyTorch's error for arguments the meta kernel
      accepts (eager only; may call :func:`read_back`).
    bounds(arg) -> [(index tensor, lo, hi, make_error)]: index arguments checked
      against [lo, hi) with one host read (``TORCHNEURON_INDEX_CHECKS``); `arg(name)`
      gives an argument by schema name; PyTorch's own (meta) errors come first.
    compile_only: used inside compiled and decomposed graphs only (views and
      allocations, whose eager kernels are PyTorch's own or storage's).
    device_meta(*meta_args, **meta_kwargs): the result on meta tensors for eager
      execution, where PyTorch's meta kernel applies another device's rules (a meta
      tensor tells a Python meta kernel it is on CUDA: `_scaled_mm`'s layout and
      alignment rules); compiled graphs see the neuron device and need none.
    compute: the compute-dtype policy declared with :func:`lower` (`fn` applies it).
    """

    __slots__ = ("op", "fn", "static", "random", "name", "normalize", "check", "bounds",
                 "compile_only", "where", "family", "device_meta", "compute")

    def __init__(self, op, fn, static=(), random=False, normalize=None, check=None,
                 bounds=None, compile_only=False, where=None, family=None, device_meta=None,
                 compute=None):
        self.op = op
        self.fn = fn
        self.static = frozenset(static)
        self.random = random
        self.name = op.name()
        self.normalize = normalize
        self.check = check
        self.bounds = bounds
        self.compile_only = compile_only
        self.where = where
        self.family = family
        self.device_meta = device_meta
        self.compute = compute

    @property
    def has_extras(self) -> bool:
        return (self.normalize is not None or self.check is not None
                or self.bounds is not None)


LOWERINGS: dict = {}
METAS: dict = {}  # "aten::name" -> Meta declarations (dispatch.install registers them)


class Meta:
    __slots__ = ("qualname", "fn", "replace", "where")

    def __init__(self, qualname, fn, replace, where):
        self.qualname = qualname
        self.fn = fn
        self.replace = replace
        self.where = where


def where_of(fn) -> str:
    """file:line of a function's (or code object's) definition (for duplicate-registration
    errors)."""
    code = fn if hasattr(fn, "co_filename") else getattr(fn, "__code__", None)
    if code is None:
        return repr(fn)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.relpath(code.co_filename, root) if code.co_filename.startswith(root) \
        else code.co_filename
    return f"{path}:{code.co_firstlineno}"


def family_of(fn) -> str:
    """The op family a function belongs to: its module's name under ops/ or kernels/."""
    mod = getattr(fn, "__module__", "") or ""
    return mod.rsplit(".", 1)[-1]


def resolve(name):
    """'add.Tensor' / 'aten::add.Tensor' / OpOverload -> OpOverload."""
    if isinstance(name, torch._ops.OpOverload):
        return name
    if isinstance(name, torch._ops.OpOverloadPacket):
        return name.default
    if "::" in name:
        ns, name = name.split("::", 1)
    else:
        ns = "aten"
    base, _, overload = name.partition(".")
    packet = getattr(getattr(torch.ops, ns), base)
    return getattr(packet, overload or "default")


class DuplicateRegistration(RuntimeError):
    pass


def meta_kernel(name: str, fn, replace: bool = False) -> None:
    """Declare fn as the Meta kernel of aten::name (an overload name such as "foo" or
    "foo.out").  The executable builder asks PyTorch's meta kernel for result shapes
    and dtypes; some ops (CUDA-only ones, data-dependent ones) have none, a few have a
    broken one (`replace=True` overrides it for the whole process)."""
    qual = name if "::" in name else f"aten::{name}"
    where = where_of(fn)
    old = METAS.get(qual)
    if old is not None:
        raise DuplicateRegistration(f"torchneuron: two meta kernels for {qual}: {old.where} "
                                    f"and {where}")
    METAS[qual] = Meta(qual, fn, replace, where)


def lower(*names, static=(), random=False, probe=False, normalize=None, check=None,
          bounds=None, meta=None, compile_only=False, device_meta=None, compute=None):
    """Decorator: declare `fn` as the lowering of each named aten overload.

    probe: check the argument dtypes against PyTorch's CPU kernel at trace time
      (probe.py), for ops whose meta kernel accepts dtypes the kernels reject.
    meta: a meta kernel for each named overload (see :func:`meta_kernel`).
    compute: the compute-dtype policy, a combinator applied to the Tensor arguments
      before the body runs (:func:`in_opmath`: straight to the result's opmath type;
      :func:`in_compute_dtype`: to the result dtype, then its opmath type), as PyTorch
      declares ``@pw_cast_for_opmath`` on its references.  The decorator returns the
      lowering with its policy, so a direct call computes the same.
    The other options are the :class:`Lowering` extras.
    """

    def deco(fn):
        where = where_of(fn)
        family = family_of(fn)
        if compute is not None:
            fn = _computing(fn, compute, names)
        for n in names:
            try:
                op = resolve(n)
            except AttributeError:
                continue  # overload absent in this torch version
            if not compile_only and composite_only(op):
                continue
            f = fn
            if probe:
                from .probe import probed

                f = probed(op, fn)
            old = LOWERINGS.get(op)
            if old is not None:
                raise DuplicateRegistration(f"torchneuron: {op} is lowered twice: {old.where} "
                                            f"and {where}")
            LOWERINGS[op] = Lowering(op, f, static, random, normalize, check, bounds,
                                     compile_only, where, family, device_meta, compute)
            if meta is not None:
                meta_kernel(op.name().split("::", 1)[1].removesuffix(".default"), meta)
        return fn

    return deco


def _tensor_positions(names):
    """Positions and names of the Tensor / Tensor? arguments of the overloads `names`
    (which a lowering mirrors, so they agree; the first present one is read)."""
    for n in names:
        try:
            op = resolve(n)
        except AttributeError:
            continue
        args = op._schema.arguments
        return tuple((i, a.name, a.kwarg_only) for i, a in enumerate(args)
                     if str(a.type) in ("Tensor", "Optional[Tensor]"))
    return ()


def _computing(fn, compute, names):
    """`fn` with the combinator `compute` applied to its Tensor arguments (None passes)."""
    import functools

    tensors = _tensor_positions(names)
    positional = tuple(i for i, _, kw in tensors if not kw)
    params = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    # the names a Tensor argument may come by: a kwarg-only one's, or fn's parameter name
    # for a positional one (fn mirrors the schema's positions, not always its names)
    by_name = {name for _, name, kw in tensors if kw} | {params[i] for i in positional
                                                         if i < len(params)}

    @functools.wraps(fn)
    def computing(*args, **kwargs):
        at = [i for i in positional if i < len(args) and args[i] is not None]
        kw = [k for k, v in kwargs.items() if k in by_name and v is not None]
        vals = compute(*[args[i] for i in at], *[kwargs[k] for k in kw])
        args = list(args)
        for i, v in zip(at, vals):
            args[i] = v
        for k, v in zip(kw, vals[len(at):]):
            kwargs[k] = v
        return fn(*args, **kwargs)

    return computing


def composite_only(op) -> bool:
    """A CompositeImplicitAutograd op without a CPU kernel of its own (square, ...): it
    runs as its decomposition on every backend, and a backend kernel would hide that
    decomposition from autograd (no gradient), so it is never lowered."""
    name = op.name()
    return (torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")
            and not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU"))


def get(op):
    return LOWERINGS.get(op)


def device_mismatch(a, b):
    """PyTorch's error for tensors of two devices in one op."""
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"{a} and {b}!"
    )


class AfterMeta(Exception):
    """Raised by a check: PyTorch's own (meta) errors for the same arguments come first,
    then `error` (what CPU raises after validating the arguments)."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


_index_checks = [None]


def index_checks() -> bool:
    """Whether eager index bounds are checked (``TORCHNEURON_INDEX_CHECKS``)."""
    if _index_checks[0] is None:
        from . import config

        _index_checks[0] = config.get("TORCHNEURON_INDEX_CHECKS")
    return _index_checks[0]


def set_index_checks(enabled: bool) -> bool:
    """Turn the eager out-of-range index checks on/off; returns the previous setting."""
    prev = index_checks()
    _index_checks[0] = bool(enabled)
    return prev


def read_back(fn, *tensors, static=()):
    """For checks: ``fn(*values, *static)`` evaluated on the values of device tensors,
    as numpy (one cached executable per signature, one host read).  `fn` should be a
    module-level function (it is part of the cache key); `static` hashable values."""
    from . import storage

    return storage.read_back(fn, *tensors, static=static)


# ---------------------------------------------------------------- trace context
class _Ctx(threading.local):
    def __init__(self):
        self.meta = None
        self.key = None
        self.device = 0
        self.keys_used = 0
        self.warnings = None


_ctx = _Ctx()
_KEEP = object()


@contextlib.contextmanager
def tracing(meta=None, key=None, device=0, warnings=_KEEP):
    """The context a lowering is traced in; `warnings`: a list that collects
    :func:`call_warning` messages (an eager executable repeats them on every call); nested
    contexts keep the outer list."""
    saved = (_ctx.meta, _ctx.key, _ctx.device, _ctx.keys_used, _ctx.warnings)
    _ctx.meta, _ctx.key, _ctx.device, _ctx.keys_used = meta, key, device, 0
    if warnings is not _KEEP:
        _ctx.warnings = warnings
    try:
        yield _ctx
    finally:
        _ctx.meta, _ctx.key, _ctx.device, _ctx.keys_used, _ctx.warnings = saved


def call_warning(msg: str, once: bool = False) -> None:
    """A UserWarning PyTorch's kernel gives on every call with these arguments (a warning
    raised while tracing would show only when the executable is built); `once`: PyTorch's
    TORCH_WARN_ONCE (once per process, unless ``torch.set_warn_always(True)``)."""
    if _ctx.warnings is None:
        import warnings as _w

        _w.warn(msg, UserWarning, stacklevel=3)
    else:
        item = (msg, once)
        if item not in _ctx.warnings:
            _ctx.warnings.append(item)


def trace_device() -> int:
    """The device index the lowering being traced runs on."""
    return _ctx.device


def out_meta():
    """The meta tensor(s) PyTorch computed for this op's result (None if unknown)."""
    return _ctx.meta


def out_dtype(i=None):
    """The jax dtype of the (i-th) result, as PyTorch computes it; None if unknown."""
    m = _ctx.meta
    if m is None:
        return None
    if isinstance(m, (list, tuple)):
        m = m[i or 0]
    return runtime.jdtype(m.dtype)


def sum_dtype(x, dtype=None):
    """Result dtype of sum/prod/cumsum: the meta kernel's, else `dtype`, else int64 for
    integers and bool, else x's."""
    dt = out_dtype()
    if dt is not None:
        return dt
    if dtype is not None:
        return runtime.jdtype(dtype)
    import jax.numpy as jnp

    if x.dtype == jnp.bool_ or jnp.issubdtype(x.dtype, jnp.integer):
        return jnp.dtype(jnp.int64)
    return x.dtype


def in_result_dtype(*xs, dt=None):
    """The operands cast to the result dtype (the meta kernel's, or `dt`)."""
    import jax.numpy as jnp

    from .numerics import cast

    dt = out_dtype() if dt is None else dt
    return [cast(jnp.asarray(x), dt) for x in xs]


def in_opmath(*xs, dt=None):
    """The operands (None passes through) cast straight to the compute type of the
    result dtype (the meta kernel's, or `dt`): float32 for halves (PyTorch's
    ``opmath_type``; a float32 operand is not rounded to the half result first)."""
    import jax.numpy as jnp

    from .numerics import cast, opmath

    dt = opmath(out_dtype() if dt is None else dt)
    return [None if x is None else cast(jnp.asarray(x), dt) for x in xs]


def in_compute_dtype(*xs, dt=None):
    """The operands cast to the result dtype, then to its compute type (halves in
    float32): PyTorch's ``pw_cast_for_opmath`` for pointwise kernels whose inputs are
    first converted to the common dtype."""
    from .numerics import upcast

    return upcast(*in_result_dtype(*xs, dt=dt))


def out_shape():
    """The shape of the (first) result, from the meta kernel."""
    m = out_meta()
    if isinstance(m, (list, tuple)):
        m = m[0]
    return tuple(m.shape)


def follow_input_format(out, x, contiguous=False):
    """A device meta's rule for memory formats: `out` (a meta result) in `x`'s
    channels-last format when x is channels-last and out has x's rank (4-d:
    channels_last, 5-d: channels_last_3d), as the CPU's and CUDA's kernels return and
    PyTorch's test_memory_format expects (PyTorch's meta kernel says contiguous); else
    `out` (`contiguous`: a contiguous copy of its metadata)."""
    import torch
    from torch._prims_common import suggest_memory_format

    fmt = suggest_memory_format(x) if x.dim() in (4, 5) else torch.contiguous_format
    if fmt != torch.contiguous_format and out.dim() == x.dim():
        return torch.empty_like(out, memory_format=fmt)
    return torch.empty_like(out, memory_format=torch.contiguous_format) if contiguous else out


def rng_key():
    """A fresh jax PRNG key for a random op (distinct per call within one trace)."""
    if _ctx.key is None:
        raise RuntimeError("torchneuron: random lowering traced without an RNG key")
    k = jax.random.fold_in(_ctx.key, _ctx.keys_used)
    _ctx.keys_used += 1
    return k



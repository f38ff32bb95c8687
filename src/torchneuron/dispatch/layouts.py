"""The layout policy: when a functional op stops compiling one executable per layout
of its inputs.

The strides are part of an executable's key (view reads are traced into the op's
program, so XLA folds a transpose into a dot).  A functional op that has been
compiled for LAYOUT_VARIANTS layouts of the same shapes (PyTorch's layout-sweeping
tests, programs that permute their inputs every call) stops compiling per layout: a
new layout reads its strided inputs into dense copies (the copies' own small
executables are shared by every op) and runs the op's one dense executable.  Only
where the op's outputs keep the same strides (the meta kernel says so), so what the
caller sees does not change.

:class:`LayoutPolicy` is the decision, one per entry; :func:`densify` makes the
copies.  The entry caches a key that densifies as :data:`DENSE`.
"""
from __future__ import annotations

import warnings

import torch

from .. import storage
from . import meta as _meta

Tensor = torch.Tensor

LAYOUT_VARIANTS = 8
DENSE = object()  # cache marker: run this key's call on dense copies of its inputs
_TOKEN_LEN = 9  # Walk.cell_token


class LayoutPolicy:
    """The layouts an op has been compiled for, per shape key, and the decision for a
    new one."""

    __slots__ = ("op", "seen", "cap")

    def __init__(self, op, cap):
        self.op = op
        self.seen = {}  # shape key -> layouts compiled
        self.cap = cap

    def dense(self, key, args, kwargs, dense_ok=True) -> bool:
        """Whether the call of cache key `key` should run on dense copies of its inputs
        (True) or compile for its own layout (False, counted).  `dense_ok` False: a call
        already on dense copies, which always compiles."""
        sk = shape_key(key)
        n = self.seen.get(sk, 0)
        if dense_ok and n >= LAYOUT_VARIANTS and dense_keeps_layout(self.op, args, kwargs):
            return True
        if len(self.seen) >= self.cap:
            self.seen.clear()
        self.seen[sk] = n + 1
        return False


def shape_key(tok):
    """`tok` (a key or part of one) without the tensors' strides, offsets and buffers."""
    if isinstance(tok, tuple):
        if len(tok) == _TOKEN_LEN and isinstance(tok[1], torch.dtype) \
                and isinstance(tok[2], torch.Size):
            return (tok[1], tok[2], tok[7], tok[8])
        return tuple(shape_key(t) for t in tok)
    return tok


def partial(t):
    """A device tensor that is not exactly its whole buffer, in order (a strided view)."""
    if not isinstance(t, Tensor) or t.device.type != "neuron" or t.is_conj() or t.is_neg():
        return False
    cell = getattr(t.untyped_storage(), "_tn_cell", None)
    return cell is not None and not (t.is_contiguous() and t.storage_offset() == 0
                                     and cell.nbytes == t.numel() * t.element_size())


def densify(v):
    """`v` with its strided views replaced by dense copies.  The copies are made by
    storage.dense_copy, which runs no op's kernel: a kernel that asked for them (clone,
    contiguous, _to_copy included) never re-enters itself."""
    if partial(v):
        return storage.dense_copy(v)
    if isinstance(v, (list, tuple)) and any(partial(x) for x in v):
        return type(v)(densify(x) for x in v)
    return v


def _meta_dense(v, m):
    """The meta argument `m` of `v`, contiguous where `v` is a strided view."""
    if partial(v):
        return torch.empty(v.shape, dtype=v.dtype, device="meta")
    if isinstance(v, (list, tuple)) and isinstance(m, (list, tuple)):
        return type(m)(_meta_dense(x, y) for x, y in zip(v, m))
    return m


def _strides(res):
    if isinstance(res, Tensor):
        return (tuple(res.shape), res.stride())
    if isinstance(res, (list, tuple)):
        return tuple(_strides(r) for r in res)
    return None


def dense_keeps_layout(op, args, kwargs) -> bool:
    """Whether some input is a strided view and `op`'s results keep their strides when
    those inputs are dense."""
    if not any(partial(a) or isinstance(a, (list, tuple)) and any(partial(x) for x in a)
               for a in list(args) + list(kwargs.values())):
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the build gives the op's warnings
            m_args, m_kwargs = _meta.to_meta(args, kwargs)
            before = _meta.run_meta(op, m_args, m_kwargs)
            after = _meta.run_meta(
                op, [_meta_dense(a, m) for a, m in zip(args, m_args)],
                {k: _meta_dense(v, m_kwargs[k]) for k, v in kwargs.items()})
    except Exception:  # noqa: BLE001  bad arguments: the build reports them
        return False
    return _strides(before) == _strides(after)

"""The "neuron" c10d backend: a Python ``ProcessGroup`` whose collectives run on gloo.

PyTorch lets a Python backend only as a whole ``ProcessGroup`` (a C++ ``Backend``
cannot be subclassed from Python), so this group serves every tensor: CPU tensors go
straight to an inner ``ProcessGroupGloo`` (its own work objects come back); neuron
tensors are staged through host memory (one device-to-host copy in, one host-to-device
copy out), the gloo collective runs on the host copies, and the returned
:class:`NeuronWork` writes the results back into the neuron tensors when it is waited
on or when its future completes.  No call blocks: a collective returns as soon as gloo
has queued it, so ``batch_isend_irecv`` and DDP's overlapping buckets work.

Method names differ between torch releases (2.13: ``all_gather_single``,
``reduce_scatter_single``, ``all_to_all_single``, ``*_single_coalesced``; 2.11:
``_allgather_base``, ``_reduce_scatter_base``, ``alltoall_base``,
``allgather_into_tensor_coalesced``, ``reduce_scatter_tensor_coalesced``): both sets are
defined.  gloo has no AVG (SUM, then a division on the device) and 2.11's gloo has no
list ``alltoall`` (it goes through ``all_to_all_single``).
"""
from __future__ import annotations

import threading
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from .. import storage
from . import xla_engine

_NAME = "neuron"


def _is_dev(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == _NAME


class _HostPool:
    """Reusable host staging buffers.  A results buffer is handed to jax as the tensor's
    new device buffer (DLPack, no copy) and comes back to the pool when jax lets go of it
    (its storage's use count falls to the pool's own reference): fresh memory costs a page
    fault per 4 KiB on first touch, which made staging several times slower than the
    copy itself at MiB sizes."""

    MAX_PER_SIZE = 4  # a bucket's result in use, the next one staging, two spare
    MAX_BYTES = 1 << 30

    def __init__(self):
        self._bufs: dict[int, list] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def _free(buf) -> bool:
        # the pool's tensor and the temporary storage object asked here hold the only
        # references: no view handed out (to gloo, to a work, to jax through DLPack) lives
        return torch._C._storage_Use_Count(buf.untyped_storage()._cdata) <= 2

    def get(self, shape, dtype) -> torch.Tensor:
        n = 1
        for s in shape:
            n *= int(s)
        nbytes = n * dtype.itemsize
        if nbytes < 64 << 10:  # small: not worth pooling
            return torch.empty(tuple(shape), dtype=dtype)
        with self._lock:
            lst = self._bufs.setdefault(nbytes, [])
            buf = next((b for b in lst if self._free(b)), None)
            if buf is None:
                buf = torch.empty(nbytes, dtype=torch.uint8)
                if len(lst) < self.MAX_PER_SIZE and self._bytes + nbytes <= self.MAX_BYTES:
                    lst.append(buf)
                    self._bytes += nbytes
        return buf.view(dtype).view(tuple(shape))


_pool = _HostPool()


def _host(t: torch.Tensor, readonly: bool = False) -> torch.Tensor:
    """A host copy of a device tensor (contiguous, same shape and dtype); with `readonly`,
    the device buffer itself where XLA:CPU lets the host read it (DLPack, no copy)."""
    alias = storage.host_alias(t)
    if alias is not None:
        return alias if readonly else _pool.get(t.shape, t.dtype).copy_(alias)
    return t.detach().to("cpu", copy=True).contiguous()


def _host_empty(t: torch.Tensor) -> torch.Tensor:
    return _pool.get(t.shape, t.dtype)


class NeuronWork(dist.Work):
    """A gloo work whose completion also writes the host results into device tensors."""

    def __init__(self, inner, finish=None, result=None):
        super().__init__()
        self._inner = inner
        self._finish = finish
        self._result = result
        self._lock = threading.Lock()
        self._done = False

    def _complete(self):
        with self._lock:
            if not self._done:
                if self._finish is not None:
                    self._finish()
                    self._finish = None
                self._done = True
        return self._result

    def wait(self, timeout=timedelta(0)):
        if self._inner is not None:
            if timeout:
                self._inner.wait(timeout)
            else:
                self._inner.wait()
        self._complete()
        return True

    def is_completed(self):
        if not self._done and (self._inner is None or self._inner.is_completed()):
            self._complete()
        return self._done

    def is_success(self):
        return self._inner is None or self._inner.is_success()

    def exception(self):
        return None if self._inner is None else self._inner.exception()

    def synchronize(self):
        self.wait()

    def result(self):
        self.wait()
        return list(self._result) if self._result is not None else []

    def get_future(self):
        result = self._result if self._result is not None else []
        if self._inner is None:
            fut = torch.futures.Future()
            self._complete()
            fut.set_result(result)
            return fut

        def then(f):
            f.value()  # raises what gloo raised
            self._complete()
            return result

        return self._inner.get_future().then(then)


def _regroup(flat, sizes):
    """A flat list cut back into lists of the given lengths."""
    lists, k = [], 0
    for n in sizes:
        lists.append(flat[k:k + n])
        k += n
    return lists


class _NoSplit:
    supports_splitting = False


_NO_SPLIT = _NoSplit()


def _done_work(result=None):
    return NeuronWork(None, None, result)


class NeuronProcessGroup(dist.ProcessGroup):
    """c10d process group for neuron tensors (and CPU tensors), on gloo."""

    def __init__(self, store, rank: int, world_size: int, timeout: timedelta):
        super().__init__(rank, world_size)
        self._gloo = dist.ProcessGroupGloo(store, rank, world_size, timeout)
        # C++ asks the group's default backend for its name (torch 2.15's flight recorder
        # does at creation): gloo, which serves the CPU side, is registered as that
        try:
            self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO,
                                   self._gloo)
            self._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
        except (AttributeError, RuntimeError, TypeError):
            pass
        self._timeout = timeout
        self._xla = xla_engine.available(world_size)  # TORCHNEURON_COLLECTIVES=xla
        self._debug_detail = dist.get_debug_level() == dist.DebugLevel.DETAIL
        self._group_name = None
        self._group_desc = None

    # ------------------------------------------------------------- identity
    def getBackendName(self):
        return _NAME

    def name(self):
        return _NAME

    @property
    def _device_types(self):
        return [torch.device("cpu"), torch.device(_NAME)]

    def setGroupName(self, name):
        self._group_name = name
        try:
            self._gloo._set_group_name(name)
        except (AttributeError, RuntimeError):
            pass

    def getGroupName(self):
        return self._group_name

    @property
    def group_name(self):
        return self._group_name

    def setGroupDesc(self, desc):
        self._group_desc = desc

    def getGroupDesc(self):
        return self._group_desc

    @property
    def group_desc(self):
        return self._group_desc

    def _get_backend(self, device):
        # CPU tensors are gloo's; for the device, init_process_group(device_id=...) and
        # new_group() ask whether the backend can be split eagerly: it cannot
        if torch.device(device).type == "cpu":
            return self._gloo
        return _NO_SPLIT

    # ------------------------------------------------------------- helpers
    def _sum_for_avg(self, opts):
        """gloo has neither AVG nor PREMUL_SUM: run SUM and scale the result afterwards.
        Returns (opts, post) with post None or ("div", n) / ("mul", factor)."""
        op = opts.reduceOp
        kind = getattr(op, "op", op)
        if kind == ReduceOp.AVG:
            post = ("div", self.size())
        elif kind == ReduceOp.PREMUL_SUM:
            factor = getattr(op, "factor", None)
            if factor is None:
                raise RuntimeError(
                    "ReduceOp.PREMUL_SUM on the neuron process group needs torch >= 2.13 "
                    "(older releases do not expose the op's factor to Python)")
            if isinstance(factor, torch.Tensor):
                factor = factor.item()
            post = ("mul", float(factor))
        else:
            return opts, None
        new = type(opts)()
        for attr in ("rootRank", "rootTensor", "timeout", "asyncOp"):
            if hasattr(opts, attr):
                try:
                    setattr(new, attr, getattr(opts, attr))
                except (AttributeError, TypeError):
                    pass
        new.reduceOp = ReduceOp.SUM
        return new, post

    @staticmethod
    def _check_avg(tensors, post):
        if post is not None:
            for t in tensors:
                if not (t.is_floating_point() or t.is_complex()):
                    raise ValueError(
                        f"ReduceOp.AVG and PREMUL_SUM are not supported for tensors of dtype "
                        f"{t.dtype} (the neuron backend scales floating-point tensors only)")

    @staticmethod
    def _divide(tensors, post):
        if post is not None:
            kind, v = post
            with torch.no_grad():
                for t in tensors:
                    t.div_(v) if kind == "div" else t.mul_(v)

    def _paired(self, wholes, parts):
        """Each whole (an all-gather's output, a reduce-scatter's input) holds world-size
        times its part's elements, in its part's dtype."""
        return all(a.dtype == b.dtype and a.numel() == b.numel() * self.size()
                   for a, b in zip(wholes, parts))

    def _check_paired(self, what, wholes, parts):
        for a, b in zip(wholes, parts):
            if a.numel() != b.numel() * self.size():
                raise ValueError(f"{what}: a tensor of {a.numel()} elements cannot hold "
                                 f"{self.size()} of {b.numel()}")

    @staticmethod
    def _check_one_dtype(tensors, what):
        dtypes = {t.dtype for t in tensors}
        if len(dtypes) > 1:
            raise ValueError(f"{what}: all tensors must have one dtype, got "
                             f"{sorted(map(str, dtypes))}")

    def _check_device(self, tensors):
        devs = {t.device.type for t in tensors}
        if len(devs) > 1:
            raise ValueError(
                f"neuron process group: tensors of one collective must be on one device type, "
                f"got {sorted(devs)}")
        return _NAME in devs

    def _staged(self, outs, ins, run, result, divisor=None):
        """Run `run(host_outs, host_ins)` (a gloo call returning a Work) on host copies.

        `outs`: device tensors that receive results (their host copies start with the
        device values when they are also in `ins` by identity)."""
        host = {}
        written = {id(t) for t in outs}

        def h(t, fill):
            k = id(t)
            if k not in host:
                host[k] = _host(t, readonly=k not in written) if fill else _host_empty(t)
            return host[k]

        ins_h = [h(t, True) for t in ins]
        outs_h = [h(t, False) for t in outs]
        inner = run(outs_h, ins_h)

        def finish():
            for t, th in zip(outs, outs_h):
                storage.adopt_host(t, th)
            self._divide(outs, divisor)

        return NeuronWork(inner, finish, result)

    # ------------------------------------------------------------- the XLA engine
    def _xla_ok(self, tensors, op=None):
        if not self._xla or not all(storage.whole_cell(t) is not None for t in tensors):
            return None
        if op is None:
            return "copy"
        kind = xla_engine.reduce_kind(op)
        if kind == "pmean" and not all(t.is_floating_point() or t.is_complex() for t in tensors):
            return None
        return kind

    # ------------------------------------------------------------- collectives
    def allreduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceOptions()
        kind = self._xla_ok(tensors, opts.reduceOp)
        if kind is not None:
            for t in tensors:
                xla_engine.all_reduce(t, kind)
            return _done_work(tensors)
        opts, div = self._sum_for_avg(opts)
        self._check_avg(tensors, div)
        if not self._check_device(tensors):
            inner = self._gloo.allreduce(tensors, opts)
            if div is None:
                return inner
            return NeuronWork(inner, lambda: self._divide(tensors, div), tensors)
        return self._staged(tensors, tensors, lambda o, i: self._gloo.allreduce(o, opts),
                            tensors, div)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        opts, div = self._sum_for_avg(opts)
        self._check_avg(tensors, div)
        if not self._check_device(tensors):
            inner = self._gloo.allreduce_coalesced(tensors, opts)
            return inner if div is None else NeuronWork(
                inner, lambda: self._divide(tensors, div), tensors)
        return self._staged(tensors, tensors,
                            lambda o, i: self._gloo.allreduce_coalesced(o, opts), tensors, div)

    def broadcast(self, tensors, opts=None):
        opts = opts if opts is not None else dist.BroadcastOptions()
        if len(tensors) == 1 and self._xla_ok(tensors) is not None:
            xla_engine.broadcast(tensors[0], opts.rootRank)
            return _done_work(tensors)
        if not self._check_device(tensors):
            return self._gloo.broadcast(tensors, opts)
        return self._staged(tensors, tensors, lambda o, i: self._gloo.broadcast(o, opts),
                            tensors)

    def reduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.ReduceOptions()
        opts, div = self._sum_for_avg(opts)
        self._check_avg(tensors, div)
        if not self._check_device(tensors):
            inner = self._gloo.reduce(tensors, opts)
            return inner if div is None else NeuronWork(
                inner, lambda: self._divide(tensors, div) if self.rank() == opts.rootRank
                else None, tensors)
        if self.rank() != opts.rootRank:
            div = None
        return self._staged(tensors, tensors, lambda o, i: self._gloo.reduce(o, opts),
                            tensors, div)

    def _into_lists(self, method, output_lists, input_list, opts):
        """allgather / allgather_coalesced / gather: results land in lists of tensors."""
        flat = [t for lst in output_lists for t in lst]
        gloo = getattr(self._gloo, method)
        if not self._check_device(flat + list(input_list)):
            return gloo(output_lists, input_list, opts)
        sizes = [len(lst) for lst in output_lists]
        return self._staged(flat, list(input_list),
                            lambda o, i: gloo(_regroup(o, sizes), i, opts), output_lists)

    def allgather(self, output_lists, input_list, opts=None):
        return self._into_lists("allgather", output_lists, input_list,
                                opts if opts is not None else dist.AllgatherOptions())

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self._into_lists("allgather_coalesced", output_lists, input_list,
                                opts if opts is not None else dist.AllgatherOptions())

    def _allgather_base(self, output, input, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        if self._xla_ok([output, input]) is not None and self._paired([output], [input]):
            xla_engine.all_gather(output, input)
            return _done_work([output])
        if not self._check_device([output, input]):
            return self._gloo._allgather_base(output, input, opts)
        return self._staged([output], [input],
                            lambda o, i: self._gloo._allgather_base(o[0], i[0], opts), [output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        """Several all_gather_into_tensor as one gloo all-gather of the concatenated
        inputs (gloo has no coalesced form)."""
        opts = opts if opts is not None else dist.AllgatherOptions()
        outs, ins = list(outputs), list(inputs)
        if self._xla_ok(outs + ins) is not None and self._paired(outs, ins):
            for o, i in zip(outs, ins):
                xla_engine.all_gather(o, i)
            return _done_work(outs)
        self._check_device(outs + ins)
        self._check_one_dtype(outs + ins, "allgather_into_tensor_coalesced")
        self._check_paired("allgather_into_tensor_coalesced", outs, ins)
        w = self.size()
        sizes = [t.numel() for t in ins]
        send = torch.cat([t.detach().reshape(-1).to("cpu") for t in ins]) if ins else \
            torch.empty(0)
        recv = torch.empty(w * send.numel(), dtype=send.dtype)
        inner = self._gloo._allgather_base(recv, send, opts)

        def finish():
            per_rank = recv.view(w, -1).split(sizes, dim=1)
            with torch.no_grad():
                for o, part in zip(outs, per_rank):
                    o.copy_(part.reshape(o.shape).to(o.device))

        return NeuronWork(inner, finish, outs)

    def gather(self, output_lists, input_list, opts=None):
        return self._into_lists("gather", output_lists, input_list,
                                opts if opts is not None else dist.GatherOptions())

    def scatter(self, output_list, input_lists, opts=None):
        opts = opts if opts is not None else dist.ScatterOptions()
        flat = [t for lst in input_lists for t in lst]
        if not self._check_device(flat + list(output_list)):
            return self._gloo.scatter(output_list, input_lists, opts)
        sizes = [len(lst) for lst in input_lists]

        def run(o, i):
            lists = _regroup(i, sizes)
            return self._gloo.scatter(o, lists, opts)

        return self._staged(list(output_list), flat, run, output_list)

    def reduce_scatter(self, output_list, input_lists, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        opts, div = self._sum_for_avg(opts)
        self._check_avg(output_list, div)
        flat = [t for lst in input_lists for t in lst]
        if not self._check_device(flat + list(output_list)):
            inner = self._gloo.reduce_scatter(output_list, input_lists, opts)
            return inner if div is None else NeuronWork(
                inner, lambda: self._divide(output_list, div), output_list)
        sizes = [len(lst) for lst in input_lists]

        def run(o, i):
            lists = _regroup(i, sizes)
            return self._gloo.reduce_scatter(o, lists, opts)

        return self._staged(list(output_list), flat, run, output_list, div)

    def _reduce_scatter_base(self, output, input, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        kind = self._xla_ok([output, input], opts.reduceOp)
        if kind in ("psum", "pmean") and self._paired([input], [output]):
            xla_engine.reduce_scatter(output, input, kind)
            return _done_work([output])
        opts, div = self._sum_for_avg(opts)
        self._check_avg([output], div)
        if not self._check_device([output, input]):
            inner = self._gloo._reduce_scatter_base(output, input, opts)
            return inner if div is None else NeuronWork(
                inner, lambda: self._divide([output], div), [output])
        return self._staged([output], [input],
                            lambda o, i: self._gloo._reduce_scatter_base(o[0], i[0], opts),
                            [output], div)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        """Several reduce_scatter_tensor as one gloo reduce-scatter of the inputs laid side
        by side per rank (gloo has no coalesced form)."""
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        outs, ins = list(outputs), list(inputs)
        kind = self._xla_ok(outs + ins, opts.reduceOp)
        if kind in ("psum", "pmean") and self._paired(ins, outs):
            for o, i in zip(outs, ins):
                xla_engine.reduce_scatter(o, i, kind)
            return _done_work(outs)
        opts, div = self._sum_for_avg(opts)
        self._check_avg(outs, div)
        self._check_device(outs + ins)
        self._check_one_dtype(outs + ins, "reduce_scatter_tensor_coalesced")
        self._check_paired("reduce_scatter_tensor_coalesced", ins, outs)
        w = self.size()
        sizes = [t.numel() for t in outs]
        send = torch.cat([t.detach().reshape(w, -1).to("cpu") for t in ins], dim=1) \
            .reshape(-1) if ins else torch.empty(0)
        recv = torch.empty(send.numel() // max(w, 1), dtype=send.dtype)
        inner = self._gloo._reduce_scatter_base(recv, send, opts)

        def finish():
            with torch.no_grad():
                for o, part in zip(outs, recv.split(sizes)):
                    o.copy_(part.reshape(o.shape).to(o.device))
            self._divide(outs, div)

        return NeuronWork(inner, finish, outs)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts if opts is not None else dist.AllToAllOptions()
        if not self._check_device([output, input]):
            return self._gloo.alltoall_base(output, input, output_split_sizes,
                                            input_split_sizes, opts)
        return self._staged(
            [output], [input],
            lambda o, i: self._gloo.alltoall_base(o[0], i[0], output_split_sizes,
                                                  input_split_sizes, opts), [output])

    def alltoall(self, output_list, input_list, opts=None):
        """List all-to-all as one all_to_all_single over concatenated flat buffers
        (2.11's gloo has no list alltoall)."""
        opts = opts if opts is not None else dist.AllToAllOptions()
        outs, ins = list(output_list), list(input_list)
        self._check_device(outs + ins)
        dev = outs[0].device if outs else torch.device("cpu")
        self._check_one_dtype(outs + ins, "alltoall")
        send = torch.cat([t.detach().reshape(-1) for t in ins]).to("cpu")
        recv = torch.empty(sum(t.numel() for t in outs), dtype=send.dtype)
        inner = self._gloo.alltoall_base(recv, send, [t.numel() for t in outs],
                                         [t.numel() for t in ins], opts)

        def finish():
            k = 0
            with torch.no_grad():
                for t in outs:
                    n = t.numel()
                    t.copy_(recv[k:k + n].view(t.shape).to(dev))
                    k += n

        return NeuronWork(inner, finish, outs)

    def barrier(self, opts=None):
        opts = opts if opts is not None else dist.BarrierOptions()
        return self._gloo.barrier(opts)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        return self._gloo.monitored_barrier(timeout or self._timeout, wait_all_ranks)

    # ------------------------------------------------------------- point to point
    def send(self, tensors, dst, tag=0):
        if not self._check_device(tensors):
            return self._gloo.send(tensors, dst, tag)
        host = [_host(t) for t in tensors]
        return NeuronWork(self._gloo.send(host, dst, tag), None, host)

    def recv(self, tensors, src, tag=0):
        if not self._check_device(tensors):
            return self._gloo.recv(tensors, src, tag)
        return self._staged(list(tensors), [],
                            lambda o, i: self._gloo.recv(o, src, tag), list(tensors))

    def recv_anysource(self, tensors, tag=0):
        if not self._check_device(tensors):
            return self._gloo.recv_anysource(tensors, tag)
        return self._staged(list(tensors), [],
                            lambda o, i: self._gloo.recv_anysource(o, tag), list(tensors))

    def abort(self):
        try:
            self._gloo.abort()
        except (AttributeError, RuntimeError):
            pass

    def shutdown(self):
        try:
            self._gloo.shutdown()
        except (AttributeError, RuntimeError):
            pass


# ------------------------------------------------------------------- debug checks
def _tensors_in(args):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(_tensors_in(a))
    return out


_FP_BYTES = 512


def _fingerprint_check(pg, op, args):
    """TORCH_DISTRIBUTED_DEBUG=DETAIL: every rank's collective (op, shapes, dtypes) is
    compared before it runs, as torch's ProcessGroupWrapper does for gloo and NCCL (which
    a Python process group does not get); a mismatch raises on every rank."""
    desc = op + "(" + ", ".join(f"{list(t.shape)} {str(t.dtype).replace('torch.', '')}"
                                for t in _tensors_in(args)) + ")"
    raw = desc.encode()[:_FP_BYTES]
    mine = torch.zeros(_FP_BYTES, dtype=torch.uint8)
    mine[:len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    every = [torch.empty_like(mine) for _ in range(pg.size())]
    pg._gloo.allgather([every], [mine]).wait()
    seen = [bytes(t.tolist()).rstrip(b"\0").decode(errors="replace") for t in every]
    if any(d != seen[0] for d in seen):
        parts = "; ".join(f"rank {r}: {d}" for r, d in enumerate(seen))
        raise RuntimeError(f"Detected mismatch between collectives on ranks ({parts})")


_CHECKED = ("allreduce", "allreduce_coalesced", "broadcast", "reduce", "allgather",
            "allgather_coalesced", "_allgather_base", "allgather_into_tensor_coalesced",
            "gather", "scatter", "reduce_scatter", "_reduce_scatter_base",
            "reduce_scatter_tensor_coalesced", "alltoall_base", "alltoall")


def _with_check(name, fn):
    def method(self, *args):
        if self._debug_detail:
            _fingerprint_check(self, name, args)
        return fn(self, *args)

    method.__name__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


for _n in _CHECKED:
    setattr(NeuronProcessGroup, _n, _with_check(_n, getattr(NeuronProcessGroup, _n)))
for _alias, _n in (("all_gather_single", "_allgather_base"),
                   ("all_gather_single_coalesced", "allgather_into_tensor_coalesced"),
                   ("reduce_scatter_single", "_reduce_scatter_base"),
                   ("reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced"),
                   ("all_to_all_single", "alltoall_base")):
    setattr(NeuronProcessGroup, _alias, getattr(NeuronProcessGroup, _n))


def create(store, rank: int, world_size: int, timeout: timedelta) -> NeuronProcessGroup:
    return NeuronProcessGroup(store, rank, world_size, timeout)


_done = False


def register() -> None:
    """The "neuron" c10d backend's creator, at the device's first use (idempotent): boot
    registered the backend, light, with a creator that loads the device and calls this
    module's :func:`create`."""
    global _done
    if _done or not dist.is_available():
        return
    from .. import boot

    boot.set_process_group_factory(create)
    if _NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(_NAME, create, devices=[_NAME, "cpu"])
    _done = True

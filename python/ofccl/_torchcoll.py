"""What the FSDP2 hooks and the 'ofccl' process group share: torch reduce ops
as ofccl ops, Work objects over ofccl requests, a pool of tensors in ofccl
memory, and the dispatch of a collective on CPU tensors or CUDA tensors,
both straight to the library (which moves GPU memory GPU to GPU where the
GPUs reach each other, and stages it through host memory itself where they
do not: Python never copies a tensor for ofccl)."""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.distributed as dist

from . import buffers, gpu
from .comm import Comm, Context, Op, Request
from .errors import InvalidArgument, NotSupported

_WorkBase = getattr(dist, "_Work", None) or dist.Work


def redop(op: Any) -> Op:
    """ofccl Op of a torch ReduceOp (or RedOpType): SUM, AVG, PREMUL_SUM."""
    types = dist.ReduceOp.RedOpType
    kind = getattr(op, "op", op)
    if kind == types.SUM:
        return Op.SUM  # type: ignore[attr-defined]
    if kind == types.AVG:
        return Op.AVG  # type: ignore[attr-defined]
    if kind == types.PREMUL_SUM:
        state = op.__getstate__() if hasattr(op, "__getstate__") else None
        if not state or len(state) != 2 or state[1] is None:
            raise NotSupported("PREMUL_SUM: this torch does not expose the factor of a ReduceOp "
                               "(it does from torch 2.0 on); use AVG or divide before SUM")
        factor = state[1]
        return Op.premul_sum(float(factor.item() if hasattr(factor, "item") else factor))
    raise NotSupported(f"reduce op {kind}: ofccl reduces with SUM, AVG and PREMUL_SUM only")


class Work(_WorkBase):
    """torch.distributed Work over ofccl requests. wait() completes them (and,
    for staged CUDA tensors, makes the current stream wait for the copies);
    get_future() completes from a helper thread if nobody waits."""

    def __init__(self, reqs: Sequence[Request], result: List[Any],
                 then: Optional[Callable[[], None]] = None):
        super().__init__()
        self._reqs = list(reqs)
        self._result = result
        self._then = then
        self._lock = threading.Lock()
        self._fut: Optional[Any] = None
        self._exc: Optional[BaseException] = None
        self._done = False

    def _complete(self) -> None:
        with self._lock:
            if self._done:
                return
            try:
                for r in self._reqs:
                    r.wait()
                if self._then is not None:
                    self._then()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiter
                self._exc = exc
            self._done = True
            self._reqs = []
        if self._fut is not None and not self._fut.done():
            if self._exc is not None:
                self._fut.set_exception(self._exc)
            else:
                self._fut.set_result(self._result)

    def wait(self, timeout: Any = None) -> bool:
        self._complete()
        if self._exc is not None:
            raise self._exc
        return True

    def is_completed(self) -> bool:
        if self._done:
            return True
        if all(r.test() for r in self._reqs):
            self._complete()
        return self._done

    def is_success(self) -> bool:
        return self._done and self._exc is None

    def exception(self) -> Optional[BaseException]:
        return self._exc

    def result(self) -> List[Any]:
        return self._result

    def synchronize(self) -> None:
        self.wait()

    def get_future(self) -> Any:
        if self._fut is None:
            self._fut = torch.futures.Future()
            if self._done:
                self._complete()
            else:
                # Not a daemon: the interpreter joins it before finalizing, so it
                # never dies inside torch's bindings (bounded by the request deadline).
                threading.Thread(target=self._complete, name="ofccl-work").start()
        return self._fut


def done_work(result: List[Any]) -> Work:
    return Work([], result)


class GpuWork(Work):
    """Work over a stream-ordered GPU collective: wait() makes the current
    stream wait for it, as NCCL's Work does; the host goes on. A collective
    the library has failed (a peer gone, the deadline, an abort: it releases
    the stream itself) raises from wait() and is exception()'s answer."""

    def __init__(self, req: "gpu.GpuRequest", result: List[Any]):
        super().__init__([], result)
        self._req = req

    def _complete(self) -> None:
        try:
            self._req.wait_host()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiter
            self._exc = exc
        super()._complete()

    def wait(self, timeout: Any = None) -> bool:
        self._req.stream_wait()
        return True

    def is_completed(self) -> bool:
        return self._done or self._req.done()

    def is_success(self) -> bool:
        return self._req.done() and self._req.failure() is None

    def exception(self) -> Optional[BaseException]:
        return self._exc or self._req.failure()

    def synchronize(self) -> None:
        self._complete()
        if self._exc is not None:
            raise self._exc

def followed(work: Work, then: Callable[[], None], result: List[Any]) -> Work:
    """The same requests, completing with `then` after what `work` runs on
    completion: nothing waits at post."""
    first = work._then

    def both() -> None:
        if first is not None:
            first()
        then()
    return Work(work._reqs, result, both)


class TensorPool:
    """Tensors in ofccl memory for FSDP's buffers: freed tensors return their
    block to a free list of its size, so a training loop allocates (and the
    library registers) each buffer size once."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.free: Dict[int, List[Any]] = {}
        self.lock = threading.Lock()
        self._types: Dict[int, type] = {}

    def _lease_type(self, nbytes: int) -> type:
        t = self._types.get(nbytes)
        if t is None:
            pool = self

            def back(lease: Any) -> None:
                with pool.lock:
                    pool.free.setdefault(nbytes, []).append(lease._block)

            t = type("OfcclLease", (ctypes.c_uint8 * nbytes,), {"__del__": back})
            self._types[nbytes] = t
        return t

    def take(self, count: int, dtype: Any) -> Any:
        esize = torch.empty(0, dtype=dtype).element_size()
        nbytes = max(count * esize, 1)
        with self.lock:
            lst = self.free.get(nbytes)
            block = lst.pop() if lst else None
        if block is None:
            block = self.ctx.alloc(nbytes, torch.uint8)
        lease = self._lease_type(nbytes).from_address(block.data_ptr())
        lease._block = block  # the block lives while any tensor views the lease
        if count == 0:
            return torch.empty(0, dtype=dtype)
        return torch.frombuffer(lease, dtype=dtype, count=count)


def _flat(t: Any, what: str) -> Any:
    if not t.is_contiguous():
        raise InvalidArgument(f"{what}: tensor is not contiguous (size {tuple(t.shape)}, stride "
                              f"{t.stride()}); pass .contiguous()")
    return t.reshape(-1)


def _movable(t: Any) -> Any:
    """A view ofccl can move: any dtype travels as bytes in an all-gather."""
    return t if t.dtype in buffers.torch_dtypes() else t.view(torch.uint8)


class Collectives:
    """All-gather, reduce-scatter and broadcast on torch tensors for one
    communicator."""

    def __init__(self, comm: Comm):
        self.comm = comm

    def _on_gpu(self, t: Any) -> bool:
        if t.device.type == "cpu":
            return False
        if t.device.type != "cuda":
            raise NotSupported(f"tensor on {t.device}: ofccl moves CPU and CUDA memory; other "
                               "devices are not supported")
        return True

    def close(self) -> None:
        """Nothing to release: the library holds every buffer it stages."""

    def all_gather(self, out: Any, inp: Any) -> Work:
        o, i = _flat(out, "all_gather output"), _flat(inp, "all_gather input")
        if o.dtype != i.dtype:
            raise InvalidArgument(f"all_gather: output {o.dtype} and input {i.dtype} differ")
        if o.numel() != i.numel() * self.comm.size:
            raise InvalidArgument(f"all_gather: output has {o.numel()} elements; {self.comm.size} "
                                  f"ranks x {i.numel()} needs exactly "
                                  f"{i.numel() * self.comm.size}")
        if self._on_gpu(o) or self._on_gpu(i):
            if o.device != i.device:
                raise InvalidArgument(f"all_gather: output on {o.device}, input on {i.device}")
            return GpuWork(gpu.collectives_for(self.comm).all_gather(o, i), [out])
        return Work([self.comm.all_gather(_movable(i), _movable(o))], [out])

    def reduce_scatter(self, out: Any, inp: Any, op: Op) -> Work:
        o, i = _flat(out, "reduce_scatter output"), _flat(inp, "reduce_scatter input")
        if o.dtype != i.dtype:
            raise InvalidArgument(f"reduce_scatter: output {o.dtype} and input {i.dtype} differ")
        if i.numel() != o.numel() * self.comm.size:
            raise InvalidArgument(f"reduce_scatter: input has {i.numel()} elements; {self.comm.size}"
                                  f" ranks x {o.numel()} output elements needs exactly "
                                  f"{o.numel() * self.comm.size}")
        if o.dtype not in buffers.torch_dtypes() or o.dtype == torch.uint8:
            raise NotSupported(f"reduce_scatter on {o.dtype}: ofccl reduces float32, float64, "
                               "bfloat16 and float16")
        if self._on_gpu(o) or self._on_gpu(i):
            if o.device != i.device:
                raise InvalidArgument(f"reduce_scatter: output on {o.device}, input on {i.device}")
            return GpuWork(gpu.collectives_for(self.comm).reduce_scatter(o, i, op), [out])
        return Work([self.comm.reduce_scatter(i, o, op=op)], [out])

    def broadcast(self, t: Any, root: int) -> Work:
        """In place from `root`; any dtype (as bytes). A non-contiguous tensor
        goes through a contiguous copy, copied back on completion."""
        if self._on_gpu(t):
            flat = t if t.is_contiguous() else t.contiguous()
            req = gpu.collectives_for(self.comm).broadcast(flat, root)
            if flat is not t:  # back into the strided tensor, after it on the stream
                req.stream_wait()
                t.copy_(flat)
            return GpuWork(req, [t])
        if t.is_contiguous():
            return Work([self.comm.broadcast(_movable(t.reshape(-1)), root)], [t])
        host = t.detach().to("cpu", copy=True).contiguous()

        def back() -> None:
            t.copy_(host)
        return Work([self.comm.broadcast(_movable(host.reshape(-1)), root)], [t], back)

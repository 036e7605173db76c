"""CUDA tensors over ofccl's GPU path: symmetric GPU memory from the
communicator's pool, and all-gather, reduce-scatter and broadcast enqueued on
torch's current stream, with no host staging and no host wait.

Where every rank of the communicator is on one host and every pair of GPUs
reaches each other (P2P), the library moves the data GPU to GPU (docs/gpu.md);
elsewhere it stages GPU memory through host memory itself. Requests are
completed and freed here, behind the caller: a Work's ``wait()`` makes the
current stream wait for the collective (the host goes on), and requests whose
stream work is done are reaped on every later post. Nothing here needs
polling for a failure: the library watches its stream-ordered requests
itself and releases the stream of one that fails (a peer gone, the
deadline, an abort), keeping the error for the request's Work.
"""

from __future__ import annotations

import collections
from ctypes import byref, c_int, c_void_p
from typing import Any, Deque, List, Optional

from . import _lib, buffers
from .comm import Comm
from .errors import NotSupported, from_code

# Requests kept outstanding at most before the oldest is waited for on the
# host: the library holds 8 per communicator.
_MAX_OUTSTANDING = 6


class _PoolBlock:
    """A buffer of the communicator's symmetric GPU pool, exposed to torch
    through __cuda_array_interface__ and handed back when the last tensor
    viewing it dies."""

    def __init__(self, comm: Comm, nbytes: int, device: int):
        p = c_void_p()
        rc = _lib.lib().ofccl_gpu_buffer_alloc(comm._live(), max(nbytes, 1), byref(p))
        if rc:
            raise from_code(rc, comm.last_error or "ofccl_gpu_buffer_alloc")
        self.comm, self.ptr, self.nbytes = comm, p.value, nbytes
        self.__cuda_array_interface__ = {"shape": (max(nbytes, 1),), "typestr": "|u1",
                                         "data": (self.ptr, False), "version": 3,
                                         "strides": None}
        self.device = device

    def __del__(self) -> None:
        comm = getattr(self, "comm", None)
        if comm is not None and comm._h:
            _lib.lib().ofccl_gpu_buffer_free(comm._h, self.ptr)


class GpuCollectives:
    """All-gather, reduce-scatter and broadcast on CUDA tensors for one
    communicator."""

    def __init__(self, comm: Comm):
        self.comm = comm
        self._out: Deque[Any] = collections.deque()
        self._last_stream: Optional[int] = None

    # ---- memory ----
    def alloc(self, numel: int, dtype: Any, device: Any = None) -> Any:
        """A tensor of `numel` elements in symmetric GPU memory: every rank must
        ask for the same sizes in the same order."""
        import torch
        esize = torch.empty(0, dtype=dtype).element_size()
        dev = None if device is None else torch.device(device).index
        dev = torch.cuda.current_device() if dev is None else dev
        block = _PoolBlock(self.comm, numel * esize, dev)
        raw = torch.as_tensor(block, device=f"cuda:{dev}")
        return raw[: numel * esize].view(dtype)

    def register(self, t: Any) -> None:
        """Register a CUDA tensor's memory (any allocator's, expandable segments
        included) so that collectives into it move data straight into the
        peers' tensors. Collective: every rank registers a tensor of the same
        size at the same point; do it once, outside the step loop."""
        rc = _lib.lib().ofccl_gpu_register(self.comm._live(), c_void_p(t.data_ptr()),
                                           t.numel() * t.element_size())
        if rc:
            raise from_code(rc, self.comm.last_error or "ofccl_gpu_register")

    def deregister(self, t: Any) -> None:
        """Drop a registration (this rank only), once its collectives are done."""
        self._reap()
        rc = _lib.lib().ofccl_gpu_deregister(self.comm._live(), c_void_p(t.data_ptr()))
        if rc:
            raise from_code(rc, self.comm.last_error or "ofccl_gpu_deregister")

    # ---- requests ----
    def _before_post(self) -> None:
        """Room for one more request (the oldest waited for on the host once
        _MAX_OUTSTANDING are out), and torch's current stream as the
        communicator's."""
        self._reap()
        while len(self._out) >= _MAX_OUTSTANDING:
            self._out[0].wait_host(raise_error=False)
            self._reap()
        self._stream()

    def _stream(self) -> None:
        import torch
        s = torch.cuda.current_stream().cuda_stream
        if s == self._last_stream:
            return
        rc = _lib.lib().ofccl_comm_set_stream(self.comm._live(), c_void_p(s))
        if rc:
            raise from_code(rc, self.comm.last_error or "ofccl_comm_set_stream")
        self._last_stream = s

    def _reap(self) -> None:
        """Complete the requests whose stream work is over, oldest first (a
        failed one keeps its error for its Work)."""
        while self._out and self._out[0]._test():
            self._out.popleft()

    def _posted(self, rc: int, req: c_void_p, what: str) -> "GpuRequest":
        if rc:
            raise from_code(rc, self.comm.last_error or what)
        r = GpuRequest(self, req.value)
        self._out.append(r)
        return r

    def all_gather(self, out: Any, inp: Any) -> "GpuRequest":
        self._before_post()
        code = buffers.dtype_code(inp.dtype) if inp.dtype in buffers.torch_dtypes() else None
        if code is None:
            out, inp, code = out.view(-1).view(torch_uint8()), inp.view(-1).view(torch_uint8()), 4
        req = c_void_p()
        rc = _lib.lib().ofccl_allgather(self.comm._live(), c_void_p(inp.data_ptr()),
                                        c_void_p(out.data_ptr()), inp.numel(), code, byref(req))
        return self._posted(rc, req, "ofccl_allgather")

    def reduce_scatter(self, out: Any, inp: Any, op: Any) -> "GpuRequest":
        """Each rank's block of `inp` reduced over the ranks into `out` (`op`: an
        ofccl Op), in one fixed order of ranks (docs/reductions.md). `inp` in
        the pool or registered memory is read by the peers where it is;
        elsewhere it is copied into the pool first, on the stream."""
        self._before_post()
        code = buffers.dtype_code(inp.dtype) if inp.dtype in buffers.torch_dtypes() else None
        if code is None or code == buffers.U8:
            raise NotSupported(f"reduce_scatter on {inp.dtype}: ofccl reduces float32, float64, "
                               "bfloat16 and float16")
        req = c_void_p()
        rc = _lib.lib().ofccl_reduce_scatter(self.comm._live(), c_void_p(inp.data_ptr()),
                                             c_void_p(out.data_ptr()), out.numel(), code, op._c,
                                             byref(req))
        return self._posted(rc, req, "ofccl_reduce_scatter")

    def broadcast(self, t: Any, root: int) -> "GpuRequest":
        self._before_post()
        flat = t.view(-1).view(torch_uint8())
        req = c_void_p()
        rc = _lib.lib().ofccl_broadcast(self.comm._live(), c_void_p(flat.data_ptr()),
                                        flat.numel(), buffers.U8, root, byref(req))
        return self._posted(rc, req, "ofccl_broadcast")

    def close(self) -> None:
        """Wait for every outstanding request (on the host) and free it. After
        a failure this returns at once: the library has released them."""
        while self._out:
            self._out.popleft().wait_host(raise_error=False)


def torch_uint8() -> Any:
    import torch
    return torch.uint8


class GpuRequest:
    """A stream-ordered collective: ``stream_wait()`` makes the current stream
    (or `stream`) wait for it without blocking the host; ``done()`` says
    whether its stream work is over; ``failure()`` is its error once the
    library has failed it (a peer gone, the deadline, an abort: the library
    releases the stream by itself and keeps the error here), else None."""

    __slots__ = ("_coll", "_h", "_exc")

    def __init__(self, coll: GpuCollectives, h: int):
        self._coll, self._h = coll, h
        self._exc: Optional[BaseException] = None

    def _end(self, rc: int) -> None:
        if rc:
            self._exc = from_code(rc, self._coll.comm.last_error or "GPU collective failed")
        _lib.lib().ofccl_req_free(self._h)
        self._h = None

    def _test(self) -> bool:
        """Complete it if its stream work is over (never blocks)."""
        if self._h is None:
            return True
        done = c_int(0)
        rc = _lib.lib().ofccl_test(self._h, byref(done))
        if rc or done.value:
            self._end(rc)
        return self._h is None

    def failure(self) -> Optional[BaseException]:
        self._coll._reap()
        self._test()
        return self._exc

    def stream_wait(self, stream: Optional[Any] = None) -> None:
        """The current stream (or `stream`) waits for it; raises at once if
        the library already failed it."""
        import torch
        if self.failure() is not None:
            raise self._exc
        if self._h is None:
            return  # over: its stream work is done
        s = (stream or torch.cuda.current_stream()).cuda_stream
        rc = _lib.lib().ofccl_req_stream_wait(self._h, c_void_p(s))
        if rc:
            raise from_code(rc, self._coll.comm.last_error or "ofccl_req_stream_wait")

    def done(self) -> bool:
        self._coll._reap()
        return self._test()

    def wait_host(self, raise_error: bool = True) -> None:
        """Block the host until it is over, bounded by the communicator's
        deadline (and raise its error)."""
        if self._h is not None:
            self._end(_lib.lib().ofccl_wait(self._h))
        if raise_error and self._exc is not None:
            raise self._exc


def collectives_for(comm: Comm) -> GpuCollectives:
    """The communicator's GpuCollectives, made once."""
    g = getattr(comm, "_gpu", None)
    if g is None:
        g = GpuCollectives(comm)
        comm._gpu = g
    return g

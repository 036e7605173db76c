"""CUDA tensors over ofccl's GPU path: symmetric GPU memory from the
communicator's pool, and all-gather, reduce-scatter and broadcast enqueued on
torch's current stream, with no host staging and no host wait.

Where every rank of the communicator is on one host and every pair of GPUs
reaches each other (P2P), the library moves the data GPU to GPU (docs/gpu.md);
elsewhere it stages GPU memory through host memory itself. Requests are
completed and freed here, behind the caller: a Work's ``wait()`` makes the
current stream wait for the collective (the host goes on), and requests whose
stream work is done are reaped on every later post.
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
        """Room for one more request (the oldest waited for when half the
        library's slots are taken), and torch's current stream as the
        communicator's."""
        if len(self._out) >= _MAX_OUTSTANDING // 2:
            self._reap(block=True)
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

    def _reap(self, block: bool = False) -> None:
        lib = _lib.lib()
        done = c_int(0)
        while self._out:
            h = self._out[0]
            if block and len(self._out) >= _MAX_OUTSTANDING:
                rc = lib.ofccl_wait(h)
            else:
                rc = lib.ofccl_test(h, byref(done))
                if not rc and not done.value:
                    return
            self._out.popleft()
            lib.ofccl_req_free(h)
            if rc:
                raise from_code(rc, self.comm.last_error or "GPU collective failed")

    def _posted(self, rc: int, req: c_void_p, what: str) -> "GpuRequest":
        if rc:
            raise from_code(rc, self.comm.last_error or what)
        self._out.append(req.value)
        return GpuRequest(self, req.value)

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
        """Wait for every outstanding request (on the host) and free it."""
        lib = _lib.lib()
        while self._out:
            h = self._out.popleft()
            lib.ofccl_wait(h)
            lib.ofccl_req_free(h)


def torch_uint8() -> Any:
    import torch
    return torch.uint8


class GpuRequest:
    """A stream-ordered collective: ``stream_wait()`` makes the current stream
    (or `stream`) wait for it without blocking the host; ``done()`` says
    whether its stream work is over. Completing and freeing it is the
    GpuCollectives' business."""

    __slots__ = ("_coll", "_h")

    def __init__(self, coll: GpuCollectives, h: int):
        self._coll, self._h = coll, h

    def _live(self) -> bool:
        return self._h in self._coll._out

    def stream_wait(self, stream: Optional[Any] = None) -> None:
        import torch
        if not self._live():
            return  # reaped: its stream work is over
        s = (stream or torch.cuda.current_stream()).cuda_stream
        rc = _lib.lib().ofccl_req_stream_wait(self._h, c_void_p(s))
        if rc:
            raise from_code(rc, self._coll.comm.last_error or "ofccl_req_stream_wait")

    def done(self) -> bool:
        if not self._live():
            return True
        self._coll._reap()
        return not self._live()

    def wait_host(self) -> None:
        """Block the host until it is over (and reap it)."""
        while self._live():
            self._coll._reap(block=False)
            if self._live():
                lib = _lib.lib()
                rc = lib.ofccl_wait(self._h)
                if rc:
                    self._coll._out.remove(self._h)
                    lib.ofccl_req_free(self._h)
                    raise from_code(rc, self._coll.comm.last_error or "GPU collective failed")


def collectives_for(comm: Comm) -> GpuCollectives:
    """The communicator's GpuCollectives, made once."""
    g = getattr(comm, "_gpu", None)
    if g is None:
        g = GpuCollectives(comm)
        comm._gpu = g
    return g


def _outstanding(comm: Comm) -> List[int]:
    g = getattr(comm, "_gpu", None)
    return list(g._out) if g is not None else []

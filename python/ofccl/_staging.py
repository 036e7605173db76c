"""Device tensors through pinned ofccl memory, chunk by chunk.

Debian's libfabric has no GPU support, so a CUDA tensor is moved through host
memory: ofccl memory (ofccl_mem_alloc, so the collective itself needs no
staging copy) pinned with cudaHostRegister. A collective is cut into chunks;
on a side stream the device-to-host copy of chunk k+1 overlaps the collective
of chunk k and the host-to-device copy of chunk k-1. Every rank cuts the same
chunks (the sizes agree), so the chunk collectives match across ranks.

The copy engine is an object with ``copy(dst, src)``, ``mark()`` and
``sync(mark)``, so the chunk arithmetic runs (and is tested) on CPU tensors
with plain synchronous copies; ``CudaEngine`` is the one used with GPUs.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

from .comm import Comm, Op, Request

CHUNK_BYTES = 4 << 20
MAX_INFLIGHT = 4  # chunk collectives in flight (ofccl allows 8 per communicator)


class SyncEngine:
    """Synchronous copies: CPU tensors, and the tests of the chunking."""

    def copy(self, dst: Any, src: Any) -> None:
        dst.copy_(src)

    def mark(self) -> Any:
        return None

    def sync(self, mark: Any) -> None:
        pass

    def finish(self) -> Any:
        return None


class CudaEngine:
    """Copies on a side stream that first waits for the caller's stream; marks
    are CUDA events. finish() returns the event the caller's stream must wait
    for before reading the outputs."""

    def __init__(self, torch: Any, device: Any):
        self.torch = torch
        self.stream = torch.cuda.Stream(device=device)
        self.stream.wait_stream(torch.cuda.current_stream(device))

    def copy(self, dst: Any, src: Any) -> None:
        with self.torch.cuda.stream(self.stream):
            dst.copy_(src, non_blocking=True)

    def mark(self) -> Any:
        ev = self.torch.cuda.Event()
        ev.record(self.stream)
        return ev

    def sync(self, mark: Any) -> None:
        mark.synchronize()

    def finish(self) -> Any:
        return self.mark()


class HostBuffers:
    """Pinned ofccl memory for staging, grown as needed and reused; a new call
    first waits until the previous call's copies out of it are done. A block
    that is outgrown is unregistered before it is dropped: its memory goes
    back to ofccl's pool, and a later block carved from the same pages must
    not meet a stale registration (CUDA takes a copy whose host range starts
    inside a registered range for pinned and refuses it when the range runs
    past it: "invalid argument")."""

    def __init__(self, comm: Comm):
        self.comm = comm
        self.blocks: dict = {}
        self.pinned: dict = {}
        self.pending: Optional[Any] = None  # event of the last call's final copies

    def get(self, slot: str, count: int, dtype: Any) -> Any:
        torch = _torch()
        need = count * torch.empty(0, dtype=dtype).element_size()
        blk = self.blocks.get(slot)
        if blk is None or blk.numel() < need:
            if blk is not None:
                self.begin()  # no copy may still read or write the old block
                _unpin(torch, blk, self.pinned.pop(slot, False))
            grow = 2 * blk.numel() if blk is not None else 0
            blk = self.comm.ctx.alloc(max(need, grow, 1), torch.uint8)
            self.pinned[slot] = _pin(torch, blk)
            self.blocks[slot] = blk
        return blk[:need].view(dtype)

    def begin(self) -> None:
        if self.pending is not None:
            self.pending.synchronize()
        self.pending = None

    def close(self) -> None:
        """Unregister every block (after the last copies); the blocks go with
        their last views."""
        torch = _torch()
        self.begin()
        for slot, blk in self.blocks.items():
            _unpin(torch, blk, self.pinned.get(slot, False))
        self.blocks, self.pinned = {}, {}

    def __del__(self) -> None:
        # The blocks go back to ofccl's pool with this object: never registered.
        try:
            self.close()
        except Exception:  # interpreter shutdown: torch may be gone
            pass


def _torch() -> Any:
    import torch
    return torch


def _pin(torch: Any, t: Any) -> bool:
    """Page-lock host memory so device copies run asynchronously; without CUDA
    (or if registration fails) the copies are simply synchronous. True when
    this call registered it."""
    if not torch.cuda.is_available():
        return False
    try:
        rc = torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0)
    except (AttributeError, RuntimeError):
        return False
    return int(getattr(rc, "value", rc)) == 0


def _unpin(torch: Any, t: Any, pinned: bool) -> None:
    if pinned:
        try:
            torch.cuda.cudart().cudaHostUnregister(t.data_ptr())
        except (AttributeError, RuntimeError):
            pass


def _chunks(n: int, esize: int, chunk_bytes: int) -> List[tuple]:
    c = max(1, chunk_bytes // max(esize, 1))
    return [(k, min(c, n - k)) for k in range(0, n, c)] or [(0, 0)]


def _drive(posts: List[Callable[[], Request]], after: List[Callable[[], None]]) -> None:
    """Post chunk collectives in order, at most MAX_INFLIGHT at once; run each
    chunk's copy-out as soon as it completes."""
    inflight: List[tuple] = []
    for k, post in enumerate(posts):
        if len(inflight) >= MAX_INFLIGHT:
            req, j = inflight.pop(0)
            req.wait()
            after[j]()
        inflight.append((post(), k))
    for req, j in inflight:
        req.wait()
        after[j]()


def all_gather(comm: Comm, bufs: HostBuffers, engine: Any, out: Any, inp: Any,
               chunk_bytes: int = CHUNK_BYTES) -> Any:
    """out (size * n elements, any device) = every rank's inp (n elements)."""
    size, n = comm.size, inp.numel()
    src, dst = inp.reshape(-1), out.reshape(size, n)
    chunks = _chunks(n, inp.element_size(), chunk_bytes)
    bufs.begin()
    h_in = bufs.get("ag_in", n, inp.dtype)
    h_out = bufs.get("ag_out", size * n, inp.dtype)
    marks = []
    for off, c in chunks:  # every device-to-host copy first, in stream order
        engine.copy(h_in[off:off + c], src[off:off + c])
        marks.append(engine.mark())

    def post(i: int) -> Callable[[], Request]:
        off, c = chunks[i]

        def go() -> Request:
            engine.sync(marks[i])
            return comm.all_gather(h_in[off:off + c], h_out[size * off:size * (off + c)])
        return go

    def copy_out(i: int) -> Callable[[], None]:
        off, c = chunks[i]
        return lambda: engine.copy(dst[:, off:off + c],
                                   h_out[size * off:size * (off + c)].view(size, c))

    _drive([post(i) for i in range(len(chunks))], [copy_out(i) for i in range(len(chunks))])
    bufs.pending = engine.finish()
    return bufs.pending


def reduce_scatter(comm: Comm, bufs: HostBuffers, engine: Any, out: Any, inp: Any, op: Op,
                   chunk_bytes: int = CHUNK_BYTES) -> Any:
    """out (n elements) = op over ranks of their inp[rank * n:(rank + 1) * n]."""
    size, n = comm.size, out.numel()
    src, dst = inp.reshape(size, n), out.reshape(-1)
    chunks = _chunks(n, inp.element_size(), chunk_bytes)
    bufs.begin()
    h_in = bufs.get("rs_in", size * n, inp.dtype)
    h_out = bufs.get("rs_out", n, inp.dtype)
    marks = []
    for off, c in chunks:
        engine.copy(h_in[size * off:size * (off + c)].view(size, c), src[:, off:off + c])
        marks.append(engine.mark())

    def post(i: int) -> Callable[[], Request]:
        off, c = chunks[i]

        def go() -> Request:
            engine.sync(marks[i])
            return comm.reduce_scatter(h_in[size * off:size * (off + c)], h_out[off:off + c],
                                       op=op)
        return go

    def copy_out(i: int) -> Callable[[], None]:
        off, c = chunks[i]
        return lambda: engine.copy(dst[off:off + c], h_out[off:off + c])

    _drive([post(i) for i in range(len(chunks))], [copy_out(i) for i in range(len(chunks))])
    bufs.pending = engine.finish()
    return bufs.pending


"""Weight push: senders (trainer ranks) push their shards of a set of named
tensors straight into every receiver's (rollout rank's) bucket buffer, bucket
by bucket, double-buffered (ofccl_push_plan_create / ofccl_push_bucket).

    plan = comm.push_plan([("w", (1024, 64), "bf16"), ("b", 64, "float32")],
                          senders=[0, 1], receivers=[2, 3], bucket_bytes=1 << 20)
    # sender:   one shard per tensor (plan.shard_of(t, full) slices a full tensor)
    for k, _ in plan.push(shards=[plan.shard_of(t, x) for t, x in enumerate(fulls)]): pass
    # receiver: bucket k's tensors are readable until bucket k + 2 is posted
    for k, buf in plan.push():
        for t in plan.bucket_tensors(k): use(plan.names[t], plan.view(t, buf))

Sender i (its place in `senders`) owns elements [i*c, min((i+1)*c, count)) of
every flattened tensor, c = ceil(count / len(senders)) (``shard_range``).
Tensors are grouped in order into buckets of about `bucket_bytes` (a larger
tensor is a bucket of its own); a receiver may ask for a slice of each tensor.

With ``gpu=True`` (every rank alike; one host, every pair of GPUs P2P) the
plan moves GPU memory: senders pass CUDA shards, receivers get the plan's own
buffers as CUDA tensors (symmetric GPU memory), and each bucket goes GPU to
GPU by the copy engines, enqueued on torch's current stream (docs/gpu.md).
"""

from __future__ import annotations

import ctypes
import gc
import weakref
from ctypes import byref, c_int, c_size_t, c_void_p
from typing import Any, AsyncIterator, Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from . import _lib, buffers
from .comm import Comm, Request
from .errors import Busy, Error, InvalidArgument, from_code


class _View:
    """Keeps the plan alive while an array views one of its buffers."""

    __slots__ = ("plan", "__weakref__")

    def __init__(self, plan: "PushPlan"):
        self.plan = plan


class _GpuView:
    """A GPU plan's receive buffer for torch (__cuda_array_interface__): the
    tensors over it keep it, and so the plan, alive."""

    def __init__(self, plan: "PushPlan", ptr: int, nbytes: int):
        self.view = _View(plan)
        plan._views.add(self.view)
        self.__cuda_array_interface__ = {"shape": (max(nbytes, 1),), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3, "strides": None}


def _ints(seq: Sequence[int], what: str, size: int) -> List[int]:
    out = [int(r) for r in seq]
    bad = [r for r in out if not 0 <= r < size]
    if bad or len(set(out)) != len(out) or not out:
        raise InvalidArgument(f"push plan: {what} {out} must be distinct ranks of this "
                              f"communicator (0..{size - 1}), at least one")
    return out


class PushPlan:
    """One push plan on a communicator (collective to create: every rank passes
    the same tensors, senders, receivers and bucket_bytes, else ofccl.Mismatch
    naming the field). ``tensors`` are (name, shape, dtype) triples; ``slices``
    (receivers only) an (offset, count) in elements per tensor."""

    def __init__(self, comm: Comm, tensors: Sequence[Tuple[str, Any, Any]],
                 senders: Sequence[int], receivers: Sequence[int], *, bucket_bytes: int = 0,
                 slices: Optional[Sequence[Tuple[int, int]]] = None, gpu: bool = False):
        h = comm._live()
        self.comm = comm
        self.gpu = bool(gpu)
        self._h: Optional[int] = None
        self._views: "weakref.WeakSet[_View]" = weakref.WeakSet()
        self.senders = _ints(senders, "senders", comm.size)
        self.receivers = _ints(receivers, "receivers", comm.size)
        self.names: List[str] = []
        self.shapes: List[Tuple[int, ...]] = []
        self.dtypes: List[int] = []
        self.counts: List[int] = []
        for i, item in enumerate(tensors):
            try:
                name, shape, dtype = item
            except (TypeError, ValueError):
                raise InvalidArgument(f"push plan: tensor {i} is not a (name, shape, dtype) "
                                      "triple") from None
            shape = (int(shape),) if isinstance(shape, (int, np.integer)) else \
                tuple(int(s) for s in shape)
            if any(s < 0 for s in shape):
                raise InvalidArgument(f"push plan: tensor {i} ({name}) has shape {shape}")
            self.names.append(str(name))
            self.shapes.append(shape)
            self.dtypes.append(buffers.dtype_code(dtype))
            self.counts.append(int(np.prod(shape, dtype=np.int64)) if shape else 1)
        nt = len(self.names)
        self.sender_index = self.senders.index(comm.rank) if comm.rank in self.senders else -1
        self.is_sender = self.sender_index >= 0
        self.is_receiver = comm.rank in self.receivers
        self.slices = None
        if slices is not None:
            sl = [(int(o), int(c)) for o, c in slices]
            if len(sl) != nt or any(o < 0 or c < 0 or o + c > n
                                    for (o, c), n in zip(sl, self.counts)):
                raise InvalidArgument(f"push plan: slices must give one (offset, count) within "
                                      f"each of the {nt} tensors")
            self.slices = sl
        spec = _lib.PushSpec()
        spec.size = ctypes.sizeof(spec)
        keep = [(c_int * len(self.senders))(*self.senders),
                (c_int * len(self.receivers))(*self.receivers),
                (c_size_t * max(nt, 1))(*self.counts), (c_int * max(nt, 1))(*self.dtypes)]
        spec.nsenders, spec.senders = len(self.senders), keep[0]
        spec.nreceivers, spec.receivers = len(self.receivers), keep[1]
        spec.ntensors, spec.counts, spec.dtypes = nt, keep[2], keep[3]
        spec.bucket_bytes = int(bucket_bytes)
        spec.gpu = 1 if self.gpu else 0
        if self.slices is not None:
            keep += [(c_size_t * max(nt, 1))(*[o for o, _ in self.slices]),
                     (c_size_t * max(nt, 1))(*[c for _, c in self.slices])]
            spec.slice_offset, spec.slice_count = keep[4], keep[5]
        ph = c_void_p()
        comm._check(_lib.lib().ofccl_push_plan_create(h, byref(spec), byref(ph)),
                    "ofccl_push_plan_create")
        self._h = ph.value
        nb, mx = c_int(), c_size_t()
        self._check(_lib.lib().ofccl_push_plan_info(self._h, byref(nb), byref(mx)))
        self.nbuckets, self.max_bucket_bytes = nb.value, mx.value
        self._where: List[Tuple[int, int, int]] = []
        self.in_flight: dict = {}
        if self.is_receiver:
            b, off, n = c_int(), c_size_t(), c_size_t()
            for t in range(nt):
                self._check(_lib.lib().ofccl_push_tensor_where(self._h, t, byref(b), byref(off),
                                                               byref(n)))
                self._where.append((b.value, off.value, n.value))
        if not hasattr(comm, "_plans"):
            comm._plans = weakref.WeakSet()
        comm._plans.add(self)

    def _check(self, rc: int, what: str = "push") -> None:
        if rc:
            raise from_code(rc, self.comm.last_error or what)

    def _live(self) -> int:
        if not self._h:
            raise from_code(-15, "push plan is closed")
        return self._h

    # ---- layout -------------------------------------------------------------
    def shard_range(self, t: int) -> Tuple[int, int]:
        """(first element, count) of this sender's shard of tensor t."""
        if not self.is_sender:
            raise InvalidArgument(f"rank {self.comm.rank} is not a sender of this plan")
        n = self.counts[t]
        c = -(-n // len(self.senders))
        s0 = min(self.sender_index * c, n)
        return s0, min(s0 + c, n) - s0

    def shard_of(self, t: int, full: Any) -> Any:
        """This sender's shard of a full tensor t (numpy array or CPU torch tensor,
        contiguous; a CUDA tensor for a GPU plan): a view, no copy."""
        if self.gpu:
            got = self._cuda(full, f"push tensor {t} ({self.names[t]})", t).numel()
        else:
            got = buffers.resolve(full, f"push tensor {t} ({self.names[t]})", self.dtypes[t],
                                  False)[1]
        if got != self.counts[t]:
            raise InvalidArgument(f"push tensor {t} ({self.names[t]}): {got} elements, the plan "
                                  f"has {self.counts[t]}")
        s0, n = self.shard_range(t)
        return full.reshape(-1)[s0:s0 + n]

    def _cuda(self, x: Any, what: str, t: int) -> Any:
        """A GPU plan's tensor: CUDA, contiguous, of tensor t's element size."""
        if getattr(x, "device", None) is None or x.device.type != "cuda":
            raise InvalidArgument(f"{what}: a GPU plan takes CUDA tensors, got "
                                  f"{getattr(x, 'device', type(x).__name__)}")
        if not x.is_contiguous():
            raise InvalidArgument(f"{what}: not contiguous")
        if x.element_size() != buffers.ITEMSIZE[self.dtypes[t]]:
            raise InvalidArgument(f"{what}: {x.dtype} has {x.element_size()}-byte elements, the "
                                  f"plan's dtype {buffers.NAMES[self.dtypes[t]]} "
                                  f"{buffers.ITEMSIZE[self.dtypes[t]]}")
        return x

    def where(self, t: int) -> Tuple[int, int, int]:
        """Receivers: (bucket, byte offset in the bucket's buffer, bytes) of tensor t."""
        if not self.is_receiver:
            raise InvalidArgument(f"rank {self.comm.rank} is not a receiver of this plan")
        return self._where[t]

    def bucket_tensors(self, k: int) -> List[int]:
        """Receivers: the tensors (indices) of bucket k, in order."""
        return [t for t in range(len(self.names)) if self.where(t)[0] == k]

    def view(self, t: int, buf: Any, *, torch: bool = False) -> Any:
        """Tensor t (or its slice) inside a received bucket buffer: a numpy array
        of its dtype and shape (bf16 as uint16 bits), or with torch=True a torch
        tensor; no copy."""
        _, off, n = self.where(t)
        code = self.dtypes[t]
        shape = self.shapes[t] if self.slices is None else (self.slices[t][1],)
        if self.gpu:  # a CUDA uint8 tensor over the plan's GPU buffer
            dt = {v: k for k, v in buffers.torch_dtypes().items()}[code]
            return buf[off:off + n].view(dt).reshape(shape)
        raw = np.asarray(buf, dtype=np.uint8).reshape(-1)[off:off + n]
        if torch:
            import torch as th
            tt = th.from_numpy(raw) if n else th.empty(0, dtype=th.uint8)
            dt = {v: k for k, v in buffers.torch_dtypes().items()}[code]
            return tt.view(dt).reshape(shape)
        np_dt = np.uint16 if code == buffers.BF16 else np.dtype(buffers.NAMES[code])
        return raw.view(np_dt).reshape(shape)

    def buffer(self, k: int) -> Any:
        """The plan's own receive buffer of bucket k (k % 2), once k was posted
        (a CUDA uint8 tensor for a GPU plan)."""
        p = c_void_p()
        self._check(_lib.lib().ofccl_push_buffer(self._live(), k, byref(p)), "ofccl_push_buffer")
        if self.gpu:
            import torch as th
            return th.as_tensor(_GpuView(self, p.value, self.max_bucket_bytes),
                                device="cuda")[:self.max_bucket_bytes]
        raw = (ctypes.c_uint8 * max(self.max_bucket_bytes, 1)).from_address(p.value)
        holder = _View(self)
        self._views.add(holder)
        raw._ofccl_view = holder  # the array's base keeps the plan (and buffer) alive
        return np.frombuffer(raw, dtype=np.uint8, count=self.max_bucket_bytes)

    # ---- pushing ------------------------------------------------------------
    def _shards(self, shards: Optional[Sequence[Any]]) -> Any:
        if not self.is_sender:
            if shards is not None:
                raise InvalidArgument(f"rank {self.comm.rank} is not a sender: pass no shards")
            return None
        if shards is None or len(shards) != len(self.names):
            raise InvalidArgument(f"push: a sender passes one shard per tensor "
                                  f"({len(self.names)}), got "
                                  f"{'none' if shards is None else len(shards)}")
        arr = (c_void_p * max(len(shards), 1))()
        for t, s in enumerate(shards):
            if self.gpu:
                p, n = self._cuda(s, f"push shard {t} ({self.names[t]})", t).data_ptr(), s.numel()
            else:
                p, n, _ = buffers.resolve(s, f"push shard {t} ({self.names[t]})", self.dtypes[t],
                                          False)
            want = self.shard_range(t)[1]
            if n != want:
                raise InvalidArgument(
                    f"push shard {t} ({self.names[t]}): {n} elements; sender {self.sender_index} "
                    f"(rank {self.comm.rank}) owns {want} of its {self.counts[t]} (shard_range)")
            arr[t] = p
        return arr

    def post(self, k: int, shards: Any = None, buf: Any = None,
             used: Optional[Sequence[int]] = None) -> Request:
        """Post bucket k on this rank (every rank posts the buckets in the same
        order). A sender passes its shards (one per tensor, or the array from an
        earlier post); a receiver a writable buffer of at least the bucket's
        bytes, or None for the plan's own buffer k % 2. ``used`` (senders, the
        same on each): per tensor of the plan, the elements of it that move (a
        prefix; all 0 for the bucket's tensors: an empty bucket). The Request's
        result is the receive buffer (None on a pure sender)."""
        h = self._live()
        used_arr = None
        if used is not None:
            if len(used) != len(self.names) or any(int(u) < 0 for u in used):
                raise InvalidArgument(f"push bucket {k}: used gives one element count (>= 0) per "
                                      f"tensor ({len(self.names)}), got {list(used)}")
            used_arr = (c_size_t * max(len(used), 1))(*[int(u) for u in used])
        arr = shards if isinstance(shards, ctypes.Array) else self._shards(shards)
        bp, blen = None, 0
        if self.gpu:  # enqueued on torch's current stream
            from . import gpu as _gpu
            _gpu.collectives_for(self.comm)._stream()
            if buf is not None:
                raise InvalidArgument(f"push bucket {k}: a GPU plan receives into its own "
                                      "buffers only (pass no buf)")
        if buf is not None:
            if not self.is_receiver:
                raise InvalidArgument(f"rank {self.comm.rank} is not a receiver: pass no buf")
            bp, blen, _, writable = buffers._native(buf, f"push bucket {k} buffer")
            if not writable:
                raise InvalidArgument(f"push bucket {k} buffer: read-only")
        req = c_void_p()
        if used_arr is None:
            rc = _lib.lib().ofccl_push_bucket(h, int(k), arr, bp, blen, byref(req))
        else:
            rc = _lib.lib().ofccl_push_bucket_used(h, int(k), arr, used_arr, bp, blen, byref(req))
        if rc:
            raise from_code(rc, self.comm.last_error or "ofccl_push_bucket")
        result = None
        if self.is_receiver:
            result = buf if buf is not None else self.buffer(k)
        return Request(self.comm, req.value, (shards, arr, buf, self), result)

    def _start(self, shards: Optional[Sequence[Any]],
               buffers_: Optional[Sequence[Any]]) -> Callable[[int], None]:
        """Post the first two buckets; returns what posts bucket k + 2 once k
        was handed to the caller (into k's buffer)."""
        if buffers_ is not None and len(buffers_) != 2:
            raise InvalidArgument("push: pass two receive buffers (double buffering) or none")
        arr = self._shards(shards)
        bufs = buffers_ or (None, None)
        self.in_flight = {k: self.post(k, arr, bufs[k % 2]) for k in range(min(2, self.nbuckets))}

        def advance(k: int) -> None:
            if k + 2 < self.nbuckets:
                self.in_flight[k + 2] = self.post(k + 2, arr, bufs[k % 2])
        return advance

    def push(self, shards: Optional[Sequence[Any]] = None,
             buffers: Optional[Sequence[Any]] = None) -> Iterator[Tuple[int, Any]]:
        """Every bucket, two in flight: yields (k, receive buffer or None) as
        bucket k completes; bucket k + 2 is posted into the same buffer only
        when the caller asks for the next one. ``in_flight`` maps the buckets
        posted and not yet yielded to their Requests."""
        advance = self._start(shards, buffers)
        try:
            for k in range(self.nbuckets):
                yield k, self.in_flight.pop(k).wait()
                advance(k)
        finally:
            self._drain(self.in_flight)

    async def push_async(self, shards: Optional[Sequence[Any]] = None,
                         buffers: Optional[Sequence[Any]] = None
                         ) -> AsyncIterator[Tuple[int, Any]]:
        """push() for asyncio: awaits each bucket instead of blocking."""
        advance = self._start(shards, buffers)
        try:
            for k in range(self.nbuckets):
                yield k, await self.in_flight.pop(k)
                advance(k)
        finally:
            self._drain(self.in_flight)

    @staticmethod
    def _drain(reqs: dict) -> None:
        """Buckets left posted when a loop stops early finish (or fail) first:
        their buffers must not be reused or freed under them."""
        for r in reqs.values():
            try:
                r.wait()
            except Exception:  # noqa: BLE001 - the loop's own error is the one raised
                pass

    def close(self) -> None:
        """Destroy the plan (local). Busy while a bucket runs or while arrays
        returned by buffer() (or views of them) are alive."""
        if not self._h:
            return
        gc.collect()
        if len(self._views):
            raise Busy(f"PushPlan.close: {len(self._views)} view(s) of the plan's receive "
                       "buffers are still alive; delete them (or copy what you keep) first")
        for r in list(self.comm._pending):  # buckets over but not yet reaped: freed now
            try:
                r.test()
            except Error:
                pass  # its error is the communicator's too, and no one waits for it
        self._check(_lib.lib().ofccl_push_plan_destroy(self._h), "ofccl_push_plan_destroy")
        self._h = None

    def __enter__(self) -> "PushPlan":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if self._h and not len(self._views):
                _lib.lib().ofccl_push_plan_destroy(self._h)
                self._h = None
        except Exception:  # interpreter shutdown: modules may be gone
            pass

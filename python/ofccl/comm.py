"""Context, Comm and Request: the C objects of ofccl.h, one Python object each.

A Request keeps the Python buffers of its collective alive and frees the C
request once it completes (wait() or test() saw it finish), so a caller never
manages C lifetimes. A Comm keeps its unfinished requests, so dropping a
Request object does not free memory a collective is still writing.
"""

from __future__ import annotations

import abc
import asyncio
import ctypes
import gc
import os
import sys
import weakref
from ctypes import byref, c_int, c_size_t, c_void_p
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib, _profile, buffers
from .errors import Busy, InvalidArgument, from_code

OP_SUM, OP_AVG, OP_PREMUL_SUM = 0, 1, 2
_modules = sys.modules  # "torch" in it: profiler ranges may be wanted


class Op:
    """A reduction: ``Op.SUM``, ``Op.AVG`` or ``Op.premul_sum(factor)`` (each input
    multiplied by `factor` before the sum). Strings "sum" and "avg" work too."""

    __slots__ = ("kind", "scalar", "_c")

    def __init__(self, kind: int, scalar: float = 1.0):
        self.kind = kind
        self.scalar = float(scalar)
        self._c = _lib.Redop(kind, self.scalar)

    @staticmethod
    def premul_sum(factor: float) -> "Op":
        return Op(OP_PREMUL_SUM, factor)

    def __repr__(self) -> str:
        names = ("SUM", "AVG", "PREMUL_SUM")
        return f"Op.{names[self.kind]}" + (f"({self.scalar})" if self.kind == 2 else "")


Op.SUM = Op(OP_SUM)  # type: ignore[attr-defined]
Op.AVG = Op(OP_AVG)  # type: ignore[attr-defined]
_OPS = {"sum": Op.SUM, "avg": Op.AVG, "mean": Op.AVG}  # type: ignore[attr-defined]
OpLike = Union[Op, str]


def _op(op: OpLike) -> Op:
    hit = _OPS.get(op) if op.__class__ is str else None
    if hit is not None:
        return hit
    if isinstance(op, Op):
        return op
    if isinstance(op, str) and op.lower() in _OPS:
        return _OPS[op.lower()]
    raise InvalidArgument(f"unknown reduction {op!r}: use 'sum', 'avg' or "
                          "ofccl.Op.premul_sum(factor)")


def _settings(settings: Union[None, Mapping[str, Any], Iterable[str]]) -> list:
    items = []
    if settings is None:
        return items
    pairs = settings.items() if isinstance(settings, Mapping) else (
        s.split("=", 1) if "=" in s else (s, None) for s in settings)
    for name, value in pairs:
        if value is None:
            raise InvalidArgument(f"setting {name!r} has no value: write NAME=value")
        name = str(name)
        if name.upper().startswith("OFCCL_"):
            name = name[6:]
        items.append(f"{name.upper()}={value}".encode())
    return items


class _Mem:
    """One ofccl_mem_alloc block (owner: a Context) or ofccl_buffer_alloc pool
    buffer (owner: a Comm); freed when the last array viewing it dies."""

    __slots__ = ("owner", "ptr", "nbytes", "pool", "__weakref__")

    def __init__(self, owner: Any, nbytes: int, pool: bool = False):
        p = c_void_p()
        lib = _lib.lib()
        alloc = lib.ofccl_buffer_alloc if pool else lib.ofccl_mem_alloc
        rc = alloc(owner._h, max(nbytes, 1), byref(p))
        if rc:
            raise from_code(rc, owner.last_error or f"allocating {nbytes} bytes")
        self.owner, self.ptr, self.nbytes, self.pool = owner, p.value, nbytes, pool
        owner._mems.add(self)

    def __del__(self) -> None:
        owner = self.owner
        if owner is not None and owner._h:
            lib = _lib.lib()
            (lib.ofccl_buffer_free if self.pool else lib.ofccl_mem_free)(owner._h, self.ptr)


def _array_over(mem: _Mem, shape: Tuple[int, ...], count: int, code: int, dtype: Any) -> Any:
    """A numpy array, or a torch tensor when dtype is a torch dtype, viewing mem."""
    torch = buffers._torch()
    nbytes = mem.nbytes
    raw = (ctypes.c_uint8 * max(nbytes, 1)).from_address(mem.ptr)
    raw._ofccl_mem = mem  # the array's base keeps the block alive
    if torch is not None and isinstance(dtype, torch.dtype):
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(raw, dtype=dtype, count=count).view(shape)
    if code == buffers.BF16:
        raise InvalidArgument("alloc: numpy has no bfloat16; pass dtype=torch.bfloat16")
    return np.frombuffer(raw, dtype=buffers.NAMES[code], count=count).reshape(shape)


def _shape(shape: Union[int, Sequence[int]], dtype: Any) -> Tuple[Tuple[int, ...], int, int, int]:
    shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if count < 0:
        raise InvalidArgument(f"alloc: negative shape {shape}")
    code = buffers.dtype_code(dtype)
    return shape, count, code, count * buffers.ITEMSIZE[code]


class Context:
    """One ofccl context: configuration, bootstrap (PMIx, TCP rendezvous or
    singleton) and the fabric. Collective over the job.

    ``settings`` override the OFCCL_* environment, e.g. ``{"BOOT_ROOT":
    "127.0.0.1:29500", "BOOT_RANK": 0, "BOOT_SIZE": 2}`` or ``["PROVIDER=tcp"]``.
    """

    def __init__(self, settings: Union[None, Mapping[str, Any], Iterable[str]] = None):
        lib = _lib.lib()
        items = _settings(settings)
        arr = (ctypes.c_char_p * (len(items) + 1))(*items, None)
        err = ctypes.create_string_buffer(1024)
        params = _lib.CtxParams(ctypes.sizeof(_lib.CtxParams), arr, err, len(err))
        h = c_void_p()
        self._h: Optional[int] = None
        self._mems: "weakref.WeakSet[_Mem]" = weakref.WeakSet()
        self._ncomms = 0  # open communicators (a count survives interpreter shutdown)
        rc = lib.ofccl_ctx_create(byref(params), byref(h))
        if rc:
            raise from_code(rc, "ofccl_ctx_create: " + _lib.text(err.value))
        self._h = h.value

    @property
    def provider(self) -> str:
        return _lib.text(_lib.lib().ofccl_ctx_provider(self._h))

    @property
    def last_error(self) -> str:
        return _lib.text(_lib.lib().ofccl_ctx_last_error(self._h)) if self._h else ""

    def _check(self, rc: int, what: str) -> None:
        if rc:
            raise from_code(rc, self.last_error or what)

    def world(self) -> "Comm":
        """A communicator over every rank of the job (collective)."""
        h = c_void_p()
        self._check(_lib.lib().ofccl_comm_world(self._h, byref(h)), "ofccl_comm_world")
        comm = Comm(self, h.value)
        self._ncomms += 1
        return comm

    def stats(self) -> dict:
        """ofccl_ctx_stats as a dict (registrations, staged_bytes, ...)."""
        st = _lib.Stats()
        st.size = ctypes.sizeof(st)
        self._check(_lib.lib().ofccl_ctx_stats(self._h, byref(st)), "ofccl_ctx_stats")
        return {name: getattr(st, name) for name, _ in _lib.Stats._fields_[1:]}

    def dump_state(self) -> str:
        """ofccl_dump_state as text: every pending request of every communicator of
        the context (operation, sequence number, phase, the peers it still waits
        for). Safe while requests are pending; it moves nothing."""
        libc = ctypes.CDLL(None)
        libc.tmpfile.restype = c_void_p
        for fn in (libc.fflush, libc.fclose, libc.fileno):
            fn.argtypes = [c_void_p]
        f = libc.tmpfile()
        if not f:
            raise OSError(ctypes.get_errno(), "ofccl_dump_state: tmpfile() failed")
        try:
            self._check(_lib.lib().ofccl_dump_state(self._h, f), "ofccl_dump_state")
            libc.fflush(f)
            fd, chunks = libc.fileno(f), []
            os.lseek(fd, 0, os.SEEK_SET)
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            libc.fclose(f)
        return b"".join(chunks).decode(errors="replace")

    def alloc(self, shape: Union[int, Sequence[int]], dtype: Any = "float32") -> Any:
        """An array of `shape` in ofccl memory (ofccl_mem_alloc): collectives on it need
        no registration and no staging copy. A numpy array, or a torch tensor when
        `dtype` is a torch dtype (numpy has no bfloat16: ask for torch.bfloat16).
        The memory is freed when the array (and every view of it) is gone."""
        shape, count, code, nbytes = _shape(shape, dtype)
        return _array_over(_Mem(self, nbytes), shape, count, code, dtype)

    def owns(self, obj: Any) -> Optional[Tuple[int, int]]:
        """(address, bytes) of the alloc() block that `obj`'s data starts in, or None
        when `obj` is not ofccl memory of this context (it then goes through
        registration or staging)."""
        addr = buffers.address_of(obj)
        for m in list(self._mems):
            if m.ptr <= addr < m.ptr + max(m.nbytes, 1):
                return m.ptr, m.nbytes
        return None

    def close(self) -> None:
        """Destroy the context. Busy while communicators or alloc() arrays live."""
        if not self._h:
            return
        gc.collect()  # arrays in unreachable cycles are not users
        if self._ncomms:
            raise Busy(f"Context.close: {self._ncomms} communicator(s) still open; close "
                       "them first")
        if len(self._mems):
            raise Busy(f"Context.close: {len(self._mems)} array(s) from Context.alloc are "
                       "still alive and would point at freed memory; delete them first")
        self._check(_lib.lib().ofccl_ctx_destroy(self._h), "ofccl_ctx_destroy")
        self._h = None

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if self._h and not len(self._mems) and not self._ncomms:
                _lib.lib().ofccl_ctx_destroy(self._h)
                self._h = None
        except Exception:  # interpreter shutdown: modules may be gone
            pass


class Request(metaclass=abc.ABCMeta):
    """A posted collective. ``wait()`` blocks (bounded by the communicator's
    timeout) and returns the output; ``test()`` returns True once complete;
    ``await request`` polls from an asyncio event loop. A failed collective
    raises the ofccl.Error of its code with the communicator's message.

    Collectives on buffer objects return ofccl._fast.Request, the same object
    written in C (registered as a subclass); this class serves the others and
    every call when the extension is missing."""

    __slots__ = ("_h", "_comm", "_keep", "result", "_prof", "_then", "__weakref__")

    def __init__(self, comm: "Comm", h: int, keep: Any, result: Any, prof: Any = None):
        self._h: Optional[int] = h
        self._comm = comm
        self._keep = keep
        self.result = result
        self._prof = prof
        self._then: Any = None
        comm._pending.add(self)

    @property
    def done(self) -> bool:
        return self._h is None

    def _finish(self, rc: int) -> None:
        frc = _lib.lib().ofccl_req_free(self._h)
        self._complete(rc, frc != -11)

    def _complete(self, rc: int, freed: int) -> None:
        if not freed:  # a timed-out wait: the collective still runs
            raise from_code(rc, self._comm.last_error or "request failed")
        self._h = None
        self._keep = None
        self._comm._pending.discard(self)
        if self._prof is not None:
            _profile.end(self._prof)
            self._prof = None
        if rc:
            raise from_code(rc, self._comm.last_error or "collective failed")
        if self._then is not None:
            then, self._then = self._then, None
            then()

    def test(self) -> bool:
        if self._h is None:
            return True
        fast = _lib._fast_mod
        if fast:
            done, rc = fast.test_free(self._h)
            if done or rc:
                self._complete(rc, done)
                return True
            return False
        done = c_int(0)
        rc = _lib.lib().ofccl_test(self._h, byref(done))
        if rc or done.value:
            self._finish(rc)
            return True
        return False

    def wait(self) -> Any:
        h = self._h
        if h is not None:
            fast = _lib._fast_mod
            if not fast:
                self._finish(_lib.lib().ofccl_wait(h))
                return self.result
            rc, freed = fast.wait_free(h)
            if rc or not freed or self._prof is not None or self._then is not None:
                self._complete(rc, freed)
            else:  # the common case, kept short: it is most of a small collective's cost
                self._h = self._keep = None
                self._comm._pending.discard(self)
        return self.result

    def __await__(self):
        polls = 0
        while not self.test():
            polls += 1
            yield from asyncio.sleep(0 if polls < 64 else 0.0001).__await__()
        return self.result


class Comm:
    """A communicator. Collectives post and return a Request; they must be posted
    in the same order on every rank. Outputs may be omitted (a fresh array of
    the input's kind is made and returned by ``wait()``)."""

    def __init__(self, ctx: Context, h: int):
        self.ctx = ctx
        self._h: Optional[int] = h
        self._pending: set = set()
        self._mems: "weakref.WeakSet[_Mem]" = weakref.WeakSet()
        lib = _lib.lib()
        v = c_int()
        vals = []
        for fn in (lib.ofccl_comm_rank, lib.ofccl_comm_size, lib.ofccl_comm_local_rank,
                   lib.ofccl_comm_local_size):
            ctx._check(fn(h, byref(v)), "ofccl_comm_rank")
            vals.append(v.value)
        self.rank, self.size, self.local_rank, self.local_size = vals
        self._allgather = lib.ofccl_allgather
        self._reduce_scatter = lib.ofccl_reduce_scatter
        fast = _lib.fast()
        if fast is not None:  # the C Request hands everything but the common path to Python
            fast.set_hooks(Request._complete, Request.__await__)
            Request.register(fast.Request)

    @property
    def last_error(self) -> str:
        return _lib.text(_lib.lib().ofccl_comm_last_error(self._h)) if self._h else ""

    def _check(self, rc: int, what: str) -> None:
        if rc:
            raise from_code(rc, self.last_error or what)

    def _live(self) -> int:
        if not self._h:
            raise from_code(-15, "communicator is closed")
        return self._h

    # ---- collectives -------------------------------------------------------
    def all_gather(self, send: Any, recv: Any = None, *, dtype: Any = None) -> Request:
        """recv[r*n:(r+1)*n] = rank r's send (n elements). In place when send is
        this rank's block of recv."""
        fast = _lib._fast_mod
        if fast and recv is not None and dtype is None and self._h:
            r = fast.allgather_req(self, self._pending, self._h, send, recv, self.size)
            if r is not None:
                if r.__class__ is int:
                    raise from_code(r, self.last_error or "ofccl_allgather")
                if "torch" in _modules:
                    r._prof = _profile.begin("all_gather", buffers.nbytes(send), self.size)
                return r
        h = self._live()
        want = None if dtype is None else buffers.dtype_code(dtype)
        sp, n, code = buffers.resolve(send, "all_gather send", want, False)
        if recv is None:
            recv = buffers.new_like(send, n * self.size, code)
        rp, rn, rcode = buffers.resolve(recv, "all_gather recv", code, True)
        if rn != n * self.size:
            raise InvalidArgument(
                f"all_gather: recv holds {rn} {buffers.NAMES[code]} elements; {self.size} "
                f"ranks x {n} per rank needs exactly {n * self.size}")
        prof = _profile.begin("all_gather", n * buffers.ITEMSIZE[code], self.size)
        req = c_void_p()
        rc = self._allgather(h, sp, rp, n, code, byref(req))
        if rc:
            _profile.end(prof)
            raise from_code(rc, self.last_error or "ofccl_allgather")
        return Request(self, req.value, (send, recv), recv, prof)

    def reduce_scatter(self, send: Any, recv: Any = None, *, op: OpLike = "sum",
                       dtype: Any = None) -> Request:
        """recv = op over ranks of their send[rank*n:(rank+1)*n], n = len(send)/size."""
        rop = _op(op)
        fast = _lib._fast_mod
        if fast and recv is not None and dtype is None and self._h:
            r = fast.reduce_scatter_req(self, self._pending, self._h, send, recv, self.size,
                                        rop.kind, rop.scalar)
            if r is not None:
                if r.__class__ is int:
                    raise from_code(r, self.last_error or "ofccl_reduce_scatter")
                if "torch" in _modules:
                    r._prof = _profile.begin("reduce_scatter", buffers.nbytes(send), self.size)
                return r
        h = self._live()
        want = None if dtype is None else buffers.dtype_code(dtype)
        sp, sn, code = buffers.resolve(send, "reduce_scatter send", want, False)
        if sn % self.size:
            raise InvalidArgument(f"reduce_scatter: send holds {sn} elements, not a multiple of "
                                  f"the {self.size} ranks")
        n = sn // self.size
        if recv is None:
            recv = buffers.new_like(send, n, code)
        rp, rn, _ = buffers.resolve(recv, "reduce_scatter recv", code, True)
        if rn != n:
            raise InvalidArgument(f"reduce_scatter: recv holds {rn} elements; {sn} elements over "
                                  f"{self.size} ranks needs exactly {n}")
        prof = _profile.begin("reduce_scatter", sn * buffers.ITEMSIZE[code], self.size)
        req = c_void_p()
        rc = self._reduce_scatter(h, sp, rp, n, code, rop._c, byref(req))
        if rc:
            _profile.end(prof)
            raise from_code(rc, self.last_error or "ofccl_reduce_scatter")
        return Request(self, req.value, (send, recv), recv, prof)

    def shard_range(self, count: int) -> Tuple[int, int]:
        """(first element, length) of this rank's shard of a `count`-element tensor."""
        off, n = c_size_t(), c_size_t()
        self._check(_lib.lib().ofccl_shard_range(self._live(), count, byref(off), byref(n)),
                    "ofccl_shard_range")
        return off.value, n.value

    def _bucket(self, pairs: Sequence[Tuple[Any, Any]], dtype: Any, gather: bool):
        if len(pairs) == 0:
            raise InvalidArgument("bucket: no tensors")
        want = None if dtype is None else buffers.dtype_code(dtype)
        arr = (_lib.Tensor * len(pairs))()
        total = 0
        for i, pair in enumerate(pairs):
            try:
                full, shard = pair
            except (TypeError, ValueError):
                raise InvalidArgument(f"bucket: item {i} is not a (full, shard) pair") from None
            fp, count, code = buffers.resolve(full, f"bucket tensor {i} full", want, gather)
            want = code
            sp, sn, _ = buffers.resolve(shard, f"bucket tensor {i} shard", code, not gather)
            _, mine = self.shard_range(count)
            if sn != mine:
                raise InvalidArgument(
                    f"bucket tensor {i}: shard holds {sn} elements; rank {self.rank}'s shard of "
                    f"{count} elements over {self.size} ranks has {mine} (see shard_range)")
            arr[i].count, arr[i].full, arr[i].shard = count, fp, sp
            total += count
        return arr, want, total

    def bucket_all_gather(self, tensors: Sequence[Tuple[Any, Any]], *,
                          dtype: Any = None) -> Request:
        """Gather a bucket: for each (full, shard), full = every rank's shard in order."""
        h = self._live()
        arr, code, total = self._bucket(tensors, dtype, True)
        prof = _profile.begin("bucket_all_gather", total * buffers.ITEMSIZE[code] // self.size,
                              self.size)
        req = c_void_p()
        rc = _lib.lib().ofccl_bucket_allgather(h, arr, len(arr), code, byref(req))
        if rc:
            _profile.end(prof)
            raise from_code(rc, self.last_error or "ofccl_bucket_allgather")
        return Request(self, req.value, (tensors, arr), None, prof)

    def bucket_reduce_scatter(self, tensors: Sequence[Tuple[Any, Any]], *, op: OpLike = "sum",
                              dtype: Any = None) -> Request:
        """Reduce a bucket: for each (full, shard), shard = op over ranks of their full's
        elements this rank owns."""
        h = self._live()
        rop = _op(op)
        arr, code, total = self._bucket(tensors, dtype, False)
        prof = _profile.begin("bucket_reduce_scatter", total * buffers.ITEMSIZE[code], self.size)
        req = c_void_p()
        rc = _lib.lib().ofccl_bucket_reduce_scatter(h, arr, len(arr), code, rop._c, byref(req))
        if rc:
            _profile.end(prof)
            raise from_code(rc, self.last_error or "ofccl_bucket_reduce_scatter")
        return Request(self, req.value, (tensors, arr), None, prof)

    def broadcast(self, buf: Any, root: int = 0, *, dtype: Any = None) -> Request:
        """In place: at completion every rank's `buf` holds root's. Ranks agree on
        root, element count and dtype (else ofccl.Mismatch naming the field)."""
        h = self._live()
        self._root(root, "broadcast")
        want = None if dtype is None else buffers.dtype_code(dtype)
        p, n, code = buffers.resolve(buf, "broadcast buf", want, True)
        prof = _profile.begin("broadcast", n * buffers.ITEMSIZE[code], self.size)
        req = c_void_p()
        rc = _lib.lib().ofccl_broadcast(h, p, n, code, int(root), byref(req))
        if rc:
            _profile.end(prof)
            raise from_code(rc, self.last_error or "ofccl_broadcast")
        return Request(self, req.value, buf, buf, prof)

    def bucket_broadcast(self, tensors: Sequence[Any], root: int = 0, *,
                         dtype: Any = None) -> Request:
        """Broadcast a bucket: every tensor (whole, one dtype) gets root's, in place."""
        h = self._live()
        self._root(root, "bucket_broadcast")
        if len(tensors) == 0:
            raise InvalidArgument("bucket_broadcast: no tensors")
        want = None if dtype is None else buffers.dtype_code(dtype)
        arr = (_lib.Tensor * len(tensors))()
        total = 0
        for i, t in enumerate(tensors):
            p, n, want = buffers.resolve(t, f"bucket_broadcast tensor {i}", want, True)
            arr[i].count, arr[i].full, arr[i].shard = n, p, None
            total += n
        prof = _profile.begin("bucket_broadcast", total * buffers.ITEMSIZE[want], self.size)
        req = c_void_p()
        rc = _lib.lib().ofccl_bucket_broadcast(h, arr, len(arr), want, int(root), byref(req))
        if rc:
            _profile.end(prof)
            raise from_code(rc, self.last_error or "ofccl_bucket_broadcast")
        return Request(self, req.value, (tensors, arr), None, prof)

    def _root(self, root: Any, what: str) -> None:
        if not isinstance(root, int) or isinstance(root, bool) or not 0 <= root < self.size:
            raise InvalidArgument(f"{what}: root {root!r} is not a rank of this communicator "
                                  f"(0..{self.size - 1})")

    def split(self, color: int, key: int = 0) -> Optional["Comm"]:
        """Collective: ranks passing the same color >= 0 form a new communicator,
        ranked by key, then by rank here; ofccl.UNDEFINED gets None."""
        h = self._live()
        new = c_void_p()
        self._check(_lib.lib().ofccl_comm_split(h, int(color), int(key), byref(new)),
                    "ofccl_comm_split")
        if not new.value:
            return None
        comm = Comm(self.ctx, new.value)
        self.ctx._ncomms += 1
        return comm

    def push_plan(self, tensors: Sequence[Tuple[str, Any, Any]], senders: Sequence[int],
                  receivers: Sequence[int], *, bucket_bytes: int = 0,
                  slices: Optional[Sequence[Tuple[int, int]]] = None, gpu: bool = False) -> Any:
        """A weight-push plan (collective): see ofccl.push.PushPlan."""
        from .push import PushPlan
        return PushPlan(self, tensors, senders, receivers, bucket_bytes=bucket_bytes,
                        slices=slices, gpu=gpu)

    def alloc(self, shape: Union[int, Sequence[int]], dtype: Any = "float32") -> Any:
        """Like Context.alloc, from this communicator's pool (ofccl_buffer_alloc):
        registered once, bounded by OFCCL_POOL_BYTES (OverBudget past it), usable
        on this communicator only."""
        shape, count, code, nbytes = _shape(shape, dtype)
        return _array_over(_Mem(self, nbytes, pool=True), shape, count, code, dtype)

    # ---- control -----------------------------------------------------------
    def barrier(self) -> None:
        self._check(_lib.lib().ofccl_barrier(self._live()), "ofccl_barrier")

    def abort(self) -> None:
        """Fail every pending and later call promptly with ofccl.Aborted (any thread)."""
        self._check(_lib.lib().ofccl_comm_abort(self._live()), "ofccl_comm_abort")

    def set_timeout(self, seconds: float) -> None:
        """Deadline of blocking calls and of requests posted afterwards (0 = none)."""
        self._check(_lib.lib().ofccl_comm_set_timeout(self._live(), int(seconds * 1000)),
                    "ofccl_comm_set_timeout")

    def progress(self) -> None:
        """Advance every communicator of the context once; never blocks."""
        self.ctx._check(_lib.lib().ofccl_progress(self.ctx._h), "ofccl_progress")

    def close(self) -> None:
        """Destroy the communicator (local). Busy while a collective still runs."""
        if not self._h:
            return
        for r in list(self._pending):
            try:
                r.test()
            except Exception:
                pass  # its error was the caller's to collect; the request is done
        if self._pending:
            raise Busy(f"Comm.close: {len(self._pending)} collective(s) still running; wait "
                       "for them (or abort()) first")
        for plan in list(getattr(self, "_plans", ())):
            plan.close()  # local; Busy while one of its buckets runs
        gpu = getattr(self, "_gpu", None)
        if gpu is not None:  # GPU collectives still on a stream: waited for, then freed
            gpu.close()
        gc.collect()
        if len(self._mems):
            raise Busy(f"Comm.close: {len(self._mems)} array(s) from Comm.alloc are still "
                       "alive and would point at freed memory; delete them first")
        self._check(_lib.lib().ofccl_comm_destroy(self._h), "ofccl_comm_destroy")
        self._h = None
        self.ctx._ncomms -= 1

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if self._h and not self._pending and not len(self._mems) and \
                    _lib.lib().ofccl_comm_destroy(self._h) == 0:
                self._h = None
                self.ctx._ncomms -= 1
        except Exception:  # interpreter shutdown: modules may be gone
            pass

    def __repr__(self) -> str:
        return f"<ofccl.Comm rank {self.rank} of {self.size}>"

"""The torch.distributed backend 'ofccl'.

    import ofccl.torch                      # registers the backend
    dist.init_process_group("ofccl")        # torchrun / MASTER_ADDR-style env

A Python ProcessGroup (torch's pybind trampoline; see torch's
test_c10d_pypg.py) over one ofccl context and communicator per group. Ranks
meet through ofccl's TCP rendezvous, whose address rank 0 publishes in the
group's torch store, unless the library's own settings choose another
bootstrap (OFCCL_BOOT=pmix: then its ranks must be torch's). Supported: all-gather into a tensor (and the list
form), reduce-scatter from a tensor (and the list form), their coalesced
forms, all-reduce (reduce-scatter then all-gather, in place), broadcast (any
root, any dtype as bytes), barrier. Every
other collective raises ofccl.NotSupported naming it. CUDA tensors go to the
library as they are: GPU to GPU where the ranks' GPUs reach each other, staged
through host memory by the library itself where they do not (other hosts),
stream-ordered either way.
"""

from __future__ import annotations

import os
import socket
import threading
from datetime import timedelta
from typing import Any, Callable, List, Optional, Tuple

import torch
import torch.distributed as dist

from ._secret import new_secret, secret_settings
from ._torchcoll import Collectives, GpuWork, Work, done_work, followed, redop
from .comm import Context
from .errors import Again, NotSupported

BACKEND = "ofccl"


def _rendezvous_settings(store: Any, rank: int, size: int,
                         timeout: timedelta) -> Tuple[dict, str]:
    """Where the TCP rendezvous meets, and its job secret: rank 0 picks both
    and hands them to the others through torch's store (which torch already
    trusts), so only this group's processes join. The bootstrap is the
    library's choice: OFCCL_BOOT=auto takes the rendezvous once its root is
    set, and a bootstrap the library's settings name (OFCCL_BOOT) wins."""
    key = "ofccl/boot_root"
    if rank == 0:
        host = os.environ.get("MASTER_ADDR") or "127.0.0.1"
        with socket.socket() as s:
            s.bind((host if host != "localhost" else "127.0.0.1", 0))
            port = s.getsockname()[1]
        store.set("ofccl/secret", new_secret())
        store.set(key, f"{host}:{port}")
    root = store.get(key).decode()
    secret = store.get("ofccl/secret").decode()
    # Every rank has reached torch's store by now: the rendezvous gets at least
    # 30 s whatever the collectives' timeout (a 2 s one must not fail a rank
    # that is still importing).
    ms = max(30000, int(timeout.total_seconds() * 1000))
    return {"BOOT_ROOT": root, "BOOT_RANK": rank, "BOOT_SIZE": size,
            "BOOT_TIMEOUT_MS": min(ms, 86400000)}, secret


def _unsupported(name: str) -> Any:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotSupported(f"torch.distributed {name} on the 'ofccl' backend: ofccl offers "
                           "all_gather(_into_tensor), reduce_scatter(_tensor), all_reduce "
                           "(SUM, AVG, PREMUL_SUM), broadcast and barrier; use a gloo group "
                           "for the rest")
    method.__name__ = name
    return method


def _in_order(posts: List[Callable[[], Work]]) -> Work:
    """Post one collective per tensor, in order, and return the last Work once
    the others are done. A post the library refuses with Again (its staging
    buffers or request slots are all in use) waits for the earlier ones and is
    posted again: every rank posts the same sequence, so the order holds."""
    works: List[Work] = []
    for post in posts:
        try:
            works.append(post())
        except Again:
            for w in works:
                w.wait()
            works = [post()]
    for w in works[:-1]:
        w.wait()
    return works[-1] if works else done_work([])


def _after_earlier(method: Callable[..., Any]) -> Callable[..., Any]:
    """A collective posted after the all-gathers of earlier all-reduces."""
    def posting(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._post_later()
        return method(self, *args, **kwargs)
    posting.__name__ = method.__name__
    posting.__doc__ = method.__doc__
    return posting


def _op_of(opts: Any) -> Any:
    return getattr(opts, "reduceOp", dist.ReduceOp.SUM) if opts is not None else \
        dist.ReduceOp.SUM


class ProcessGroupOfccl(dist.ProcessGroup):
    """A torch ProcessGroup whose collectives are ofccl's."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta,
                 settings: Optional[dict] = None):
        super().__init__(rank, size)
        s, secret = _rendezvous_settings(store, rank, size, timeout)
        s.update(settings or {})
        with secret_settings(secret, s) as s:
            self.ofccl_ctx = Context(s)
        self.ofccl_comm = self.ofccl_ctx.world()
        if self.ofccl_comm.rank != rank or self.ofccl_comm.size != size:
            raise NotSupported(f"ofccl bootstrap gave rank {self.ofccl_comm.rank} of "
                               f"{self.ofccl_comm.size}, torch rank {rank} of {size}")
        self.ofccl_comm.set_timeout(timeout.total_seconds())
        self._coll = Collectives(self.ofccl_comm)
        self._rank, self._size = rank, size
        # The rest of an all-reduce posted but not completed (its all-gather
        # after its reduce-scatter): done before any later collective is
        # posted, so every rank posts the same sequence whenever its waits come.
        self._later: List[Callable[[], None]] = []
        self._later_lock = threading.RLock()

    def _post_later(self) -> None:
        with self._later_lock:
            while self._later:
                self._later.pop(0)()

    # ---- identity ----------------------------------------------------------
    def getBackendName(self) -> str:
        return BACKEND

    def _get_backend_name(self) -> str:
        return BACKEND

    @property
    def group_name(self) -> str:
        """The name torch gave this group. A Python ProcessGroup that a backend's
        creator returns replaces the object torch created and named, so the
        name (which DeviceMesh and FSDP2 resolve groups by) is looked up in
        torch's registry and recorded on this object the first time."""
        c10d = dist.distributed_c10d
        world = getattr(c10d, "_world", None)
        names = getattr(world, "pg_names", None) or getattr(c10d, "_pg_names", {})
        name = names.get(self)
        if name is None:
            base = getattr(dist.ProcessGroup, "group_name", None)
            if base is None:
                raise AttributeError("group_name: this group is not registered with torch")
            return base.fget(self)
        if not getattr(self, "_ofccl_named", False) and hasattr(self, "_set_group_name"):
            self._set_group_name(name)
            self._ofccl_named = True
        return name

    def getRank(self) -> int:
        return self._rank

    def getSize(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"ProcessGroupOfccl(rank={self._rank}, size={self._size})"

    # ---- all-gather --------------------------------------------------------
    @_after_earlier
    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor,
                          opts: Any = None) -> Work:
        return self._coll.all_gather(output, input)

    _allgather_base = all_gather_single

    @_after_earlier
    def allgather(self, output_tensors: List[List[torch.Tensor]],
                  input_tensors: List[torch.Tensor], opts: Any = None) -> Work:
        if len(input_tensors) != 1 or len(output_tensors) != 1:
            raise NotSupported("allgather: ofccl takes one input tensor per rank")
        outs, inp = output_tensors[0], input_tensors[0]
        if len(outs) != self._size:
            raise NotSupported(f"allgather: {len(outs)} outputs for {self._size} ranks")
        flat = torch.empty(self._size * inp.numel(), dtype=inp.dtype, device=inp.device)
        n = inp.numel()

        def scatter() -> None:
            for r, o in enumerate(outs):
                o.copy_(flat[r * n:(r + 1) * n].view_as(o))
        return followed(self._coll.all_gather(flat, inp.contiguous()), scatter, outs)

    @_after_earlier
    def all_gather_single_coalesced(self, outputs: List[torch.Tensor],
                                    inputs: List[torch.Tensor], opts: Any = None) -> Work:
        return _in_order([lambda o=o, i=i: self._coll.all_gather(o, i)
                          for o, i in zip(outputs, inputs)])

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    # ---- reduce-scatter ----------------------------------------------------
    @_after_earlier
    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,
                              opts: Any = None) -> Work:
        return self._coll.reduce_scatter(output, input, redop(_op_of(opts)))

    _reduce_scatter_base = reduce_scatter_single

    @_after_earlier
    def reduce_scatter(self, output_tensors: List[torch.Tensor],
                       input_tensors: List[List[torch.Tensor]], opts: Any = None) -> Work:
        if len(output_tensors) != 1 or len(input_tensors) != 1:
            raise NotSupported("reduce_scatter: ofccl takes one output tensor per rank")
        out, ins = output_tensors[0], input_tensors[0]
        flat = torch.cat([t.reshape(-1) for t in ins])
        work = self._coll.reduce_scatter(out, flat, redop(_op_of(opts)))
        return work

    @_after_earlier
    def reduce_scatter_single_coalesced(self, outputs: List[torch.Tensor],
                                        inputs: List[torch.Tensor], opts: Any = None) -> Work:
        op = redop(_op_of(opts))
        return _in_order([lambda o=o, i=i: self._coll.reduce_scatter(o, i, op)
                          for o, i in zip(outputs, inputs)])

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # ---- all-reduce --------------------------------------------------------
    @_after_earlier
    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> Work:
        """Every tensor's reduce-scatter is posted and the call returns; their
        all-gathers follow on completion (or before a later collective), in
        order. Where the library's staging buffers or request slots run out,
        the earlier tensors are completed first and the post is made again."""
        op = redop(_op_of(opts))
        if not tensors:
            return done_work(tensors)
        if all(t.device.type == "cuda" for t in tensors):
            return self._allreduce_gpu(tensors, op)
        reqs: List[Any] = []
        for t in tensors:
            try:
                first, rest = self._allreduce_one(t, op)
            except Again:
                self._post_later()  # the earlier tensors' all-gathers, waited for
                reqs = []
                first, rest = self._allreduce_one(t, op)
            with self._later_lock:
                self._later.append(rest)
            reqs += first._reqs
        return Work(reqs, tensors, self._post_later)

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts: Any = None) -> Work:
        return self.allreduce(tensors, opts)

    def _allreduce_gpu(self, tensors: List[torch.Tensor], op: Any) -> Work:
        """CUDA tensors: each reduce-scatter and its all-gather enqueued at once
        on the current stream (the library's GPU path; nothing blocks the
        host); the Work waits for the last, which ends after all of them."""
        last = None
        for t in tensors:
            n, size = t.numel(), self._size
            chunk = -(-n // size)
            if n == 0:
                continue
            direct = t.is_contiguous() and n == chunk * size
            flat = t.view(-1) if direct else torch.zeros(chunk * size, dtype=t.dtype,
                                                         device=t.device)
            if not direct:
                flat[:n].copy_(t.reshape(-1))
            mine = flat[self._rank * chunk:(self._rank + 1) * chunk]
            self._coll.reduce_scatter(mine, flat, op)
            last = self._coll.all_gather(flat, mine)
            if not direct:
                last.wait()  # the current stream waits: the copy back follows the all-gather
                t.copy_(flat[:n].view_as(t))
        if last is None:
            return done_work(tensors)
        return GpuWork(last._req, tensors)

    def _allreduce_one(self, t: torch.Tensor, op: Any) -> Any:
        """Reduce-scatter then all-gather, in place on a padded flat copy when the
        tensor is not contiguous or its size not a multiple of the ranks. The
        reduce-scatter is posted now; returned with what completes the rest
        (the all-gather, which reads its result; run once)."""
        n, size = t.numel(), self._size
        chunk = -(-n // size)
        direct = t.is_contiguous() and n == chunk * size and n > 0
        flat = t.view(-1) if direct else torch.zeros(chunk * size, dtype=t.dtype, device=t.device)
        if not direct:
            flat[:n].copy_(t.reshape(-1))
        mine = flat[self._rank * chunk:(self._rank + 1) * chunk]
        first = self._coll.reduce_scatter(mine, flat, op)
        ran: List[bool] = []

        def rest() -> None:
            if ran:
                return
            ran.append(True)
            first.wait()
            self._coll.all_gather(flat, mine).wait()
            if not direct:
                t.copy_(flat[:n].view_as(t))
        return first, rest

    # ---- broadcast -----------------------------------------------------------
    @_after_earlier
    def broadcast(self, tensors: List[torch.Tensor], opts: Any = None) -> Work:
        root = getattr(opts, "rootRank", 0) if opts is not None else 0
        if getattr(opts, "rootTensor", 0):
            raise NotSupported("broadcast: ofccl takes one tensor per rank (rootTensor 0)")
        return _in_order([lambda t=t: self._coll.broadcast(t, root) for t in tensors])

    def broadcast_coalesced(self, tensors: List[torch.Tensor], opts: Any = None) -> Work:
        return self.broadcast(tensors, opts)

    # ---- control -----------------------------------------------------------
    @_after_earlier
    def barrier(self, opts: Any = None) -> Work:
        self.ofccl_comm.barrier()
        return done_work([])

    def start_coalescing(self, device: Any = None) -> None:
        return None  # every collective is posted at once; nothing to batch

    def end_coalescing(self, device: Any = None) -> Work:
        return done_work([])

    _start_coalescing = start_coalescing
    _end_coalescing = end_coalescing

    def abort(self) -> None:
        if self.ofccl_comm._h:
            self.ofccl_comm.abort()

    def shutdown(self) -> None:
        self._coll.close()
        self.ofccl_comm.close()

    reduce = _unsupported("reduce")
    gather = _unsupported("gather")
    scatter = _unsupported("scatter")
    alltoall = _unsupported("all_to_all")
    alltoall_base = _unsupported("all_to_all_single")
    all_to_all_single = _unsupported("all_to_all_single")
    allgather_coalesced = _unsupported("all_gather_coalesced")
    send = _unsupported("send")
    recv = _unsupported("recv")
    recv_anysource = _unsupported("recv (any source)")
    monitored_barrier = _unsupported("monitored_barrier")


def _create(*args: Any) -> ProcessGroupOfccl:
    if len(args) == 2:  # extended_api: (DistributedBackendOptions, backend options)
        o = args[0]
        return ProcessGroupOfccl(o.store, o.group_rank, o.group_size, o.timeout)
    store, rank, size, timeout = args
    return ProcessGroupOfccl(store, rank, size, timeout)


def register() -> None:
    """Register 'ofccl' with torch.distributed (idempotent). torch >= 2.0 takes
    the devices it serves; torch 1.13 has no such argument."""
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    try:
        dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])
    except TypeError:
        dist.Backend.register_backend(BACKEND, _create)

"""Weight sync between a trainer group and a rollout group, shaped like verl's
CheckpointEngine, over ofccl's weight push.

The two groups may be separately launched jobs: they meet through ofccl's TCP
rendezvous (OFCCL_BOOT_GROUPS "trainer:T,rollout:R") at an address the
trainer's first rank picks in ``prepare()``, and form one communicator. Every
trainer rank sends its own shard of every tensor straight into every rollout
rank's bucket buffer (no gather to one rank), bucket by bucket, two buckets
in flight; a rollout rank reads bucket k while bucket k + 1 arrives.

    # every process (trainer and rollout), driven as verl's manager does
    engine = ofccl.checkpoint.new_engine("ofccl", bucket_size=64 << 20, is_master=...)
    meta = engine.prepare()                       # gathered from every process
    tk, rk = OfcclCheckpointEngine.build_topology(T, R, metas)
    engine.init_process_group(**kwargs_for_me)    # from tk (trainers) or rk (rollout)
    await engine.send_weights(model.named_parameters())         # trainer ranks
    async for name, tensor in engine.receive_weights(): ...     # rollout ranks
    engine.finalize()

With ``device="cuda"`` (every process alike; both groups on one host, every
pair of GPUs P2P) the weights stay on the GPUs: trainer ranks push their CUDA
shards straight into the rollout ranks' GPU bucket buffers by the copy
engines, and ``receive_weights`` yields CUDA tensors.

Importing this module also registers the engine in verl's
CheckpointEngineRegistry as "ofccl" when verl is importable (verl's
``checkpoint_engine.custom_backend_module=ofccl.checkpoint``).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from typing import Any, AsyncIterator, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np

from . import buffers
from .comm import Comm, Context
from .errors import InvalidArgument, StateError
from .push import PushPlan

_ENGINES: Dict[str, Callable[..., Any]] = {}


def register_engine(name: str) -> Callable[[Any], Any]:
    """Class decorator: make an engine class available as ``get_engine(name)``."""
    def wrap(cls: Any) -> Any:
        _ENGINES[name] = cls
        return cls
    return wrap


def get_engine(name: str) -> Any:
    """The engine class registered under `name` ("ofccl")."""
    try:
        return _ENGINES[name]
    except KeyError:
        raise InvalidArgument(f"no checkpoint engine {name!r}; registered: "
                              + ", ".join(sorted(_ENGINES))) from None


def new_engine(name: str, *args: Any, **kwargs: Any) -> Any:
    return get_engine(name)(*args, **kwargs)


def _torch() -> Any:
    import torch
    return torch


def _free_address(host: str) -> str:
    with socket.socket() as s:
        s.bind((host, 0))
        return f"{host}:{s.getsockname()[1]}"


def _default_host() -> str:
    host = os.environ.get("MASTER_ADDR")
    if host:
        return host
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


@register_engine("ofccl")
class OfcclCheckpointEngine:
    """Weight sync over ofccl push (see the module text).

    bucket_size: bytes per bucket (two buckets per rollout rank are in memory).
    is_master: the trainer's first rank (picks the rendezvous address).
    host: address the master listens on (default MASTER_ADDR, else this host's).
    copy: receive_weights yields owning copies instead of views of the bucket
        buffer (a view is valid until the consumer asks for the first tensor
        after the next bucket's).
    rebuild_group: finalize() also destroys the communicator (else it is kept
        and the next init_process_group with the same topology reuses it).
    settings: more ofccl settings (e.g. {"TIMEOUT_MS": 60000}).
    device: "cpu" (buckets in host memory; CUDA weights are copied to it) or
        "cuda" (buckets in GPU memory: weights go GPU to GPU and the rollout
        side gets CUDA tensors; every process alike, one host).
    """

    TRAINER, ROLLOUT = "trainer", "rollout"

    def __init__(self, bucket_size: int = 64 << 20, is_master: bool = False,
                 host: Optional[str] = None, copy: bool = False, rebuild_group: bool = False,
                 settings: Optional[Dict[str, Any]] = None, device: str = "cpu", **_: Any):
        if bucket_size <= 0:
            raise InvalidArgument(f"bucket_size {bucket_size}: give a positive byte count")
        if device not in ("cpu", "cuda"):
            raise InvalidArgument(f"device {device!r}: \"cpu\" or \"cuda\"")
        self.device = device
        self.bucket_size = int(bucket_size)
        self.is_master = is_master
        self.host = host
        self.copy = copy
        self.rebuild_group = rebuild_group
        self.settings = dict(settings or {})
        self.ctx: Optional[Context] = None
        self.comm: Optional[Comm] = None
        self.group: Optional[str] = None
        self.rank = -1
        self._topology: Optional[Tuple[Any, ...]] = None
        self._boot_root: Optional[str] = None
        self._plan: Optional[PushPlan] = None
        self._plan_key: Optional[bytes] = None
        self.plans_built = 0
        self._meta: List[Any] = []
        self.senders: List[int] = []
        self.receivers: List[int] = []

    # ---- set-up -------------------------------------------------------------
    def prepare(self) -> Optional[Dict[str, str]]:
        """Before each sync. The master returns {"boot_root": "host:port"} (the
        address the rendezvous will listen on); every other process None."""
        if not self.is_master:
            return None
        if self._boot_root is None or self.comm is None:
            self._boot_root = _free_address(self.host or _default_host())
        return {"boot_root": self._boot_root}

    @classmethod
    def build_topology(cls, trainer_world_size: int, rollout_world_size: int,
                       metadata: List[Any]) -> Tuple[Dict[str, List[Any]], Dict[str, List[Any]]]:
        """Keyword lists for init_process_group: trainer ranks first, then rollout
        ranks, in one communicator; the rendezvous address is the master's (the
        first metadata entry that has one)."""
        roots = [m["boot_root"] for m in metadata if isinstance(m, dict) and m.get("boot_root")]
        if not roots:
            raise InvalidArgument("build_topology: no metadata carries a boot_root; create the "
                                  "trainer's first engine with is_master=True")
        t, r = int(trainer_world_size), int(rollout_world_size)
        if t < 1 or r < 1:
            raise InvalidArgument(f"build_topology: {t} trainer and {r} rollout ranks; each "
                                  "group needs at least one")
        groups = f"{cls.TRAINER}:{t},{cls.ROLLOUT}:{r}"

        def kw(group: str, n: int) -> Dict[str, List[Any]]:
            return {"rank": list(range(n)), "group": [group] * n, "groups": [groups] * n,
                    "boot_root": [roots[0]] * n}
        return kw(cls.TRAINER, t), kw(cls.ROLLOUT, r)

    def init_process_group(self, rank: int, group: str, groups: str, boot_root: str,
                           **_: Any) -> None:
        """Join the communicator of both groups (collective over both jobs). A
        second call with the same topology keeps the communicator."""
        topo = (int(rank), group, groups, boot_root)
        if self.comm is not None and self._topology[:3] == topo[:3]:
            return
        self._close_comm()
        sizes: Dict[str, int] = {}
        for item in groups.split(","):
            name, _, n = item.partition(":")
            sizes[name] = int(n)
        if set(sizes) != {self.TRAINER, self.ROLLOUT} or group not in sizes:
            raise InvalidArgument(f"init_process_group: groups {groups!r} must name "
                                  f"{self.TRAINER} and {self.ROLLOUT}; this process is in "
                                  f"{group!r}")
        s = {"BOOT": "tcp", "BOOT_ROOT": boot_root, "BOOT_GROUP": group, "BOOT_GROUPS": groups,
             "BOOT_RANK": int(rank)}
        s.update(self.settings)
        self.ctx = Context(s)
        try:
            self.comm = self.ctx.world()
        except BaseException:
            self.ctx.close()
            self.ctx = None
            raise
        first = 0
        for name in groups.split(","):
            name = name.partition(":")[0]
            ranks = list(range(first, first + sizes[name]))
            first += sizes[name]
            if name == self.TRAINER:
                self.senders = ranks
            else:
                self.receivers = ranks
        self.group, self.rank, self._topology = group, int(rank), topo

    def finalize(self) -> None:
        """After each sync. With rebuild_group the plan and communicator go too."""
        if self.rebuild_group:
            self._close_comm()

    def close(self) -> None:
        """Destroy the plan, the communicator and the context."""
        self._close_comm()

    def _close_comm(self) -> None:
        if self._plan is not None:
            self._plan.close()
            self._plan, self._plan_key = None, None
        if self.comm is not None:
            self.comm.close()
            self.comm = None
        if self.ctx is not None:
            self.ctx.close()
            self.ctx = None
        self._topology = None

    # ---- the tensor list: agreed from the master, one plan per list --------
    def _live(self, role: str) -> Comm:
        if self.comm is None:
            raise StateError(f"{role}: call init_process_group first")
        return self.comm

    def _agree(self, own: Optional[List[Any]]) -> PushPlan:
        """The master's tensor list reaches every rank (two broadcasts from rank
        0). Trainer ranks build the plan from their own list, so one whose
        tensors differ gets ofccl.Mismatch on every rank; a list seen before
        reuses its plan (on every rank, or on none)."""
        comm = self._live("weights")
        blob = json.dumps(own).encode() if comm.rank == 0 else b""
        n = np.array([len(blob)], dtype=np.uint64)
        comm.broadcast(n.view(np.uint8), 0).wait()
        buf = np.frombuffer(blob, dtype=np.uint8).copy() if comm.rank == 0 else \
            np.empty(int(n[0]), dtype=np.uint8)
        if len(buf):
            comm.broadcast(buf, 0).wait()
        self._meta = json.loads(buf.tobytes().decode())
        mine = own if own is not None else self._meta
        # Rebuilding is collective: decide it from every rank's list (digests).
        digest = hashlib.sha256(json.dumps(mine).encode()).digest()[:8]
        key = comm.all_gather(np.frombuffer(digest, dtype=np.uint8).copy()).wait().tobytes()
        if self._plan is not None and key == self._plan_key:
            return self._plan
        if self._plan is not None:
            self._plan.close()
            self._plan = None
        tensors = [(name, [nbytes] if code == buffers.U8 else shape, code)
                   for name, shape, _, code, nbytes in mine]
        self._plan = PushPlan(comm, tensors, self.senders, self.receivers,
                              bucket_bytes=self.bucket_size, gpu=self.device == "cuda")
        self._plan_key = key
        self.plans_built += 1
        return self._plan

    def _describe(self, name: str, t: Any) -> Tuple[List[Any], Any]:
        """(metadata entry, contiguous tensor ofccl moves: on the CPU, or on this
        rank's GPU with device="cuda") of one weight: dtypes ofccl has no code
        for travel as bytes."""
        torch = _torch()
        t = t.detach()
        if self.device == "cuda" and t.device.type != "cuda":
            t = t.to(torch.device("cuda", torch.cuda.current_device()))
        elif self.device == "cpu" and t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        dt = str(t.dtype).replace("torch.", "")
        code = buffers.torch_dtypes().get(t.dtype)
        flat = t.reshape(-1)
        if code is None:
            code = buffers.U8
            flat = flat.view(torch.uint8)
        return [name, list(t.shape), dt, code, t.numel() * t.element_size()], flat

    # ---- the sync -------------------------------------------------------------
    async def send_weights(self, weights: Iterable[Tuple[str, Any]], **_: Any) -> None:
        """Trainer ranks: push every (name, full tensor) of `weights`; each rank
        sends only its own shard of each. Every trainer rank yields the same
        names, shapes and dtypes (else ofccl.Mismatch). The iterator is read
        first (the plan needs the whole list); its tensors are not copied
        unless they are on another device than the buckets or not
        contiguous."""
        comm = self._live("send_weights")
        if comm.rank not in self.senders:
            raise StateError(f"send_weights: rank {comm.rank} is in the rollout group")
        meta, flats = [], []
        for name, t in weights:
            m, flat = self._describe(name, t)
            meta.append(m)
            flats.append(flat)
        plan = self._agree(meta)
        shards = [plan.shard_of(t, f) for t, f in enumerate(flats)]
        async for _ in plan.push_async(shards):
            pass

    async def receive_weights(self, **_: Any) -> AsyncIterator[Tuple[str, Any]]:
        """Rollout ranks: yield (name, tensor) bucket by bucket as each arrives
        (the trainer's names, shapes and dtypes; CUDA tensors with
        device="cuda"). Unless copy=True a tensor views the bucket buffer: use
        or copy it before asking for the first tensor after the next
        bucket's."""
        comm = self._live("receive_weights")
        if comm.rank not in self.receivers:
            raise StateError(f"receive_weights: rank {comm.rank} is in the trainer group")
        torch = _torch()
        plan = self._agree(None)
        async for k, buf in plan.push_async():
            for t in plan.bucket_tensors(k):
                name, shape, dt, code, _ = self._meta[t]
                x = plan.view(t, buf, torch=True)
                if code == buffers.U8 and dt != "uint8":
                    x = x.view(getattr(torch, dt))
                x = x.reshape(shape)
                yield name, (x.clone() if self.copy else x)
            del buf


def _register_with_verl() -> None:
    """verl's registry, when verl is installed (never required)."""
    try:
        from verl.checkpoint_engine.base import CheckpointEngineRegistry  # type: ignore
    except Exception:  # noqa: BLE001 - verl absent or unimportable: our registry suffices
        return
    CheckpointEngineRegistry.register("ofccl")(OfcclCheckpointEngine)


_register_with_verl()

__all__ = ["OfcclCheckpointEngine", "register_engine", "get_engine", "new_engine"]

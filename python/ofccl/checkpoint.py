"""Weight sync between a trainer group and a rollout group, shaped like verl's
CheckpointEngine, over ofccl's weight push.

The two groups may be separately launched jobs: they meet through ofccl's TCP
rendezvous (OFCCL_BOOT_GROUPS "trainer:T,rollout:R") at an address the
trainer's first rank picks in ``prepare()``, and form one communicator. The
sync streams (ofccl.weight_stream): the trainer's iterator is read bucket by
bucket, every trainer rank sends its own share of each bucket straight into
every rollout rank's bucket buffer (no gather to one rank), two buckets in
flight and one filling, and each bucket's description (names, shapes, dtypes,
the step) travels in its header; a rollout rank reads bucket k while bucket
k + 1 arrives.

    # every process (trainer and rollout), driven as verl's manager does
    engine = ofccl.checkpoint.new_engine("ofccl", bucket_size=64 << 20, is_master=...)
    meta = engine.prepare()                       # gathered from every process
    tk, rk = OfcclCheckpointEngine.build_topology(T, R, metas)
    engine.init_process_group(**kwargs_for_me)    # from tk (trainers) or rk (rollout)
    await engine.send_weights(model.named_parameters(), global_steps=step)    # trainer ranks
    async for name, tensor in engine.receive_weights(global_steps=step): ...  # rollout ranks
    engine.finalize()

With ``device="cuda"`` (every process alike; both groups on one host, every
pair of GPUs P2P) the weights stay on the GPUs: trainer ranks push their CUDA
shards straight into the rollout ranks' GPU bucket buffers by the copy
engines, and ``receive_weights`` yields CUDA tensors.

Where verl is importable the engine is a subclass of verl's CheckpointEngine
and importing this module registers it in verl's CheckpointEngineRegistry as
"ofccl" (verl's ``checkpoint_engine.custom_backend_module=ofccl.checkpoint``);
without verl it is a plain class with the same methods.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Tuple

from . import _profile
from ._secret import new_secret, secret_settings
from .comm import Comm, Context
from .errors import InvalidArgument, StateError
from .weight_stream import WeightStream

_ENGINES: Dict[str, Callable[..., Any]] = {}
_log = logging.getLogger("ofccl.checkpoint")


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


def _verl_base() -> type:
    """verl's CheckpointEngine where verl is importable, else object."""
    try:
        from verl.checkpoint_engine.base import CheckpointEngine  # type: ignore
        return CheckpointEngine
    except Exception:  # noqa: BLE001 - verl absent or unimportable: a plain class
        return object


async def _items(weights: Any) -> AsyncIterator[Tuple[str, Any]]:
    """(name, tensor) pairs of a sync or an async iterable, one at a time."""
    if hasattr(weights, "__aiter__"):
        async for item in weights:
            yield item
    else:
        for item in weights:
            yield item


@register_engine("ofccl")
class OfcclCheckpointEngine(_verl_base()):  # type: ignore[misc]
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
    # What receive_weights yields to verl's rollout server adapter: whole
    # (name, tensor) pairs, the one format verl's vLLM and TensorRT-LLM
    # rollouts take (they assert it; "delta_flush" is verl's sparse updates).
    wire_format = "named_tensors"
    KWARGS = ("bucket_size", "is_master", "host", "copy", "rebuild_group", "settings", "device")

    def __init__(self, bucket_size: int = 64 << 20, is_master: bool = False,
                 host: Optional[str] = None, copy: bool = False, rebuild_group: bool = False,
                 settings: Optional[Dict[str, Any]] = None, device: str = "cpu",
                 **unknown: Any):
        if unknown:
            raise InvalidArgument(f"ofccl checkpoint engine: unknown keyword(s) "
                                  f"{', '.join(sorted(unknown))} (engine_kwargs); it takes "
                                  f"{', '.join(self.KWARGS)}")
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
        self._secret: Optional[str] = None
        self._stream: Optional[WeightStream] = None
        self.plans_built = 0
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
            self._secret = new_secret()
        return {"boot_root": self._boot_root, "secret": self._secret}

    @classmethod
    def build_topology(cls, trainer_world_size: int, rollout_world_size: int,
                       metadata: List[Any]) -> Tuple[Dict[str, List[Any]], Dict[str, List[Any]]]:
        """Keyword lists for init_process_group: trainer ranks first, then rollout
        ranks, in one communicator; the rendezvous address is the master's (the
        first metadata entry that has one)."""
        roots = [m for m in metadata if isinstance(m, dict) and m.get("boot_root")]
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
                    "boot_root": [roots[0]["boot_root"]] * n,
                    "secret": [roots[0].get("secret")] * n}
        return kw(cls.TRAINER, t), kw(cls.ROLLOUT, r)

    def init_process_group(self, rank: int, group: str, groups: str, boot_root: str,
                           secret: Optional[str] = None, **_: Any) -> None:
        """Join the communicator of both groups (collective over both jobs). A
        second call with the same topology keeps the communicator. `secret`
        (the master's, from prepare()'s metadata) admits only this sync's
        processes to the rendezvous."""
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
        with secret_settings(secret, s) as s:
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
        if self._stream is not None:
            self._stream.close()
            self._stream = None
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

    def _weights(self) -> WeightStream:
        """The communicator's stream (its push plan), made once: every later
        sync reuses its buffers."""
        if self._stream is None:
            self._stream = WeightStream(self._live("weights"), self.senders, self.receivers,
                                        self.bucket_size, self.device)
            self.plans_built += 1
        return self._stream

    # ---- the sync -------------------------------------------------------------
    async def send_weights(self, weights: Any, global_steps: Any = None) -> Dict[str, float]:
        """Trainer ranks: push every (name, full tensor) `weights` yields (a sync or
        an async iterable), streaming: the iterator is read bucket by bucket, a
        trainer rank holding at most three buckets' share whatever the model's
        size. Each rank sends only its own share of each bucket. Every trainer
        rank yields the same names, shapes and dtypes in the same order, else
        every rank raises ofccl.Mismatch naming the weight. `global_steps`
        travels with the sync (a rollout rank waiting for another step raises
        Mismatch once the sync is over). Returns the sync's metrics, which
        verl hands to the trainer's logger: the weights' MiB this rank read,
        its buckets, seconds and GB/s."""
        comm = self._live("send_weights")
        if comm.rank not in self.senders:
            raise StateError(f"send_weights: rank {comm.rank} is in the rollout group")
        rf = _profile.begin(f"weight_sync step={global_steps}", 0, comm.size)
        t0 = time.perf_counter()
        try:
            n = await self._weights().send(_items(weights), _jsonable(global_steps))
        finally:
            _profile.end(rf)
        dt = time.perf_counter() - t0
        mb = self._weights().bytes_sent / (1 << 20)
        _log.info("weight sync step %r: %d buckets, %.1f MiB sent by trainer rank %d in %.3f s",
                  global_steps, n, mb, comm.rank, dt)
        return {"checkpoint_engine/payload_mbytes": mb, "checkpoint_engine/buckets": float(n),
                "checkpoint_engine/seconds": dt,
                "checkpoint_engine/gbytes_per_s": mb * (1 << 20) / dt / 1e9 if dt > 0 else 0.0}

    async def receive_weights(self, global_steps: Any = None) -> AsyncIterator[Tuple[str, Any]]:
        """Rollout ranks: yield (name, tensor) bucket by bucket as each arrives
        (the trainer's names, shapes and dtypes; CUDA tensors with
        device="cuda"). Unless copy=True a tensor views the bucket buffer: use
        or copy it before asking for the first tensor after the next bucket's
        (a weight split over buckets is yielded as its own tensor). With
        `global_steps`, the trainer's sync must be of that step: else nothing
        is yielded, the sync is read to its end and ofccl.Mismatch raised."""
        comm = self._live("receive_weights")
        if comm.rank not in self.receivers:
            raise StateError(f"receive_weights: rank {comm.rank} is in the trainer group")
        rf = _profile.begin(f"weight_sync step={global_steps}", 0, comm.size)
        try:
            async for item in self._weights().receive(_jsonable(global_steps), self.copy):
                yield item
        finally:
            _profile.end(rf)
        _log.info("weight sync step %r: received by rollout rank %d", global_steps, comm.rank)


def _jsonable(step: Any) -> Any:
    """The step as it travels (an int, a string, or None)."""
    if step is None or isinstance(step, (int, str)):
        return step
    try:
        return int(step)
    except (TypeError, ValueError):
        return str(step)


def _register_with_verl() -> None:
    """verl's registry, when verl is installed (never required)."""
    try:
        from verl.checkpoint_engine.base import CheckpointEngineRegistry  # type: ignore
    except Exception:  # noqa: BLE001 - verl absent or unimportable: our registry suffices
        return
    CheckpointEngineRegistry.register("ofccl")(OfcclCheckpointEngine)


_register_with_verl()

__all__ = ["OfcclCheckpointEngine", "register_engine", "get_engine", "new_engine"]

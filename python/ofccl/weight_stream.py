"""Streaming weight sync: the trainer's weights go to the rollout ranks bucket by
bucket as the trainer's iterator yields them, the list never known in advance.

One push plan per communicator carries every sync: two bucket slots of
`bucket_size` bytes each (a plan of two uint8 "tensors"), bucket j of a sync
in slot j % 2. A bucket is a packed run of weights (each at a 64-byte
aligned offset; a weight larger than what is left starts a new bucket, and
one larger than a bucket is split over several). Trainer rank i sends only
its own share of each bucket's bytes (the plan's shard), so it copies 1/T of
the bytes it reads, into one of three pack buffers of its share: two buckets
in flight and one filling, whatever the model's size.

Before each bucket, every rank takes part in two small collectives: the first
trainer rank broadcasts the bucket's description (JSON: the step, and per
piece its name, shape, dtype and where its bytes are), then every rank's
verdict is gathered: a trainer whose own bucket differs names the first
piece that does, a rollout rank waiting for another step says so, and every
rank raises ofccl.Mismatch with the same message. A description marked
"end" closes the sync. The collective order is the same on every rank:
describe(j), verdicts(j), push(j), describe(j + 1), ...
"""

from __future__ import annotations

import json
import logging
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

import numpy as np

from .comm import Comm
from .errors import InvalidArgument, Mismatch
from .push import PushPlan

ALIGN = 64
PACKS = 3  # pack buffers of a trainer rank: two buckets in flight, one filling
_log = logging.getLogger("ofccl.checkpoint")
_OK, _ENDS, _STEP = -1, -2, -3  # verdicts besides a piece index


def _torch() -> Any:
    import torch
    return torch


def _as_bytes(t: Any) -> Any:
    """A contiguous tensor's bytes as a flat uint8 tensor (no copy)."""
    torch = _torch()
    flat = t.reshape(-1)
    return flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat


class Bucket:
    """The pieces of one bucket as they are packed: [name, shape, dtype, the
    weight's bytes, the piece's offset in them, its length, its offset in the
    bucket]."""

    def __init__(self, size: int):
        self.size, self.used, self.items = size, 0, []  # type: Tuple[int, int, List[List[Any]]]

    def room(self) -> int:
        return self.size - (self.used + ALIGN - 1) // ALIGN * ALIGN

    def add(self, name: str, shape: List[int], dt: str, total: int, at: int, n: int) -> int:
        off = (self.used + ALIGN - 1) // ALIGN * ALIGN
        self.items.append([name, shape, dt, total, at, n, off])
        self.used = off + n
        return off

    def describe(self, step: Any, end: bool = False) -> Dict[str, Any]:
        return {"step": step, "end": end, "items": self.items}


class WeightStream:
    """The streaming protocol over one communicator (senders first, then
    receivers); `device` "cpu" or "cuda" (a GPU plan)."""

    def __init__(self, comm: Comm, senders: List[int], receivers: List[int], bucket_size: int,
                 device: str):
        if bucket_size < ALIGN:
            raise InvalidArgument(f"bucket_size {bucket_size}: at least {ALIGN} bytes")
        self.comm, self.device, self.size = comm, device, int(bucket_size)
        self.senders, self.receivers = senders, receivers
        self.plan = PushPlan(comm, [("slot0", self.size, "uint8"), ("slot1", self.size, "uint8")],
                             senders, receivers, bucket_bytes=self.size, gpu=device == "cuda")
        if self.plan.nbuckets != 2:
            raise InvalidArgument(f"weight stream: a plan of {self.plan.nbuckets} buckets")
        self.buckets_sent = self.buckets_received = 0
        self.completed = 0  # this sync's buckets whose push is complete here (trainer)
        self._packs: List[Any] = []

    def close(self) -> None:
        self._packs = []
        self.plan.close()

    # ---- descriptions and verdicts --------------------------------------------------
    async def _describe(self, mine: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        """The first trainer rank's description of the next bucket, on every rank."""
        comm = self.comm
        blob = json.dumps(mine).encode() if comm.rank == 0 else b""
        n = np.array([len(blob)], dtype=np.uint64)
        await comm.broadcast(n.view(np.uint8), 0)
        buf = np.frombuffer(blob, dtype=np.uint8).copy() if comm.rank == 0 else \
            np.empty(int(n[0]), dtype=np.uint8)
        if len(buf):
            await comm.broadcast(buf, 0)
        return json.loads(buf.tobytes().decode())

    async def _agree(self, theirs: Dict[str, Any], mine: Optional[Dict[str, Any]],
                     want_step: Any, j: int) -> None:
        """Every rank's verdict on bucket j; Mismatch on every rank if one objects."""
        v = _OK
        if mine is not None and mine != theirs:
            if mine["end"] != theirs["end"]:
                v = _ENDS
            else:
                a, b = mine["items"], theirs["items"]
                v = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]),
                         min(len(a), len(b)))
        elif mine is None and want_step is not None and theirs["step"] != want_step:
            v = _STEP
        got = await self.comm.all_gather(np.array([v], dtype=np.int64).view(np.uint8))
        for r, v in enumerate(got.view(np.int64).tolist()):
            if v == _OK:
                continue
            if v == _STEP:
                msg = (f"rollout rank {r} waits for the weights of step {want_step!r}, the "
                       f"trainer sends step {theirs['step']!r}") if r == self.comm.rank else \
                      (f"rollout rank {r} waits for the weights of another step than "
                       f"{theirs['step']!r}, the one the trainer sends")
            elif v == _ENDS:
                msg = (f"trainer rank {r} {'has more weights' if theirs['end'] else 'has none'} "
                       f"where trainer rank 0's {'end' if theirs['end'] else 'go on'} (bucket "
                       f"{j}): every trainer rank yields the same names, shapes and dtypes")
            else:
                items = theirs["items"]
                what = (f"'{items[v][0]}' {items[v][1]} {items[v][2]}" if v < len(items)
                        else "nothing (its bucket holds more)")
                msg = (f"trainer rank {r} yields another weight than trainer rank 0 at piece {v} "
                       f"of bucket {j} (rank 0: {what}): every trainer rank yields the same "
                       "names, shapes and dtypes")
            raise Mismatch(f"weight sync: {msg}")

    # ---- trainer ------------------------------------------------------------
    def _pack(self, b: int) -> Any:
        """Pack buffer b: this sender's share of a bucket (CPU: communicator pool
        memory, no staging copy; GPU: a CUDA tensor)."""
        torch = _torch()
        while len(self._packs) <= b:
            n = max(self.plan.shard_range(0)[1], 1)
            if self.device == "cuda":
                self._packs.append(torch.empty(n, dtype=torch.uint8,
                                               device=torch.device("cuda",
                                                                   torch.cuda.current_device())))
            else:
                self._packs.append(torch.from_numpy(self.comm.alloc(n, "uint8")))
        return self._packs[b]

    def _copy_share(self, pack: Any, src: Any, off: int) -> None:
        """The part of a piece (bytes `src` at bucket offset `off`) inside this
        sender's share of the bucket, into the pack buffer."""
        s0, n = self.plan.shard_range(0)
        a, b = max(off, s0), min(off + src.numel(), s0 + n)
        if a < b:
            pack[a - s0:b - s0].copy_(src[a - off:b - off])

    async def send(self, items: AsyncIterator[Tuple[str, Any]], step: Any) -> int:
        """Push every (name, tensor) the iterator yields; returns the buckets."""
        inflight: List[Any] = []
        j = 0
        bucket = Bucket(self.size)
        pack = self._pack(0)
        self.completed = 0

        async def ship(end: bool) -> None:
            nonlocal j, bucket, pack
            mine = bucket.describe(step, end)
            theirs = await self._describe(mine)
            await self._agree(theirs, mine, None, j)
            if end:
                return
            if len(inflight) == 2:
                await inflight.pop(0)
                self.completed += 1
            inflight.append(self.plan.post(j % 2, [pack, pack]))
            _log.debug("weight sync step %r: bucket %d posted (%d pieces, %d bytes)", step, j,
                       len(bucket.items), bucket.used)
            j += 1
            bucket = Bucket(self.size)
            pack = self._pack(j % PACKS)

        try:
            await self._fill(items, ship, lambda: (bucket, pack))
        finally:  # buckets posted before a failure finish (or fail) first
            for r in inflight:
                try:
                    await r
                except Exception:  # noqa: BLE001 - the sync's own error is the one raised
                    pass
        self.completed = j
        self.buckets_sent = j
        return j

    async def _fill(self, items: AsyncIterator[Tuple[str, Any]], ship: Any, cur: Any) -> None:
        """Read the iterator into buckets, shipping each when full, then the end."""
        torch = _torch()
        async for name, t in items:
            bucket, pack = cur()
            t = t.detach()
            dev = "cuda" if self.device == "cuda" else "cpu"
            if t.device.type != dev and dev == "cuda":
                t = t.to(torch.device("cuda", torch.cuda.current_device()))
            raw = _as_bytes(t.contiguous())
            shape, dt, total = list(t.shape), str(t.dtype).replace("torch.", ""), raw.numel()
            at = 0
            while True:
                if bucket.items and (bucket.room() < min(total - at, self.size) or
                                     bucket.room() <= 0):
                    await ship(False)
                    bucket, pack = cur()
                n = min(total - at, bucket.room())
                off = bucket.add(name, shape, dt, total, at, n)
                self._copy_share(pack, raw[at:at + n], off)
                at += n
                if at >= total:
                    break
        if cur()[0].items:
            await ship(False)
        await ship(True)

    # ---- rollout ------------------------------------------------------------
    async def receive(self, step: Any, copy: bool) -> AsyncIterator[Tuple[str, Any]]:
        """Yield (name, tensor) as buckets arrive; a tensor views the bucket's
        buffer (copy=False) until the first tensor after the next bucket's is
        asked for. Weights split over buckets are assembled (owning)."""
        posted: Dict[int, Tuple[Any, Dict[str, Any]]] = {}
        ended = False

        async def post_next(k: int) -> None:
            nonlocal ended
            if ended:
                return
            theirs = await self._describe(None)
            await self._agree(theirs, None, step, k)
            if theirs["end"]:
                ended = True
                return
            posted[k] = (self.plan.post(k % 2), theirs)

        try:
            async for item in self._yield(posted, post_next, copy):
                yield item
        finally:  # buckets posted and not read (the consumer stopped, a failure)
            for req, _ in posted.values():
                try:
                    await req
                except Exception:  # noqa: BLE001 - the sync's own error is the one raised
                    pass
        _log.debug("weight sync step %r: %d buckets received", step, self.buckets_received)

    async def _yield(self, posted: Dict[int, Any], post_next: Any,
                     copy: bool) -> AsyncIterator[Tuple[str, Any]]:
        torch = _torch()
        parts: Dict[str, Any] = {}
        j = 0
        self.buckets_received = 0
        await post_next(0)
        await post_next(1)
        while j in posted:
            req, desc = posted[j]
            buf = await req
            del posted[j]
            if isinstance(buf, np.ndarray):
                buf = torch.from_numpy(buf)
            for name, shape, dt, total, at, n, off in desc["items"]:
                dtype = getattr(torch, dt)
                if n == total:
                    x = buf[off:off + n].view(dtype).reshape(shape) if n else \
                        torch.empty(shape, dtype=dtype, device=buf.device)
                    yield name, (x.clone() if copy else x)
                    continue
                whole = parts.get(name)
                if whole is None:
                    whole = parts[name] = torch.empty(total, dtype=torch.uint8,
                                                      device=buf.device)
                whole[at:at + n].copy_(buf[off:off + n])
                if at + n == total:
                    del parts[name]
                    yield name, whole.view(dtype).reshape(shape)
            del buf
            j += 1
            self.buckets_received = j
            await post_next(j + 1)

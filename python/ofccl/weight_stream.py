"""Streaming weight sync: the trainer's weights go to the rollout ranks bucket by
bucket as the trainer's iterator yields them, the list never known in advance.

One push plan per communicator carries every sync: two bucket slots (a plan
of two uint8 "tensors"), bucket j of a sync in slot j % 2. A slot starts with
a header region for the bucket's description (JSON of the step, whether it is
the sync's last bucket, and per piece its name, shape, dtype and where its
bytes are), then `bucket_size` bytes of packed weights, each at a 64-byte
aligned offset; a weight larger than what is left starts a new bucket, and
one larger than a bucket is split over several. Only the bucket's used prefix
moves (ofccl_push_bucket_used). Trainer rank i sends only its own share of
each bucket's bytes (the plan's shard; the header is in the first trainer's),
so it copies 1/T of the bytes it reads, into one of three pack buffers of its
share: two buckets in flight and one filling, whatever the model's size. One
weight is read ahead, so the last bucket says it is.

Before each bucket the trainer ranks alone compare digests of their
descriptions (a communicator of the trainers); where one differs, they push a
bucket whose header carries the error (naming the first piece that differs)
and every rank raises ofccl.Mismatch with it. A trainer rank that fails to
make its part of a bucket (its iterator raises) says so in that same round:
the bucket carries its message, the other ranks raise ofccl.RemoteError, and
it raises its own exception; nobody waits for it until a deadline. A rollout rank keeps two
buckets posted, as with a list known in advance: bucket j + 2 once it has read
bucket j and bucket j said it is not the last. So it posts one bucket past the
last, and the trainers end every sync with that bucket, empty (only its
completion moves). One waiting for another step reads the sync to its end
(the trainers finish normally) and then raises Mismatch; one whose consumer
stops early takes the rest unread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

import numpy as np

from .comm import Comm
from .errors import Error, InvalidArgument, Mismatch, RemoteError
from .push import PushPlan

ALIGN = 64
PACKS = 3  # pack buffers of a trainer rank: two buckets in flight, one filling
_log = logging.getLogger("ofccl.checkpoint")


def _torch() -> Any:
    import torch
    return torch


def _as_bytes(t: Any) -> Any:
    """A contiguous tensor's bytes as a flat uint8 tensor (no copy)."""
    torch = _torch()
    flat = t.reshape(-1)
    return flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat


def _host(x: Any) -> Any:
    """A host torch tensor as the numpy array over its memory; else x."""
    return x if isinstance(x, np.ndarray) or x.device.type != "cpu" else x.numpy()


def _copy(dst: Any, src: Any) -> None:
    """dst[:] = src (flat bytes, numpy arrays or torch tensors). Between host
    buffers by numpy (one memcpy): torch's copy runs on its intra-op threads,
    and with a process per rank on a host those contend (0.7 GB/s against
    about 10 measured on a 16-core host with 4 ranks)."""
    d, s = _host(dst), _host(src)
    if isinstance(d, np.ndarray) and isinstance(s, np.ndarray):
        np.copyto(d, s)
    else:  # GPU memory on one side
        torch = _torch()
        (torch.from_numpy(d) if isinstance(d, np.ndarray) else d).copy_(
            torch.from_numpy(s) if isinstance(s, np.ndarray) else s)


def _up(x: int) -> int:
    return (x + ALIGN - 1) // ALIGN * ALIGN


class Bucket:
    """The pieces of one bucket as they are packed: [name, shape, dtype, the
    weight's bytes, the piece's offset in them, its length, its offset in the
    bucket]; the header takes the first `head` bytes."""

    def __init__(self, size: int, head: int, step: Any):
        self.size, self.head, self.used = size, head, head
        self.items: List[List[Any]] = []
        # the header's JSON so far: its fixed part, then at most `need` a piece
        self.text = len(json.dumps({"step": step, "last": False, "items": []})) + 8
        self.need = 0

    def room(self, entry: List[Any]) -> int:
        """Bytes a piece of `entry` (its offsets still 0) may take here (0: the
        header is full). Its description's length is bounded once: the three
        offsets are below the weight's and the bucket's sizes."""
        self.need = len(json.dumps(entry)) - 3 + len(str(entry[3])) + 2 * len(str(self.size)) + 2
        if self.text + self.need > self.head - 8:
            return 0
        return max(self.size - _up(self.used), 0)

    def add(self, entry: List[Any]) -> int:
        """Place the piece room() was last asked about."""
        off = _up(self.used)
        entry[6] = off
        self.items.append(entry)
        self.used = off + entry[5]
        self.text += self.need
        return off

    def header(self, step: Any, last: bool, error: Optional[Error] = None) -> bytes:
        d: Dict[str, Any] = {"step": step, "last": last, "items": self.items}
        if error is not None:
            d = {"step": step, "last": True, "items": [], "error": error.message,
                 "code": error.name}
        blob = json.dumps(d).encode()
        return len(blob).to_bytes(8, "little") + blob


class WeightStream:
    """The streaming protocol over one communicator (senders first, then
    receivers); `device` "cpu" or "cuda" (a GPU plan). Collective to make."""

    def __init__(self, comm: Comm, senders: List[int], receivers: List[int], bucket_size: int,
                 device: str):
        self.comm, self.device, self.size = comm, device, int(bucket_size)
        self.senders, self.receivers = senders, receivers
        self.head = min(64 << 10, self.size // max(len(senders), 1) // 2 // ALIGN * ALIGN)
        if self.head < 1024:
            raise InvalidArgument(f"bucket_size {bucket_size}: at least {2048 * len(senders)} "
                                  f"bytes with {len(senders)} trainer ranks (each bucket's "
                                  "description travels in the first one's share)")
        self.slot = self.head + self.size  # the header region, then the weights
        self.plan = PushPlan(comm, [("slot0", self.slot, "uint8"), ("slot1", self.slot, "uint8")],
                             senders, receivers, bucket_bytes=self.slot, gpu=device == "cuda")
        if self.plan.nbuckets != 2:
            raise InvalidArgument(f"weight stream: a plan of {self.plan.nbuckets} buckets")
        # the trainers' own communicator: their descriptions are compared there
        self.tcomm = comm.split(0 if comm.rank in senders else 1, comm.rank)
        self.buckets_sent = self.buckets_received = 0
        self.bytes_sent = 0  # the weights' bytes this sync read (trainer)
        self.completed = 0  # this sync's buckets whose push is complete here (trainer)
        self._packs: List[Any] = []
        # a trainer rank's share of every bucket: (first byte, bytes)
        self._share = self.plan.shard_range(0) if comm.rank in senders else (0, 0)
        self._pins: List[Any] = []  # GPU: the headers' pinned host copies, one per pack
        self._stream: Any = None  # GPU: the pushes' stream
        # rollout: what is left to take of the sync being received (_finish)
        self._unread: Optional[Dict[str, Any]] = None

    def close(self) -> None:
        self._packs = self._pins = []
        self.plan.close()
        self.tcomm.close()

    # ---- trainer ------------------------------------------------------------
    def _pack(self, b: int) -> Any:
        """Pack buffer b: this sender's share of a bucket (CPU: a numpy array of
        communicator pool memory, no staging copy; GPU: a CUDA tensor)."""
        torch = _torch()
        while len(self._packs) <= b:
            n = max(self._share[1], 1)
            if self.device == "cuda":
                dev = torch.device("cuda", torch.cuda.current_device())
                self._packs.append(torch.empty(n, dtype=torch.uint8, device=dev))
            else:
                self._packs.append(self.comm.alloc(n, "uint8"))
        return self._packs[b]

    def _put_header(self, b: int, blob: bytes) -> None:
        """A bucket's description at the start of pack b (the first sender's
        share begins the bucket). GPU: from pinned memory on the caller's
        stream, as the weights are packed (a pageable copy would wait for the
        pushes before it)."""
        src, pack = np.frombuffer(blob, dtype=np.uint8), self._pack(b)
        if self.device != "cuda":
            np.copyto(pack[:len(blob)], src)
            return
        torch = _torch()
        while len(self._pins) <= b:
            self._pins.append(torch.empty(self.head, dtype=torch.uint8, pin_memory=True))
        self._pins[b].numpy()[:len(blob)] = src  # pack b's last push is complete
        pack[:len(blob)].copy_(self._pins[b][:len(blob)], non_blocking=True)

    def _posting(self) -> Any:
        """Where buckets are posted. GPU: a stream of their own, after what the
        caller's stream did so far (packed the bucket; read the buffer a
        receiver posts again), so the caller's stream never waits for a bucket
        in flight: a trainer packs the next bucket meanwhile, and a rollout
        rank reads bucket j while j + 1 arrives."""
        if self.device != "cuda":
            return contextlib.nullcontext()
        torch = _torch()
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        self._stream.wait_stream(torch.cuda.current_stream())
        return torch.cuda.stream(self._stream)

    def _copy_share(self, pack: Any, src: Any, off: int) -> None:
        """The part of `src` (flat bytes, numpy or torch, at bucket offset
        `off`) inside this sender's share of the bucket, into the pack buffer.
        Per weight: numpy where it can (its slices cost a tenth of torch's)."""
        s0, n = self._share
        a, b = max(off, s0), min(off + len(src), s0 + n)
        if a >= b:
            return
        dst = pack[a - s0:b - s0]
        if a - off or b - off != len(src):
            src = src[a - off:b - off]
        _copy(dst, src)

    async def _tell(self, text: str, root: int) -> str:
        """Trainer `root`'s text on every trainer rank."""
        n = np.array([len(text.encode())], dtype=np.uint64)
        await self.tcomm.broadcast(n.view(np.uint8), root)
        buf = np.frombuffer(text.encode(), dtype=np.uint8).copy() if self.tcomm.rank == root \
            else np.empty(int(n[0]), dtype=np.uint8)
        await self.tcomm.broadcast(buf, root)
        return buf.tobytes().decode()

    async def _differs(self, bucket: Bucket, last: bool, j: int, step: Any,
                       failed: Optional[str] = None) -> Optional[Error]:
        """Every trainer rank before bucket j moves: None where every trainer's
        description of it (and step) is the same; else, on every trainer, the
        error the bucket carries instead: RemoteError where a trainer rank
        failed to make its part (`failed`, its message), else Mismatch naming
        the first piece that differs."""
        if self.tcomm.size == 1:
            return None if failed is None else RemoteError(failed)
        mine = json.dumps([bucket.items, last, step]).encode()
        word = np.zeros(9, dtype=np.uint8)
        word[:8] = np.frombuffer(hashlib.sha256(mine).digest()[:8], dtype=np.uint8)
        word[8] = failed is not None
        got = (await self.tcomm.all_gather(word)).reshape(-1, 9)
        down = [r for r in range(len(got)) if got[r][8]]
        if down:
            return RemoteError(await self._tell(failed or "", down[0]))
        if len({bytes(row[:8]) for row in got}) == 1:
            return None
        # Rare: trainer 0's description to every trainer, and where each differs.
        items0, last0, step0 = json.loads(await self._tell(mine.decode(), 0))
        a = bucket.items
        v = -1 if [a, last] == [items0, last0] else \
            next((i for i in range(min(len(a), len(items0))) if a[i] != items0[i]),
                 min(len(a), len(items0)))
        v = -2 if v == -1 and json.loads(json.dumps(step)) != step0 else v
        where = await self.tcomm.all_gather(np.array([v], dtype=np.int64).view(np.uint8))
        for r, v in enumerate(where.view(np.int64).tolist()):
            if v == -2:
                return Mismatch(f"weight sync: trainer rank {r} sends the weights of another step "
                                f"than trainer rank 0 (rank 0: step {step0!r}): every trainer "
                                "rank passes the same global_steps")
            if v < 0:
                continue
            what = (f"'{items0[v][0]}' {items0[v][1]} {items0[v][2]}" if v < len(items0)
                    else "no more weights")
            return Mismatch(f"weight sync: trainer rank {r} yields another weight than trainer "
                            f"rank 0 at piece {v} of bucket {j} (rank 0: {what}): every trainer "
                            "rank yields the same names, shapes and dtypes")
        return Mismatch("weight sync: the trainer ranks' buckets differ")

    async def send(self, items: AsyncIterator[Tuple[str, Any]], step: Any) -> int:
        """Push every (name, tensor) the iterator yields; returns the buckets."""
        torch = _torch()
        dev = torch.device("cuda", torch.cuda.current_device()) if self.device == "cuda" else None
        inflight: List[Any] = []
        state = {"j": 0, "bucket": Bucket(self.slot, self.head, step), "pack": self._pack(0),
                 "shipping": False}
        self.completed = self.bytes_sent = 0

        async def ship(last: bool, failed: Optional[str] = None) -> None:
            j, bucket, pack = state["j"], state["bucket"], state["pack"]
            state["shipping"] = True  # from here a failure is the sync's, not this rank's
            error = await self._differs(bucket, last, j, step, failed)
            if self.comm.rank == self.senders[0]:
                head = bucket.header(step, last, error)
                if len(head) > self.head:
                    raise InvalidArgument(f"weight sync: bucket {j}'s description takes "
                                          f"{len(head)} bytes, its header {self.head}")
                self._put_header(j % PACKS, head)
            if len(inflight) == 2:
                await inflight.pop(0)
                self.completed += 1
            with self._posting():
                inflight.append(self.plan.post(j % 2, [pack, pack], used=[bucket.used] * 2))
                if last or error is not None:  # the bucket the rollout ranks posted past the end
                    inflight.append(self.plan.post((j + 1) % 2, [pack, pack], used=[0, 0]))
            if error is not None:
                raise error
            state.update(j=j + 1, bucket=Bucket(self.slot, self.head, step),
                         pack=self._pack((j + 1) % PACKS), shipping=False)

        it = items.__aiter__()
        try:
            nxt = await _next(it)
            while nxt is not None:
                name, t = nxt
                t = t.detach()
                if dev is not None and t.device != dev:
                    t = t.to(dev)
                raw = _as_bytes(t.contiguous())
                if raw.device.type == "cpu":
                    raw = raw.numpy()
                self.bytes_sent += len(raw)
                entry = [name, list(t.shape), str(t.dtype).replace("torch.", ""), len(raw),
                         0, 0, 0]
                at, total = 0, len(raw)
                while True:
                    bucket = state["bucket"]
                    room = bucket.room(entry)
                    if bucket.items and (room == 0 or room < min(total - at, self.size)):
                        await ship(False)
                        continue
                    if room == 0:
                        raise InvalidArgument(f"weight sync: the description of weight {name!r} "
                                              f"does not fit a bucket's header ({self.head} "
                                              "bytes): a shorter name, or larger buckets")
                    n = min(total - at, room)
                    off = bucket.add(entry[:4] + [at, n, 0])
                    self._copy_share(state["pack"], raw[at:at + n], off)
                    at += n
                    if at >= total:
                        break
                nxt = await _next(it)  # one weight ahead: the last bucket says so
            await ship(True)
        except Exception as exc:
            if state["shipping"]:
                raise
            # This rank failed making its part of bucket j (the iterator raised,
            # a weight's description does not fit): bucket j then carries that
            # to every rank, which raises RemoteError, rather than leaving them
            # to wait for this rank until their deadline.
            # an eighth of the header: JSON escapes a character into 6 bytes at most
            why = (f"weight sync: trainer rank {self.comm.rank} failed making bucket "
                   f"{state['j']}: {type(exc).__name__}: {exc}")[:self.head // 8]
            try:
                await ship(True, why)
            except Exception:  # noqa: BLE001 - this rank's own error is the one raised
                pass
            raise
        finally:  # buckets posted before a failure finish (or fail) first
            for r in inflight:
                try:
                    await r
                except Exception:  # noqa: BLE001 - the sync's own error is the one raised
                    pass
        self.completed = self.buckets_sent = state["j"]
        return state["j"]

    # ---- rollout ------------------------------------------------------------
    def _header(self, buf: Any) -> Dict[str, Any]:
        """A received bucket's description (GPU: one copy to the host)."""
        hb = buf[:self.head].cpu().numpy()
        n = int.from_bytes(hb[:8].tobytes(), "little")
        return json.loads(hb[8:8 + n].tobytes().decode())

    async def _finish(self) -> None:
        """Take what is left of the sync being received (`self._unread`): the
        buckets posted and not taken, and, until a bucket says it is the last,
        the ones after it, unread; so the trainers finish whatever the
        consumer did (stopped early, raised). Each step keeps its state, so a
        cancelled finish is taken up by the next receive."""
        u = self._unread
        while u is not None:
            k = u["next"]  # the bucket to take; k - 1 is read, its buffer free
            if not u["done"] and u["posted"] < k + 1:
                with self._posting():
                    u["reqs"][k + 1] = self.plan.post((k + 1) % 2)
                u["posted"] = k + 1
            if k not in u["reqs"]:
                self._unread = u = None
                break
            buf = await u["reqs"][k]
            del u["reqs"][k]
            if not u["done"]:
                head = self._header(_torch().from_numpy(buf) if isinstance(buf, np.ndarray)
                                    else buf)
                u["done"] = head["last"] or "error" in head
            u["next"] = k + 1

    async def receive(self, step: Any, copy: bool) -> AsyncIterator[Tuple[str, Any]]:
        """Yield (name, tensor) as buckets arrive; a tensor views the bucket's
        buffer (copy=False) until the first tensor of the next bucket is asked
        for. Weights split over buckets are assembled (owning). A consumer that
        stops early (or raises) still takes the rest of the sync, unread, when
        it closes the iterator or at the latest when it receives again."""
        torch = _torch()
        await self._finish()  # a sync an earlier consumer left
        parts: Dict[str, Any] = {}
        wrong_step = None
        with self._posting():  # buckets j and j + 1
            u = {"reqs": {0: self.plan.post(0), 1: self.plan.post(1)}, "posted": 1, "next": 0,
                 "done": False}
        self._unread = u
        self.buckets_received = 0
        try:
            j = 0
            while True:
                buf = await u["reqs"][j]
                del u["reqs"][j]
                if isinstance(buf, np.ndarray):
                    buf = torch.from_numpy(buf)
                head = self._header(buf)
                u["next"], u["done"] = j + 1, head["last"] or "error" in head
                if "error" in head:  # a trainer rank failed, or the trainers disagree
                    raise (RemoteError if head.get("code") == RemoteError.name else
                           Mismatch)(head["error"])
                if step is not None and head["step"] != step:
                    wrong_step = head["step"]
                self.buckets_received = j + 1
                for name, shape, dt, total, at, n, off in ([] if wrong_step is not None
                                                           else head["items"]):
                    dtype = getattr(torch, dt)
                    if n == total:
                        x = buf[off:off + n].view(dtype).reshape(shape) if n else \
                            torch.empty(shape, dtype=dtype, device=buf.device)
                        yield name, (x.clone() if copy else x)
                        continue
                    whole = parts.setdefault(name, torch.empty(total, dtype=torch.uint8,
                                                               device=buf.device))
                    _copy(whole[at:at + n], buf[off:off + n])
                    if at + n == total:
                        del parts[name]
                        yield name, whole.view(dtype).reshape(shape)
                del buf
                if u["done"]:
                    break
                with self._posting():  # bucket j + 2, into bucket j's buffer
                    u["reqs"][j + 2] = self.plan.post(j % 2)
                u["posted"] = j + 2
                j += 1
        except Error:
            if not u["done"]:  # the transport failed: nothing more to take
                self._unread = None
            raise
        finally:  # the bucket past the end; after a consumer that stopped, the rest
            try:
                await self._finish()
            except Exception:  # noqa: BLE001 - the sync's own error is the one raised
                pass
        if wrong_step is not None:
            raise Mismatch(f"weight sync: rollout rank {self.comm.rank} waits for the weights of "
                           f"step {step!r}, the trainers sent step {wrong_step!r}")


async def _next(it: Any) -> Optional[Tuple[str, Any]]:
    try:
        return await it.__anext__()
    except StopAsyncIteration:
        return None

"""One process of the weight-sync test (test_weight_sync.py): a trainer or a
rollout rank of two separately launched groups. argv: role, rank. Prints
'META <json>' (prepare()), reads the init_process_group keywords as one JSON
line on stdin, runs the syncs and prints 'RESULT <json>'. argv[3] "cuda": the
engine's buckets on the GPU (trainers push CUDA tensors, the rollout side
gets CUDA tensors); trainer r on GPU r, rollout r on GPU 2 + r (modulo the
GPUs there are)."""

import asyncio
import hashlib
import json
import sys
import zlib

import torch

import ofccl
import ofccl.checkpoint

# name: (shape, dtype); 32 KiB buckets hold a few tensors each, 'big' and
# 'embed' are larger than a bucket, 'empty' has no element.
TENSORS = [("embed", (300, 64), torch.float32), ("bias", (64,), torch.float32),
           ("ln", (64,), torch.bfloat16), ("big", (40000,), torch.float16),
           ("scalar", (), torch.float64), ("ids", (1000,), torch.int64),
           ("mask", (33,), torch.bool), ("raw", (1001,), torch.uint8),
           ("empty", (0, 5), torch.float32), ("w2", (129, 17), torch.bfloat16)]
BUCKET = 32 << 10


def weight(name, shape, dtype, step):
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()) * 31 + step)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype in (torch.uint8, torch.int64):
        return torch.randint(0, 250, shape, generator=g).to(dtype)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


DEVICE = sys.argv[3] if len(sys.argv) > 3 else "cpu"


def weights(step, rank, bad=False):
    for name, shape, dtype in TENSORS:
        if bad and rank == 1 and name == "bias":
            shape = (65,)  # this trainer disagrees with the others
        yield name, weight(name, shape, dtype, step).to(DEVICE)


def failing_weights(step, rank):
    """Trainer rank 1's iterator raises at the fourth weight (its bucket not
    yet full); the others' go on."""
    for i, item in enumerate(weights(step, rank)):
        if rank == 1 and i == 3:
            raise RuntimeError("CUDA out of memory while unsharding 'big'")
        yield item


async def async_weights(step, rank):
    """The same weights from an async generator (verl's iterators may be)."""
    for item in weights(step, rank):
        yield item


def as_bytes(t):
    return t.reshape(-1).view(torch.uint8).cpu().numpy().tobytes() if t.numel() else b""


async def receive(engine, step, expect=None):
    names, wrong, digest = [], [], hashlib.sha256()
    async for name, got in engine.receive_weights(global_steps=step if expect is None else expect):
        shape, dtype = dict((n, (s, d)) for n, s, d in TENSORS)[name]
        want = weight(name, shape, dtype, step)
        # checked as it arrives: the view is valid until the next bucket's
        if got.dtype != dtype or tuple(got.shape) != shape or got.device.type != DEVICE or \
                as_bytes(got) != as_bytes(want):
            wrong.append(name)
        names.append(name)
        digest.update(as_bytes(got))
    return {"names": names, "wrong": wrong, "sha": digest.hexdigest()}


async def receive_and_fail(engine, step):
    """A consumer that raises at the second weight (a rollout's loader that
    meets a name it does not know)."""
    n = 0
    async for name, _ in engine.receive_weights(global_steps=step):
        n += 1
        if n == 2:
            raise ValueError(f"the rollout's loader knows no weight {name!r}")


def main():
    role, rank = sys.argv[1], int(sys.argv[2])
    if DEVICE == "cuda":
        torch.cuda.set_device((rank + (0 if role == "trainer" else 2)) % torch.cuda.device_count())
    engine = ofccl.checkpoint.new_engine(
        "ofccl", bucket_size=BUCKET, is_master=(role == "trainer" and rank == 0),
        host="127.0.0.1", settings={"TIMEOUT_MS": 60000, "BOOT_TIMEOUT_MS": 120000},
        device=DEVICE)
    print("META " + json.dumps(engine.prepare()), flush=True)
    kwargs = json.loads(sys.stdin.readline())
    out = {"steps": []}
    for step in (1, 2):
        engine.prepare()
        engine.init_process_group(**kwargs)  # as verl calls it before every sync
        if role == "trainer":
            gen = weights(step, rank) if step == 1 else async_weights(step, rank)
            metrics = asyncio.run(engine.send_weights(gen, global_steps=step))
            digest = hashlib.sha256()
            for _, t in weights(step, rank):
                digest.update(as_bytes(t))
            out["steps"].append({"sha": digest.hexdigest(), "metrics": metrics,
                                 "bytes": sum(len(as_bytes(t)) for _, t in weights(step, rank))})
        else:
            out["steps"].append(asyncio.run(receive(engine, step)))
        engine.finalize()
    out["plans_built"] = engine.plans_built
    out["nbuckets"] = engine._stream.buckets_sent if role == "trainer" else \
        engine._stream.buckets_received

    def ends(send, recv, *errors):
        """How one sync ended on this rank: "none", or "<exception>: <message>"."""
        try:
            asyncio.run(send() if role == "trainer" else recv())
            return "none"
        except errors as exc:
            return f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"
    # A trainer whose tensor list differs: every rank fails with Mismatch.
    out["mismatch"] = ends(
        lambda: engine.send_weights(weights(3, rank, bad=True), global_steps=3),
        lambda: receive(engine, 3), ofccl.Mismatch)
    # The rollout side waits for step 5, the trainers send step 4: the rollout ranks
    # read the sync to its end and raise Mismatch.
    out["step_mismatch"] = ends(lambda: engine.send_weights(weights(4, rank), global_steps=4),
                                lambda: receive(engine, 4, expect=5), ofccl.Mismatch)
    # Trainer rank 1's iterator raises mid-sync: it raises that, every other
    # rank RemoteError naming it and the cause (not a timeout).
    out["failed"] = ends(lambda: engine.send_weights(failing_weights(7, rank), global_steps=7),
                         lambda: receive(engine, 7), ofccl.RemoteError, RuntimeError)
    # A rollout consumer raises at its second weight: it raises that, and the
    # rest of the sync is taken unread, so the trainers finish normally.
    out["consumer"] = ends(lambda: engine.send_weights(weights(8, rank), global_steps=8),
                           lambda: receive_and_fail(engine, 8), ValueError)
    # Then a good sync of step 6.
    if role == "trainer":
        asyncio.run(engine.send_weights(weights(6, rank), global_steps=6))
    else:
        out["after"] = asyncio.run(receive(engine, 6))
    engine.close()
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

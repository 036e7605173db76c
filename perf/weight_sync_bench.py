#!/usr/bin/env python3
"""Weight sync, streaming against pre-read, in one run.

T trainer and R rollout ranks (one process each, TCP rendezvous on loopback,
the local transport) sync SIZE bytes of bf16 weights in BUCKET-byte buckets,
produced lazily by a generator (weights of --piece bytes, made as they are
asked for):

  stream    ofccl.weight_stream, as the checkpoint engine runs it: the
            generator read bucket by bucket;
  pre-read  the generator read to its end first, then one push plan over the
            whole list (what the engine did before it streamed).

With --device cuda the weights are made on the GPU (rank % GPUs) and both
paths move GPU memory (GPU plans, every rank on one host; ranks may share a
GPU, which checks the path, not its speed).

Each is timed from a barrier to the last rollout rank's last byte (best of
--reps), and the trainer ranks' peak resident memory (ru_maxrss) is read after
each: the streaming runs first, so its peak is its own. Every received byte
is checked against the generator's on the last rep. Usage:

  python3 perf/weight_sync_bench.py --size 2G --bucket 64M --trainers 2 --rollout 2
"""
import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_size(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * m[s[-1]]) if s[-1] in m else int(s)


def weights(size, piece, torch, device):
    for i in range(size // piece):
        yield f"layer{i}.weight", torch.full((piece // 2,), float(i % 97), dtype=torch.bfloat16,
                                             device=device)


def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rank_main(rank, args):
    import torch
    torch.set_num_threads(args.threads)  # torchrun's default: OMP_NUM_THREADS=1 per process

    import ofccl
    from ofccl.push import PushPlan
    from ofccl.weight_stream import WeightStream
    n = args.trainers + args.rollout
    settings = {"BOOT_ROOT": f"127.0.0.1:{args.port}", "BOOT_RANK": rank, "BOOT_SIZE": n,
                "PROVIDER": "local", "TIMEOUT_MS": 120000}
    settings.update(kv.split("=", 1) for kv in args.set)
    ctx = ofccl.Context(settings)
    comm = ctx.world()
    senders, receivers = list(range(args.trainers)), list(range(args.trainers, n))
    trainer = rank in senders
    out = {"rank": rank, "trainer": trainer}
    gpu = args.device == "cuda"
    if gpu:
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device()) if gpu else None

    def done():  # the GPU's queued work, then every rank
        if gpu:
            torch.cuda.synchronize()
        comm.barrier()
    out["base_rss"] = rss()
    ws = WeightStream(comm, senders, receivers, args.bucket, args.device)
    bad = 0

    async def stream_once(check):
        nonlocal bad
        if trainer:
            async def gen():
                for item in weights(args.size, args.piece, torch, dev):
                    yield item
            await ws.send(gen(), 1)
        else:
            i = 0
            async for name, t in ws.receive(1, False):
                if check and (name != f"layer{i}.weight" or float(t[0]) != float(i % 97) or
                              float(t[-1]) != float(i % 97)):
                    bad += 1
                i += 1

    best = None
    for rep in range(args.reps):
        comm.barrier()
        t0 = time.perf_counter()
        asyncio.run(stream_once(rep == args.reps - 1))
        done()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    out["stream_s"], out["stream_rss"] = best, rss()
    ws.close()

    # pre-read: the whole list first, then one plan over it
    names = [(f"layer{i}.weight", (args.piece // 2,), "bf16")
             for i in range(args.size // args.piece)]
    plan = PushPlan(comm, names, senders, receivers, bucket_bytes=args.bucket, gpu=gpu)
    best = None
    for rep in range(args.reps):
        comm.barrier()
        t0 = time.perf_counter()
        if trainer:
            fulls = [t for _, t in weights(args.size, args.piece, torch, dev)]
            shards = [plan.shard_of(k, t) for k, t in enumerate(fulls)]
            for _ in plan.push(shards):
                pass
            del fulls, shards
        else:
            for k, buf in plan.push():
                for t in plan.bucket_tensors(k):
                    plan.view(t, buf, torch=True)
                del buf
        done()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    out["preread_s"], out["preread_rss"] = best, rss()
    plan.close()
    out["bad"] = bad
    comm.close()
    ctx.close()
    print("RESULT " + json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="2G")
    ap.add_argument("--bucket", default="64M")
    ap.add_argument("--piece", default="16M")
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--rollout", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch's threads per rank")
    ap.add_argument("--profile", default="", help="a directory: each rank's cProfile there "
                    "(rank<N>.txt, by own time)")
    ap.add_argument("--set", action="append", default=[],
                    help="an ofccl setting KEY=VALUE for every rank (repeatable)")
    ap.add_argument("--rank", type=int, default=-1)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    args.size, args.bucket, args.piece = (parse_size(args.size), parse_size(args.bucket),
                                          parse_size(args.piece))
    if args.rank >= 0 and args.profile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        rc = prof.runcall(rank_main, args.rank, args)
        with open(os.path.join(args.profile, f"rank{args.rank}.txt"), "w") as f:
            pstats.Stats(prof, stream=f).sort_stats("tottime").print_stats(30)
        return rc
    if args.rank >= 0:
        return rank_main(args.rank, args)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    n = args.trainers + args.rollout
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--port", str(port),
                               "--size", str(args.size), "--bucket", str(args.bucket),
                               "--piece", str(args.piece), "--trainers", str(args.trainers),
                               "--rollout", str(args.rollout), "--reps", str(args.reps),
                               "--device", args.device, "--threads", str(args.threads),
                               "--profile", args.profile] +
                              [x for kv in args.set for x in ("--set", kv)],
                              stdout=subprocess.PIPE, text=True) for r in range(n)]
    res = []
    for p in procs:
        out, _ = p.communicate(timeout=1200)
        lines = [x for x in out.splitlines() if x.startswith("RESULT ")]
        if p.returncode != 0 or not lines:
            print(f"weight_sync_bench: a rank failed (exit {p.returncode})")
            return 1
        res.append(json.loads(lines[-1][7:]))
    st = max(r["stream_s"] for r in res)
    pt = max(r["preread_s"] for r in res)
    tr = [r for r in res if r["trainer"]]
    mib = 1 << 20
    print(f"weight sync of {args.size / mib:.0f} MiB in {args.bucket / mib:.0f} MiB buckets, "
          f"{args.trainers} trainer and {args.rollout} rollout ranks, {args.device} memory "
          f"(local transport"
          f"{', ' + ', '.join(args.set) if args.set else ''})")
    base = max(r["base_rss"] for r in tr)
    print(f"  trainer RSS before the syncs: {base / mib:.0f} MiB")
    print(f"  stream    {st:7.3f} s  {args.size / st / 1e9:6.2f} GB/s  trainer peak RSS "
          f"+{(max(r['stream_rss'] for r in tr) - base) / mib:6.0f} MiB "
          f"({(max(r['stream_rss'] for r in tr) - base) / args.bucket:.1f} buckets)")
    print(f"  pre-read  {pt:7.3f} s  {args.size / pt / 1e9:6.2f} GB/s  trainer peak RSS "
          f"+{(max(r['preread_rss'] for r in tr) - base) / mib:6.0f} MiB")
    print(f"  stream / pre-read throughput: {pt / st:.2f}; bytes wrong: "
          f"{sum(r['bad'] for r in res)}")
    return 1 if sum(r["bad"] for r in res) else 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    sys.exit(main())

#!/usr/bin/env python3
"""Does a GPU collective give the caller its thread back, and the GPU its overlap?

Starts --ranks processes of this script (torch.distributed, backend 'ofccl',
one GPU shared by all ranks or one each), optionally as --hosts simulated
hosts (OFCCL_HOST_ID: the ranks of different hosts meet over tcp, where the
library stages GPU memory through host memory), and measures on CUDA
tensors, bf16:

  post     the time dist.all_gather_into_tensor(async_op=True) takes to
           return for a --size all-gather (the gathered bytes), median
  ag       the all-gather alone, post to torch.cuda.synchronize()
  mm       a bf16 matmul alone, sized to take about as long as the all-gather
  both     the all-gather posted on a side stream (as FSDP2 prefetches it),
           the matmul enqueued right after on the current stream, then
           synchronize: both/max(ag, mm) is 1.0 for a perfect overlap and 2.0
           for none
  call     per-call cost of a small all-gather (--small gathered bytes),
           posted and waited (Work.wait(): a stream wait) back to back, one
           synchronize at the end, divided by the calls

Rank 0 prints one table line per figure and --json writes them. Each figure
is the median over --iters, the slowest rank's. Usage (on a GPU machine):

  python3 perf/gpu_overlap.py --ranks 2 --hosts 2 --size 64M
  python3 perf/gpu_overlap.py --ranks 2 --hosts 1 --small 8K --calls 2000
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def rank_main(args):
    import torch
    import torch.distributed as dist
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import ofccl.torch  # noqa: F401  (registers the backend)

    rank, n = args.rank, args.ranks
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("ofccl", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                            world_size=n)
    res = {}

    def slowest(x):
        out = [torch.zeros(1, dtype=torch.float64) for _ in range(n)]
        dist.all_gather(out, torch.tensor([x], dtype=torch.float64))
        return max(o.item() for o in out)

    if args.size:
        numel = parse_size(args.size) // 2  # bf16
        inp = torch.randn(numel // n, device="cuda").to(torch.bfloat16)
        out = torch.empty(numel, dtype=torch.bfloat16, device="cuda")
        side = torch.cuda.Stream()
        for _ in range(3):
            dist.all_gather_into_tensor(out, inp)
        torch.cuda.synchronize()
        posts, ags = [], []
        for _ in range(args.iters):
            dist.barrier()
            t0 = time.perf_counter()
            w = dist.all_gather_into_tensor(out, inp, async_op=True)
            t1 = time.perf_counter()
            w.wait()
            torch.cuda.synchronize()
            posts.append(t1 - t0)
            ags.append(time.perf_counter() - t0)
        res["post_us"] = slowest(statistics.median(posts)) * 1e6
        res["ag_ms"] = slowest(statistics.median(ags)) * 1e3
        # A matmul of about the all-gather's time: calibrated at 4096.
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            a @ a
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            a @ a
        torch.cuda.synchronize()
        t4096 = (time.perf_counter() - t0) / 5
        m = max(256, int(4096 * (res["ag_ms"] / 1e3 / t4096) ** (1 / 3)) // 256 * 256)
        m = int(slowest(m))
        a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
        mms, boths = [], []
        for _ in range(args.iters):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            a @ a
            torch.cuda.synchronize()
            mms.append(time.perf_counter() - t0)
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.cuda.stream(side):
                w = dist.all_gather_into_tensor(out, inp, async_op=True)
            a @ a
            torch.cuda.synchronize()
            boths.append(time.perf_counter() - t0)
            w.wait()
        res["mm_n"] = m
        res["mm_ms"] = slowest(statistics.median(mms)) * 1e3
        res["both_ms"] = slowest(statistics.median(boths)) * 1e3
        res["both_over_max"] = res["both_ms"] / max(res["ag_ms"], res["mm_ms"])
    if args.small:
        numel = parse_size(args.small) // 4  # f32
        inp = torch.ones(numel // n, device="cuda")
        out = torch.empty(numel, device="cuda")
        for _ in range(20):
            dist.all_gather_into_tensor(out, inp)
        torch.cuda.synchronize()
        calls = []
        for _ in range(args.iters):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                dist.all_gather_into_tensor(out, inp)
            torch.cuda.synchronize()
            calls.append((time.perf_counter() - t0) / args.calls)
        res["call_us"] = slowest(statistics.median(calls)) * 1e6
    dist.destroy_process_group()
    if rank == 0:
        print("RESULT " + json.dumps(res), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--hosts", type=int, default=1)
    ap.add_argument("--size", default="", help="all-gather bytes for post/ag/mm/both")
    ap.add_argument("--small", default="", help="all-gather bytes for the per-call cost")
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--iters", type=int, default=9)
    ap.add_argument("--json", default="")
    ap.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank >= 0:
        return rank_main(args)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    per = -(-args.ranks // args.hosts)
    procs = []
    for r in range(args.ranks):
        env = dict(os.environ, OFCCL_HOST_ID=f"sim-host-{r // per}") if args.hosts > 1 else \
            dict(os.environ)
        cmd = [sys.executable, os.path.abspath(__file__), "--rank", str(r), "--port", str(port),
               "--ranks", str(args.ranks), "--iters", str(args.iters), "--calls",
               str(args.calls)]
        cmd += ["--size", args.size] if args.size else []
        cmd += ["--small", args.small] if args.small else []
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    out = [p.communicate(timeout=600)[0] for p in procs]
    bad = [r for r, p in enumerate(procs) if p.returncode != 0]
    if bad:
        print(f"ranks {bad} failed", file=sys.stderr)
        return 1
    res = json.loads([ln for ln in out[0].splitlines() if ln.startswith("RESULT ")][-1][7:])
    res.update(ranks=args.ranks, hosts=args.hosts, size=args.size, small=args.small)
    for k, v in res.items():
        print(f"{k:>14} {v:.3f}" if isinstance(v, float) else f"{k:>14} {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

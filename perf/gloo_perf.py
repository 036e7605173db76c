#!/usr/bin/python3
"""Bus bandwidth of torch.distributed's gloo backend, in ofccl_perf's terms.

    perf/gloo_perf.py -n 16 [-o ag,rs,bc] [-b 1M] [-e 64M] [-f 4] [-i 10] [-C out.csv]

Starts N local processes (torch's TCP store on 127.0.0.1), and for each size
(the gathered buffer / reduce-scatter input / broadcast buffer, in bytes, f32)
times -i back-to-back calls of all_gather_into_tensor, reduce_scatter_tensor
(SUM) or broadcast after a barrier and a warm-up call, taking the slowest
rank's average. Bus bandwidth as nccl-tests and ofccl_perf define it:
all-gather and reduce-scatter bytes * (N-1)/N / time, broadcast bytes / time.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time


def parse_size(s: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1].upper()]) if s[-1].upper() in mult else int(s)


def worker(args) -> None:
    import torch
    import torch.distributed as dist
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    rows = []
    size = args.b
    while size <= args.e:
        count = max(n, size // 4 // n * n)
        big = torch.ones(count, dtype=torch.float32)
        small = torch.ones(count // n, dtype=torch.float32)
        parts = list(big.chunk(n))
        for op in args.o.split(","):
            # the tensor forms where this torch's gloo has them, else what a gloo
            # user falls back to: the list form, or all-reduce for reduce-scatter
            if op == "ag":
                calls = [lambda: dist.all_gather_into_tensor(big, small),
                         lambda: dist.all_gather(parts, small)]
            elif op == "rs":
                calls = [lambda: dist.reduce_scatter_tensor(small, big),
                         lambda: dist.all_reduce(big)]
            else:
                calls = [lambda: dist.broadcast(big, 0)]
            call, err = None, ""
            for i, c in enumerate(calls):
                try:
                    c()
                    call = c
                    err = "" if i == 0 else "(fallback: %s)" % ("list all_gather" if op == "ag"
                                                                 else "all_reduce")
                    break
                except (RuntimeError, ValueError) as e:
                    err = str(e).splitlines()[0]
            if call is None:
                rows.append((op, count * 4, float("nan"), err))
                continue
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(args.i):
                call()
            t = torch.tensor([(time.perf_counter() - t0) / args.i])
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            rows.append((op, count * 4, float(t), err))
        size = int(size * args.f)
    if rank == 0:
        print(f"# gloo, torch {torch.__version__}, {n} ranks")
        print(f"{'op':>4s} {'bytes':>12s} {'time us':>12s} {'busbw GB/s':>12s}")
        out = open(args.C, "w") if args.C else None
        if out:
            out.write("lib,op,ranks,bytes,time_us,busbw_GBps\n")
        for op, nbytes, t, err in rows:
            bw = nbytes * ((n - 1) / n if op != "bc" else 1) / t / 1e9 if t == t else float("nan")
            print(f"{op:>4s} {nbytes:12d} {t * 1e6:12.1f} {bw:12.3f} {err}")
            if out:
                out.write(f"gloo,{op},{n},{nbytes},{t * 1e6:.1f},{bw:.4f}\n")
        if out:
            out.close()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("-o", default="ag,rs,bc")
    ap.add_argument("-b", type=parse_size, default=1 << 20)
    ap.add_argument("-e", type=parse_size, default=64 << 20)
    ap.add_argument("-f", type=float, default=4)
    ap.add_argument("-i", type=int, default=10)
    ap.add_argument("-C", default="")
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.n), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"]
                                      + sys.argv[1:], env=env))
    rc = 0
    for p in procs:
        try:
            rc |= p.wait(timeout=900)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = 1
    sys.exit(1 if rc else 0)


if __name__ == "__main__":
    main()

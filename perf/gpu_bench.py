#!/usr/bin/env python3
"""GPU collectives side by side: ofccl against NCCL, through torch, in one run.

One process per GPU (torch.multiprocessing), bf16. For each size (bytes of the
gathered buffer, nccl-tests' convention) it times all-gather, broadcast and
reduce-scatter with CUDA events (median of --iters after warm-up) and prints
bus bandwidth in GB/s: all-gather and reduce-scatter size*(n-1)/n/t, broadcast
size/t. Then a 64 MiB all-gather beside an 8192^3 bf16 matmul on another
stream: the matmul alone, the all-gather alone, both together.

Libraries: 'nccl' (torch.distributed), and 'ofccl' when --ofccl names the
directory of libofccl.so with the Python package (python/ofccl) beside it
(its GPU path: symmetric GPU buffers, stream-ordered collectives). Results
also go to --json. Usage:

  python3 perf/gpu_bench.py --gpus 4 --libs nccl,ofccl --ofccl build --json out.json
"""
import argparse
import json
import os
import statistics
import sys
import time


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def timed(torch, fn, iters, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b))
    return statistics.median(t)


def max_over_ranks(torch, dist, x):
    t = torch.tensor([x], device="cuda", dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


class NcclLib:
    name = "nccl"

    def __init__(self, torch, dist, rank, n):
        self.torch, self.dist, self.n = torch, dist, n

    def out_buffer(self, numel):
        return self.torch.empty(numel, dtype=self.torch.bfloat16, device="cuda")

    def allgather(self, out, inp):
        self.dist.all_gather_into_tensor(out, inp)

    def broadcast(self, buf):
        self.dist.broadcast(buf, 0)

    def reduce_scatter(self, out, inp):
        self.dist.reduce_scatter_tensor(out, inp)


class OfcclLib:
    name = "ofccl"

    def __init__(self, torch, dist, rank, n, libdir, port):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
        os.environ.setdefault("OFCCL_LIBRARY", os.path.join(libdir, "libofccl.so.0"))
        import ofccl  # noqa: E402
        import ofccl.gpu  # noqa: E402  (the GPU path of the package)
        self.torch, self.n = torch, n
        self.ctx = ofccl.Context({"BOOT_ROOT": "127.0.0.1:%d" % port, "BOOT_RANK": rank,
                                  "BOOT_SIZE": n, "PROVIDER": "local"})
        self.comm = self.ctx.world()
        self.coll = ofccl.gpu.collectives_for(self.comm)

    def out_buffer(self, numel):
        return self.coll.alloc(numel, self.torch.bfloat16)

    def allgather(self, out, inp):
        self.coll.all_gather(out, inp)

    def broadcast(self, buf):
        self.coll.broadcast(buf, 0)

    def reduce_scatter(self, out, inp):
        import ofccl
        self.coll.reduce_scatter(out, inp, ofccl.Op.SUM)

    def close(self):
        self.coll.close()
        self.comm.close()


def worker(rank, n, args, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(n), LOCAL_RANK=str(rank))
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=n, device_id=torch.device("cuda", rank))
    libs = []
    for name in args.libs.split(","):
        if name == "nccl":
            libs.append(NcclLib(torch, dist, rank, n))
        elif name == "ofccl":
            libs.append(OfcclLib(torch, dist, rank, n, args.ofccl, port + 1))
    out = {}
    sizes = []
    s = parse_size(args.begin)
    while s <= parse_size(args.end):
        sizes.append(s)
        s *= 2
    for lib in libs:
        rows = out.setdefault(lib.name, {})
        for size in sizes:
            numel = size // 2
            chunk = numel // n
            inp = torch.randn(chunk, dtype=torch.bfloat16, device="cuda")
            dst = lib.out_buffer(chunk * n)
            ms = timed(torch, lambda: lib.allgather(dst, inp), args.iters)
            ag = max_over_ranks(torch, dist, ms)
            ref = torch.empty(chunk * n, dtype=torch.bfloat16, device="cuda")
            dist.all_gather_into_tensor(ref, inp)
            lib.allgather(dst, inp)
            torch.cuda.synchronize()
            ok_ag = bool(torch.equal(dst, ref))
            bbuf = lib.out_buffer(chunk * n)
            bbuf.copy_(ref)
            ms = timed(torch, lambda: lib.broadcast(bbuf), args.iters)
            bc = max_over_ranks(torch, dist, ms)
            row = {"ag_ms": ag, "ag_busbw": size * (n - 1) / n / (ag * 1e6), "ag_ok": ok_ag,
                   "bc_ms": bc, "bc_busbw": size / (bc * 1e6)}
            if "rs" in args.ops:
                rin = lib.out_buffer(chunk * n)
                rin.copy_(torch.randn(chunk * n, dtype=torch.bfloat16, device="cuda"))
                rout = torch.empty(chunk, dtype=torch.bfloat16, device="cuda")
                ms = timed(torch, lambda: lib.reduce_scatter(rout, rin), args.iters)
                rs = max_over_ranks(torch, dist, ms)
                # against NCCL's sum (another order of additions: within bf16's rounding)
                rref = torch.empty(chunk, dtype=torch.bfloat16, device="cuda")
                dist.reduce_scatter_tensor(rref, rin)
                lib.reduce_scatter(rout, rin)
                torch.cuda.synchronize()
                ok_rs = bool(torch.allclose(rout.float(), rref.float(), rtol=2 ** -6,
                                            atol=n * 2 ** -6))
                row.update(rs_ms=rs, rs_busbw=size * (n - 1) / n / (rs * 1e6), rs_ok=ok_rs)
            rows[str(size)] = row
        # overlap: 64 MiB all-gather beside an 8192^3 bf16 matmul
        a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
        numel = (64 << 20) // 2
        inp = torch.randn(numel // n, dtype=torch.bfloat16, device="cuda")
        dst = lib.out_buffer(numel)
        side = torch.cuda.Stream()

        def mm():
            torch.matmul(a, b)

        def ag():
            with torch.cuda.stream(side):
                lib.allgather(dst, inp)
            torch.cuda.current_stream().wait_stream(side)

        def both():
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                lib.allgather(dst, inp)
            torch.matmul(a, b)
            torch.cuda.current_stream().wait_stream(side)

        t_mm = max_over_ranks(torch, dist, timed(torch, mm, args.iters))
        t_ag = max_over_ranks(torch, dist, timed(torch, ag, args.iters))
        t_both = max_over_ranks(torch, dist, timed(torch, both, args.iters))
        rows["overlap"] = {"matmul_ms": t_mm, "ag_ms": t_ag, "both_ms": t_both,
                           "ratio": t_both / t_mm}
    if rank == 0:
        results.update(out)
    torch.cuda.synchronize()
    for lib in libs:
        if hasattr(lib, "close"):
            lib.close()
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=0)
    ap.add_argument("--libs", default="nccl")
    ap.add_argument("--ofccl", default="build")
    ap.add_argument("--begin", default="4M")
    ap.add_argument("--end", default="512M")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--ops", default="ag,bc,rs")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    import torch
    import torch.multiprocessing as mp
    n = args.gpus or torch.cuda.device_count()
    if n < 2:
        print("gpu_bench: skipped: %d GPU(s), 2 needed" % n)
        return 2
    mgr = mp.Manager()
    results = mgr.dict()
    port = 29500 + os.getpid() % 1000
    t0 = time.time()
    mp.spawn(worker, args=(n, args, port, results), nprocs=n, join=True)
    res = dict(results)
    print("\n%d GPUs (%s), bf16, bus bandwidth GB/s (all-gather / broadcast / reduce-scatter), "
          "%.0f s" % (n, torch.cuda.get_device_name(0), time.time() - t0))
    libs = list(res)
    print("%10s" % "size" + "".join("  %-26s" % l for l in libs))
    for size in [k for k in res[libs[0]] if k != "overlap"]:
        line = "%10s" % size
        for l in libs:
            r = res[l].get(size, {})
            line += "  %7.1f %7.1f %7s%s" % (r.get("ag_busbw", 0), r.get("bc_busbw", 0),
                                             "%.1f" % r["rs_busbw"] if "rs_busbw" in r else "-",
                                             "" if r.get("ag_ok", True) and r.get("rs_ok", True)
                                             else " WRONG")
        print(line)
    for l in libs:
        o = res[l]["overlap"]
        print("%s: 64 MiB all-gather beside 8192^3 matmul: matmul %.3f ms, all-gather %.3f ms, "
              "both %.3f ms (%.3fx the matmul)" % (l, o["matmul_ms"], o["ag_ms"], o["both_ms"],
                                                    o["ratio"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpus": n, "device": torch.cuda.get_device_name(0), "results": res}, f,
                      indent=1)
    bad = any(not (r.get("ag_ok", True) and r.get("rs_ok", True)) for l in res.values()
              for r in l.values() if isinstance(r, dict))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

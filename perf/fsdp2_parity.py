#!/usr/bin/python3
"""FSDP2 training of a small transformer on gloo and on ofccl: losses and step-time split.

    perf/fsdp2_parity.py --ranks 4,8 --steps 20 [--cuda] [--out DIR]

Needs torch >= 2.9 (FSDP2 custom collectives). Starts each configuration as
N local processes (rendezvous through torch's TCP store on 127.0.0.1), trains
the same model from the same seed on the same per-rank batches and compares
every rank's loss at every step with the gloo run:

  gloo            FSDP2's own collectives on a gloo group (the reference)
  ofccl-hooks     gloo group, all-gather and reduce-scatter through the ofccl hooks
  ofccl-backend   dist.init_process_group("ofccl"), the ofccl hooks on it
  *-bf16          bf16 parameters, fp32 gradient reduction (MixedPrecisionPolicy)
  ofccl-premul    gradient divide factor N/2: FSDP reduces with PREMUL_SUM(2/N),
                  which gloo rejects; the reference is gloo with AVG and twice the
                  learning rate (SGD), the same update up to summation order
  gloo-timed, ofccl-timed
                  every all-gather and reduce-scatter blocking and timed, for the
                  split of a step into communication and the rest
  ofccl-cuda      CUDA tensors, every process on GPU 0 (or rank r on GPU r mod the
                  GPU count with --spread-gpus), staged through ofccl memory;
                  compared with the gloo CPU run (different kernels, looser tolerance)

Prints one table per rank count and writes results.json under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- worker ----
def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

    rank, size, mode = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args.mode
    torch.set_num_threads(max(1, (os.cpu_count() or size) // size))
    cuda = mode.endswith("cuda")
    gpu = rank % torch.cuda.device_count() if cuda and args.spread_gpus else 0
    device = torch.device("cuda", gpu) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(gpu)
    backend = "ofccl" if mode.startswith("ofccl-backend") else "gloo"
    if backend == "ofccl" or mode.startswith("ofccl"):
        import ofccl.torch as ot
    dist.init_process_group(backend, rank=rank, world_size=size)
    mesh = init_device_mesh(device.type, (size,))

    class Timed:
        """Blocking, timed collectives around an inner hook."""

        def __init__(self, inner, sync):
            self.inner, self.sync, self.seconds, self.calls = inner, sync, 0.0, 0

        def allocate(self, size_, *, dtype, device):
            return self.inner.allocate(size_, dtype=dtype, device=device)

        def timed(self, fn):
            t0 = time.perf_counter()
            work = fn()
            if work is not None:
                work.wait()
            self.sync()
            self.seconds += time.perf_counter() - t0
            self.calls += 1
            return None

    class TimedAG(Timed, AllGather):
        def __call__(self, output_tensor, input_tensor, group, async_op=False):
            return self.timed(lambda: self.inner(output_tensor, input_tensor, group, False))

    class TimedRS(Timed, ReduceScatter):
        def __call__(self, output_tensor, input_tensor, group, op=dist.ReduceOp.SUM,
                     async_op=False):
            return self.timed(lambda: self.inner(output_tensor, input_tensor, group, op, False))

    class GlooAG(AllGather):
        def allocate(self, size_, *, dtype, device):
            return torch.empty(*size_, dtype=dtype, device=device)

        def __call__(self, output_tensor, input_tensor, group, async_op=False):
            return dist.all_gather_into_tensor(output_tensor, input_tensor, group=group,
                                               async_op=async_op)

    class GlooRS(ReduceScatter):
        def allocate(self, size_, *, dtype, device):
            return torch.empty(*size_, dtype=dtype, device=device)

        def __call__(self, output_tensor, input_tensor, group, op=dist.ReduceOp.SUM,
                     async_op=False):
            return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group,
                                              async_op=async_op)

    vocab, d, heads, ff, layers, batch, seq = 1024, args.dim, 4, 4 * args.dim, args.layers, 4, 64

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
                for _ in range(layers))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)

        def forward(self, x):
            h = self.emb(x)
            for b in self.blocks:
                h = b(h)
            return self.head(self.norm(h))

    torch.manual_seed(0)
    model = Model().to(device)
    mp = None
    if "bf16" in mode:
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    kw = {"mesh": mesh}
    if mp is not None:
        kw["mp_policy"] = mp
    for b in model.blocks:
        fully_shard(b, **kw)
    fully_shard(model, **kw)

    sync = (lambda: torch.cuda.synchronize()) if cuda else (lambda: None)
    ag = rs = None
    if mode.startswith("ofccl"):
        comm = None
        if backend != "ofccl":  # FSDP on gloo, ofccl for its two collectives
            from datetime import timedelta
            store = dist.PrefixStore("ofccl", dist.distributed_c10d._get_default_store())
            pg = ot.ProcessGroupOfccl(store, rank, size, timedelta(seconds=120))
            comm = pg.ofccl_comm
        ag, rs = ot.AllGather(comm), ot.ReduceScatter(comm)
    elif mode == "gloo-timed":
        ag, rs = GlooAG(), GlooRS()
    if mode.endswith("timed"):
        ag, rs = TimedAG(ag, sync), TimedRS(rs, sync)
    if ag is not None:
        modules = list(model.blocks) + [model]
        for m in modules:
            m.set_custom_all_gather(ag)
            m.set_custom_reduce_scatter(rs)
    lr = 0.05
    if mode == "ofccl-premul":
        for m in list(model.blocks) + [model]:
            m.set_gradient_divide_factor(size / 2)
    if mode == "gloo-premul-ref":
        lr *= 2
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses, steps = [], []
    gen = torch.Generator().manual_seed(1000 + rank)
    for step in range(args.steps):
        x = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)
        sync()
        t0 = time.perf_counter()
        if ag is not None and hasattr(ag, "seconds"):
            c0 = ag.seconds + rs.seconds
        out = model(x[:, :-1])
        loss = nn.functional.cross_entropy(out.float().reshape(-1, vocab), x[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        sync()
        dt = time.perf_counter() - t0
        comm_s = (ag.seconds + rs.seconds - c0) if hasattr(ag, "seconds") else None
        losses.append(float(loss.detach().cpu()))
        steps.append({"step_s": dt, "comm_s": comm_s})
    dist.barrier()
    res = {"rank": rank, "losses": losses, "steps": steps,
           "params": sum(p.numel() for p in model.parameters())}
    with open(os.path.join(args.out, f"{mode}-{size}-{rank}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


# -------------------------------------------------------------- launcher ----
def launch(args, mode: str, n: int) -> dict:
    port = free_port()
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS=str(
                       max(1, (os.cpu_count() or n) // n)))
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--mode", mode,
               "--steps", str(args.steps), "--out", args.out, "--dim", str(args.dim),
               "--layers", str(args.layers)] + (["--spread-gpus"] if args.spread_gpus else [])
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT))
    t0, outs, rcs = time.time(), [], []
    for p in procs:
        try:
            o, _ = p.communicate(timeout=max(30, args.timeout - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            o, _ = p.communicate()
        outs.append(o.decode(errors="replace"))
        rcs.append(p.returncode)
    if any(rcs):
        tail = "\n".join(o[-1500:] for o, rc in zip(outs, rcs) if rc)
        return {"ok": False, "error": f"exit codes {rcs}:\n{tail}"}
    ranks = []
    for r in range(n):
        with open(os.path.join(args.out, f"{mode}-{n}-{r}.json")) as f:
            ranks.append(json.load(f))
    return {"ok": True, "ranks": ranks}


def rel_diff(a: dict, b: dict) -> float:
    worst = 0.0
    for ra, rb in zip(a["ranks"], b["ranks"]):
        for x, y in zip(ra["losses"], rb["losses"]):
            worst = max(worst, abs(x - y) / max(abs(y), 1e-30))
    return worst


def split(res: dict) -> tuple:
    """Mean step and communication seconds per step over ranks, first step left out."""
    st = [s for r in res["ranks"] for s in r["steps"][1:]]
    step = sum(s["step_s"] for s in st) / len(st)
    comm = [s["comm_s"] for s in st if s["comm_s"] is not None]
    return step, (sum(comm) / len(comm) if comm else None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--mode", default="gloo")
    ap.add_argument("--ranks", default="4,8")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("--spread-gpus", action="store_true",
                    help="ofccl-cuda: rank r on GPU r mod the GPU count (default: all on GPU 0)")
    ap.add_argument("--modes", default="", help="comma-separated subset of the runs")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default="fsdp2-out")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.worker:
        worker(args)
        return
    import torch
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, model dim {args.dim} x "
          f"{args.layers} layers, {args.steps} steps", flush=True)
    summary = {"torch": torch.__version__, "runs": {}}
    for n in [int(x) for x in args.ranks.split(",")]:
        modes = ["gloo", "ofccl-hooks", "ofccl-backend", "gloo-bf16", "ofccl-bf16",
                 "gloo-premul-ref", "ofccl-premul", "gloo-timed", "ofccl-timed"]
        if args.cuda:
            modes.append("ofccl-cuda")
        if args.modes:
            modes = [m for m in args.modes.split(",") if m]
        res = {}
        for m in modes:
            t0 = time.time()
            res[m] = launch(args, m, n)
            ok = "ok" if res[m]["ok"] else "FAILED"
            print(f"  {n} ranks {m:16s} {ok} ({time.time() - t0:.0f} s)", flush=True)
            if not res[m]["ok"]:
                print(res[m]["error"], flush=True)
        ref_of = {"ofccl-hooks": "gloo", "ofccl-backend": "gloo", "ofccl-bf16": "gloo-bf16",
                  "ofccl-premul": "gloo-premul-ref", "gloo-timed": "gloo",
                  "ofccl-timed": "gloo", "ofccl-cuda": "gloo"}
        print(f"\n{n} ranks: loss parity (max relative difference over ranks and steps)")
        print(f"  {'run':16s} {'against':16s} {'max rel diff':>12s}  first/last loss (rank 0)")
        rows = {}
        for m, ref in ref_of.items():
            if m not in res or not res[m]["ok"] or not res[ref]["ok"]:
                continue
            d = rel_diff(res[m], res[ref])
            l0 = res[m]["ranks"][0]["losses"]
            rows[m] = {"against": ref, "max_rel_diff": d, "losses_rank0": l0}
            print(f"  {m:16s} {ref:16s} {d:12.2e}  {l0[0]:.6f} / {l0[-1]:.6f}")
        timing = {}
        for m in ["gloo-timed", "ofccl-timed", "gloo", "ofccl-hooks", "ofccl-backend"]:
            if m in res and res[m]["ok"]:
                timing[m] = split(res[m])
        print(f"\n{n} ranks: step time (mean of steps 2..{args.steps}, over ranks)")
        for m, (step, comm) in timing.items():
            extra = f"  communication {comm * 1e3:8.2f} ms  rest {(step - comm) * 1e3:8.2f} ms" \
                if comm is not None else ""
            print(f"  {m:16s} step {step * 1e3:8.2f} ms{extra}")
        if "gloo-timed" in timing and "ofccl-timed" in timing:
            g, o = timing["gloo-timed"][1], timing["ofccl-timed"][1]
            print(f"  communication per step: gloo / ofccl = {g / o:.2f}x")
        summary["runs"][str(n)] = {"parity": rows, "timing": timing,
                                   "failed": {m: r["error"][-800:] for m, r in res.items()
                                              if not r["ok"]}}
        print(flush=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()

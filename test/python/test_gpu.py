"""CUDA tensors through the package: all-gather, reduce-scatter and broadcast
on the library's GPU path, and the weight-sync engine on GPU buckets (symmetric pool tensors from the FSDP2 hook's allocate(), and plain
CUDA tensors), Work.wait() as a stream wait, every element checked against
what each rank computes itself. One process per GPU (ranks.py); skipped, with
the reason, where torch sees fewer than two GPUs."""

import os

import pytest

import ranks

torch = pytest.importorskip("torch")
NGPU = torch.cuda.device_count() if torch.cuda.is_available() else 0
# OFCCL_TEST_GPU_SHARED=1: ranks share the GPUs there are (rank % GPUs), so
# one GPU runs the tests' logic (CUDA IPC within one GPU).
SHARED = bool(os.environ.get("OFCCL_TEST_GPU_SHARED")) and NGPU >= 1
pytestmark = pytest.mark.skipif(NGPU < 2 and not SHARED,
                                reason=f"{NGPU} CUDA device(s) here, 2 needed")
RANKS = sorted({2, 4 if SHARED else min(NGPU, 4)})


def _expected(rank, n, dtype):
    g = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(n, generator=g).to(dtype)


def _setup(settings):
    import ofccl
    rank = int(settings["BOOT_RANK"])
    torch.cuda.set_device(rank % NGPU)
    ctx = ofccl.Context(settings)
    return rank, ctx, ctx.world()


def gather(settings):
    from ofccl import torch_fsdp
    from ofccl._torchcoll import Collectives
    rank, ctx, comm = _setup(settings)
    coll, hook = Collectives(comm), torch_fsdp.AllGather(comm)
    bad = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64):
        for n in (0, 1, 1000, 65536 + 3):
            inp = _expected(rank, n, dtype).cuda()
            for pooled in (True, False):
                out = (hook.allocate((n * comm.size,), dtype=dtype, device=torch.device("cuda"))
                       if pooled else torch.full((n * comm.size,), 7, dtype=dtype,
                                                 device="cuda"))
                side = torch.cuda.Stream()
                with torch.cuda.stream(side):  # on a stream of the caller's
                    work = coll.all_gather(out, inp)
                work.wait()  # the current stream waits; the host goes on
                got = out.cpu()
                for r in range(comm.size):
                    want = _expected(r, n, dtype)
                    if not torch.equal(got[r * n:(r + 1) * n], want):
                        bad.append(f"{dtype} n={n} pooled={pooled} rank {r}")
                del out
    # In place, as FSDP2 does it, through the hook.
    n = 4096
    out = hook.allocate((n * comm.size,), dtype=torch.bfloat16, device=torch.device("cuda"))
    out[rank * n:(rank + 1) * n].copy_(_expected(rank, n, torch.bfloat16))
    work = hook(out, out[rank * n:(rank + 1) * n], None, async_op=True)
    work.wait()
    got = out.cpu()
    for r in range(comm.size):
        if not torch.equal(got[r * n:(r + 1) * n], _expected(r, n, torch.bfloat16)):
            bad.append(f"FSDP2 hook in place, rank {r}")
    del out, work
    torch.cuda.synchronize()
    coll.close()
    comm.close()
    ctx.close()
    return bad


gather.no_comm = True


def _replay(blocks, me, op, dtype, scalar):
    """The documented order: own block first, then the others in rank order,
    in f32 (f64 for f64), each step rounded; the average divides at the end."""
    acc_t = torch.float64 if dtype == torch.float64 else torch.float32
    c = torch.tensor(scalar, dtype=acc_t)
    order = [me] + [p for p in range(len(blocks)) if p != me]
    acc = None
    for p in order:
        x = blocks[p].to(acc_t)
        x = x * c if op == "premul" else x
        acc = x if acc is None else acc + x
    if op == "avg":
        acc = acc / len(blocks)
    return acc.to(dtype)


def rscatter(settings):
    import ofccl
    from ofccl import torch_fsdp
    from ofccl._torchcoll import Collectives
    rank, ctx, comm = _setup(settings)
    coll, hook = Collectives(comm), torch_fsdp.ReduceScatter(comm)
    n = comm.size
    ops = {"sum": (ofccl.Op.SUM, 1.0), "avg": (ofccl.Op.AVG, 1.0),
           "premul": (ofccl.Op.premul_sum(0.25), 0.25)}
    bad = []
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        for count in (0, 1, 1000, 65536 + 3):
            blocks = [_expected(r, count * n, dtype) for r in range(n)]
            for name, (op, scalar) in ops.items():
                want = _replay([b[rank * count:(rank + 1) * count] for b in blocks], rank, name,
                               dtype, scalar)
                for where in ("plain", "pool", "in place"):
                    if where == "plain":
                        inp = blocks[rank].cuda()
                    else:
                        inp = hook.allocate((count * n,), dtype=dtype, device=torch.device("cuda"))
                        inp.copy_(blocks[rank])
                    out = (inp[rank * count:(rank + 1) * count] if where == "in place"
                           else torch.full((count,), 7, dtype=dtype, device="cuda"))
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):  # on a stream of the caller's
                        work = coll.reduce_scatter(out, inp, op)
                    work.wait()  # the current stream waits; the host goes on
                    got = out.cpu()
                    if not torch.equal(got.view(torch.uint8), want.view(torch.uint8)):
                        i = int((got != want).nonzero()[0]) if count else 0
                        bad.append(f"{dtype} count={count} {name} {where}: element {i} is "
                                   f"{got[i].item()}, {want[i].item()} expected")
                    del inp, out
    # Through the FSDP2 hook, AVG as FSDP2 asks for it.
    count = 4096
    inp = hook.allocate((count * n,), dtype=torch.float32, device=torch.device("cuda"))
    blocks = [_expected(r, count * n, torch.float32) for r in range(n)]
    inp.copy_(blocks[rank])
    out = torch.empty(count, dtype=torch.float32, device="cuda")
    hook(out, inp, None, op=torch.distributed.ReduceOp.AVG, async_op=True).wait()
    want = _replay([b[rank * count:(rank + 1) * count] for b in blocks], rank, "avg",
                   torch.float32, 1.0)
    if not torch.equal(out.cpu(), want):
        bad.append("FSDP2 hook, AVG")
    del inp, out
    torch.cuda.synchronize()
    coll.close()
    comm.close()
    ctx.close()
    return bad


rscatter.no_comm = True


def backend(settings):
    """The torch.distributed backend on CUDA tensors: reduce_scatter_tensor and
    all_reduce (a size that divides by the ranks, and one that does not: the
    padded copy) take the GPU path; each element against the replay of the
    documented order (the owner of an element's block first)."""
    import torch.distributed as dist
    import ofccl.torch  # noqa: F401  (registers the backend)
    rank, size = int(settings["BOOT_RANK"]), int(settings["BOOT_SIZE"])
    torch.cuda.set_device(rank % NGPU)
    port = settings["BOOT_ROOT"].rsplit(":", 1)[1]
    dist.init_process_group("ofccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)
    bad = []
    count = 5000
    blocks = [_expected(r, count * size, torch.float32) for r in range(size)]
    for name, op in (("sum", dist.ReduceOp.SUM), ("avg", dist.ReduceOp.AVG)):
        out = torch.full((count,), 7.0, device="cuda")
        dist.reduce_scatter_tensor(out, blocks[rank].cuda(), op=op)
        want = _replay([b[rank * count:(rank + 1) * count] for b in blocks], rank, name,
                       torch.float32, 1.0)
        if not torch.equal(out.cpu(), want):
            bad.append(f"reduce_scatter_tensor {name}")
    for n in (count * size, count * size + 3):
        chunk = -(-n // size)
        pads = [torch.cat([_expected(r, n, torch.float32), torch.zeros(chunk * size - n)])
                for r in range(size)]
        t = _expected(rank, n, torch.float32).cuda()
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        want = torch.cat([_replay([p[o * chunk:(o + 1) * chunk] for p in pads], o, "sum",
                                  torch.float32, 1.0) for o in range(size)])[:n]
        if not torch.equal(t.cpu(), want):
            bad.append(f"all_reduce of {n} elements")
    torch.cuda.synchronize()
    dist.destroy_process_group()
    return bad


backend.no_comm = True


def bcast(settings):
    from ofccl._torchcoll import Collectives
    rank, ctx, comm = _setup(settings)
    coll = Collectives(comm)
    bad = []
    for root in range(comm.size):
        for n in (0, 5, 1 << 20):
            want = _expected(root, n, torch.float32)
            t = (want if rank == root else torch.zeros(n)).cuda()
            coll.broadcast(t, root).wait()
            if not torch.equal(t.cpu(), want):
                bad.append(f"root {root} n={n}")
    torch.cuda.synchronize()
    comm.close()
    ctx.close()
    return bad


bcast.no_comm = True


def register(settings):
    """Tensors of torch's caching allocator with expandable segments (virtual
    memory), registered: all-gather in place and broadcast straight into
    them."""
    torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    from ofccl.gpu import collectives_for
    rank, ctx, comm = _setup(settings)
    coll = collectives_for(comm)
    bad = []
    n = (48 << 20) // 4 // comm.size  # 48 MiB in all: over several 20 MiB pieces
    keep = torch.empty(3 << 20, device="cuda")  # the tensor does not start a segment
    out = torch.full((n * comm.size,), -1.0, device="cuda")
    coll.register(out)
    out[rank * n:(rank + 1) * n].copy_(_expected(rank, n, torch.float32))
    coll.all_gather(out, out[rank * n:(rank + 1) * n]).stream_wait()
    got = out.cpu()
    for r in range(comm.size):
        if not torch.equal(got[r * n:(r + 1) * n], _expected(r, n, torch.float32)):
            bad.append(f"registered all-gather, rank {r}")
    for root in range(comm.size):
        want = _expected(100 + root, n * comm.size, torch.float32)
        if rank == root:
            out.copy_(want)
        coll.broadcast(out, root).stream_wait()
        if not torch.equal(out.cpu(), want):
            bad.append(f"registered broadcast from {root}")
    torch.cuda.synchronize()
    coll.deregister(out)
    del keep
    coll.close()
    comm.close()
    ctx.close()
    return bad


register.no_comm = True


def _backend_up(settings, seconds):
    """init_process_group('ofccl') on this rank's GPU, with `seconds` as the
    collectives' deadline; the rank's one-element warm-up all-gather checked."""
    import datetime
    import torch.distributed as dist
    import ofccl.torch  # noqa: F401  (registers the backend)
    rank, size = int(settings["BOOT_RANK"]), int(settings["BOOT_SIZE"])
    torch.cuda.set_device(rank % NGPU)
    port = settings["BOOT_ROOT"].rsplit(":", 1)[1]
    dist.init_process_group("ofccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size, timeout=datetime.timedelta(seconds=seconds))
    out = torch.zeros(size, device="cuda")
    dist.all_gather_into_tensor(out, torch.full((1,), float(rank), device="cuda"))
    if out.tolist() != [float(r) for r in range(size)]:
        raise AssertionError(f"warm-up all-gather gave {out.tolist()}")
    return rank, size, dist


def _ofccl_backend(dist):
    """The default group's ofccl backend: torch 2.x registers it per device
    type, and which types a group lists varies between releases."""
    pg = dist.distributed_c10d._get_default_group()
    for dev in ("cuda", "cpu"):
        try:
            return pg._get_backend(torch.device(dev))
        except RuntimeError:
            pass
    raise AssertionError(f"no backend in the default group ({getattr(pg, '_device_types', '?')})")


def peer_lost(settings, how, coll):
    """The last rank dies (`how`: SIGKILL or _exit(0)), stalls (never posts,
    with a 2 s deadline) or stays while the others abort the group from
    another thread; the others post `coll` on CUDA tensors and then only
    synchronize the device. Their synchronize returns within 1 s of the death
    (of the deadline, of the abort), the collective's Work then says why,
    naming the rank, and so does the next collective; the group shuts down."""
    import signal
    import threading
    import time
    rank, size, dist = _backend_up(settings, 2 if how == "stall" else 60)
    last = size - 1
    n = 1 << 16
    inp = torch.full((n,), float(rank), device="cuda")
    out = torch.zeros(n * size, device="cuda")

    def post():
        if coll == "rs":
            return dist.reduce_scatter_tensor(inp[: n // size], torch.ones(n // size * size,
                                                                          device="cuda"),
                                              async_op=True)
        if coll == "bc":
            return dist.broadcast(inp, 0, async_op=True)
        return dist.all_gather_into_tensor(out, inp, async_op=True)

    dist.barrier()
    torch.cuda.synchronize()
    if rank == last:
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if how == "exit":
            os._exit(0)
        time.sleep(6)  # stalled, or alive while the others abort
        return {"bad": [], "sync_s": 0.0}
    bad = []
    if how == "abort":
        threading.Timer(0.3, _ofccl_backend(dist).abort).start()
    t0 = time.monotonic()
    work = post()
    torch.cuda.synchronize()  # no ofccl call until the stream is released
    waited = time.monotonic() - t0
    limit = {"stall": 3.5, "abort": 1.3}.get(how, 1.0)
    if waited > limit or (how == "stall" and waited < 1.5):
        bad.append(f"synchronize returned after {waited:.3f} s")
    want = {"stall": "Timeout", "abort": "Aborted"}.get(how, "RemoteError")
    exc = work.exception()
    if type(exc).__name__ != want or (how != "abort" and f"rank {last}" not in str(exc)):
        bad.append(f"Work.exception() gave {type(exc).__name__}: {exc}")
    try:
        work.wait()
        bad.append("Work.wait() did not raise")
    except Exception as e:  # noqa: BLE001
        if type(e).__name__ != want:
            bad.append(f"Work.wait() raised {type(e).__name__}: {e}")
    try:
        post()
        bad.append("the next collective did not raise")
    except Exception as e:  # noqa: BLE001
        if type(e).__name__ != want or (how != "abort" and f"rank {last}" not in str(e)):
            bad.append(f"the next collective raised {type(e).__name__}: {e}")
    t1 = time.monotonic()
    dist.destroy_process_group()
    if time.monotonic() - t1 > 5:
        bad.append(f"destroy_process_group took {time.monotonic() - t1:.1f} s")
    return {"bad": bad, "sync_s": round(waited, 4)}


peer_lost.no_comm = True


@pytest.mark.parametrize("how,coll", [("kill", "ag"), ("kill", "rs"), ("kill", "bc"),
                                      ("exit", "ag"), ("exit", "rs"), ("exit", "bc"),
                                      ("stall", "ag"), ("abort", "ag")])
def test_peer_lost(how, coll):
    """Nothing hangs a torch user whose peer dies or stalls (docs/reliability.md)."""
    res = ranks.run(3, __file__, "peer_lost", how, coll, settings={"PROVIDER": "local"},
                    timeout=120, expect_fail=True)
    for r, got in enumerate(res[:-1]):
        assert "bad" in got, f"rank {r}: {got}"
        print(f"{how} {coll}: rank {r} synchronize returned after {got['sync_s']} s")
        assert got["bad"] == [], f"{how} {coll}, rank {r}: {got['bad']}"


@pytest.mark.parametrize("nranks", RANKS)
@pytest.mark.parametrize("scenario", ["register", "gather", "bcast", "rscatter", "backend"])
def test_gpu(scenario, nranks):
    for r, bad in enumerate(ranks.run(nranks, __file__, scenario, settings={"PROVIDER": "local"},
                                      timeout=300)):
        assert bad == [], f"{scenario}, rank {r}: {bad}"


def test_weight_sync_gpu():
    """The weight-sync engine with device="cuda": 2 trainer and 2 rollout
    processes (separately launched groups), CUDA tensors in and out, byte for
    byte (test_weight_sync.py's scenario)."""
    import test_weight_sync
    test_weight_sync.two_groups_sync("cuda")

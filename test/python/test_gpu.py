"""CUDA tensors through the package: all-gather and broadcast on the library's
GPU path (symmetric pool tensors from the FSDP2 hook's allocate(), and plain
CUDA tensors), Work.wait() as a stream wait, every element checked against
what each rank computes itself. One process per GPU (ranks.py); skipped, with
the reason, where torch sees fewer than two GPUs."""

import pytest

import ranks

torch = pytest.importorskip("torch")
NGPU = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = pytest.mark.skipif(NGPU < 2, reason=f"{NGPU} CUDA device(s) here, 2 needed")


def _expected(rank, n, dtype):
    g = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(n, generator=g).to(dtype)


def _setup(settings):
    import ofccl
    rank = int(settings["BOOT_RANK"])
    torch.cuda.set_device(rank)
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


@pytest.mark.parametrize("nranks", sorted({2, min(NGPU, 4)}))
def test_register(nranks):
    for r, bad in enumerate(ranks.run(nranks, __file__, "register",
                                      settings={"PROVIDER": "local"}, timeout=300)):
        assert bad == [], f"rank {r}: {bad}"


@pytest.mark.parametrize("nranks", sorted({2, min(NGPU, 4)}))
def test_gather(nranks):
    for r, bad in enumerate(ranks.run(nranks, __file__, "gather", settings={"PROVIDER": "local"},
                                      timeout=300)):
        assert bad == [], f"rank {r}: {bad}"


@pytest.mark.parametrize("nranks", sorted({2, min(NGPU, 4)}))
def test_broadcast(nranks):
    for r, bad in enumerate(ranks.run(nranks, __file__, "bcast", settings={"PROVIDER": "local"},
                                      timeout=300)):
        assert bad == [], f"rank {r}: {bad}"

"""Device staging: the chunk pipeline that moves CUDA tensors through pinned
ofccl memory, run on CPU tensors with synchronous copies (the chunk arithmetic,
in-place all-gather, strided reduce-scatter input), and on real CUDA tensors
through the hooks and the backend where a GPU is present."""

import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402
import ranks  # noqa: E402


def scenario_pipeline(comm, chunk_bytes):
    from ofccl import _staging
    from ofccl.comm import Op
    rank, size = comm.rank, comm.size
    bufs, eng = _staging.HostBuffers(comm), _staging.SyncEngine()
    before = comm.ctx.stats()["staged_bytes"]
    for n in (1, 5, 1000, 4099):
        out = torch.zeros(size * n, dtype=torch.float32)
        inp = out.narrow(0, rank * n, n)  # in place, as FSDP does
        inp.copy_(torch.from_numpy(oracle.values(rank, n)))
        _staging.all_gather(comm, bufs, eng, out, inp, chunk_bytes=chunk_bytes)
        want = np.concatenate([oracle.values(r, n) for r in range(size)])
        oracle.assert_close(out.double().numpy(), want, "float32", f"staged ag n={n}")
        for dt, name in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16")):
            full = [oracle.values(r, size * n, salt=8) for r in range(size)]
            inp = torch.from_numpy(full[rank]).to(dt)
            out = torch.zeros(n, dtype=dt)
            _staging.reduce_scatter(comm, bufs, eng, out, inp, Op.AVG, chunk_bytes=chunk_bytes)
            want = oracle.reduce_ref([f[rank * n:(rank + 1) * n] for f in full], "avg")
            oracle.assert_close(out.double().numpy(), want, name, f"staged rs n={n} {name}")
    for blk in bufs.blocks.values():  # staging is ofccl memory: the library copies nothing
        assert comm.ctx.owns(blk)
    assert comm.ctx.stats()["staged_bytes"] == before
    del bufs
    return "ok"


def scenario_cuda(comm):
    import ofccl.torch as ot
    rank, size, n = comm.rank, comm.size, (3 << 20) + 7  # several 4 MiB chunks
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dev = torch.device("cuda")
    ag, rs = ot.AllGather(comm), ot.ReduceScatter(comm)
    out = ag.allocate((size * n,), dtype=torch.bfloat16, device=dev)
    assert out.is_cuda
    inp = out.narrow(0, rank * n, n)
    inp.fill_(rank + 1)
    ag(out, inp, None)
    want = torch.arange(1, size + 1, device=dev).repeat_interleave(n).to(torch.bfloat16)
    assert torch.equal(out, want)
    full = torch.full((size * n,), float(rank + 1), device=dev)
    red = torch.empty(n, device=dev)
    work = rs(red, full, None, op=torch.distributed.ReduceOp.SUM, async_op=True)
    work.wait()  # the current stream now waits for the copies
    assert torch.all(red == size * (size + 1) / 2).item()
    return "ok"


@pytest.mark.parametrize("n", [1, 2, 3])
def test_chunk_pipeline_on_cpu(n):
    # 64-byte chunks: many chunks, more than the 4 kept in flight
    assert ranks.run(n, __file__, "scenario_pipeline", 64) == ["ok"] * n


def test_chunk_pipeline_one_chunk():
    assert ranks.run(2, __file__, "scenario_pipeline", 1 << 30) == ["ok"] * 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the staged CUDA "
                    "path runs where a GPU is present")
def test_cuda_tensors_through_the_hooks():
    assert ranks.run(2, __file__, "scenario_cuda", timeout=240) == ["ok"] * 2

"""The 'ofccl' torch.distributed backend at 1-4 ranks: init_process_group, every
supported collective against a numpy oracle (sync and async Work), clear
errors for the rest, and the group still working after them."""

import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402
import ranks  # noqa: E402


def _init(settings):
    import torch.distributed as dist
    import ofccl.torch  # registers the backend
    rank, size = settings["BOOT_RANK"], settings["BOOT_SIZE"]
    port = settings["BOOT_ROOT"].rsplit(":", 1)[1]
    dist.init_process_group("ofccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)
    assert dist.get_backend() == "ofccl" and dist.get_rank() == rank
    return dist, rank, size


def _gather_into(dist, out, inp, **kw):
    fn = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
    return fn(out, inp, **kw)


def _reduce_scatter_tensor(dist, out, inp, **kw):
    fn = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
    return fn(out, inp, **kw)


def scenario_collectives(settings):
    import ofccl.torch
    dist, rank, size = _init(settings)
    n = 37
    # all-gather into a tensor, every dtype; int64 travels as bytes
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.uint8,
               torch.int64):
        inp = torch.full((n,), rank + 1).to(dt)
        out = torch.zeros(size * n, dtype=dt)
        _gather_into(dist, out, inp)
        assert torch.equal(out, torch.arange(1, size + 1).repeat_interleave(n).to(dt)), dt
    # the list form
    outs = [torch.zeros(2, 3) for _ in range(size)]
    dist.all_gather(outs, torch.full((2, 3), float(rank)))
    assert all(torch.all(o == r) for r, o in enumerate(outs))
    # reduce-scatter from a tensor: SUM and AVG, against the oracle
    for op, name in ((dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.AVG, "avg")):
        full = [oracle.values(r, size * n, salt=5) for r in range(size)]
        out = torch.zeros(n)
        _reduce_scatter_tensor(dist, out, torch.from_numpy(full[rank]).float(), op=op)
        want = oracle.reduce_ref([f[rank * n:(rank + 1) * n] for f in full], name)
        oracle.assert_close(out.double().numpy(), want, "float32", f"reduce_scatter {name}")
    # the list form
    out = torch.zeros(4)
    dist.reduce_scatter(out, [torch.full((4,), float(r + rank)) for r in range(size)])
    assert torch.all(out == sum(rank + r for r in range(size)))
    # all-reduce: sizes divisible by the ranks or not, non-contiguous, async
    for shape in ((size * 8,), (5, 3), (1,)):
        t = torch.from_numpy(oracle.values(rank, int(np.prod(shape)), salt=6)).float()
        t = t.reshape(shape)
        want = sum(oracle.values(r, int(np.prod(shape)), salt=6) for r in range(size))
        dist.all_reduce(t)
        oracle.assert_close(t.reshape(-1).double().numpy(), want, "float32", f"allreduce {shape}")
    t = torch.ones(6, 4).t()  # non-contiguous
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert torch.allclose(t, torch.ones(4, 6))
    work = dist.all_reduce(torch.ones(10), async_op=True)
    assert work.wait()
    # async all-gather and its future
    out = torch.zeros(size * 3)
    work = _gather_into(dist, out, torch.full((3,), float(rank)), async_op=True)
    fut = work.get_future()
    fut.wait()
    assert torch.equal(out, torch.arange(size).float().repeat_interleave(3))
    # DeviceMesh and FSDP2 find the group by the name torch registered it under
    c10d = dist.distributed_c10d
    names = getattr(getattr(c10d, "_world", None), "pg_names", None)
    if names is not None:
        pg = c10d._get_default_group()
        assert pg.group_name == names[pg], (pg.group_name, names[pg])
    # broadcast from the first and the last rank: every dtype (int64 as bytes),
    # non-contiguous, async
    for root in sorted({0, size - 1}):
        for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.uint8,
                   torch.int64):
            want = torch.from_numpy(oracle.values(root, 53, salt=7)).to(dt)
            t = want.clone() if rank == root else torch.zeros(53, dtype=dt)
            dist.broadcast(t, root)
            assert torch.equal(t, want), (root, dt)
        t = torch.full((4, 6), float(rank)).t()  # non-contiguous: through a copy
        dist.broadcast(t, root)
        assert torch.all(t == root) and t.stride() == (1, 6)
        t = torch.full((1000,), float(rank))
        work = dist.broadcast(t, root, async_op=True)
        assert work.wait() and torch.all(t == root)
    # the coalesced forms FSDP calls on the process group itself
    pg = c10d._get_default_group()
    if not isinstance(pg, ofccl.torch.ProcessGroupOfccl):
        pg = pg._get_backend(torch.device("cpu"))
    ins = [torch.full((n,), float(rank + 1)), torch.full((3,), float(rank), dtype=torch.float64)]
    outs = [torch.zeros(size * n), torch.zeros(size * 3, dtype=torch.float64)]
    pg.allgather_into_tensor_coalesced(outs, ins).wait()
    assert torch.equal(outs[0], torch.arange(1, size + 1).float().repeat_interleave(n))
    assert torch.equal(outs[1], torch.arange(size).double().repeat_interleave(3))
    fulls = [torch.full((size * 2,), float(rank)), torch.ones(size * 5, dtype=torch.bfloat16)]
    outs = [torch.zeros(2), torch.zeros(5, dtype=torch.bfloat16)]
    pg.reduce_scatter_tensor_coalesced(outs, fulls).wait()
    assert torch.all(outs[0] == sum(range(size))) and torch.all(outs[1] == size)
    ts = [torch.full((7,), float(rank)), torch.full((2, 2), 1.0)]
    pg.allreduce_coalesced(ts).wait()
    assert torch.all(ts[0] == sum(range(size))) and torch.all(ts[1] == size)
    dist.barrier()
    dist.destroy_process_group()
    return "ok"


def scenario_unsupported(settings):
    import ofccl
    dist, rank, size = _init(settings)
    t = torch.ones(4)
    errors = {}
    for name, call in (("scatter", lambda: dist.scatter(t, [t] * size if rank == 0 else None)),
                       ("reduce", lambda: dist.reduce(t, 0)),
                       ("max", lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX)),
                       ("int64 sum", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int64)))):
        try:
            call()
            errors[name] = "no error"
        except ofccl.NotSupported as e:
            errors[name] = e.message
    # wrong sizes: a clear InvalidArgument, and the group keeps working
    try:
        _gather_into(dist, torch.zeros(size * 4 + 1), torch.ones(4))
        errors["size"] = "no error"
    except ofccl.InvalidArgument as e:
        errors["size"] = e.message
    out = torch.zeros(size * 4)
    _gather_into(dist, out, torch.ones(4))
    assert torch.all(out == 1)
    dist.destroy_process_group()
    return errors


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_backend_collectives(n):
    assert ranks.run(n, __file__, "scenario_collectives", timeout=240) == ["ok"] * n


def test_backend_unsupported_is_clear():
    res = ranks.run(2, __file__, "scenario_unsupported")
    for errors in res:
        assert "scatter" in errors["scatter"] and "gloo" in errors["scatter"]
        assert "reduce" in errors["reduce"]
        assert "SUM, AVG and PREMUL_SUM" in errors["max"]
        assert "torch.int64" in errors["int64 sum"]
        assert "needs exactly" in errors["size"]


for _name in ("scenario_collectives", "scenario_unsupported"):
    globals()[_name].no_comm = True

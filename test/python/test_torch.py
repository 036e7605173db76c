"""torch tensors through ofccl: every supported dtype against a numpy oracle,
Context.alloc tensors (zero-copy), the FSDP2 hooks called as FSDP calls them,
profiler ranges, and FSDP2 itself where torch is new enough (>= 2.9)."""

import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ofccl  # noqa: E402
import oracle  # noqa: E402
import ranks  # noqa: E402

TORCH = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "float16": torch.float16, "uint8": torch.uint8}


def _t(v, name):
    """float64 values -> torch tensor of dtype `name` (uint8 encoded as the oracle does)."""
    if name == "uint8":
        return torch.from_numpy(oracle.encode(v, "uint8"))
    return torch.from_numpy(v).to(DTYPES[name])


def _back(t, name):
    if name == "uint8":
        return oracle.decode(t.numpy(), "uint8")
    return t.to(torch.float64).numpy()


def scenario_dtypes(comm):
    rank, size, n = comm.rank, comm.size, 1001
    checked = 0
    for name in DTYPES:
        mine = _t(oracle.values(rank, n), name)
        out = comm.all_gather(mine).wait()  # made by the call: a tensor of the same dtype
        assert isinstance(out, torch.Tensor) and out.dtype == DTYPES[name]
        want = np.concatenate([oracle.values(r, n) for r in range(size)])
        oracle.assert_close(_back(out, name), _back(_t(want, name), name), name, f"ag {name}")
        checked += 1
        if name == "uint8":
            with pytest.raises(ofccl.NotSupported):
                comm.reduce_scatter(torch.zeros(size * 4, dtype=torch.uint8)).wait()
            continue
        full = [oracle.values(r, size * n, salt=3) for r in range(size)]
        for op, scalar in (("sum", 1.0), ("avg", 1.0), ("premul", 0.25)):
            o = torch.empty(n, dtype=DTYPES[name])
            cop = ofccl.Op.premul_sum(scalar) if op == "premul" else op
            comm.reduce_scatter(_t(full[rank], name), o, op=cop).wait()
            blocks = [f[rank * n:(rank + 1) * n] for f in full]
            oracle.assert_close(_back(o, name), oracle.reduce_ref(blocks, op, scalar), name,
                                f"rs {op} {name}")
            checked += 1
    return checked


def scenario_alloc_zero_copy(comm):
    ctx, rank, size, n = comm.ctx, comm.rank, comm.size, 4096
    for name in ("float32", "bfloat16", "float16"):
        out = ctx.alloc((size, n), DTYPES[name])
        assert isinstance(out, torch.Tensor) and out.dtype == DTYPES[name]
        assert ctx.owns(out)[0] == out.data_ptr()  # the C side gets this very address
        out[rank] = rank + 1
        before = ctx.stats()["staged_bytes"]
        comm.all_gather(out[rank], out).wait()
        send = ctx.alloc(size * n, DTYPES[name])
        send.fill_(1)
        recv = ctx.alloc(n, DTYPES[name])
        comm.reduce_scatter(send, recv, op="sum").wait()
        assert ctx.stats()["staged_bytes"] == before, "ofccl memory was staged"
        assert torch.all(out.to(torch.float32) == torch.arange(1, size + 1)[:, None])
        assert torch.all(recv.to(torch.float32) == size)
    return "ok"


def _fake_group(comm):
    class G:
        def size(self):
            return comm.size

        def rank(self):
            return comm.rank
    return G()


def scenario_fsdp_hooks(comm):
    """The hooks as foreach_all_gather / foreach_reduce call them: allocate, an in-place
    all-gather of a uint8 (mixed-dtype) bucket, reduce-scatter with AVG, and buffers
    reused from the pool (one allocation per size)."""
    import ofccl.torch as ot
    rank, size, n = comm.rank, comm.size, 300
    ag, rs = ot.AllGather(comm), ot.ReduceScatter(comm)
    group = _fake_group(comm)
    addrs = set()
    for it in range(3):
        out = ag.allocate((n * size,), dtype=torch.uint8, device=torch.device("cpu"))
        assert comm.ctx.owns(out)
        addrs.add(out.data_ptr())
        inp = out.narrow(0, n * rank, n)  # in place, as all_gather_copy_in makes it
        inp.copy_(torch.arange(n, dtype=torch.int64).add(rank + it).remainder(256)
                  .to(torch.uint8))
        assert ag(output_tensor=out, input_tensor=inp, group=group, async_op=False) is None
        for r in range(size):
            want = torch.arange(n).add(r + it).remainder(256).to(torch.uint8)
            assert torch.equal(out[r * n:(r + 1) * n], want)
        del out, inp
    assert len(addrs) == 1, f"allocate did not reuse its buffer: {len(addrs)} addresses"
    rs_in = rs.allocate((n * size,), dtype=torch.float32, device=torch.device("cpu"))
    rs_out = rs.allocate((n,), dtype=torch.float32, device=torch.device("cpu"))
    rs_in.copy_(torch.from_numpy(oracle.values(rank, n * size, salt=4)))
    work = rs(output_tensor=rs_out, input_tensor=rs_in, group=group,
              op=torch.distributed.ReduceOp.AVG, async_op=True)
    assert work.wait()
    want = oracle.reduce_ref([oracle.values(r, n * size, salt=4)[rank * n:(rank + 1) * n]
                              for r in range(size)], "avg")
    oracle.assert_close(rs_out.numpy().astype(np.float64), want, "float32", "fsdp rs avg")
    with pytest.raises(ofccl.NotSupported):
        rs(output_tensor=rs_out, input_tensor=rs_in, group=group, op=torch.distributed.ReduceOp.MAX)
    if TORCH >= (2, 0):  # the factor of PREMUL_SUM is readable from 2.0 on
        op = torch.distributed._make_nccl_premul_sum(0.5)
        rs(output_tensor=rs_out, input_tensor=rs_in, group=group, op=op)
        oracle.assert_close(rs_out.numpy().astype(np.float64), want * size * 0.5, "float32",
                            "fsdp rs premul")
    return "ok"


def scenario_profiler(comm):
    from torch.profiler import ProfilerActivity, profile
    x = torch.ones(256 * comm.size)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        comm.all_gather(torch.ones(256)).wait()
        comm.reduce_scatter(x).wait()
    names = [e.key for e in prof.key_averages()]
    ag = [k for k in names if k.startswith("ofccl::all_gather")]
    rs = [k for k in names if k.startswith("ofccl::reduce_scatter")]
    assert ag == [f"ofccl::all_gather bytes=1024 ranks={comm.size}"], names
    assert rs == [f"ofccl::reduce_scatter bytes={1024 * comm.size} ranks={comm.size}"], names
    return "ok"


def scenario_fsdp2(settings):
    """Two training steps of a small model under fully_shard on the 'ofccl' backend
    with the ofccl hooks, compared with the same steps on one process."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    import ofccl.torch as ot
    rank, size = settings["BOOT_RANK"], settings["BOOT_SIZE"]
    port = settings["BOOT_ROOT"].rsplit(":", 1)[1]
    dist.init_process_group("ofccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)
    from torch.distributed.device_mesh import init_device_mesh
    device = "cuda" if torch.cuda.is_available() else "cpu"  # CUDA: staged through ofccl memory
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    mesh = init_device_mesh(device, (size,))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 33), torch.nn.ReLU(), torch.nn.Linear(33, 8))
    ref = torch.nn.Sequential(torch.nn.Linear(16, 33), torch.nn.ReLU(), torch.nn.Linear(33, 8))
    ref.load_state_dict(model.state_dict())
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.set_custom_all_gather(ot.AllGather())
    model.set_custom_reduce_scatter(ot.ReduceScatter())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    data = torch.randn(size, 4, 16, generator=torch.Generator().manual_seed(1))
    for _ in range(2):
        model(data[rank].to(device)).sum().backward()
        opt.step()
        opt.zero_grad()
        # the reference sees every rank's batch; FSDP averages the gradients
        sum(ref(data[r]).sum() for r in range(size)).div(size).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        full = p.full_tensor()
        assert torch.allclose(full.cpu(), q, atol=1e-5), f"{name} differs after two steps"
    dist.destroy_process_group()
    return "ok"


scenario_fsdp2.no_comm = True


@pytest.mark.parametrize("n", [1, 2, 4])
def test_torch_dtypes_match_numpy(n):
    assert ranks.run(n, __file__, "scenario_dtypes") == [5 + 4 * 3] * n


@pytest.mark.parametrize("n", [1, 3])
def test_alloc_tensors_are_zero_copy(n):
    assert ranks.run(n, __file__, "scenario_alloc_zero_copy") == ["ok"] * n


@pytest.mark.parametrize("n", [1, 2, 3])
def test_fsdp_hooks_as_fsdp_calls_them(n):
    assert ranks.run(n, __file__, "scenario_fsdp_hooks") == ["ok"] * n


def test_profiler_ranges_name_bytes_and_ranks():
    assert ranks.run(2, __file__, "scenario_profiler") == ["ok"] * 2


@pytest.mark.skipif(TORCH < (2, 9), reason=f"FSDP2 custom collectives (set_custom_all_gather) "
                    f"need torch >= 2.9; this is torch {torch.__version__}")
@pytest.mark.parametrize("n", [2, 4])
def test_fsdp2_training_matches_single_process(n):
    assert ranks.run(n, __file__, "scenario_fsdp2", timeout=240) == ["ok"] * n

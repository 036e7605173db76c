"""Every collective of ofccl.Comm at 1-4 ranks against a numpy oracle; zero-copy
on ofccl memory; requests (wait, test, await)."""

import asyncio
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ofccl  # noqa: E402
import oracle  # noqa: E402
import ranks  # noqa: E402

COUNTS = [1, 7, 1000, 70001]  # 70001 f64: past one 512 KiB pipeline chunk
OPS = [("sum", 1.0), ("avg", 1.0), ("premul", 0.5)]


def _op(name, scalar):
    return ofccl.Op.premul_sum(scalar) if name == "premul" else name


def scenario_flat(comm):
    rank, size = comm.rank, comm.size
    checked = 0
    for dtype in oracle.DTYPES:
        for count in COUNTS:
            mine = oracle.encode(oracle.values(rank, count), dtype)
            want = np.concatenate([oracle.values(r, count) for r in range(size)])
            recv = np.full(size * count, 0x5A, dtype=mine.dtype)  # poisoned
            req = comm.all_gather(mine, recv, dtype=dtype)
            assert req.wait() is recv
            oracle.assert_close(oracle.decode(recv, dtype), oracle.decode(
                oracle.encode(want, dtype), dtype), dtype, f"all_gather {dtype} x{count}")
            checked += 1
            if dtype == "uint8":
                continue
            full = [oracle.values(r, size * count, salt=1) for r in range(size)]
            send = oracle.encode(full[rank], dtype)
            for op, scalar in OPS:
                out = np.full(count, 0x5A, dtype=send.dtype)
                comm.reduce_scatter(send, out, op=_op(op, scalar), dtype=dtype).wait()
                blocks = [f[rank * count:(rank + 1) * count] for f in full]
                oracle.assert_close(oracle.decode(out, dtype), oracle.reduce_ref(blocks, op, scalar),
                                    dtype, f"reduce_scatter {op} {dtype} x{count}")
                checked += 1
    return checked


def scenario_inplace_and_alloc(comm):
    """All-gather in place in ofccl memory, outputs made by the call, f32 only."""
    rank, size, n = comm.rank, comm.size, 513
    out = comm.ctx.alloc(size * n, np.float32)
    mine = out[rank * n:(rank + 1) * n]
    mine[:] = oracle.values(rank, n)
    comm.all_gather(mine, out).wait()
    want = np.concatenate([oracle.values(r, n) for r in range(size)])
    oracle.assert_close(out.astype(np.float64), want, "float32", "in-place all_gather")
    gathered = comm.all_gather(oracle.values(rank, 3).astype(np.float32)).wait()
    assert gathered.shape == (3 * size,)
    full = oracle.values(rank, size * 4, salt=2)
    reduced = comm.reduce_scatter(full).wait()  # float64, made by the call
    want = sum(oracle.values(r, size * 4, salt=2)[rank * 4:(rank + 1) * 4] for r in range(size))
    oracle.assert_close(reduced, want, "float64", "reduce_scatter with no recv")
    return "ok"


def scenario_bucket(comm):
    rank, size = comm.rank, comm.size
    counts = [5, 1, 33, 4096, 2]  # uneven, some smaller than the rank count
    for dtype in ("float32", "bfloat16", "float16"):
        pairs, wants = [], []
        for k, c in enumerate(counts):
            off, n = comm.shard_range(c)
            whole = oracle.values(7, c, salt=k)  # the same tensor on every rank
            shard = oracle.encode(whole[off:off + n], dtype)
            full = np.zeros(c, dtype=shard.dtype)
            pairs.append((full, shard))
            wants.append(whole)
        comm.bucket_all_gather(pairs, dtype=dtype).wait()
        for k, ((full, _), want) in enumerate(zip(pairs, wants)):
            oracle.assert_close(oracle.decode(full, dtype), oracle.decode(
                oracle.encode(want, dtype), dtype), dtype, f"bucket all_gather t{k} {dtype}")
        for op, scalar in OPS:
            pairs, wants = [], []
            for k, c in enumerate(counts):
                off, n = comm.shard_range(c)
                full = oracle.encode(oracle.values(rank, c, salt=10 + k), dtype)
                shard = np.zeros(n, dtype=full.dtype)
                pairs.append((full, shard))
                blocks = [oracle.values(r, c, salt=10 + k)[off:off + n] for r in range(size)]
                wants.append(oracle.reduce_ref(blocks, op, scalar))
            comm.bucket_reduce_scatter(pairs, op=_op(op, scalar), dtype=dtype).wait()
            for k, ((_, shard), want) in enumerate(zip(pairs, wants)):
                oracle.assert_close(oracle.decode(shard, dtype), want, dtype,
                                    f"bucket reduce_scatter {op} t{k} {dtype}")
    return "ok"


def scenario_zero_copy(comm):
    """ofccl memory is used where it lies: staged_bytes stays 0 and the array the
    collective wrote is the one at the address ofccl_mem_alloc returned; plain
    numpy memory goes through staging (the C side saw a foreign pointer)."""
    ctx, rank, size, n = comm.ctx, comm.rank, comm.size, 1 << 16
    send = ctx.alloc(size * n, np.float32)
    recv = ctx.alloc(n, np.float32)
    gathered = ctx.alloc(size * n, np.float32)
    assert ctx.owns(send) and ctx.owns(recv) and ctx.owns(gathered)
    assert ofccl.address_of(recv) == ctx.owns(recv)[0]
    send[:] = rank + 1
    gathered[rank * n:(rank + 1) * n] = rank
    before = ctx.stats()["staged_bytes"]
    for _ in range(3):
        req = comm.reduce_scatter(send, recv)
        assert req.wait() is recv
        comm.all_gather(gathered[rank * n:(rank + 1) * n], gathered).wait()
    after = ctx.stats()["staged_bytes"]
    assert after == before, f"ofccl memory was staged: {after - before} bytes"
    assert np.all(recv == size * (size + 1) / 2)
    assert np.all(gathered == np.repeat(np.arange(size, dtype=np.float32), n))
    pool = comm.alloc(size * n, np.float32)  # ofccl_buffer_alloc: never staged either
    pool[rank * n:(rank + 1) * n] = rank
    comm.all_gather(pool[rank * n:(rank + 1) * n], pool).wait()
    assert np.all(pool == np.repeat(np.arange(size, dtype=np.float32), n))
    assert ctx.stats()["staged_bytes"] == after
    del pool
    plain_send = np.ones(size * n, np.float32)
    plain_recv = np.zeros(n, np.float32)
    comm.reduce_scatter(plain_send, plain_recv).wait()
    comm.all_gather(plain_recv, np.zeros(size * n, np.float32)).wait()
    staged = ctx.stats()["staged_bytes"] - after
    if size > 1 and ctx.provider == "local":
        assert staged > 0, "plain numpy memory was not staged on the local transport"
    assert np.all(plain_recv == size)
    return {"staged_plain": staged}


def scenario_requests(comm):
    """Several requests in flight, completed by test() polling, wait() in reverse
    order and await; buffers survive the caller dropping its references."""
    rank, size = comm.rank, comm.size
    sends = [np.full(64, rank + k, np.float32) for k in range(4)]
    reqs = [comm.all_gather(s, np.zeros(64 * size, np.float32)) for s in sends]
    del sends  # the requests keep the buffers alive
    polls = 0
    while not reqs[0].test():
        polls += 1
        assert polls < 10_000_000
    for k in (3, 2, 1):
        out = reqs[k].wait()
        assert np.all(out.reshape(size, 64) == (np.arange(size) + k)[:, None])
    assert all(r.done for r in reqs)

    async def both():
        a = comm.all_gather(np.full(8, rank, np.float64))
        b = comm.reduce_scatter(np.ones(8 * size, np.float32))
        return await asyncio.gather(a, b)

    ga, gb = asyncio.run(both())
    assert np.all(ga.reshape(size, 8) == np.arange(size)[:, None])
    assert np.all(gb == size)
    comm.barrier()
    text = comm.ctx.dump_state()  # everything was waited: nothing pending
    assert f"rank {rank} of {size}" in text and "0 pending request(s)" in text, text
    return polls


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_flat_collectives_match_numpy(n):
    checked = ranks.run(n, __file__, "scenario_flat", timeout=240)
    assert checked == [len(oracle.DTYPES) * len(COUNTS) + 4 * len(COUNTS) * len(OPS)] * n


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_bucket_collectives_match_numpy(n):
    assert ranks.run(n, __file__, "scenario_bucket") == ["ok"] * n


@pytest.mark.parametrize("n", [1, 3])
def test_in_place_and_made_outputs(n):
    assert ranks.run(n, __file__, "scenario_inplace_and_alloc") == ["ok"] * n


@pytest.mark.parametrize("prov", ["local", "tcp"])
def test_zero_copy_on_ofccl_memory(prov):
    res = ranks.run(2, __file__, "scenario_zero_copy", settings={"PROVIDER": prov})
    assert len(res) == 2


def test_requests_wait_test_await():
    res = ranks.run(3, __file__, "scenario_requests")
    assert len(res) == 3 and all(isinstance(p, int) for p in res)


def test_tcp_provider_flat():
    assert ranks.run(2, __file__, "scenario_inplace_and_alloc",
                     settings={"PROVIDER": "tcp"}) == ["ok"] * 2


def scenario_ctypes_only(comm):
    """The same collectives with the C hot path switched off: every call through
    ctypes and the Python Request (what an install without a compiler gets)."""
    from ofccl import _lib
    _lib._fast_mod = None
    assert scenario_requests(comm) >= 0
    return scenario_flat(comm)


def test_ctypes_path_without_the_extension():
    res = ranks.run(2, __file__, "scenario_ctypes_only", timeout=240)
    assert res == [len(oracle.DTYPES) * len(COUNTS) + 4 * len(COUNTS) * len(OPS)] * 2

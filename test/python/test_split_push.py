"""Comm.split, broadcast, bucket_broadcast and weight push (PushPlan) from
Python at 1-4 ranks, every dtype including uint8, against numpy references;
bad input raises ofccl.Error subclasses and leaves the communicator usable
where the C contract says so."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ofccl  # noqa: E402
import oracle  # noqa: E402
import ranks  # noqa: E402
from test_errors import _raises  # noqa: E402

COUNTS = [0, 5, 3000]
# Generous deadlines: on a loaded machine starting a rank can take many seconds.
SLOW = {"settings": {"BOOT_TIMEOUT_MS": 120000, "TIMEOUT_MS": 60000}, "timeout": 200}


def _root_data(root, count, dtype, salt):
    return oracle.encode(oracle.values(root, count, salt=salt), dtype)


def _check_bcast(comm, label, salt):
    """Broadcast from every root of `comm`, every dtype and count, byte-exact."""
    done = 0
    for root in range(comm.size):
        for dtype in oracle.DTYPES:
            for count in COUNTS + ([70001] if dtype == "float32" else []):
                want = _root_data(root, count, dtype, salt)
                buf = want.copy() if comm.rank == root else np.full_like(want, 0x5A)
                assert comm.broadcast(buf, root, dtype=dtype).wait() is buf
                assert np.array_equal(buf, want), f"{label}: bcast root {root} {dtype} x{count}"
                done += 1
    return done


def scenario_split_broadcast(comm):
    rank, size = comm.rank, comm.size
    out = {"world": _check_bcast(comm, "world", 1)}
    # by parity, ranked by descending rank: both halves broadcast at once
    half = comm.split(rank % 2, -rank)
    members = [r for r in range(size) if r % 2 == rank % 2][::-1]
    assert (half.size, half.rank) == (len(members), members.index(rank))
    out["half"] = _check_bcast(half, f"half {rank % 2}", 2 + rank % 2)
    # a rank passing UNDEFINED gets None; the others a communicator without it
    sub = comm.split(ofccl.UNDEFINED if rank == 0 else 7, rank)
    if rank == 0:
        assert sub is None
    else:
        assert (sub.size, sub.rank) == (size - 1, rank - 1)
        got = sub.all_gather(np.full(3, rank, np.uint8)).wait()
        assert np.array_equal(got, np.repeat(np.arange(1, size, dtype=np.uint8), 3))
        sub.close()
    # a bucket of tensors of one dtype, whole on every rank, from the last rank
    root = size - 1
    for dtype in oracle.DTYPES:
        wants = [_root_data(root, n, dtype, 10 + i) for i, n in enumerate((17, 0, 4099))]
        bufs = [w.copy() if rank == root else np.full_like(w, 0x5A) for w in wants]
        # concurrently, on the half, from its rank 0 (world rank members[0])
        hwant = _root_data(members[0], 33, dtype, 20 + rank % 2)
        hbuf = hwant.copy() if half.rank == 0 else np.full_like(hwant, 0x5A)
        half_req = half.bucket_broadcast([hbuf], 0, dtype=dtype)
        comm.bucket_broadcast(bufs, root, dtype=dtype).wait()
        half_req.wait()
        for w, b in zip(wants + [hwant], bufs + [hbuf]):
            assert np.array_equal(w, b), f"bucket_broadcast {dtype}"
    half.close()
    return out


# name, shape, dtype: one larger than a bucket, one empty, a scalar, every dtype
TENSORS = [("a", (40, 30), "float32"), ("b", (7,), "uint8"), ("c", (9000,), "bfloat16"),
           ("d", (), "float64"), ("e", (0, 3), "float16"), ("f", (301,), "float16"),
           ("g", (5, 5), "uint8")]


def _full(t, rnd):
    name, shape, dtype = TENSORS[t]
    n = int(np.prod(shape, dtype=np.int64))
    return oracle.encode(oracle.values(t, n, salt=100 + rnd), dtype).reshape(shape)


def _push_layout(size):
    """(senders, receivers): the first half sends, the rest receive; at 3 ranks
    rank 1 does both; alone, rank 0 does both."""
    if size == 1:
        return [0], [0]
    if size == 3:
        return [0, 1], [1, 2]
    return list(range(size // 2)), list(range(size // 2, size))


def scenario_push(comm):
    rank, size = comm.rank, comm.size
    senders, receivers = _push_layout(size)
    sliced = rank == receivers[-1] and len(receivers) > 1
    slices = None
    if sliced:  # the last receiver takes the second half of every tensor
        counts = [int(np.prod(s, dtype=np.int64)) for _, s, _ in TENSORS]
        slices = [(n // 2, n - n // 2) for n in counts]
    plan = comm.push_plan(TENSORS, senders, receivers, bucket_bytes=4096, slices=slices)
    assert plan.nbuckets >= 3 and plan.is_sender == (rank in senders)
    checked = 0
    for rnd in range(2):
        fulls = [_full(t, rnd) for t in range(len(TENSORS))]
        shards = [plan.shard_of(t, f) for t, f in enumerate(fulls)] if plan.is_sender else None
        if plan.is_sender:  # a view of the caller's tensor: nothing copied
            s0 = plan.shard_range(2)[0]
            assert ofccl.address_of(shards[2]) == ofccl.address_of(fulls[2]) + 2 * s0
        own = [np.empty(plan.max_bucket_bytes, np.uint8) for _ in range(2)] \
            if rnd == 1 and plan.is_receiver else None
        seen = set()
        for k, buf in plan.push(shards, own):
            # double-buffered: bucket k + 1 is on its way while k is read
            assert sorted(plan.in_flight) == list(range(k + 1, min(k + 2, plan.nbuckets)))
            if not plan.is_receiver:
                assert buf is None
                continue
            for t in plan.bucket_tensors(k):
                want = fulls[t].reshape(-1)
                if sliced:
                    want = want[slices[t][0]:slices[t][0] + slices[t][1]]
                else:
                    want = want.reshape(TENSORS[t][1])
                got = plan.view(t, buf)
                assert got.shape == want.shape and np.array_equal(got.view(want.dtype), want), \
                    f"round {rnd} bucket {k} tensor {TENSORS[t][0]}"
                seen.add(t)
                checked += 1
            if own is not None:
                assert buf is own[k % 2]
            del buf
        assert not plan.is_receiver or seen == set(range(len(TENSORS)))
    plan.close()
    return checked


def scenario_split_broadcast_push(comm):
    out = scenario_split_broadcast(comm)  # one launch for both: process start-up dominates
    out["push"] = scenario_push(comm)
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_split_broadcast_push_match_numpy(n):
    res = ranks.run(n, __file__, "scenario_split_broadcast_push", **SLOW)
    _, receivers = _push_layout(n)
    for r, out in enumerate(res):
        assert out["world"] > 0 and out["half"] > 0
        assert out["push"] == (2 * len(TENSORS) if r in receivers else 0)


def scenario_bad_input(comm):
    """Errors found before anything is posted leave the communicator in step;
    disagreements found on the wire fail every rank (on a split-off
    communicator, after which the parent still works)."""
    rank, size = comm.rank, comm.size
    x = np.zeros(8, np.float32)
    _raises(ofccl.InvalidArgument, lambda: comm.broadcast(np.zeros(4, np.int32), 0), "int32")
    _raises(ofccl.InvalidArgument, lambda: comm.broadcast(np.zeros((4, 4), np.float32)[:, 1], 0),
            "C-contiguous")
    _raises(ofccl.InvalidArgument, lambda: comm.broadcast(x, size), "root")
    _raises(ofccl.InvalidArgument, lambda: comm.bucket_broadcast([x, np.zeros(2)], 0), "float")
    _raises(ofccl.NotSupported, lambda: comm.reduce_scatter(np.ones(size * 4, np.uint8),
                                                            np.zeros(4, np.uint8)), "u8")
    u8 = np.zeros(size * 4, np.uint8)
    _raises(ofccl.NotSupported, lambda: comm.bucket_reduce_scatter([(u8, u8[:4])]), "u8")
    # push: wrong dtype, too few elements, a receive buffer too small
    plan = comm.push_plan(TENSORS[:3], [0], list(range(size)), bucket_bytes=1 << 20)
    if rank == 0:
        good = [plan.shard_of(t, _full(t, 0)) for t in range(3)]
        _raises(ofccl.InvalidArgument, lambda: plan.post(0, [good[0][:-1]] + good[1:]),
                "owns 1200")
        _raises(ofccl.InvalidArgument,
                lambda: plan.post(0, [good[0].astype(np.float64)] + good[1:]), "element sizes")
        _raises(ofccl.InvalidArgument, lambda: plan.shard_of(0, np.zeros(3, np.float32)), "1200")
    else:
        _raises(ofccl.InvalidArgument, lambda: plan.post(0, None, np.empty(16, np.uint8)),
                "receive buffer")
    comm.barrier()
    x[:] = rank
    comm.broadcast(x, size - 1).wait()  # still usable
    assert np.all(x == size - 1)
    for k, _ in plan.push([plan.shard_of(t, _full(t, 0)) for t in range(3)] if rank == 0
                          else None):
        pass
    del _  # the loop's last buffer view keeps the plan's buffer alive
    plan.close()
    if size == 1:
        return "ok"
    # a root whose count differs from the others'; a plan that differs: Mismatch
    # on every rank (a rank that saw the difference names the field)
    sub = comm.split(0, rank)
    y = np.zeros(4 if rank == 0 else 6, np.float32)
    msg = _raises(ofccl.Mismatch, lambda: sub.broadcast(y, 0).wait())
    sub.close()
    sub = comm.split(0, rank)
    _raises(ofccl.Mismatch, lambda: sub.push_plan(TENSORS, [0], list(range(1, size)),
                                                  bucket_bytes=4096 if rank else 8192),
            "bucket_bytes")
    sub.close()
    comm.broadcast(x, 0).wait()
    return msg


@pytest.mark.parametrize("n", [1, 3])
def test_bad_input_raises_and_comm_stays_usable(n):
    msgs = ranks.run(n, __file__, "scenario_bad_input", **SLOW)
    assert msgs == ["ok"] if n == 1 else any("count" in m for m in msgs), msgs

"""Bad input from Python raises a clear ofccl.Error subclass carrying the C code
and message, and the communicator stays usable where the C contract says so."""

import array
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ofccl  # noqa: E402
import ranks  # noqa: E402


def _raises(cls, fn, *words):
    try:
        fn()
    except cls as e:
        for w in words:
            assert w in e.message, f"{cls.__name__}: {w!r} not in {e.message!r}"
        assert e.code == cls.code and str(e).startswith(f"[{cls.name} {cls.code}]")
        return e.message
    raise AssertionError(f"{cls.__name__} not raised")


def scenario_local_errors(comm):
    """Errors found before anything is posted: every rank sees the same ones, so
    the communicator stays in step and a correct collective follows each."""
    size, n = comm.size, 8
    x = np.ones(n, np.float32)
    checks = [
        (lambda: comm.all_gather(np.ones(n, np.int32)), "int32"),
        (lambda: comm.all_gather(x, np.zeros(size * n, np.float64)), "float32", "float64"),
        (lambda: comm.all_gather(np.ones((n, 2), np.float32)[:, 0]), "not C-contiguous"),
        (lambda: comm.all_gather(x, np.zeros(size * n - 1, np.float32)), "needs exactly"),
        (lambda: comm.reduce_scatter(np.ones(size * n + 1, np.float32)), "not a multiple"),
        (lambda: comm.reduce_scatter(np.ones(size * n, np.float32), np.zeros(n + 1, np.float32)),
         "needs exactly"),
        (lambda: comm.all_gather(x, _readonly(size * n)), "read-only"),
        (lambda: comm.reduce_scatter(np.ones(size, np.float32), op="max"), "unknown reduction"),
        (lambda: comm.all_gather(object()), "exposes no buffer"),
        (lambda: comm.all_gather(array.array("i", [1, 2])), "array", "dtype="),
        (lambda: comm.bucket_all_gather([(np.zeros(5, np.float32), np.zeros(99, np.float32))]),
         "shard", "shard_range"),
        (lambda: comm.all_gather(np.ones(4, np.float32), dtype="bf16"), "element sizes differ"),
    ]
    for i, (fn, *words) in enumerate(checks):
        try:
            _raises(ofccl.InvalidArgument, fn, *words)
        except AssertionError as e:
            raise AssertionError(f"check {i}: {e}") from None
        out = comm.all_gather(x).wait()
        assert np.all(out == 1)
    # decided by the library: uint8 is never reduced; the C message comes through
    msg = _raises(ofccl.NotSupported, lambda: comm.reduce_scatter(np.ones(size * 4, np.uint8),
                                                                  np.zeros(4, np.uint8)))
    assert comm.all_gather(x).wait().sum() == size * n
    # raw bytes as bf16 with an explicit dtype work
    raw = bytearray(np.full(4, 0x3F80, np.uint16).tobytes())  # bf16 1.0
    out = bytearray(8 * size)
    comm.all_gather(raw, out, dtype="bf16").wait()
    assert np.all(np.frombuffer(out, np.uint16) == 0x3F80)
    return msg


def _readonly(n):
    a = np.zeros(n, np.float32)
    a.setflags(write=False)
    return a


def scenario_mismatch(comm):
    """Ranks that disagree on the count (found on the wire, after posting): every
    rank gets Mismatch naming both counts; the communicator is then unusable, as
    the C contract says, and a new one from the same context works."""
    size, rank = comm.size, comm.rank
    n = 4 if rank == 0 else 6
    msg = _raises(ofccl.Mismatch, lambda: comm.all_gather(np.ones(n, np.float32)).wait(),
                  "count 6", "count 4")
    _raises(ofccl.Mismatch, lambda: comm.all_gather(np.ones(3, np.float32)), "unusable",
            "destroy it")
    fresh = comm.ctx.world()
    out = fresh.all_gather(np.full(3, rank, np.float32)).wait()
    assert np.all(out.reshape(size, 3) == np.arange(size)[:, None])
    fresh.close()
    return msg


def scenario_closed(comm):
    ctx = comm.ctx
    keep = ctx.alloc(4, np.float32)
    _raises(ofccl.Busy, ctx.close, "communicator")
    c2 = ctx.world()
    c2.close()
    _raises(ofccl.StateError, lambda: c2.all_gather(np.ones(2, np.float32)), "closed")
    del keep
    return "ok"


def scenario_abort(comm):
    comm.barrier()  # every rank done setting up before any rank goes away
    comm.abort()
    _raises(ofccl.Aborted, lambda: comm.all_gather(np.ones(2, np.float32)).wait(), "abort")
    return "ok"


def test_local_errors_leave_the_communicator_usable():
    for msg in ranks.run(2, __file__, "scenario_local_errors"):
        assert msg  # the library's own message for uint8 reduce-scatter


def test_mismatch_across_ranks():
    msgs = ranks.run(2, __file__, "scenario_mismatch")
    assert all(m for m in msgs), msgs


def test_closed_objects():
    assert ranks.run(1, __file__, "scenario_closed") == ["ok"]


def test_abort():
    assert ranks.run(2, __file__, "scenario_abort") == ["ok"] * 2


def test_config_error_names_the_variable():
    msg = _raises(ofccl.ConfigError, lambda: ofccl.Context({"LOG_LEVEL": "loud"}), "LOG_LEVEL")
    assert "warn" in msg  # lists the allowed values


def test_error_classes_mirror_the_c_list():
    for code in range(-1, -18, -1):
        e = ofccl.errors.from_code(code, "m")
        assert isinstance(e, ofccl.Error) and e.code == code
        assert ofccl.strerror(code) != "unknown error"
    assert isinstance(ofccl.Timeout("x"), TimeoutError)
    assert isinstance(ofccl.InvalidArgument("x"), ValueError)


def test_missing_library_is_explained(tmp_path):
    import subprocess
    env = dict(os.environ, OFCCL_LIBRARY=str(tmp_path / "nope.so"))
    p = subprocess.run([sys.executable, "-c", "import ofccl; ofccl.Context()"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "LibraryNotFound" in p.stderr and "OFCCL_LIBRARY" in p.stderr

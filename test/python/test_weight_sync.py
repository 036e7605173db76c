"""The weight-sync engine (ofccl.checkpoint) between two separately launched
groups, 2 trainer ranks and 2 rollout ranks, driven as verl's manager drives a
CheckpointEngine: prepare() on every process, build_topology from their
metadata, init_process_group, then send_weights / receive_weights twice (the
second sync reuses the plan). Ten tensors of seven dtypes in 32 KiB buckets
arrive byte for byte; a trainer whose tensor list differs makes every rank
fail with ofccl.Mismatch; a trainer whose iterator raises mid-sync raises
that, and every other rank RemoteError naming it and the cause; a rollout
consumer that raises mid-sync raises that while the trainers finish."""

import json
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "sync_peer.py")
sys.path.insert(0, HERE)


def _launch(role, n, device):
    """One job: n processes of one group (its own batch of processes)."""
    return [subprocess.Popen([sys.executable, PEER, role, str(r), device], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for r in range(n)]


def _line(p, prefix, deadline):
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            raise AssertionError(f"a process exited before '{prefix}': {p.stderr.read()}")
        if line.startswith(prefix + " "):
            return json.loads(line[len(prefix) + 1:])
    raise AssertionError(f"no '{prefix}' line in time")


def two_groups_sync(device):
    """The scenario above, the engine's buckets on `device` ("cpu", "cuda":
    test_gpu.py runs that one)."""
    from ofccl.checkpoint import OfcclCheckpointEngine, get_engine
    assert get_engine("ofccl") is OfcclCheckpointEngine
    trainers = _launch("trainer", 2, device)
    rollout = _launch("rollout", 2, device)  # the second job, launched on its own
    procs = trainers + rollout
    deadline = time.monotonic() + 200
    try:
        metas = [_line(p, "META", deadline) for p in procs]
        assert metas[0]["boot_root"].startswith("127.0.0.1:") and metas[1:] == [None] * 3
        tk, rk = OfcclCheckpointEngine.build_topology(2, 2, metas)
        for group, kw in ((trainers, tk), (rollout, rk)):
            for i, p in enumerate(group):
                p.stdin.write(json.dumps({k: v[i] for k, v in kw.items()}) + "\n")
                p.stdin.flush()
        results = [_line(p, "RESULT", deadline) for p in procs]
        for p in procs:
            assert p.wait(timeout=max(1, deadline - time.monotonic())) == 0, p.stderr.read()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    import sync_peer
    names = [n for n, _, _ in sync_peer.TENSORS]
    for r in results[2:]:
        assert r["plans_built"] == 1 and r["nbuckets"] >= 4, r
        for step, got in enumerate(r["steps"]):
            assert got["names"] == names and got["wrong"] == [], got
            # what every trainer generated is what every rollout rank received
            assert got["sha"] == results[0]["steps"][step]["sha"] == \
                results[1]["steps"][step]["sha"]
    assert results[0]["steps"][0]["sha"] != results[0]["steps"][1]["sha"]
    for r in results[:2]:  # send_weights' metrics, as verl logs them
        for got in r["steps"]:
            m = got["metrics"]
            assert m["checkpoint_engine/payload_mbytes"] == got["bytes"] / (1 << 20), m
            assert m["checkpoint_engine/buckets"] == results[2]["nbuckets"], m
            assert m["checkpoint_engine/seconds"] > 0 and m["checkpoint_engine/gbytes_per_s"] > 0
    for r in results:
        # every rank names the weight trainer rank 1 disagrees on
        assert "trainer rank 1" in r["mismatch"] and "'bias' [64] float32" in r["mismatch"], \
            r["mismatch"]
    for r in results[:2]:  # the trainers sent their step: done
        assert r["step_mismatch"] == "none", r["step_mismatch"]
    for r in results[2:]:  # the rollout side names both steps
        assert "step 5" in r["step_mismatch"] and "step 4" in r["step_mismatch"], \
            r["step_mismatch"]
    # trainer rank 1's iterator raised: it raises that; the others (not at a
    # deadline: before it, with the cause) RemoteError naming rank 1
    assert results[1]["failed"].startswith("RuntimeError: CUDA out of memory"), results[1]
    for r in results[:1] + results[2:]:
        assert r["failed"].startswith("RemoteError: weight sync: trainer rank 1 failed") and \
            "RuntimeError: CUDA out of memory while unsharding 'big'" in r["failed"], r["failed"]
    # a rollout consumer raised at its second weight: the trainers finished
    for r in results[:2]:
        assert r["consumer"] == "none", r["consumer"]
    for r in results[2:]:
        assert r["consumer"] == "ValueError: the rollout's loader knows no weight 'bias'", \
            r["consumer"]
    for r in results[2:]:
        assert r["after"]["names"] == names and r["after"]["wrong"] == [], r["after"]


def test_two_groups_sync():
    two_groups_sync("cpu")


def test_registries(tmp_path):
    """Our registry names the engine; with a verl installed, importing
    ofccl.checkpoint registers it in verl's CheckpointEngineRegistry too."""
    import ofccl
    from ofccl.checkpoint import OfcclCheckpointEngine, get_engine, new_engine
    with pytest.raises(ofccl.InvalidArgument, match="ofccl"):
        get_engine("nccl")
    e = new_engine("ofccl", bucket_size=1 << 20, is_master=True, host="127.0.0.1")
    assert isinstance(e, OfcclCheckpointEngine)
    assert e.prepare()["boot_root"].startswith("127.0.0.1:")
    with pytest.raises(ofccl.StateError, match="init_process_group"):
        e._live("send_weights")
    with pytest.raises(ofccl.InvalidArgument, match="boot_root"):
        OfcclCheckpointEngine.build_topology(2, 2, [None] * 4)
    # a stand-in verl package with the registry shape verl has
    p = with_stand_in_verl(
        tmp_path,
        "class CheckpointEngineRegistry:\n"
        "    _registry = {}\n"
        "    def register(name):\n"
        "        def wrap(cls):\n"
        "            CheckpointEngineRegistry._registry[name] = cls\n"
        "            return cls\n"
        "        return wrap\n",
        "import ofccl.checkpoint as c\n"
        "from verl.checkpoint_engine.base import CheckpointEngineRegistry as R\n"
        "assert R._registry['ofccl'] is c.OfcclCheckpointEngine\n"
        "print('registered')\n")
    assert p.returncode == 0 and "registered" in p.stdout, p.stdout + p.stderr


def with_stand_in_verl(tmp_path, base_py, code):
    """Run `code` in a fresh interpreter that imports a stand-in verl package
    whose verl/checkpoint_engine/base.py is `base_py`."""
    base = tmp_path / "verl" / "checkpoint_engine"
    base.mkdir(parents=True)
    (tmp_path / "verl" / "__init__.py").write_text("")
    (base / "__init__.py").write_text("")
    (base / "base.py").write_text(base_py)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)

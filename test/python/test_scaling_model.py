"""perf/scaling_model.py's copy of the chooser's cost model (cost_time, cost_pick) against the
crossovers solved by hand (the ones test/unit/test_cost.c checks in C), and against the library
itself: ofccl_info -j on two fake hosts of two ranks with configured link constants prints every
candidate's predicted time, which the Python formulas must reproduce."""
import importlib.machinery
import importlib.util
import math
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K, M = 1024, 1 << 20
AG = ("direct", "ring", "hier")
BC = ("direct", "chain", "hier")


def load_model():
    path = os.path.join(ROOT, "perf", "scaling_model.py")
    loader = importlib.machinery.SourceFileLoader("ofccl_scaling_model", path)
    spec = importlib.util.spec_from_loader("ofccl_scaling_model", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


sm = load_model()


def topo(n, hosts, width, local_peers, peer_map, beta_f=2.5e9):
    """tcp-like: the fabric's bytes are copied on the rank's core."""
    return sm.CostTopo(n, hosts, width, local_peers, peer_map, 0.2e-6, 10e9, 13.5e-6, beta_f,
                       fabric_cpu=True)


def test_local_one_host_is_direct():
    for n in (2, 4, 16, 64):
        t = topo(n, 1, n, True, True)
        for b in (K, 64 * K, M, 64 * M, 1024 * M):
            assert sm.cost_pick(t, "ag", b, AG) == "direct"
            assert sm.cost_pick(t, "bc", b, BC) == "direct"
        assert math.isinf(sm.cost_time(t, "ag", "hier", M))


def test_tcp_one_host_ring_crossover():
    a, beta = 13.5e-6, 2.5e9
    for n in range(2, 15):
        t = topo(n, 1, n, False, False)
        assert all(sm.cost_pick(t, "ag", 2**k, AG) == "direct" for k in range(10, 31))
    for n in range(15, 65):
        t = topo(n, 1, n, False, False)
        cross = 13.0 * (n - 2) * a * beta / ((n - 1) * (n - 14))
        assert sm.cost_pick(t, "ag", int(cross * 0.97), AG) == "direct"
        assert sm.cost_pick(t, "ag", int(cross * 1.03), AG) == "ring"
        # the sums add to tcp's copies: direct's one of n inputs wins up to 17 ranks
        if n <= 17:
            assert all(sm.cost_pick(t, "rs", 2**k, AG) == "direct" for k in range(10, 31))
        else:
            assert sm.cost_pick(t, "rs", 64 * M, AG) == "ring"


def test_reduce_scatter_sums():
    """A sum of k inputs costs (k + 1) b at twice the copy rate: direct sums n inputs once, each
    ring step two; on a fast fabric at 16 ranks the ring's sums bound it and direct wins."""
    for n in (2, 16, 64):
        t = topo(n, 1, n, True, True)
        b = M
        assert math.isclose(sm.cost_time(t, "rs", "direct", b), 0.2e-6 + (n + 1) * b / 20e9,
                            rel_tol=1e-9)
        assert math.isclose(sm.cost_time(t, "rs", "ring", b),
                            (n - 1) * (0.2e-6 + 2.5 * b / 10e9), rel_tol=1e-9)
    t = topo(16, 1, 16, False, False)
    assert math.isclose(sm.cost_time(t, "rs", "ring", M),
                        15 * (13.5e-6 + M / 2.5e9 + 1.5 * M / 10e9), rel_tol=1e-9)
    t.fabric_cpu = False  # a NIC moving tcp's 2.5 GB/s: the fabric bounds every step
    assert sm.cost_time(t, "rs", "ring", M) == sm.cost_time(t, "ag", "ring", M)
    t = sm.CostTopo(16, 1, 16, False, False, 0.2e-6, 10e9, 2e-6, 50e9)
    cross = 14 * 2e-6 * 50e9 * 13 / (15 * 2)
    assert sm.cost_pick(t, "ag", int(cross * 0.97), AG) == "direct"
    assert sm.cost_pick(t, "ag", int(cross * 1.03), AG) == "ring"
    assert all(sm.cost_pick(t, "rs", 2**k, AG) == "direct" for k in range(10, 31))


def test_streams_setting():
    """OFCCL_LINK_STREAMS=7: the all-gather's ring from 9 ranks above 7(n-2)aB/((n-1)(n-8))."""
    a, beta = 13.5e-6, 2.5e9
    for n in range(9, 65):
        t = topo(n, 1, n, False, False)
        t.streams = 7
        cross = 7.0 * (n - 2) * a * beta / ((n - 1) * (n - 8))
        assert sm.cost_pick(t, "ag", int(cross * 0.97), AG) == "direct"
        assert sm.cost_pick(t, "ag", int(cross * 1.03), AG) == "ring"


def test_two_ranks_tie():
    """Direct and the ring tie at two ranks (one block, one sum); rounding must not break it."""
    for local in (True, False):
        for cpu in (True, False):
            t = sm.CostTopo(2, 1, 2, local, local, 0.2e-6, 10e9, 13.5e-6, 2.5e9, fabric_cpu=cpu)
            b = 8.0
            while b <= 1024 * M:
                assert sm.cost_pick(t, "ag", int(b), AG) == "direct"
                assert sm.cost_pick(t, "rs", int(b), AG) == "direct"
                b *= 1.37


def test_two_hosts_link_limited():
    c, b = 117.5e6, 8 * M
    t = topo(8, 2, 4, True, False, beta_f=c)
    h = 13.5e-6 + 4 * b / c + (0.2e-6 + 6 * b / 10e9) * (512 * K / b)
    assert math.isclose(sm.cost_time(t, "ag", "hier", b), h, rel_tol=1e-9)
    assert math.isclose(sm.cost_time(t, "ag", "ring", b), 7 * (13.5e-6 + b / c), rel_tol=1e-9)
    assert math.isclose(sm.cost_time(t, "ag", "direct", b), 13.5e-6 + 16 * b / c, rel_tol=1e-9)
    assert sm.cost_pick(t, "ag", b, AG) == "hier"
    assert sm.cost_pick(t, "rs", b, ("direct", "ring")) == "ring"


def test_bcast_chain():
    t = topo(3, 1, 3, False, False)
    assert sm.cost_pick(t, "bc", 512 * K, BC) == "direct"
    assert sm.cost_pick(t, "bc", M, BC) == "chain"


def test_matches_the_library():
    info, tcpboot = os.environ.get("OFCCL_INFO"), os.environ.get("TCPBOOT")
    assert info and tcpboot, "OFCCL_INFO and TCPBOOT name ofccl_info and run_tcpboot.sh"
    env = dict(os.environ, OFCCL_TEST_HOST_RPH="2", OFCCL_IFACE="lo",
               OFCCL_LINK_LOCAL="0.2:10", OFCCL_LINK_FABRIC="13.5:2.5")
    out = subprocess.run(["sh", tcpboot, "4", info, "-j"], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    rows = re.findall(r"^  (all-gather|reduce-scatter|broadcast) +(\d+) +(.*?) +(\w+)$", out,
                      re.M)
    assert len(rows) == 12, out
    t = topo(4, 2, 2, True, False)
    names = {"all-gather": "ag", "reduce-scatter": "rs", "broadcast": "bc"}
    for coll, nbytes, times, pick in rows:
        coll = names[coll]
        for cand, text in zip(sm.CHOOSER_CANDS, times.split()):
            want = sm.cost_time(t, coll, cand, int(nbytes))
            if text == "-":
                continue
            assert abs(float(text) - want * 1e6) <= 0.1, (coll, nbytes, cand, text, want)
        valid = [c for c, x in zip(sm.CHOOSER_CANDS, times.split()) if x != "-"]
        assert sm.cost_pick(t, coll, int(nbytes), valid) == pick, (coll, nbytes)

#!/usr/bin/python3
"""Cost model of ofccl's all-gather and reduce-scatter on a cluster (docs/scaling.md).

Prints the predicted time of one all-gather and one reduce-scatter of --size bytes (the gathered
buffer, or the reduce-scatter input of each rank) for --ranks-per-host ranks on each of 2 to
--max-hosts hosts, for the flat ring, the hierarchical (rail-aligned) algorithm and the rail
rings, for each NIC layout given; then what the library's chooser (the same formulas as
lib/coll/cost.c: cost_time, cost_pick) picks on such a cluster, a check of the model against the
simulated 2 x 4 cluster measured here (perf/hosts/bench.sh), and ofccl's memory per rank at
--mem-ranks ranks.

Every link class is alpha + bytes / beta. The defaults marked 'measured' come from
docs/performance.md on this machine; the cluster's NIC figures are assumptions (see --help).
"""
import argparse
import math

# Measured on this machine (docs/performance.md, perf/compare and perf/hosts/bench.sh).
ALPHA_SHM = 0.2e-6  # local transport, 2-rank all-gather of 8-512 B: 0.18-0.22 us
COPY_SHM = 12.6e9  # per-core memcpy with both cores copying 32 MiB blocks (ceiling -2)
SUM_SHM = 8.4e9  # f32 sum pass, 64 MiB blocks (15.7 GB/s alone) x the 2-core/1-core memcpy ratio
ALPHA_TCP = 13.5e-6  # tcp over loopback, 2-rank all-gather latency: 13-14 us
BETA_TCP = 2.5e9  # tcp over loopback, 2-rank all-gather busbw at 1-64 MiB: 2.05-2.91 GB/s
VETH_C = 117.5e6  # tbf-limited veth link between two simulated hosts, per direction
VETH_MEASURED = {"direct": (0.22, 0.26), "ring": (0.43, 0.59)}  # link share, 1-64 MiB

# ofccl's state per peer and communicator, in bytes, from the struct sizes on x86-64
# (sizeof of the fields named; lib/core/engine.c ofccl__coll_init, setup.c, ctrl.c).
SLOTS, DEPTH, DESC_WORDS, EAGER_RING, EAGER_HDR = 8, 4, 16, 16, 32
REQ_PER_PEER = (8 + 4 * 4 + 4  # sig_mask, sent/inflight/sig_next/from_cnt, 4 flags
                + 24 + 8 + 2 * 8  # peer_rk, peer_off, seen[2]
                + 3 * 4  # to, from, awaiting: the peers a collective uses, as lists
                + 8 + 8 + 8)  # srcs, peer_at, peer_out
COLL_PER_PEER = SLOTS * 1 + SLOTS * 8 + EAGER_RING * 1  # desc_flag, desc_seen, eager_seen
COMM_PER_PEER = 24 + 8 + 4 + 64  # peer_ctrl, peer_ctrl_at, host_of, host_name
WOP, WOP_BLOCK = 64, 64  # write-op contexts: allocated 64 at a time, as collectives need them
FIXED_PER_COMM = (SLOTS * 16384 * 4 + SLOTS * 576 + 5768 + 2296  # unit_cnt, reqs, state, comm
                  + WOP * WOP_BLOCK)  # one block of write-op contexts: a ring's or hier's need
SETUP_SLOT = 20 + 700  # blob header + largest setup record (setup.c SETUP_MAX)
LX_RING_BYTES = 2 * 64 + 256 * 8  # local transport: one CQ-data ring per source rank


def ctrl_per_peer(n, eager=16384):
    slot = (EAGER_HDR + (eager + n - 1) // n + 63) // 64 * 64
    return SLOTS * DESC_WORDS * 8 + 3 * SLOTS * 8 + (SLOTS + EAGER_RING) * slot  # + take words


def flat_ring(c, s, coll):
    """One ring over all N ranks, host-major: per step one flow leaves each host."""
    n = c.p * c.h
    b = s / n
    step = max(c.alpha_net + b / c.nic_bw, ALPHA_SHM + b / c.copy)
    return (n - 1) * (step + (b / c.sum if coll == "rs" else 0))


def rail_rings(c, s, coll):
    """P rings over all N ranks, ring k crossing hosts on local rank k's NIC (rail)."""
    n = c.p * c.h
    b = s / n
    flow = c.nic_bw / c.p if c.nics == 1 else c.nic_bw  # P flows leave a host at once
    step = max(c.alpha_net + (b / c.p) / flow, ALPHA_SHM + b / c.copy)
    return (n - 1) * (step + (b / c.sum if coll == "rs" else 0))


def hierarchical(c, s, coll):
    """Rail-aligned two levels. All-gather: every local rank gathers its rail's H blocks over
    the network (a ring over hosts, all P rails at once), then the host's ranks exchange those
    over shared memory. Reduce-scatter: the host reduces first (each rank its 1/P slice), then
    a reduce-scatter ring over hosts on each rail. Returns (serial, pipelined): the phases one
    after the other, or overlapped chunk by chunk (the slower phase plus one chunk of the
    other)."""
    b = s / (c.p * c.h)
    flow = c.nic_bw / c.p if c.nics == 1 else c.nic_bw
    red = b / c.sum if coll == "rs" else 0
    inter = (c.h - 1) * (c.alpha_net + b / flow + red)
    intra_bytes = s * (c.p - 1) / c.p
    intra = (c.p - 1) * ALPHA_SHM + intra_bytes / (c.sum if coll == "rs" else c.copy)
    chunk = 512 * 1024  # OFCCL_CHUNK_BYTES
    fill = min(inter, intra) * min(1.0, chunk * c.p / max(s, 1))
    return inter + intra, max(inter, intra) + fill


def lower_bound(c, s, coll):
    """Bytes that must cross each host's NICs, and that each rank must take in over shared
    memory (copied by a CPU: the NIC writes only its own rank's memory)."""
    net = s * (c.h - 1) / c.h / (c.nic_bw * c.nics)
    shm = s * (c.p - 1) / c.p / (c.sum if coll == "rs" else c.copy)
    return max(net, shm)


# The library's chooser (lib/coll/cost.c), the same formulas: a candidate's predicted time from
# the shape (n ranks on `hosts` hosts of `width`), whether same-host peers go through the local
# transport (`local_peers`) and every peer's memory maps (`peer_map`), and alpha (s) / beta
# (bytes/s) of the two link classes. `nbytes`: one rank's block (ag, rs), the buffer (bc).
# Differences from the cluster tables above: one link per host (beta_fabric is the host's; with
# one NIC per rail configure their sum); the copy rate is one rank's measured alone, and a
# reduce-scatter's sums of k inputs cost (k + 1) b at twice that rate; no rail rings.
COST_FLOWS = 13  # OFCCL_LINK_STREAMS: an endpoint's full-rate streams (loopback tcp); more share
CHOOSER_CANDS = ("direct", "ring", "hier", "chain")


class CostTopo:
    def __init__(self, n, hosts, width, local_peers, peer_map, alpha_local, beta_local,
                 alpha_fabric, beta_fabric, chunk=512 * 1024, fabric_cpu=False,
                 streams=COST_FLOWS):
        self.n, self.hosts, self.width = n, hosts, width
        self.local_peers, self.peer_map, self.chunk = local_peers, peer_map, chunk
        self.fabric_cpu = fabric_cpu  # the fabric's bytes are copied on the rank's core (tcp)
        self.streams = streams
        self.alpha = (alpha_local, alpha_fabric)
        self.beta = (beta_local, beta_fabric)


def kappa(m, streams=COST_FLOWS):
    return 1.0 if m <= streams else m / streams


def cost_time(t, coll, cand, nbytes):
    """Predicted seconds of `coll` ("ag", "rs", "bc") by `cand`; inf where it cannot run."""
    if t.n < 2:
        return 0.0
    h = max(t.hosts, 1)
    p = t.n if h == 1 else (t.width if t.width > 0 else -(-t.n // h))
    ms, mr = p - 1, t.n - p
    mf = mr + (0 if t.local_peers else ms)
    s = 0 if t.local_peers else 1
    a_f, b_f, b_l = t.alpha[1], t.beta[1], t.beta[0]
    b = float(nbytes)
    bcast = coll == "bc"

    def hop(x):
        step = t.alpha[s] + x / t.beta[s] if p > 1 else 0.0
        return max(step, a_f + x / b_f) if h > 1 else step

    def fan_out(x):
        return t.alpha[s] + ms * x * (1.0 if t.local_peers else kappa(ms, t.streams)) / t.beta[s]

    def reduce(inputs, x):  # read every input once, write the result, at the copy's traffic
        return (inputs + 1) * x / (2 * b_l)

    if cand == "direct":
        busy = 0.0
        if t.local_peers and ms > 0:
            busy = b / b_l if bcast and t.peer_map else ms * b / b_l
        if coll == "rs":  # reading peers in place (peer_map) replaces the copies
            busy = (0.0 if t.peer_map else busy) + reduce(t.n, b)
        ep = mf * b * kappa(mf, t.streams) / b_f
        if t.fabric_cpu:
            busy += ep
        if mf > 0:
            busy = max(busy, ep)
        if not bcast and h > 1:
            busy = max(busy, p * mr * b / b_f)
        return (a_f if mf > 0 else t.alpha[0]) + busy
    if cand == "ring":
        if bcast:
            return math.inf
        if coll != "rs":
            return (t.n - 1) * hop(b)
        if t.fabric_cpu:
            return (t.n - 1) * (hop(b) + reduce(2, b))
        core = reduce(2, b) + (t.alpha[0] + b / b_l if t.local_peers and p > 1 else 0.0)
        return (t.n - 1) * max(hop(b), core)
    if cand == "hier":
        if h < 2 or t.width < 2:
            return math.inf
        rail = (h - 1) * b * kappa(h - 1, t.streams) / b_f  # this rank's streams between hosts
        if bcast:
            return a_f + rail + fan_out(b)
        host = fan_out(h * b)  # the rails' blocks within the host
        host_sum = reduce(p, h * b) if coll == "rs" else 0.0  # the host's p inputs of h blocks
        rail_sum = reduce(h, b) if coll == "rs" else 0.0  # then h partials of one
        t1 = max(a_f + max(rail, p * (h - 1) * b / b_f), rail_sum)
        t2 = host + host_sum if t.local_peers else max(host, host_sum)
        both = max(t1, t2) + min(t1, t2) * min(1.0, t.chunk / b if b > 0 else 1.0)
        if t.fabric_cpu:  # one core streams, copies and sums one thing after the other
            both = max(both, a_f + rail + host + host_sum + rail_sum)
        return both
    if cand == "chain":
        c = min(float(t.chunk), b)
        k = math.ceil(b / c) if c > 0 else 1
        return (k + t.n - 2) * hop(c) if bcast else math.inf
    return math.inf


def cost_pick(t, coll, nbytes, valid):
    """The cheapest of `valid` (candidate names); ties go to the earlier in CHOOSER_CANDS."""
    best, best_t = None, math.inf
    for cand in CHOOSER_CANDS:
        if cand in valid:
            tc = cost_time(t, coll, cand, nbytes)
            if best is None or tc < best_t * (1 - 1e-9):  # ties, to rounding, go to the earlier
                best, best_t = cand, tc
    return best


def chooser_table(args):
    """What the library's auto would pick for a cluster: 8 ranks per host, same-host peers
    through the local transport, the host's link at the NIC rate."""
    beta_f = args.nic_gbit * 1e9 / 8
    print(f"\nThe library's chooser (lib/coll/cost.c) on {args.ranks_per_host} ranks per host, "
          f"local 0.2 us / {args.copy / 1e9:g} GB/s, fabric {args.alpha_net * 1e6:g} us / "
          f"{beta_f / 1e9:g} GB/s per host; {args.size / 2**20:g} MiB; predicted ms")
    print(f"{'hosts':>6} | {'AG direct':>10} {'ring':>8} {'hier':>8} {'pick':>6} | "
          f"{'RS direct':>10} {'ring':>8} {'hier':>8} {'pick':>6}")
    h = 2
    while h <= args.max_hosts:
        t = CostTopo(args.ranks_per_host * h, h, args.ranks_per_host, True, False, ALPHA_SHM,
                     args.copy, args.alpha_net, beta_f)
        b = args.size / t.n
        ag = [cost_time(t, "ag", c, b) * 1e3 for c in ("direct", "ring", "hier")]
        rs = [cost_time(t, "rs", c, b) * 1e3 for c in ("direct", "ring", "hier")]
        print(f"{h:6d} | {ag[0]:10.1f} {ag[1]:8.1f} {ag[2]:8.1f} "
              f"{cost_pick(t, 'ag', b, ('direct', 'ring', 'hier')):>6} | {rs[0]:10.1f} "
              f"{rs[1]:8.1f} {rs[2]:8.1f} {cost_pick(t, 'rs', b, ('direct', 'ring', 'hier')):>6}")
        h *= 8 if h >= 16 else 2


def parse_size(text):
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    text = text.strip().upper().rstrip("IB")
    if text and text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


class Cluster:
    def __init__(self, p, h, nics, nic_bw, alpha_net, copy, sum_):
        self.p, self.h, self.nics, self.nic_bw = p, h, nics, nic_bw
        self.alpha_net, self.copy, self.sum = alpha_net, copy, sum_


def fmt_t(t):
    return f"{t * 1e3:8.1f}"


def table(args, nics):
    print(f"\n{args.ranks_per_host} ranks per host, {nics} x {args.nic_gbit:g} Gbit/s NIC"
          f"{'s' if nics > 1 else ''} per host"
          f"{' (one rail per local rank)' if nics == args.ranks_per_host else ' (shared)'}; "
          f"{args.size / 2**20:g} MiB; times in ms")
    hdr = f"{'hosts':>6} {'ranks':>6} |"
    for coll in ("all-gather", "reduce-scatter"):
        hdr += f" {coll + ': bound':>21} {'flat':>8} {'hier':>8} {'hier-pl':>8} {'rail':>8} |"
    print(hdr)
    h = 2
    while h <= args.max_hosts:
        c = Cluster(args.ranks_per_host, h, nics, args.nic_gbit * 1e9 / 8, args.alpha_net,
                    args.copy, args.sum)
        row = f"{h:6d} {h * c.p:6d} |"
        for coll in ("ag", "rs"):
            ser, pl = hierarchical(c, args.size, coll)
            row += (f" {fmt_t(lower_bound(c, args.size, coll)):>21} "
                    f"{fmt_t(flat_ring(c, args.size, coll))} {fmt_t(ser)} {fmt_t(pl)} "
                    f"{fmt_t(rail_rings(c, args.size, coll))} |")
        print(row)
        h *= 2


def veth_check():
    """The simulated 2 x 4 cluster: the link's share of the bytes that must cross it."""
    p, h = 4, 2
    # direct: every rank sends its block to every remote rank: P x P x b = 2 S per direction
    # against the S/2 that must cross; ring (host-major): two crossings of 7S/8 each.
    model = {"direct": (1 / 2) / (p * p / (p * h)), "ring": (1 / 2) / ((p * h - 1) / (p * h))}
    print(f"\nModel check, simulated cluster of 2 hosts x 4 ranks, link {VETH_C / 1e6:g} MB/s "
          "(perf/hosts/bench.sh): share of the link carrying bytes that must cross it")
    print(f"{'algorithm':>10} {'model':>6} {'measured (1-64 MiB)':>20}")
    for algo, m in model.items():
        lo, hi = VETH_MEASURED[algo]
        print(f"{algo:>10} {m:6.2f} {lo:9.2f} to {hi:.2f}")


def memory(n, eager):
    per_peer = REQ_PER_PEER * SLOTS + COLL_PER_PEER + COMM_PER_PEER + ctrl_per_peer(n, eager)
    mib = 1 / 2**20
    print(f"\nofccl's memory per rank at {n} ranks, one communicator (OFCCL_EAGER_BYTES="
          f"{eager}, OFCCL_DEPTH={DEPTH}):")
    rows = [
        ("request slots: per-peer counters, keys, peer lists", REQ_PER_PEER * SLOTS * n),
        ("descriptor and eager bookkeeping", COLL_PER_PEER * n),
        ("peer tables (keys, mapped pointers, hosts)", COMM_PER_PEER * n),
        ("control region (descriptors, counters, eager slots)", ctrl_per_peer(n, eager) * n),
        ("fixed (unit counters, request slots, 64 write-op contexts)", FIXED_PER_COMM),
        ("total", per_peer * n + FIXED_PER_COMM),
        ("setup, transient: every rank's record, read back", 2.4 * SETUP_SLOT * n),
        ("local transport segment (rings of same-host sources only resident)",
         LX_RING_BYTES * n + 40 * 1024),
        ("TCP rendezvous root: one record exchange sends", SETUP_SLOT * n * n),
    ]
    for what, b in rows:
        print(f"  {what:<68} {b * mib:10.1f} MiB")
    print(f"  per peer: {per_peer} bytes")
    print(f"  write-op contexts beyond the first {WOP_BLOCK}: while a direct collective over all "
          f"{n} ranks runs, up to {(2 * (n - 1) * (2 * DEPTH + 2) + 2) * WOP * mib:.1f} MiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=parse_size, default=2**30,
                    help="bytes, with K, M or G (binary) (default 1G)")
    ap.add_argument("--ranks-per-host", type=int, default=8)
    ap.add_argument("--max-hosts", type=int, default=2048)
    ap.add_argument("--nic-gbit", type=float, default=400,
                    help="per NIC (assumed: 400 Gbit/s, the NDR InfiniBand / 400GbE class)")
    ap.add_argument("--nics", default="1,8",
                    help="NICs per host, one table each (assumed: 1 shared, or 8 = one rail per "
                         "local rank as in 8-GPU servers)")
    ap.add_argument("--alpha-net", type=float, default=2e-6,
                    help="seconds per network message (assumed: 2 us, one RDMA write and its "
                         "completion)")
    ap.add_argument("--copy", type=float, default=COPY_SHM,
                    help="bytes/s one rank copies while all ranks of its host copy (measured "
                         "here: 12.6e9)")
    ap.add_argument("--sum", type=float, default=SUM_SHM,
                    help="bytes/s one rank reduces while all reduce (derived here: 8.4e9)")
    ap.add_argument("--mem-ranks", type=int, default=16384)
    ap.add_argument("--eager", type=int, default=16384, help="OFCCL_EAGER_BYTES")
    args = ap.parse_args()

    print("Constants (alpha + bytes/beta per link class):")
    print(f"  shared memory (local transport), measured: alpha {ALPHA_SHM * 1e6:g} us, copy "
          f"{args.copy / 1e9:g} GB/s and sum {args.sum / 1e9:g} GB/s per rank")
    print(f"  tcp over loopback, measured: alpha {ALPHA_TCP * 1e6:g} us, beta "
          f"{BETA_TCP / 1e9:g} GB/s")
    print(f"  network, assumed: alpha {args.alpha_net * 1e6:g} us, {args.nic_gbit:g} Gbit/s "
          f"= {args.nic_gbit / 8:g} GB/s per NIC, non-blocking fabric")
    print("bound: max(bytes each host must take in through its NICs, bytes each rank must take "
          "in over shared memory); hier: phases in sequence; hier-pl: overlapped by chunk")
    for nics in (int(x) for x in args.nics.split(",")):
        table(args, nics)
    chooser_table(args)
    veth_check()
    memory(args.mem_ranks, args.eager)


if __name__ == "__main__":
    main()

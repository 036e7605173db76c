"""Broadcast and weight push in perf/compare: the runs and the ratio table.

ofccl_perf -o bp and mpi_perf -o bp at 2 ranks and at 4 (or the --bp-ranks
list); ranks beyond the cores run oversubscribed (mpirun --oversubscribe
--bind-to none), as the table says. Senders are the first half of the ranks,
receivers the rest (-S default); buckets of 4 MiB (-K default).

  broadcast  ofccl_broadcast (root 0)   vs  MPI_Bcast
  push       every sender writes its shard straight into every receiver's
             bucket (ofccl_push_bucket, double-buffered)
                                        vs  per tensor MPI_Gatherv within the
             senders to rank 0, then MPI_Bcast of each bucket from rank 0 to
             the receivers (what single-sender engines do)

Transports paired: ofccl local with Open MPI vader (shared memory), ofccl tcp
with Open MPI btl tcp. The size is the bytes each receiver gets and busbw =
algbw. Ceilings (perf/ceiling, measured in the same run, at the size S):
  local  memcpy(S): one core copying S bytes, what a receiver that copies each
         byte once can reach;
  tcp    loopback TCP both ways at once, per side (ceiling -T): the link.
"""
import os

MIB = 1 << 20
TRANSPORTS = (("local", "vader", ["--mca", "btl", "self,vader"]),
              ("tcp", "tcp", ["--mca", "btl", "self,tcp"]))


def mpirun_for(np, cores):
    """mpirun for `np` ranks: one per core while they fit, else oversubscribed."""
    if np <= cores:
        return ["mpirun", "-np", str(np), "--bind-to", "core"]
    return ["mpirun", "-np", str(np), "--oversubscribe", "--bind-to", "none"]


def runs(perf, ranks, check, cores):
    """(path name, command without the sweep arguments) of every bc/push run."""
    out = []
    for np in ranks:
        base = mpirun_for(np, cores)
        for prov, label, mca in TRANSPORTS:
            out.append(("bp-ofccl-%s-np%d" % (prov, np),
                        base + ["-x", "OFCCL_PROVIDER=" + prov, "-x", "OFCCL_TIMEOUT_MS",
                                os.path.join(perf, "ofccl_perf"), "-o", "bp", "-z", "pool"]
                        + check))
            out.append(("bp-mpi-%s-np%d" % (label, np),
                        base + ["--mca", "pml", "ob1"] + mca +
                        [os.path.join(perf, "mpi_perf"), "-o", "bp", "-T", label] + check))
    return out


def ceiling_of(ceil, prov, size):
    """The ceiling (GB/s) of a bc/push of `size` bytes on `prov` (module doc)."""
    c = ceil.get(size)
    if not c:
        return None
    v = c[0] if prov == "local" else c[4]
    return v if v > 0 else None


def table(data, ceil, ranks, cores, out_dir):
    """Lines of the ratio table, and bp_ratios.csv in out_dir."""
    def busbw(path, coll, size):
        r = data.get((path, coll), {}).get(size)
        return float(r["busbw_GBps"]) if r else None

    def q(a, b):
        return "%6.2f" % (a / b) if a and b else "     -"

    def v(x):
        return "%8.2f" % x if x else "       -"

    lines, rows = [], []
    for coll, title, ref in (("bc", "broadcast", "MPI_Bcast"),
                             ("push", "weight push", "gather+bcast")):
        lines.append("")
        lines.append("%s, busbw GB/s (bytes each receiver gets / time); ratios: ofccl / %s, "
                     "ofccl / ceiling" % (title, ref))
        lines.append("  ceiling: local memcpy(S) on one core; tcp loopback TCP per side "
                     "(perf/ceiling -T)")
        lines.append("  %5s %9s %6s %8s %8s %6s %8s %6s" % ("ranks", "transport", "size", "ofccl",
                                                           "mpi", "vsMPI", "ceiling", "vsCeil"))
        for np in ranks:
            for prov, label, _ in TRANSPORTS:
                size = MIB
                while size <= 64 * MIB:
                    o = busbw("bp-ofccl-%s-np%d" % (prov, np), coll, size)
                    m = busbw("bp-mpi-%s-np%d" % (label, np), coll, size)
                    c = ceiling_of(ceil, prov, size)
                    if o or m:
                        lines.append("  %5s %9s %5dM %s %s %s %s %s" % (
                            "%d%s" % (np, "*" if np > cores else ""), prov, size // MIB, v(o),
                            v(m), q(o, m), v(c), q(o, c)))
                        rows.append([coll, np, prov, size, o or "", m or "", c or "",
                                     o / m if o and m else "", o / c if o and c else ""])
                    size *= 2
    if any(np > cores for np in ranks):
        lines.append("  * more ranks than the %d cores: oversubscribed, ranks share cores "
                     "(the ceiling is per core)" % cores)
    with open(os.path.join(out_dir, "bp_ratios.csv"), "w") as f:
        f.write("coll,ranks,transport,size,ofccl_GBps,mpi_GBps,ceiling_GBps,vs_mpi,vs_ceiling\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")
    return lines

#!/bin/bash
# All-gather and reduce-scatter across simulated hosts whose link is the
# bottleneck: 2 hosts x 4 ranks (test/hosts/cluster.sh), a token bucket (tc
# tbf) on both ends of each host's link, and the link ceiling measured in the
# same run: a plain TCP stream each way at once (stream.py), before and after
# the collectives. Each collective size is then given as
#   busbw / ceiling   nccl-tests' bus bandwidth over the link's rate;
#   link              (S/2) / ceiling / time: the share of the link's time
#                     spent on the bytes that must cross it. At 2 hosts, each
#                     host sends the other half of the S bytes (its 4 ranks'
#                     blocks, or its partial sums of the other host's shards)
#                     at least once, so 1.0 is the bound for any algorithm.
# A broadcast (from rank 0) must carry its S bytes across the link once, from
# the root's host to the other: its ceiling is one TCP stream that way alone
# (measured too, before and after, when -x is given), and its link is
# S / that ceiling / time (= busbw / ceiling).
#
# Usage: perf/hosts/bench.sh [-B build] [-R rate] [-b min] [-e max] [-n iters]
#          [-w warmup] [-a "algo ..."] [-x "algo ..."] [-r ranks_per_host] [-c 0|1]
#          [-o outdir]
#   -a  values of OFCCL_ALGO_AG / OFCCL_ALGO_RS to compare (ofccl_perf -a;
#       default "direct ring"); a hierarchical algorithm joins the list by name;
#       "" runs no all-gather or reduce-scatter.
#   -x  values of OFCCL_ALGO_BC to compare with broadcasts (ofccl_perf -o bc
#       -s ALGO_BC=<algo>), e.g. "direct chain hier"; default none.
#   -c  ofccl_perf -c: 1 (default) checks every element after the timed batch.
# Needs root (namespaces, tc). CSVs go to outdir (default perf/out/hosts).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=build rate=1gbit minb=1M maxb=64M iters=5 warmup=1 algos="direct ring" rph=4 check=1
bcalgos=""
out=perf/out/hosts
while getopts "B:R:b:e:n:w:a:x:r:c:o:h" c; do
    case $c in
    B) build=$OPTARG ;;
    R) rate=$OPTARG ;;
    b) minb=$OPTARG ;;
    e) maxb=$OPTARG ;;
    n) iters=$OPTARG ;;
    w) warmup=$OPTARG ;;
    a) algos=$OPTARG ;;
    x) bcalgos=$OPTARG ;;
    r) rph=$OPTARG ;;
    c) check=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,/^set -u/p' "$0" | grep '^#'; exit 2 ;;
    esac
done
perf=$build/perf/ofccl_perf
[ -x "$perf" ] || { echo "$perf not built (meson setup $build && ninja -C $build)"; exit 1; }
mkdir -p "$out" || exit 1
. "$here/../../test/hosts/cluster.sh"
cluster_up 2 || exit $?
cluster_limit "$rate" || { echo "tc tbf unavailable"; exit 1; }

# The ceiling: one TCP stream each way at once, as the collectives use the
# link both ways; the per-direction rate, the lower of the two.
ceiling() {
    local port=$((5100 + $1)) a b s
    cluster_in 1 /usr/bin/python3 "$here/stream.py" recv "$port" 20 >"$out/stream-a.log" 2>&1 &
    a=$!
    cluster_in 0 /usr/bin/python3 "$here/stream.py" recv "$((port + 50))" 20 \
        >"$out/stream-b.log" 2>&1 &
    b=$!
    cluster_in 0 /usr/bin/python3 "$here/stream.py" send "$CLUSTER_NET.2" "$port" 3 &
    s=$!
    cluster_in 1 /usr/bin/python3 "$here/stream.py" send "$CLUSTER_NET.1" "$((port + 50))" 3
    wait "$s" "$a" "$b"
    cat "$out/stream-a.log" "$out/stream-b.log" | sed -n 's/^rate_Bps=//p' | sort -n | head -1
}

# One way only, host0 to host1: what a broadcast from host0 can use.
ceiling_one_way() {
    local port=$((5200 + $1)) a
    cluster_in 1 /usr/bin/python3 "$here/stream.py" recv "$port" 20 >"$out/stream-a.log" 2>&1 &
    a=$!
    cluster_in 0 /usr/bin/python3 "$here/stream.py" send "$CLUSTER_NET.2" "$port" 3
    wait "$a"
    sed -n 's/^rate_Bps=//p' "$out/stream-a.log"
}

start=$(date +%s)
c1=$(ceiling 1)
echo "# link ceiling before: ${c1:-?} B/s per direction (tbf $rate, both ways at once)"
[ -n "$c1" ] || exit 1
if [ -n "$bcalgos" ]; then
    b1=$(ceiling_one_way 1)
    echo "# link ceiling before, one way (host0 to host1): ${b1:-?} B/s"
    [ -n "$b1" ] || exit 1
fi
for algo in $algos; do
    echo "# ofccl_perf, $((2 * rph)) ranks, algorithm $algo"
    cluster_run "$rph" 580 "$perf" -o all -b "$minb" -e "$maxb" -f 2 -n "$iters" -w "$warmup" \
        -a "$algo" -c "$check" -C "$out/ofccl-$algo.csv" || exit 1
done
for algo in $bcalgos; do
    echo "# ofccl_perf -o bc, $((2 * rph)) ranks, root 0, OFCCL_ALGO_BC=$algo"
    cluster_run "$rph" 580 "$perf" -o bc -b "$minb" -e "$maxb" -f 2 -n "$iters" -w "$warmup" \
        -s "ALGO_BC=$algo" -c "$check" -C "$out/ofccl-bc-$algo.csv" || exit 1
done
c2=$(ceiling 2)
echo "# link ceiling after: ${c2:-?} B/s per direction"
[ -n "$c2" ] || exit 1
if [ -n "$bcalgos" ]; then
    b2=$(ceiling_one_way 2)
    echo "# link ceiling after, one way: ${b2:-?} B/s"
    [ -n "$b2" ] || exit 1
fi

# shellcheck disable=SC2086 # one argument per algorithm
BC_C1=${b1:-0} BC_C2=${b2:-0} /usr/bin/python3 - "$c1" "$c2" "$rate" "$out" $algos ${bcalgos:+-- $bcalgos} <<'EOF'
import csv, os, sys
c1, c2, rate, out = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
ceil = (c1 + c2) / 2
print("# ceiling used: %.1f MB/s per direction (mean of %.1f before, %.1f after; tbf %s)"
      % (ceil / 1e6, c1 / 1e6, c2 / 1e6, rate))
b1, b2 = float(os.environ["BC_C1"]), float(os.environ["BC_C2"])
bceil = (b1 + b2) / 2
if bceil > 0:
    print("# broadcast ceiling used: %.1f MB/s one way (mean of %.1f before, %.1f after)"
          % (bceil / 1e6, b1 / 1e6, b2 / 1e6))
print("%-6s %-6s %5s %9s %11s %11s %9s %6s" % ("coll", "algo", "ranks", "size", "time(us)",
                                               "busbw(MB/s)", "busbw/C", "link"))
rows, wrong, args = [], 0, sys.argv[5:]
cut = args.index("--") if "--" in args else len(args)
files = [(a, "%s/ofccl-%s.csv" % (out, a)) for a in args[:cut]] + \
        [(a, "%s/ofccl-bc-%s.csv" % (out, a)) for a in args[cut + 1:]]
for algo, name in files:
    with open(name) as f:
        for r in csv.DictReader(f):
            size, t = int(r["size"]), float(r["time_us"]) / 1e6
            busbw = float(r["busbw_GBps"]) * 1e9
            wrong += int(r["wrong"])
            # The bytes that must cross: half of S from each host (all-gather,
            # reduce-scatter), or S from the root's host (broadcast).
            c = bceil if r["coll"] == "bc" else ceil
            link = (size if r["coll"] == "bc" else size / 2) / c / t
            rows.append((r["coll"], algo, r["ranks"], size, t * 1e6, busbw / 1e6, busbw / c, link,
                         c))
for r in rows:
    print("%-6s %-6s %5s %8dK %11.0f %11.1f %9.2f %6.2f" % (r[0], r[1], r[2], r[3] >> 10, *r[4:8]))
print("# wrong elements: %d" % wrong)
with open("%s/ratios.csv" % out, "w") as f:
    f.write("coll,algo,ranks,size,time_us,busbw_MBps,busbw_over_ceiling,link_share,ceiling_MBps\n")
    for r in rows:
        f.write("%s,%s,%s,%d,%.1f,%.2f,%.4f,%.4f,%.2f\n" % (*r[:8], r[8] / 1e6))
sys.exit(1 if wrong else 0)
EOF
status=$?
echo "# $(($(date +%s) - start)) s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); CSVs in $out"
exit $status

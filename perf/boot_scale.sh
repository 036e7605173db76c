#!/bin/sh
# Bootstrap at scale: for each N, start N processes of boot_scale on this
# machine through ofccl's TCP rendezvous (no launcher), each creating a context,
# the world communicator and one rail split (color rank % G), with no data
# moved; then print the curve: N, wall time until every process had its world
# communicator, the split's time, the rendezvous root's (rank 0's) peak
# resident memory and what it costs per rank, and whether time and memory grow
# no worse than linearly in N.
#
# Usage: perf/boot_scale.sh [-p provider] [-g groups] [-t seconds] [-b boot_scale] [N ...]
#   N         process counts (default 64 128 256 512 1024)
#   -p        OFCCL_PROVIDER (default local: every process shares this host)
#   -g        split groups G (default 8)
#   -t        deadline of one point, per process (default 600)
#   -b        the boot_scale program (default build/perf/boot_scale)
#   -k        keep the per-process lines (in BOOT_SCALE_DIR or a temporary folder)
#   -R        only print the curve of an earlier run kept in BOOT_SCALE_DIR
# Waiting processes nap at once instead of spinning (OFCCL_SPIN_US=0 unless set):
# here processes far outnumber cores, and a spinning one takes a core from a
# peer that has work to do.
# Every process runs under `timeout`; whatever is still alive when the script is
# interrupted is stopped by its process id.
set -u

here=$(cd "$(dirname "$0")" && pwd)
prov=local
groups=8
limit=600
bin="$here/../build/perf/boot_scale"
keep=0
report_only=0
while getopts p:g:t:b:kR opt; do
    case $opt in
    p) prov=$OPTARG ;;
    g) groups=$OPTARG ;;
    t) limit=$OPTARG ;;
    b) bin=$OPTARG ;;
    k) keep=1 ;;
    R) report_only=1 ;;
    *) sed -n '2,24p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
OFCCL_SPIN_US=${OFCCL_SPIN_US:-0}
export OFCCL_SPIN_US
[ $# -gt 0 ] || set -- 64 128 256 512 1024
if [ "$report_only" = 1 ] && [ ! -f "${BOOT_SCALE_DIR:-/nonexistent}/summary.txt" ]; then
    echo "boot_scale.sh: -R needs BOOT_SCALE_DIR naming a kept run" >&2
    exit 2
fi
[ "$report_only" = 1 ] || [ -x "$bin" ] || { echo "boot_scale.sh: no program at $bin (build first, or pass -b)" >&2; exit 2; }

dir=${BOOT_SCALE_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/boot_scale.XXXXXX")}
mkdir -p "$dir"
rows="$dir/rows.txt"
: > "$rows"
pids=""

# Each process runs under `timeout`, which passes a TERM on to it (and kills
# it 5 s later if it is still there).
cleanup() {
    [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
    pids=""
}
trap 'cleanup; exit 130' INT TERM HUP

# The machine is shared: should its available memory fall below the floor
# (BOOT_SCALE_MIN_MEM_MIB, default 2048) while a point runs, stop that point
# (kill its processes, listed in $1) rather than wake the kernel's OOM killer.
guard() {
    floor=${BOOT_SCALE_MIN_MEM_MIB:-2048}
    while sleep 1; do
        a=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)
        if [ "$a" -lt "$floor" ]; then
            echo "boot_scale.sh: MemAvailable fell to $a MiB (floor $floor): stopping" >> "$2"
            xargs kill -TERM < "$1" 2>/dev/null
            return
        fi
    done
}

free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# One point: N processes, their lines in $dir/N.out, stderr in $dir/N.err.
point() {
    n=$1
    out="$dir/$n.out"
    err="$dir/$n.err"
    : > "$out"
    : > "$err"
    # The root holds a connection per rank, and every local-transport rank a
    # process descriptor per peer of each communicator (world and split).
    need=$((2 * n + n / 8 + 256))
    if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
        ulimit -n "$need" 2>/dev/null || {
            echo "boot_scale.sh: N=$n needs $need file descriptors per process; ulimit -n is" \
                 "$(ulimit -n) (hard $(ulimit -Hn))" >&2
            return 1
        }
    fi
    port=$(free_port)
    load=$(cut -d' ' -f1 /proc/loadavg)
    avail=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)
    : > "$dir/$n.pids"
    guard "$dir/$n.pids" "$err" &
    guard_pid=$!
    t0=$(date +%s.%N)
    r=0
    while [ "$r" -lt "$n" ]; do
        OFCCL_PROVIDER=$prov OFCCL_BOOT_ROOT=127.0.0.1:$port OFCCL_BOOT_RANK=$r \
            OFCCL_BOOT_SIZE=$n OFCCL_BOOT_TIMEOUT_MS=$((limit * 1000)) \
            OFCCL_TIMEOUT_MS=$((limit * 1000)) \
            timeout -k 5 "$limit" "$bin" -g "$groups" >> "$out" 2>> "$err" &
        pids="$pids $!"
        echo "$!" >> "$dir/$n.pids"
        r=$((r + 1))
    done
    failed=0
    for p in $pids; do
        wait "$p" || failed=$((failed + 1))
    done
    cleanup
    kill "$guard_pid" 2>/dev/null
    wait "$guard_pid" 2>/dev/null
    echo "$n $t0 $load $avail $failed" >> "$rows"
    /usr/bin/python3 - "$out" "$n" "$t0" "$load" "$avail" "$failed" "$groups" <<'EOF'
import sys
path, n, t0, load, avail, failed, groups = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), \
    sys.argv[4], sys.argv[5], int(sys.argv[6]), int(sys.argv[7])
recs = {}
for line in open(path):
    f = line.split()
    if len(f) < 2 or f[0] != "boot_scale":
        continue
    d = dict(zip(f[1::2], f[2::2]))
    recs[int(d["rank"])] = d
bad = [r for r in range(n) if r not in recs or recs[r]["ok"] != "1"
       or int(recs[r]["split_size"]) != (n - r % groups + groups - 1) // groups
       or int(recs[r]["split_rank"]) != r // groups or int(recs[r]["size"]) != n]
if failed or bad:
    print(f"N={n}: {failed} processes failed, {len(bad)} ranks without a correct line "
          f"(first: {bad[:8]})", file=sys.stderr)
    sys.exit(1)
col = lambda k: [float(recs[r][k]) for r in range(n)]
start, ctx, world, split = col("start"), col("ctx"), col("world"), col("split")
cctx, cworld, csplit = col("cpu_ctx"), col("cpu_world"), col("cpu_split")
root = recs[0]
rcpu = float(root["cpu_split"])
print(f"N={n} launched={max(start) - t0:.3f} ctx={max(ctx) - t0:.3f} world={max(world) - t0:.3f} "
      f"split={max(split) - max(world):.3f} rdv={max(ctx) - max(start):.3f} "
      f"cpu_ctx_ms={1e3 * sum(cctx) / n:.2f} "
      f"cpu_world_ms={1e3 * sum(w - c for w, c in zip(cworld, cctx)) / n:.2f} "
      f"cpu_split_ms={1e3 * sum(s - w for s, w in zip(csplit, cworld)) / n:.2f} "
      f"root_cpu_ms={1e3 * rcpu:.1f} root_ctx_kib={root['hwm_ctx_kib']} "
      f"root_peak_kib={root['hwm_split_kib']} "
      f"root_private_kib={int(root['anon_kib']) + int(root['pte_kib'])} "
      f"root_pss_kib={root['pss_kib']} load={load} avail_mib={avail}")
EOF
}

summary="$dir/summary.txt"
status=0
[ "$report_only" = 1 ] || : > "$summary"
[ "$report_only" = 1 ] && set --
for n in "$@"; do
    if ! point "$n" >> "$summary"; then
        echo "boot_scale.sh: the point N=$n failed (lines in $dir/$n.out, errors in $dir/$n.err)" >&2
        head -5 "$dir/$n.err" >&2
        status=1
        keep=1
        break
    fi
    tail -1 "$summary" >&2
done

/usr/bin/python3 - "$summary" <<'EOF'
import math, sys
rows = []
for line in open(sys.argv[1]):
    rows.append({k: float(v) for k, v in (f.split("=") for f in line.split())})
if not rows:
    sys.exit(0)
print("Bootstrap at scale: N processes on one machine meet through the TCP rendezvous; each "
      "creates a context, the world communicator and one split (no data).")
print("Wall times in seconds from the first launch; CPU in ms per process (mean); root = rank 0, "
      "the rendezvous; memory in KiB (peak = VmHWM, private = anonymous + page tables).")
hdr = (f"{'N':>5} {'launch':>7} {'contexts':>8} {'comms':>7} {'split':>7} {'rdv':>6} "
       f"{'cpu ctx':>7} {'world':>6} {'split':>6} {'root cpu':>8} {'root peak':>9} "
       f"{'B/rank':>7} {'private':>7} {'B/rank':>7} {'load':>5}")
print(hdr)
prev = None
for r in rows:
    n = r["N"]
    mp = mq = ""
    if prev is not None:
        mp = f"{(r['root_peak_kib'] - prev['root_peak_kib']) * 1024 / (n - prev['N']):.0f}"
        mq = f"{(r['root_private_kib'] - prev['root_private_kib']) * 1024 / (n - prev['N']):.0f}"
    print(f"{n:5.0f} {r['launched']:7.2f} {r['ctx']:8.2f} {r['world']:7.2f} {r['split']:7.2f} "
          f"{r['rdv']:6.2f} {r['cpu_ctx_ms']:7.1f} {r['cpu_world_ms']:6.1f} "
          f"{r['cpu_split_ms']:6.1f} {r['root_cpu_ms']:8.1f} {r['root_peak_kib']:9.0f} {mp:>7} "
          f"{r['root_private_kib']:7.0f} {mq:>7} {r['load']:5.1f}")
    prev = r
if len(rows) > 1:
    a, b = rows[0], rows[-1]
    grow = lambda k: math.log(b[k] / a[k]) / math.log(b["N"] / a["N"])
    print(f"growth from N={a['N']:.0f} to N={b['N']:.0f} (exponent e of N^e; at most 1.15 counts "
          "as linear):")
    ok = True
    for key, what in (("rdv", "rendezvous wall time (last launch to last context)"),
                      ("root_cpu_ms", "root CPU time"),
                      ("cpu_world_ms", "CPU per process, world communicator"),
                      ("cpu_split_ms", "CPU per process, split"),
                      ("root_peak_kib", "root peak RSS"),
                      ("root_private_kib", "root private memory")):
        if a[key] <= 0 or b[key] <= 0:
            continue
        e = grow(key)
        ok &= e <= 1.15
        print(f"  {what}: N^{e:.2f}, {'no worse than linear' if e <= 1.15 else 'WORSE THAN LINEAR'}")
    print(f"  wall time to every communicator: N^{grow('world'):.2f} (every process does O(N) "
          "work, and they share this machine's cores: the machine's total is O(N^2))")
    print("verdict: " + ("rendezvous and per-process costs grow no worse than linearly" if ok
                         else "superlinear growth"))
EOF
[ "$keep" = 1 ] || [ -n "${BOOT_SCALE_DIR:-}" ] || rm -rf "$dir"
exit $status

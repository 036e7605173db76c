#!/bin/bash
# Communicator creation under real launchers: for each launcher and N, start N
# ranks of perf/boot_scale (context, world communicator, one split, no data)
# REPS times, and print the medians of: the launch skew (first to last rank
# entering main()); the creation time, from the last rank entering main() until
# every rank has its context (PMIx connection, bootstrap exchange, endpoint) and
# until every rank has its world communicator; the CPU time per rank (mean) of
# the context and of the world communicator; and the launcher command's own wall
# time (start to exit of every rank).
#
# Usage: perf/launch_scale.sh [-l "srun mpirun"] [-r reps] [-b boot_scale] [N ...]
#   N    rank counts (default 2 4 8 16)
#   -l   launchers to use (default: srun and mpirun)
#   -r   repetitions per point (default 5)
#   -b   the boot_scale program (default build/perf/boot_scale)
# srun runs in the cluster SLURM_CONF names, or else in a private one-node
# cluster started for the run (test/slurm/cluster.sh, root needed) with
# --overcommit, so 16 ranks share this machine's cores as they do under
# `mpirun --oversubscribe`. OFCCL_* variables reach the ranks under both
# launchers; waiting ranks nap rather than spin (OFCCL_SPIN_US=0 unless set).
set -u
here=$(cd "$(dirname "$0")" && pwd)
launchers="srun mpirun"
reps=5
bin="$here/../build/perf/boot_scale"
while getopts l:r:b: opt; do
    case $opt in
    l) launchers=$OPTARG ;;
    r) reps=$OPTARG ;;
    b) bin=$OPTARG ;;
    *) sed -n "2,20p" "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- 2 4 8 16
[ -x "$bin" ] || { echo "launch_scale.sh: no program at $bin (build first, or pass -b)" >&2; exit 2; }
export OFCCL_SPIN_US=${OFCCL_SPIN_US:-0}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
case " $launchers " in
*" srun "*)
    if [ -z "${SLURM_CONF:-}" ]; then
        # shellcheck source=../test/slurm/cluster.sh
        . "$here/../test/slurm/cluster.sh"
        slurm_cluster_start || exit $?
    fi
    ;;
esac
xvars=()
for v in $(env | sed -n 's/^\(OFCCL_[A-Z0-9_]*\)=.*/\1/p'); do
    xvars+=(-x "$v")
done
out=$(mktemp "${TMPDIR:-/tmp}/launch_scale.XXXXXX")

# One run: the launcher's lines in $out; prints "skew ctx world cpu_ctx_ms cpu_world_ms wall".
one() {
    local launcher=$1 n=$2 t0 t1
    t0=$(date +%s.%N)
    case $launcher in
    srun) timeout -k 5 120 srun --mpi=pmix --overcommit -n "$n" "$bin" -g 2 >"$out" 2>&1 ;;
    mpirun) timeout -k 5 120 mpirun --oversubscribe --bind-to none "${xvars[@]}" -np "$n" \
        "$bin" -g 2 >"$out" 2>&1 ;;
    esac || { echo "launch_scale.sh: $launcher -n $n failed:" >&2; tail -5 "$out" >&2; return 1; }
    t1=$(date +%s.%N)
    /usr/bin/python3 - "$out" "$n" "$t0" "$t1" <<'EOF'
import sys
path, n, t0, t1 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
recs = {}
for line in open(path):
    f = line.split()
    if len(f) > 2 and f[0] == "boot_scale":
        d = dict(zip(f[1::2], f[2::2]))
        if d["ok"] == "1":
            recs[int(d["rank"])] = {k: float(d[k]) for k in ("start", "ctx", "world", "cpu_ctx",
                                                             "cpu_world")}
if sorted(recs) != list(range(n)):
    sys.exit(f"expected {n} ranks reporting ok, got {sorted(recs)}")
col = lambda k: [r[k] for r in recs.values()]
last = max(col("start"))
print(f"{last - min(col('start')):.4f} {max(col('ctx')) - last:.4f} {max(col('world')) - last:.4f} "
      f"{1e3 * sum(col('cpu_ctx')) / n:.3f} "
      f"{1e3 * sum(w - c for w, c in zip(col('cpu_world'), col('cpu_ctx'))) / n:.3f} {t1 - t0:.4f}")
EOF
}

status=0
echo "Medians of $reps runs, provider ${OFCCL_PROVIDER:-auto}; wall times in s (creation: from the" \
    "last rank's start until every rank has it), CPU in ms per rank (mean); load $(cut -d' ' -f1 /proc/loadavg)"
echo "launcher   N    skew  ctx-all  comm-all  cpu-ctx  cpu-comm  launcher-wall"
for launcher in $launchers; do
    for n in "$@"; do
        rows=""
        for _ in $(seq 1 "$reps"); do
            row=$(one "$launcher" "$n") || { status=1; continue; }
            rows="$rows$row
"
        done
        [ -n "$rows" ] || continue
        printf '%s' "$rows" | /usr/bin/python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
med = [statistics.median(c) for c in zip(*rows)]
print(f"{sys.argv[1]:8} {int(sys.argv[2]):3} {med[0]:7.3f} {med[1]:8.3f} {med[2]:9.3f} "
      f"{med[3]:8.1f} {med[4]:9.1f} {med[5]:14.3f}")' "$launcher" "$n"
    done
done
rm -f "$out"
exit $status

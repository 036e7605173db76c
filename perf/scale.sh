#!/bin/sh
# Scaling sweep without mpirun or PMIx: starts N ranks of ofccl_perf through
# ofccl's TCP rendezvous (OFCCL_BOOT_ROOT/RANK/SIZE on 127.0.0.1), one process
# per rank pinned to core r when there are enough cores (taskset), for
# all-gather, reduce-scatter, broadcast and weight push (senders: the first
# half of the ranks) on the local and tcp transports, and prints one table.
# The MPI references need mpirun and are not run here (perf/compare runs them).
#
# Usage: perf/scale.sh [-n ranks] [-B build dir] [-o out dir] [-b min] [-e max]
#                      [-t "local tcp"] [-k "ag rs bc push"] [-i iters] [-w warmup] [-c 0|1]
#   defaults: -n 16 -B build -o perf/out/scale -b 1K -e 64M -t "local tcp"
#             -k "ag rs bc push" -i 20 -w 5 -c 0
# Each run has a deadline of 600 s; a rank that fails or hangs fails the run,
# and the script exits non-zero if any run failed or any element was wrong.
set -u
here=$(cd "$(dirname "$0")" && pwd)
n=16 build=$here/../build out=$here/out/scale minb=1K maxb=64M
transports="local tcp" colls="ag rs bc push" iters=20 warmup=5 check=0
while getopts n:B:o:b:e:t:k:i:w:c:h opt; do
    case $opt in
    n) n=$OPTARG ;;
    B) build=$OPTARG ;;
    o) out=$OPTARG ;;
    b) minb=$OPTARG ;;
    e) maxb=$OPTARG ;;
    t) transports=$OPTARG ;;
    k) colls=$OPTARG ;;
    i) iters=$OPTARG ;;
    w) warmup=$OPTARG ;;
    c) check=$OPTARG ;;
    *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
perf=$build/perf/ofccl_perf
[ -x "$perf" ] || { echo "scale.sh: $perf not built (meson setup build && ninja -C build)"; exit 2; }
mkdir -p "$out"
rm -f "$out"/scale-*.csv "$out"/scale-*.log
cores=$(nproc 2>/dev/null || echo 1)
pin=""
if [ "$n" -le "$cores" ] && command -v taskset >/dev/null 2>&1; then pin=taskset; fi
free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
        echo $((20000 + $$ % 20000))
}
tty=0
[ -t 2 ] && tty=1
total=0
for t in $transports; do for k in $colls; do total=$((total + 1)); done; done
done_runs=0 failed=0 start=$(date +%s)

# run_one TRANSPORT COLL: N ranks, rank 0's CSV in $out/scale-TRANSPORT-COLL.csv
run_one() {
    prov=$1 coll=$2 csv=$out/scale-$1-$2.csv port=$(free_port) pids=""
    rm -f "$csv"
    for r in $(seq 0 $((n - 1))); do
        cmd="timeout -k 5 600 $perf -o $coll -b $minb -e $maxb -f 2 -n $iters -w $warmup -c $check"
        [ "$r" -eq 0 ] && cmd="$cmd -C $csv"
        [ -n "$pin" ] && cmd="taskset -c $r $cmd"
        OFCCL_BOOT_ROOT=127.0.0.1:$port OFCCL_BOOT_RANK=$r OFCCL_BOOT_SIZE=$n \
            OFCCL_PROVIDER=$prov $cmd >"$out/scale-$prov-$coll.rank$r.log" 2>&1 &
        pids="$pids $!"
    done
    status=0
    for p in $pids; do wait "$p" || status=1; done
    if [ $status -ne 0 ]; then
        echo "scale.sh: $coll on $prov with $n ranks FAILED (logs: $out/scale-$prov-$coll.rank*.log)"
        failed=1
    fi
    done_runs=$((done_runs + 1))
    if [ $tty -eq 1 ]; then
        el=$(($(date +%s) - start))
        printf '\rscale.sh: %d/%d runs done, about %d s left   ' "$done_runs" "$total" \
            $((el * (total - done_runs) / done_runs)) >&2
    fi
}

echo "# perf/scale.sh: $n ranks through the TCP rendezvous (no mpirun, no PMIx), $cores cores" \
    "$([ -n "$pin" ] && echo ", rank r pinned to core r" || echo ", not pinned")"
echo "# ofccl_perf -b $minb -e $maxb -f 2 -n $iters -w $warmup -c $check; bc root 0; push:" \
    "ranks 0..$((n / 2 - 1)) send, the rest receive, 4 MiB buckets"
echo "# MPI references (MPI_Allgather, MPI_Reduce_scatter_block, MPI_Bcast, gather+bcast):" \
    "not run: they need mpirun; perf/compare runs them"
for t in $transports; do
    for k in $colls; do run_one "$t" "$k"; done
done
[ $tty -eq 1 ] && printf '\n' >&2
# One table: a row per size, a busbw column per (collective, transport).
awk -F, -v cols="$colls" -v provs="$transports" '
FNR == 1 { next }
{
    split(FILENAME, p, "scale-"); split(p[length(p)], q, "[-.]")
    # Rows by position in the sweep: all-gather and reduce-scatter round the
    # size down to whole elements per rank; the row shows the largest.
    i = FNR - 1; key = $8 "/" q[1]; bw[i, key] = $15; wrong += $16
    if (!(i in size) || $9 + 0 > size[i]) size[i] = $9 + 0
    if (i > rows) rows = i
}
END {
    nk = split(cols, K, " "); np = split(provs, P, " "); hdr = sprintf("%12s", "size(B)")
    for (i = 1; i <= nk; i++) for (j = 1; j <= np; j++) {
        c[++m] = K[i] "/" P[j]; hdr = hdr sprintf(" %11s", K[i] "/" P[j])
    }
    print "# busbw GB/s (ag, rs: algbw*(n-1)/n; bc, push: algbw, size = bytes each receiver gets)"
    print hdr
    for (i = 1; i <= rows; i++) {
        line = sprintf("%12d", size[i])
        for (x = 1; x <= m; x++) line = line sprintf(" %11s", ((i, c[x]) in bw) ? bw[i, c[x]] : "-")
        print line
    }
    printf "# %d wrong elements\n", wrong
}' "$out"/scale-*.csv | tee "$out/scale-table.txt"
echo "# CSVs and rank logs: $out"
exit $failed

#!/bin/sh
# Communicator creation under mpirun (Open MPI's PMIx server), with the setup
# records collected at creation (OFCCL_BOOT_EXCHANGE=all) and fetched on first
# use (lazy), at each rank count: one line per point from perf/comm_create
# (median of the slowest rank's times over the repetitions).
# Usage: perf/comm_create.sh [-p provider] [-a algo] [-r reps] [-b comm_create] [N ...]
#   N   rank counts (default 2 4 8 16); -p OFCCL_PROVIDER (default tcp);
#   -a  OFCCL_ALGO_AG (default ring: two peers per rank); -r repetitions (default 9)
set -u
here=$(cd "$(dirname "$0")" && pwd)
prov=tcp
algo=ring
reps=9
bin="$here/../build/perf/comm_create"
while getopts p:a:r:b: opt; do
    case $opt in
    p) prov=$OPTARG ;;
    a) algo=$OPTARG ;;
    r) reps=$OPTARG ;;
    b) bin=$OPTARG ;;
    *) sed -n '2,9p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- 2 4 8 16
[ -x "$bin" ] || { echo "comm_create.sh: no program at $bin (build first, or pass -b)" >&2; exit 2; }
. "$here/../scripts/mpienv.sh"
status=0
for n in "$@"; do
    for mode in all lazy; do
        OFCCL_PROVIDER=$prov OFCCL_ALGO_AG=$algo OFCCL_BOOT_EXCHANGE=$mode OFCCL_SPIN_US=${OFCCL_SPIN_US:-0} \
            timeout -k 5 300 mpirun --oversubscribe --bind-to none -np "$n" \
            -x OFCCL_PROVIDER -x OFCCL_ALGO_AG -x OFCCL_BOOT_EXCHANGE -x OFCCL_SPIN_US \
            "$bin" "$reps" || status=1
    done
done
exit $status

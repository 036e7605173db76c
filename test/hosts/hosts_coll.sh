#!/bin/bash
# A simulated cluster of H hosts x RPH ranks (cluster.sh): first the ranks
# check the host structure ofccl sees (test_hosts), then the collective
# checker runs across the hosts, every element compared (test_coll), and,
# given test_peers, each peer's transport and the bytes each one carried, and,
# given test_bcast, broadcasts from every root with each OFCCL_ALGO_BC value
# listed (default "hier auto"; auto is hierarchical past the eager size), every
# byte compared.
# Usage: hosts_coll.sh H RPH test_hosts test_coll [seed] [rounds] [test_peers] [test_bcast]
#          [bcast_algos]
# Exits 77 (skipped, reason printed) where namespaces cannot be created.
set -u
hosts=$1 rph=$2 check=$3 coll=$4 seed=${5:-1} rounds=${6:-2} peers=${7:-} bcast=${8:-}
bcast_algos=${9:-hier auto}
. "$(dirname "$0")/cluster.sh"
cluster_up "$hosts" || exit $?
echo "== $hosts hosts x $rph ranks: host structure"
cluster_run "$rph" 60 "$check" "$rph" || { echo "host structure: FAILED"; exit 1; }
if [ -n "$peers" ]; then
    for run in "auto direct" "fabric direct" "auto hier"; do
        set -- $run
        echo "== transport per peer: OFCCL_PEER_TRANSPORT=$1, OFCCL_ALGO_AG=OFCCL_ALGO_RS=$2"
        cluster_run "$rph" 60 "$peers" "$rph" "$1" "$2" || { echo "peers ($run): FAILED"; exit 1; }
        grep -ho 'provider .*' "$CLUSTER_DIR/rank0.log"
    done
fi
echo "== collectives, seed $seed, $rounds rounds"
start=$(date +%s)
cluster_run "$rph" 100 "$coll" "$seed" "$rounds" || { echo "collectives: FAILED"; exit 1; }
grep -h '^coll:' "$CLUSTER_DIR/rank0.log"
if [ -n "$bcast" ]; then
    for algo in $bcast_algos; do
        echo "== broadcast from every root: OFCCL_ALGO_BC=$algo"
        OFCCL_ALGO_BC=$algo cluster_run "$rph" 100 "$bcast" || { echo "broadcast ($algo): FAILED"; exit 1; }
        grep -h '^bcast:' "$CLUSTER_DIR/rank0.log"
    done
fi
echo "$hosts hosts x $rph ranks: structure and collectives exact in $(($(date +%s) - start)) s"

#!/bin/bash
# One host of a simulated cluster cut off while the ranks run collectives:
# once every rank reports collectives running, nftables on the cut host drops
# every packet of its link, and every rank must end with TIMEOUT naming the
# ranks across the cut (test_host_partition checks each rank's message).
# Usage: partition.sh H RPH CUT_HOST test_host_partition
# Exits 77 (skipped, reason printed) where namespaces or nftables are missing.
set -u
hosts=$1 rph=$2 cut=$3 prog=$4
. "$(dirname "$0")/cluster.sh"
command -v nft >/dev/null || { echo "nftables (nft) not installed: skipped"; exit 77; }
cluster_up "$hosts" || exit $?
if ! cluster_in 0 nft add table inet ofccl_probe 2>/dev/null; then
    echo "nftables unusable in a network namespace: skipped"; exit 77
fi
cluster_start "$rph" 100 "$prog" "$rph" "$cut"
n=$((hosts * rph))
# Bounded: up to 60 s for every rank to get going (slow on a loaded machine).
for _ in $(seq 600); do
    [ "$(cat "$CLUSTER_DIR"/rank*.log 2>/dev/null | grep -c 'collectives running')" -ge "$n" ] && break
    sleep 0.1
done
if cluster_partition "$cut"; then
    echo "host$cut cut off at $(date +%T)"
else
    echo "could not cut host$cut off"
fi
if cluster_wait; then
    grep -h "good rounds" "$CLUSTER_DIR"/rank*.log
    echo "partition of host$cut: every rank reported TIMEOUT naming the ranks across the cut"
    exit 0
fi
echo "partition of host$cut: FAILED"
exit 1

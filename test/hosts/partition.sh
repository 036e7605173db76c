#!/bin/bash
# One host of a simulated cluster cut off while the ranks run collectives:
# nftables on the cut host drops every packet of its link, and every rank must
# end with TIMEOUT naming ranks on their hosts (test_host_partition checks
# each rank's message; its comment says what each mode expects).
#   between: once every rank reports collectives running, ask them to pause
#            ("stop"), cut once all have paused, then let them go on ("go");
#   any:     cut as soon as every rank reports collectives running.
# Usage: partition.sh H RPH CUT_HOST between|any test_host_partition
# Exits 77 (skipped, reason printed) where namespaces or nftables are missing.
set -u
hosts=$1 rph=$2 cut=$3 mode=$4 prog=$5
. "$(dirname "$0")/cluster.sh"
command -v nft >/dev/null || { echo "nftables (nft) not installed: skipped"; exit 77; }
cluster_up "$hosts" || exit $?
if ! cluster_in 0 nft add table inet ofccl_probe 2>/dev/null; then
    echo "nftables unusable in a network namespace: skipped"; exit 77
fi
n=$((hosts * rph))

# Bounded wait (60 s: slow on a loaded machine) until every rank log has $1.
all_say() {
    local _
    for _ in $(seq 600); do
        [ "$(cat "$CLUSTER_DIR"/rank*.log 2>/dev/null | grep -c "$1")" -ge "$n" ] && return 0
        sleep 0.1
    done
    echo "not every rank printed '$1' within 60 s"
    return 1
}

cluster_start "$rph" 100 "$prog" "$rph" "$cut" "$mode"
all_say 'collectives running'
if [ "$mode" = between ]; then
    : > "$CLUSTER_DIR/stop"
    all_say 'paused after round'
fi
if cluster_partition "$cut"; then
    echo "host$cut cut off at $(date +%T.%N | cut -c1-12)"
else
    echo "could not cut host$cut off"
fi
: > "$CLUSTER_DIR/go"
if cluster_wait; then
    grep -h "good rounds" "$CLUSTER_DIR"/rank*.log
    echo "partition of host$cut ($mode): every rank reported TIMEOUT naming ranks on their hosts"
    exit 0
fi
echo "partition of host$cut ($mode): FAILED"
exit 1

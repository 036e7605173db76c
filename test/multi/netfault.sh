#!/bin/sh
# Network faults over tcp inside a private network namespace (its loopback
# only): nftables drops 5% of the packets on libfabric's data ports (pinned with
# FI_TCP_PORT_LOW/HIGH_RANGE; the TCP bootstrap uses another port), and the
# collectives must still be exact; then a partition of the data ports, and each
# rank must report TIMEOUT naming its peer within the deadline plus a margin.
# Usage: netfault.sh test_coll test_partition run_tcpboot.sh
# Exits 77 (skipped) where namespaces or nftables are not available.
set -u
coll=$1; part=$2; boot=$3
ns=ofccl-nf-$$
if ! ip netns add "$ns" 2>/dev/null; then
    echo "network namespaces unavailable (not root?): skipped"; exit 77
fi
trap 'ip netns del "$ns" 2>/dev/null' EXIT
inns() { ip netns exec "$ns" "$@"; }
inns ip link set lo up
if ! inns nft add table inet ofccl 2>/dev/null ||
   ! inns nft 'add chain inet ofccl in { type filter hook input priority 0; }'; then
    echo "nftables unavailable: skipped"; exit 77
fi
export FI_TCP_PORT_LOW_RANGE=41000 FI_TCP_PORT_HIGH_RANGE=41999 FI_TCP_IFACE=lo
export OFCCL_PROVIDER=tcp OFCCL_TEST_BOOT_PORT=29500 OFCCL_TIMEOUT_MS=60000
status=0

echo "== 5% random loss on the data ports"
inns nft 'add rule inet ofccl in tcp dport 41000-41999 numgen random mod 100 < 5 counter drop'
inns nft 'add rule inet ofccl in tcp sport 41000-41999 numgen random mod 100 < 5 counter drop'
start=$(date +%s)
if inns "$boot" 2 "$coll" 11 1; then
    echo "loss: collectives exact in $(( $(date +%s) - start )) s"
else
    echo "loss: FAILED"; status=1
fi
inns nft list chain inet ofccl in | grep -o 'packets [0-9]*' | head -2 | sed 's/^/dropped /'

echo "== partition of the data ports after ~2 s"
inns nft flush chain inet ofccl in
( sleep 2
  inns nft 'add rule inet ofccl in tcp dport 41000-41999 drop'
  inns nft 'add rule inet ofccl in tcp sport 41000-41999 drop' ) &
if inns "$boot" 2 "$part"; then
    echo "partition: both ranks reported TIMEOUT naming the peer"
else
    echo "partition: FAILED"; status=1
fi
wait
if [ $status -eq 0 ]; then echo "2 passed, 0 failed"; else echo "FAILED"; fi
exit $status

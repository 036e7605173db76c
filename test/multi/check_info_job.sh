#!/bin/sh
# ofccl_info -j on 2 ranks through the TCP rendezvous: rank 0 prints the
# hosts with their ranks, the transport per peer class, the chooser's
# algorithm per collective and size, the cost model's agreed link constants
# and predicted times, and every setting with its source
# (here one from the environment and one passed as an API setting); then on
# two fake hosts of two ranks, the hierarchical choices.
# Usage: check_info_job.sh run_tcpboot.sh ofccl_info
set -u
out=$(mktemp)
trap 'rm -f "$out"' EXIT
OFCCL_EAGER_BYTES=8K "$1" 2 "$2" -j --set DEPTH=3 > "$out" || { cat "$out"; exit 1; }
fail=0
expect() {
    if ! grep -Eq "$1" "$out"; then
        echo "FAIL: no line matching: $1"
        fail=1
    fi
}
expect '^Hosts: 1, ranks: 2$'
expect '^  [^ ]+ +2 ranks per host: 0-1$'
expect '^Transport per peer class'
expect '^  same host   \(  1 peer\): [a-z]'
expect '^Algorithm the chooser picks for 2 ranks'
expect '^  256 +eager +eager +eager'
expect '^  1048576 +(direct|take) +(direct|pull) +(direct|pull|chain)'
expect '^Cost model \(agreed'
expect '^  local +alpha +0\.20 us +beta +10\.00 GB/s +default'
expect '^  fabric +alpha +[0-9.]+ us +beta +[0-9.]+ GB/s'
expect '^  all-gather +1048576 +[0-9.]+ +[0-9.]+ +- +- +direct$'
expect '^  cost model: local .*all-gather direct'
expect '^  OFCCL_DEPTH +3 +API$'
expect '^  OFCCL_EAGER_BYTES +8K +environment$'
expect '^  OFCCL_CHUNK_BYTES +512K +default$'
[ "$fail" = 0 ] || cat "$out"
# Two fake hosts of two ranks (OFCCL_HOST_ID): past the eager size the
# all-gather and the broadcast go hierarchical.
OFCCL_TEST_HOST_RPH=2 OFCCL_IFACE=lo "$1" 4 "$2" -j > "$out" 2>/dev/null || { cat "$out"; exit 1; }
expect '^Algorithm the chooser picks for 4 ranks'
expect '^  256 +eager +eager +eager'
expect '^  1048576 +hier +[a-z]+ +hier'
[ "$fail" = 0 ] || cat "$out"
[ "$fail" = 0 ] && echo "1 passed, 0 failed"
exit $fail

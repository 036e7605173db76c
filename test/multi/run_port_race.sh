#!/bin/sh
# The same job RUNS times through the TCP rendezvous, with tcp's listening
# ports confined to a few (FI_TCP_PORT_LOW_RANGE / HIGH_RANGE, from the test's
# environment): two endpoints often pick one port, and libfabric's tcp
# binds it twice and fails to listen (EADDRINUSE). ofccl opens such an
# endpoint again; every run must pass. Prints how many endpoints did.
# Usage: run_port_race.sh RUNS run_tcpboot.sh N program [args...]
set -u
runs=$1; shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=0
for i in $(seq 1 "$runs"); do
    if ! OFCCL_LOG_LEVEL=info "$@" >>"$log" 2>&1; then
        failed=$((failed + 1))
        echo "run $i failed:"
        grep -i "in use\|error" "$log" | tail -3
    fi
done
echo "$runs runs, $failed failed; endpoints opened again: $(grep -c 'opening it again' "$log")"
[ "$failed" -eq 0 ]

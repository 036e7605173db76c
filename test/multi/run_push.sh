#!/bin/sh
# Two separately launched jobs that meet through the TCP rendezvous: a trainer
# group of 2 and a rollout group of N, started as two batches of processes.
# With "secret", both jobs share a job secret (OFCCL_BOOT_SECRET_FILE).
# Usage: run_push.sh <rollout ranks> <test_push> <ok|death> [secret]
set -u
n=$1 prog=$2 mode=$3
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export OFCCL_BOOT_ROOT=127.0.0.1:$port OFCCL_BOOT_GROUPS=trainer:2,rollout:$n
if [ "${4:-}" = secret ]; then
    OFCCL_BOOT_SECRET_FILE=$(mktemp) # mode 0600
    trap 'rm -f "$OFCCL_BOOT_SECRET_FILE"' EXIT
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$OFCCL_BOOT_SECRET_FILE"
    export OFCCL_BOOT_SECRET_FILE
fi
pids=""
for r in 0 1; do
    OFCCL_BOOT_GROUP=trainer OFCCL_BOOT_RANK=$r timeout -k 5 120 "$prog" "$mode" &
    pids="$pids $!"
done
sleep 0.2 # the second job starts a little later
for r in $(seq 0 $((n - 1))); do
    OFCCL_BOOT_GROUP=rollout OFCCL_BOOT_RANK=$r timeout -k 5 120 "$prog" "$mode" &
    pids="$pids $!"
done
status=0 i=0
for p in $pids; do
    wait "$p"
    rc=$?
    # In the death scenario rank 1 (the second trainer) kills itself.
    if [ "$mode" = death ] && [ $i -eq 1 ]; then
        [ $rc -eq 137 ] || { echo "rank 1 exited $rc, expected SIGKILL"; status=1; }
    elif [ $rc -ne 0 ]; then
        echo "rank $i exited $rc"; status=1
    fi
    i=$((i + 1))
done
exit $status

#!/bin/sh
# Two separately launched jobs that meet through the TCP rendezvous: a trainer
# group of 2 and a rollout group of N, started as two batches of processes.
# With "secret", both jobs share a job secret (OFCCL_BOOT_SECRET_FILE), every
# process logs at the trace level and writes a trace (OFCCL_TRACE), and the
# secret must be in none of them.
# Usage: run_push.sh <rollout ranks> <test_push> <ok|death> [secret]
set -u
n=$1 prog=$2 mode=$3
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export OFCCL_BOOT_ROOT=127.0.0.1:$port OFCCL_BOOT_GROUPS=trainer:2,rollout:$n
logs=/dev/stderr
if [ "${4:-}" = secret ]; then
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    OFCCL_BOOT_SECRET_FILE=$dir/secret OFCCL_TRACE=$dir OFCCL_LOG_LEVEL=trace logs=$dir/log
    (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$OFCCL_BOOT_SECRET_FILE")
    export OFCCL_BOOT_SECRET_FILE OFCCL_TRACE OFCCL_LOG_LEVEL
fi
pids=""
for r in 0 1; do
    OFCCL_BOOT_GROUP=trainer OFCCL_BOOT_RANK=$r timeout -k 5 120 "$prog" "$mode" 2>>"$logs" &
    pids="$pids $!"
done
sleep 0.2 # the second job starts a little later
for r in $(seq 0 $((n - 1))); do
    OFCCL_BOOT_GROUP=rollout OFCCL_BOOT_RANK=$r timeout -k 5 120 "$prog" "$mode" 2>>"$logs" &
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
if [ "${4:-}" = secret ]; then
    ls "$dir"/ofccl-trace-* >/dev/null 2>&1 || { echo "no trace file written"; status=1; }
    [ -s "$dir/log" ] || { echo "no log written"; status=1; }
    if grep -rqF "$(cat "$OFCCL_BOOT_SECRET_FILE")" --exclude=secret "$dir"; then
        echo "the job secret is in a log or a trace file"; status=1
    fi
    [ $status -eq 0 ] || tail -20 "$dir/log"
fi
exit $status

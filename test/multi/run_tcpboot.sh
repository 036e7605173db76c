#!/bin/sh
# Start N ranks of a program with a plain shell loop through ofccl's TCP
# rendezvous bootstrap (no mpirun), wait for all of them under a deadline, and
# fail if any rank fails or hangs.
# Usage: run_tcpboot.sh N program [args...]
# With OFCCL_TEST_HOST_RPH=k set, ranks are placed on simulated hosts of k
# ranks each (OFCCL_HOST_ID fake-host0, fake-host1, ...), host-major. With
# OFCCL_TEST_UPPER_ENV=NAME=value set, ranks n/2..n-1 also get that variable
# (ranks that disagree on a setting).
set -u
n=$1; shift
port=${OFCCL_TEST_BOOT_PORT:-$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
pids=""
for r in $(seq 0 $((n - 1))); do
    if [ -n "${OFCCL_TEST_HOST_RPH:-}" ]; then
        export OFCCL_HOST_ID="fake-host$((r / OFCCL_TEST_HOST_RPH))"
    fi
    if [ -n "${OFCCL_TEST_UPPER_ENV:-}" ] && [ "$r" -ge $((n / 2)) ]; then
        export "${OFCCL_TEST_UPPER_ENV?}"
    fi
    OFCCL_BOOT_ROOT=127.0.0.1:$port OFCCL_BOOT_RANK=$r OFCCL_BOOT_SIZE=$n \
        timeout -k 5 100 "$@" &
    pids="$pids $!"
done
status=0
for p in $pids; do
    wait "$p" || status=1
done
exit $status

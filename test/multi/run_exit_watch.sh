#!/bin/sh
# Rank 1 of 3 SIGKILLed mid-collective under `mpirun --enable-recovery`
# (test_pmix_event). With --enable-recovery mpirun exits 0 even when a rank
# exits non-zero, so the survivors' verdicts are read from their output: both
# must print "rank N: ok".
# Usage: run_exit_watch.sh <mpirun> <test_pmix_event> <mode> <deadline ms>
set -u
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$1" --oversubscribe --bind-to none --enable-recovery -x OFCCL_PROVIDER -x OFCCL_AG_TAKE -np 3 "$2" "$3" "$4" \
    >"$out" 2>&1
rc=$?
cat "$out"
if grep -q '^rank 0: ok$' "$out" && grep -q '^rank 2: ok$' "$out"; then
    exit 0
fi
echo "run_exit_watch: a survivor did not report ok (mpirun exited with $rc)"
exit 1

#!/bin/sh
# One rank of NP SIGKILLs itself right after a completed barrier or
# all-gather (test_settled pmix kill) under `mpirun --enable-recovery`, which
# exits 0 whatever the ranks did: the survivors' verdicts are read from their
# output. Every survivor must print "rank N: ok" and none "FAILED".
# Usage: run_settled_kill.sh <mpirun> <test_settled> <np>
set -u
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$1" --oversubscribe --bind-to none --enable-recovery -x OFCCL_PROVIDER -np "$3" "$2" pmix kill \
    >"$out" 2>&1
rc=$?
cat "$out"
ok=$(grep -c '^rank [0-9]*: ok$' "$out")
if [ "$ok" -eq $(($3 - 1)) ] && ! grep -q 'FAILED' "$out"; then
    exit 0
fi
echo "run_settled_kill: $ok survivors of $(($3 - 1)) reported ok (mpirun exited with $rc)"
exit 1

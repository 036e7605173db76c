#!/bin/bash
# ofccl under Slurm's srun: start a private one-node cluster (cluster.sh), run
# the multi-rank programs as job steps with Slurm's PMIx server, check what a
# step without PMIx is told, stop the cluster. One line per case, then a
# summary; exit 0 when every case passed, 1 when one failed, 77 (skip) when
# the cluster cannot start here (the reason is printed).
# Usage: run_srun.sh BUILD_DIR   (a meson build holding test/multi and perf)
set -u
build=$1
here=$(cd "$(dirname "$0")" && pwd)
multi=$build/test/multi
# shellcheck source=cluster.sh
. "$here/cluster.sh"

# The node has this machine's CPUs; up to 4 tasks share them (--overcommit).
srun_args=(--overcommit --kill-on-bad-exit=0 --time=2)
step_timeout=${OFSLURM_STEP_TIMEOUT:-60}
pass=0
fail=0
out=""

# step ENV... -- SRUN-ARGS...: runs srun with the case's environment and
# keeps its output (stdout and stderr, task-labelled) in $out; returns srun's status.
step() {
    local envs=() rc t0
    while [ "$1" != -- ]; do
        envs+=("$1")
        shift
    done
    shift
    t0=$SECONDS
    out=$(env "${envs[@]}" timeout -k 5 "$step_timeout" srun "${srun_args[@]}" --label "$@" 2>&1)
    rc=$?
    step_s=$((SECONDS - t0))
    [ $step_s -ge "$step_timeout" ] && out="$out
(no result after ${step_timeout}s: the step hung)"
    return $rc
}

report() {
    local name=$1 ok=$2 why=${3:-}
    if [ "$ok" = 1 ]; then
        pass=$((pass + 1))
        echo "ok   $name (${step_s}s)"
    else
        fail=$((fail + 1))
        echo "FAIL $name (${step_s}s): $why"
        echo "$out" | tail -n 25 | sed 's/^/    /'
    fi
}

# A step that must exit 0 and print `want` (a fixed string) at least `count` times.
expect_ok() {
    local name=$1 want=$2 count=$3 n
    shift 3
    if ! step "$@"; then
        report "$name" 0 "srun exited non-zero"
        return
    fi
    n=$(grep -cF -- "$want" <<<"$out")
    if [ "$n" -lt "$count" ]; then
        report "$name" 0 "\"$want\" printed $n times, expected $count"
        return
    fi
    report "$name" 1
}

slurm_cluster_start || exit $?
t_start=$SECONDS

# The PMIx bootstrap itself (built where mpirun is). Debian's mpi_pmix plugin is
# mpi_pmix_v4 under another name; both names are launched.
if [ -x "$multi/test_boot_pmix" ]; then
    expect_ok boot-pmix-np4 "boot-pmix: 5 passed, 0 failed" 4 -- --mpi=pmix -n 4 \
        "$multi/test_boot_pmix" 4
    expect_ok boot-pmix_v4-np2 "boot-pmix: 5 passed, 0 failed" 2 -- --mpi=pmix_v4 -n 2 \
        "$multi/test_boot_pmix" 2
fi
# Flat and bucketed all-gather / reduce-scatter, checked element by element.
for c in local:2:direct shm:3:ring tcp:4:direct; do
    IFS=: read -r prov np algo <<<"$c"
    expect_ok "coll-$prov-$algo-np$np" "0 failed" "$np" OFCCL_PROVIDER="$prov" \
        OFCCL_ALGO_AG="$algo" OFCCL_ALGO_RS="$algo" OFCCL_CHUNK_BYTES=64K -- --mpi=pmix \
        -n "$np" "$multi/test_coll" 7 1
done
expect_ok split-shm-np4 "split: 4 passed, 0 failed" 4 OFCCL_PROVIDER=shm -- --mpi=pmix -n 4 \
    "$multi/test_split"
expect_ok bcast-shm-np3 "0 failed" 3 OFCCL_PROVIDER=shm -- --mpi=pmix -n 3 "$multi/test_bcast"
expect_ok push-local-np4 "push: 4 passed, 0 failed" 4 OFCCL_PROVIDER=local -- --mpi=pmix -n 4 \
    "$multi/test_push" ok
# The demo (README's main job) as a user would start it under Slurm.
expect_ok demo-tcp-np4 "# all elements correct on rank 0" 1 OFCCL_PROVIDER=tcp -- --mpi=pmix \
    -n 4 "$build/perf/ofccl_demo" 1048576 2

# A rank SIGKILLs itself before a push: Slurm reports that task killed, and every
# other task returns 0 after its own check of the documented error (REMOTE_ERROR
# naming rank 1 on local), well before the step's time limit.
remote_error="a peer failed or became unreachable" # ofccl_strerror(OFCCL_ERR_REMOTE_ERROR)
if step OFCCL_PROVIDER=local -- --mpi=pmix -n 4 "$multi/test_push" death; then
    report push-death-local-np4 0 "srun exited 0 although rank 1 was killed"
elif ! grep -q "task 1: Killed" <<<"$out"; then
    report push-death-local-np4 0 "srun did not report task 1 killed"
elif grep -q "Exited with exit code" <<<"$out"; then
    report push-death-local-np4 0 "a surviving task failed its check"
elif [ "$(grep -cE "^[23]: rank [23]: push with a dead sender: $remote_error: .*rank 1 .*has exited" \
    <<<"$out")" -ne 2 ]; then
    report push-death-local-np4 0 "the receivers did not report REMOTE_ERROR naming rank 1"
else
    report push-death-local-np4 1
fi

# A step without a PMIx server: every rank fails at once with the advice to use
# --mpi=pmix (--mpi=none) or the note that ofccl needs PMIx (--mpi=pmi2).
boot_error="bootstrap (rank discovery / key exchange) error" # ofccl_strerror(OFCCL_ERR_BOOTSTRAP)
for c in "none:started by Slurm without PMIx: use \`srun --mpi=pmix\`" \
    "pmi2:a PMI-1/PMI-2 launcher (e.g. MPICH hydra, srun --mpi=pmi2): ofccl needs a PMIx server"; do
    mpi=${c%%:*}
    want=${c#*:}
    name=no-pmix-$mpi-np2
    if step -- --mpi="$mpi" -n 2 "$build/perf/ofccl_demo" 4096 1; then
        report "$name" 0 "the step succeeded without PMIx"
    elif [ "$(grep -F "$want" <<<"$out" | grep -c "^[01]: ofccl_ctx_create: $boot_error: ")" -ne 2 ]; then
        report "$name" 0 "no BOOTSTRAP error with \"$want\" from both tasks"
    else
        report "$name" 1
    fi
done

echo "slurm: $pass passed, $fail failed; steps took $((SECONDS - t_start))s after the cluster started"
slurm_cluster_stop
trap - EXIT
[ $fail -eq 0 ] && [ $pass -gt 0 ]

#!/bin/sh
# Install what is missing, build, and run the main job: several ranks on this
# machine over tcp (loopback) via mpirun, with a correctness check and a
# bandwidth table. NP and OFCCL_* variables may be overridden.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
. ./scripts/mpienv.sh
np=${NP:-4}
export OFCCL_PROVIDER=${OFCCL_PROVIDER:-tcp}
exec timeout -k 10 600 mpirun --oversubscribe --bind-to none -np "$np" -x OFCCL_PROVIDER \
    build/perf/ofccl_demo "$@"

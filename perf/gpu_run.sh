#!/bin/sh
# Everything GPU in one go, on a machine with GPUs, from a bundle made here by
#   scripts/bundle.sh build-dev build/test/gpu/test_gpu build/perf/gpu_perf \
#       build/perf/gpu_ceiling build/libofccl.so.0
# (the machine needs no ofccl dependency installed; torch and NCCL for the
# Python parts). Runs the C gpu suite at 2 and all GPUs, the Python GPU tests,
# ofccl_perf-style GPU figures (copy kernel and copy engines), the ceilings,
# and the side-by-side benchmark against NCCL; logs go to OUT_DIR.
# Usage: perf/gpu_run.sh BUNDLE OUT_DIR [parts...]  (parts: c py perf ceiling bench; all when none)
set -u
b=$(cd "$1" && pwd) out=$2
shift 2
parts=${*:-c py perf ceiling bench}
mkdir -p "$out"
export LD_LIBRARY_PATH="$b/lib" OFCCL_LIBRARY="$b/lib/libofccl.so.0" OFCCL_LOG_LEVEL=warn
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
n=$(nvidia-smi -L | wc -l)
has() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
if has c; then
    for np in 2 "$n"; do
        timeout 400 "$b/bin/test_gpu" "$np" >"$out/test_gpu_np$np.txt" 2>&1
        echo "test_gpu np$np: exit $? ($(grep -c 'passed$' "$out/test_gpu_np$np.txt") scenarios passed)"
        grep -E "FAILED|rank [0-9]+ (killed|exited)|STILL" "$out/test_gpu_np$np.txt" | head -5
    done
fi
if has py; then
    python3 -c 'import pytest' 2>/dev/null || export PYTHONPATH="$b/py${PYTHONPATH:+:$PYTHONPATH}"
    PYTHONPATH="$(pwd)/python:$(pwd)/test/python:${PYTHONPATH:-}" timeout 600 python3 -m pytest -q \
        -p no:cacheprovider test/python/test_gpu.py >"$out/pytest_gpu.txt" 2>&1
    echo "pytest test_gpu.py: exit $?"; tail -3 "$out/pytest_gpu.txt"
fi
if has perf; then
    for s in 16 0; do
        timeout 200 "$b/bin/gpu_perf" -n "$n" -b 1M -e 512M -i 20 -s $s >"$out/gpu_perf_sms$s.txt" 2>&1
        cat "$out/gpu_perf_sms$s.txt"
    done
fi
if has ceiling; then
    timeout 200 "$b/bin/gpu_ceiling" -n "$n" -b 1M -e 512M -r 10 -s 0,16,32 >"$out/ceiling.txt" 2>&1
    tail -13 "$out/ceiling.txt"
fi
if has bench; then
    PYTHONPATH="$(pwd)/python" PYTHONUNBUFFERED=1 timeout 500 python3 perf/gpu_bench.py \
        --libs nccl,ofccl --ofccl "$b/lib" --begin 1M --end 512M --iters 10 --ops ag,bc,rs \
        --json "$out/bench.json" >"$out/bench.txt" 2>&1
    echo "gpu_bench: exit $?"; tail -16 "$out/bench.txt"
fi

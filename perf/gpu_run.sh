#!/bin/sh
# Everything GPU in one go, on a machine with GPUs, from a bundle made here by
#   scripts/bundle.sh build-dev build/test/gpu/test_gpu build/perf/gpu_perf \
#       build/perf/gpu_ceiling build/libofccl.so.0
# (the machine needs no ofccl dependency installed; torch and NCCL for the
# Python parts). Runs the C gpu suite at 2 and all GPUs, the Python GPU tests,
# ofccl_perf-style GPU figures (copy kernel and copy engines), the ceilings,
# and the side-by-side benchmark against NCCL; logs go to OUT_DIR.
# On a machine of one GPU the ranks share it (OFCCL_TEST_GPU_SHARED=1, 2 and 4
# ranks) under MPS, started here and stopped at the end, so that their kernels
# run together. Parts for one GPU:
#   watch     test_gpu's failure scenarios at 3 ranks (the detection times)
#   hosts     two simulated hosts (OFCCL_HOST_ID, tcp): gpu_perf staged against
#             host memory, and gpu_overlap.py (post time, overlap with a
#             matmul, per-call cost)
#   engine    the one host's GPU collectives in the host engine
#             (OFCCL_GPU_PEER_CLASS=0: the local transport writes peers' GPU
#             memory by CUDA IPC) against the GPU peer class, in one run:
#             test_gpu's scenarios both ways, gpu_perf plain and pool at 2
#             and 4 ranks, and the per-call cost of an 8 KiB all-gather
#   hmem      test_gpu hmem / hmem-need with a CUDA-enabled libfabric that the
#             bundle carries in BUNDLE/cudafab: shm takes GPU memory there,
#             but copies it with CUDA calls of its own, so ofccl stages it
#             (auto) or refuses it saying so (OFCCL_GPU_FABRIC=hmem)
# Usage: perf/gpu_run.sh BUNDLE OUT_DIR [parts...]
#   (parts: c py perf ceiling bench watch hosts engine hmem; all of the first five when none)
set -u
b=$(cd "$1" && pwd) out=$2
shift 2
parts=${*:-c py perf ceiling bench}
mkdir -p "$out"
export LD_LIBRARY_PATH="$b/lib" OFCCL_LIBRARY="$b/lib/libofccl.so.0" OFCCL_LOG_LEVEL=warn
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
n=$(nvidia-smi -L | wc -l)
if [ "$n" -lt 2 ]; then
    export OFCCL_TEST_GPU_SHARED=1
    nvidia-cuda-mps-control -d 2>/dev/null && trap 'echo quit | nvidia-cuda-mps-control' EXIT
    n=4
fi
has() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
if has c; then
    for np in 2 "$n"; do
        timeout 400 "$b/bin/test_gpu" "$np" >"$out/test_gpu_np$np.txt" 2>&1
        echo "test_gpu np$np: exit $? ($(grep -c 'passed$' "$out/test_gpu_np$np.txt") scenarios passed)"
        grep -E "FAILED|rank [0-9]+ (killed|exited)|STILL" "$out/test_gpu_np$np.txt" | head -5
    done
fi
if has watch; then
    timeout 300 "$b/bin/test_gpu" 3 watch-kill-ag watch-kill-rs watch-kill-bc watch-kill-bucket \
        watch-kill-push watch-exit-ag watch-exit-rs watch-exit-bc watch-exit-bucket \
        watch-exit-push watch-stall watch-abort watch-kill-staged watch-stall-staged \
        >"$out/watch_np3.txt" 2>&1
    echo "test_gpu watch-*: exit $? ($(grep -c 'passed, 0 failed' "$out/watch_np3.txt") passed)"
    grep -E "stream released after" "$out/watch_np3.txt" | cut -c1-100
fi
if has hosts; then
    for m in plain host; do
        timeout 120 "$b/bin/gpu_perf" -n 2 -H 2 -m $m -b 1M -e 256M -i 5 >"$out/gpu_perf_H2_$m.txt" 2>&1
        tail -10 "$out/gpu_perf_H2_$m.txt"
    done
    for np in 2 4; do
        PYTHONPATH="$(pwd)/python" PYTHONUNBUFFERED=1 timeout 200 python3 perf/gpu_overlap.py \
            --ranks $np --hosts 2 --size 64M --json "$out/overlap_np$np.json" \
            >"$out/overlap_np$np.txt" 2>&1
        echo "gpu_overlap --ranks $np --hosts 2: exit $?"; tail -6 "$out/overlap_np$np.txt"
    done
fi
if has engine; then
    for pc in 1 0; do
        OFCCL_GPU_PEER_CLASS=$pc timeout 300 "$b/bin/test_gpu" 3 >"$out/engine_test_pc$pc.txt" 2>&1
        echo "test_gpu 3, OFCCL_GPU_PEER_CLASS=$pc: exit $? ($(grep -c 'passed$' \
            "$out/engine_test_pc$pc.txt") passed; failed: $(grep -B30 'FAILED' \
            "$out/engine_test_pc$pc.txt" | grep -o '^== [a-z-]*' | tr '\n' ' '))"
    done
    for np in 2 4; do
        for m in plain pool; do
            for pc in 1 0; do
                OFCCL_GPU_PEER_CLASS=$pc timeout 150 "$b/bin/gpu_perf" -n $np -m $m -b 1M -e 256M \
                    -i 10 >"$out/engine_perf_np${np}_${m}_pc$pc.txt" 2>&1
                echo "gpu_perf -n $np -m $m, OFCCL_GPU_PEER_CLASS=$pc: exit $?"
                tail -9 "$out/engine_perf_np${np}_${m}_pc$pc.txt"
            done
        done
        for pc in 1 0; do
            OFCCL_GPU_PEER_CLASS=$pc PYTHONPATH="$(pwd)/python" PYTHONUNBUFFERED=1 timeout 120 \
                python3 perf/gpu_overlap.py --ranks $np --small 8K --calls 2000 \
                >"$out/engine_call_np${np}_pc$pc.txt" 2>&1
            echo "per-call 8 KiB, $np ranks, OFCCL_GPU_PEER_CLASS=$pc: exit $?"
            tail -4 "$out/engine_call_np${np}_pc$pc.txt"
        done
    done
fi
if has hmem && [ -f "$b/cudafab/libfabric.so.1" ]; then
    # the CUDA-enabled libfabric dlopens libcudart.so and libcuda.so.1 by those names
    cl=$(mktemp -d)
    # (the driver's own libcuda, never a toolkit's stub, which finds no GPU)
    f=$(ldconfig -p | awk '$1 == "libcuda.so.1" {print $NF; exit}')
    [ -n "$f" ] && ln -sf "$f" "$cl/libcuda.so" && ln -sf "$f" "$cl/libcuda.so.1"
    f=$(find /usr/lib/x86_64-linux-gnu /usr/local /usr/lib/python3* -name "libcudart.so*" \
        ! -path "*stubs*" 2>/dev/null | head -1)
    [ -n "$f" ] && ln -sf "$f" "$cl/libcudart.so" && ln -sf "$f" "$cl/libcudart.so.1"
    ls -l "$cl" >"$out/hmem_libs.txt"
    for np in 2 4; do
        LD_LIBRARY_PATH="$b/cudafab:$cl:$b/lib" FI_PROVIDER_PATH="$b/cudafab/libfabric" \
            OFCCL_TEST_HMEM=0 OFCCL_TEST_HMEM_WHY="CUDA calls of its own" \
            timeout 200 "$b/bin/test_gpu" $np hmem hmem-need \
            >"$out/hmem_np$np.txt" 2>&1
        echo "test_gpu hmem np$np (FI_HMEM): exit $?"
        grep -E "GPU memory|GPU_FABRIC=hmem:|behind a held|FAILED" "$out/hmem_np$np.txt" |
            cut -c1-300 | head -8
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

#!/bin/sh
# Build a libfabric with CUDA support (Debian's has none) for ofccl's FI_HMEM
# path on a GPU machine: libfabric.so.1 and its provider plugins into OUT_DIR,
# to carry in a bundle (perf/gpu_run.sh's `hmem` part takes BUNDLE/cudafab).
# The source is Debian's (its mirror serves the 2.1.0 tarball; the ABI is
# libfabric.so.1 as Debian 12's 1.17, with the same versioned symbols). It
# opens CUDA at run time (libcudart.so and libcuda.so.1, by those names), so
# the build needs CUDA's headers only: CUDA_HOME, else /usr/local/cuda.
# Usage: scripts/cuda-libfabric.sh OUT_DIR [VERSION]   (as root on Debian 12)
set -eu
out=$(realpath -m "$1")
ver=${2:-2.1.0}
cuda=${CUDA_HOME:-/usr/local/cuda}
[ -f "$cuda/include/cuda.h" ] || { echo "no cuda.h under $cuda (set CUDA_HOME)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
apt-get install -y -q --no-install-recommends autoconf automake libtool pkg-config \
    librdmacm-dev libibverbs-dev curl xz-utils >/dev/null
curl -fsSL -o "$work/src.tar.xz" \
    "http://deb.debian.org/debian/pool/main/libf/libfabric/libfabric_$ver.orig.tar.xz"
tar -xJf "$work/src.tar.xz" -C "$work"
# This CUDA toolkit ships no nvml.h; libfabric's CUDA code needs only its
# return type (the NVML functions it calls are looked up at run time).
mkdir -p "$work/nvml"
printf 'typedef enum nvmlReturn_enum { NVML_SUCCESS = 0 } nvmlReturn_t;\n' >"$work/nvml/nvml.h"
cd "$work/libfabric-$ver"
[ -x configure ] || ./autogen.sh >/dev/null 2>&1
./configure -q --prefix="$work/inst" --with-cuda="$cuda" --enable-cuda-dlopen --disable-static \
    --enable-verbs=dl --disable-efa --disable-psm2 --disable-psm3 --disable-opx --disable-usnic \
    --disable-cxi --disable-ucx --disable-lpp --with-uring=no CPPFLAGS="-I$work/nvml"
make -s -j"$(nproc)" install >/dev/null
mkdir -p "$out"
cp -L "$work/inst/lib/libfabric.so.1" "$out/"
[ -d "$work/inst/lib/libfabric" ] && cp -rL "$work/inst/lib/libfabric" "$out/"
LD_LIBRARY_PATH="$out" "$work/inst/bin/fi_info" --version | head -1
echo "in $out: $(ls "$out" | tr '\n' ' ')"

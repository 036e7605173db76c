#!/bin/sh
# Gather programs built here and the shared libraries they need (ldd) into one
# folder, to run them on a machine that has none of ofccl's dependencies
# installed (a GPU machine with its own distribution): run them there with
# LD_LIBRARY_PATH=<folder>/lib. libc, the dynamic loader and the CUDA driver
# stay the machine's own.
# Usage: scripts/bundle.sh OUT_DIR FILE...   (FILE: programs and shared libraries)
set -eu
out=$1
shift
mkdir -p "$out/bin" "$out/lib"
for f in "$@"; do
    case $f in
    *.so*) cp -L "$f" "$out/lib/" ;;
    *) cp -L "$f" "$out/bin/" ;;
    esac
    ldd "$f" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
        case $(basename "$lib") in
        libc.so* | ld-linux* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libcuda.so*) ;;
        *) cp -Ln "$lib" "$out/lib/" 2>/dev/null || true ;;
        esac
    done
done
# libfabric's provider plugins and hwloc's, where the system keeps them apart
for d in /usr/lib/x86_64-linux-gnu/libfabric /usr/lib/x86_64-linux-gnu/hwloc; do
    [ -d "$d" ] && cp -rL "$d" "$out/lib/" 2>/dev/null || true
done
# pytest (pure Python), for machines whose Python lacks it
mkdir -p "$out/py"
for m in pytest _pytest pluggy iniconfig py py.py packaging; do
    [ -e "/usr/lib/python3/dist-packages/$m" ] && cp -rL "/usr/lib/python3/dist-packages/$m" "$out/py/"
done
du -sh "$out"

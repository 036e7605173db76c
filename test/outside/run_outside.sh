#!/bin/sh
# The outside-in test: install ofccl into a temporary directory, build
# outside.c and outside_coll.c against the installed header and library only
# (pkg-config, no include path into the source tree), and run it under mpirun
# at 1 to 7 ranks.
#   ci:   every rank count on one transport (rotating), plus 1 and 7 ranks on all three
#   full: every rank count on every transport
# The sequence seed is OFCCL_OUTSIDE_SEED, or the time; each run prints it, and
# `outside SEED` under mpirun replays a failure.
# A build with sanitizers (b_sanitize) installs an instrumented library: the
# program is then built with the same -fsanitize, as its users would have to.
# Usage: run_outside.sh MESON BUILD_DIR OUTSIDE_C ci|full [SANITIZERS]
set -u
meson=$1 build=$2 src=$3 mode=$4 san=${5:-none}
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ofccl-outside.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

if ! "$meson" install -C "$build" --no-rebuild --destdir "$tmp/root" >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log"
    echo "meson install failed"
    exit 1
fi
pc=$(find "$tmp/root" -name ofccl.pc | head -n 1)
[ -n "$pc" ] || { echo "no ofccl.pc installed"; exit 1; }
PKG_CONFIG_PATH=$(dirname "$pc")
PKG_CONFIG_SYSROOT_DIR=$tmp/root
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
libdir=$(pkg-config --variable=libdir ofccl) || exit 1
case $libdir in "$tmp/root"/*) ;; *) libdir=$tmp/root$libdir ;; esac
flags=$(pkg-config --cflags --libs ofccl) || exit 1
[ "$san" = none ] || [ -z "$san" ] || flags="-fsanitize=$san -fno-omit-frame-pointer $flags"
echo "cc $flags"
# shellcheck disable=SC2086
${CC:-cc} -std=c11 -O2 -Wall -Wextra -o "$tmp/outside" "$src" "$(dirname "$src")/outside_coll.c" \
    $flags -lm -Wl,-rpath,"$libdir" ||
    { echo "building outside.c against the installed ofccl failed"; exit 1; }
# The program must run on the installed library, not on one from the build tree.
ldd "$tmp/outside" | grep -q "$libdir/libofccl" ||
    { ldd "$tmp/outside"; echo "outside does not load $libdir/libofccl"; exit 1; }

seed=${OFCCL_OUTSIDE_SEED:-$(date +%s)}
runs=""
for np in 1 2 3 4 5 6 7; do
    if [ "$mode" = full ] || [ "$np" = 1 ] || [ "$np" = 7 ]; then
        provs="local shm tcp"
    else
        provs=$(echo "local shm tcp" | cut -d' ' -f$((np % 3 + 1)))
    fi
    for p in $provs; do runs="$runs $np:$p"; done
done
ncoll=$([ "$mode" = full ] && echo 200 || echo 100)
status=0
for run in $runs; do
    np=${run%%:*} prov=${run#*:}
    s=$((seed + np))
    start=$(date +%s)
    # Argument errors are part of the walk: log errors only, not warnings.
    if OFCCL_PROVIDER=$prov OFCCL_LOG_LEVEL=error timeout -k 5 240 \
        mpirun --oversubscribe --bind-to none -np "$np" -x OFCCL_PROVIDER -x OFCCL_LOG_LEVEL \
        "$tmp/outside" "$s" "$ncoll" >"$tmp/run.log" 2>&1; then
        echo "ok   $np ranks on $prov, seed $s ($(($(date +%s) - start)) s)"
    else
        echo "FAIL $np ranks on $prov, seed $s: replay with OFCCL_PROVIDER=$prov mpirun -np $np outside $s $ncoll"
        cat "$tmp/run.log"
        status=1
    fi
done
exit $status

#!/bin/sh
# Configure (once) and build into ./build.
set -eu
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build

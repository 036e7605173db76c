#!/bin/sh
# Install what ofccl needs on Debian 12, only if something is missing.
set -eu
pkgs="build-essential meson ninja-build pkg-config python3 libfabric-dev libfabric-bin
      libhwloc-dev hwloc libpmix-dev libcunit1-dev libssl-dev openmpi-bin libopenmpi-dev gnuplot-nox
      iproute2 nftables clang libclang-rt-14-dev
      munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins
      python3-dev python3-venv python3-mesonpy python3-numpy python3-pytest python3-torch
      python3-matplotlib"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "installing:$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing

#!/bin/bash
# Simulated hosts on one machine, for multi-host tests and benchmarks.
#
# Each host is a process ("holder") that owns a network, a mount and a UTS
# namespace: its own loopback, an eth0 with address 10.66.0.<h+1>/24, its own
# /dev/shm (tmpfs) and /sys, and the hostname host<h>. The eth0s are veth pairs
# whose other ends sit on a bridge in a "fabric" namespace, a holder of its own,
# so the machine's real network namespace is never touched. A rank enters its
# host's three namespaces with nsenter: ranks of one host then share /dev/shm
# and the identity ofccl derives from the namespaces (bootstrap/host.c), and
# ranks of different hosts share neither. Nothing is named globally (no
# `ip netns add`): runs of this script side by side cannot collide, and when
# the holders exit the kernel removes the namespaces, links and rules with them.
#
# As a command:  cluster.sh [-H hosts] [-r ranks_per_host] [-t seconds] -- program [args...]
#   runs hosts x ranks_per_host ranks of program through ofccl's TCP rendezvous
#   (root on host0) and exits 0 when every rank exited 0, 77 when namespaces
#   cannot be created here (the reason is printed), 1 otherwise.
# As a library (. cluster.sh): cluster_up H; cluster_run RPH SECONDS prog...;
#   cluster_in H cmd...; cluster_partition H; cluster_limit RATE; cluster_down.
#   Each rank sees CLUSTER_HOST (its host index), CLUSTER_RPH and CLUSTER_DIR
#   (a directory every host sees) besides the OFCCL_BOOT_* variables; its
#   output goes to $CLUSTER_DIR/rank<r>.log.

CLUSTER_NET=${CLUSTER_NET:-10.66.0}
CLUSTER_TTL=${CLUSTER_TTL:-900} # holders exit by themselves after this many seconds
CLUSTER_SHM=${CLUSTER_SHM:-512m}
CLUSTER_DIR=""
CLUSTER_H=0
CLUSTER_PORT=29500
CLUSTER_FABRIC=""
CLUSTER_LAST=""
CLUSTER_RPH=1
CLUSTER_HOLDER=()
CLUSTER_PIDS=()

# Bounded wait for a file to appear: 0 when it did.
cluster__wait_file() {
    local f=$1 tries=$(($2 * 20))
    while [ ! -e "$f" ] && [ "$tries" -gt 0 ]; do
        sleep 0.05
        tries=$((tries - 1))
    done
    [ -e "$f" ]
}

# Why namespaces cannot be made here ("" when they can).
cluster_cannot() {
    local t
    if [ "$(id -u)" != 0 ]; then
        echo "not root: creating network and mount namespaces needs CAP_SYS_ADMIN"
        return
    fi
    for t in unshare nsenter ip; do
        command -v "$t" >/dev/null || { echo "$t not installed"; return; }
    done
    if ! t=$(unshare --net --mount --uts true 2>&1); then
        echo "unshare --net --mount --uts failed: $t"
        return
    fi
    if ! t=$(unshare --net ip link add name ofccl-br type bridge 2>&1); then
        echo "no bridge device in a network namespace: $t"
        return
    fi
    if ! t=$(unshare --net ip link add name ofccl-a type veth peer name ofccl-b 2>&1); then
        echo "no veth pair in a network namespace: $t"
        return
    fi
}

# Start a holder: setup commands run inside the new namespaces, then it
# sleeps until killed (or CLUSTER_TTL); ready.<tag> appears once it is set up.
# Its pid goes to CLUSTER_LAST (not printed: a $(...) would orphan it).
cluster__holder() {
    local tag=$1 flags=$2 setup=$3
    # shellcheck disable=SC2086 # flags are several words on purpose
    unshare $flags --propagation private sh -c \
        "$setup && : > '$CLUSTER_DIR/ready.$tag' && exec sleep $CLUSTER_TTL" \
        >"$CLUSTER_DIR/holder.$tag.log" 2>&1 &
    CLUSTER_LAST=$!
}

# cluster_up H: the fabric and H hosts. On failure everything made is removed.
cluster_up() {
    local h pid why fab_setup host_setup
    CLUSTER_H=$1
    why=$(cluster_cannot)
    if [ -n "$why" ]; then
        echo "simulated hosts unavailable: $why"
        return 77
    fi
    CLUSTER_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ofccl-hosts.XXXXXX") || return 1
    trap cluster_down EXIT
    trap 'exit 130' INT TERM
    fab_setup="ip link set lo up && ip link add name br0 type bridge && ip link set br0 up"
    cluster__holder fabric --net "$fab_setup"
    CLUSTER_FABRIC=$CLUSTER_LAST
    if ! cluster__wait_file "$CLUSTER_DIR/ready.fabric" 10; then
        echo "fabric namespace did not start: $(cat "$CLUSTER_DIR/holder.fabric.log")"
        return 1
    fi
    for h in $(seq 0 $((CLUSTER_H - 1))); do
        # IPv6 off: eth0 then has one address, the one the ranks publish. /sys
        # is remounted so it lists this namespace's devices (best effort).
        host_setup="mount -t tmpfs -o mode=1777,size=$CLUSTER_SHM ofccl-shm /dev/shm &&
            { mount -t sysfs ofccl-sys /sys 2>/dev/null || true; } &&
            hostname host$h && ip link set lo up &&
            { { echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; } 2>/dev/null || true; }"
        cluster__holder "$h" "--net --mount --uts" "$host_setup"
        CLUSTER_HOLDER[h]=$CLUSTER_LAST
    done
    for h in $(seq 0 $((CLUSTER_H - 1))); do
        pid=${CLUSTER_HOLDER[h]}
        if ! cluster__wait_file "$CLUSTER_DIR/ready.$h" 10; then
            echo "host$h did not start: $(cat "$CLUSTER_DIR/holder.$h.log")"
            return 1
        fi
        if ! nsenter -t "$CLUSTER_FABRIC" -n ip link add name "veth$h" type veth \
                peer name eth0 netns "$pid" ||
           ! nsenter -t "$CLUSTER_FABRIC" -n ip link set "veth$h" master br0 up ||
           ! nsenter -t "$pid" -n ip addr add "$CLUSTER_NET.$((h + 1))/24" dev eth0 ||
           ! nsenter -t "$pid" -n ip link set eth0 up; then
            echo "cannot link host$h to the fabric"
            return 1
        fi
    done
}

# cluster_in H cmd...: run cmd in host H's namespaces.
cluster_in() {
    local h=$1
    shift
    nsenter -t "${CLUSTER_HOLDER[h]}" -n -m -u --wd="$PWD" -- "$@"
}

# cluster_fabric cmd...: run cmd in the fabric's network namespace.
cluster_fabric() {
    nsenter -t "$CLUSTER_FABRIC" -n -- "$@"
}

# cluster_start RPH SECONDS prog [args]: start RPH ranks on every host (rank
# r on host r / RPH), each under `timeout SECONDS`; rank pids in CLUSTER_PIDS.
cluster_start() {
    local rph=$1 secs=$2 h r n
    shift 2
    n=$((CLUSTER_H * rph))
    CLUSTER_RPH=$rph
    CLUSTER_PORT=$((CLUSTER_PORT + 1)) # a fresh port for each job: no TIME_WAIT clash
    CLUSTER_PIDS=()
    for r in $(seq 0 $((n - 1))); do
        h=$((r / rph))
        # nsenter itself in the background (not a function): $! is then the
        # rank's own process chain (nsenter -> env -> timeout), which a kill reaches.
        nsenter -t "${CLUSTER_HOLDER[h]}" -n -m -u --wd="$PWD" -- env OFCCL_BOOT_ROOT="$CLUSTER_NET.1:$CLUSTER_PORT" \
            OFCCL_BOOT_RANK="$r" OFCCL_BOOT_SIZE="$n" CLUSTER_HOST="$h" CLUSTER_RPH="$rph" CLUSTER_DIR="$CLUSTER_DIR" \
            timeout -k 5 "$secs" "$@" >"$CLUSTER_DIR/rank$r.log" 2>&1 &
        CLUSTER_PIDS[r]=$!
    done
}

# cluster_wait: wait for the ranks of cluster_start; print each failing
# rank's exit status and the end of its log. 0 when every rank exited 0.
cluster_wait() {
    local r rc status=0
    for r in "${!CLUSTER_PIDS[@]}"; do
        wait "${CLUSTER_PIDS[r]}"
        rc=$?
        if [ $rc -ne 0 ]; then
            echo "rank $r on host$((r / CLUSTER_RPH)): exit $rc$([ $rc -eq 124 ] && echo ' (timed out)'); its log ends:"
            tail -n 25 "$CLUSTER_DIR/rank$r.log" | sed 's/^/  | /'
            status=1
        fi
    done
    CLUSTER_PIDS=()
    return $status
}

# cluster_run RPH SECONDS prog [args]: start the ranks and wait for them.
cluster_run() {
    cluster_start "$@"
    cluster_wait
}

# cluster_partition H: host H's eth0 drops every packet, both ways, silently
# (no reset, no unreachable): to its peers the host has gone quiet.
cluster_partition() {
    cluster_in "$1" nft -f - <<'EOF'
table inet ofccl_partition {
    chain in { type filter hook input priority 0; iifname "eth0" drop; }
    chain out { type filter hook output priority 0; oifname "eth0" drop; }
}
EOF
}

# cluster_limit RATE [BURST]: a token bucket on both ends of every host's
# link, so each host sends and receives at most RATE (tc syntax: 1gbit).
cluster_limit() {
    local rate=$1 burst=${2:-256kb} h
    for h in $(seq 0 $((CLUSTER_H - 1))); do
        cluster_in "$h" tc qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" \
            latency 50ms || return 1
        cluster_fabric tc qdisc replace dev "veth$h" root tbf rate "$rate" burst "$burst" \
            latency 50ms || return 1
    done
}

# cluster_down: stop ranks still running and the holders; the kernel then
# removes the namespaces with their links, bridge, rules and /dev/shm.
cluster_down() {
    local p
    for p in "${CLUSTER_PIDS[@]}"; do
        kill "$p" 2>/dev/null
    done
    for p in "${CLUSTER_PIDS[@]}"; do
        wait "$p" 2>/dev/null
    done
    CLUSTER_PIDS=()
    for p in "${CLUSTER_HOLDER[@]}" $CLUSTER_FABRIC; do
        kill "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    CLUSTER_HOLDER=()
    CLUSTER_FABRIC=""
    if [ -n "$CLUSTER_DIR" ] && [ -z "${CLUSTER_KEEP:-}" ]; then
        rm -rf "$CLUSTER_DIR"
    elif [ -n "$CLUSTER_DIR" ]; then
        echo "logs kept in $CLUSTER_DIR"
    fi
    CLUSTER_DIR=""
}

# ---- as a command ----
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    hosts=2 rph=2 secs=100
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        case $1 in
        -H) hosts=$2; shift 2 ;;
        -r) rph=$2; shift 2 ;;
        -t) secs=$2; shift 2 ;;
        *) echo "usage: cluster.sh [-H hosts] [-r ranks_per_host] [-t seconds] -- program [args...]"
           exit 2 ;;
        esac
    done
    [ "${1:-}" = "--" ] && shift
    [ $# -gt 0 ] || { echo "cluster.sh: no program given"; exit 2; }
    cluster_up "$hosts" || exit $?
    if cluster_run "$rph" "$secs" "$@"; then
        echo "$hosts hosts x $rph ranks: every rank exited 0"
        exit 0
    fi
    exit 1
fi

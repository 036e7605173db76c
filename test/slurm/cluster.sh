#!/bin/bash
# A private single-node Slurm cluster on this machine, for tests and measurements.
#
# Everything lives in one private directory (slurm.conf, munge key and socket,
# state, spool, logs, pid files); the daemons listen on free ports, so two
# clusters can run side by side. Needs root, munged, slurmctld and slurmd
# (scripts/install-deps.sh installs them).
#
# Sourced (bash):
#   . test/slurm/cluster.sh
#   slurm_cluster_start || exit $?   # 0, or 77 (cannot start: reason on stderr)
#   srun --mpi=pmix -n 2 prog        # SLURM_CONF is exported
#   slurm_cluster_stop               # also runs on EXIT/INT/TERM (trap)
# Command line:
#   cluster.sh run CMD [ARGS...]     start, run CMD, stop; CMD's exit status (77 = no cluster)
#   cluster.sh start                 start and print `export SLURM_CONF=...` lines to eval
#   cluster.sh stop DIR              stop the cluster of DIR (the OFSLURM_DIR printed)
# Settings (environment):
#   OFSLURM_CPUS     CPUs of the node (default: nproc); more than this machine has
#                        lets many tasks share its cores (SlurmdParameters=config_overrides)
#   OFSLURM_WAIT_S   bound on each wait for the daemons (default 60)
#   OFSLURM_KEEP=1   keep the private directory (logs) after stopping

slurm_cluster__log() { echo "slurm-cluster: $*" >&2; }

# A TCP port nobody listens on, from a range the kernel does not hand out on
# its own (ip_local_port_range starts at 32768 by default).
slurm_cluster__free_port() {
    local p
    for _ in $(seq 1 200); do
        p=$((10000 + (RANDOM * 32768 + RANDOM) % 20000))
        if ! ss -Htan 2>/dev/null | awk '{print $4}' | grep -q ":$p\$"; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# Print the last lines of the daemons' logs, to explain a failure.
slurm_cluster__tails() {
    local f
    for f in munged.out munged.log slurmctld.out slurmctld.log slurmd.out slurmd.log; do
        [ -s "$OFSLURM_DIR/$f" ] || continue
        echo "--- $f (last lines)" >&2
        tail -n 15 "$OFSLURM_DIR/$f" >&2
    done
}

slurm_cluster__write_conf() {
    local dir=$1 host=$2 cpus=$3 ctld_port=$4 slurmd_port=$5 overrides=""
    [ "$cpus" -gt "$(nproc)" ] && overrides="SlurmdParameters=config_overrides"
    cat >"$dir/slurm.conf" <<EOF
ClusterName=ofccl$$
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
TmpFS=$dir/tmp
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
InactiveLimit=0
KillWait=5
MinJobAge=10
$overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=ofccl Nodes=$host Default=YES MaxTime=INFINITE OverSubscribe=FORCE State=UP
EOF
}

# Wait (bounded) until `sinfo` reports the node idle; 0 when it does.
slurm_cluster__wait_idle() {
    local host=$1 wait_s=$2 t0=$SECONDS state=""
    while [ $((SECONDS - t0)) -lt "$wait_s" ]; do
        state=$(sinfo -h -n "$host" -o %T 2>/dev/null)
        [ "$state" = idle ] && return 0
        for p in $OFSLURM_PIDS; do
            kill -0 "$p" 2>/dev/null || {
                slurm_cluster__log "daemon pid $p exited during start"
                return 1
            }
        done
        sleep 0.2
    done
    slurm_cluster__log "node $host not idle after ${wait_s}s (state: ${state:-none})"
    return 1
}

# Start munged, slurmctld and slurmd. Exports SLURM_CONF, OFSLURM_DIR and
# OFSLURM_PIDS; returns 0, or 77 with the reason on stderr (nothing left running).
slurm_cluster_start() {
    local host cpus wait_s ctld_port slurmd_port dir b lockfile rc
    if [ "$(id -u)" -ne 0 ]; then
        slurm_cluster__log "skipped: the daemons run as root and this is uid $(id -u)"
        return 77
    fi
    for b in munged slurmctld slurmd srun sinfo ss flock; do
        if ! command -v "$b" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$b" ]; then
            slurm_cluster__log "skipped: $b not installed (scripts/install-deps.sh installs slurm-wlm, munge)"
            return 77
        fi
    done
    host=$(hostname -s)
    cpus=${OFSLURM_CPUS:-$(nproc)}
    wait_s=${OFSLURM_WAIT_S:-60}
    dir=$(mktemp -d "${TMPDIR:-/tmp}/ofccl-slurm.XXXXXX") || return 77
    chmod 700 "$dir"
    mkdir -p "$dir/state" "$dir/spool" "$dir/tmp"
    export OFSLURM_DIR=$dir SLURM_CONF=$dir/slurm.conf
    OFSLURM_PIDS=""
    # The key: 1 KiB of randomness only root may read, as munged demands.
    (umask 077 && head -c 1024 /dev/urandom >"$dir/munge.key")

    # Choosing free ports and binding them is one step for concurrent users.
    lockfile=${TMPDIR:-/tmp}/ofccl-slurm.lock
    exec {slurm_cluster__lockfd}>"$lockfile"
    if ! flock -w "$wait_s" "$slurm_cluster__lockfd"; then
        slurm_cluster__log "skipped: another cluster held $lockfile for ${wait_s}s"
        exec {slurm_cluster__lockfd}>&-
        slurm_cluster_stop
        return 77
    fi
    ctld_port=$(slurm_cluster__free_port) && slurmd_port=$(slurm_cluster__free_port) &&
        [ "$ctld_port" != "$slurmd_port" ] || ctld_port=""
    rc=77
    if [ -n "$ctld_port" ]; then
        slurm_cluster__write_conf "$dir" "$host" "$cpus" "$ctld_port" "$slurmd_port"
        # -F: foreground, so $! is the daemon itself; no daemon keeps the lock open.
        munged -F --force --socket="$dir/munge.socket" --key-file="$dir/munge.key" \
            --log-file="$dir/munged.log" --pid-file="$dir/munged.pid" \
            --seed-file="$dir/munged.seed" {slurm_cluster__lockfd}>&- </dev/null \
            >"$dir/munged.out" 2>&1 &
        OFSLURM_PIDS=$!
        for _ in $(seq 1 50); do
            [ -S "$dir/munge.socket" ] && break
            sleep 0.1
        done
        if [ -S "$dir/munge.socket" ]; then
            slurmctld -D -i -f "$SLURM_CONF" {slurm_cluster__lockfd}>&- </dev/null \
                >"$dir/slurmctld.out" 2>&1 &
            OFSLURM_PIDS="$OFSLURM_PIDS $!"
            slurmd -D -f "$SLURM_CONF" -N "$host" {slurm_cluster__lockfd}>&- </dev/null \
                >"$dir/slurmd.out" 2>&1 &
            OFSLURM_PIDS="$OFSLURM_PIDS $!"
            echo "$OFSLURM_PIDS" >"$dir/daemons.pid"
            slurm_cluster__wait_idle "$host" "$wait_s" && rc=0
        else
            slurm_cluster__log "munged made no socket in 5 s"
        fi
    else
        slurm_cluster__log "no free TCP port found"
    fi
    flock -u "$slurm_cluster__lockfd"
    exec {slurm_cluster__lockfd}>&-
    export OFSLURM_PIDS
    if [ $rc -ne 0 ]; then
        slurm_cluster__log "skipped: the Slurm daemons did not start"
        slurm_cluster__tails
        slurm_cluster_stop
        return 77
    fi
    trap 'slurm_cluster_stop' EXIT
    trap 'slurm_cluster_stop; trap - EXIT; exit 130' INT
    trap 'slurm_cluster_stop; trap - EXIT; exit 143' TERM
    slurm_cluster__log "up: node $host, $cpus CPUs, slurmctld port $ctld_port, slurmd port" \
        "$slurmd_port, SLURM_CONF=$SLURM_CONF"
    return 0
}

# Cancel what still runs, then stop each daemon by its process id (TERM, then
# KILL after a bounded wait) and remove the private directory. Idempotent.
slurm_cluster_stop() {
    local dir=${1:-${OFSLURM_DIR:-}} pids p
    [ -n "$dir" ] && [ -d "$dir" ] || return 0
    pids=${OFSLURM_PIDS:-}
    [ -z "$pids" ] && [ -f "$dir/daemons.pid" ] && pids=$(cat "$dir/daemons.pid")
    if [ -f "$dir/slurm.conf" ] && [ -n "$pids" ]; then
        SLURM_CONF=$dir/slurm.conf timeout 10 scancel --quiet --user root 2>/dev/null
        for _ in $(seq 1 50); do
            [ -z "$(SLURM_CONF=$dir/slurm.conf timeout 5 squeue -h 2>/dev/null)" ] && break
            sleep 0.2
        done
    fi
    # slurmd first, then slurmctld, then munged: the reverse of the start.
    for p in $(echo "$pids" | tr ' ' '\n' | tac); do
        # Only a process started for this directory (its command line names it).
        tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qF "$dir" || continue
        kill -TERM "$p" 2>/dev/null || continue
        for _ in $(seq 1 50); do
            kill -0 "$p" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
    done
    # Reap the ones this shell started, so none stays a zombie.
    for p in $pids; do
        wait "$p" 2>/dev/null
    done
    if [ "${OFSLURM_KEEP:-0}" = 1 ]; then
        slurm_cluster__log "stopped; logs kept in $dir"
    else
        rm -rf "$dir"
    fi
    [ "$dir" = "${OFSLURM_DIR:-}" ] && unset OFSLURM_DIR OFSLURM_PIDS
    return 0
}

# Command line (not when sourced).
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    case "${1:-}" in
    run)
        shift
        [ $# -gt 0 ] || {
            echo "usage: $0 run CMD [ARGS...]" >&2
            exit 2
        }
        slurm_cluster_start || exit $?
        "$@"
        rc=$?
        slurm_cluster_stop
        trap - EXIT
        exit $rc
        ;;
    start)
        slurm_cluster_start || exit $?
        trap - EXIT INT TERM
        echo "export SLURM_CONF=$SLURM_CONF OFSLURM_DIR=$OFSLURM_DIR"
        ;;
    stop)
        [ -n "${2:-}" ] || {
            echo "usage: $0 stop DIR" >&2
            exit 2
        }
        slurm_cluster_stop "$2"
        ;;
    *)
        echo "usage: $0 run CMD [ARGS...] | start | stop DIR" >&2
        exit 2
        ;;
    esac
fi

#!/usr/bin/env bash
# A real single-node SLURM on this machine, a tiny DAG through workflow/profiles/slurm, then stop.
#
#   tests/slurm_cluster.sh WORKDIR
#
# Needs root and Debian's slurm-wlm and munge (apt-get install -y slurm-wlm munge). Everything it
# starts (munged on a private socket, slurmctld, slurmd) lives in a private state directory with
# its own slurm.conf (SLURM_CONF), listens on 127.0.0.1/the short host name only, and is stopped by
# the PIDs it recorded, on success, failure or interruption. Every wait has a timeout. See
# ../shared/cluster-notes.md (why squeue, not sacct; why 5 s before status checks; both set in
# the test's own copy of the profile, below).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(realpath "${1:?usage: $0 WORKDIR}")
SNAKEMAKE_TIMEOUT=${SNAKEMAKE_TIMEOUT:-300}
PY=${PYTHON:-python3}
BIN=$(dirname "$(command -v "$PY")")

log() { echo "slurm_cluster: $*"; }
[ "$(id -u)" = 0 ] || { log "must run as root"; exit 2; }
for exe in /usr/sbin/munged /usr/sbin/slurmctld /usr/sbin/slurmd; do
    [ -x "$exe" ] || { log "$exe missing: apt-get install -y slurm-wlm munge"; exit 2; }
done

STATE=$(mktemp -d /tmp/tapmachine-slurm.XXXXXX)
chmod 755 "$STATE"
STARTED=()  # PID files of what this script started

stop_pid() {  # stop one daemon by its PID file: TERM, up to 15 s, then KILL
    local file=$1 pid
    [ -s "$file" ] || return 0
    pid=$(cat "$file")
    kill -0 "$pid" 2>/dev/null || return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
    log "pid $pid ($file) ignored SIGTERM: SIGKILL"
    kill -9 "$pid" 2>/dev/null || true
}

wait_pidfile() {  # a daemon writes its PID file some time after it forks: wait up to 15 s
    for _ in $(seq 30); do [ -s "$1" ] && return 0; sleep 0.5; done
    log "no PID file $1 after 15 s"
    return 1
}

cleanup() {
    local rc=$?
    set +e
    if [ -s "$STATE/slurmctld.pid" ]; then
        # Jobs first (slurmstepd outlives slurmd), only on this private cluster.
        timeout 10 scancel --quiet --full "--user=$(id -un)" 2>/dev/null
        for _ in $(seq 20); do
            [ -z "$(timeout 5 squeue -h 2>/dev/null)" ] && break
            sleep 0.5
        done
    fi
    for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do stop_pid "${STARTED[i]}"; done
    if [ "$rc" != 0 ]; then
        for f in slurmctld.log slurmd.log; do
            [ -f "$STATE/$f" ] && { log "--- last lines of $f"; tail -n 15 "$STATE/$f"; }
        done
    fi
    [ -n "${OWN_CONF:-}" ] && rm -f "$SLURM_CONF"
    rm -rf "$STATE"
    log "stopped everything it started (exit $rc)"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# munge: a private daemon on a private socket, as the munge user.
install -d -o munge -g munge -m 755 "$STATE/munge"
KEY=/etc/munge/munge.key
if [ ! -s "$KEY" ]; then
    KEY=$STATE/munge/munge.key
    /usr/sbin/mungekey --create --keyfile="$KEY"
    chown munge:munge "$KEY"
fi
SOCKET=$STATE/munge/munge.socket
runuser -u munge -- /usr/sbin/munged --socket="$SOCKET" --key-file="$KEY" \
    --pid-file="$STATE/munge/munged.pid" --seed-file="$STATE/munge/seed" \
    --log-file="$STATE/munge/munged.log"
STARTED+=("$STATE/munge/munged.pid")
wait_pidfile "$STATE/munge/munged.pid"
log "munged pid $(cat "$STATE/munge/munged.pid")"

HOST=$(hostname -s)
getent hosts "$HOST" >/dev/null || { log "host name $HOST does not resolve"; exit 2; }
MEM=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.8}' /proc/meminfo)
# The CPUs slurmd itself detects (it may see fewer than nproc): a node configured with more is
# drained, and a job asking for more never starts.
CPUS=$(timeout 20 /usr/sbin/slurmd -C | grep -o 'CPUs=[0-9]*' | head -n 1 | cut -d= -f2)
CPUS=${CPUS:-1}
mkdir -p "$STATE/ctld" "$STATE/spool"
# srun inside a job finds the cluster only through /etc/slurm/slurm.conf: the SLURM executor plugin
# drops SLURM_* variables (SLURM_CONF included) before it submits. Written only where there is
# none (or one left by this script), removed at the end.
export SLURM_CONF=/etc/slurm/slurm.conf
MARK="# written by tapmachine tests/slurm_cluster.sh"
if [ -e "$SLURM_CONF" ] && ! head -n 1 "$SLURM_CONF" | grep -qF "$MARK"; then
    log "$SLURM_CONF exists and is not ours: this script makes its own cluster only where none is"
    exit 2
fi
mkdir -p /etc/slurm
OWN_CONF=1
cat >"$SLURM_CONF" <<CONF
$MARK
ClusterName=tapmachine
SlurmctldHost=$HOST
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCKET
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SchedulerType=sched/backfill
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF

/usr/sbin/slurmctld -f "$SLURM_CONF"
STARTED+=("$STATE/slurmctld.pid")
wait_pidfile "$STATE/slurmctld.pid"
/usr/sbin/slurmd -f "$SLURM_CONF"
STARTED+=("$STATE/slurmd.pid")
wait_pidfile "$STATE/slurmd.pid"
log "slurmctld pid $(cat "$STATE/slurmctld.pid"), slurmd pid $(cat "$STATE/slurmd.pid")"

state=""
for _ in $(seq 60); do
    state=$(timeout 5 sinfo -h -o %T 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 1
done
[ "$state" = idle ] || { log "node not idle after 60 s (state '$state')"; exit 1; }
log "node $HOST idle: $(sinfo -h -o '%P %D %c CPUs %m MB')"

# The tiny DAG, through the shipped profile plus this cluster's two settings (a profile of its
# own in $WORK): no accounting here, so sacct fails and the plugin would wait forever on it (ask
# squeue), and 5 s before the first status check instead of 40 (cluster-notes.md).
TARGETS=$("$PY" "$ROOT/tests/tiny_ops.py" "$WORK" slurm)
mkdir -p "$WORK/profile"
cat "$ROOT/workflow/profiles/slurm/config.yaml" - >"$WORK/profile/config.yaml" <<'YAML'
slurm-status-command: squeue
slurm-init-seconds-before-status-checks: 5
YAML
cd "$WORK"
start=$(date +%s)
set +e
PATH=$BIN:$PATH timeout -k 10 "$SNAKEMAKE_TIMEOUT" "$PY" -m snakemake \
    --snakefile "$ROOT/Snakefile" --directory "$WORK" --configfile "$WORK/config.yaml" \
    --profile "$WORK/profile" --jobs 4 --max-threads "$CPUS" $TARGETS >"$WORK/snakemake.log" 2>&1
rc=$?
set -e
log "snakemake exit $rc after $(($(date +%s) - start)) s (log: $WORK/snakemake.log)"
grep -E "SLURM jobid|Finished jobid|steps \(|Error|FAILED" "$WORK/snakemake.log" | sed 's/^/  /' || true
done_jobs=$(grep -c "_job_complete: JobId=[0-9]* done" "$STATE/slurmctld.log" || true)
log "slurmctld completed $done_jobs batch jobs"
for t in $TARGETS; do
    [ -s "$WORK/$t" ] || { log "missing output $t"; exit 1; }
done
[ "$rc" = 0 ] || exit "$rc"
echo "$done_jobs" >"$WORK/slurm_jobs_done"
log "OK: tiny DAG finished through SLURM, outputs: $TARGETS"

#!/usr/bin/env bash
# A single-node Slurm on localhost (munge, slurmctld, slurmd from Debian's packages), for the
# Slurm tests and for trying the job scripts without a cluster. Needs root.
#   jobs/slurm/local-cluster.sh          start: installs slurmctld, slurmd, slurm-client and munge
#                                        with apt-get if they are missing, writes /etc/slurm/slurm.conf
#                                        and starts the three daemons; says so before doing either
#   jobs/slurm/local-cluster.sh stop     stop the daemons this script started (by the process ids in
#                                        their pid files; nothing else is touched)
# Idempotent: when its daemons are already running it starts nothing, and it installs nothing twice.
set -euo pipefail

PIDFILES=(/run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid)

if [ "$(id -u)" != 0 ]; then
    echo "local-cluster.sh: needs root (it installs packages and starts daemons)" >&2
    exit 2
fi

alive() {  # the process named in pid file $1 is running
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

stop() {
    for pidfile in "${PIDFILES[@]}"; do
        if alive "$pidfile"; then
            pid=$(cat "$pidfile")
            echo "local-cluster.sh: stopping $(basename "$pidfile" .pid) (pid $pid)"
            kill "$pid"
            for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
        rm -f "$pidfile"
    done
}

if [ "${1:-start}" = stop ]; then
    stop
    exit 0
fi

if alive /run/slurmctld.pid && alive /run/slurmd.pid && alive /run/munge/munged.pid; then
    echo "local-cluster.sh: the local Slurm is already running; nothing to do"
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    echo "local-cluster.sh: installing Debian packages slurmctld slurmd slurm-client munge (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null
fi
echo "local-cluster.sh: starting munged, slurmctld and slurmd on localhost ('$0 stop' stops them)"

node=$(hostname -s)
# Declare more CPUs than the machine has, so tests can oversubscribe a small box as mpiexec does.
cpus=$(( $(nproc) * 4 > 8 ? $(nproc) * 4 : 8 ))
memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))

mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /var/lib/munge /var/log/munge
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=hpcbench-local
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF

if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 0700 /etc/munge /var/lib/munge /var/log/munge
chmod 0400 /etc/munge/munge.key

stop  # whatever half of a previous start is still running
runuser -u munge -- /usr/sbin/munged
/usr/sbin/slurmctld
/usr/sbin/slurmd

for _ in $(seq 1 30); do
    if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
        sinfo
        exit 0
    fi
    sleep 1
done
echo "local-cluster.sh: slurm did not come up; see /var/log/slurm/" >&2
tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 1

#!/usr/bin/env bash
# Install (Debian packages) and start a single-node Slurm on localhost: munge, slurmctld, slurmd.
# For tests and for trying the job scripts without a cluster. Needs root; idempotent.
#   jobs/slurm/local-cluster.sh          start (installing the packages first if missing)
#   jobs/slurm/local-cluster.sh stop     stop the daemons
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "local-cluster.sh: needs root (it installs packages and starts daemons)" >&2
    exit 2
fi

stop() {
    pkill -x slurmd 2>/dev/null || true
    pkill -x slurmctld 2>/dev/null || true
    pkill -x munged 2>/dev/null || true
}

if [ "${1:-start}" = stop ]; then
    stop
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null
fi

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

stop
sleep 1
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

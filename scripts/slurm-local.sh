#!/usr/bin/env bash
# A single-node Slurm cluster on this machine (localhost only), for trying scripts/slurm-eval.sh
# and for its test: Debian's slurm-wlm and munge, started without systemd, as root.
#
#   scripts/slurm-local.sh start DIR     (state, spool, logs and the munge key under DIR)
#   scripts/slurm-local.sh stop DIR
set -euo pipefail
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
dir=$(realpath -m "$dir")

stop() {
  for d in slurmd slurmctld munged; do
    if [ -f "$dir/$d.pid" ]; then
      kill "$(cat "$dir/$d.pid")" 2>/dev/null || true
    fi
  done
  sleep 1
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "slurm-local: needs root (munged and slurmd)" >&2; exit 3; }
for b in munged mungekey slurmctld slurmd sbatch; do
  command -v "$b" >/dev/null || { echo "slurm-local: no $b (apt-get install slurm-wlm munge)" >&2; exit 3; }
done
mkdir -p "$dir"/{munge,state,spool,log}
chmod 755 "$dir" # munged runs as the munge user: it must reach its folder
chown munge:munge "$dir/munge" 2>/dev/null || true
# munge: its own key, socket and pid under DIR.
mungekey -c -f -k "$dir/munge/munge.key" >/dev/null 2>&1 || mungekey -c -k "$dir/munge/munge.key"
chown munge:munge "$dir/munge/munge.key"
chmod 400 "$dir/munge/munge.key"
chmod 700 "$dir/munge"
sudo_munge() { if command -v runuser >/dev/null; then runuser -u munge -- "$@"; else su -s /bin/sh munge -c "$*"; fi; }
sudo_munge munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed" \
  --force
cp "$dir/munge/munged.pid" "$dir/munged.pid" 2>/dev/null || true

host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) / 2 ))
cat > "$dir/slurm.conf" <<EOF
ClusterName=sparqlab
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
JobAcctGatherType=jobacct_gather/none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 NodeHostname=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 60); do
  if sinfo -h -o %t 2>/dev/null | grep -q idle; then
    echo "slurm-local: up (SLURM_CONF=$SLURM_CONF)"
    exit 0
  fi
  sleep 1
done
echo "slurm-local: the node did not come up; see $dir/log" >&2
stop
exit 1

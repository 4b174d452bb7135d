#!/usr/bin/env bash
# Start a throwaway, REAL Slurm cluster on this one machine, with fake GPUs, for kvcheck's Slurm
# launcher tests (tests/slurm/). .ci/run starts it before pytest and stops it with slurm-down.sh;
# tests/slurm/conftest.py starts it itself when run as root without one (and stops what it started).
# Adapted from a recipe measured at about 8 s from nothing to a two-node job (packages installed).
# Debian 12 (bookworm) packages, Slurm 22.05.8 (built with --enable-multiple-slurmd).
# Must run as root. Idempotent-ish: refuses to start if the pid files show a live cluster.
#
#   NODES=2 GPUS=8 CPUS=8 SLURM_CI_DIR=/tmp/kvcheck-slurm bash tests/slurm/slurm-up.sh
#   export SLURM_CONF=$SLURM_CI_DIR/etc/slurm.conf      # the script prints this line
#
# Partitions: `debug` (default, every node, no limits) and `small` (MaxNodes=1), whose limit a
# two-node job can never meet: Slurm accepts such a job and leaves it pending (PartitionNodeLimit).
#
# Node k (k=1..NODES) is called n<k>; its slurmd runs in its own UTS namespace with hostname n<k>
# (so `hostname` inside a task says n1/n2) and /etc/hosts gets an "ADDR n<k>" line (slurm-down.sh removes it).
#   NET=netns  (default) each node also gets its own network namespace, address 10.77.0.<10+k> on a
#              bridge slurmci0 (host side 10.77.0.1, no route anywhere else), slurmd on the normal port
#              6818: two "nodes" can bind the same port, like real hosts.
#   NET=shared all slurmds share the host network: address 127.0.0.<10+k>, port PORT0+k
#              (needs Slurm built with --enable-multiple-slurmd, which Debian's is).
set -euo pipefail
BASE=${SLURM_CI_DIR:-/tmp/kvcheck-slurm}
NODES=${NODES:-2}          # simulated nodes
GPUS=${GPUS:-8}            # fake GPUs per node
CPUS=${CPUS:-8}            # CPUs each node claims (overrides the real 2; lets 8 one-GPU jobs run at once)
PORT0=${PORT0:-17000}      # NET=shared: slurmd k listens on PORT0+k
NET=${NET:-netns}          # netns | shared
SUBNET=${SUBNET:-10.77.0}  # NET=netns: /24 used on the private bridge
# PROCTRACK=linuxproc forces the no-cgroup fallback (weaker: see the report)
CTLD_PORT=${CTLD_PORT:-6817}
MARK="# slurm-ci $BASE"
ts() { date +%s.%N; }
T0=$(ts); lap() { awk -v l="$1" -v a="$(ts)" -v b="$T0" 'BEGIN { printf "[slurm-up] %-28s %6.2fs\n", l, a - b }'; }

# 1. packages --------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v srun >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      slurmctld slurmd slurm-client munge >/dev/null
fi
lap "packages"

# 2. munge -----------------------------------------------------------------
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  fi
  install -d -o munge -g munge -m 755 /run/munge
  runuser -u munge -- /usr/sbin/munged
  mkdir -p "$BASE/run"; touch "$BASE/run/munged.ours"      # slurm-down.sh stops it only if we started it
  for i in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi
lap "munged"

# 3. layout, fake GPU device nodes -----------------------------------------
for f in "$BASE"/run/slurmctld.pid "$BASE"/run/slurmd-*.pid; do
  [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && { echo "slurm-ci already running ($f); run slurm-down.sh first" >&2; exit 1; }
done
rm -rf "$BASE/etc" "$BASE/state" "$BASE/spool" "$BASE/log" "$BASE/dev"
mkdir -p "$BASE"/{etc,state,log,run,dev}; for k in $(seq 1 "$NODES"); do mkdir -p "$BASE/spool/n$k"; done
for i in $(seq 0 $((GPUS - 1))); do
  # Char devices with the NVIDIA major (195): Slurm 22.05 only counts GPUs whose File= it can stat
  # as a char/block device (plain files are dropped; "Name=gpu Count=N" without File= registers 0
  # GPUs and the node goes INVAL). Nothing backs them (open() gives ENXIO); they stay outside /dev.
  mknod "$BASE/dev/nvidia$i" c 195 "$i" || { echo "mknod failed (needs CAP_MKNOD): no fake GPUs possible" >&2; exit 1; }
done

# 4. process tracking: cgroup v1 freezer if present (kills whole trees), else linuxproc
if [ "${PROCTRACK:-auto}" != linuxproc ] && [ -w /sys/fs/cgroup/freezer/tasks ] && [ -d /sys/fs/cgroup/devices ]; then
  PROCTRACK=proctrack/cgroup; TASK=task/cgroup
else
  PROCTRACK=proctrack/linuxproc; TASK=task/none
fi
HOST=$(hostname -s)
if unshare --uts true 2>/dev/null; then UTS=1; else UTS=0; fi
# leftovers of a run that was not torn down (no live cluster, checked above)
for ns in $(ip netns list 2>/dev/null | awk '/^slurmci-n[0-9]+/ {print $1}'); do ip netns del "$ns"; done
ip link show slurmci0 >/dev/null 2>&1 && ip link del slurmci0
for i in $(seq 50); do ip -o link show | grep -q 'slurmci-v' || break; sleep 0.1; done
for l in $(ip -o link show | awk -F': ' '/slurmci-v/ {sub(/@.*/, "", $2); print $2}'); do ip link del "$l" 2>/dev/null; done  # netns kept alive by a leaked process
if [ "$NET" = netns ]; then
  if ip link add slurmci0 type bridge 2>/dev/null; then
    ip addr add "$SUBNET.1/24" dev slurmci0; ip link set slurmci0 up
    for k in $(seq 1 "$NODES"); do
      ip netns add "slurmci-n$k"
      ip link add "slurmci-v$k" type veth peer name eth0 netns "slurmci-n$k"
      ip link set "slurmci-v$k" master slurmci0 up
      ip -n "slurmci-n$k" addr add "$SUBNET.$((10 + k))/24" dev eth0
      ip -n "slurmci-n$k" link set eth0 up; ip -n "slurmci-n$k" link set lo up
    done
  else
    echo "[slurm-up] cannot create a bridge; falling back to NET=shared" >&2; NET=shared
  fi
fi
if [ "$NET" = netns ]; then CTL_ADDR=$SUBNET.1; else CTL_ADDR=127.0.0.1; fi
addr() { if [ "$NET" = netns ]; then echo "$SUBNET.$((10 + $1))"; else echo "127.0.0.$((10 + $1))"; fi; }

cat > "$BASE/etc/slurm.conf" <<EOF
ClusterName=ci
SlurmctldHost=$HOST($CTL_ADDR)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=$PROCTRACK
TaskPlugin=$TASK
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=60
KillWait=5
Waittime=0
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
EOF
: > "$BASE/etc/gres.conf"; echo "AutoDetect=off" >> "$BASE/etc/gres.conf"
for k in $(seq 1 "$NODES"); do
  if [ "$UTS" = 1 ]; then NH=n$k; else NH=$HOST; fi
  if [ "$NET" = netns ]; then PORT=""; else PORT=" Port=$((PORT0 + k))"; fi
  echo "NodeName=n$k NodeHostname=$NH NodeAddr=$(addr $k)$PORT CPUs=$CPUS RealMemory=1000 Gres=gpu:$GPUS State=UNKNOWN" >> "$BASE/etc/slurm.conf"
done
echo "PartitionName=debug Nodes=n[1-$NODES] Default=YES MaxTime=INFINITE State=UP" >> "$BASE/etc/slurm.conf"
echo "PartitionName=small Nodes=n[1-$NODES] MaxNodes=1 MaxTime=INFINITE State=UP" >> "$BASE/etc/slurm.conf"
echo "NodeName=n[1-$NODES] Name=gpu File=$BASE/dev/nvidia[0-$((GPUS - 1))]" >> "$BASE/etc/gres.conf"
cat > "$BASE/etc/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
CgroupAutomount=no
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainSwapSpace=no
ConstrainDevices=yes
EOF

# 5. names for the fake nodes (engines resolve the head node's name for --dist-init-addr)
{ grep -vF "$MARK" /etc/hosts || true; for k in $(seq 1 "$NODES"); do echo "$(addr $k) n$k $MARK"; done; } > "$BASE/run/hosts.new"
cat "$BASE/run/hosts.new" > /etc/hosts            # rewrite in place: /etc/hosts may be a bind mount
lap "config written"

# 6. daemons ----------------------------------------------------------------
export SLURM_CONF=$BASE/etc/slurm.conf
slurmctld -f "$SLURM_CONF"
for k in $(seq 1 "$NODES"); do
  # nsenter, not `ip netns exec`: the latter remounts /sys and hides the cgroup hierarchies
  if [ "$NET" = netns ]; then NSE="nsenter --net=/run/netns/slurmci-n$k"; else NSE=""; fi
  if [ "$UTS" = 1 ]; then
    $NSE unshare --uts -- sh -c "hostname n$k && exec slurmd -f '$SLURM_CONF' -N n$k"
  elif [ -n "$NSE" ]; then
    $NSE slurmd -f "$SLURM_CONF" -N "n$k"
  else
    slurmd -f "$SLURM_CONF" -N "n$k"
  fi
done
for i in $(seq 1 150); do
  [ "$(sinfo -h -o '%T %D' 2>/dev/null)" = "idle $NODES" ] && break
  [ "$i" = 150 ] && { echo "nodes did not come up:" >&2; sinfo -N >&2 || true; tail -n 30 "$BASE"/log/*.log >&2; exit 1; }
  sleep 0.2
done
lap "cluster idle"
echo "[slurm-up] net=$NET controller=$CTL_ADDR proctrack=$PROCTRACK uts=$UTS nodes=n[1-$NODES] gpus/node=$GPUS"
echo "export SLURM_CONF=$SLURM_CONF"

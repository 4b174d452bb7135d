#!/usr/bin/env bash
# Stop the cluster started by slurm-up.sh: jobs, slurmd's, slurmctld, munged (if ours),
# leftover job processes in our cgroups, our cgroup dirs, our /etc/hosts lines.
set -uo pipefail
BASE=${SLURM_CI_DIR:-/tmp/kvcheck-slurm}
export SLURM_CONF=$BASE/etc/slurm.conf
MARK="# slurm-ci $BASE"
stop() {  # stop <pidfile>...: TERM all at once, wait up to 10 s, then KILL
  local f p pids=""
  for f in "$@"; do [ -f "$f" ] || continue; p=$(cat "$f"); kill -0 "$p" 2>/dev/null && { kill "$p"; pids="$pids $p"; }; rm -f "$f"; done
  for i in $(seq 100); do
    local alive=""; for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
    [ -z "$alive" ] && return 0; sleep 0.1
  done
  for p in $alive; do kill -9 "$p" 2>/dev/null; done
}
if [ -f "$BASE/run/slurmctld.pid" ] && kill -0 "$(cat "$BASE/run/slurmctld.pid")" 2>/dev/null; then
  scancel --full --quiet -u root 2>/dev/null || true
  for i in $(seq 50); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
fi
stop "$BASE"/run/slurmd-*.pid "$BASE/run/slurmctld.pid"
# anything still in our per-node cgroups (e.g. a slurmstepd that outlived its slurmd)
for pf in $(find /sys/fs/cgroup/freezer/slurm_n* -name cgroup.procs 2>/dev/null); do
  for p in $(cat "$pf"); do kill -9 "$p" 2>/dev/null; done
done
sleep 0.2
for d in $(find /sys/fs/cgroup/freezer/slurm_n* /sys/fs/cgroup/devices/slurm_n* -depth -type d 2>/dev/null); do
  rmdir "$d" 2>/dev/null
done
if [ -f "$BASE/run/munged.ours" ]; then stop /run/munge/munged.pid; rm -f "$BASE/run/munged.ours"; fi
for ns in $(ip netns list 2>/dev/null | awk '/^slurmci-n[0-9]+/ {print $1}'); do ip netns del "$ns"; done  # drops the veths too
ip link show slurmci0 >/dev/null 2>&1 && ip link del slurmci0
for i in $(seq 50); do ip -o link show | grep -q 'slurmci-v' || break; sleep 0.1; done   # the kernel frees netns asynchronously
for l in $(ip -o link show | awk -F': ' '/slurmci-v/ {sub(/@.*/, "", $2); print $2}'); do ip link del "$l" 2>/dev/null; done  # netns kept alive by a leaked process
if grep -qF "$MARK" /etc/hosts; then grep -vF "$MARK" /etc/hosts > "$BASE/run/hosts.clean"; cat "$BASE/run/hosts.clean" > /etc/hosts; fi
echo "[slurm-down] done"

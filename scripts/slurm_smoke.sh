#!/usr/bin/env bash
# A one-machine SLURM (slurmctld + slurmd on this host, munge authentication) started in a
# scratch folder, then a 2-step data-parallel training through `srun --mpi=pmix -n 2`, compared
# byte for byte with one process and --grad-accum 2. Run by hand (not in CI); needs root, the
# Debian packages slurm-wlm and munge, and a build with MPI. Stops the daemons it started.
#   scripts/slurm_smoke.sh [BUILD]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$(pwd)/$build/llm_sqlrl
for tool in slurmctld slurmd srun munged; do
  command -v "$tool" >/dev/null || { echo "slurm_smoke: $tool missing (Debian: apt-get install slurm-wlm munge)" >&2; exit 2; }
done
work=$(mktemp -d /tmp/sqlrl-slurm.XXXXXX)
host=$(hostname -s)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# munge: a key of our own and a daemon on our own socket.
mkdir -p "$work/munge"
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$work/munge/munge.key"
munged --key-file="$work/munge/munge.key" --socket="$work/munge/socket" --pid-file="$work/munge/pid" \
  --log-file="$work/munge/log" --seed-file="$work/munge/seed" --force
export MUNGE_SOCKET="$work/munge/socket"

cat > "$work/slurm.conf" <<CONF
ClusterName=sqlrl
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/socket
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
mkdir -p "$work/state" "$work/spool"
export SLURM_CONF="$work/slurm.conf"
slurmctld -D -f "$SLURM_CONF" >"$work/slurmctld.out" 2>&1 & pids+=($!)
slurmd -D -f "$SLURM_CONF" >"$work/slurmd.out" 2>&1 & pids+=($!)
for _ in $(seq 60); do
  sinfo -h -o %T 2>/dev/null | grep -qE "idle|mixed" && break
  sleep 1
done
sinfo -h -o %T | grep -qE "idle|mixed" || { echo "slurm_smoke: the node never came up; see $work/*.log" >&2; exit 1; }
echo "slurm_smoke: slurmctld + slurmd up on $host ($(sinfo -h -o '%c CPUs'))"

args="--config tiny --weights tests/fixtures/sft_tiny --max-steps 2 --batch-size 4 --group-size 6 --max-turn-tokens 96"
srun --mpi=pmix -n 2 --oversubscribe "$bin" train $args --out "$work/srun" > "$work/srun.out" 2>&1 ||
  { echo "slurm_smoke: srun failed:"; tail -20 "$work/srun.out"; exit 1; }
grep -m1 "rank 0 of 2" "$work/srun.out"
"$bin" train $args --grad-accum 2 --out "$work/accum" > "$work/accum.out" 2>&1
if cmp -s "$work/srun/checkpoints/step-2/model.safetensors" "$work/accum/checkpoints/step-2/model.safetensors"; then
  echo "slurm_smoke: srun --mpi=pmix -n 2 == --grad-accum 2 (model.safetensors byte for byte)"
  rm -rf "$work"
else
  echo "slurm_smoke: the weights differ; see $work" >&2
  exit 1
fi

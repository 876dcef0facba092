#!/usr/bin/env bash
# CPU scaling of a GRPO step over MPI ranks: the same training (the SFT-trained tiny fixture,
# tests/fixtures/sft_tiny; B prompts x G samples per step) as one process, as one process with
# --grad-accum 2 (the arithmetic of 2 ranks, serially), and as `mpirun -np 2`. Prints the mean
# step time (steps 2.. : step 1 warms up), rank 0's time in collectives (waiting for the slower
# rank included) and its share, and whether np 2 wrote the bytes of --grad-accum 2.
#   bench/dp_scaling.sh [BUILD] [STEPS] [B] [G]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}; steps=${2:-6}; B=${3:-8}; G=${4:-8}
bin=$build/llm_sqlrl
command -v mpirun >/dev/null || { echo "dp_scaling: no mpirun (Debian: openmpi-bin)"; exit 0; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args="--config tiny --weights tests/fixtures/sft_tiny --max-steps $steps --batch-size $B --group-size $G --max-turn-tokens 96 --save-every 0"
"$bin" train $args --out "$work/one" >/dev/null
"$bin" train $args --grad-accum 2 --out "$work/accum2" >/dev/null
mpirun -np 2 --oversubscribe "$bin" train $args --out "$work/np2" >/dev/null
summary() {
  python3 - "$1" <<'PY' 2>/dev/null || awk 'END { print "(python3 missing: see metrics.jsonl)" }' /dev/null
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")][1:]
step = sum(r["time"]["step_s"] for r in rows) / len(rows)
comm = sum(r["time"].get("comm_s", 0) for r in rows) / len(rows)
train = sum(r["time"]["train_s"] for r in rows) / len(rows)
roll = sum(r["time"]["rollout_s"] for r in rows) / len(rows)
print(f"{step:8.2f} s/step  rollout {roll:6.2f} s  train {train:6.2f} s  comm {comm:6.3f} s ({100 * comm / step:4.1f}%)")
PY
}
echo "dp_scaling: $steps steps of $B x $G, $(nproc) cores, $(git rev-parse --short HEAD 2>/dev/null)"
printf '%-24s %s\n' "1 process" "$(summary "$work/one")"
printf '%-24s %s\n' "1 process, grad-accum 2" "$(summary "$work/accum2")"
printf '%-24s %s\n' "mpirun -np 2" "$(summary "$work/np2")"
if cmp -s "$work/np2/checkpoints/step-$steps/model.safetensors" "$work/accum2/checkpoints/step-$steps/model.safetensors"; then
  echo "np 2 == grad-accum 2: same weights, byte for byte"
else
  echo "np 2 != grad-accum 2: weights differ"
  exit 1
fi

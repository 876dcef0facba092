#!/usr/bin/env bash
# Rollout ranks with and without overlap: `mpirun -np 2 train --rollout-ranks 1` (one rank rolls
# out, one trains) with --async off (the two take turns), one-step (step t+1 is sampled while step
# t trains) and full --max-staleness 2 (two batches ahead), from the SFT-trained tiny fixture
# (tests/fixtures/sft_tiny), per seed, beside the two ranks as plain data parallel (np2 DP).
# Prints each run's mean step time (steps 2..STEPS-2: step 1 has nothing to overlap with, the last
# two nothing left to sample ahead), the trainer's
# and the rollout rank's idle fractions, the final greedy EX on the dev split (the starting weights' with --lr 0), and the speedup;
# `partial` is full with --partial-rollout PARTIAL_STEP (default 32), its mean staleness beside.
# Two rows run one process on all the cores (`np1 off`, and `np1 one-step`: the batch ahead sampled
# in turn with the training, its scoring overlapping it, --overlap-scoring; the overlap column is
# time.overlap_fraction).
#   bench/async_rollout.sh [BUILD] [STEPS] [B] [G] [SEEDS...]
# Fixed work: the runs train with --lr 0 (ASYNC_LR sets another), so the weights never move and
# every mode samples the same trajectories (the `same` column: this row's trajectories.jsonl
# against the seed's first row's). With learning, trajectory lengths trend over the steps (the
# fixture's turns per trajectory fall from 4.4 to 2.4 in 10 steps) and an overlapped step holds the
# rollout of a later batch than off's step of the same number, so a mean over the same steps
# compared other work: it made one-step look 9% faster than off on one process, where with the
# same trajectories it is 1% slower.
# On the demo's own GRPO (bench/RESULTS.md): SQLRL_BENCH_MODEL_ARGS="--config RUN/rl/config.toml
# --weights RUN/sft/checkpoints/step-N --tensorboard=false", RUN a `llm_sqlrl demo` run's folder.
# Environment: ASYNC_ROWS picks rows (default "np1 dp off one-step full partial"; np1 is the two
# one-process rows, dp the plain data-parallel one), SQLRL_BENCH_MODEL_ARGS replaces the model and its settings (default: the tiny
# fixture on the CPU; scripts/gpu_check.sh's `async` stage passes a Qwen3-0.6B on --device cuda,
# every rank sharing the one GPU), MPIRUN the launcher (default mpirun).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}; steps=${2:-8}; B=${3:-8}; G=${4:-8}
shift $(( $# < 4 ? $# : 4 ))
seeds=("$@"); [ ${#seeds[@]} -gt 0 ] || seeds=(1)
bin=$build/llm_sqlrl
mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null || { echo "async_rollout: no $mpirun (Debian: openmpi-bin)"; exit 0; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Every trajectory trains (the filters off, as the GPU stage's model args have them): the fixture's
# first samples are mostly malformed, and its groups mostly score alike, so with the weights fixed
# the filters would leave the trainer 1-5 of 64 trajectories a step and nothing to overlap.
model_args=${SQLRL_BENCH_MODEL_ARGS:-"--config tiny --weights tests/fixtures/sft_tiny --eval-every $steps --eval-limit 40 \
--filter-truncated=false --filter-malformed=false --filter-no-valid-action=false --filter-zero-variance=false"}
args="$model_args --max-steps $steps --batch-size $B --group-size $G --save-every 0 --lr ${ASYNC_LR:-0}"
summary() {
  python3 - "$1" <<'PY' 2>/dev/null || echo "(python3 missing: see metrics.jsonl)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
# Steady state, the same steps in every mode: not step 1 (nothing sampled ahead yet), nor the last
# two, which have no batch left to sample ahead (one-step's last step, full K=2's last two, only
# train), so a mean over them would flatter the overlapped modes.
timed = rows[1:-2] or rows
mean = lambda k: sum(r["time"].get(k, 0) for r in timed) / len(timed)
ex = rows[-1].get("eval", {}).get("ex", float("nan"))
# The staleness of the trained tokens over the steps past the first K (the bound reached).
late = [r for r in rows if r.get("staleness", 0) == max(r.get("staleness", 0) for r in rows)]
stale = sum(r.get("staleness_mean", r.get("staleness", 0)) for r in late) / len(late)
print(f"{mean('step_s'):.3f} {mean('trainer_idle_fraction'):.3f} {mean('rollout_idle_fraction'):.3f} {ex:.4f} {stale:.2f} "
      f"{mean('overlap_fraction'):.4f}")
PY
}
echo "async_rollout: mpirun -np 2 --rollout-ranks 1, $steps steps of $B x $G, $(nproc) cores, ${SQLRL_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
echo "  model: $model_args"
rows=" ${ASYNC_ROWS:-np1 dp off one-step full partial} "
want() { [[ "$rows" == *" $1 "* ]]; }
row='%-6s %-12s %10s %13s %13s %8s %10s %8s %5s\n'
printf "$row" seed async "s/step" "trainer idle" "rollout idle" "final EX" staleness overlap same
# Whether run $1 sampled the trajectories of the seed's first run (fixed work); "-" for that one.
same() {
  if [ "$1" = "$first" ]; then echo -; elif cmp -s "$first/trajectories.jsonl" "$1/trajectories.jsonl"; then echo yes
  else echo no; fi
}
for seed in "${seeds[@]}"; do
  declare -A step_s=()
  first= bound=
  # One process on every core, in turn (off) and one step ahead with the scoring overlapped.
  for mode in off one-step; do
    want np1 || continue
    out="$work/np1-$mode-$seed"
    "$bin" train $args --seed "$seed" --async "$mode" --out "$out" >/dev/null
    read -r s ti ri ex st ov <<<"$(summary "$out")"
    step_s[np1-$mode]=$s
    first=${first:-$out}
    printf "$row" "$seed" "np1 $mode" "$s" "-" "-" "$ex" "$st" "$ov" "$(same "$out")"
  done
  # The same two processes as plain data parallel (each rolls out and trains half): the baseline
  # a disaggregated layout has to beat on these cores.
  if want dp; then
    out="$work/dp-$seed"
    "$mpirun" -np 2 --oversubscribe "$bin" train $args --seed "$seed" --out "$out" >/dev/null
    read -r s ti ri ex st ov <<<"$(summary "$out")"
    first=${first:-$out}
    printf "$row" "$seed" "np2 DP" "$s" "-" "-" "$ex" "$st" "-" "$(same "$out")"
  fi
  # partial: full, the newest batch ahead taking the next weights at decode step PARTIAL_STEP.
  for mode in off one-step full partial; do
    want "$mode" || continue
    out="$work/$mode-$seed"
    extra=(--async "$mode")
    [ "$mode" != partial ] || extra=(--async full --partial-rollout "${PARTIAL_STEP:-32}")
    "$mpirun" -np 2 --oversubscribe "$bin" train $args --seed "$seed" --rollout-ranks 1 "${extra[@]}" --max-staleness 2 \
      --out "$out" >/dev/null
    read -r s ti ri ex st ov <<<"$(summary "$out")"
    step_s[$mode]=$s
    # off's two sides taken apart: with perfect overlap a step would cost the busier side's time.
    [ "$mode" != off ] || bound=$(python3 -c "print(f'{1 / max(1 - $ti, 1 - $ri):.2f}')" 2>/dev/null || echo "?")
    first=${first:-$out}
    printf "$row" "$seed" "$mode" "$s" "$ti" "$ri" "$ex" "$st" "-" "$(same "$out")"
  done
  # The speedups of the rows that ran, against off on the same layout.
  ratios=""
  for mode in one-step full partial; do
    [ -n "${step_s[off]:-}" ] && [ -n "${step_s[$mode]:-}" ] &&
      ratios+="$(python3 -c "print(f'$mode {${step_s[off]} / ${step_s[$mode]}:.2f}x off; ')" 2>/dev/null)"
  done
  [ -n "${step_s[np1-off]:-}" ] && [ -n "${step_s[np1-one-step]:-}" ] &&
    ratios+="$(python3 -c "print(f'one process: one-step {${step_s[np1-off]} / ${step_s[np1-one-step]}:.2f}x off')" 2>/dev/null)"
  [ -z "${bound:-}" ] || ratios+="; perfect overlap of off's trainer and rollout rank: ${bound}x"
  echo "seed $seed, per step: $ratios"
done

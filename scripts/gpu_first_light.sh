#!/usr/bin/env bash
# First light on a GPU machine: every subcommand that runs a model, on a random Qwen3-0.6B-shaped
# checkpoint (`llm_sqlrl init`, the Qwen3 tokenizer of tests/fixtures), once with --device cpu
# and once with --device cuda, and the figures that must agree put side by side in
# OUT_DIR/first_light.md:
#   sft    one update: the loss (the mean NLL of the same data under the same weights) and the
#          gradient norm; bf16 activations keep both within ~1% (the budget checked: 2%)
#   train  one GRPO step, every filter off so the step trains: the policy entropy over the sampled
#          tokens (random weights: ~ln V = 11.93 nats on both; tokens differ, so 2%), the memory
#          plan's modes, the step's seconds
#   eval   two synthetic dev questions, one short turn: runs on both (EX is 0 for random weights)
#   generate  32 greedy tokens: runs on both (random weights leave argmax margins below bf16
#          resolution, so the ids are reported, not compared)
# A figure outside its budget, or a command that fails, makes the script exit 1.
#   scripts/gpu_first_light.sh OUT_DIR [BUILD_DIR]   (BUILD_DIR: a CUDA build, default build)
# SQLRL_FIRST_LIGHT_DEVICES="cpu" runs one side only (a rehearsal on a machine without a GPU);
# SQLRL_FIRST_LIGHT_CONFIG=config.json replaces the Qwen3-0.6B shape (a small one for that).
set -uo pipefail
out=${1:?usage: scripts/gpu_first_light.sh OUT_DIR [BUILD_DIR]}
build=${2:-build}
bin="$build/llm_sqlrl"
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
report="$out/first_light.md"
log="$out/first_light.log"
: > "$log"
status=0
rows=()

say() { echo "$*" | tee -a "$log"; }
# run NAME DEVICE CMD...: runs, times, logs; sets $secs; returns the command's status
run() {
  local name=$1 device=$2
  shift 2
  local t0=$(date +%s)
  say "-- $name ($device): $*"
  "$@" >> "$log" 2>&1
  local rc=$?
  secs=$(($(date +%s) - t0))
  [ $rc -eq 0 ] || { say "   FAILED (exit $rc)"; status=1; }
  return $rc
}
# field FILE KEY: the first numeric value of "KEY": in the file's last line
field() { tail -1 "$1" | grep -o "\"$2\":[-0-9.eE+]*" | head -1 | cut -d: -f2; }
# within A B REL: |A - B| <= REL * |A|
within() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; exit !(a != "" && b != "" && d <= r * m) }'; }
compare() {  # what cpu cuda budget
  local verdict=ok
  if [ -z "$2" ] || [ -z "$3" ]; then
    verdict="not compared (a side did not run)"
    [ "${SQLRL_FIRST_LIGHT_DEVICES:-cpu cuda}" != "cpu cuda" ] || status=1
  elif ! within "$2" "$3" "$4"; then
    verdict="**OUT OF BUDGET**"
    status=1
  fi
  rows+=("| $1 | $2 | $3 | $4 relative | $verdict |")
}

ckpt="$out/ckpt"
rm -rf "$ckpt" "$out"/sft-* "$out"/train-* "$out"/eval-* "$out/synth"
shape=(--preset qwen3-0.6b)
[ -z "${SQLRL_FIRST_LIGHT_CONFIG:-}" ] || shape=(--config "$SQLRL_FIRST_LIGHT_CONFIG")
run init cpu "$bin" init "${shape[@]}" --tokenizer "$root/tests/fixtures/tokenizer/qwen3_tokenizer.json" \
  --out "$ckpt" --seed 1 || exit 1
run plan cpu "$bin" plan --weights "$ckpt" --seq 4096 --rollout-seq 2048 --kl
run synth cpu "$bin" data synth --out "$out/synth" --seed 1 || exit 1

cat > "$out/sft.jsonl" <<'EOF'
{"messages": [{"role": "user", "content": "How many singers are there?"}, {"role": "assistant", "content": "SELECT count(*) FROM singer"}]}
{"messages": [{"role": "user", "content": "List the names of all concerts in 2014."}, {"role": "assistant", "content": "SELECT concert_name FROM concert WHERE year = 2014"}]}
{"messages": [{"role": "user", "content": "What is the average age of the French singers?"}, {"role": "assistant", "content": "SELECT avg(age) FROM singer WHERE country = 'France'"}]}
{"messages": [{"role": "user", "content": "Show the stadium with the largest capacity."}, {"role": "assistant", "content": "SELECT name FROM stadium ORDER BY capacity DESC LIMIT 1"}]}
EOF

declare -A sft_loss sft_norm train_entropy train_modes train_secs
for device in ${SQLRL_FIRST_LIGHT_DEVICES:-cpu cuda}; do
  run "sft" $device "$bin" sft --weights "$ckpt" --tokenizer "$ckpt" --data "$out/sft.jsonl" --out "$out/sft-$device" --device $device \
    --max-steps 1 --grad-accum 4 --micro-batch-tokens 512 --chat-template qwen3 &&
    { sft_loss[$device]=$(field "$out/sft-$device/metrics.jsonl" loss); sft_norm[$device]=$(field "$out/sft-$device/metrics.jsonl" grad_norm); }
  run "train" $device "$bin" train --weights "$ckpt" --out "$out/train-$device" --device $device --max-steps 1 \
    --batch-size 1 --group-size 2 --max-turns 1 --max-turn-tokens 256 --max-total-tokens 2048 --enable-thinking=false \
    --chat-template qwen3 --filter-truncated=false --filter-malformed=false --filter-no-valid-action=false \
    --filter-zero-variance=false --save-every 0 &&
    { train_entropy[$device]=$(field "$out/train-$device/metrics.jsonl" entropy);
      train_modes[$device]=$(grep '^modes:' "$out/train-$device/memory_plan.txt");
      train_secs[$device]=$secs; }
  run "eval" $device "$bin" eval --weights "$ckpt" --dataset "spider:$out/synth" --limit 2 --max-turns 1 \
    --max-turn-tokens 64 --device $device --out "$out/eval-$device" --chat-template qwen3
  run "generate" $device "$bin" generate --weights "$ckpt" --tokenizer "$ckpt" --prompt "SELECT name FROM" --max-new-tokens 32 \
    --temperature 0 --print-ids --device $device
done

compare "sft: first update's loss (nats/token)" "${sft_loss[cpu]:-}" "${sft_loss[cuda]:-}" 0.02
compare "sft: first update's gradient norm" "${sft_norm[cpu]:-}" "${sft_norm[cuda]:-}" 0.02
compare "train: policy entropy (nats)" "${train_entropy[cpu]:-}" "${train_entropy[cuda]:-}" 0.02

{
  echo "# First light: ${SQLRL_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null)}, $(date -u +%Y-%m-%d)"
  echo
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/device: /'
  echo
  echo "| figure | cpu | cuda | budget | verdict |"
  echo "|---|---:|---:|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "train, memory plan: cpu \`${train_modes[cpu]:-}\`, cuda \`${train_modes[cuda]:-}\`"
  echo "train, one step: cpu ${train_secs[cpu]:-?} s, cuda ${train_secs[cuda]:-?} s"
  echo
  echo "Every command's output: first_light.log. Exit status $status."
} > "$report"
cat "$report"
exit $status

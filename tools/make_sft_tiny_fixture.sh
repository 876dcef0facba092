#!/usr/bin/env bash
# Writes tests/fixtures/sft_tiny/: the embedded tiny Qwen3 (139,648 parameters, the embedded BPE
# tokenizer) after 400 SFT updates on the synthetic benchmark's gold SkyRL-SQL demonstrations.
# From it, GRPO groups have reward variance at the first step (about a quarter of the
# trajectories are well-formed), so tests that compare training runs (mpirun -np 2 vs
# --grad-accum 2, tests/rl_train/test_train_cli.cpp) compare real, non-zero updates. It is the
# project's own output, not a reference: only a starting point. About 2 minutes on 2 cores.
#   tools/make_sft_tiny_fixture.sh [BUILD]      (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/llm_sqlrl
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin" train --max-steps 1 --out "$work/init" >/dev/null
"$bin" sft synth-demos --protocol skyrl --data "$work/init/cache/synth" --out "$work/demos.jsonl" >/dev/null
"$bin" sft --weights "$work/init/checkpoints/step-1" --data "$work/demos.jsonl" --lr 3e-3 --decay constant \
  --epochs 6 --max-steps 400 --micro-batch-tokens 4096 --out "$work/sft" >/dev/null
out=tests/fixtures/sft_tiny
mkdir -p "$out"
for f in config.json model.safetensors tokenizer.json; do cp "$work/sft/checkpoints/step-400/$f" "$out/"; done
echo "make_sft_tiny_fixture: $(du -sh "$out" | cut -f1) in $out"

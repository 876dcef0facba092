#!/usr/bin/env bash
# SkyRL-SQL (MTI-LLM workshop at NeurIPS 2025, OpenReview VNPGUGbC1p): multi-turn GRPO from Qwen2.5-Coder-7B-Instruct, no SFT, greedy eval.
#   scripts/repro_skyrl.sh spider:data/spider Qwen2.5-Coder-7B-Instruct/ [OUT]; SQLRL_SMOKE=1 for CI
PAPER=skyrl PROTOCOL=skyrl SFT=none
EVAL_FLAGS=(--compare bird)  # §4.1: set equality of result rows
PAPER_ROWS=(
  "| Qwen2.5-Coder-7B-Instruct | Spider-Dev / Test / Realistic / DK / Syn | 77.1 / 79.6 / 74.2 / 62.8 / 66.2 | Table 3 |"
  "| SkyRL-SQL-7B | Spider-Dev / Test / Realistic / DK / Syn | 83.9 / 85.2 / 81.1 / 72.0 / 73.7 | Table 3 |"
)
source "$(dirname "$0")/repro_common.sh"
repro_main "$@"

#!/usr/bin/env bash
# MTIR-SQL (arXiv 2510.25510): multi-turn tool-integrated GRPO-Filter from Qwen3-4B, no SFT, pass@1.
#   scripts/repro_mtir.sh bird:data/bird Qwen3-4B/ [OUT]; SQLRL_SMOKE=1 for CI
PAPER=mtir PROTOCOL=mtir SFT=none
EVAL_FLAGS=()
PAPER_ROWS=(
  "| Qwen2.5-Coder-7B-Instruct | BIRD-Dev | 50.9 | Table 1 |"
  "| MTIR-SQL + Qwen3-4B | BIRD-Dev | 64.4 | Table 1, abstract |"
  "| MTIR-SQL + Qwen3-4B | Spider-Dev | 84.6 | abstract |"
)
source "$(dirname "$0")/repro_common.sh"
repro_main "$@"

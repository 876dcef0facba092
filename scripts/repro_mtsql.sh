#!/usr/bin/env bash
# MTSQL-R1 (arXiv 2510.12831): self-taught warm-start SFT (Algorithm 1) then long-horizon GRPO
# from Qwen3, on CoSQL / SParC; EX and EM.
#   scripts/repro_mtsql.sh cosql:data/cosql Qwen3-4B/ [OUT]; SQLRL_SMOKE=1 for CI
PAPER=mtsql PROTOCOL=mtsql SFT=self-taught
EVAL_FLAGS=()
PAPER_ROWS=(
  "| Qwen3-1.7B MTSQL-R1 (EX / EM) | CoSQL-Dev | 77.3 / 63.5 | Table 2 |"
  "| Qwen3-1.7B MTSQL-R1 (EX / EM) | SParC-Dev | 76.2 / 66.1 | Table 2 |"
  "| Qwen3-4B MTSQL-R1 (EX / EM) | CoSQL-Dev | 79.9 / 65.2 | Table 2 |"
  "| Qwen3-4B MTSQL-R1 (EX / EM) | SParC-Dev | 79.0 / 68.7 | Table 2 |"
)
source "$(dirname "$0")/repro_common.sh"
repro_main "$@"

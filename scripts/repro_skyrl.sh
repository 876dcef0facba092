#!/usr/bin/env bash
# SkyRL-SQL (MTI-LLM workshop at NeurIPS 2025, OpenReview VNPGUGbC1p): multi-turn GRPO from
# Qwen2.5-Coder-7B-Instruct on 653 Spider-train questions, no SFT; Table 1's 2x2 (trained single- or
# multi-turn x evaluated single- or multi-turn) over Spider dev/test and three Spider variants, greedy.
#   scripts/repro_skyrl.sh --weights Qwen2.5-Coder-7B-Instruct --train synsql:data/skyrl653 \
#       --spider data/spider_data --spider-dk data/Spider-DK --spider-syn data/Spider-Syn --spider-realistic data/realistic
#   SQLRL_SMOKE=1 scripts/repro_skyrl.sh --out /tmp/x     (CI: synthetic benchmark, tiny model)
CITATION="SkyRL-SQL (MTI-LLM workshop at NeurIPS 2025, OpenReview VNPGUGbC1p)"
PAPER=skyrl SIZE=7B SFT=none FILTER_EMPTY=0
TRAIN_HELP="  trains on SkyRL-SQL's 653 questions (NovaSky-AI/SkyRL-SQL-653-data on Hugging Face, a parquet file:
  write it out as a synsql folder, docs/paper-skyrl.md)"
COLUMNS=(
  "Spider-Dev|ex|spider|dev||"
  "Spider-Test|ex|spider|test||"
  "Spider-Realistic|ex|spider-realistic|dev||"
  "Spider-DK|ex|spider-dk|dev||"
  "Spider-Syn|ex|spider-syn|dev||"
  "Avg|avg:ex|||"
)
source "$(dirname "$0")/repro_common.sh"
repro_main "$@"

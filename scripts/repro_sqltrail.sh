#!/usr/bin/env bash
# SQL-Trail (arXiv 2601.17699): SFT (distilled agent trajectories, SQLRL_SFT_DATA) then multi-turn GRPO
# from Qwen2.5-Coder; majority-vote eval over 6 samples (Table 1 "Maj").
#   SQLRL_SFT_DATA=traj.jsonl scripts/repro_sqltrail.sh bird:data/bird Qwen2.5-Coder-7B/ [OUT]
#   SQLRL_SMOKE=1 scripts/repro_sqltrail.sh  (SFT on the synthetic benchmark's gold demos)
PAPER=sqltrail PROTOCOL=sqltrail SFT=demos
EVAL_FLAGS=(--mode vote --samples 6 --temperature 1.0)
PAPER_ROWS=(
  "| SQL-Trail-7B (greedy / majority) | BIRD-Dev | 60.1 / 64.2 | §5.1 |"
  "| SQL-Trail-7B | Spider-Dev | 86.8 | §5.1 |"
  "| single-pass RL / multi-turn RL, 7B (majority) | Spider-Dev | 82.8 / 84.5 | Table 2 |"
  "| single-pass RL / multi-turn RL, 7B (majority) | BIRD-Dev | 56.3 / 59.3 | Table 2 |"
)
source "$(dirname "$0")/repro_common.sh"
repro_main "$@"

#!/usr/bin/env bash
# SQL-Trail (arXiv 2601.17699): SFT on teacher trajectories, then multi-turn GRPO on 1,027 curated
# SynSQL + Spider questions (A.6 pass@6 curation, in the recipe); Table 1: greedy and majority-of-8 EX
# on Spider dev/test and BIRD dev (out of distribution: never trained on), Table 2 single-pass RL.
#   scripts/repro_sqltrail.sh --weights Qwen2.5-Coder-7B --train synsql:data/synsql-spider-mix --sft-data traj.jsonl \
#       --spider data/spider_data --bird data/bird --spider-dk ... --spider-syn ... --spider-realistic ...
#   SQLRL_SMOKE=1 scripts/repro_sqltrail.sh --out /tmp/x     (CI: synthetic benchmark, tiny model)
CITATION="SQL-Trail (arXiv 2601.17699)"
PAPER=sqltrail SIZE=7B SFT=sft FILTER_EMPTY=0
TRAIN_HELP="  trains on SynSQL-2.5M + Spider-train candidates (A.6: the recipe's pass@6 pre-pass keeps 700 + 327);
  the SFT trajectories (A.5) are distilled from a closed teacher and not public: give your own with --sft-data"
COLUMNS=(
  "Spider (dev) Gre|ex|spider|dev|greedy|"
  "Spider (dev) Maj|ex|spider|dev|vote|"
  "Spider (test) Gre|ex|spider|test|greedy|"
  "Spider (test) Maj|ex|spider|test|vote|"
  "BIRD (dev) Gre|ex|bird|dev|greedy|"
  "BIRD (dev) Maj|ex|bird|dev|vote|"
  "Spider-DK Gre|ex|spider-dk|dev|greedy|"
  "Spider-DK Maj|ex|spider-dk|dev|vote|"
  "Spider-Syn Gre|ex|spider-syn|dev|greedy|"
  "Spider-Syn Maj|ex|spider-syn|dev|vote|"
  "Spider-Realistic Gre|ex|spider-realistic|dev|greedy|"
  "Spider-Realistic Maj|ex|spider-realistic|dev|vote|"
  # Table 7 prints plain columns; its 7B SFT + RL BIRD 64.2 is Table 1's majority vote.
  "Spider (Dev)|ex|spider|dev|vote|"
  "Spider (Test)|ex|spider|test|vote|"
  "BIRD (Dev)|ex|bird|dev|vote|"
)
source "$(dirname "$0")/repro_common.sh"
repro_main "$@"

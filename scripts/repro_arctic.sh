#!/usr/bin/env bash
# Arctic-Text2SQL-R1 (arXiv 2505.20315): single-turn GRPO with the 1 / 0.1 / 0 execution reward from
# OmniSQL-7B, no SFT of its own, on BIRD train (or Spider train) without empty-result gold queries; greedy
# EX on BIRD dev and Spider test beside the authors' 7B model card (the paper's own tables not re-read).
#   scripts/repro_arctic.sh --weights OmniSQL-7B --train bird:data/bird --bird data/bird --spider data/spider_data
#   SQLRL_SMOKE=1 scripts/repro_arctic.sh --out /tmp/x     (CI: synthetic benchmark, tiny model)
PAPER=arctic SIZE=7B SFT=none FILTER_EMPTY=1
CITATION="Arctic-Text2SQL-R1 (arXiv 2505.20315)"
TRAIN_HELP="  trains on BIRD train (or Spider train) with the gold queries that return no rows dropped; the paper's
  mix (BIRD + Spider train + filtered Gretel-Synth, second-hand) is not bundled (docs/paper-arctic.md)"
COLUMNS=(
  "BIRD-dev|ex|bird|dev||"
  "Spider-test|ex|spider|test||"
)
source "$(dirname "$0")/repro_common.sh"
repro_main "$@"

#!/usr/bin/env bash
# MTIR-SQL (arXiv 2510.25510): multi-turn tool-integrated GRPO with the trajectory filter and no KL,
# from Qwen3-4B on BIRD (or Spider) train without empty-result gold queries (§4.1); greedy EX on BIRD
# dev, Spider dev and test; Table 4's single-turn ("standard reasoning") GRPO baseline.
#   scripts/repro_mtir.sh --weights Qwen3-4B --train bird:data/bird --bird data/bird --spider data/spider_data
#   SQLRL_SMOKE=1 scripts/repro_mtir.sh --out /tmp/x     (CI: synthetic benchmark, tiny model)
CITATION="MTIR-SQL (arXiv 2510.25510)"
PAPER=mtir SIZE=4B SFT=none FILTER_EMPTY=1
TRAIN_HELP="  trains on BIRD train (or Spider train) with the gold queries that return no rows dropped (§4.1)"
COLUMNS=(
  "BIRD Dev EX (%)|ex|bird|dev||"
  "SPIDER Dev EX (%)|ex|spider|dev||"
  "SPIDER Test EX (%)|ex|spider|test||"
)
source "$(dirname "$0")/repro_common.sh"
repro_main "$@"

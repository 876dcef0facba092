#!/usr/bin/env bash
# MTSQL-R1 (arXiv 2510.12831): self-taught warm-start SFT (3 rounds), then GRPO with process rewards
# over a difficulty curriculum, on CoSQL or SParC; Table 2: EX and EM in domain (the set trained on)
# and out of domain (the other one), after each SFT round and after RL.
#   scripts/repro_mtsql.sh --weights Qwen3-4B --train cosql:data/cosql --cosql data/cosql --sparc data/sparc
#   SQLRL_SMOKE=1 scripts/repro_mtsql.sh --out /tmp/x     (CI: synthetic benchmark, tiny model)
CITATION="MTSQL-R1 (arXiv 2510.12831)"
PAPER=mtsql SIZE=4B SFT=self-taught FILTER_EMPTY=0
TRAIN_HELP="  trains on CoSQL or SParC train (one run per set: the other set is its out-of-domain column)"
COLUMNS=(
  "CoSQL EX (ID)|ex|cosql|dev||id"
  "CoSQL EM (ID)|em|cosql|dev||id"
  "SParC EX (ID)|ex|sparc|dev||id"
  "SParC EM (ID)|em|sparc|dev||id"
  "CoSQL EX (OOD)|ex|cosql|dev||ood"
  "CoSQL EM (OOD)|em|cosql|dev||ood"
  "SParC EX (OOD)|ex|sparc|dev||ood"
  "SParC EM (OOD)|em|sparc|dev||ood"
  "Avg EX|avg:ex|||"
  "Avg EM|avg:em|||"
  "Average|avg:all|||"
)
source "$(dirname "$0")/repro_common.sh"
repro_main "$@"

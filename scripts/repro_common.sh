#!/usr/bin/env bash
# Shared by scripts/repro_{mtir,sqltrail,skyrl,mtsql}.sh (sourced, not run). Each paper's script
# sets PAPER, PROTOCOL, SFT (none | demos | self-taught), EVAL_FLAGS, PAPER_ROWS and calls
# repro_main "$@". The recipe: [SFT] -> `llm_sqlrl train --config configs/$PAPER.toml` -> eval of
# the starting weights, the SFT weights and the RL weights on the dev split -> OUT/table.md, our
# numbers beside the paper's.
#
#   scripts/repro_<paper>.sh FORMAT:DATASET_DIR WEIGHTS_DIR [OUT_DIR]
#     FORMAT: spider | bird | sparc | cosql | synsql; WEIGHTS_DIR: HF folder with tokenizer.json
#   SQLRL_SMOKE=1 scripts/repro_<paper>.sh [OUT_DIR]
#     CI smoke test: the synthetic benchmark and a tiny Qwen3 (both from `llm_sqlrl demo --size
#     mini`), 2 GRPO steps of 2 x 2 rollouts, short turns, 4 dev questions; same commands otherwise.
# Environment: SQLRL_BIN (default build/llm_sqlrl), SQLRL_DEVICE (default cpu),
# SQLRL_SFT_DATA (JSONL for SFT=demos on a real dataset; without it that SFT stage is skipped),
# SQLRL_EXTRA_TRAIN_FLAGS (appended to the train command).
set -euo pipefail

# The paper behind $PAPER, as the table cites it.
paper_citation() {
  case $PAPER in
    mtir) echo "MTIR-SQL, arXiv 2510.25510" ;;
    sqltrail) echo "SQL-Trail, arXiv 2601.17699" ;;
    skyrl) echo "SkyRL-SQL, MTI-LLM workshop at NeurIPS 2025, OpenReview VNPGUGbC1p" ;;
    mtsql) echo "MTSQL-R1, arXiv 2510.12831" ;;
    *) echo "the $PAPER paper" ;;
  esac
}

repro_main() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  local bin=${SQLRL_BIN:-$root/build/llm_sqlrl}
  [[ -x $bin ]] || { echo "repro_$PAPER: no binary at $bin (build first or set SQLRL_BIN)" >&2; exit 1; }
  local smoke=${SQLRL_SMOKE:-0} dataset weights out
  local train_flags=() eval_flags=() sft_flags=()
  if [[ $smoke == 1 ]]; then
    out=${1:-runs/repro-$PAPER-smoke}
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    "$bin" demo --size mini --out "$out/init" --quiet > "$out/init.log"
    local synth
    synth=$(ls -d "$out"/init/cache/synth-*/ | head -1)
    synth=${synth%/}
    if [[ $PROTOCOL == mtsql ]]; then dataset="sparc:$synth/sparc"; else dataset="spider:$synth"; fi
    weights=$(ls -d "$out"/init/sft/checkpoints/step-* | sort -t- -k2 -n | tail -1)
    # The recipes' difficulty pre-pass (K rollouts of every training question) is left out of a
    # 2-step smoke run; tests/rl_train covers it.
    train_flags=(--max-steps 2 --batch-size 2 --group-size 2 --max-turn-tokens 16 --max-total-tokens 3072
                 --chat-template qwen3 --save-every 0 --difficulty-samples 0 --curate off --curriculum-bin-size 0)
    eval_flags=(--limit 4 --max-turn-tokens 16 --max-total-tokens 3072 --chat-template qwen3 --quiet)
    sft_flags=(--max-steps 2 --micro-batch-tokens 4096)
  else
    dataset=${1:?usage: scripts/repro_$PAPER.sh FORMAT:DATASET_DIR WEIGHTS_DIR [OUT_DIR] (or SQLRL_SMOKE=1)}
    weights=${2:?usage: scripts/repro_$PAPER.sh FORMAT:DATASET_DIR WEIGHTS_DIR [OUT_DIR]}
    out=${3:-runs/repro-$PAPER}
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
  fi
  local format=${dataset%%:*} dir=${dataset#*:}
  local tok="$weights/tokenizer.json"
  local log="$out/repro.log"
  : > "$log"
  run() { echo "+ $*" | tee -a "$log"; "$@" >> "$log" 2>&1; }
  latest() { { ls -d "$1"/checkpoints/step-* 2>/dev/null || true; } | sort -t- -k2 -n | tail -1; }

  # ---- SFT, where the paper has one
  local start=$weights sft_note="none (the paper starts RL from the released model)"
  if [[ $SFT == self-taught ]]; then
    run "$bin" sft self-taught --data "$dir" --format "$format" --weights "$weights" --tokenizer "$tok" \
        --protocol "$PROTOCOL" --out "$out/sft" ${sft_flags[@]+"${sft_flags[@]}"} \
        $([[ $smoke == 1 ]] && echo --rounds 1 --samples 2 --limit 4 --max-turn-tokens 16 --max-total-tokens 3072)
    local round
    round=$({ ls -d "$out"/sft/round-* 2>/dev/null || true; } | sort -t- -k2 -n | tail -1)
    if [[ -n $round && -n $(latest "$round") ]]; then start=$(latest "$round"); sft_note="self-taught warm start ($round)"
    else sft_note="self-taught warm start kept no trajectory (RL starts from the given weights)"; fi
  elif [[ $SFT == demos ]]; then
    local data=${SQLRL_SFT_DATA:-}
    if [[ -z $data && $smoke == 1 ]]; then
      data="$out/sft_demos.jsonl"
      run "$bin" sft synth-demos --protocol "$PROTOCOL" --data "$dir" --out "$data"
    fi
    if [[ -n $data ]]; then
      run "$bin" sft --data "$data" --weights "$weights" --tokenizer "$tok" --out "$out/sft" ${sft_flags[@]+"${sft_flags[@]}"}
      start=$(latest "$out/sft")
      sft_note="SFT on $data"
    else
      sft_note="skipped: the paper distils a closed teacher's trajectories; give them as SQLRL_SFT_DATA"
    fi
  fi

  # ---- RL with the paper's recipe
  run "$bin" train --config "$root/configs/$PAPER.toml" --weights "$start" --tokenizer "$tok" --dataset "$dataset" \
      --device "${SQLRL_DEVICE:-cpu}" --out "$out/rl" ${train_flags[@]+"${train_flags[@]}"} ${SQLRL_EXTRA_TRAIN_FLAGS:-}
  local final
  final=$(latest "$out/rl")

  # ---- eval: starting weights, SFT weights (when different), RL weights
  local stages=(base) paths=("$weights")
  [[ $start != "$weights" ]] && stages+=(sft) && paths+=("$start")
  stages+=(rl) && paths+=("$final")
  local i
  for i in "${!stages[@]}"; do
    run "$bin" eval --weights "${paths[$i]}" --tokenizer "$tok" --dataset "$dataset" --split dev --protocol "$PROTOCOL" \
        --out "$out/eval-${stages[$i]}" ${EVAL_FLAGS[@]+"${EVAL_FLAGS[@]}"} ${eval_flags[@]+"${eval_flags[@]}"}
  done

  # ---- the table
  local bench
  case $format in
    spider) bench="Spider-Dev" ;; bird) bench="BIRD-Dev" ;; sparc) bench="SParC-Dev" ;; cosql) bench="CoSQL-Dev" ;; *) bench="$format" ;;
  esac
  [[ $smoke == 1 ]] && bench="synthetic dev (smoke run)"
  {
    echo "# $PAPER reproduction: $bench"
    echo
    echo "dataset $dataset, weights $weights, recipe configs/$PAPER.toml$([[ $smoke == 1 ]] && echo ' (smoke: 2 steps, tiny model)'), SFT: $sft_note"
    echo
    echo "| Model | EX (%) | EM (%) | avg turns | source |"
    echo "|---|---:|---:|---:|---|"
    for i in "${!stages[@]}"; do
      jq -r --arg name "ours: ${stages[$i]}" \
        '"| \($name) | \(.ex * 1000 | round / 10) | \(.em * 1000 | round / 10) | \(.avg_turns * 100 | round / 100) | this run |"' \
        "$out/eval-${stages[$i]}/summary.json"
    done
    echo
    echo "The paper's numbers (EX %; from $(paper_citation)):"
    echo
    echo "| Model | Benchmark | EX (%) | source |"
    echo "|---|---|---:|---|"
    printf '%s\n' "${PAPER_ROWS[@]}"
  } > "$out/table.md"
  cat "$out/table.md"
}

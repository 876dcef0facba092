#!/usr/bin/env bash
# Shared by scripts/repro_{skyrl,sqltrail,mtir,mtsql}.sh (sourced, not run). Each paper's script sets
#   PAPER        recipe name (configs/$PAPER.toml) and scripts/paper_tables/$PAPER.tsv
#   CITATION     the paper, as --help names it
#   SIZE         the model size of the paper's headline rows (the rows the given weights fill)
#   TRAIN_HELP   which data the paper trains on (for --help)
#   SFT          none | sft (SQL-Trail: SFT on given trajectories) | self-taught (MTSQL-R1 rounds)
#   FILTER_EMPTY 1 = drop training questions whose gold query returns no rows (MTIR-SQL §4.1)
#   COLUMNS      one "NAME|METRIC|DATA|SPLIT|MODE|DOMAIN" per paper column ours can fill:
#                  NAME   the column header exactly as in the TSV
#                  METRIC ex | em | avg:ex | avg:em | avg:all (the mean of the row's other columns)
#                  DATA   spider | spider-dk | spider-syn | spider-realistic | bird | sparc | cosql
#                  SPLIT  dev | test;  MODE "" (the recipe's [eval]) | greedy | vote
#                  DOMAIN "" | id (only when trained on DATA) | ood (only when trained on another set)
# and calls repro_main "$@". What it runs, in order, into OUT/:
#   [filter]  MTIR-SQL: the training split without empty-result gold queries (data stats --filter-empty)
#   [sft]     SQL-Trail: sft --config PAPER on --sft-data; MTSQL-R1: sft self-taught --config PAPER
#   rl        train --config PAPER from the SFT (or given) weights on --train
#   rl-single-turn  the same with --single-turn (when the paper's table has a single-turn RL row)
#   eval-*    eval --config PAPER of every run the table's rows name, on every column's set
#   table.md  every table of the paper's TSV: for each column the paper's number, ours, and ours - paper
set -euo pipefail

repro_usage() {
  cat <<EOF
usage: scripts/repro_$PAPER.sh --weights DIR --train FORMAT:PATH [options]
       SQLRL_SMOKE=1 scripts/repro_$PAPER.sh [--out DIR]

Reproduces the tables of $CITATION with configs/$PAPER.toml:
$TRAIN_HELP
  --weights DIR          the starting model (HF folder with tokenizer.json); its size fills the paper's
                         rows of --size (default $SIZE)
  --train SPEC           the training data, FORMAT:PATH as \`llm_sqlrl train --dataset\` takes it
  --spider DIR           Spider 1.0 (spider_data/: dev, and test for the Spider-Test columns)
  --spider-dk DIR        Spider-DK (github.com/ygan/Spider-DK), databases from --spider
  --spider-syn DIR       Spider-Syn (github.com/ygan/Spider-Syn), databases from --spider
  --spider-realistic DIR Spider-Realistic (zenodo.org/record/5205322), databases from --spider
  --bird DIR             BIRD (bird-bench.github.io: dev.json, dev_databases/)
  --sparc DIR / --cosql DIR   SParC / CoSQL (yale-lily.github.io)
  --sft-data FILE        SQL-Trail: the SFT trajectories (JSONL, \`llm_sqlrl sft --data\`); without it no SFT
  --size LABEL           the paper's model size the weights stand for (default $SIZE)
  --out DIR              output folder (default runs/repro-$PAPER)
  --device cpu|cuda      (default cpu)
  --limit N              evaluate the first N questions of each set only (0 = all)
Columns whose set is not given stay empty in "ours". Environment: SQLRL_BIN (default build/llm_sqlrl),
SQLRL_EXTRA_TRAIN_FLAGS / SQLRL_EXTRA_EVAL_FLAGS (appended to every train / eval command).
SQLRL_SMOKE=1: the synthetic benchmark and a tiny Qwen3 (llm_sqlrl demo --size mini) stand in for every
set and the weights; 2 GRPO steps, 4 questions per evaluation; the same commands otherwise.
EOF
}

repro_main() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  local bin=${SQLRL_BIN:-$root/build/llm_sqlrl} smoke=${SQLRL_SMOKE:-0}
  local weights="" train="" sft_data="" out="runs/repro-$PAPER" device=cpu limit=0 size=$SIZE
  declare -A sets=()
  while (($#)); do
    case $1 in
      -h | --help) repro_usage; return 0 ;;
      --weights) weights=$2; shift 2 ;;
      --train) train=$2; shift 2 ;;
      --spider | --spider-dk | --spider-syn | --spider-realistic | --bird | --sparc | --cosql)
        sets[${1#--}]=$2; shift 2 ;;
      --sft-data) sft_data=$2; shift 2 ;;
      --size) size=$2; shift 2 ;;
      --out) out=$2; shift 2 ;;
      --device) device=$2; shift 2 ;;
      --limit) limit=$2; shift 2 ;;
      *) echo "repro_$PAPER: unknown argument '$1' (see --help)" >&2; return 2 ;;
    esac
  done
  [[ -x $bin ]] || { echo "repro_$PAPER: no binary at $bin (build first or set SQLRL_BIN)" >&2; return 1; }
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  local log="$out/repro.log"
  : > "$log"
  run() { echo "+ $*" | tee -a "$log"; "$@" >> "$log" 2>&1 || { echo "repro_$PAPER: failed (see $log): $*" >&2; return 1; }; }
  latest() { { ls -d "$1"/checkpoints/step-* 2>/dev/null || true; } | sort -t- -k2 -n | tail -1; }

  local train_flags=() eval_flags=() sft_flags=() st_flags=()
  if [[ $smoke == 1 ]]; then
    run "$bin" demo --size mini --out "$out/init" --quiet
    local synth
    synth=$(ls -d "$out"/init/cache/synth-*/ | head -1)
    synth=${synth%/}
    weights=$(latest "$out/init/sft")
    # Every set is the synthetic one (its SParC form for the dialogue sets); test splits read dev.
    for k in spider spider-dk spider-syn spider-realistic bird; do sets[$k]=$synth; done
    sets[sparc]=$synth/sparc sets[cosql]=$synth/sparc
    if [[ $SFT == self-taught ]]; then train="sparc:$synth/sparc"; else train="spider:$synth"; fi
    limit=4
    # The recipes' difficulty pre-pass (K rollouts of every training question) is left out of a
    # 2-step smoke run; tests/rl_train covers it.
    train_flags=(--max-steps 2 --batch-size 2 --group-size 2 --max-turn-tokens 16 --max-total-tokens 3072
                 --chat-template qwen3 --save-every 0 --difficulty-samples 0 --curate off --curriculum-bin-size 0)
    eval_flags=(--max-turn-tokens 16 --max-total-tokens 3072 --chat-template qwen3)
    sft_flags=(--max-steps 2 --micro-batch-tokens 4096 --grad-accum 1 --chat-template qwen3)
    st_flags=(--rounds 3 --samples 2 --limit 4 --max-turn-tokens 16 --max-total-tokens 3072)
  fi
  [[ -n $weights && -n $train ]] || { echo "repro_$PAPER: --weights and --train are required (see --help)" >&2; return 2; }
  local tok="$weights/tokenizer.json" train_format=${train%%:*} train_dir=${train#*:}
  train_dir=${train_dir%%,*}

  # ---- the training data: MTIR-SQL drops gold queries with empty results (§4.1)
  local train_spec=$train
  if [[ ${FILTER_EMPTY:-0} == 1 ]]; then
    local filtered="$out/train-data" questions
    case $train_format in
      bird) questions=train.json ;; spider) questions=train_spider.json ;;
      *) echo "repro_$PAPER: the empty-result filter takes spider or bird training data, not $train_format" >&2; return 2 ;;
    esac
    rm -rf "$filtered" && mkdir -p "$filtered"
    run "$bin" data stats --dataset "$train" --split train --filter-empty "$filtered/$questions.kept"
    # The same folder with the kept records as the training split (links to everything else).
    local f
    for f in "$train_dir"/*; do [[ $(basename "$f") == "$questions" ]] || ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$filtered/"; done
    mv "$filtered/$questions.kept" "$filtered/$questions"
    train_spec="$train_format:$filtered${train#"$train_format:$train_dir"}"
  fi

  # ---- SFT, where the paper has one; runs[key] = checkpoint
  declare -A runs=([base]=$weights)
  local start=$weights notes=()
  if [[ $SFT == sft ]]; then
    if [[ -z $sft_data && $smoke == 1 ]]; then
      sft_data="$out/sft_demos.jsonl"
      run "$bin" sft synth-demos --protocol "$PAPER" --data "$train_dir" --out "$sft_data"
    fi
    if [[ -n $sft_data ]]; then
      run "$bin" sft --config "$root/configs/$PAPER.toml" --data "$sft_data" --weights "$weights" --tokenizer "$tok" \
          --device "$device" --out "$out/sft" ${sft_flags[@]+"${sft_flags[@]}"}
      start=$(latest "$out/sft") runs[sft]=$start
    else
      notes+=("no SFT: the paper's SFT trajectories come from a closed teacher; give them with --sft-data (RL starts from --weights)")
    fi
  elif [[ $SFT == self-taught ]]; then
    run "$bin" sft self-taught --config "$root/configs/$PAPER.toml" --data "$train_dir" --format "$train_format" \
        --weights "$weights" --tokenizer "$tok" --device "$device" --out "$out/sft" \
        ${sft_flags[@]+"${sft_flags[@]}"} ${st_flags[@]+"${st_flags[@]}"}
    local round r
    for round in "$out"/sft/round-*; do
      [[ -d $round ]] || continue
      r=${round##*-}
      if [[ -n $(latest "$round") ]]; then runs[sft-round-$r]=$(latest "$round") start=${runs[sft-round-$r]}
      else notes+=("self-taught round $r kept no trajectory: no checkpoint (later rounds and RL start from the last one)"); fi
    done
  fi

  # ---- RL with the paper's recipe, and single-turn RL from the same start when a row needs it
  local table="$root/scripts/paper_tables/$PAPER.tsv"
  run "$bin" train --config "$root/configs/$PAPER.toml" --weights "$start" --tokenizer "$tok" --dataset "$train_spec" \
      --device "$device" --out "$out/rl" ${train_flags[@]+"${train_flags[@]}"} ${SQLRL_EXTRA_TRAIN_FLAGS:-}
  runs[rl]=$(latest "$out/rl")
  if grep -q $'\trl-single-turn' "$table"; then
    run "$bin" train --config "$root/configs/$PAPER.toml" --weights "$start" --tokenizer "$tok" --dataset "$train_spec" \
        --device "$device" --out "$out/rl-single-turn" --single-turn ${train_flags[@]+"${train_flags[@]}"} ${SQLRL_EXTRA_TRAIN_FLAGS:-}
    runs[rl-single-turn]=$(latest "$out/rl-single-turn")
  fi

  # ---- evaluations: every (run, evaluation) a row of this size names, on every column's set
  local results="$out/results.tsv" keys key run_name variant col name metric data split mode domain
  : > "$results"
  keys=$(awk -F'\t' -v size="$size" '!/^#/ && NR > 1 && $3 != "-" && $3 != "ours" {
           k = $3; s = ""; v = ""
           if (index(k, ":")) { v = substr(k, index(k, ":")); k = substr(k, 1, index(k, ":") - 1) }
           if (index(k, "@")) { s = substr(k, index(k, "@") + 1); k = substr(k, 1, index(k, "@") - 1) }
           if (s == "" || s == size) print k v }' "$table" | sort -u)
  for key in $keys; do
    run_name=${key%%:*} variant=""
    [[ $key == *:* ]] && variant=${key#*:}
    [[ -n ${runs[$run_name]:-} ]] || continue
    for col in "${COLUMNS[@]}"; do
      IFS='|' read -r name metric data split mode domain <<< "$col"
      [[ $metric == ex || $metric == em ]] || continue
      [[ -n ${sets[$data]:-} ]] || continue
      [[ $domain != id || $data == "$train_format" ]] || continue
      [[ $domain != ood || $data != "$train_format" ]] || continue
      local spec="$data:${sets[$data]}" s=$split
      [[ $data == spider-dk || $data == spider-syn || $data == spider-realistic ]] && [[ -n ${sets[spider]:-} && $smoke != 1 ]] &&
        spec="$spec,db=${sets[spider]}/database"
      if [[ $smoke == 1 ]]; then spec="spider:${sets[$data]}"; [[ $data == sparc || $data == cosql ]] && spec="sparc:${sets[$data]}"; s=dev; fi
      local dir="$out/eval/$run_name${variant:+-$variant}/$data-$s${mode:+-$mode}"
      if [[ ! -f $dir/summary.json ]]; then
        local mode_flags=()
        [[ $mode == greedy ]] && mode_flags=(--mode greedy --samples 1 --temperature 0 --top-p 1)
        [[ $mode == vote ]] && mode_flags=(--mode vote --samples 8)
        [[ $variant == single-turn ]] && mode_flags+=(--single-turn)
        run "$bin" eval --config "$root/configs/$PAPER.toml" --weights "${runs[$run_name]}" --tokenizer "$tok" \
            --dataset "$spec" --split "$s" --limit "$limit" --device "$device" --out "$dir" --quiet \
            ${mode_flags[@]+"${mode_flags[@]}"} ${eval_flags[@]+"${eval_flags[@]}"} ${SQLRL_EXTRA_EVAL_FLAGS:-}
      fi
      printf '%s\t%s\t%s\n' "$key" "$name" "$(jq -r ".$metric * 100" "$dir/summary.json")" >> "$results"
    done
  done

  # ---- the tables
  local given=""
  for k in "${!sets[@]}"; do given+="$k "; done
  {
    echo "# $CITATION: reproduction"
    echo
    if [[ $smoke == 1 ]]; then
      echo "**Smoke run**: the synthetic benchmark stands in for every set (dev split), a tiny Qwen3 for the $size model, 2 GRPO steps; the numbers only show the pipeline runs."
      echo
    fi
    echo "Recipe configs/$PAPER.toml; weights $weights as the $size rows; trained on $train_spec; sets given: ${given:-none}."
    local n
    for n in "${notes[@]+"${notes[@]}"}"; do echo "- $n"; done
    echo
    echo "Each column: the paper's number, ours (EX/EM %, $([[ $limit -gt 0 ]] && echo "first $limit questions of each set" || echo "every question")), and ours - paper. '-': not run here (another model size, a closed model, another paper's system, or a set not given)."
    render_tables "$table" "$results" "$size" "$(printf '%s\n' "${COLUMNS[@]}")"
  } > "$out/table.md"
  cat "$out/table.md"
}

# The paper's TSV with our results beside each number: one Markdown table per paper table, only the
# columns that table prints.
render_tables() {
  awk -F'\t' -v size="$3" -v colspec="$4" '
    function num(x) { return x ~ /^-?[0-9]+(\.[0-9]+)?$/ }
    function fmt(x) { return sprintf("%.1f", x) }
    BEGIN {
      n = split(colspec, lines, "\n")
      for (i = 1; i <= n; i++) { split(lines[i], f, "|"); metric[f[1]] = f[2] }
    }
    FILENAME == ARGV[2] { ours[$1 SUBSEP $2] = $3; next }
    /^#/ { next }
    !header_done { for (i = 4; i <= NF; i++) cols[i] = $i; ncols = NF; header_done = 1; next }
    {
      t = $1
      if (!(t in seen)) { seen[t] = 1; order[++ntables] = t }
      nrow[t]++; rows[t, nrow[t]] = $0
      for (i = 4; i <= NF; i++) if ($i != "") used[t, i] = 1
    }
    END {
      for (ti = 1; ti <= ntables; ti++) {
        t = order[ti]
        printf "\n## %s\n\n| row | ours |", t
        sep = "|---|---|"
        for (i = 4; i <= ncols; i++) if (used[t, i]) { printf " %s paper | ours | diff |", cols[i]; sep = sep "---:|---:|---:|" }
        print "\n" sep
        for (r = 1; r <= nrow[t]; r++) {
          split(rows[t, r], c, "\t")
          key = c[3]; runkey = key; s = ""
          if (index(runkey, "@")) { rest = substr(runkey, index(runkey, "@") + 1); s = rest; sub(/:.*/, "", s)
                                    runkey = substr(runkey, 1, index(runkey, "@") - 1) (index(rest, ":") ? substr(rest, index(rest, ":")) : "") }
          mine = key != "-" && (s == "" || s == size)
          printf "| %s | %s |", c[2], mine ? runkey : "-"
          delete val
          for (i = 4; i <= ncols; i++) {
            if (!used[t, i]) continue
            m = metric[cols[i]]; o = "-"
            if (mine && (m == "ex" || m == "em") && ((runkey SUBSEP cols[i]) in ours)) o = fmt(ours[runkey, cols[i]])
            if (mine && m ~ /^avg:/) {
              want = substr(m, 5); sum = 0; cnt = 0; all = 1
              for (j = 4; j <= ncols; j++) {
                mj = metric[cols[j]]
                if (!used[t, j] || !(mj == "ex" || mj == "em") || (want != "all" && mj != want)) continue
                if ((runkey SUBSEP cols[j]) in ours) { sum += ours[runkey, cols[j]]; cnt++ } else all = 0
              }
              if (cnt > 0 && all) o = fmt(sum / cnt)
            }
            p = c[i] == "" ? "-" : c[i]
            d = (num(p) && num(o)) ? sprintf("%+.1f", o - p) : "-"
            printf " %s | %s | %s |", p, o, d
          }
          print ""
        }
      }
    }' "$1" "$2"
}

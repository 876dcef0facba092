#!/usr/bin/env bash
# Peer runner (by hand, never from CI or tests): items evaluated per second by
# `llm_sqlrl eval-sql` and by the official test-suite-sql-eval evaluation.py on the same inputs,
# the 1,034 Spider dev pairs of tests/fixtures/spider_eval (EM on the populated DBs; `all` adds EX
# on both *.sqlite files of each database), one after the other, plus a byte comparison of the
# two printouts. The official code is not in this repository: pass the path of its evaluation.py
# (a checkout of taoyds/test-suite-sql-eval, e97acc5, with process_sql.py, exec_eval.py and
# parse.py beside it).
# Pinned Python side: CPython 3.11, nltk==3.8, sqlparse==0.4.2 (e.g. a venv: pass its python).
# punkt is not downloadable offline, so sent_tokenize is replaced by the identity, as the fixture
# oracle did (tests/fixtures/spider_eval/README.md); word_tokenize is unchanged.
# Usage: bench/eval_spider_peer.sh /path/to/evaluation.py [python] [llm_sqlrl binary]
set -euo pipefail
official=${1:?usage: $0 /path/to/test-suite-sql-eval/evaluation.py [python] [llm_sqlrl]}
python=${2:-python3}
ours=${3:-build/llm_sqlrl}
root=$(cd "$(dirname "$0")/.." && pwd)
fix=$root/tests/fixtures/spider_eval
out=$(mktemp -d)
items=$(grep -c . "$fix/gold.txt")

# Wall time and CPU time (user + sys, from /usr/bin/time) of each run: on a shared machine the
# wall time carries the other processes' load; CPU seconds per item do not.
timed() { /usr/bin/time -f "%e %U %S" -o "$1" "${@:2}"; }
for etype in match all; do
  args=(--gold "$fix/gold.txt" --pred "$fix/pred.txt" --db "$fix/data_db" --table "$fix/tables.json" --etype "$etype")
  timed "$out/ours_$etype.time" "$ours" eval-sql "${args[@]}" --threads 1 > "$out/ours_$etype.txt"
  (cd "$(dirname "$official")" && timed "$out/theirs_$etype.time" "$python" -c '
import runpy, sys
import nltk.tokenize
nltk.tokenize.sent_tokenize = lambda text, language="english": [text]
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")' "$official" "${args[@]}" > "$out/theirs_$etype.txt")
  same=$(cmp -s "$out/ours_$etype.txt" "$out/theirs_$etype.txt" && echo identical || echo DIFFERENT)
  read -r ow ou os < "$out/ours_$etype.time"
  read -r tw tu ts < "$out/theirs_$etype.time"
  awk -v e="$etype" -v n="$items" -v ow="$ow" -v oc="$(echo "$ou + $os" | bc)" -v tw="$tw" -v tc="$(echo "$tu + $ts" | bc)" -v s="$same" 'BEGIN {
    printf "--etype %-5s wall: ours %.2f s (%.0f items/s, 1 thread), official %.2f s (%.0f items/s), ratio %.1fx\n",
           e, ow, n / ow, tw, n / tw, tw / ow
    printf "              cpu:  ours %.2f s (%.0f items/s), official %.2f s (%.0f items/s), ratio %.1fx  printouts %s\n",
           oc, n / oc, tc, n / tc, tc / oc, s }'
done
echo "printouts kept in $out"

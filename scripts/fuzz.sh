#!/usr/bin/env bash
# Runs every libFuzzer harness of fuzz/ for a while and prints, per harness, the executions, the
# coverage (libFuzzer's final "cov:") and the crashes. Exits non-zero if any harness crashed.
#
#   scripts/fuzz.sh [MINUTES_PER_HARNESS]     default 10; fractions are fine (0.5 = 30 s)
#
# Environment:
#   FUZZ_HARNESSES="config_json safetensors"  a subset (default: every fuzz/fuzz_*.cpp)
#   FUZZ_BUILD=build-fuzz                     the clang build folder (configured here)
#   FUZZ_JOBS=2                               build parallelism
#   SQLRL_FUZZ_STRICT=1                       any exception other than sqlrl::Error is a finding
#                                             (fuzz/fuzz_util.h)
#
# The committed corpus fuzz/corpus/<harness>/ is read but never written: libFuzzer writes the new
# inputs it finds interesting into a scratch folder (the first corpus folder it is given), and
# crash files into another, both under $FUZZ_BUILD/fuzz-run/<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=${1:-10}
seconds=$(awk -v m="$minutes" 'BEGIN { s = int(m * 60 + 0.5); print (s < 1 ? 1 : s) }')
build=${FUZZ_BUILD:-build-fuzz}
jobs=${FUZZ_JOBS:-2}

if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found (libFuzzer needs clang; Debian: apt-get install clang)" >&2
  exit 2
fi

# -O1 -g without NDEBUG: fast enough to fuzz, readable stacks. Every project target gets the
# coverage instrumentation and ASan + UBSan (SQLRL_FUZZ in the top-level CMakeLists.txt).
CC=clang CXX=clang++ nice -n 10 cmake -S . -B "$build" -G Ninja -DSQLRL_FUZZ=ON -DSQLRL_WITH_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g" \
  >/dev/null
nice -n 10 cmake --build "$build" -j "$jobs" --target fuzzers

if [[ -n "${FUZZ_HARNESSES:-}" ]]; then
  read -r -a harnesses <<<"$FUZZ_HARNESSES"
else
  harnesses=()
  for f in fuzz/fuzz_*.cpp; do
    name=$(basename "$f" .cpp)
    harnesses+=("${name#fuzz_}")
  done
fi

run="$build/fuzz-run/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$run"
echo "fuzz.sh: ${#harnesses[@]} harnesses, ${seconds} s each; logs, new inputs and crashes under $run"

summary=()
crashed=0
for h in "${harnesses[@]}"; do
  bin="$build/fuzz/bin/fuzz_$h"
  seeds="fuzz/corpus/$h"
  new="$run/new/$h"
  crashes="$run/crashes/$h"
  log="$run/logs/$h.log"
  mkdir -p "$new" "$crashes" "$run/logs" "$run/tmp/$h"
  if [[ ! -x "$bin" || ! -d "$seeds" ]]; then
    echo "fuzz.sh: $h: no binary $bin or no corpus $seeds" >&2
    summary+=("$(printf '%-18s %12s %8s %8s %8s' "$h" - - - "missing")")
    crashed=1
    continue
  fi
  echo "== $h"
  # TMPDIR: the harnesses that must hand their parser a file make their scratch folder there.
  # -timeout: one input taking 30 s is a hang. -rss_limit_mb: libFuzzer's default, written out.
  status=0
  TMPDIR="$run/tmp/$h" nice -n 10 "$bin" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$crashes/" "$new" "$seeds" >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | awk '{ print $2 }' || true)  # none: it died loading seeds
  found=$(find "$crashes" -type f | wc -l)
  added=$(find "$new" -type f | wc -l)
  if [[ $status -ne 0 && $found -eq 0 ]]; then
    # libFuzzer failed without writing an artifact (e.g. the harness aborted while loading seeds).
    found="exit $status"
  fi
  if [[ "$found" != "0" ]]; then
    crashed=1
    echo "   CRASH: see $log; reproduce: $bin $crashes/<file>"
    find "$crashes" -type f | sed 's/^/     /'
  fi
  summary+=("$(printf '%-18s %12s %8s %8s %8s' "$h" "${execs:--}" "${cov:--}" "$added" "$found")")
done

echo
printf '%-18s %12s %8s %8s %8s\n' harness executions cov new crashes
printf '%s\n' "${summary[@]}"
echo
echo "New interesting inputs: $run/new/<harness>/ (the committed corpus is untouched)."
echo "To keep those that add coverage: $build/fuzz/bin/fuzz_<harness> -merge=1 fuzz/corpus/<harness> $run/new/<harness>"
echo "A crash input becomes a regression test: cp it to fuzz/corpus/<harness>/regress_<what>, fix the parser, then"
echo "  cmake --build build && (cd build && ctest -R Fuzz)"
rm -rf "$run/tmp"
exit $crashed

#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in one command: build with CUDA, run every test with
# SQLRL_REQUIRE_GPU=1 (a CUDA test that would skip fails instead), run the benchmarks, and write
# OUT_DIR/gpu_report.md (device, driver, commit, each test's result, each benchmark's figures).
#   scripts/gpu_check.sh OUT_DIR        (SQLRL_COMMIT overrides the commit shown)
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
build=${SQLRL_GPU_BUILD:-build-gpu}
report="$out/gpu_report.md"
log="$out/gpu_check.log"
: > "$log"

commit=${SQLRL_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi unavailable")
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)

status=0
echo "== setup and build" | tee -a "$log"
if ! bash scripts/setup.sh >>"$log" 2>&1; then echo "setup.sh failed (see gpu_check.log)" | tee -a "$log"; fi
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >>"$log" 2>&1 ||
   ! cmake --build "$build" -j "$(nproc)" >>"$log" 2>&1; then
  echo "build failed" | tee -a "$log"
  { echo "# GPU check: BUILD FAILED"; echo; echo "commit $commit, $gpu"; echo '```'; tail -60 "$log"; echo '```'; } > "$report"
  exit 1
fi

echo "== tests (SQLRL_REQUIRE_GPU=1)" | tee -a "$log"
SQLRL_REQUIRE_GPU=1 ctest --test-dir "$build" -j 4 --timeout 900 --output-on-failure > "$out/ctest.log" 2>&1 || status=1
summary=$(grep -E "tests passed|tests failed" "$out/ctest.log" | tail -1)
echo "$summary" | tee -a "$log"

echo "== benchmarks" | tee -a "$log"
bench_md="$out/bench.md"
: > "$bench_md"
for bin in "$build"/bench/bench_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  echo "-- $name" | tee -a "$log"
  case "$name" in
    *_cuda) timeout 600 "$bin" >> "$bench_md" 2>>"$log" || { echo "$name failed" | tee -a "$log"; status=1; } ;;
    *) { echo "### $name (CPU of the GPU machine)"; echo '```';
         timeout 600 "$bin" --benchmark_min_time=0.2 2>>"$log" || echo "$name failed";
         echo '```'; } >> "$bench_md" ;;
  esac
  echo >> "$bench_md"
done
# PyTorch baselines (SDPA, log_softmax ...) live in bench/*_torch.py and run when torch is present.
for py in bench/*_torch.py; do
  [ -f "$py" ] || continue
  echo "-- $py" | tee -a "$log"
  python3 "$py" >> "$bench_md" 2>>"$log" || echo "$py failed" | tee -a "$log"
done

{
  echo "# GPU check report"
  echo
  echo "- started: $started"
  echo "- commit: $commit"
  echo "- device: $gpu"
  echo "- result: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
  echo "- tests: $summary"
  echo
  echo "## Tests"
  echo
  echo "| test | result | time |"
  echo "|---|---|---|"
  grep -E "^ *[0-9]+/[0-9]+ Test +#[0-9]+:" "$out/ctest.log" |
    sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) \.*[* ]*([A-Za-z ]+[A-Za-z])[ ]+([0-9.]+ sec).*/| \1 | \2 | \3 |/'
  echo
  echo "## Failures"
  echo '```'
  sed -n '/The following tests FAILED/,$p' "$out/ctest.log"
  echo '```'
  echo
  echo "## Benchmarks"
  echo
  cat "$bench_md"
} > "$report"
echo "report: $report"
exit $status

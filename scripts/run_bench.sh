#!/usr/bin/env bash
# Runs every benchmark binary in BUILD/bench: Google Benchmark ones (CPU) always, *_cuda ones
# only when a CUDA device is present (they say so and exit 0 otherwise).
set -euo pipefail
build=${1:-build}
dir="$build/bench"
[ -d "$dir" ] || { echo "run_bench: no $dir; run make first" >&2; exit 1; }
for bin in "$dir"/bench_*; do
  [ -x "$bin" ] || continue
  echo "== $(basename "$bin")"
  case "$bin" in
    *_cuda) "$bin" ;;
    *) "$bin" --benchmark_counters_tabular=true ;;
  esac
done
# Data-parallel scaling over MPI ranks (skips without mpirun).
echo "== dp_scaling"
bash "$(dirname "$0")/../bench/dp_scaling.sh" "$build"

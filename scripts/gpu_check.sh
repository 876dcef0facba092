#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in one command: build with CUDA, run every test with
# SQLRL_REQUIRE_GPU=1 (a CUDA test that would skip fails instead), run the CUDA benchmarks and
# their PyTorch baselines, and write OUT_DIR/gpu_report.md (device, commit, each stage's time,
# each test's result, each benchmark's figures).
#   scripts/gpu_check.sh OUT_DIR [STAGES]     STAGES: comma list of build,test,bench (the default)
#   and firstlight (scripts/gpu_first_light.sh: every model-running subcommand on a random
#   Qwen3-0.6B, CPU beside CUDA; a few minutes, so run it as its own command after the build),
#   and train4b (two GRPO steps on a random Qwen3-4B on the device, each phase's time), and async
#   (bench/async_rollout.sh on the device: rollout ranks sharing the GPU, a random Qwen3-0.6B)
# Made for a borrowed GPU machine that stops a command at 10 minutes and has no network:
#  * the report is rewritten after every stage and every benchmark, so a command stopped at its
#    limit still leaves what ran; benchmarks not started before SQLRL_GPU_BUDGET_S seconds
#    (default 540) are listed as not run;
#  * with the .deb files of scripts/gpu_deps.sh in SQLRL_GPU_DEPS (default .deps, carried), the
#    libraries are unpacked into a private prefix and setup.sh's apt-get is not called.
# Environment: SQLRL_COMMIT (the commit shown; the copy there has no .git), SQLRL_GPU_BUILD
# (build folder, default build-gpu), SQLRL_GPU_DEPS, SQLRL_GPU_BUDGET_S, SQLRL_GPU_TESTS (a ctest
# -R regex for the test stage, default every test; the GPU's own tests alone, about 40 s on an
# H200: 'Cuda|_cuda|Lora|Nccl|Decode|MatmulRows'), SQLRL_GPU_TEST_TIMEOUT (seconds per test,
# default 300), SQLRL_GPU_BENCHES (the benchmarks to run, by
# name, space-separated: e.g. "bench_model_cuda bench_ops_cuda"; default every one and the
# memory plan), SQLRL_GPU_TARGETS (the build stage's targets, space-separated; default all: e.g.
# "llm_sqlrl test_kernels test_model_cuda test_rl_cuda test_runtime test_comm_mpi bench_model_cuda
# bench_ops_cuda bench_attention_cuda bench_memory_plan" for the GPU's tests and benchmarks alone).
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh OUT_DIR [build,test,bench]}
stages=${2:-build,test,bench}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
root=$(pwd)
build=${SQLRL_GPU_BUILD:-build-gpu}
deps=${SQLRL_GPU_DEPS:-.deps}
t0=$(date +%s)
deadline=$((t0 + ${SQLRL_GPU_BUDGET_S:-540}))
report="$out/gpu_report.md"
log="$out/gpu_check.log"
ctest_log="$out/ctest.log"
bench_md="$out/bench.md"
: > "$log"
: > "$bench_md"

commit=${SQLRL_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi unavailable")
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
status=0
stage_lines=()
tests_summary="not run"
not_run=()

say() { echo "$*" | tee -a "$log"; }
has_stage() { [[ ",$stages," == *",$1,"* ]]; }
elapsed() { echo $(($(date +%s) - t0)); }

write_report() {
  {
    echo "# GPU check report"
    echo
    echo "- started: $started, $(elapsed) s so far"
    echo "- commit: $commit"
    echo "- device: $gpu"
    echo "- result: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
    echo "- tests: $tests_summary"
    for line in "${stage_lines[@]}"; do echo "- $line"; done
    [ ${#not_run[@]} -eq 0 ] || echo "- not run (past the ${SQLRL_GPU_BUDGET_S:-540} s budget): ${not_run[*]}"
    echo
    if [ -s "$ctest_log" ]; then
      echo "## Tests"
      echo
      echo "The kernels are one harness: Ops/Kernel.MatchesFloat64/<op>_<backend> (test_kernels, label kernels); the <op>_cuda rows are the CUDA kernels against float64."
      echo
      echo "| test | result | time |"
      echo "|---|---|---|"
      grep -E "^ *[0-9]+/[0-9]+ Test +#[0-9]+:" "$ctest_log" |
        sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+)( +# GetParam\(\) = [^ ]+)? \.*[* ]*([A-Za-z ]+[A-Za-z])[ ]+([0-9.]+ sec).*/| \1 | \3 | \4 |/'
      echo
      echo "## Failures"
      echo '```'
      sed -n '/The following tests FAILED/,$p' "$ctest_log"
      echo '```'
      echo
    fi
    echo "## Benchmarks"
    echo
    cat "$bench_md"
  } > "$report"
}

# The carried .deb files, unpacked into a prefix of our own (unpacking over / can break the
# machine's image); CMake, pkg-config and the loader are pointed at it.
use_carried_deps() {
  local prefix=${TMPDIR:-/tmp}/sqlrl-deps
  rm -rf "$prefix" && mkdir -p "$prefix"
  for f in "$deps"/*.deb; do dpkg-deb -x "$f" "$prefix" || return 1; done
  arch=$(ls -d "$prefix"/usr/lib/*-linux-gnu | head -1)
  local lib=$arch
  export PATH="$prefix/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$lib/openblas-pthread/pkgconfig:$prefix/usr/lib/pkgconfig:$prefix/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$prefix"
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  # Open MPI finds its plugins and help files under OPAL_PREFIX; CMake is handed its wrapper and
  # launcher by name (Debian's plain `mpicc`/`mpirun` are links into /etc/alternatives).
  mpi_args=()
  if [ -x "$prefix/usr/bin/mpirun.openmpi" ]; then
    export OPAL_PREFIX="$prefix/usr"
    mpi_args=(-DMPI_C_COMPILER="$prefix/usr/bin/mpicc.openmpi" -DMPIEXEC_EXECUTABLE="$prefix/usr/bin/mpirun.openmpi")
  fi
  say "deps: $(ls "$deps"/*.deb | wc -l) carried packages unpacked into $prefix${mpi_args:+ (Open MPI relocated there)}"
}
mpi_args=()

# Every stage needs them: the tests and benchmarks load OpenBLAS and its libgfortran from there.
if compgen -G "$deps/*.deb" > /dev/null; then
  use_carried_deps || say "deps: unpacking $deps failed"
elif has_stage build && ! bash scripts/setup.sh >>"$log" 2>&1; then
  say "setup.sh failed (see gpu_check.log); no carried packages in $deps (scripts/gpu_deps.sh makes them)"
fi

if has_stage build; then
  say "== build"
  b0=$(date +%s)
  # A configure that finds no nvcc would quietly build the CPU path only: here that is a failure.
  if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSQLRL_WITH_CUDA=ON -DSQLRL_WERROR=OFF "${mpi_args[@]}" \
         -DPKG_CONFIG_EXECUTABLE="$(command -v pkgconf || command -v pkg-config || echo pkg-config)" >>"$log" 2>&1 ||
     ! grep -q "^-- llm_sqlrl: CUDA" "$log" ||
     ! cmake --build "$build" -j "$(nproc)" ${SQLRL_GPU_TARGETS:+--target $SQLRL_GPU_TARGETS} >>"$log" 2>&1; then
    status=1
    stage_lines+=("build: FAILED after $(($(date +%s) - b0)) s")
    write_report
    { echo; echo "## Build log (last 80 lines)"; echo '```'; tail -80 "$log"; echo '```'; } >> "$report"
    say "build failed; report: $report"
    exit 1
  fi
  # Warnings are not fatal here (the machine's compiler is not the project's); they are counted.
  warnings=$(grep -c "warning:" "$log" || true)
  stage_lines+=("build: $(($(date +%s) - b0)) s on $(nproc) cores, $warnings compiler warnings (gpu_check.log)")
  stage_lines+=("mpi: $(grep -m1 -o 'llm_sqlrl: MPI.*' "$log" || echo 'none found: the multi-process tests are not built')")
  say "build: $(($(date +%s) - b0)) s"
  write_report
fi

if has_stage test; then
  say "== tests (SQLRL_REQUIRE_GPU=1)"
  s0=$(date +%s)
  filter=()
  [ -z "${SQLRL_GPU_TESTS:-}" ] || filter=(-R "$SQLRL_GPU_TESTS")
  SQLRL_REQUIRE_GPU=1 ctest --test-dir "$build" -j "$(nproc)" --timeout "${SQLRL_GPU_TEST_TIMEOUT:-300}" --output-on-failure "${filter[@]}" \
    > "$ctest_log" 2>&1 || status=1
  tests_summary=$(grep -E "tests passed|tests failed" "$ctest_log" | tail -1)
  [ -n "$tests_summary" ] || tests_summary="ctest printed no summary (see ctest.log)"
  stage_lines+=("tests: $(($(date +%s) - s0)) s")
  say "$tests_summary"
  write_report
fi

if has_stage bench; then
  say "== benchmarks"
  b0=$(date +%s)
  # The CUDA benchmarks, each followed by the PyTorch baselines; CPU benchmarks belong to the
  # CPU machine (make bench) and are not run here.
  for item in "$build"/bench/bench_*_cuda bench/*_torch.py; do
    name=$(basename "$item")
    if [ -n "${SQLRL_GPU_BENCHES:-}" ] && [[ " $SQLRL_GPU_BENCHES " != *" $name "* ]]; then continue; fi
    left=$((deadline - $(date +%s)))
    if [ "$left" -le 15 ]; then not_run+=("$name"); continue; fi
    [ "$left" -lt 300 ] || left=300
    say "-- $name (limit $left s)"
    case "$item" in
      *.py) { echo "### $name"; echo; timeout "$left" python3 "$item" 2>>"$log" || echo "$name failed or timed out"; } >> "$bench_md" ;;
      *) { echo "### $name"; echo; timeout "$left" "$item" 2>>"$log" || { echo "$name failed or timed out"; false; }; } >> "$bench_md" || status=1 ;;
    esac
    echo >> "$bench_md"
    write_report
  done
  # The memory plan against the caching allocator's peak: a random Qwen3-4B, KL reference,
  # 8K-token micro-batch, the modes the plan picks for this device (issue 22's target: >= 40 GiB
  # of KV cache on an 80 GB card). A CPU benchmark binary with a CUDA mode, so named here.
  left=$((deadline - $(date +%s)))
  if [ -n "${SQLRL_GPU_BENCHES:-}" ] && [[ " $SQLRL_GPU_BENCHES " != *" bench_memory_plan "* ]]; then
    :  # not asked for
  elif [ "$left" -le 60 ]; then
    not_run+=("bench_memory_plan --device cuda")
  else
    [ "$left" -lt 300 ] || left=300
    say "-- bench_memory_plan --device cuda (limit $left s)"
    { echo "### bench_memory_plan --device cuda --shape qwen3-4b --tokens 8192 --kl"; echo; echo '```';
      timeout "$left" "$build/bench/bench_memory_plan" --device cuda --shape qwen3-4b --tokens 8192 --kl 2>>"$log" ||
        echo "bench_memory_plan failed or timed out"; echo '```'; } >> "$bench_md"
    echo >> "$bench_md"
    write_report
  fi
  stage_lines+=("benchmarks: $(($(date +%s) - b0)) s")
  write_report
fi

if has_stage firstlight; then
  # Every model-running subcommand on a random Qwen3-0.6B, CPU beside CUDA (scripts/gpu_first_light.sh).
  say "== first light"
  f0=$(date +%s)
  bash scripts/gpu_first_light.sh "$out/first_light" "$build" >> "$log" 2>&1 || status=1
  { echo; echo "## first light"; echo; cat "$out/first_light/first_light.md" 2>/dev/null; } >> "$bench_md"
  stage_lines+=("first light: $(($(date +%s) - f0)) s")
  write_report
fi

if has_stage train4b; then
  # GRPO on a random Qwen3-4B-shaped checkpoint on the device: 2 steps of 4 prompts x 8 samples,
  # 2 turns of up to 512 tokens (random weights write until the cap: the decode worst case), every
  # filter off so each step trains. What a real checkpoint's step costs, phase by phase. The
  # checkpoint goes through a file on purpose: `train --weights` loading an HF folder of bf16
  # shards is the path a real run takes. init writes its 8 GB at about the disk's speed (Philox
  # draws on every core straight into the write buffers); its seconds are reported apart.
  say "== train4b"
  q0=$(date +%s)
  q="$out/train4b"
  rm -rf "$q" && mkdir -p "$q"
  if "$build/llm_sqlrl" init --preset qwen3-4b --tokenizer tests/fixtures/tokenizer/qwen3_tokenizer.json \
       --out "$q/ckpt" --seed 1 >>"$log" 2>&1 && q1=$(date +%s) &&
     "$build/llm_sqlrl" train --weights "$q/ckpt" --out "$q/run" --device cuda --max-steps 2 --batch-size 4 \
       --group-size 8 --max-turns 2 --max-turn-tokens 512 --max-total-tokens 4096 --enable-thinking=false \
       --chat-template qwen3 --lr 1e-6 --filter-truncated=false --filter-malformed=false \
       --filter-no-valid-action=false --filter-zero-variance=false --save-every 0 >>"$log" 2>&1; then
    { echo "### train4b: GRPO on a random Qwen3-4B, 4 prompts x 8 samples, 2 turns x 512 tokens"; echo;
      echo "init $(du -sh "$q/ckpt" | cut -f1) checkpoint in $((q1 - q0)) s; $(($(date +%s) - q0)) s in all"; echo; echo '```';
      cat "$q/run/memory_plan.txt"; echo; cut -c1-2000 "$q/run/metrics.jsonl"; echo '```'; } >> "$bench_md"
  else
    status=1
    { echo "### train4b FAILED"; echo '```'; tail -20 "$log"; echo '```'; } >> "$bench_md"
  fi
  rm -rf "$q/ckpt"
  stage_lines+=("train4b: $(($(date +%s) - q0)) s")
  write_report
fi

if has_stage async; then
  # Rollout ranks on the device (bench/async_rollout.sh): 1 trainer + 1 rollout rank sharing the
  # GPU, --async off / one-step / full beside the two ranks as plain data parallel, on a random
  # Qwen3-0.6B (2 turns of up to 256 tokens: random weights write to the cap), 6 steps of 4 x 8 (steps 2-4 timed),
  # fixed work (the script's --lr 0: every mode samples the same trajectories).
  say "== async"
  a0=$(date +%s)
  q="$out/async"
  rm -rf "$q" && mkdir -p "$q"
  mpiexec=$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
  if "$build/llm_sqlrl" init --preset qwen3-0.6b --tokenizer tests/fixtures/tokenizer/qwen3_tokenizer.json \
       --out "$q/ckpt" --seed 1 >>"$log" 2>&1 &&
     { echo "### async: rollout ranks on one GPU, random Qwen3-0.6B"; echo; echo '```';
       MPIRUN="$mpiexec" SQLRL_BENCH_MODEL_ARGS="--weights $q/ckpt --device cuda --max-turns 2 --max-turn-tokens 256 \
--max-total-tokens 2048 --enable-thinking=false --chat-template qwen3 --filter-truncated=false \
--filter-malformed=false --filter-no-valid-action=false --filter-zero-variance=false" \
         ASYNC_ROWS="np1 off one-step full" timeout "${SQLRL_GPU_ASYNC_S:-360}" bash bench/async_rollout.sh "$build" 6 4 8 1 2>>"$log"; echo '```'; } >> "$bench_md"; then
    :
  else
    status=1
    { echo "### async FAILED"; echo '```'; tail -20 "$log"; echo '```'; } >> "$bench_md"
  fi
  rm -rf "$q/ckpt"
  stage_lines+=("async: $(($(date +%s) - a0)) s")
  write_report
fi

say "report: $report ($(elapsed) s)"
exit $status

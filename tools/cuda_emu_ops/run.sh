#!/usr/bin/env bash
# Runs the CUDA RMSNorm/RoPE/SwiGLU/embedding/sampling/log-prob kernels on the CPU through the
# attention emulator's shim (tools/cuda_emu) plus shim/ here, and compares them with the CPU
# kernels: a check of indexing, team/warp mapping, reductions and select logic for machines
# without a GPU, not a substitute for tests/kernels' CUDA cases on a GPU (no timing, no real memory
# model; CUB's sort and cuBLASLt are replaced by host code).
#   tools/cuda_emu_ops/run.sh CPU_BUILD_DIR [all|norm|rope|swiglu|embedding|logprob|sampling|sampling-wide|matmul|decode_qkv]
# CPU_BUILD_DIR: a build configured with -DSQLRL_WITH_CUDA=OFF that has built sqlrl_kernels.
set -euo pipefail
build=${1:?usage: tools/cuda_emu_ops/run.sh CPU_BUILD_DIR [what]}
what=${2:-all}
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/tools/cuda_emu_ops"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/kernels/cuda"
cp "$root/kernels/cuda/ops_common.cuh" "$work/kernels/cuda/ops_common.cuh"
cp "$root/tools/cuda_emu/ptx/ptx.cuh" "$work/kernels/cuda/ptx.cuh"  # the few-row product's mma
for f in rmsnorm rope swiglu embedding logprob sampling matmul decode_qkv; do
  sed -E -e 's/extern __shared__ __align__\(16\) uint16_t smem\[\];/uint16_t* smem = emu::g_smem;/' \
         -e 's/([A-Za-z_:][A-Za-z0-9_:]*(<[A-Za-z0-9_ ]+>)?)<<<(.*)>>>\(/emu_launch(\1, \3, /' \
         "$root/kernels/cuda/$f.cu" > "$work/kernels/cuda/$f.cpp"
done
g++ -std=c++20 -O1 -pthread -DSQLRL_SAMPLING_COUNT_FALLBACKS -I"$here/shim" -I"$root/tools/cuda_emu/shim" -I"$work" -I"$root" -Wno-unused-parameter \
  -o "$work/ops_emu" "$here/ops_emu.cpp" "$work"/kernels/cuda/*.cpp \
  "$build/kernels/libsqlrl_kernels.a" "$build/runtime/libsqlrl_runtime.a" -lopenblas
"$work/ops_emu" "$what"

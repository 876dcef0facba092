#!/usr/bin/env bash
# Runs the CUDA attention kernels (kernels/cuda/attention*.cu, paged_attention.cu) on the CPU
# and compares them with the CPU kernels: a check of their indexing, masking, tiling and
# reductions for machines without a GPU. Not a substitute for the GPU tests:
#  * each CUDA thread is a std::thread; __syncthreads and the warp collectives (ldmatrix, mma,
#    shuffles) are barriers (shim/cuda_runtime.h); ldmatrix and mma.m16n8k16 follow the PTX
#    ISA's fragment layouts as ptx/ptx.cuh writes them down, which only a GPU can confirm;
#  * a cp.async copy lands only at the issuing thread's covering cp.async.wait_group, so a
#    read before its wait shows; a missing __syncthreads after the wait shows only by chance;
#  * shared memory starts as NaN bits in every block, so reading a tile row nothing wrote shows.
# The .cu files are copied with two rewrites (sed): `extern __shared__` arrays become one
# static buffer and `kernel<<<grid, threads, smem, stream>>>(args)` becomes emu_launch(...).
#   tools/cuda_emu/run.sh CPU_BUILD_DIR [fwd|bwd|prefix|limits|paged|all]
# CPU_BUILD_DIR: a build configured with -DSQLRL_WITH_CUDA=OFF that has built sqlrl_kernels.
# Minutes on 2 cores (thread switching dominates); shapes are in attention_emu.cpp.
set -euo pipefail
build=${1:?usage: tools/cuda_emu/run.sh CPU_BUILD_DIR [fwd|bwd|prefix|limits|paged|all]}
what=${2:-all}
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/tools/cuda_emu"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/kernels/cuda/kernels/cuda"
cp "$here/ptx/ptx.cuh" "$work/kernels/cuda/kernels/cuda/ptx.cuh"
for f in attention attention_backward paged_attention; do
  sed -E -e 's/extern __shared__ __align__\(16\) uint16_t smem\[\];/uint16_t* smem = emu::g_smem;/' \
         -e 's/([A-Za-z_:][A-Za-z0-9_:]*(<[A-Za-z0-9_ ]+>)?)<<<(.*)>>>\(/emu_launch(\1, \3, /' \
         "$root/kernels/cuda/$f.cu" > "$work/kernels/cuda/$f.cpp"
done
g++ -std=c++20 -O1 -pthread -I"$here/shim" -I"$work/kernels/cuda" -I"$root" -Wno-unused-parameter \
  -o "$work/attention_emu" "$here/attention_emu.cpp" "$work"/kernels/cuda/*.cpp \
  "$build/kernels/libsqlrl_kernels.a" "$build/runtime/libsqlrl_runtime.a"
"$work/attention_emu" "$what"

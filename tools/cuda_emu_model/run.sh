#!/usr/bin/env bash
# Runs tests/model_cuda (the CUDA model against the CPU model) with every CUDA kernel of
# kernels/cuda and model/cuda emulated on the CPU (tools/cuda_emu + tools/cuda_emu_ops shims: a
# std::thread per CUDA thread) and runtime's device side replaced by host memory and a loop
# GEMM (emu_device.cpp). Checks the model's orchestration (buffers, strides, residuals, the
# order of forward and backward, the paged cache bookkeeping) without a GPU; says nothing
# about timing, cuBLASLt or the real memory model.
#   tools/cuda_emu_model/run.sh CPU_BUILD_DIR [gtest filter]
# CPU_BUILD_DIR: configured with -DSQLRL_WITH_CUDA=OFF, having built test_model_cuda (so every
# library is there). Minutes on 2 cores.
set -euo pipefail
build=${1:?usage: tools/cuda_emu_model/run.sh CPU_BUILD_DIR [gtest filter]}
filter=${2:-*}
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/tools/cuda_emu_model"
work=${SQLRL_EMU_WORK:-$(mktemp -d)}
mkdir -p "$work/src/kernels/cuda/kernels/cuda" "$work/obj"
cp "$root/tools/cuda_emu/ptx/ptx.cuh" "$work/src/kernels/cuda/kernels/cuda/ptx.cuh"
for f in "$root"/kernels/cuda/*.cu "$root"/model/cuda/*.cu; do
  name=$(basename "$f" .cu)
  sed -E -e 's/extern __shared__ __align__\(16\) uint16_t smem\[\];/uint16_t* smem = emu::g_smem;/' \
         -e 's/([A-Za-z_:]+(<[A-Za-z0-9_ ]+>)?)<<<(.*)>>>\(/emu_launch(\1, \3, /' \
         "$f" > "$work/src/$name.cpp.new"
  cmp -s "$work/src/$name.cpp.new" "$work/src/$name.cpp" 2>/dev/null && rm "$work/src/$name.cpp.new" || mv "$work/src/$name.cpp.new" "$work/src/$name.cpp"
done
flags=(-std=c++20 -O1 -pthread -I"$here/shim" -I"$root/tools/cuda_emu_ops/shim" -I"$root/tools/cuda_emu/shim"
       -I"$work/src/kernels/cuda" -I"$root" -Wno-unused-parameter -DSQLRL_FIXTURES_DIR="\"$root/tests/fixtures\"")
compile() {  # source object
  [ "$2" -nt "$1" ] || g++ "${flags[@]}" -c "$1" -o "$2"
}
for f in "$work"/src/*.cpp "$here/emu_device.cpp" "$root"/tests/model_cuda/*.cpp; do
  compile "$f" "$work/obj/$(basename "$f" .cpp).o" &
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
done
wait
b="$build"
g++ -pthread -o "$work/model_emu" "$work"/obj/*.o \
  "$b/model/libsqlrl_model.a" "$b/weights/libsqlrl_weights.a" "$b/tokenizer/libsqlrl_tokenizer.a" \
  "$b/kernels/libsqlrl_kernels.a" "$b/runtime/libsqlrl_runtime.a" -lgtest -lgtest_main -lopenblas -lutf8proc
"$work/model_emu" --gtest_filter="$filter"

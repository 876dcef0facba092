#!/usr/bin/env bash
# Runs tests/model_cuda (the CUDA model against the CPU model) with every CUDA kernel of
# kernels/cuda and model/cuda emulated on the CPU (tools/cuda_emu + tools/cuda_emu_ops shims: a
# std::thread per CUDA thread) and runtime's device side replaced by host memory and a loop
# GEMM (emu_device.cpp). Checks the model's orchestration (buffers, strides, residuals, the
# order of forward and backward, the paged cache bookkeeping) without a GPU; says nothing
# about timing, cuBLASLt or the real memory model.
#   tools/cuda_emu_model/run.sh CPU_BUILD_DIR [gtest filter]
#   SQLRL_EMU_TESTS=rl_cuda tools/cuda_emu_model/run.sh CPU_BUILD_DIR [gtest filter]
#   SQLRL_EMU_TESTS=rl_train_mpi SQLRL_EMU_FILES=test_train_mpi_cuda.cpp SQLRL_EMU_MPI=2 \
#     tools/cuda_emu_model/run.sh CPU_BUILD_DIR '*cuda*'   (ZeRO 0-3 on 2 ranks sharing the device)
# SQLRL_EMU_TESTS: the test area to emulate (model_cuda, the default, or rl_cuda: rollout, GRPO
# and train on the CUDA policy, which also links sqlrl_rl, sqlrl_sql and SQLite; all pass emulated:
# GrpoCuda ~4 min, RolloutCuda ~3.5 min, TrainCuda ~33 min on a loaded 2-core machine).
# CPU_BUILD_DIR: configured with -DSQLRL_WITH_CUDA=OFF, having built test_<area> (so every
# library is there). Minutes on 2 cores.
set -euo pipefail
build=${1:?usage: tools/cuda_emu_model/run.sh CPU_BUILD_DIR [gtest filter]}
filter=${2:-*}
area=${SQLRL_EMU_TESTS:-model_cuda}
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/tools/cuda_emu_model"
work=${SQLRL_EMU_WORK:-$(mktemp -d)}
mkdir -p "$work/src/kernels/cuda/kernels/cuda" "$work/obj"
cp "$root/tools/cuda_emu/ptx/ptx.cuh" "$work/src/kernels/cuda/kernels/cuda/ptx.cuh"
for f in "$root"/kernels/cuda/*.cu "$root"/model/cuda/*.cu; do
  name=$(basename "$f" .cu)
  sed -E -e 's/extern __shared__ __align__\(16\) uint16_t smem\[\];/uint16_t* smem = emu::g_smem;/' \
         -e 's/([A-Za-z_:][A-Za-z0-9_:]*(<[A-Za-z0-9_ ]+>)?)<<<(.*)>>>\(/emu_launch(\1, \3, /' \
         "$f" > "$work/src/$name.cpp.new"
  cmp -s "$work/src/$name.cpp.new" "$work/src/$name.cpp" 2>/dev/null && rm "$work/src/$name.cpp.new" || mv "$work/src/$name.cpp.new" "$work/src/$name.cpp"
done
flags=(-std=c++20 -O1 -pthread -I"$here/shim" -I"$root/tools/cuda_emu_ops/shim" -I"$root/tools/cuda_emu/shim"
       -I"$work/src/kernels/cuda" -I"$root" -Wno-unused-parameter -DSQLRL_FIXTURES_DIR="\"$root/tests/fixtures\"")
compile() {  # source object
  [ "$2" -nt "$1" ] || g++ "${flags[@]}" -c "$1" -o "$2"
}
mkdir -p "$work/obj/$area"
# SQLRL_EMU_FILES: the area's test files to build (default all of them; an area of several
# executables, each with its own main, names one: rl_train_mpi test_train_mpi_cuda.cpp).
tests=("$root"/tests/"$area"/*.cpp)
if [ -n "${SQLRL_EMU_FILES:-}" ]; then
  tests=()
  for f in $SQLRL_EMU_FILES; do tests+=("$root/tests/$area/$f"); done
fi
for f in "$work"/src/*.cpp "$here/emu_device.cpp" "${tests[@]}"; do
  # *_cli_cuda.cpp tests run the real binary on a real GPU: nothing here to emulate.
  case "$f" in *_cli_cuda.cpp) continue ;; esac
  obj="$work/obj/$(basename "$f" .cpp).o"
  case "$f" in "$root"/tests/*) obj="$work/obj/$area/$(basename "$f" .cpp).o" ;; esac
  compile "$f" "$obj" &
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
done
wait
b="$build"
libs=("$b/model/libsqlrl_model.a" "$b/weights/libsqlrl_weights.a" "$b/tokenizer/libsqlrl_tokenizer.a"
      "$b/kernels/libsqlrl_kernels.a" "$b/runtime/libsqlrl_runtime.a")
[ "$area" = model_cuda ] || libs=("$b/rl/libsqlrl_rl.a" "${libs[0]}" "$b/sql/libsqlrl_sql.a" "${libs[@]:1}" -lsqlite3)
# runtime's TensorBoard writer (protobuf messages), its gzip/CRC (ISA-L) and its MPI come last.
g++ -pthread -o "$work/${area}_emu" "$work"/obj/*.o "$work/obj/$area"/*.o "${libs[@]}" \
  "$b/runtime/libsqlrl_tfevents_proto.a" -lprotobuf -lisal $(mpicxx --showme:link) -lgtest -lgtest_main -lopenblas -lutf8proc
# SQLRL_EMU_MPI=N: under mpirun -np N (a multi-process area: every rank shares the one emulated
# device and exchanges through host memory, as ranks sharing one GPU do).
if [ -n "${SQLRL_EMU_MPI:-}" ]; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
    mpirun -np "$SQLRL_EMU_MPI" --oversubscribe "$work/${area}_emu" --gtest_filter="$filter"
else
  "$work/${area}_emu" --gtest_filter="$filter"
fi

// Load throughput of the safetensors reader on a generated 2 GiB bf16 file (32 tensors of
// [4096, 8192], about a 4B model's largest matrices), written to a temp folder and deleted at
// exit. GB/s counts file bytes (10^9). Variants:
//   ReadMapped      touch every mapped byte (sum): the ceiling for anything reading the file
//   Load/bf16       open + convert into new bf16 tensors (a copy per tensor)
//   Load/f32        open + widen into f32 tensors (the CPU path: 4 GiB written)
//   *Cold           the same after dropping the file from the page cache (fsync'd, then
//                   posix_fadvise DONTNEED): disk speed is then the bound
// Peer: bench/bench_safetensors_load.py (safetensors.torch.load_file on the same layout).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/thread_pool.h"
#include "weights/safetensors.h"

namespace {

using namespace sqlrl;

constexpr int kTensors = 32;
constexpr int64_t kRows = 4096, kCols = 8192;

std::string g_path;
uint64_t g_file_bytes = 0;

void make_file() {
  std::string pattern = (std::filesystem::temp_directory_path() / "sqlrl_bench_st_XXXXXX").string();
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  g_path = std::string(mkdtemp(buffer.data())) + "/model.safetensors";
  // One 64 MiB pattern shared by every record: distinct bf16 values, no NaNs.
  std::vector<uint16_t> blob(static_cast<size_t>(kRows * kCols));
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = f32_to_bf16_bits(static_cast<float>(i % 65521) * 1e-3f - 30.0f);
  std::vector<TensorRecord> records;
  for (int t = 0; t < kTensors; ++t)
    records.push_back({"model.layers." + std::to_string(t) + ".mlp.up_proj.weight", StDType::BF16, {kRows, kCols}, blob.data()});
  write_safetensors(g_path, records);
  g_file_bytes = std::filesystem::file_size(g_path);
}

void drop_page_cache() {
  int fd = ::open(g_path.c_str(), O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void read_mapped(benchmark::State& state, bool cold) {
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      drop_page_cache();
      state.ResumeTiming();
    }
    SafetensorsFile f = open_safetensors(g_path);
    uint64_t sum = 0;
    for (const TensorEntry& e : f.tensors) {
      const uint8_t* p = f.bytes(e);
      uint64_t tensor_sum = 0;
      default_thread_pool().parallel_for(e.nbytes() / 8, 1 << 16, [&](size_t b, size_t end) {
        uint64_t s = 0;
        for (size_t i = b; i < end; ++i) {
          uint64_t v;
          std::memcpy(&v, p + 8 * i, 8);
          s += v;
        }
        __atomic_fetch_add(&tensor_sum, s, __ATOMIC_RELAXED);
      });
      sum += tensor_sum;
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * g_file_bytes));
}

void load_all(benchmark::State& state, DType dtype, bool cold) {
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      drop_page_cache();
      state.ResumeTiming();
    }
    SafetensorsFile f = open_safetensors(g_path);
    std::vector<Tensor> loaded;
    loaded.reserve(f.tensors.size());
    for (const TensorEntry& e : f.tensors) loaded.push_back(load_tensor(f, e, dtype, cpu_device()));
    benchmark::DoNotOptimize(loaded.back().data());
    state.PauseTiming();
    loaded.clear();  // freeing 2-4 GiB is not part of loading
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * g_file_bytes));
}

void BM_ReadMapped(benchmark::State& s) { read_mapped(s, false); }
void BM_ReadMappedCold(benchmark::State& s) { read_mapped(s, true); }
void BM_LoadBf16(benchmark::State& s) { load_all(s, DType::BF16, false); }
void BM_LoadF32(benchmark::State& s) { load_all(s, DType::F32, false); }
void BM_LoadF32Cold(benchmark::State& s) { load_all(s, DType::F32, true); }

BENCHMARK(BM_ReadMapped)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_ReadMappedCold)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_LoadBf16)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(4);
BENCHMARK(BM_LoadF32)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(4);
BENCHMARK(BM_LoadF32Cold)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  make_file();
  std::printf("file: %s, %.3f GB\n", g_path.c_str(), g_file_bytes / 1e9);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  std::filesystem::remove_all(std::filesystem::path(g_path).parent_path(), ec);
  return 0;
}

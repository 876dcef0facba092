// Load throughput of the safetensors reader on a generated 2 GiB bf16 file (32 tensors of
// [4096, 8192], about a 4B model's largest matrices), written to a temp folder and deleted at
// exit. GB/s counts file bytes (10^9). Variants:
//   ReadMapped      touch every mapped byte (sum): the ceiling for anything reading the file
//   ReadFile        read() the file front to back in 16 MiB blocks (as dd does)
//   Load/bf16       open + load_tensors into new bf16 tensors (a copy per tensor)
//   Load/f32        open + load_tensors widened to f32 (the CPU path: 4 GiB written)
//   LoadEach/f32    the same with one load_tensor call per tensor
//   LoadInto/*      load_tensors_into tensors allocated (and written) once before the runs: no
//                   fresh memory per load. In a VM that hands freed guest memory back to the host
//                   (virtio-balloon free page reporting, as on the project's machine), a fresh
//                   4 GiB destination costs host page faults that can be slower than the disk;
//                   this variant shows the load without that cost.
//   *Cold           the same after dropping the file from the page cache (fsync'd, then
//                   posix_fadvise DONTNEED): disk speed is then the bound. The cold runs are
//                   repeated; run with --benchmark_enable_random_interleaving=true so that the
//                   raw reads and the loads alternate and see the same disk (a VM's disk speed
//                   drifts by tens of percent within minutes) and read the _min rows.
// The CPU column is the whole process's CPU time (all threads): on a shared machine it shows
// what a load costs when the wall time is set by other processes.
// Peer: bench/bench_safetensors_load.py (safetensors.torch.load_file on the same layout).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
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

void read_file(benchmark::State& state, bool cold) {
  std::vector<char> block(size_t{16} << 20);
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      drop_page_cache();
      state.ResumeTiming();
    }
    int fd = ::open(g_path.c_str(), O_RDONLY);
    uint64_t total = 0;
    for (ssize_t got; (got = ::read(fd, block.data(), block.size())) > 0;) total += static_cast<uint64_t>(got);
    ::close(fd);
    if (total != g_file_bytes) state.SkipWithError("short read");
    benchmark::DoNotOptimize(block.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * g_file_bytes));
}

void load_all(benchmark::State& state, DType dtype, bool cold, bool each = false) {
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      drop_page_cache();
      state.ResumeTiming();
    }
    SafetensorsFile f = open_safetensors(g_path);
    std::vector<Tensor> loaded;
    if (each) {
      for (const TensorEntry& e : f.tensors) loaded.push_back(load_tensor(f, e, dtype, cpu_device()));
    } else {
      std::vector<const TensorEntry*> entries;
      for (const TensorEntry& e : f.tensors) entries.push_back(&e);
      loaded = load_tensors(f, entries, dtype, cpu_device());
    }
    benchmark::DoNotOptimize(loaded.back().data());
    state.PauseTiming();
    loaded.clear();  // freeing 2-4 GiB is not part of loading
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * g_file_bytes));
}

double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

void load_into(benchmark::State& state, DType dtype) {
  std::vector<Tensor> destinations;
  {
    SafetensorsFile f = open_safetensors(g_path);
    for (const TensorEntry& e : f.tensors) {
      destinations.push_back(empty(Shape(e.shape), dtype, cpu_device()));
      std::memset(destinations.back().data(), 0, destinations.back().nbytes());
    }
  }
  for (auto _ : state) {
    state.PauseTiming();
    drop_page_cache();
    state.ResumeTiming();
    SafetensorsFile f = open_safetensors(g_path);
    std::vector<const TensorEntry*> entries;
    for (const TensorEntry& e : f.tensors) entries.push_back(&e);
    load_tensors_into(f, entries, destinations);
    benchmark::DoNotOptimize(destinations.back().data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * g_file_bytes));
}

void BM_ReadMapped(benchmark::State& s) { read_mapped(s, false); }
void BM_ReadMappedCold(benchmark::State& s) { read_mapped(s, true); }
void BM_ReadFileCold(benchmark::State& s) { read_file(s, true); }
void BM_LoadBf16(benchmark::State& s) { load_all(s, DType::BF16, false); }
void BM_LoadF32(benchmark::State& s) { load_all(s, DType::F32, false); }
void BM_LoadBf16Cold(benchmark::State& s) { load_all(s, DType::BF16, true); }
void BM_LoadF32Cold(benchmark::State& s) { load_all(s, DType::F32, true); }
void BM_LoadEachF32Cold(benchmark::State& s) { load_all(s, DType::F32, true, true); }
void BM_LoadIntoBf16Cold(benchmark::State& s) { load_into(s, DType::BF16); }
void BM_LoadIntoF32Cold(benchmark::State& s) { load_into(s, DType::F32); }

// Warm runs: best of several iterations. Cold runs: one iteration per repetition, repeated so
// that interleaving can alternate them; min/max of time (max of bytes_per_second) are the
// figures to read, the mean carries the drift of the disk.
void cold(benchmark::internal::Benchmark* b) {
  b->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime()->Iterations(1)->Repetitions(4)
      ->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of);
}

BENCHMARK(BM_ReadMapped)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_LoadBf16)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime()->Iterations(4);
BENCHMARK(BM_LoadF32)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime()->Iterations(4);
BENCHMARK(BM_ReadMappedCold)->Apply(cold);
BENCHMARK(BM_ReadFileCold)->Apply(cold);
BENCHMARK(BM_LoadBf16Cold)->Apply(cold);
BENCHMARK(BM_LoadF32Cold)->Apply(cold);
BENCHMARK(BM_LoadEachF32Cold)->Apply(cold);
BENCHMARK(BM_LoadIntoBf16Cold)->Apply(cold);
BENCHMARK(BM_LoadIntoF32Cold)->Apply(cold);

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

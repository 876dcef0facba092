// CUDA flash attention (kernels/cuda/attention*.cu) and paged decode attention, timed with
// events (warm-up, median of 20). Attention: TFLOP/s at 16k tokens per batch (batch x seq),
// head_dim 128, causal, beside the device's published dense bf16 peak; bench/attention_torch.py
// times PyTorch SDPA (flash backend) on the same shapes for the comparison. FLOPs follow
// FlashAttention's convention: forward 4 * seq^2 * D * heads * batch / 2 (causal), backward
// 2.5x that (5 products instead of 2; our backward does 7, the extra ones are not counted).
// Paged decode: GB/s over the K/V bytes the step must read, beside a measured device copy (see
// bench_paged for its two timings).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "bench/cuda_bench.h"
#include "kernels/attention.h"
#include "runtime/cuda/check.h"
#include "runtime/random.h"
#include "runtime/tensor.h"

using namespace sqlrl;

static double spec_peak_tflops(const std::string& name) {
  if (name.find("H200") != std::string::npos) return 989.4;
  if (name.find("H100") != std::string::npos) return name.find("PCIe") != std::string::npos ? 756.5 : 989.4;
  if (name.find("A100") != std::string::npos) return 312.0;
  return 0;
}

static Tensor random_bf16(Shape shape, uint64_t stream, float stddev) {
  Tensor f = empty(shape, DType::F32, cuda_device(0));
  fill_normal(f, 1234, stream, 0.0f, stddev);
  return to_dtype(f, DType::BF16);
}

static void bench_flash(int64_t seq, int64_t heads, int64_t kv_heads, double peak) {
  const int64_t D = 128, batch = std::max<int64_t>(1, 16384 / seq), T = batch * seq;
  AttentionShape shape{heads, kv_heads, D};
  Tensor q = random_bf16({T, heads, D}, 1, 1.0f), k = random_bf16({T, kv_heads, D}, 2, 1.0f),
         v = random_bf16({T, kv_heads, D}, 3, 1.0f), dout = random_bf16({T, heads, D}, 4, 1.0f);
  Tensor out = empty({T, heads, D}, DType::BF16, cuda_device(0)), lse = empty({T, heads}, DType::F32, cuda_device(0));
  Tensor dq = empty({T, heads, D}, DType::BF16, cuda_device(0));
  Tensor dk = empty({T, kv_heads, D}, DType::BF16, cuda_device(0)), dv = empty({T, kv_heads, D}, DType::BF16, cuda_device(0));
  std::vector<int32_t> cu(static_cast<size_t>(batch + 1));
  for (int64_t b = 0; b <= batch; ++b) cu[b] = static_cast<int32_t>(b * seq);
  Tensor gcu = from_ints(cu, {batch + 1}, cuda_device(0));
  size_t ws_bytes = attention_backward_workspace_bytes(T, shape);
  Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4) + 1}, DType::F32, cuda_device(0));

  auto forward = [&] {
    attention_forward_cuda(out.data_as<uint16_t>(), lse.data_as<float>(), q.data_as<uint16_t>(), k.data_as<uint16_t>(),
                           v.data_as<uint16_t>(), gcu.data_as<int32_t>(), batch, seq, shape);
  };
  auto backward = [&] {
    attention_backward_cuda(dq.data_as<uint16_t>(), dk.data_as<uint16_t>(), dv.data_as<uint16_t>(),
                            dout.data_as<uint16_t>(), out.data_as<uint16_t>(), lse.data_as<float>(),
                            q.data_as<uint16_t>(), k.data_as<uint16_t>(), v.data_as<uint16_t>(),
                            gcu.data_as<int32_t>(), batch, T, seq, shape, ws.data(), ws_bytes);
  };
  float fwd_ms = bench::median_ms(forward);
  float bwd_ms = bench::median_ms(backward);
  double fwd_flops = 4.0 * static_cast<double>(seq) * seq * D * heads * batch / 2;
  std::string tag = " causal seq " + std::to_string(seq) + " d128 b" + std::to_string(batch) + " h" +
                    std::to_string(heads) + "/" + std::to_string(kv_heads);
  bench::print_row("flash fwd" + tag, fwd_flops / fwd_ms / 1e9, "TFLOP/s", "spec peak", peak);
  bench::print_row("flash bwd" + tag, 2.5 * fwd_flops / bwd_ms / 1e9, "TFLOP/s", "spec peak", peak);
}

// Device-to-device copy of `bytes`, counting bytes read plus written (GB/s).
static double copy_gbps(size_t bytes) {
  Tensor a = empty({static_cast<int64_t>(bytes / 4)}, DType::F32, cuda_device(0));
  Tensor b = empty({static_cast<int64_t>(bytes / 4)}, DType::F32, cuda_device(0));
  fill(a, 1.0f);
  float ms = bench::median_ms([&] { CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice)); });
  return 2.0 * static_cast<double>(bytes) / ms / 1e6;
}

// Paged decode at Qwen3-4B's heads, blocks of 16 scattered as in a real cache. Two timings:
//  * one call between two events (median of 20), as this bench has always done: it includes the
//    host's enqueue latency, a visible share for the shapes that run tens of microseconds;
//  * per launch inside a CUDA graph of many launches (decode replays graphs), rotating over
//    copies of the cache so that the graph reads several times the L2 (60 MB on an H200) and the
//    small shapes measure memory, not cache hits. For the latency-bound shapes the row also
//    gives the microseconds per launch beside the floor (bytes at the device copy rate).
static void bench_paged(int64_t num_queries, int64_t context, int64_t heads, int64_t kv_heads, double copy,
                        bool single_call) {
  const int64_t D = 128, bs = 16, blocks_per_seq = (context + bs - 1) / bs, num_blocks = num_queries * blocks_per_seq;
  const double bytes = 2.0 * num_queries * context * kv_heads * D * 2;  // K and V, bf16
  const int copies = static_cast<int>(std::clamp(std::ceil(256e6 / bytes), 1.0, 64.0));
  AttentionShape shape{heads, kv_heads, D};
  Tensor q = random_bf16({num_queries, heads, D}, 5, 1.0f);
  std::vector<Tensor> kc, vc;
  for (int c = 0; c < copies; ++c) {
    kc.push_back(random_bf16({num_blocks * bs, kv_heads, D}, 6 + 2 * c, 1.0f));
    vc.push_back(random_bf16({num_blocks * bs, kv_heads, D}, 7 + 2 * c, 1.0f));
  }
  std::vector<int32_t> table(static_cast<size_t>(num_blocks)), positions(static_cast<size_t>(num_queries), context - 1);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(7));  // blocks scattered as in a real cache
  Tensor gtable = from_ints(table, {num_queries, blocks_per_seq}, cuda_device(0));
  Tensor gpos = from_ints(positions, {num_queries}, cuda_device(0));
  Tensor out = empty({num_queries, heads, D}, DType::BF16, cuda_device(0));
  PagedQueries queries{num_queries, gtable.data_as<int32_t>(), blocks_per_seq, gpos.data_as<int32_t>(), bs};
  size_t ws_bytes = paged_attention_workspace_bytes(num_queries, shape, context);
  Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4) + 1}, DType::F32, cuda_device(0));
  CudaStream stream = cuda_stream_create(0);
  auto launch = [&](int c) {
    paged_attention_cuda(out.data_as<uint16_t>(), q.data_as<uint16_t>(), kc[c].data_as<uint16_t>(),
                         vc[c].data_as<uint16_t>(), queries, shape, context, ws.data(), ws_bytes, kPagedSplitTokens,
                         stream);
  };
  std::string name = "paged decode " + std::to_string(num_queries) + " x ctx " + std::to_string(context) + " h" +
                     std::to_string(heads) + "/" + std::to_string(kv_heads) + " d128";
  if (single_call) {
    int next = 0;
    float ms = bench::median_ms([&] { launch(next++ % copies); }, 3, 20, stream);
    bench::print_row(name, bytes / ms / 1e6, "GB/s", "device copy", copy);
  }
  launch(0);  // first call outside the capture (one-time setup)
  const int reps = std::max(copies, 10);
  auto cs = static_cast<cudaStream_t>(stream.handle);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < reps; ++i) launch(i % copies);
  CUDA_CHECK(cudaStreamEndCapture(cs, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  float ms = bench::median_ms([&] { CUDA_CHECK(cudaGraphLaunch(exec, cs)); }, 2, 10, stream) / reps;
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  bench::print_row(name + ", graph of " + std::to_string(reps), bytes / ms / 1e6, "GB/s", "device copy", copy);
  if (bytes < 100e6)
    bench::print_row(name + ", graph of " + std::to_string(reps) + ", us per launch", ms * 1e3, "us",
                     "bytes at copy rate", bytes / copy / 1e3);
  cuda_stream_destroy(stream);
}

int main() {
  if (cuda_device_count() == 0) {
    std::printf("bench_attention_cuda: skipped: %s\n", cuda_unavailable_reason().c_str());
    return 0;
  }
  CudaDeviceInfo info = cuda_device_info(0);
  double peak = spec_peak_tflops(info.name);
  std::printf("### Attention on %s (spec dense bf16 peak %.1f TFLOP/s)\n\n", info.name.c_str(), peak);
  bench::print_header();
  for (int64_t seq : {1024, 2048, 4096, 8192}) bench_flash(seq, 16, 16, peak);
  bench_flash(4096, 32, 8, peak);  // Qwen3-4B's heads (32 q, 8 kv)
  double copy = copy_gbps(size_t{1} << 30);
  bench_paged(64, 4096, 32, 8, copy, true);
  bench_paged(8, 8192, 32, 8, copy, true);
  bench_paged(1, 32768, 32, 8, copy, true);  // one long context: split-K carries the parallelism
  // Small work: decode at batch 1 runs this once per layer (36 for Qwen3-4B), so each launch's
  // latency counts; and mid-size batches.
  bench_paged(1, 512, 32, 8, copy, false);
  bench_paged(1, 2048, 32, 8, copy, false);
  bench_paged(16, 2048, 32, 8, copy, false);
  bench_paged(64, 2048, 32, 8, copy, false);
  bench_paged(64, 512, 32, 8, copy, false);
  return 0;
}

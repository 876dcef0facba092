// CUDA RMSNorm / RoPE / SwiGLU / embedding bandwidth beside a device-to-device copy measured in the
// same run; the decode step's kernels (the few-row product at Qwen3-4B's shapes beside cuBLASLt
// on the same problem, the fused attention prologue); sampling rows/s over 151,936-wide rows;
// masked log-prob time and memory at Qwen3-4B's shape (tokens 4096, vocab 151,936, hidden 2560).
// PyTorch baselines: bench/logprob_torch.py.
// Bytes counted: each input read once, each output written once (the minimum a kernel must move).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/cuda_bench.h"
#include "kernels/decode_qkv.h"
#include "kernels/embedding.h"
#include "kernels/logprob.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "kernels/swiglu.h"
#include "runtime/cuda/check.h"
#include "runtime/gemm.h"
#include "runtime/random.h"

using namespace sqlrl;

namespace {

const CudaStream kStream{nullptr, 0};

Tensor random_bf16(int64_t n, uint64_t stream_id, float low = -1.0f, float high = 1.0f) {
  Tensor f = empty({n}, DType::F32, cuda_device(0));
  fill_uniform(f, 1234, stream_id, low, high);
  return to_dtype(f, DType::BF16);
}
Tensor random_f32(int64_t n, uint64_t stream_id, float low = -1.0f, float high = 1.0f) {
  Tensor f = empty({n}, DType::F32, cuda_device(0));
  fill_uniform(f, 1234, stream_id, low, high);
  return f;
}
uint16_t* bf(const Tensor& t) { return t.data_as<uint16_t>(); }
float* f32(const Tensor& t) { return t.data_as<float>(); }
Tensor bytes(size_t n) { return empty({static_cast<int64_t>(n > 0 ? n : 1)}, DType::U8, cuda_device(0)); }

double gbps(double bytes, float ms) { return bytes / ms / 1e6; }

}  // namespace

int main() {
  if (cuda_device_count() == 0) {
    std::printf("bench_ops_cuda: skipped: %s\n", cuda_unavailable_reason().c_str());
    return 0;
  }
  CudaDeviceInfo info = cuda_device_info(0);
  std::printf("### Element-wise / normalisation kernels on %s\n\n", info.name.c_str());
  bench::print_header();

  // The ceiling: a 1 GiB device-to-device copy, bytes read + bytes written.
  const size_t copy_bytes = size_t{1} << 30;
  Tensor src = bytes(copy_bytes), dst = bytes(copy_bytes);
  CUDA_CHECK(cudaMemset(src.data(), 1, copy_bytes));
  float copy_ms = bench::median_ms([&] {
    CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), copy_bytes, cudaMemcpyDeviceToDevice, nullptr));
  });
  const double copy = gbps(2.0 * copy_bytes, copy_ms);
  bench::print_row("device-to-device copy 1 GiB", copy, "GB/s", "itself", copy);
  src = Tensor{}, dst = Tensor{};

  const int64_t tokens = 16384, hidden = 2560, heads = 32, head_dim = 128, inter = 9728;
  {  // RMSNorm over the hidden size, and Qwen3's q_norm (rows = tokens * heads, dim = head_dim).
    for (auto [rows_, dim_, name] : {std::tuple{tokens, hidden, "rmsnorm hidden 2560"},
                                     std::tuple{tokens * heads, head_dim, "rmsnorm q_norm 128"}}) {
      const int64_t rows = rows_, dim = dim_, n = rows * dim;  // plain locals: lambdas capture them
      Tensor x = random_bf16(n, 1), w = random_bf16(dim, 2, 0.5f, 1.5f), out = random_bf16(n, 3);
      Tensor dout = random_bf16(n, 4), dx = random_bf16(n, 5), rstd = random_f32(rows, 6), dw = random_f32(dim, 7);
      size_t ws_bytes = rmsnorm_backward_workspace_bytes(rows, dim);
      Tensor ws = bytes(ws_bytes);
      float fwd = bench::median_ms([&] { rmsnorm_forward_cuda(bf(out), f32(rstd), bf(x), bf(w), rows, dim, 1e-6f, kStream); });
      float bwd = bench::median_ms([&] {
        rmsnorm_backward_cuda(bf(dx), f32(dw), bf(dout), bf(x), bf(w), f32(rstd), rows, dim, ws.data(), ws_bytes, kStream);
      });
      bench::print_row(std::string(name) + " fwd", gbps(2.0 * n * 2 + rows * 4.0, fwd), "GB/s", "copy", copy);
      // Reads x, dout, dx; writes dx.
      bench::print_row(std::string(name) + " bwd", gbps(4.0 * n * 2 + rows * 4.0, bwd), "GB/s", "copy", copy);
    }
  }
  {  // RoPE in place on q [tokens, 32, 128].
    const int64_t n = tokens * heads * head_dim;
    Tensor q = random_bf16(n, 8);
    std::vector<int32_t> pos(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t) pos[t] = static_cast<int32_t>(t % 4096);
    Tensor positions = from_ints(pos, {tokens}, cuda_device(0));
    float fwd = bench::median_ms([&] {
      rope_forward_cuda(bf(q), positions.data_as<int32_t>(), tokens, heads, head_dim, heads * head_dim, 1e6f, kStream);
    });
    bench::print_row("rope q 32x128 fwd (in place)", gbps(2.0 * n * 2, fwd), "GB/s", "copy", copy);
  }
  {  // SwiGLU on [tokens, 9728].
    const int64_t n = tokens * inter;
    Tensor g = random_bf16(n, 9, -4, 4), u = random_bf16(n, 10), out = random_bf16(n, 11), dout = random_bf16(n, 12);
    Tensor dg = random_bf16(n, 13), du = random_bf16(n, 14);
    float fwd = bench::median_ms([&] { swiglu_forward_cuda(bf(out), bf(g), bf(u), n, kStream); });
    float bwd = bench::median_ms([&] { swiglu_backward_cuda(bf(dg), bf(du), bf(dout), bf(g), bf(u), n, kStream); });
    bench::print_row("swiglu 9728 fwd", gbps(3.0 * n * 2, fwd), "GB/s", "copy", copy);
    bench::print_row("swiglu 9728 bwd", gbps(5.0 * n * 2, bwd), "GB/s", "copy", copy);
  }
  {  // Embedding gather of 16384 tokens from [151936, 2560].
    const int64_t vocab = 151936;
    Tensor table = random_bf16(vocab * hidden, 15), out = random_bf16(tokens * hidden, 16);
    std::vector<int32_t> ids(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t) ids[t] = static_cast<int32_t>((t * 7919) % vocab);
    Tensor gids = from_ints(ids, {tokens}, cuda_device(0));
    float fwd = bench::median_ms([&] {
      embedding_forward_cuda(bf(out), bf(table), gids.data_as<int32_t>(), tokens, vocab, hidden, kStream);
    });
    bench::print_row("embedding gather fwd", gbps(2.0 * tokens * hidden * 2, fwd), "GB/s", "copy", copy);
    Tensor dtable = random_f32(vocab * hidden, 17), dout = random_bf16(tokens * hidden, 18);
    size_t ws_bytes = embedding_backward_workspace_bytes(tokens, vocab);
    Tensor ws = bytes(ws_bytes);
    float bwd = bench::median_ms([&] {
      embedding_backward_cuda(f32(dtable), bf(dout), gids.data_as<int32_t>(), tokens, vocab, hidden, ws.data(),
                              ws_bytes, kStream);
    });
    // Reads dout (bf16) and the touched dtable rows, writes those rows (f32).
    bench::print_row("embedding scatter-add bwd", gbps(tokens * hidden * (2.0 + 8.0), bwd), "GB/s", "copy", copy);
  }

  std::printf("\n### Decode step kernels at Qwen3-4B's shapes on %s\n\n", info.name.c_str());
  std::printf("The few-row product (kernels/matmul.h) reads each weight once per step; bandwidth counts W, x and the\n"
              "output once. Baseline: cuBLASLt (runtime/gemm.h) on the same product, bf16 out (gate/up as one\n"
              "[2I, K] GEMM without the SwiGLU). Several copies of W rotate so that the 60 MB L2 holds none.\n\n");
  bench::print_header();
  {
    struct Shape {
      const char* name;
      std::vector<int64_t> parts;
      int64_t K;
      MatmulRowsEpilogue epilogue;
    };
    const std::vector<Shape> shapes = {
        {"q/k/v 4096+1024+1024 x 2560", {4096, 1024, 1024}, 2560, MatmulRowsEpilogue::store},
        {"o 2560 x 4096 (+residual)", {2560}, 4096, MatmulRowsEpilogue::accumulate},
        {"gate/up 2x9728 x 2560 (+swiglu)", {9728, 9728}, 2560, MatmulRowsEpilogue::swiglu},
        {"down 2560 x 9728 (+residual)", {2560}, 9728, MatmulRowsEpilogue::accumulate},
        {"lm_head 151936 x 2560 (f32)", {151936}, 2560, MatmulRowsEpilogue::store_f32}};
    const int sms = info.multiprocessors;
    for (const Shape& sh : shapes) {
      int64_t N = 0;
      for (int64_t r : sh.parts) N += r;
      const bool swiglu = sh.epilogue == MatmulRowsEpilogue::swiglu, f32_out = sh.epilogue == MatmulRowsEpilogue::store_f32;
      const int64_t cols = swiglu ? N / 2 : N, K = sh.K;
      const double w_bytes = 2.0 * N * K;
      const int copies = static_cast<int>(std::max(1.0, 256e6 / w_bytes + 0.999));
      std::vector<Tensor> w;
      for (int i = 0; i < copies; ++i) w.push_back(random_bf16(N * K, 30 + i, -0.05f, 0.05f));
      for (int64_t M : {int64_t{1}, int64_t{16}, int64_t{64}}) {
        Tensor x = random_bf16(M * K, 40), out = f32_out ? random_f32(M * cols, 41) : random_bf16(M * cols, 41);
        Tensor c = random_bf16(M * N, 42);
        const size_t ws_bytes = matmul_rows_workspace_bytes(N, K, swiglu, M, sms);
        Tensor ws = bytes(ws_bytes);
        CUDA_CHECK(cudaMemset(ws.data(), 0, ws_bytes));
        int turn = 0;
        auto problem = [&](const Tensor& wt, MatmulRowsVariant variant) {
          MatmulRowsProblem p;
          p.out = out.data();
          p.ld_out = cols;
          p.x = bf(x);
          p.ld_x = K;
          p.rows = M;
          p.in_features = K;
          p.num_parts = static_cast<int>(sh.parts.size());
          int64_t at = 0;
          for (int i = 0; i < p.num_parts; ++i) {
            p.parts[i] = {bf(wt) + at * K, nullptr, sh.parts[i]};
            at += sh.parts[i];
          }
          p.epilogue = sh.epilogue;
          p.variant = variant;
          return p;
        };
        Tensor xm = view_bytes(x, 0, {M, K}, DType::BF16), cm = view_bytes(c, 0, {M, N}, DType::BF16);
        float peer = bench::median_ms([&] {
          gemm(xm, view_bytes(w[turn++ % copies], 0, {N, K}, DType::BF16), cm, false, true);
        });
        const double bytes_moved = w_bytes + 2.0 * M * K + (f32_out ? 4.0 : 2.0) * M * cols;
        const MatmulRowsGrid g = matmul_rows_grid(N, K, swiglu, sms);
        for (MatmulRowsVariant variant : {MatmulRowsVariant::staged, MatmulRowsVariant::direct}) {
          float ours = bench::median_ms([&] {
            matmul_rows_cuda(problem(w[turn++ % copies], variant), ws.data(), ws_bytes, kStream);
          });
          char name[192];
          std::snprintf(name, sizeof name, "%s, M=%lld, %s (%lld x %lld blocks): GB/s; vs copy %.2f", sh.name,
                        static_cast<long long>(M), variant == MatmulRowsVariant::staged ? "staged" : "direct",
                        static_cast<long long>(g.tiles), static_cast<long long>(g.splits), gbps(bytes_moved, ours) / copy);
          bench::print_row(name, gbps(bytes_moved, ours), "GB/s", "cuBLASLt GB/s", gbps(bytes_moved, peer));
        }
      }
    }
    // The fused prologue: 64 tokens' q/k/v of 32 + 8 + 8 heads x 128 -> q, the cache rows.
    const int64_t T = 64, H = 32, KVH = 8, D = 128, width = (H + 2 * KVH) * D;
    Tensor qkv = random_bf16(T * width, 50), q = random_bf16(T * H * D, 51), qn = random_bf16(D, 52, 0.5f, 1.5f);
    Tensor kc = random_bf16(T * KVH * D, 53), vc = random_bf16(T * KVH * D, 54);
    std::vector<int32_t> host_pos(T), host_slots(T);
    for (int64_t t = 0; t < T; ++t) host_pos[t] = static_cast<int32_t>(1000 + 37 * t), host_slots[t] = static_cast<int32_t>(t);
    Tensor pos = from_ints(host_pos, {T}, cuda_device(0)), slots = from_ints(host_slots, {T}, cuda_device(0));
    const DecodeQkvShape qs{H, KVH, D, 1e-6f, 1e6f};
    float ms = bench::median_ms([&] {
      decode_qkv_cuda(bf(q), bf(kc), bf(vc), bf(qkv), bf(qn), bf(qn), pos.data_as<int32_t>(), slots.data_as<int32_t>(), T,
                      qs, kStream);
    });
    bench::print_row("decode_qkv 64 tokens, 32+8+8 heads x 128 (us; unfused: 2 norms + 2 RoPE + cache write)",
                     ms * 1e3, "us", "-", 0);
  }

  std::printf("\n### Sampling over 151,936-wide f32 rows on %s\n\n", info.name.c_str());
  {
    // Uniform logits in [-10, 10] (every id a candidate: the sampler's worst case) at the batch
    // sizes of a decode step, and a model-like row set (below). Each row printed twice: rows/s
    // beside reading the logits once at copy bandwidth, and microseconds per call beside that read.
    const int64_t vocab = 151936;
    const std::pair<SamplingParams, const char*> settings[] = {{SamplingParams{0.0f, 0, 1.0f, 1}, "greedy"},
                                                               {SamplingParams{1.0f, 0, 1.0f, 1}, "T=1"},
                                                               {SamplingParams{0.6f, 0, 0.95f, 1}, "T=0.6 top-p 0.95"},
                                                               {SamplingParams{1.0f, 50, 1.0f, 1}, "top-k 50"}};
    struct Line {
      std::string name;
      float ms;
      double read_ms;
      int64_t rows;
    };
    std::vector<Line> lines;
    auto run = [&](const Tensor& logits, int64_t rows, const SamplingParams& params, const std::string& name) {
      Tensor out = bytes(static_cast<size_t>(rows) * sizeof(SampledToken));
      Tensor req = bytes(static_cast<size_t>(rows) * sizeof(SamplingRequest));
      const size_t ws_bytes = sample_tokens_cuda_workspace_bytes(rows, vocab);
      Tensor ws = bytes(ws_bytes);
      std::vector<SamplingRequest> host(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) host[r] = SamplingRequest{params, static_cast<uint64_t>(r), 17};
      CUDA_CHECK(cudaMemcpy(req.data(), host.data(), host.size() * sizeof(SamplingRequest), cudaMemcpyHostToDevice));
      float ms = bench::median_ms([&] {
        sample_tokens_cuda(static_cast<SampledToken*>(out.data()), f32(logits), rows, vocab, vocab,
                           static_cast<const SamplingRequest*>(req.data()), ws.data(), ws_bytes, kStream);
      });
      lines.push_back({name, ms, rows * vocab * 4.0 / (copy * 1e6), rows});
    };
    for (int64_t rows : {int64_t{1}, int64_t{8}, int64_t{32}, int64_t{64}, int64_t{256}}) {
      Tensor logits = random_f32(rows * vocab, 19, -10.0f, 10.0f);
      for (const auto& [params, name] : settings) run(logits, rows, params, "sample " + std::to_string(rows) + " rows " + name);
    }
    {
      // Model-like rows: most ids far below a few leaders (uniform in [-12, 0], 16 ids at 8..23),
      // as an LLM's logits are; the exact work then touches only the ids near the top.
      const int64_t rows = 64;
      std::vector<float> host = std::vector<float>(static_cast<size_t>(rows * vocab));
      uint64_t state = 12345;
      auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
      for (float& l : host) l = -12.0f * static_cast<float>(next() >> 40) * 0x1p-24f;
      for (int64_t r = 0; r < rows; ++r)
        for (int k = 0; k < 16; ++k) host[r * vocab + static_cast<int64_t>(next() >> 33) % vocab] = 8.0f + k;
      Tensor logits = bytes(host.size() * sizeof(float));
      CUDA_CHECK(cudaMemcpy(logits.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
      for (const auto& [params, name] : settings)
        run(logits, rows, params, "sample 64 model-like rows " + std::string(name));
    }
    bench::print_header();
    // Baseline: reading the logits once at copy bandwidth (a lower bound on any sampler's time).
    const double floor_rows_per_s = copy * 1e9 / (vocab * 4.0);
    for (const Line& l : lines)
      bench::print_row(l.name, l.rows / (l.ms * 1e-3), "rows/s", "one read at copy bw", floor_rows_per_s);
    std::printf("\n");
    bench::print_header();
    for (const Line& l : lines) bench::print_row(l.name, l.ms * 1e3, "us per call", "one read at copy bw", l.read_ms * 1e3);
  }

  std::printf("\n### Masked log-prob, tokens 4096 x vocab 151,936 x hidden 2560 on %s\n\n", info.name.c_str());
  bench::print_header();
  {
    const int64_t T = 4096, V = 151936, C = 2560;
    Tensor hidden = random_bf16(T * C, 20), weight = random_bf16(V * C, 21, -0.05f, 0.05f);
    std::vector<int32_t> tg(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) tg[t] = static_cast<int32_t>((t * 104729) % V);
    Tensor targets = from_ints(tg, {T}, cuda_device(0));
    Tensor logprobs = random_f32(T, 22), lse = random_f32(T, 23), entropy = random_f32(T, 24);
    // Half the tokens carry gradient (prompt tokens are masked in RL batches).
    std::vector<float> g(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) g[t] = t % 2 == 0 ? 0.0f : 1.0f / T;
    Tensor dlogprobs = from_floats(g, {T}, DType::F32, cuda_device(0));
    Tensor dhidden = random_bf16(T * C, 25), dweight = random_f32(V * C, 26);
    const double flops_fwd = 2.0 * T * V * C;
    for (auto [ct, cv] : {std::pair{int64_t{1024}, int64_t{16384}}, std::pair{int64_t{2048}, int64_t{32768}}}) {
      const LogprobCudaShape shape{T, C, V, ct, cv};
      size_t ws_bytes = logprob_cuda_workspace_bytes(shape);
      Tensor ws = bytes(ws_bytes);
      float fwd = bench::median_ms(
          [&] {
            logprob_forward_cuda(f32(logprobs), f32(lse), f32(entropy), bf(hidden), bf(weight),
                                 targets.data_as<int32_t>(), shape, ws.data(), ws_bytes, kStream);
          },
          2, 10);
      float bwd = bench::median_ms(
          [&] {
            logprob_backward_cuda(bf(dhidden), f32(dweight), f32(dlogprobs), nullptr, bf(hidden), bf(weight),
                                  targets.data_as<int32_t>(), f32(lse), nullptr, shape, ws.data(), ws_bytes, kStream);
          },
          2, 10);
      std::string tile = " (tiles " + std::to_string(ct) + "x" + std::to_string(cv) + ")";
      bench::print_row("logprob fwd ms" + tile, fwd, "ms", "-", 0);
      bench::print_row("logprob fwd TFLOP/s" + tile, flops_fwd / fwd / 1e9, "TFLOP/s", "-", 0);
      // Backward over the 50% active tokens: 3 GEMMs of 2 T/2 V C flops.
      bench::print_row("logprob bwd ms (50% masked)" + tile, bwd, "ms", "-", 0);
      bench::print_row("logprob workspace MB" + tile, ws_bytes / 1e6, "MB", "[T x V] f32 logits", T * V * 4.0 / 1e6);
      // Every byte this op touches is allocated explicitly here, plus runtime/gemm's 32 MiB
      // cuBLASLt workspace: the sum is its peak (PyTorch's figure: logprob_torch.py).
      const double inputs = (T * C + V * C) * 2.0 + T * 4.0, outputs = 3.0 * T * 4, cublas = 32.0 * (1 << 20);
      bench::print_row("logprob fwd memory MB (inputs+outputs+workspace)" + tile,
                       (inputs + outputs + ws_bytes + cublas) / 1e6, "MB", "PyTorch: logprob_torch.py", 0);
      // Backward adds dweight (f32, as the trainer keeps it), dhidden (bf16) and dlogprobs.
      const double grads = V * C * 4.0 + T * C * 2.0 + T * 4.0;
      bench::print_row("logprob fwd+bwd memory MB" + tile, (inputs + outputs + grads + ws_bytes + cublas) / 1e6, "MB",
                       "PyTorch: logprob_torch.py", 0);
    }
  }
  return 0;
}

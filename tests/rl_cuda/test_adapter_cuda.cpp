// A LoRA adapter on the CUDA policy for inference (`eval --device cuda --adapter DIR` runs
// policy_forward_cached, `generate --device cuda --adapter DIR` generate_cuda): the frozen base on
// the device with the adapter attached (policy_attach_lora, no gradients) against the CPU policy
// with the same adapter, on a short greedy decode.
//
// Criterion. Along the CPU adapter's own greedy tokens (the device fed the same tokens), each
// step's logits row on the device must lie within the bf16 budget of the CPU's: per element
// b_v = 12 sqrt(R) u ||g W[v]||_2 (tests/model_cuda/model_cuda_util.h; R = bf16_lora_roundings,
// the adapter's extra stores counted as test_lora_cuda.cpp counts them), and in L2 a third of
// ||b|| (each b_v is 12 standard deviations of its element's error: the L2 error is ~1/12 of
// ||b|| in expectation; 1/3 leaves 4x). The adapter's effect on the row (CPU with minus CPU
// without) is required, on the CPU before any device is needed, to be over 2.5x that L2 bound
// (test_lora_cuda.cpp's discrimination share 0.4), so a device forward without the adapter (an
// error of the whole effect) fails. Greedy tokens: the device's (both entry points, decoding
// freely) equal the CPU's up to the first step whose CPU choice is not sure (top-1 beats the
// runner-up by less than b_top1 + b_runner_up): no error within budget can change a sure choice.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "model/cuda_lora.h"
#include "model/cuda_ops.h"
#include "rl/policy.h"
#include "tests/rl_cuda/rl_cuda_fixture.h"

namespace sqlrl::rl::testing {
namespace {

constexpr int kSteps = 12;
const std::vector<int32_t> kPrompt = {5, 17, 42, 99, 3, 200, 64, 311, 7};

// Per vocabulary entry v: 12 sqrt(R) u ||g W[v]||_2 (as test_lora_cuda.cpp's logit_budget).
std::vector<double> logit_budget(const QwenModel& host, int roundings) {
  const QwenConfig& c = host.config;
  const ModelWeights w = QwenModel::bind_weights(host, const_cast<float*>(host.params.data()));
  const double k = sqlrl::testing::kBf16Sigmas * std::sqrt(static_cast<double>(roundings)) *
                   sqlrl::testing::kBf16Roundoff;
  std::vector<double> row(static_cast<size_t>(c.vocab_size));
  for (int64_t v = 0; v < c.vocab_size; ++v) {
    double sq = 0;
    for (int64_t i = 0; i < c.hidden_size; ++i) {
      const double gw = static_cast<double>(w.final_norm[i]) * w.lm_head[v * c.hidden_size + i];
      sq += gw * gw;
    }
    row[static_cast<size_t>(v)] = k * std::sqrt(sq);
  }
  return row;
}

double l2(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

std::vector<float> logits_row(const Policy& p, const PolicyLogits& logits) {
  const int64_t V = p.config().vocab_size;
  if (policy_device(p) == DeviceType::CPU) return std::vector<float>(logits.host.begin(), logits.host.begin() + V);
  std::vector<float> row(static_cast<size_t>(V));
  model_copy(row.data(), logits.cuda.data(), sizeof(float) * V, CopyKind::DeviceToHost, p.cuda.stream);
  return row;
}

// Prefills the prompt, then feeds `forced` (or, empty, the policy's own greedy tokens) one at a
// time, as the rollout engine decodes; the logits row before each token and the greedy tokens.
struct Decode {
  std::vector<std::vector<float>> rows;
  std::vector<int32_t> tokens;
};
Decode decode(const Policy& policy, const std::vector<int32_t>& forced) {
  PolicyKV kv = make_policy_kv(policy, 16, 4);
  PolicyLogits logits;
  const int64_t h = kv_new_sequence(kv.book());
  Decode d;
  std::vector<int32_t> next = kPrompt;
  for (int i = 0; i < kSteps; ++i) {
    policy_forward_cached(policy, kv, {{h, next}}, logits);
    d.rows.push_back(logits_row(policy, logits));
    SamplingRequest greedy;
    greedy.params.temperature = 0;
    greedy.position = static_cast<int64_t>(kPrompt.size()) + i;
    const int32_t t = policy_sample(policy, logits, {0}, {greedy}, policy.config().vocab_size)[0].token;
    d.tokens.push_back(t);
    next = {forced.empty() ? t : forced[static_cast<size_t>(i)]};
  }
  return d;
}

TEST(AdapterCuda, GreedyDecodeWithAnAdapterIsTheCpuAdapters) {
  const QwenModel host = bf16_model(512, 7);
  LoraAdapter adapter = bf16_adapter(host.config, 21);
  // The CPU half (runs without a device): the adapter's decode, the base alone along the same
  // tokens, the budget, and the premise that the adapter's effect is large against it.
  Policy cpu = cpu_policy(host);
  cpu.lora = &adapter;
  const Decode want = decode(cpu, {});
  const Decode alone = decode(cpu_policy(host), want.tokens);
  const std::vector<double> b = logit_budget(host, bf16_lora_roundings(host.config));
  const double bound = l2(b) / 3;
  int sure = 0;  // greedy choices before the first one an error within budget could change
  for (int i = 0; i < kSteps; ++i) {
    std::vector<double> effect(b.size());
    for (size_t v = 0; v < b.size(); ++v) effect[v] = double(want.rows[i][v]) - alone.rows[i][v];
    ASSERT_GT(l2(effect), 2.5 * bound) << "step " << i << ": the adapter must move the logits well past the budget";
    const std::vector<float>& r = want.rows[i];
    const size_t top = static_cast<size_t>(want.tokens[i]);
    bool ok = sure == i;
    for (size_t v = 0; v < r.size() && ok; ++v)
      if (v != top && double(r[top]) - r[v] <= b[top] + b[v]) ok = false;
    sure += ok ? 1 : 0;
  }
  std::printf("adapter decode: %d of %d greedy choices sure under the bf16 budget (L2 bound %.3g)\n", sure, kSteps,
              bound);

  SQLRL_REQUIRE_CUDA();
  QwenModel dev_host = host;
  Policy dev = cuda_frozen_policy(dev_host);
  policy_attach_lora(dev, &adapter, /*grads=*/false);
  EXPECT_FALSE(dev.cuda_lora.grads.defined()) << "inference uploads no adapter gradients";
  // eval's path: policy_forward_cached along the CPU's tokens.
  const Decode forced = decode(dev, want.tokens);
  for (int i = 0; i < kSteps; ++i) {
    std::vector<double> err(b.size());
    for (size_t v = 0; v < b.size(); ++v) err[v] = double(forced.rows[i][v]) - want.rows[i][v];
    EXPECT_LE(l2(err), bound) << "step " << i;
  }
  // Free decoding, both entry points: the CPU's tokens up to its first unsure choice.
  const Decode free_run = decode(dev, {});
  CudaKVCache cache = make_cuda_kv_cache(dev.cuda, 16, 4);
  GenerateOptions go;
  go.max_new_tokens = kSteps;
  go.sampling.temperature = 0;
  const std::vector<GeneratedSample> gen = generate_cuda(dev.cuda, cache, kPrompt, 1, go, {}, &dev.cuda_lora);
  ASSERT_EQ(gen.size(), 1u);
  ASSERT_GE(gen[0].tokens.size(), static_cast<size_t>(sure));
  for (int i = 0; i < sure; ++i) {
    EXPECT_EQ(free_run.tokens[i], want.tokens[i]) << "policy decode, step " << i;
    EXPECT_EQ(gen[0].tokens[i], want.tokens[i]) << "generate_cuda, step " << i;
  }
}

}  // namespace
}  // namespace sqlrl::rl::testing

// The weights that travel to rollout ranks (rl/policy.h policy_read_rollout_weights /
// policy_write_rollout_weights, rl/grpo/rollout_ranks.h): one policy's bytes written into another
// policy of the same model make it compute what the first computes, bit for bit, on each backend
// row. A rollout rank samples with the bytes its trainer 0 sends, so a row that reads or writes
// the wrong buffer (the CUDA master instead of the bf16 copy every forward reads, the base
// instead of the adapter), the wrong length, or that reallocates the device buffer (a decode
// graph captured on the old one would read freed memory) breaks the equalities below.
//
// The cpu case runs everywhere (CI); the cuda case needs a device and its expectations are the
// same function's.
#include <gtest/gtest.h>

#include <vector>

#include "rl/policy.h"
#include "rl/policy_backend.h"
#include "tests/rl_cuda/rl_cuda_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

constexpr int64_t kVocab = 512;

std::vector<float> host_logits(const Policy& p, const PolicyLogits& lg) {
  if (policy_device(p) == DeviceType::CPU) return lg.host;
  std::vector<float> out(static_cast<size_t>(lg.cuda.numel()));
  model_copy(out.data(), lg.cuda.data(), lg.cuda.nbytes(), CopyKind::DeviceToHost, p.cuda.stream);
  return out;
}

// A prompt's prefill, then one decode step (on CUDA the captured-graph path), in `kv`; the decode
// step's logits. The sequence is freed after, so `kv` and its graphs are reused across calls.
std::vector<float> decode_logits(const Policy& p, PolicyKV& kv) {
  PolicyLogits lg;
  const int64_t h = kv_new_sequence(kv.book());
  policy_forward_cached(p, kv, {{h, {5, 17, 3, 99, 250, 8}}}, lg);
  policy_forward_cached(p, kv, {{h, {41}}}, lg);
  std::vector<float> out = host_logits(p, lg);
  kv_free(kv.book(), h);
  return out;
}

std::vector<char> read_weights(const Policy& p) {
  std::vector<char> bytes(static_cast<size_t>(policy_rollout_weight_bytes(p)));
  policy_read_rollout_weights(p, bytes.data());
  return bytes;
}

void expect_weights_carry(const PolicyBackend& backend) {
  const int64_t elem = backend.device == DeviceType::CPU ? 4 : 2;  // f32 host parameters, bf16 device copy
  QwenModel ma = bf16_model(kVocab, 1), mb = bf16_model(kVocab, 2);
  Policy trainer = training_policy(backend, ma, {});
  Policy sampler = frozen_policy(backend, mb);
  PolicyKV kv_t = make_policy_kv(trainer, 8, 16), kv_s = make_policy_kv(sampler, 8, 16);
  const std::vector<float> want = decode_logits(trainer, kv_t);
  ASSERT_NE(decode_logits(sampler, kv_s), want) << "two seeds' models agree: the test could not fail";

  ASSERT_EQ(policy_rollout_weight_bytes(trainer), ma.num_params * elem);
  ASSERT_EQ(policy_rollout_weight_bytes(sampler), policy_rollout_weight_bytes(trainer));
  policy_write_rollout_weights(sampler, read_weights(trainer).data());
  EXPECT_EQ(decode_logits(sampler, kv_s), want) << "the sampler does not compute with the weights it was given";

  // A LoRA run: the adapter's bytes alone travel, and the base is left as it is.
  LoraAdapter aa = bf16_adapter(ma.config, 3), ab = bf16_adapter(mb.config, 4);
  policy_attach_lora(trainer, &aa, /*grads=*/false);
  policy_attach_lora(sampler, &ab, /*grads=*/false);
  const std::vector<float> want_lora = decode_logits(trainer, kv_t);
  ASSERT_NE(want_lora, want) << "the adapter changes nothing: the test could not fail";
  ASSERT_NE(decode_logits(sampler, kv_s), want_lora);
  ASSERT_EQ(policy_rollout_weight_bytes(trainer), aa.num_params * elem);
  policy_write_rollout_weights(sampler, read_weights(trainer).data());
  EXPECT_EQ(decode_logits(sampler, kv_s), want_lora) << "the sampler's adapter is not the one it was given";
  policy_attach_lora(sampler, nullptr, false);
  EXPECT_EQ(decode_logits(sampler, kv_s), want) << "the adapter's bytes overwrote the base";
}

TEST(RolloutWeights, OnePolicysBytesMakeAnotherComputeTheSameOnTheCpu) { expect_weights_carry(cpu_backend()); }

TEST(RolloutWeightsCuda, OnePolicysBf16BytesMakeAnotherComputeTheSameThroughItsDecodeGraphs) {
  SQLRL_REQUIRE_CUDA();
  expect_weights_carry(cuda_backend());
}

}  // namespace
}  // namespace sqlrl::rl::testing

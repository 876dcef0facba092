// The decode path of rollouts and eval (rl/policy.h policy_forward_cached + policy_sample) with a
// LoRA adapter on the Policy: the base + adapter, unmerged, decodes what the merged model decodes
// (tests/fixtures/lora: PEFT adapters on the fixture models), and not what the base alone does,
// so an adapter dropped on the way cannot pass.
#include <gtest/gtest.h>

#include "model/lora.h"
#include "rl/policy.h"
#include "tests/model/fixture.h"

namespace sqlrl {
namespace {

struct Decoded {
  std::vector<float> prompt_logits;  // the last prompt position's row
  std::vector<int32_t> tokens;       // greedy continuation
};

// Prefills `prompt`, then decodes n greedy tokens one forward at a time, as the rollout engine does.
Decoded greedy(const rl::Policy& policy, const std::vector<int32_t>& prompt, int n) {
  rl::PolicyKV kv = rl::make_policy_kv(policy, 16, 4);
  rl::PolicyLogits logits;
  const int64_t h = kv_new_sequence(kv.book());
  Decoded d;
  std::vector<int32_t> next = prompt;
  for (int i = 0; i < n; ++i) {
    rl::policy_forward_cached(policy, kv, {{h, next}}, logits);
    if (i == 0) d.prompt_logits = logits.host;
    SamplingRequest greedy_request;
    greedy_request.params.temperature = 0;
    greedy_request.position = prompt.size() + i;
    const int32_t t = rl::policy_sample(policy, logits, {0}, {greedy_request}, policy.config().vocab_size)[0].token;
    d.tokens.push_back(t);
    next = {t};
  }
  return d;
}

class PolicyLora : public ::testing::TestWithParam<const char*> {};

TEST_P(PolicyLora, UnmergedAdapterDecodesAsTheMergedModel) {
  const std::string name = GetParam();
  const QwenModel base = load_model(testing::fixture_path("model/" + name));
  LoraAdapter adapter = load_adapter(testing::fixture_path("lora/" + name), base);  // Policy::lora is mutable (training)
  QwenModel merged = base;
  merge_adapter(merged, adapter);

  const std::vector<int32_t> prompt = {5, 17, 42, 99, 3, 200, 64};
  const int n = 24;
  rl::Policy with = rl::cpu_policy(base);
  with.lora = &adapter;
  const Decoded unmerged = greedy(with, prompt, n);
  const Decoded folded = greedy(rl::cpu_policy(merged), prompt, n);
  const Decoded alone = greedy(rl::cpu_policy(base), prompt, n);

  const double err = testing::scaled_max_error(unmerged.prompt_logits, folded.prompt_logits);
  const double moved = testing::scaled_max_error(alone.prompt_logits, folded.prompt_logits);
  std::printf("%s: unmerged vs merged prompt logits %.3g; base alone vs merged %.3g\n", name.c_str(), err, moved);
  // test_lora.cpp's bound for the cached forward: the same sums in another order.
  EXPECT_LE(err, 1e-5);
  EXPECT_GT(moved, 1e-2) << "the fixture's adapter must move the logits";
  EXPECT_EQ(unmerged.tokens, folded.tokens);
  EXPECT_NE(unmerged.tokens, alone.tokens) << "greedy tokens of the base alone: the adapter changes none";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PolicyLora, ::testing::Values("qwen3_tied", "qwen2_untied"));

}  // namespace
}  // namespace sqlrl

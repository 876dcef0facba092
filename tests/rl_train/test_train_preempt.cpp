// The trainer with a KV cache set by hand (--kv-cache-blocks) a few groups' worth, so that its
// rollouts preempt and recompute samples, trains exactly what it trains with a cache that holds
// everything: the same trajectories.jsonl and the same final weights, bit for bit, with
// batch-invariant rollouts. The sampler's log-probs are the loss's old log-probs here
// (sampler-logprobs), so a single bit of any log-prob that differed would move the weights.
#include <nlohmann/json.hpp>

#include "rl/grpo/train.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/test_util.h"
#include "tests/tfevents_reader.h"

namespace sqlrl::rl::testing {
namespace {

std::vector<nlohmann::json> metrics_lines(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TrainConfig preempt_config(const std::string& out) {
  TrainConfig c = toy_config(out);
  c.max_steps = 2;
  c.max_turn_tokens = 24;
  c.log_trajectories = c.batch_size * c.group_size;  // every trajectory in trajectories.jsonl
  c.sampler_logprobs = true;
  c.batch_invariant = true;
  return c;
}

TEST(TrainPreempt, ATightKvCacheTrainsTheSameBits) {
  TrainConfig roomy = preempt_config(fresh_dir("preempt_roomy"));
  TrainConfig tight = preempt_config(fresh_dir("preempt_tight"));
  // One group at max-total-tokens: the least the trainer takes (the plan refuses fewer).
  tight.kv_cache_blocks = tight.group_size * ((tight.max_total_tokens + 15) / 16);
  for (const TrainConfig* c : {&roomy, &tight}) {
    TrainEnv env = toy_env(*c);
    run_training(env, true);
  }
  using sql::testing::file_bytes;
  EXPECT_EQ(file_bytes(roomy.out + "/trajectories.jsonl"), file_bytes(tight.out + "/trajectories.jsonl"));
  const std::string a = checkpoint_dir(roomy.out, 2), b = checkpoint_dir(tight.out, 2);
  EXPECT_TRUE(file_bytes(a + "/model.safetensors") == file_bytes(b + "/model.safetensors")) << "the weights differ";
  EXPECT_TRUE(file_bytes(a + "/optimizer.safetensors") == file_bytes(b + "/optimizer.safetensors"));
  // The runs trained (else equal weights would prove little).
  EXPECT_GT(metrics_lines(roomy.out)[0]["trained_tokens"].get<int64_t>(), 0);

  const std::vector<nlohmann::json> m = metrics_lines(roomy.out), n = metrics_lines(tight.out);
  ASSERT_EQ(m.size(), 2u);
  ASSERT_EQ(n.size(), 2u);
  int64_t preemptions = 0;
  for (size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    for (const auto* line : {&m[i], &n[i]})
      for (const char* key : {"decode_ms_per_step", "live_mean", "live_max", "kv_peak_fraction", "preemptions"})
        ASSERT_TRUE((*line)["rollout"].contains(key)) << key << " missing: " << (*line)["rollout"].dump();
    EXPECT_EQ(m[i]["rollout"]["preemptions"], 0);
    EXPECT_GT(m[i]["rollout"]["decode_ms_per_step"].get<double>(), 0.0);
    EXPECT_LE(n[i]["rollout"]["kv_peak_fraction"].get<double>(), 1.0);
    EXPECT_GT(n[i]["rollout"]["kv_peak_fraction"].get<double>(), m[i]["rollout"]["kv_peak_fraction"].get<double>());
    EXPECT_GE(n[i]["rollout"]["live_max"].get<double>(), n[i]["rollout"]["live_mean"].get<double>());
    preemptions += n[i]["rollout"]["preemptions"].get<int64_t>();
    // Everything but the schedule's figures and the clock's is the same.
    nlohmann::json x = m[i], y = n[i];
    x.erase("rollout"), x.erase("time"), y.erase("rollout"), y.erase("time");
    EXPECT_EQ(x, y);
  }
  std::printf("tight cache (%lld blocks): %lld preemptions over 2 steps; step 1: %s\n",
              static_cast<long long>(tight.kv_cache_blocks), static_cast<long long>(preemptions),
              n[0]["rollout"].dump().c_str());
  EXPECT_GT(preemptions, 0);
  // TensorBoard gets the same figures.
  const sqlrl::testing::TbContents tb = sqlrl::testing::tb_read_dir(tight.out + "/tb");
  ASSERT_EQ(tb.scalars.count({"rollout/preemptions", 1}), 1u);
  EXPECT_EQ(tb.scalars.at({"rollout/preemptions", 1})[0], n[0]["rollout"]["preemptions"].get<float>());
  EXPECT_EQ(tb.scalars.count({"rollout/live_mean", 2}), 1u);
}

// max-batch-sequences 0 (the default) resolves to a step's samples when the plan's cache holds
// them at the mean length, and to what the cache holds when it is set by hand (whole groups, at
// least one); a value given is kept.
TEST(TrainPreempt, MaxBatchSequencesAutoFollowsTheCache) {
  TrainConfig c = toy_config(fresh_dir("preempt_auto"));  // 4 prompts x G = 8, 64 tokens: 4 blocks each
  auto live = [](const TrainConfig& config) {
    TrainEnv env = toy_env(config);
    const MemoryPlanOptions mo = grpo_memory_plan_options(env);
    return live_samples(env, plan_memory(env.model.config, mo), mo);
  };
  EXPECT_EQ(live(c), 32);
  c.kv_cache_blocks = 40;  // 20 trajectories at the default mean of 32 tokens (2 blocks): 2 groups
  EXPECT_EQ(live(c), 16);
  c.rollout_mean_tokens = 64;  // 10: one group
  EXPECT_EQ(live(c), 8);
  c.kv_cache_blocks = 0;
  c.max_batch_sequences = 12;
  EXPECT_EQ(live(c), 12);
}

}  // namespace
}  // namespace sqlrl::rl::testing

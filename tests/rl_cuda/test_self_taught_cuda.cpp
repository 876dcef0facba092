// MTSQL-R1's self-taught rounds on the CUDA policy (`sft self-taught --device cuda`): rollouts
// and SFT run on the device and the round bookkeeping holds as on the CPU
// (tests/rl_sft/test_sft_self_taught.cpp). The sampled paths may part from the CPU's at bf16
// near-ties, so the counts are held to their invariants, not to the CPU's values; the action
// boosts make an answer (always the right SQL for question 0) likely in each of 4 samples. The
// same run on the CPU (the CPU half, without a device) meets the same invariants first.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "rl/sft/sft_self_taught.h"
#include "tests/rl_rollout/rollout_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

// The round bookkeeping either device must show on this world (device names the run in messages).
void expect_rounds(const std::vector<SelfTaughtRound>& r, const std::string& out, const char* device) {
  ASSERT_FALSE(r.empty()) << device;
  for (const SelfTaughtRound& x : r)
    std::printf("%s round %d: %lld questions, %lld rollouts, %lld correct, %lld solved, %lld kept, coverage %lld/3, "
                "SFT on %lld, loss %.4f -> %.4f\n", device, x.round, (long long)x.questions, (long long)x.rollouts,
                (long long)x.correct, (long long)x.solved, (long long)x.kept, (long long)x.covered,
                (long long)x.sft_sequences, x.sft_first_loss, x.sft_last_loss);
  EXPECT_EQ(r[0].questions, 3) << device;
  EXPECT_EQ(r[0].rollouts, 3 * 4) << device;
  EXPECT_GE(r[0].solved, 1) << device;  // question 0: an answer in any of its 4 samples
  EXPECT_LE(r[0].solved, 2) << device;  // question 1 is never right
  EXPECT_LE(r[0].kept, 2 + 3) << device;
  if (r.size() > 1) {
    EXPECT_EQ(r[1].questions, 3 - r[0].solved) << device;
    EXPECT_EQ(r[1].covered, r[0].covered + r[1].solved) << device;
  }
  // The kept trajectories were trained: a checkpoint, a finite loss.
  ASSERT_GT(r[0].sft_sequences, 0) << device;
  EXPECT_TRUE(std::isfinite(r[0].sft_first_loss) && r[0].sft_first_loss > 0) << device;
  EXPECT_TRUE(std::filesystem::exists(out + "/round-1/metrics.jsonl")) << device;
}

TEST(SelfTaughtCuda, RoundsRollOutAndTrainOnTheDevice) {
  const Tokenizer& tok = tiny_tokenizer();
  const QwenModel start = tiny_model(tok, kMixed, 0, 11, /*head_dim=*/64);
  TagProtocol protocol;
  sql::Pool pool;
  std::vector<sql::Example> examples = city_examples();
  examples[0].gold_sql = "SELECT count(*) FROM city";               // the protocol's answer: EX
  examples[0].difficulty = "easy";
  examples[1].gold_sql = "SELECT name FROM city";                   // never answered right
  examples[1].difficulty = "medium";
  examples[2].gold_sql = "SELECT count(*) FROM city WHERE id > 0";  // same rows (EX)
  examples[2].difficulty = "hard";
  SelfTaughtConfig c;
  c.rounds = 2;
  c.rollout = base_options();
  c.sft.max_steps = 2;
  c.sft.micro_batch_tokens = 1100;
  c.sft.lr = 1e-4f;
  const std::string base = ::testing::TempDir() + "sqlrl_self_taught_cuda_" + std::to_string(::getpid());

  // The CPU half (runs without a device): this model and world meet the expectations the device
  // run is held to (the action boosts make question 0's answer likely in 4 samples).
  {
    QwenModel cpu = start;
    const std::string out = base + "_cpu";
    std::vector<SelfTaughtRound> r = self_taught(cpu, tok, protocol, pool, examples, c, SelfTaughtOptions{out, "", {}});
    expect_rounds(r, out, "cpu");
    EXPECT_NE(cpu.params, start.params) << "the model did not receive the trained weights";
    std::filesystem::remove_all(out);
  }

  SQLRL_REQUIRE_CUDA();
  QwenModel model = start;
  SelfTaughtOptions o{base, "", {}};
  o.device = DeviceType::CUDA;
  std::vector<SelfTaughtRound> r = self_taught(model, tok, protocol, pool, examples, c, o);
  expect_rounds(r, base, "cuda");
  EXPECT_NE(model.params, start.params) << "the model did not receive the trained weights";
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace sqlrl::rl::testing

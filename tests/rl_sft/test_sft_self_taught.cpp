// Self-taught warm start: the difficulty-aware selection on hand-made trajectories, and rounds
// of rollout -> EX/EM filter -> selection -> SFT -> drop solved on the rollout tests' tiny world
// (its tag protocol always answers "SELECT count(*) FROM city").
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "rl/sft/sft_self_taught.h"
#include "tests/rl_rollout/rollout_fixture.h"

namespace sqlrl::rl {
namespace {

Trajectory traj(int turns, int tokens, const std::string& first_sql) {
  Trajectory t;
  t.tokens.assign(static_cast<size_t>(tokens), 1);
  t.policy_mask.assign(static_cast<size_t>(tokens), 1);
  for (int k = 0; k < turns; ++k) {
    TurnRecord r;
    r.action.kind = k + 1 == turns ? ActionKind::Answer : ActionKind::ExecSql;
    r.action.sql = k == 0 ? first_sql : "SELECT " + std::to_string(k);
    t.turns.push_back(r);
  }
  t.answered = true;
  return t;
}

TEST(SelfTaughtSelection, ShortForEasyOrSolvedLongAndDistinctForHard) {
  // 0: 3 turns, 1: 1 turn, 2: 2 turns (40 tokens), 3: 2 turns (30 tokens), 4: same actions as 0, 5: 4 turns
  std::vector<Trajectory> t = {traj(3, 50, "a"), traj(1, 20, "b"), traj(2, 40, "c"), traj(2, 30, "d"),
                               traj(3, 60, "a"), traj(4, 80, "e")};
  SelfTaughtConfig c;  // easy_keep 2, hard_keep 3
  ItemRollouts easy{{0, 1, 2, 3, 4, 5}, 10, true};
  EXPECT_EQ(select_for_item(t, easy, c), (std::vector<int64_t>{1, 3}));  // fewest turns, then fewest tokens
  ItemRollouts solved{{0, 1, 2, 3, 4, 5}, 6, false};                      // all 6 samples correct
  EXPECT_EQ(select_for_item(t, solved, c), (std::vector<int64_t>{1, 3}));
  ItemRollouts hard{{0, 1, 2, 3, 4, 5}, 10, false};
  // Longest first with >= 2 turns: 5 (4 turns), 4 (3 turns, 60 tokens), then 0 repeats 4's
  // actions and is passed over, 2 (2 turns, 40 tokens).
  EXPECT_EQ(select_for_item(t, hard, c), (std::vector<int64_t>{5, 4, 2}));
  ItemRollouts hard_single{{1}, 10, false};  // only a one-turn trajectory: kept rather than none
  EXPECT_EQ(select_for_item(t, hard_single, c), (std::vector<int64_t>{1}));
  EXPECT_TRUE(select_for_item(t, ItemRollouts{{}, 10, false}, c).empty());
}

TEST(SelfTaughtSelection, TrajectoryEndsWithATrainedImEnd) {
  Trajectory t = traj(1, 4, "a");
  t.policy_mask = {0, 0, 1, 1};
  SftSequence s = trajectory_sequence(t, 7, "x");
  EXPECT_EQ(s.tokens, (std::vector<int32_t>{1, 1, 1, 1, 7}));
  EXPECT_EQ(s.mask, (std::vector<uint8_t>{0, 0, 1, 1, 1}));
  t.tokens.back() = 7;  // stopped on <|im_end|> already: nothing added
  EXPECT_EQ(trajectory_sequence(t, 7, "x").tokens.size(), 4u);
}

std::vector<SelfTaughtRound> run_rounds(bool require_em, const std::string& out_dir = "",
                                        LoraAdapter* adapter = nullptr, std::vector<float>* base_after = nullptr) {
  testing::World w(testing::kMixed);
  w.examples[0].gold_sql = "SELECT count(*) FROM city";               // the protocol's answer: EX and EM
  w.examples[0].difficulty = "easy";
  w.examples[1].gold_sql = "SELECT name FROM city";                   // never answered right
  w.examples[1].difficulty = "medium";
  w.examples[2].gold_sql = "SELECT count(*) FROM city WHERE id > 0";  // same rows (EX), another query (not EM)
  w.examples[2].difficulty = "hard";
  SelfTaughtConfig c;
  c.rounds = 2;
  c.require_em = require_em;
  c.rollout = testing::base_options();
  c.sft.max_steps = 2;
  c.sft.micro_batch_tokens = 1100;
  c.sft.lr = 1e-4f;
  SelfTaughtOptions o{out_dir, "", {}};
  if (adapter) *adapter = init_adapter(adapter->config, w.model.config, 9);
  o.adapter = adapter;
  std::vector<SelfTaughtRound> rounds = self_taught(w.model, w.tok, w.protocol, w.pool, w.examples, c, o);
  if (base_after) *base_after = w.model.params;
  return rounds;
}

// With a LoRA adapter the rounds roll out base + adapter and train the adapter alone: the base's
// bytes are those of a fresh fixture model, the adapter moved, and the run sees the same
// questions solved in round 1 as the full run (a fresh adapter is the base exactly).
TEST(SelfTaught, LoraRoundsTrainTheAdapterAlone) {
  const std::string out = ::testing::TempDir() + "sqlrl_self_taught_lora_" + std::to_string(::getpid());
  LoraAdapter adapter;
  adapter.config.rank = 4;
  adapter.config.alpha = 8;
  adapter.config.target_pattern = "all-linear";
  std::vector<float> base_after;
  const std::vector<SelfTaughtRound> r = run_rounds(false, out, &adapter, &base_after);
  const std::vector<SelfTaughtRound> full = run_rounds(false);
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r[0].solved, full[0].solved);
  ASSERT_GT(r[0].sft_sequences, 0) << "no SFT ran: the test would show nothing";
  EXPECT_TRUE(base_after == testing::World(testing::kMixed).model.params) << "self-taught LoRA changed the base";
  const LoraAdapter fresh = init_adapter(adapter.config, testing::World(testing::kMixed).model.config, 9);
  EXPECT_FALSE(adapter.params == fresh.params) << "the rounds' SFT left the adapter as it was";
  EXPECT_TRUE(std::filesystem::exists(out + "/round-1/checkpoints/step-2/adapter_model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(out + "/round-1/checkpoints/step-2/model.safetensors"));
  std::filesystem::remove_all(out);
}

TEST(SelfTaught, RoundsDropSolvedQuestionsAndReportCoverage) {
  for (bool em : {false, true}) {
    SCOPED_TRACE(em ? "EX and EM" : "EX");
    const std::string out = ::testing::TempDir() + "sqlrl_self_taught_" + std::to_string(::getpid()) + (em ? "_em" : "");
    std::vector<SelfTaughtRound> r = run_rounds(em, out);
    ASSERT_FALSE(r.empty());
    for (const SelfTaughtRound& x : r)
      std::printf("%s round %d: %lld questions, %lld rollouts, %lld correct, %lld solved, %lld kept, coverage %lld/3, "
                  "SFT on %lld\n", em ? "EX+EM" : "EX", x.round, (long long)x.questions, (long long)x.rollouts,
                  (long long)x.correct, (long long)x.solved, (long long)x.kept, (long long)x.covered,
                  (long long)x.sft_sequences);
    EXPECT_EQ(r[0].questions, 3);
    EXPECT_EQ(r[0].rollouts, 3 * 4);
    // Question 1 is never right; question 2 only counts without EM.
    const int64_t solvable = em ? 1 : 2;
    EXPECT_LE(r[0].solved, solvable);
    for (const SelfTaughtRound& x : r) EXPECT_LE(x.covered, solvable);
    if (r.size() > 1) {
      EXPECT_EQ(r[1].questions, 3 - r[0].solved);
      EXPECT_EQ(r[1].rollouts, r[1].questions * 4);
      EXPECT_EQ(r[1].covered, r[0].covered + r[1].solved);
      EXPECT_GE(r[1].sft_sequences, r[0].sft_sequences);
    }
    // Kept: at most easy_keep for the easy question, hard_keep for the hard one.
    EXPECT_LE(r[0].kept, em ? 2 : 2 + 3);
    EXPECT_NEAR(r.back().coverage, static_cast<double>(r.back().covered) / 3.0, 1e-12);
    // With the fixture's seed the first round already solves every solvable question.
    EXPECT_EQ(r[0].solved, solvable);
    // round-1/kept.jsonl holds T as {tokens, mask} lines that load back as SFT data.
    std::vector<SftSequence> kept = load_sft_jsonl(out + "/round-1/kept.jsonl", testing::tiny_tokenizer(), ChatOptions{});
    EXPECT_EQ(static_cast<int64_t>(kept.size()), r[0].kept);
    EXPECT_TRUE(std::filesystem::exists(out + "/round-1/metrics.jsonl"));
    std::filesystem::remove_all(out);
  }
}

}  // namespace
}  // namespace sqlrl::rl

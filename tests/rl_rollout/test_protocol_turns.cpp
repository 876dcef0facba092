// What the rollout does for the protocols' paper details (rl/agent/protocol.h steps 4-6): a
// forced last turn (SQL-Trail Algorithm 1 line 31), a segment that appends nothing (its line
// 10 </reasoning> stop), text written into the model's own stream (MTIR-SQL Algorithm 1 line
// 20), and the fallback answer of an unanswered episode (MTSQL-R1's released extract_code).
// The test protocols are rollout_fixture.h's tag protocol with one detail each; a model that
// calls SQL at every turn and never answers drives them.
#include <gtest/gtest.h>

#include <cmath>

#include "model/train.h"
#include "rl/agent/untrusted.h"
#include "tests/rl_rollout/rollout_fixture.h"

namespace sqlrl::rl {
namespace {

using testing::base_options;
using testing::Boosts;
using testing::kAnswerStop;
using testing::kExecStop;
using testing::TagProtocol;
using testing::World;

// </tool_call> ends a turn within a few tokens; the answer token and <|im_end|> are pushed down.
constexpr Boosts kNeverAnswers{0.5f, -3.0f, -3.0f};
constexpr const char* kHead = "FINAL ";

// The last turn starts with kHead, ends only at the answer token, and is an answer when it
// starts so.
struct ForcedTags : TagProtocol {
  std::string head = kHead;
  std::string final_turn_prefix() const override { return head; }
  std::vector<std::string> final_turn_stops() const override { return {kAnswerStop}; }
  Action parse(std::string_view text) const override {
    if (!head.empty() && text.substr(0, head.size()) == head) {
      Action a;
      a.kind = ActionKind::Answer;
      a.sql = "SELECT count(*) FROM city";
      return a;
    }
    return TagProtocol::parse(text);
  }
};

// The log-probs recorded through the paged cache equal a training forward over the final
// sequences (as Rollout.SampledLogprobsEqualAFullForward, whose 1e-4 budget this reuses: f32
// forwards of different shapes, |logprob| up to ~10).
double worst_cached_vs_full(const QwenModel& model, const std::vector<Trajectory>& out) {
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int32_t> targets;
  for (const Trajectory& t : out) {
    seqs.push_back(t.tokens);
    for (size_t i = 1; i < t.tokens.size(); ++i) targets.push_back(t.tokens[i]);
    targets.push_back(0);
  }
  PackedBatch batch = pack_sequences(seqs);
  TrainState state = make_train_state(model.config, sqlrl::TrainOptions{batch.num_tokens(), 128, {}});
  std::vector<float> lp(static_cast<size_t>(batch.num_tokens()));
  forward_logprobs(model, state, batch, targets, lp.data());
  double worst = 0;
  for (size_t s = 0; s < out.size(); ++s)
    for (size_t i = 1; i < out[s].tokens.size(); ++i)
      if (out[s].policy_mask[i])
        worst = std::max(worst, double(std::fabs(lp[batch.cu_seqlens[s] + i - 1] - out[s].sampler_logprobs[i])));
  return worst;
}

TEST(ProtocolTurns, ForcedLastTurnStartsWithTheProtocolsHead) {
  World w(kNeverAnswers);
  RolloutOptions o = base_options();
  o.sampling = {1.0f, 0, 1.0f, 5};
  ForcedTags forced;
  forced.turns = 3;
  auto requests = testing::make_requests(forced, w.tok, w.pool, w.examples, o);
  std::vector<Trajectory> out = rollout(w.model, w.tok, forced, w.pool, requests, o);
  const std::vector<int32_t> head = encode_marked(w.tok, kHead);
  int64_t forced_turns = 0, went_past_exec_stop = 0;
  for (const Trajectory& t : out) {
    if (t.truncated) continue;
    ASSERT_EQ(t.turns.size(), 3u);
    EXPECT_TRUE(t.answered);
    EXPECT_FALSE(t.out_of_turns);
    const TurnRecord& last = t.turns.back();
    ASSERT_EQ(last.assistant_text.substr(0, std::string(kHead).size()), kHead);
    EXPECT_EQ(t.turns[1].observation.find(kHead), std::string::npos) << "the head is the turn's, not the observation's";
    // The head's tokens sit right before the last turn's first sampled token, not trained on.
    size_t first = t.tokens.size();
    for (size_t i = t.tokens.size(); i-- > static_cast<size_t>(t.prompt_length);)
      if (t.policy_mask[i] && !t.policy_mask[i - 1]) {
        first = i;
        break;
      }
    ASSERT_GE(first, head.size());
    for (size_t j = 0; j < head.size(); ++j) {
      EXPECT_EQ(t.tokens[first - head.size() + j], head[j]);
      EXPECT_EQ(t.policy_mask[first - head.size() + j], 0);
    }
    ++forced_turns;
    // Only the final stops end it: a </tool_call> inside does not.
    went_past_exec_stop += last.assistant_text.find(kExecStop) + std::string(kExecStop).size() < last.assistant_text.size();
  }
  EXPECT_GT(forced_turns, 0);
  EXPECT_GT(went_past_exec_stop, 0);
  EXPECT_LE(worst_cached_vs_full(w.model, out), 1e-4);

  // Without a head (SQL-Trail's sqltrail-final-solution=false) the same model runs out of turns.
  forced.head = "";
  out = rollout(w.model, w.tok, forced, w.pool, requests, o);
  for (const Trajectory& t : out) {
    EXPECT_FALSE(t.answered);
    if (!t.truncated) {
      EXPECT_TRUE(t.out_of_turns);
    }
  }
}

// A turn without an action is a Reasoning segment that appends nothing: the next turn's tokens
// follow the sampled ones directly, and it is no invalid action.
struct ReasoningTags : TagProtocol {
  Action parse(std::string_view text) const override {
    Action a = TagProtocol::parse(text);
    if (a.kind == ActionKind::Invalid) a.kind = ActionKind::Reasoning;
    return a;
  }
  std::string inject(const Action& a, const StepOutcome& o, const sql::Example& e) const override {
    return a.kind == ActionKind::Reasoning ? "" : TagProtocol::inject(a, o, e);
  }
};

TEST(ProtocolTurns, ReasoningSegmentAppendsNothing) {
  World w(Boosts{0.05f, 0.05f, -3.0f});  // turns often end at the token cap with no action
  RolloutOptions o = base_options();
  o.sampling = {1.0f, 0, 1.0f, 7};  // temperature 1: the recorded log-probs are the model's
  o.max_turn_tokens = 6;
  ReasoningTags p;
  auto requests = testing::make_requests(p, w.tok, w.pool, w.examples, o);
  std::vector<Trajectory> out = rollout(w.model, w.tok, p, w.pool, requests, o);
  int64_t segments = 0;
  for (const Trajectory& t : out) {
    EXPECT_EQ(t.invalid_actions, 0);
    for (size_t k = 0; k < t.turns.size(); ++k) {
      const TurnRecord& turn = t.turns[k];
      if (turn.action.kind != ActionKind::Reasoning || k + 1 == t.turns.size()) continue;
      EXPECT_EQ(turn.observation, "");
      ++segments;
    }
    // Every mask-0 token after the prompt is some turn's observation: none for the segments.
    int64_t injected = 0, observed = 0;
    for (size_t i = static_cast<size_t>(t.prompt_length); i < t.tokens.size(); ++i) injected += !t.policy_mask[i];
    for (const TurnRecord& turn : t.turns) observed += static_cast<int64_t>(encode_marked(w.tok, turn.observation).size());
    EXPECT_EQ(injected, observed);
  }
  EXPECT_GT(segments, 0);
  EXPECT_LE(worst_cached_vs_full(w.model, out), 1e-4);
}

// An unanswered episode is scored on the protocol's fallback: the last executed SQL here.
struct FallbackTags : TagProtocol {
  std::string fallback_answer(const Trajectory& t) const override {
    for (auto it = t.turns.rbegin(); it != t.turns.rend(); ++it)
      if (it->action.kind == ActionKind::ExecSql) return it->action.sql;
    return {};
  }
};

TEST(ProtocolTurns, UnansweredEpisodeTakesTheFallback) {
  World w(kNeverAnswers);
  RolloutOptions o = base_options();
  FallbackTags p;
  p.turns = 2;
  auto requests = testing::make_requests(p, w.tok, w.pool, w.examples, o);
  int64_t fallbacks = 0;
  for (const Trajectory& t : rollout(w.model, w.tok, p, w.pool, requests, o)) {
    EXPECT_FALSE(t.answered);
    if (t.answer_fallback) {
      ++fallbacks;
      EXPECT_EQ(t.final_sql, p.fallback_answer(t));
      EXPECT_FALSE(t.final_sql.empty());
    }
  }
  EXPECT_GT(fallbacks, 0);
  // The plain protocol has none: nothing to score.
  for (const Trajectory& t : rollout(w.model, w.tok, w.protocol, w.pool, requests, o)) {
    EXPECT_FALSE(t.answer_fallback);
    EXPECT_EQ(t.final_sql, "");
  }
}

// MTIR-SQL's rethink line goes into the model's own stream (no user turn), masked out.
TEST(ProtocolTurns, MtirRethinkIsInTheAssistantsStream) {
  World w(Boosts{0.3f, -3.0f, 0.2f});  // "</tool_call>" with no opener, or <|im_end|>: invalid turns
  RolloutOptions o = base_options();
  o.group_size = 2;
  o.max_turns = 3;
  o.max_total_tokens = 4096;
  std::unique_ptr<Protocol> mtir = make_protocol("mtir");
  std::vector<sql::Example> one(w.examples.begin(), w.examples.begin() + 1);
  auto requests = testing::make_requests(*mtir, w.tok, w.pool, one, o);
  int64_t rethinks = 0;
  const std::string line = "My action is not correct. Let me rethink.";
  for (const Trajectory& t : rollout(w.model, w.tok, *mtir, w.pool, requests, o)) {
    for (const TurnRecord& turn : t.turns) {
      if (turn.action.kind != ActionKind::Invalid || turn.observation.empty()) continue;
      ++rethinks;
      // After a turn closed with <|im_end|> the next assistant message opens with the line.
      EXPECT_TRUE(turn.observation == line || turn.observation == "\n<|im_start|>assistant\n" + line) << turn.observation;
      EXPECT_EQ(turn.observation.find("user"), std::string::npos);
    }
  }
  EXPECT_GT(rethinks, 0);
}

}  // namespace
}  // namespace sqlrl::rl

// How trajectories end: the token cap and the model's context (truncated), the turn budget
// (out_of_turns), the protocol ending on an invalid turn, max_turn_tokens, single-turn eval; and
// the checks on options, vocabularies and schedules.
#include <gtest/gtest.h>

#include "rollout_fixture.h"

namespace sqlrl::rl {
namespace {

using testing::base_options;
using testing::Boosts;
using testing::kMixed;
using testing::sampled_runs;
using testing::World;

int64_t longest_prompt(const std::vector<RolloutRequest>& requests) {
  int64_t n = 0;
  for (const auto& r : requests) n = std::max<int64_t>(n, static_cast<int64_t>(r.prompt_tokens.size()));
  return n;
}

struct CapCounts {
  int64_t truncated = 0, mid_turn = 0;
};

CapCounts check_capped(const std::vector<Trajectory>& out, int64_t cap) {
  CapCounts n;
  for (const Trajectory& t : out) {
    EXPECT_LE(static_cast<int64_t>(t.tokens.size()), cap);
    EXPECT_EQ(int(t.answered) + int(t.out_of_turns) + int(t.truncated), 1);
    if (!t.truncated) continue;
    ++n.truncated;
    EXPECT_FALSE(t.turns.empty());
    if (t.turns.empty()) continue;
    EXPECT_EQ(t.turns.back().observation, "") << "nothing is injected after the last turn";
    EXPECT_EQ(t.policy_mask.back(), 1);
    if (t.turns.back().action.error.rfind("truncated at ", 0) == 0) {
      ++n.mid_turn;
      EXPECT_EQ(static_cast<int64_t>(t.tokens.size()), cap);
    }
  }
  return n;
}

TEST(RolloutLimits, TokenCapAndModelContextTruncate) {
  World w(kMixed);
  RolloutOptions o = base_options();
  o.group_size = 8;
  auto requests = w.requests(o);
  const int64_t cap = longest_prompt(requests) + 24;
  o.max_total_tokens = cap;
  auto out = rollout(w.model, w.tok, w.protocol, w.pool, requests, o);
  EXPECT_GT(check_capped(out, cap).truncated, 0) << "observations that do not fit";
  // With no action token favoured, turns run into the cap (max_turn_tokens 40 > 24).
  World plain(Boosts{});
  auto cut = rollout(plain.model, plain.tok, plain.protocol, plain.pool, requests, o);
  EXPECT_GT(check_capped(cut, cap).mid_turn, 0);
  // The model's context caps the same way, whichever is smaller.
  QwenModel short_context = w.model;
  short_context.config.max_position_embeddings = cap;
  o.max_total_tokens = 4096;
  auto by_context = rollout(short_context, w.tok, w.protocol, w.pool, requests, o);
  for (size_t k = 0; k < out.size(); ++k) {
    EXPECT_EQ(by_context[k].tokens, out[k].tokens);
    EXPECT_EQ(by_context[k].truncated, out[k].truncated);
  }
  // A prompt that fills the cap gets no sampled token at all.
  o.max_total_tokens = static_cast<int64_t>(requests[0].prompt_tokens.size());
  auto none = rollout(w.model, w.tok, w.protocol, w.pool, {requests[0]}, o);
  for (const Trajectory& t : none) {
    EXPECT_TRUE(t.truncated);
    EXPECT_EQ(t.tokens, requests[0].prompt_tokens);
    EXPECT_TRUE(t.turns.empty());
  }
}

// options.max_turns overrides the protocol's budget; the last allowed turn's SQL is not run and
// nothing is injected after it.
TEST(RolloutLimits, TurnBudgetEndsOutOfTurns) {
  World w(Boosts{0.5f, 0.0f, 0.0f});
  RolloutOptions o = base_options();
  o.max_turns = 2;
  auto out = rollout(w.model, w.tok, w.protocol, w.pool, w.requests(o), o);
  int64_t out_of_turns = 0;
  for (const Trajectory& t : out) {
    EXPECT_EQ(int(t.answered) + int(t.out_of_turns) + int(t.truncated), 1);
    if (!t.out_of_turns) continue;
    ++out_of_turns;
    ASSERT_EQ(t.turns.size(), 2u);
    EXPECT_NE(t.turns[0].observation.find("turns left: 1"), std::string::npos) << t.turns[0].observation;
    EXPECT_EQ(t.turns[1].observation, "");
    EXPECT_FALSE(t.turns[1].executed);
    EXPECT_EQ(t.policy_mask.back(), 1);
  }
  EXPECT_GT(out_of_turns, 0);
}

TEST(RolloutLimits, ProtocolMayEndOnAnInvalidTurn) {
  World w(Boosts{0.0f, 0.0f, 0.6f});  // <|im_end|> comes quickly: turns without an action
  w.protocol.invalid_ends = true;
  RolloutOptions o = base_options();
  auto out = rollout(w.model, w.tok, w.protocol, w.pool, w.requests(o), o);
  int64_t ended_by_protocol = 0;
  for (const Trajectory& t : out) {
    if (t.answered || t.truncated || t.out_of_turns) continue;
    ++ended_by_protocol;
    ASSERT_FALSE(t.turns.empty());
    EXPECT_EQ(t.turns.back().action.kind, ActionKind::Invalid);
    EXPECT_EQ(t.invalid_actions, 1) << "the first invalid turn ends it";
    EXPECT_EQ(t.turns.back().observation, "");
  }
  EXPECT_GT(ended_by_protocol, 0);
}

TEST(RolloutLimits, MaxTurnTokensEndsATurn) {
  World w(Boosts{0.0f, 0.0f, 0.0f});
  RolloutOptions o = base_options();
  o.max_turn_tokens = 5;
  o.max_turns = 3;
  auto out = rollout(w.model, w.tok, w.protocol, w.pool, w.requests(o), o);
  int64_t full_turns = 0;
  for (const Trajectory& t : out) {
    auto runs = sampled_runs(t);
    EXPECT_EQ(runs.size(), t.turns.size());
    for (const auto& run : runs) {
      EXPECT_LE(run.size(), 5u);
      full_turns += run.size() == 5;
    }
  }
  EXPECT_GT(full_turns, 0);
}

// Eval mode: the first SQL-bearing turn is the answer; nothing reaches the database, not even
// a memory retrieval (its observation is written without results).
TEST(RolloutLimits, SingleTurnAnswersWithTheFirstSqlWithoutRunningIt) {
  World w(Boosts{kMixed.exec, kMixed.answer, kMixed.eos, 0.3f});
  RolloutOptions o = base_options();
  o.single_turn = true;
  auto requests = w.requests(o);  // reads the schema through the pool
  size_t before = w.pool.stats().executions;
  RolloutStats stats;
  auto out = rollout(w.model, w.tok, w.protocol, w.pool, requests, o, &stats);
  EXPECT_EQ(stats.sql_calls, 0);
  EXPECT_EQ(w.pool.stats().executions, before);
  int64_t from_exec = 0, memory = 0;
  for (const Trajectory& t : out) {
    for (size_t i = 0; i + 1 < t.turns.size(); ++i) {
      ActionKind kind = t.turns[i].action.kind;
      EXPECT_TRUE(kind == ActionKind::Invalid || kind == ActionKind::MemoryRetrieve) << action_kind_name(kind);
      memory += kind == ActionKind::MemoryRetrieve;
    }
    for (const TurnRecord& turn : t.turns) EXPECT_FALSE(turn.executed);
    if (!t.answered) continue;
    ActionKind last = t.turns.back().action.kind;
    EXPECT_TRUE(last == ActionKind::ExecSql || last == ActionKind::Answer);
    EXPECT_EQ(t.final_sql, t.turns.back().action.sql);
    from_exec += last == ActionKind::ExecSql;
  }
  EXPECT_GT(from_exec, 0);
  EXPECT_GT(memory, 0);
}

// Taking SQL results later or at once (or as soon as ready) changes only the schedule.
TEST(RolloutLimits, SqlWaitStepsChangeOnlyTheSchedule) {
  World w(kMixed);
  RolloutOptions o = base_options();
  auto requests = w.requests(o);
  auto a = rollout(w.model, w.tok, w.protocol, w.pool, requests, o);
  for (int64_t wait : {0, 5}) {
    o.sql_wait_steps = wait;
    auto b = rollout(w.model, w.tok, w.protocol, w.pool, requests, o);
    for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k].tokens, b[k].tokens) << "wait " << wait << " trajectory " << k;
  }
}

// What the protocol is told: a memory retrieval runs its SQL and the dialogue's gold SQL (the
// results in order), a turn closed by <|im_end|> is flagged, and enable_thinking = false asks
// for the empty think block after each new generation prompt.
TEST(RolloutLimits, ProtocolSeesMemoryResultsAndHowTheTurnEnded) {
  World w(Boosts{0.0f, 0.1f, 0.3f, 0.4f});
  for (sql::Example& ex : w.examples)
    ex.history = {{"all cities", "SELECT * FROM city"}, {"the first", "SELECT name FROM city WHERE id = 1"}};
  RolloutOptions o = base_options();
  o.enable_thinking = false;
  auto out = rollout(w.model, w.tok, w.protocol, w.pool, w.requests(o), o);
  int64_t memory = 0, after_eos = 0;
  for (const Trajectory& t : out)
    for (const TurnRecord& turn : t.turns) {
      if (turn.observation.empty()) continue;
      const std::string think = "<think>\n\n</think>\n\n";
      EXPECT_EQ(turn.observation.substr(turn.observation.size() - think.size()), think);
      const std::string& text = turn.assistant_text;
      auto ends_with = [&](const std::string& end) {
        return text.size() >= end.size() && text.substr(text.size() - end.size()) == end;
      };
      bool eos = ends_with("<|im_end|>") || ends_with("<|endoftext|>");
      EXPECT_EQ(turn.observation.rfind(eos ? "\n<|im_start|>user\n" : "<|im_end|>\n<|im_start|>user\n", 0), 0u)
          << turn.observation;
      after_eos += eos;
      if (turn.action.kind != ActionKind::MemoryRetrieve) continue;
      ++memory;
      EXPECT_TRUE(turn.executed);
      EXPECT_NE(turn.observation.find("memory: 3 rows; 1 rows;"), std::string::npos) << turn.observation;
    }
  EXPECT_GT(memory, 0);
  EXPECT_GT(after_eos, 0);
}

// A cache byte budget below the default size keeps fewer groups live, nothing else.
TEST(RolloutLimits, CacheByteBudgetOnlyLimitsLiveSamples) {
  World w(kMixed);
  RolloutOptions o = base_options();
  auto requests = w.requests(o);
  RolloutStats full_stats, small_stats;
  auto a = rollout(w.model, w.tok, w.protocol, w.pool, requests, o, &full_stats);
  o.kv_cache_max_bytes = 1;
  auto b = rollout(w.model, w.tok, w.protocol, w.pool, requests, o, &small_stats);
  const int64_t per_sample = (o.max_total_tokens + o.kv_block_size - 1) / o.kv_block_size;
  EXPECT_EQ(full_stats.kv_blocks, 12 * per_sample) << "3 requests x G = 4 at the full length";
  EXPECT_EQ(small_stats.kv_blocks, 4 * per_sample) << "one group";
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k].tokens, b[k].tokens) << "trajectory " << k;
}

TEST(RolloutLimits, PaddedVocabularyNeverSamplesUndecodableIds) {
  const Tokenizer& tok = testing::tiny_tokenizer();
  World w(kMixed, static_cast<int64_t>(tok.size()) + 64);
  RolloutOptions o = base_options();
  auto out = rollout(w.model, w.tok, w.protocol, w.pool, w.requests(o), o);
  int64_t sampled = 0;
  for (const Trajectory& t : out)
    for (size_t i = 0; i < t.tokens.size(); ++i) {
      EXPECT_LT(t.tokens[i], static_cast<int32_t>(tok.size()));
      sampled += t.policy_mask[i];
    }
  EXPECT_GT(sampled, 100);
}

TEST(RolloutLimits, BadInputsAreErrorsNamingTheNumbers) {
  const Tokenizer& tok = testing::tiny_tokenizer();
  World small(kMixed, static_cast<int64_t>(tok.size()) - 1);
  RolloutOptions o = base_options();
  auto expect_error = [](auto&& run, const std::string& part) {
    try {
      run();
      ADD_FAILURE() << "no error; expected one containing: " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  auto requests = small.requests(o);
  expect_error([&] { rollout(small.model, small.tok, small.protocol, small.pool, requests, o); },
               "the tokenizer has " + std::to_string(tok.size()) + " ids but the model's vocabulary only " +
                   std::to_string(tok.size() - 1));
  World w(kMixed);
  requests = w.requests(o);
  RolloutOptions tight = o;
  tight.kv_cache_blocks = 10;
  expect_error([&] { rollout(w.model, w.tok, w.protocol, w.pool, requests, tight); },
               "kv_cache_blocks = 10 cannot hold one group of 4");
  RolloutOptions empty = o;
  empty.group_size = 0;
  expect_error([&] { rollout(w.model, w.tok, w.protocol, w.pool, requests, empty); },
               "group_size must be positive, got 0");
  requests[1].prompt_tokens.push_back(static_cast<int32_t>(w.model.config.vocab_size));
  expect_error([&] { rollout(w.model, w.tok, w.protocol, w.pool, requests, o); }, "request 1 has token id");
}

}  // namespace
}  // namespace sqlrl::rl

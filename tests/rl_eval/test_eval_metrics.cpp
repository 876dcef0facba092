// The evaluation's pure parts: pass@k against a direct combinatorial count, majority-vote
// tie-breaking on hand-made results, the choice of a prediction per mode, and the breakdowns.
#include <gtest/gtest.h>

#include <cmath>

#include "rl/eval/eval.h"
#include "runtime/error.h"
#include "sql/exec/compare.h"

namespace sqlrl::rl {
namespace {

// C(n, k) by the multiplicative formula in float64: exact while the values stay below 2^53,
// which holds for every n <= 40 used here (C(40, 20) ~ 1.4e11).
double binomial(int64_t n, int64_t k) {
  if (k < 0 || k > n) return 0;
  double r = 1;
  for (int64_t i = 1; i <= k; ++i) r = r * static_cast<double>(n - k + i) / static_cast<double>(i);
  return r;
}

TEST(PassAtK, MatchesTheDirectCombinatorialCount) {
  for (int64_t n : {1, 2, 3, 5, 8, 13, 20, 40})
    for (int64_t c = 0; c <= n; ++c)
      for (int64_t k = 1; k <= n; ++k) {
        double direct = 1.0 - binomial(n - c, k) / binomial(n, k);
        // The product form rounds once per factor (at most n = 40 factors in (0, 1]) and the
        // direct form once per step of each binomial: both within ~1e-14 of the exact value.
        EXPECT_NEAR(pass_at_k(n, c, k), direct, 1e-12) << "n=" << n << " c=" << c << " k=" << k;
      }
}

TEST(PassAtK, EdgeCasesAreExact) {
  for (int64_t n : {1, 4, 8, 100}) {
    EXPECT_EQ(pass_at_k(n, 0, 1), 0.0);  // no right sample: never
    EXPECT_EQ(pass_at_k(n, 0, n), 0.0);
    EXPECT_EQ(pass_at_k(n, n, 1), 1.0);  // every sample right: always
    EXPECT_EQ(pass_at_k(n, 1, n), 1.0);  // n = k: any right sample is drawn
    EXPECT_EQ(pass_at_k(n, n, n), 1.0);
  }
  EXPECT_DOUBLE_EQ(pass_at_k(8, 3, 1), 3.0 / 8.0);  // pass@1 is the share of right samples
  // Large n with no overflow: C(1000-10, 100)/C(1000, 100) = prod (1 - 100/i), i = 991..1000.
  double expect = 1.0;
  for (int i = 991; i <= 1000; ++i) expect *= 1.0 - 100.0 / i;
  EXPECT_DOUBLE_EQ(pass_at_k(1000, 10, 100), 1.0 - expect);
  EXPECT_THROW(pass_at_k(4, 1, 5), Error);
  EXPECT_THROW(pass_at_k(4, 5, 1), Error);
  EXPECT_THROW(pass_at_k(4, 1, 0), Error);
}

sql::Result rows_of(std::vector<std::vector<sql::Cell>> rows) {
  sql::Result r;
  r.columns = {"a"};
  for (auto& row : rows) r.rows.push_back(std::move(row));
  return r;
}

sql::Result error_result() {
  sql::Result r;
  r.error = "no such column: x";
  return r;
}

uint64_t h(const sql::Result& r) { return sql::result_hash(r, false); }

TEST(MajorityVote, GroupsByResultAndBreaksTiesByEarliestSample) {
  using sql::Cell;
  const sql::Result a = rows_of({{Cell::of_integer(1)}, {Cell::of_integer(2)}});
  const sql::Result a_reordered = rows_of({{Cell::of_integer(2)}, {Cell::of_integer(1)}});
  const sql::Result a_real = rows_of({{Cell::of_real(1.0)}, {Cell::of_integer(2)}});  // 1 == 1.0 in Python
  const sql::Result b = rows_of({{Cell::of_integer(3)}});
  const sql::Result err = error_result();
  ASSERT_EQ(h(a), h(a_reordered));
  ASSERT_EQ(h(a), h(a_real));
  ASSERT_NE(h(a), h(b));
  ASSERT_EQ(h(err), 0u);

  // Two groups of two: B's earliest member (0) precedes A's (1), so B wins with sample 0.
  Vote v = majority_vote({h(b), h(a), h(a_reordered), h(b)});
  EXPECT_EQ(v.winner, 0);
  EXPECT_EQ(v.votes, 2);
  EXPECT_EQ(v.groups, 2);
  // Same multiset, other order: A's group starts first now.
  v = majority_vote({h(a_reordered), h(b), h(b), h(a)});
  EXPECT_EQ(v.winner, 0);
  // A strict majority wins whatever comes first; the winner is the group's earliest member.
  v = majority_vote({h(b), h(a_real), h(a), h(a_reordered)});
  EXPECT_EQ(v.winner, 1);
  EXPECT_EQ(v.votes, 3);
  // Non-executable answers never form a group, however many agree.
  v = majority_vote({h(err), h(err), h(err), h(b)});
  EXPECT_EQ(v.winner, 3);
  EXPECT_EQ(v.votes, 1);
  EXPECT_EQ(v.groups, 1);
  v = majority_vote({h(err), h(err)});
  EXPECT_EQ(v.winner, -1);
  EXPECT_EQ(v.groups, 0);
  EXPECT_EQ(majority_vote({}).winner, -1);
  // Three singletons: the first executable sample.
  const sql::Result c = rows_of({{Cell::of_text("x")}});
  EXPECT_EQ(majority_vote({0, h(c), h(b), h(a)}).winner, 1);
}

SampleOutcome outcome(bool answered, bool ex, uint64_t hash) {
  SampleOutcome o;
  o.answered = answered;
  o.format_ok = answered;
  o.executable = hash != 0;
  o.ex = ex;
  o.em = ex;
  o.result_hash = hash;
  return o;
}

TEST(ChoosePrediction, PerMode) {
  // Samples: 0 wrong (hash 7), 1 right (hash 9), 2 wrong (hash 7), 3 not executable.
  ExampleResult r;
  r.samples = {outcome(true, false, 7), outcome(true, true, 9), outcome(true, false, 7), outcome(true, false, 0)};
  r.samples[1].seconds = 0.5;
  choose_prediction(r, EvalMode::Vote);
  EXPECT_EQ(r.chosen, 0);  // the wrong majority (2 votes) beats the right singleton
  EXPECT_FALSE(r.correct);
  EXPECT_EQ(r.votes, 2);
  EXPECT_EQ(r.num_correct, 1);
  EXPECT_EQ(r.seconds, 0.5);  // latency: the slowest sample
  choose_prediction(r, EvalMode::PassK);
  EXPECT_EQ(r.chosen, 1);  // the first right sample
  EXPECT_TRUE(r.correct);
  EXPECT_TRUE(r.em);

  // Nothing executable: the first answered sample is shown, and it is wrong.
  ExampleResult none;
  none.samples = {outcome(false, false, 0), outcome(true, false, 0), outcome(true, false, 0)};
  choose_prediction(none, EvalMode::Vote);
  EXPECT_EQ(none.chosen, 1);
  EXPECT_FALSE(none.correct);
  choose_prediction(none, EvalMode::PassK);
  EXPECT_EQ(none.chosen, 1);
  EXPECT_FALSE(none.correct);

  ExampleResult greedy;
  greedy.samples = {outcome(true, true, 5)};
  choose_prediction(greedy, EvalMode::Greedy);
  EXPECT_EQ(greedy.chosen, 0);
  EXPECT_TRUE(greedy.correct);
  ExampleResult empty;
  EXPECT_THROW(choose_prediction(empty, EvalMode::Greedy), Error);
}

TEST(EvalMode, NamesRoundTrip) {
  for (EvalMode m : {EvalMode::Greedy, EvalMode::Vote, EvalMode::PassK})
    EXPECT_EQ(parse_eval_mode(eval_mode_name(m)), m);
  try {
    parse_eval_mode("best");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("modes: greedy, vote, passk"), std::string::npos) << e.what();
  }
}

ExampleResult result_for(size_t index, int64_t samples, int64_t right, bool gold_parsed, bool em) {
  ExampleResult r;
  r.example_index = index;
  for (int64_t s = 0; s < samples; ++s) {
    SampleOutcome o = outcome(true, s < right, s < right ? 1 : 2 + static_cast<uint64_t>(s));
    o.turns = 1 + s;
    o.sql_calls = s;
    o.format_ok = s != samples - 1;
    r.samples.push_back(o);
  }
  choose_prediction(r, EvalMode::Vote);
  r.gold_parsed = gold_parsed;
  r.em = em;
  return r;
}

TEST(Summarize, DifficultyBreakdownSumsToTheTotals) {
  const char* labels[] = {"hard", "easy", "", "extra", "medium", "easy", "weird", "", "medium", "hard", "easy"};
  std::vector<sql::Example> examples;
  std::vector<ExampleResult> results;
  for (size_t i = 0; i < std::size(labels); ++i) {
    sql::Example ex;
    ex.id = "dev_" + std::to_string(i);
    ex.difficulty = labels[i];
    examples.push_back(ex);
    results.push_back(result_for(i, 4, static_cast<int64_t>(i % 4), i % 3 != 0, i % 2 == 0));
  }
  EvalSummary s = summarize(examples, results, 4, false);
  std::vector<std::string> order;
  Tally sum;
  for (const auto& [label, t] : s.by_difficulty) {
    order.push_back(label);
    sum.n += t.n;
    sum.correct += t.correct;
    sum.em_n += t.em_n;
    sum.em += t.em;
  }
  EXPECT_EQ(order, (std::vector<std::string>{"easy", "medium", "hard", "extra", "weird", "unknown"}));
  EXPECT_EQ(sum.n, s.total.n);
  EXPECT_EQ(sum.correct, s.total.correct);
  EXPECT_EQ(sum.em_n, s.total.em_n);
  EXPECT_EQ(sum.em, s.total.em);
  EXPECT_EQ(s.total.n, 11);
  EXPECT_FALSE(s.dialogue);
  EXPECT_TRUE(s.by_turn.empty());

  // c = i % 4 right samples out of 4: pass@1 = mean(c)/4, pass@4 = share with c > 0.
  double mean_c = 0, any = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    mean_c += static_cast<double>(i % 4);
    any += i % 4 > 0;
  }
  ASSERT_EQ(s.pass_at.size(), 3u);  // k = 1, 2, 4
  EXPECT_EQ(s.pass_at[0].first, 1);
  EXPECT_EQ(s.pass_at[1].first, 2);
  EXPECT_EQ(s.pass_at[2].first, 4);
  EXPECT_DOUBLE_EQ(s.pass_at[0].second, mean_c / 4 / 11);
  EXPECT_DOUBLE_EQ(s.pass_at[2].second, any / 11);
  // The right samples share hash 1, the wrong ones are singletons: the vote is right iff c >= 1
  // (c = 1 ties with singletons, and the right sample comes first).
  EXPECT_DOUBLE_EQ(s.vote_ex, any / 11);
  EXPECT_EQ(s.trajectories, 44);
  EXPECT_DOUBLE_EQ(s.avg_turns, 2.5);               // turns 1..4 per question
  EXPECT_DOUBLE_EQ(s.sql_calls_per_question, 6.0);  // 0 + 1 + 2 + 3
  EXPECT_DOUBLE_EQ(s.sql_calls_per_trajectory, 1.5);
  EXPECT_DOUBLE_EQ(s.format_error_rate, 0.25);  // the last sample of each
}

// EX by the synthetic benchmark's trap category: one row per category name (by name), questions
// without one in no row; a dialogue run groups none.
TEST(Summarize, CategoryBreakdownGroupsByName) {
  const char* categories[] = {"stored_form:abbreviation", "plain", "", "number_as_text", "plain", "plain", ""};
  std::vector<sql::Example> examples;
  std::vector<ExampleResult> results;
  for (size_t i = 0; i < std::size(categories); ++i) {
    sql::Example ex;
    ex.id = "dev_" + std::to_string(i);
    ex.category = categories[i];
    examples.push_back(ex);
    results.push_back(result_for(i, 1, i % 2 == 0 ? 1 : 0, true, false));  // even questions right
  }
  EvalSummary s = summarize(examples, results, 1, false);
  ASSERT_EQ(s.by_category.size(), 3u);
  EXPECT_EQ(s.by_category[0].first, "number_as_text");
  EXPECT_EQ(s.by_category[0].second.n, 1);
  EXPECT_EQ(s.by_category[0].second.correct, 0);  // question 3
  EXPECT_EQ(s.by_category[1].first, "plain");
  EXPECT_EQ(s.by_category[1].second.n, 3);
  EXPECT_EQ(s.by_category[1].second.correct, 1);  // questions 1, 4, 5: only 4 is right
  EXPECT_EQ(s.by_category[2].first, "stored_form:abbreviation");
  EXPECT_EQ(s.by_category[2].second.correct, 1);
  EXPECT_EQ(s.total.n, 7);
  EvalRun run;
  run.summary = s;
  nlohmann::ordered_json j = summary_json(run, EvalOptions{}, EvalInfo{});
  EXPECT_EQ(j["by_category"]["plain"]["n"], 3);
  EXPECT_EQ(j["by_category"]["plain"]["correct"], 1);
  EXPECT_NE(summary_markdown(run, EvalOptions{}, EvalInfo{}).find("| plain | 3 | 33.3 |"), std::string::npos);
  EXPECT_TRUE(summarize(examples, results, 1, true).by_category.empty());
  for (sql::Example& ex : examples) ex.category.clear();
  run.summary = summarize(examples, results, 1, false);
  EXPECT_TRUE(run.summary.by_category.empty());
  EXPECT_FALSE(summary_json(run, EvalOptions{}, EvalInfo{}).contains("by_category"));  // other datasets: no key
}

TEST(Summarize, QuestionAndInteractionMatchOnTwoDialogues) {
  // Dialogue 0: 3 turns, all right (EX), EM right on turns 1 and 3 only.
  // Dialogue 1: 6 turns, EX wrong on turn 6 only, EM right on every turn.
  struct Turn {
    size_t record;
    int turn;
    bool ex, em;
  };
  const Turn turns[] = {{0, 0, true, true}, {0, 1, true, false}, {0, 2, true, true},
                        {1, 0, true, true}, {1, 1, true, true},  {1, 2, true, true},
                        {1, 3, true, true}, {1, 4, true, true},  {1, 5, false, true}};
  std::vector<sql::Example> examples;
  std::vector<ExampleResult> results;
  for (size_t i = 0; i < std::size(turns); ++i) {
    sql::Example ex;
    ex.record_index = turns[i].record;
    ex.turn_index = turns[i].turn;
    ex.difficulty = i % 2 ? "easy" : "hard";
    examples.push_back(ex);
    ExampleResult r;
    r.example_index = i;
    r.samples = {outcome(true, turns[i].ex, turns[i].ex ? 1 : 2)};
    choose_prediction(r, EvalMode::Greedy);
    r.gold_parsed = true;
    r.em = turns[i].em;
    results.push_back(r);
  }
  EvalSummary s = summarize(examples, results, 1, true);
  EXPECT_TRUE(s.dialogue);
  // Question match: every turn on its own.
  EXPECT_EQ(s.total.n, 9);
  EXPECT_EQ(s.total.correct, 8);
  EXPECT_EQ(s.total.em, 8);
  // Interaction match: dialogue 0 right by EX, wrong by EM; dialogue 1 the other way round.
  EXPECT_EQ(s.interactions.n, 2);
  EXPECT_EQ(s.interactions.correct, 1);
  EXPECT_EQ(s.interactions.em, 1);
  EXPECT_DOUBLE_EQ(s.interactions.ex(), 0.5);
  // Per turn, as the SParC/CoSQL evaluation groups them: 1, 2, 3, 4, >4.
  std::vector<std::string> buckets;
  int64_t n = 0, correct = 0, em = 0;
  for (const auto& [b, t] : s.by_turn) {
    buckets.push_back(b);
    n += t.n;
    correct += t.correct;
    em += t.em;
  }
  EXPECT_EQ(buckets, (std::vector<std::string>{"1", "2", "3", "4", ">4"}));
  EXPECT_EQ(n, s.total.n);
  EXPECT_EQ(correct, s.total.correct);
  EXPECT_EQ(em, s.total.em);
  EXPECT_EQ(s.by_turn[1].second.n, 2);   // turn 2 of both dialogues
  EXPECT_EQ(s.by_turn[1].second.em, 1);  // dialogue 0's turn 2 misses EM
  EXPECT_EQ(s.by_turn[4].second.n, 2);   // turns 5 and 6 of dialogue 1
  EXPECT_EQ(s.by_turn[4].second.correct, 1);
  int64_t by_difficulty = 0;
  for (const auto& [label, t] : s.by_difficulty) by_difficulty += t.n;
  EXPECT_EQ(by_difficulty, 9);
}

TEST(Summarize, RejectsMismatchedSampleCounts) {
  std::vector<sql::Example> examples(1);
  std::vector<ExampleResult> results = {result_for(0, 2, 1, true, true)};
  EXPECT_THROW(summarize(examples, results, 3, false), Error);
  results[0].example_index = 4;
  EXPECT_THROW(summarize(examples, results, 2, false), Error);
}

}  // namespace
}  // namespace sqlrl::rl

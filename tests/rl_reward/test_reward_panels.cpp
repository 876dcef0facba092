// Panels and weights, MTIR-SQL and SkyRL-SQL terms, the gold cache and batch scoring.
#include <gtest/gtest.h>

#include "reward_fixture.h"
#include "rl/agent/paper.h"
#include "tests/test_util.h"

namespace sqlrl::rl {
namespace {

using testing::example;
using testing::term;
using testing::trajectory;
using testing::turn;

// Weighted values are products/sums of a few doubles like 0.1 and 0.8: exact to ~1e-15.
constexpr double kTol = 1e-12;

using sqlrl::testing::error_of;

TEST(RewardPanel, NamesTermsAndDefaultWeights) {
  EXPECT_EQ(reward_panel_names(), protocol_names());  // one row per paper (rl/agent/paper.h)
  RewardPanel p = make_reward_panel("sqltrail");
  ASSERT_EQ(p.terms.size(), 6u);
  std::vector<std::pair<std::string, double>> want = {{"exec", 5}, {"turns", 2}, {"schema", 1},
                                                      {"bigram", 1}, {"syntax", 1}, {"format", 1}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(p.terms[i].name, want[i].first);
    EXPECT_EQ(p.terms[i].weight, want[i].second);
  }
  EXPECT_EQ(make_reward_panel("mtir").terms[0].weight, 0.1);
  EXPECT_EQ(make_reward_panel("mtsql").terms[2].name, "clause_f1");
}

TEST(RewardPanel, UnknownNamesAreErrorsListingTheChoices) {
  std::string e = error_of([] { make_reward_panel("sql-r1"); });
  EXPECT_NE(e.find("reward panel: unknown name 'sql-r1'"), std::string::npos) << e;
  for (const std::string& name : reward_panel_names()) EXPECT_NE(e.find(name), std::string::npos) << e;

  RewardPanel p = make_reward_panel("sqltrail");
  e = error_of([&] { set_reward_weight(p, "reward.sqltrail.exe", 1); });
  EXPECT_NE(e.find("no term 'exe'"), std::string::npos) << e;
  EXPECT_NE(e.find("exec, turns, schema, bigram, syntax, format"), std::string::npos) << e;
  e = error_of([&] { apply_reward_override(p, "reward.skyrl.outcome=2"); });
  EXPECT_NE(e.find("panel is 'sqltrail'"), std::string::npos) << e;
  e = error_of([&] { apply_reward_override(p, "reward.sqltrail.exec=five"); });
  EXPECT_NE(e.find("'five' is not a number"), std::string::npos) << e;
  e = error_of([&] { apply_reward_override(p, "reward.sqltrail.exec"); });
  EXPECT_NE(e.find("expected reward.<panel>.<term>=<weight>"), std::string::npos) << e;
}

TEST(RewardPanel, OverriddenWeightsScaleTheirTermOnly) {
  sql::Pool pool;
  RewardContext ctx(pool);
  sql::Example ex = example("SELECT name FROM student");
  Trajectory t = trajectory({turn("<think>x</think><solution>SELECT name FROM student</solution>", ActionKind::Answer,
                                  "SELECT name FROM student")});
  RewardPanel p = make_reward_panel("sqltrail");
  score(p, ex, t, ctx);
  EXPECT_NEAR(term(t, "exec"), 5, kTol);
  EXPECT_NEAR(t.reward, 11, kTol);  // every term at its maximum: 5 + 2 + 1 + 1 + 1 + 1
  apply_reward_override(p, "reward.sqltrail.exec=3");
  set_reward_weight(p, "bigram", 0.5);
  score(p, ex, t, ctx);
  EXPECT_NEAR(term(t, "exec"), 3, kTol);
  EXPECT_NEAR(term(t, "bigram"), 0.5, kTol);
  EXPECT_NEAR(term(t, "turns"), 2, kTol);
  EXPECT_NEAR(t.reward, 8.5, kTol);
  ASSERT_EQ(t.reward_terms.size(), 6u);
  EXPECT_EQ(t.reward_terms[0].first, "exec");
  EXPECT_EQ(t.reward_terms[5].first, "format");
}

// ---- MTIR-SQL §3.3 ----
const char* kMtirGold = "SELECT name FROM employees WHERE salary > 50";

Trajectory mtir_run(const std::string& answer, bool think = true) {
  std::string open = think ? "<think>plan</think>\n" : "plan\n";
  return trajectory({turn(open + "<tool_call>{\"name\":\"x\"}</tool_call>", ActionKind::ExecSql, answer, 2),
                     turn(open + "<answer>```sql\n" + answer + "\n```</answer>", ActionKind::Answer, answer)});
}

TEST(RewardMtir, FormatExecutionResult) {
  sql::Pool pool;
  RewardContext ctx(pool);
  RewardPanel p = make_reward_panel("mtir");
  sql::Example ex = example(kMtirGold);
  struct Case {
    Trajectory t;
    double format, exec, result;
  };
  std::vector<Case> cases = {
      {mtir_run("SELECT name FROM employees WHERE salary > 50"), 0.1, 0.1, 1},   // right
      {mtir_run("SELECT name FROM employees WHERE salary > 60"), 0.1, 0.1, -1},  // wrong rows
      {mtir_run("SELECT nme FROM employees"), 0.1, -0.1, 0},                     // not executable
      {mtir_run("SELECT name FROM employees WHERE salary > 50", false), -0.1, 0, 0},  // no <think>: 0, 0
      {mtir_run("SELECT nme FROM employees", false), -0.1, 0, 0},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    score(p, ex, cases[i].t, ctx);
    EXPECT_NEAR(term(cases[i].t, "format"), cases[i].format, kTol) << i;
    EXPECT_NEAR(term(cases[i].t, "exec"), cases[i].exec, kTol) << i;
    EXPECT_NEAR(term(cases[i].t, "result"), cases[i].result, kTol) << i;
    EXPECT_NEAR(cases[i].t.reward, cases[i].format + cases[i].exec + cases[i].result, kTol) << i;
  }
}

TEST(RewardMtir, ThinkOpenerMayComeFromTheChatTemplate) {
  // A Qwen3 thinking template ends the prompt with "<think>\n": the sampled text starts inside
  // the block and only closes it.
  sql::Pool pool;
  RewardContext ctx(pool);
  Trajectory t = trajectory({turn("plan</think>\n<answer>```sql\n" + std::string(kMtirGold) + "\n```</answer>",
                                  ActionKind::Answer, kMtirGold)});
  score(make_reward_panel("mtir"), example(kMtirGold), t, ctx);
  EXPECT_NEAR(t.reward, 0.1 + 0.1 + 1, kTol);
  Trajectory closed_after = trajectory({turn("<answer>x</answer></think>", ActionKind::Answer, kMtirGold)});
  score(make_reward_panel("mtir"), example(kMtirGold), closed_after, ctx);
  EXPECT_NEAR(closed_after.reward, -0.1, kTol);
}

TEST(RewardMtir, UnfinishedOrInvalidEpisodesHaveWrongFormat) {
  sql::Pool pool;
  RewardContext ctx(pool);
  RewardPanel p = make_reward_panel("mtir");
  sql::Example ex = example(kMtirGold);
  Trajectory no_answer = trajectory({turn("<think>a</think><tool_call>{}</tool_call>", ActionKind::ExecSql, kMtirGold)});
  no_answer.out_of_turns = true;
  Trajectory invalid = mtir_run(kMtirGold);
  invalid.turns.insert(invalid.turns.begin(), turn("<think>a</think><tool_call>{bad", ActionKind::Invalid));
  invalid.invalid_actions = 1;
  Trajectory truncated = mtir_run(kMtirGold);
  truncated.truncated = true;
  Trajectory late_think = trajectory({turn("text first <think>a</think><answer>x</answer>", ActionKind::Answer, kMtirGold)});
  for (Trajectory* t : {&no_answer, &invalid, &truncated, &late_think}) {
    score(p, ex, *t, ctx);
    EXPECT_NEAR(term(*t, "format"), -0.1, kTol);
    EXPECT_EQ(term(*t, "exec"), 0);
    EXPECT_EQ(term(*t, "result"), 0);
  }
}

// ---- SkyRL-SQL §4.1 ----
TEST(RewardSkyrl, MinusOneZeroOne) {
  sql::Pool pool;
  RewardContext ctx(pool, {}, sql::CompareMode::BirdSet);
  RewardPanel p = make_reward_panel("skyrl");
  sql::Example ex = example("SELECT dname FROM dept");
  auto run = [](const std::string& answer, const std::string& think = "<think>t</think>") {
    return trajectory({turn(think + "<sql>SELECT * FROM dept</sql>", ActionKind::ExecSql, "SELECT * FROM dept", 2),
                       turn(think + "<solution>" + answer + "</solution>", ActionKind::Answer, answer)});
  };
  Trajectory right = run("SELECT dname FROM dept ORDER BY id DESC");  // set semantics: order ignored
  Trajectory wrong = run("SELECT dname FROM dept WHERE id = 1");
  Trajectory broken = run("SELECT dnam FROM dept");  // valid format, not executable: 0
  Trajectory no_think = run("SELECT dname FROM dept", "");
  Trajectory no_solution = trajectory({turn("<think>t</think><sql>SELECT 1</sql>", ActionKind::ExecSql, "SELECT 1")});
  Trajectory two_solutions = run("SELECT dname FROM dept");
  two_solutions.turns[0].assistant_text += " <solution>SELECT 1</solution>";
  Trajectory invalid_middle = run("SELECT dname FROM dept");
  invalid_middle.turns[0].action.kind = ActionKind::Invalid;
  invalid_middle.invalid_actions = 1;
  std::vector<std::pair<Trajectory*, double>> cases = {{&right, 1},     {&wrong, 0},         {&broken, 0},
                                                       {&no_think, -1}, {&no_solution, -1}, {&two_solutions, -1},
                                                       {&invalid_middle, -1}};
  for (size_t i = 0; i < cases.size(); ++i) {
    score(p, ex, *cases[i].first, ctx);
    EXPECT_EQ(cases[i].first->reward, cases[i].second) << i;
    EXPECT_EQ(term(*cases[i].first, "outcome"), cases[i].second) << i;
  }
}

// A single-turn rollout answers with its first SQL, an <sql> call included (nothing runs): the
// call is the answer, so the format holds and EX decides, as the single-turn evaluation reads it.
// MTIR's format term reads it the same way. An <sql> call that did not end an answered episode is
// still no solution.
TEST(RewardSkyrl, SingleTurnSqlCallIsTheAnswer) {
  sql::Pool pool;
  RewardContext ctx(pool, {}, sql::CompareMode::BirdSet);
  sql::Example ex = example("SELECT dname FROM dept");
  auto single = [](const std::string& sql, const std::string& think = "<think>t</think>") {
    Trajectory t = trajectory({turn(think + "<sql>" + sql + "</sql>", ActionKind::ExecSql, sql)});
    t.turns[0].executed = false;
    t.answered = true;
    t.final_sql = sql;
    return t;
  };
  Trajectory right = single("SELECT dname FROM dept"), wrong = single("SELECT id FROM dept");
  Trajectory no_think = single("SELECT dname FROM dept", "");
  Trajectory two = single("SELECT dname FROM dept");
  two.turns[0].assistant_text += "<solution>SELECT 1</solution>";
  RewardPanel p = make_reward_panel("skyrl");
  for (auto [t, want] : {std::pair{&right, 1.0}, {&wrong, 0.0}, {&no_think, -1.0}, {&two, -1.0}}) {
    score(p, ex, *t, ctx);
    EXPECT_EQ(t->reward, want) << t->turns[0].assistant_text;
  }
  Trajectory unanswered = single("SELECT dname FROM dept");
  unanswered.answered = false;
  unanswered.final_sql.clear();
  score(p, ex, unanswered, ctx);
  EXPECT_EQ(unanswered.reward, -1.0);
  Trajectory mtir = trajectory({turn("<think>t</think><tool_call>{}</tool_call>", ActionKind::ExecSql, "SELECT dname FROM dept")});
  mtir.answered = true;
  mtir.final_sql = "SELECT dname FROM dept";
  score(make_reward_panel("mtir"), ex, mtir, ctx);
  EXPECT_NEAR(term(mtir, "format"), 0.1, kTol);
  EXPECT_NEAR(term(mtir, "result"), 1, kTol);
}

// DAPO's soft overlong punishment (arXiv 2503.14476 §3.4 eq. 13) with L_max = cap 100 and
// L_cache = buffer 20: 0 up to 80 tokens, linear to -1 at 100, -1 beyond.
TEST(RewardOverlong, SoftPunishmentRampsOverTheBuffer) {
  EXPECT_EQ(overlong_penalty(10, 100, 20), 0.0);
  EXPECT_EQ(overlong_penalty(80, 100, 20), 0.0);
  EXPECT_DOUBLE_EQ(overlong_penalty(81, 100, 20), -0.05);
  EXPECT_DOUBLE_EQ(overlong_penalty(90, 100, 20), -0.5);
  EXPECT_DOUBLE_EQ(overlong_penalty(100, 100, 20), -1.0);
  EXPECT_EQ(overlong_penalty(101, 100, 20), -1.0);
  EXPECT_THROW(overlong_penalty(10, 100, 0), Error);
  EXPECT_THROW(overlong_penalty(10, 100, 101), Error);
}

// The term joins any panel as its last one, weighted, computed from the context's cap and buffer;
// the panel's own terms are unchanged.
TEST(RewardOverlong, TermAddsToThePanelsReward) {
  sql::Pool pool;
  RewardContext ctx(pool, {}, sql::CompareMode::BirdSet);
  RewardPanel p = make_reward_panel("skyrl");
  add_overlong_term(p, 0.5);
  EXPECT_THROW(add_overlong_term(p, 0.5), Error);
  sql::Example ex = example("SELECT dname FROM dept");
  Trajectory t = trajectory({turn("<think>t</think><solution>SELECT dname FROM dept</solution>", ActionKind::Answer,
                                  "SELECT dname FROM dept")});
  t.tokens.assign(10, 1);  // the length the term reads
  ctx.overlong_cap = 12, ctx.overlong_buffer = 4;  // 10 is 2 tokens into the 4-token buffer: -0.5
  score(p, ex, t, ctx);
  EXPECT_EQ(term(t, "outcome"), 1.0);
  EXPECT_DOUBLE_EQ(term(t, "overlong"), 0.5 * -0.5);
  EXPECT_DOUBLE_EQ(t.reward, 1.0 - 0.25);
}

// The "executed" term: +1 when the answer is, as text, a query an earlier turn ran without error
// (the last one or any), -1 for any other answer (re-typed and changed, never run, or only run
// with an error, or a single-turn answer), 0 without an answer. The paper's own terms are
// unchanged, the weight scales, and both optional terms can sit on one panel in either order.
TEST(RewardExecuted, PaysAnAnswerThatWasRunBeforeIt) {
  sql::Pool pool;
  RewardContext ctx(pool, {}, sql::CompareMode::BirdSet);
  RewardPanel p = make_reward_panel("skyrl");
  add_executed_term(p, 0.25);
  EXPECT_THROW(add_executed_term(p, 0.25), Error);
  add_overlong_term(p, 0.5);
  ctx.overlong_cap = 100, ctx.overlong_buffer = 10;
  sql::Example ex = example("SELECT dname FROM dept");
  const std::string right = "SELECT dname FROM dept", other = "SELECT id FROM dept";
  auto run = [](const std::vector<std::pair<std::string, bool>>& execs, const std::string& answer) {
    std::vector<TurnRecord> turns;
    for (const auto& [sql, error] : execs)
      turns.push_back(turn("<think>t</think><sql>" + sql + "</sql>", ActionKind::ExecSql, sql, 1, error));
    turns.push_back(turn("<think>t</think><solution>" + answer + "</solution>", ActionKind::Answer, answer));
    return trajectory(std::move(turns));
  };
  Trajectory copied = run({{right, false}}, right + " ;\n");   // whitespace and ';' aside: the same query
  Trajectory earlier = run({{right, false}, {other, false}}, right);  // any earlier run counts
  Trajectory retyped = run({{right, false}}, "SELECT dname FROM dept WHERE id = 1");
  Trajectory failed = run({{right, true}}, right);  // it ran, with an error: not observed to run
  Trajectory direct = run({}, right);
  Trajectory wrong_copied = run({{other, false}}, other);
  Trajectory unanswered = trajectory({turn("<think>t</think><sql>" + right + "</sql>", ActionKind::ExecSql, right)});
  Trajectory single = trajectory({turn("<think>t</think><sql>" + right + "</sql>", ActionKind::ExecSql, right)});
  single.turns[0].executed = false;  // a single-turn rollout's call is its answer and never runs
  single.answered = true;
  single.final_sql = right;
  struct Case { Trajectory* t; double outcome, executed; };
  for (auto [t, outcome, executed] : {Case{&copied, 1, 1}, Case{&earlier, 1, 1}, Case{&retyped, 0, -1},
                                      Case{&failed, 1, -1}, Case{&direct, 1, -1}, Case{&wrong_copied, 0, 1},
                                      Case{&unanswered, -1, 0}, Case{&single, 1, -1}}) {
    score(p, ex, *t, ctx);
    EXPECT_EQ(executed_term(*t), executed) << t->final_sql;
    EXPECT_EQ(term(*t, "outcome"), outcome) << t->final_sql;
    EXPECT_DOUBLE_EQ(term(*t, "executed"), 0.25 * executed) << t->final_sql;
    EXPECT_DOUBLE_EQ(term(*t, "overlong"), 0.0) << t->final_sql;  // no tokens: far from any cap
    EXPECT_DOUBLE_EQ(t->reward, outcome + 0.25 * executed) << t->final_sql;
  }
  EXPECT_EQ(p.terms.size(), 3u);
  EXPECT_EQ(p.terms[1].name, "executed");
  EXPECT_EQ(p.terms[2].name, "overlong");
}

TEST(RewardSkyrl, ComparisonModeComesFromTheContext) {
  // Swapped columns: Spider's result_eq allows column permutations, BIRD's set equality does not.
  sql::Pool pool;
  RewardContext spider(pool, {}, sql::CompareMode::Spider), bird(pool, {}, sql::CompareMode::BirdSet);
  RewardPanel p = make_reward_panel("skyrl");
  sql::Example ex = example("SELECT id, dname FROM dept");
  Trajectory t = trajectory({turn("<think>t</think><solution>SELECT dname, id FROM dept</solution>", ActionKind::Answer,
                                  "SELECT dname, id FROM dept")});
  score(p, ex, t, spider);
  EXPECT_EQ(t.reward, 1);
  score(p, ex, t, bird);
  EXPECT_EQ(t.reward, 0);
}

// ---- gold cache and batches ----
TEST(RewardContext, GoldRunsOncePerPromptAcrossItsSamples) {
  sql::Pool pool;
  RewardContext ctx(pool);
  RewardPanel p = make_reward_panel("skyrl");
  sql::Example ex = example("SELECT name FROM employees WHERE salary > 50");
  const size_t G = 5;
  size_t before = pool.stats().executions;
  for (size_t g = 0; g < G; ++g) {
    Trajectory t = trajectory({turn("<think>t</think><solution>SELECT name FROM employees</solution>",
                                    ActionKind::Answer, "SELECT name FROM employees")});
    score(p, ex, t, ctx);
  }
  EXPECT_EQ(pool.stats().executions - before, 1 + G);  // the gold once, each sample's answer once
  EXPECT_EQ(ctx.gold.size(), 1u);
  EXPECT_EQ(ctx.gold.hits(), G - 1);
}

TEST(RewardContext, BatchOnWorkerThreadsMatchesSequentialScoring) {
  sql::Pool pool;
  ThreadPool workers(4);
  RewardContext ctx(pool);
  ctx.workers = &workers;
  RewardPanel p = make_reward_panel("sqltrail");
  std::vector<sql::Example> examples = {example("SELECT name FROM student", "easy", "a"),
                                        example("SELECT name FROM employees WHERE salary > 50", "medium", "b"),
                                        example("SELECT count(*) FROM employees GROUP BY dept_id", "hard", "c")};
  std::vector<std::string> answers = {"SELECT name FROM student", "SELECT name FROM teacher",
                                      "SELECT name FROM employees WHERE salary > 50", "SELECT nme FROM x",
                                      "SELECT count(*) FROM employees GROUP BY dept_id"};
  const int G = 8;
  std::vector<Trajectory> batch;
  for (int e = 0; e < 3; ++e)
    for (int g = 0; g < G; ++g) {
      const std::string& a = answers[(e * 3 + g) % answers.size()];
      std::vector<TurnRecord> turns(g % 3, turn("<think>t</think><sql>SELECT 1</sql>", ActionKind::ExecSql, "SELECT 1"));
      turns.push_back(turn("<think>t</think><solution>" + a + "</solution>", ActionKind::Answer, a));
      Trajectory t = trajectory(turns);
      t.example_index = e;
      t.sample_index = g;
      batch.push_back(t);
    }
  size_t before = pool.stats().executions;
  score_batch(p, examples, batch, ctx);
  EXPECT_EQ(pool.stats().executions - before, 3 + batch.size());  // 3 distinct golds, once each
  EXPECT_EQ(ctx.gold.size(), 3u);

  sql::Pool pool2;
  RewardContext fresh(pool2);
  for (const Trajectory& scored : batch) {
    Trajectory again = scored;
    score(p, examples[scored.example_index], again, fresh);
    EXPECT_EQ(again.reward, scored.reward);
    EXPECT_EQ(again.reward_terms, scored.reward_terms);
  }
  std::string e = error_of([&] {
    batch[0].example_index = 3;
    score_batch(p, examples, batch, ctx);
  });
  EXPECT_NE(e.find("example_index 3 past 3 examples"), std::string::npos) << e;
}

}  // namespace
}  // namespace sqlrl::rl

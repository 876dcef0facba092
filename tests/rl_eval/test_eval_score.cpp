// EX / EM / vote wiring on a tiny SQLite database with hand-made trajectories (no model).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "rl/eval/eval.h"
#include "runtime/error.h"
#include "tests/sql/pool_test_db.h"

namespace sqlrl::rl {
namespace {

constexpr const char* kTownSchema = R"sql(
    CREATE TABLE country(id INTEGER PRIMARY KEY, name TEXT);
    CREATE TABLE city(id INTEGER PRIMARY KEY, name TEXT, population INTEGER,
                      country_id INTEGER REFERENCES country(id));
    INSERT INTO country VALUES (1,'Norway'),(2,'Peru'),(3,'India');
  )sql";

// Spider's layout, one folder per database: the test-suite EX reads every *.sqlite file there.
std::string town_db(const std::string& folder = "town") {
  std::filesystem::create_directories(sql::testing::temp_dir() + "/" + folder);
  return sql::testing::make_db(folder + "/" + folder + ".sqlite", std::string(kTownSchema) + R"sql(
    INSERT INTO city VALUES (1,'Oslo',700,1),(2,'Lima',9000,2),(3,'Pune',3000,3);
  )sql");
}

sql::Example example(const std::string& id, const std::string& gold) {
  static const std::string path = town_db();
  sql::Example ex;
  ex.id = id;
  ex.db_id = "town";
  ex.db_path = path;
  ex.question = "q " + id;
  ex.gold_sql = gold;
  return ex;
}

Trajectory answered(const std::string& sql, int64_t example_index = 0) {
  Trajectory t;
  t.example_index = example_index;
  TurnRecord turn;
  turn.action.kind = ActionKind::Answer;
  turn.action.sql = sql;
  t.turns.push_back(turn);
  t.answered = true;
  t.final_sql = sql;
  return t;
}

const char* kGold = "SELECT name FROM city WHERE population > 1000";  // Lima, Pune

TEST(EvalScore, ExAndEmOfOneSample) {
  sql::Pool pool;
  RewardContext ctx(pool);  // Spider mode
  sql::Example ex = example("e0", kGold);

  SampleOutcome same = score_sample(ex, answered(kGold), ctx);
  EXPECT_TRUE(same.answered);
  EXPECT_TRUE(same.format_ok);
  EXPECT_TRUE(same.executable);
  EXPECT_TRUE(same.ex);
  EXPECT_TRUE(same.em);
  EXPECT_NE(same.result_hash, 0u);
  EXPECT_EQ(same.turns, 1);
  EXPECT_EQ(same.sql_calls, 0);

  // Same rows by another condition: EX without EM (>= is another operator).
  SampleOutcome other_op = score_sample(ex, answered("SELECT name FROM city WHERE population >= 3000"), ctx);
  EXPECT_TRUE(other_op.ex);
  EXPECT_FALSE(other_op.em);
  EXPECT_EQ(other_op.result_hash, same.result_hash);

  // Another value: EM ignores values, EX does not (Oslo comes back too).
  SampleOutcome other_value = score_sample(ex, answered("SELECT name FROM city WHERE population > 5"), ctx);
  EXPECT_FALSE(other_value.ex);
  EXPECT_TRUE(other_value.em);
  EXPECT_TRUE(other_value.executable);
  EXPECT_NE(other_value.result_hash, same.result_hash);

  // A query that fails: not executable, no vote, no match.
  SampleOutcome broken = score_sample(ex, answered("SELECT nme FROM city"), ctx);
  EXPECT_FALSE(broken.executable);
  EXPECT_FALSE(broken.ex);
  EXPECT_FALSE(broken.em);
  EXPECT_EQ(broken.result_hash, 0u);

  // Never answered (out of turns after two SQL calls, one malformed turn): a format error.
  Trajectory lost;
  lost.turns.resize(3);
  lost.turns[0].executed = lost.turns[1].executed = true;
  lost.turns[2].action.kind = ActionKind::Invalid;
  lost.invalid_actions = 1;
  lost.out_of_turns = true;
  SampleOutcome none = score_sample(ex, lost, ctx);
  EXPECT_FALSE(none.answered);
  EXPECT_FALSE(none.format_ok);
  EXPECT_FALSE(none.ex);
  EXPECT_EQ(none.turns, 3);
  EXPECT_EQ(none.sql_calls, 2);

  // An answer after a malformed turn still scores, but is a format error.
  Trajectory late = answered(kGold);
  late.invalid_actions = 1;
  SampleOutcome l = score_sample(ex, late, ctx);
  EXPECT_TRUE(l.ex);
  EXPECT_FALSE(l.format_ok);
  Trajectory cut = answered(kGold);
  cut.truncated = true;
  EXPECT_FALSE(score_sample(ex, cut, ctx).format_ok);
}

// `executed` run as ExecSql turns that reached the database, then the answer (none when "").
Trajectory executed_then(const std::vector<std::string>& executed, const std::string& answer) {
  Trajectory t;
  for (const std::string& q : executed) {
    TurnRecord turn;
    turn.action.kind = ActionKind::ExecSql;
    turn.action.sql = q;
    turn.executed = true;
    t.turns.push_back(turn);
  }
  if (answer.empty()) return t;
  Trajectory a = answered(answer);
  t.turns.push_back(a.turns.front());
  t.answered = true;
  t.final_sql = answer;
  return t;
}

// The answer turn against the executed queries: a re-typed answer with another column is a copy
// error that lost the right first query; the same text (whitespace and ';' aside) is none.
TEST(EvalScore, CopyErrorsAndFirstRightFinalWrong) {
  sql::Pool pool;
  RewardContext ctx(pool);
  sql::Example ex = example("e0", kGold);

  SampleOutcome same = score_sample(ex, executed_then({kGold}, std::string("  ") + kGold + " ;\n"), ctx);
  EXPECT_TRUE(same.executed_sql);
  EXPECT_TRUE(same.copy_checked);
  EXPECT_FALSE(same.copy_error);
  EXPECT_TRUE(same.first_ex);
  EXPECT_TRUE(same.ex);

  SampleOutcome changed = score_sample(ex, executed_then({kGold}, "SELECT id FROM city WHERE population > 1000"), ctx);
  EXPECT_TRUE(changed.copy_checked);
  EXPECT_TRUE(changed.copy_error);
  EXPECT_TRUE(changed.first_ex);
  EXPECT_TRUE(changed.last_ex);
  EXPECT_FALSE(changed.ex);  // first right -> final wrong

  // A wrong first query, then the right one, answered as typed: the gain, no copy error.
  SampleOutcome gained = score_sample(ex, executed_then({"SELECT name FROM city", kGold}, kGold), ctx);
  EXPECT_FALSE(gained.first_ex);
  EXPECT_TRUE(gained.last_ex);
  EXPECT_TRUE(gained.ex);
  EXPECT_FALSE(gained.copy_error);
  // A first query that failed in its turn is not right.
  Trajectory failed = executed_then({"SELECT nme FROM city", kGold}, kGold);
  failed.turns[0].sql_error = true;
  EXPECT_FALSE(score_sample(ex, failed, ctx).first_ex);

  // Nothing executed, or never answered: no copy to check; EX of what ran is still judged.
  SampleOutcome direct = score_sample(ex, answered(kGold), ctx);
  EXPECT_FALSE(direct.executed_sql);
  EXPECT_FALSE(direct.copy_checked);
  SampleOutcome unanswered = score_sample(ex, executed_then({kGold}, ""), ctx);
  EXPECT_TRUE(unanswered.executed_sql);
  EXPECT_FALSE(unanswered.copy_checked);
  EXPECT_TRUE(unanswered.first_ex);
  EXPECT_FALSE(unanswered.ex);

  // The first query's EX is the evaluation's comparison: Spider checks the gold's order, BIRD not.
  RewardContext bird(pool, {}, sql::CompareMode::BirdSet);
  sql::Example ordered = example("e1", "SELECT name FROM city ORDER BY population DESC");
  Trajectory t = executed_then({"SELECT name FROM city ORDER BY population ASC"}, "SELECT name FROM city WHERE 0");
  EXPECT_FALSE(score_sample(ordered, t, ctx).first_ex);
  EXPECT_TRUE(score_sample(ordered, t, bird).first_ex);

  // The summary: copy errors of the checked answers, lost and gained of the samples with SQL.
  // Right first, then a wrong query answered as typed: lost, but not in the answer turn.
  std::vector<sql::Example> examples = {ex, ex, ex, ex, ex};
  std::vector<Trajectory> trajs = {executed_then({kGold}, kGold),
                                   executed_then({kGold}, "SELECT id FROM city WHERE population > 1000"),
                                   executed_then({"SELECT name FROM city", kGold}, kGold), answered(kGold),
                                   executed_then({kGold, "SELECT name FROM city"}, "SELECT name FROM city")};
  for (size_t i = 0; i < trajs.size(); ++i) trajs[i].example_index = static_cast<int64_t>(i);
  EvalSummary s = summarize(examples, score_examples(examples, trajs, 1, EvalMode::Greedy, ctx), 1, false);
  EXPECT_EQ(s.copy_checked, 4);
  EXPECT_EQ(s.copy_errors, 1);
  EXPECT_DOUBLE_EQ(s.copy_error_rate(), 0.25);
  EXPECT_EQ(s.with_sql, 4);
  EXPECT_EQ(s.first_right_final_wrong, 2);
  EXPECT_EQ(s.first_wrong_final_right, 1);
  EXPECT_EQ(s.last_right_final_wrong, 1);
  EvalRun run;
  run.summary = s;
  nlohmann::ordered_json j = summary_json(run, EvalOptions{}, EvalInfo{});
  EXPECT_EQ(j["copy_errors"], 1);
  EXPECT_DOUBLE_EQ(j["copy_error_rate"].get<double>(), 0.25);
  EXPECT_EQ(j["first_right_final_wrong"], 2);
  EXPECT_DOUBLE_EQ(j["first_wrong_final_right_rate"].get<double>(), 0.25);
  EXPECT_NE(summary_markdown(run, EvalOptions{}, EvalInfo{}).find("first right -> final wrong 50.0"), std::string::npos);
}

TEST(EvalScore, SpiderAndBirdSemanticsDiffer) {
  sql::Pool pool;
  RewardContext spider(pool, {}, sql::CompareMode::Spider);
  RewardContext bird(pool, {}, sql::CompareMode::BirdSet);
  // The gold orders: Spider's test-suite EX checks the order, BIRD's set equality does not.
  sql::Example ordered = example("e1", "SELECT name FROM city ORDER BY population DESC");
  Trajectory ascending = answered("SELECT name FROM city ORDER BY population ASC");
  EXPECT_FALSE(score_sample(ordered, ascending, spider).ex);
  EXPECT_TRUE(score_sample(ordered, ascending, bird).ex);
  // Duplicated rows: a bag differs, a set does not.
  sql::Example names = example("e2", "SELECT name FROM city");
  Trajectory doubled = answered("SELECT name FROM city UNION ALL SELECT name FROM city");
  EXPECT_FALSE(score_sample(names, doubled, spider).ex);
  EXPECT_TRUE(score_sample(names, doubled, bird).ex);
  // A second statement: the official Spider preprocessing keeps the first; Python's sqlite3
  // (BIRD) refuses the pair.
  Trajectory two = answered(std::string(kGold) + "; SELECT 1");
  sql::Example e0 = example("e0", kGold);
  EXPECT_TRUE(score_sample(e0, two, spider).ex);
  SampleOutcome b = score_sample(e0, two, bird);
  EXPECT_FALSE(b.executable);
  EXPECT_FALSE(b.ex);
}

TEST(EvalScore, SpiderExRunsOnEveryDatabaseOfTheTestSuite) {
  // A second database file in the folder, with other data: "population >= 3000" and the gold's
  // "population > 1000" agree on the first file but not on this one (Oslo has 2000 here).
  sql::Example ex = example("e0", kGold);
  ex.db_path = town_db("suite");
  sql::testing::make_db("suite/suite_variant.sqlite", std::string(kTownSchema) + R"sql(
    INSERT INTO city VALUES (1,'Oslo',2000,1),(2,'Lima',9000,2);
  )sql");
  sql::Pool pool;
  RewardContext spider(pool, {}, sql::CompareMode::Spider);
  RewardContext bird(pool, {}, sql::CompareMode::BirdSet);
  Trajectory other_op = answered("SELECT name FROM city WHERE population >= 3000");
  EXPECT_FALSE(score_sample(ex, other_op, spider).ex);
  EXPECT_TRUE(score_sample(ex, other_op, bird).ex);  // BIRD runs on the example's file only
  EXPECT_TRUE(score_sample(ex, answered(kGold), spider).ex);
  EXPECT_TRUE(score_sample(ex, answered("SELECT name FROM city WHERE 1000 < population"), spider).ex);
  // The vote still groups by the example's own file.
  EXPECT_EQ(score_sample(ex, other_op, spider).result_hash, score_sample(ex, answered(kGold), spider).result_hash);
}

TEST(EvalScore, ExamplesVoteOnExecutedResults) {
  sql::Pool pool;
  RewardContext ctx(pool);
  std::vector<sql::Example> examples = {example("e0", kGold), example("e1", "SELECT count(*) FROM city"),
                                        example("e2", "SELECT nope FROM city")};
  const std::vector<std::vector<std::string>> sqls = {
      // e0: {0, 3} return Lima+Pune (right), {1, 2} return all three (wrong): a tie of two
      // groups of two; sample 0's group starts first and wins.
      {"SELECT name FROM city WHERE population >= 3000", "SELECT name FROM city", "SELECT name FROM city WHERE id > 0",
       kGold},
      // e1: the wrong count 2 has two votes, the right one (3) one, one sample fails.
      {"SELECT count(*) FROM city", "SELECT count(*) FROM country WHERE id < 3", "SELECT 2", "SELECT bad"},
      // e2: the gold fails to run; nothing can be right.
      {"SELECT 1", "SELECT 1", "SELECT 2", "SELECT 3"}};
  std::vector<Trajectory> trajs;
  for (size_t e = 0; e < sqls.size(); ++e)
    for (const std::string& s : sqls[e]) trajs.push_back(answered(s, static_cast<int64_t>(e)));

  std::vector<ExampleResult> vote = score_examples(examples, trajs, 4, EvalMode::Vote, ctx);
  ASSERT_EQ(vote.size(), 3u);
  EXPECT_EQ(vote[0].chosen, 0);
  EXPECT_TRUE(vote[0].correct);
  EXPECT_FALSE(vote[0].em);  // >= is not the gold's operator
  EXPECT_TRUE(vote[0].gold_parsed);
  EXPECT_EQ(vote[0].votes, 2);
  EXPECT_EQ(vote[0].num_correct, 2);
  EXPECT_EQ(vote[0].prediction, sqls[0][0]);
  EXPECT_EQ(vote[1].chosen, 1);
  EXPECT_FALSE(vote[1].correct);
  EXPECT_EQ(vote[1].num_correct, 1);
  EXPECT_TRUE(vote[2].gold_error);
  EXPECT_FALSE(vote[2].correct);
  EXPECT_EQ(vote[2].num_correct, 0);

  std::vector<ExampleResult> passk = score_examples(examples, trajs, 4, EvalMode::PassK, ctx);
  EXPECT_TRUE(passk[1].correct);
  EXPECT_EQ(passk[1].chosen, 0);
  EXPECT_EQ(passk[0].chosen, 0);
  EXPECT_FALSE(passk[2].correct);

  EvalSummary s = summarize(examples, vote, 4, false);
  EXPECT_EQ(s.total.correct, 1);
  EXPECT_EQ(s.gold_errors, 1);
  EXPECT_DOUBLE_EQ(s.pass_at.front().second, (2.0 / 4 + 1.0 / 4 + 0) / 3);
  EXPECT_DOUBLE_EQ(s.executable_rate, 11.0 / 12);

  // Trajectories out of (example, sample) order are refused.
  std::swap(trajs[0], trajs[4]);
  EXPECT_THROW(score_examples(examples, trajs, 4, EvalMode::Vote, ctx), Error);
  trajs.pop_back();
  EXPECT_THROW(score_examples(examples, trajs, 4, EvalMode::Vote, ctx), Error);
}

}  // namespace
}  // namespace sqlrl::rl

namespace sqlrl::rl {
namespace {

// Infrastructure failures are scored as they come out (EX as the official scripts count it) and
// counted: one marked by the rollout, one whose own answer cannot run because its database went
// bad after the gold ran. The summary counts both; summary.json carries the count.
TEST(EvalScore, InfrastructureFailuresAreCountedInTheSummary) {
  sql::Pool pool;
  RewardContext ctx(pool);
  const std::string db = town_db("town_infra");
  std::vector<sql::Example> examples = {example("i0", kGold), example("i1", kGold)};
  for (sql::Example& e : examples) e.db_path = db;
  std::vector<Trajectory> trajs = {answered(kGold, 0), answered(kGold, 1)};
  trajs[0].infra_failure = true;  // a turn's SQL failed for the machine during the rollout
  std::vector<ExampleResult> first = score_examples(examples, trajs, 1, EvalMode::Greedy, ctx);
  EXPECT_TRUE(first[0].samples[0].infra_failure);
  EXPECT_TRUE(first[0].correct);  // scored as it came out
  EXPECT_FALSE(first[1].samples[0].infra_failure);
  {
    const auto size = std::filesystem::file_size(db);
    std::fstream out(db, std::ios::binary | std::ios::in | std::ios::out);  // same inode, not a database
    out << std::string(size, '\xff');
  }
  SampleOutcome broken = score_sample(examples[1], trajs[1], ctx);  // the gold's result is cached
  EXPECT_TRUE(broken.infra_failure);
  EXPECT_FALSE(broken.ex);
  first[1].samples[0] = broken;
  EvalSummary s = summarize(examples, first, 1, false);
  EXPECT_EQ(s.infra_failures, 2);
  EvalRun run;
  run.results = first;
  run.summary = s;
  EXPECT_EQ(summary_json(run, EvalOptions{}, EvalInfo{})["infra_failures"], 2);
  EXPECT_NE(summary_markdown(run, EvalOptions{}, EvalInfo{}).find("2 trajectories hit an infrastructure failure"),
            std::string::npos);
}

}  // namespace
}  // namespace sqlrl::rl

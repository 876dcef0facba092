// A database that becomes unreadable mid-rollout: the trajectories whose SQL ran on it after it
// broke are marked infra_failure (with the turn and the pool's error), the others are not and
// sample exactly what they sample when nothing breaks; scoring marks a trajectory whose answer or
// gold cannot run for the same reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "rl/agent/reward.h"
#include "rl/options.h"
#include "runtime/error.h"
#include "tests/rl_rollout/rollout_fixture.h"

namespace sqlrl::rl::testing {
namespace {

// Overwrites a file in place (same inode, same size) with bytes that are not a database: what a
// connection opened before sees when the file goes bad under it. Works as root, unlike chmod.
void break_in_place(const std::string& path) {
  const auto size = std::filesystem::file_size(path);
  std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);
  out << std::string(size, '\xff');
}

std::string fresh_city_db(const std::string& name) {
  return sql::testing::make_db(name, R"sql(
    CREATE TABLE city(id INTEGER PRIMARY KEY, name TEXT NOT NULL, population INTEGER);
    INSERT INTO city VALUES (1,'Oslo',700),(2,'Lima',9000),(3,'Pune',3000);
  )sql");
}

// The test protocol, which breaks `victim` when the first turn of the rollout ends (prompts are
// built and prefilled, and the pool holds an idle connection to it from the schema read).
struct BreakingProtocol : TagProtocol {
  std::string victim;
  mutable bool broken = false;
  Action parse(std::string_view text) const override {
    if (!victim.empty() && !broken) {
      break_in_place(victim);
      broken = true;
    }
    return TagProtocol::parse(text);
  }
};

struct RolloutRun {
  std::vector<Trajectory> trajs;
  RolloutStats stats;
};

RolloutRun run_with(const std::string& b_path, bool break_b) {
  const Tokenizer& tok = tiny_tokenizer();
  QwenModel model = tiny_model(tok, kMixed);
  BreakingProtocol protocol;
  if (break_b) protocol.victim = b_path;
  sql::Pool pool;
  std::vector<sql::Example> examples = city_examples();
  examples[2].db_path = b_path;  // example 2 on its own copy of the database
  RolloutOptions o = base_options();
  std::vector<RolloutRequest> requests = make_requests(protocol, tok, pool, examples, o);
  RolloutRun run;
  run.trajs = rollout(model, tok, protocol, pool, requests, o, &run.stats);
  EXPECT_EQ(protocol.broken, break_b);
  return run;
}

TEST(RolloutInfra, ADatabaseThatBreaksMidRolloutMarksOnlyItsTrajectories) {
  const RolloutRun clean = run_with(fresh_city_db("infra_clean_b.sqlite"), false);
  const RolloutRun broken = run_with(fresh_city_db("infra_broken_b.sqlite"), true);
  ASSERT_EQ(broken.trajs.size(), clean.trajs.size());
  int64_t marked = 0, infra_turns = 0;
  for (size_t k = 0; k < broken.trajs.size(); ++k) {
    const Trajectory& t = broken.trajs[k];
    bool executed = false;
    for (const TurnRecord& turn : t.turns) {
      executed = executed || turn.executed;
      infra_turns += turn.infra_error;
      if (turn.infra_error) {
        EXPECT_TRUE(turn.sql_error);
      }
    }
    if (t.example_index == 2) {
      // Every query on the broken file ran after it broke: each one fails for the machine.
      EXPECT_EQ(t.infra_failure, executed) << k;
      if (t.infra_failure) {
        EXPECT_EQ(t.infra_reason.rfind("turn ", 0), 0u) << t.infra_reason;
        EXPECT_NE(t.infra_reason.find("infra_broken_b.sqlite"), std::string::npos) << t.infra_reason;
      }
      marked += t.infra_failure;
    } else {
      EXPECT_FALSE(t.infra_failure) << k << ": " << t.infra_reason;
      // The others are not touched: the same tokens as when nothing breaks.
      EXPECT_EQ(t.tokens, clean.trajs[k].tokens) << k;
    }
    EXPECT_FALSE(clean.trajs[k].infra_failure) << k;
  }
  ASSERT_GT(marked, 0) << "no sample of example 2 ran SQL: the fixture tests nothing";
  EXPECT_EQ(broken.stats.sql_infra_errors, infra_turns);
  EXPECT_EQ(clean.stats.sql_infra_errors, 0);
}

// Model-written SQL that kills or stalls SQLite itself, in the sandbox (sql/exec/sandbox.h) that
// train, eval and the demo use: the worker of this test has two planted functions
// (SQLRL_SQL_WORKER_TEST_FUNCTIONS=1), sqlrl_test_crash() raising SIGSEGV and sqlrl_test_spin()
// looping inside one opcode, where no SQLite budget looks. The protocol turns every query that
// would have failed on a missing column into the crash, and the first query of another kind into
// the spin. Each costs its turn only: an error observation (not the machine's: the model wrote
// it), the rollout finishes, the run's process lives, and the trajectories that never met a
// planted query sample exactly the tokens of a run without them.
struct PlantingProtocol : TagProtocol {
  bool plant = false;
  mutable bool spun = false;
  mutable int64_t crashes = 0;
  Action parse(std::string_view text) const override {
    Action a = TagProtocol::parse(text);
    if (!plant || a.kind != ActionKind::ExecSql) return a;
    if (a.sql == "SELECT nope FROM city") {
      a.sql = "SELECT sqlrl_test_crash()";
      ++crashes;
    } else if (!spun) {
      a.sql = "SELECT sqlrl_test_spin()";
      spun = true;
    }
    return a;
  }
};

std::vector<Trajectory> run_sandboxed(bool plant, sql::PoolStats* stats, bool sandbox = true) {
  setenv("SQLRL_SQL_WORKER_TEST_FUNCTIONS", "1", 1);  // inherited by the workers
  const Tokenizer& tok = tiny_tokenizer();
  QwenModel model = tiny_model(tok, kMixed);
  PlantingProtocol protocol;
  protocol.plant = plant;
  sql::PoolOptions po = sql::model_sql_pool_options();
  po.sandbox_options.worker_binary = SQLRL_BINARY;
  po.sandbox_options.grace_ms = 300;
  po.sandbox = sandbox;
  sql::Pool pool(po);
  std::vector<sql::Example> examples = city_examples();
  RolloutOptions o = base_options();
  o.sql_limits.timeout_ms = 200;
  std::vector<RolloutRequest> requests = make_requests(protocol, tok, pool, examples, o);
  std::vector<Trajectory> trajs = rollout(model, tok, protocol, pool, requests, o);
  if (plant) {
    EXPECT_TRUE(protocol.spun) << "no query became the spin: the fixture tests less than it says";
    EXPECT_GT(protocol.crashes, 0) << "no query became the crash: the fixture tests less than it says";
  }
  *stats = pool.stats();
  return trajs;
}

TEST(RolloutInfra, SandboxedSqlThatCrashesOrSpinsSqliteCostsOneTurn) {
  sql::PoolStats clean_stats, planted_stats;  // clean_stats: the run without planted queries
  const std::vector<Trajectory> clean = run_sandboxed(false, &clean_stats);
  const std::vector<Trajectory> planted = run_sandboxed(true, &planted_stats);
  ASSERT_EQ(planted.size(), clean.size());
  int64_t crashed = 0, spun = 0, untouched = 0;
  for (size_t k = 0; k < planted.size(); ++k) {
    const Trajectory& t = planted[k];
    bool met = false;
    for (const TurnRecord& turn : t.turns) {
      if (!turn.executed) continue;  // a last turn out of turns: parsed, never run
      if (turn.action.sql == "SELECT sqlrl_test_crash()") {
        met = true;
        ++crashed;
        EXPECT_TRUE(turn.sql_error && !turn.infra_error) << k;
        EXPECT_NE(turn.observation.find("ended without an answer"), std::string::npos) << turn.observation;
      } else if (turn.action.sql == "SELECT sqlrl_test_spin()") {
        met = true;
        ++spun;
        EXPECT_TRUE(turn.sql_error && !turn.infra_error) << k;
        EXPECT_NE(turn.observation.find("timeout after 500 ms"), std::string::npos) << turn.observation;
        EXPECT_LT(turn.sql_seconds, 5.0) << "the spin was not stopped near its deadline";
      }
    }
    EXPECT_FALSE(t.infra_failure) << k << ": " << t.infra_reason;
    if (!met) {
      ++untouched;
      EXPECT_EQ(t.tokens, clean[k].tokens) << k;
    }
  }
  EXPECT_GT(crashed, 0);
  EXPECT_EQ(spun, 1);
  ASSERT_GT(untouched, 0) << "every trajectory met a planted query: nothing shows the others are untouched";
  // Without planted queries the sandbox changes no bit: the same trajectories as the in-process
  // pool (what the demo's table rests on: its figures do not move with the sandbox).
  sql::PoolStats in_process_stats;
  const std::vector<Trajectory> in_process = run_sandboxed(false, &in_process_stats, false);
  ASSERT_EQ(in_process.size(), clean.size());
  for (size_t k = 0; k < clean.size(); ++k) {
    EXPECT_EQ(clean[k].tokens, in_process[k].tokens) << k;
    EXPECT_EQ(clean[k].sampler_logprobs, in_process[k].sampler_logprobs) << k;
  }
  EXPECT_GT(clean_stats.sandbox_round_trips, 0u) << "the sandboxed run ran nothing in the sandbox";
  EXPECT_EQ(in_process_stats.sandbox_round_trips, 0u);
  EXPECT_GT(clean_stats.executions, 0u);
  EXPECT_EQ(planted_stats.timeouts, 1u);
  EXPECT_GE(planted_stats.errors, static_cast<size_t>(crashed + spun));
}

// Scoring runs the gold and the answer itself: a failure of either for the machine marks the
// trajectory (the gold's is not cached, so the run recovers when the file does).
TEST(RolloutInfra, ScoringMarksAnswersWhoseGoldOrOwnSqlCannotRun) {
  sql::Pool pool;
  RewardContext ctx(pool);
  const RewardPanel panel = make_reward_panel("skyrl");  // scores from the answer's execution alone
  sql::Example ex = city_examples()[0];
  ex.gold_sql = "SELECT count(*) FROM city";
  auto answered = [] {
    Trajectory t;
    t.answered = true;
    t.final_sql = "SELECT count(*) FROM city";
    return t;
  };
  ex.db_path = sql::testing::temp_dir() + "/infra_not_there.sqlite";
  Trajectory no_db = answered();
  score(panel, ex, no_db, ctx);
  EXPECT_TRUE(no_db.infra_failure);
  EXPECT_EQ(no_db.infra_reason.rfind("scoring: gold SQL: cannot open database", 0), 0u) << no_db.infra_reason;

  ex.db_path = fresh_city_db("infra_scoring.sqlite");
  Trajectory fine = answered();
  score(panel, ex, fine, ctx);  // caches the gold's result
  EXPECT_FALSE(fine.infra_failure) << fine.infra_reason;
  break_in_place(ex.db_path);
  Trajectory after = answered();
  score(panel, ex, after, ctx);
  EXPECT_TRUE(after.infra_failure);
  EXPECT_EQ(after.infra_reason.rfind("scoring: final SQL: ", 0), 0u) << after.infra_reason;

  // A gold that failed for the machine is run again once the file is back.
  const std::string later = sql::testing::temp_dir() + "/infra_later.sqlite";
  EXPECT_TRUE(ctx.gold.get(later, ex.gold_sql)->infra_error);
  std::filesystem::copy_file(fresh_city_db("infra_source.sqlite"), later);
  EXPECT_TRUE(ctx.gold.get(later, ex.gold_sql)->ok());
}

// --sql-vm-steps (train, eval, sft) reaches the rollout's limits, so the wall clock under it is
// classed as the machine's; a negative budget is refused naming the key.
TEST(RolloutInfra, SqlVmStepsReachesTheRolloutLimits) {
  SqlOptions q;
  OptionTable table;
  add_sql_options(table, q);
  bool listed = false;
  for (const Option& o : table) listed = listed || std::string(o.key) == "sql-vm-steps";
  EXPECT_TRUE(listed);
  q.sql_vm_steps = 123456;
  RolloutOptions ro;
  apply_to_rollout(ro, SamplingOptions{}, 1, TurnOptions{}, q);
  EXPECT_EQ(ro.sql_limits.max_vm_steps, 123456);
  q.sql_vm_steps = -1;
  try {
    validate(q);
    ADD_FAILURE() << "a negative sql-vm-steps was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sql-vm-steps"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sqlrl::rl::testing

// sql/exec/sandbox.h: model-written SQL in worker processes (the built llm_sqlrl binary, started
// with --sql-worker). The worker of these tests has two planted functions
// (SQLRL_SQL_WORKER_TEST_FUNCTIONS=1): sqlrl_test_crash() raises SIGSEGV inside SQLite, and
// sqlrl_test_spin() loops inside one opcode, where no SQLite budget looks.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>

#include "runtime/clock.h"
#include "runtime/thread_pool.h"
#include "sql/exec/pool.h"
#include "sql/exec/sandbox.h"
#include "tests/sql/pool_test_db.h"
#include "tests/test_util.h"

namespace sqlrl::sql {
namespace {

using testing::shop_db;

SandboxOptions test_sandbox(size_t workers = 2) {
  setenv("SQLRL_SQL_WORKER_TEST_FUNCTIONS", "1", 1);  // inherited by the workers
  SandboxOptions o;
  o.worker_binary = SQLRL_BINARY;
  o.workers = workers;
  o.grace_ms = 300;
  return o;
}


// Every field of a result crosses the pipe: rows of every cell type, the column names and
// declared types, truncation, the ignored tail, errors. Catches a field the wire drops.
TEST(SqlSandbox, AnswersWhatThePoolAnswers) {
  Sandbox sandbox(test_sandbox());
  Pool pool;
  Limits capped;
  capped.max_rows = 2;
  const char* queries[] = {
      "SELECT * FROM products ORDER BY id",
      "SELECT 1, 2.5, 'text', x'00ff', NULL",
      "SELECT name FROM products; SELECT 2",
      "SELECT no_such_column FROM products",
      "DELETE FROM products",
  };
  for (const char* q : queries)
    for (const Limits& limits : {Limits{}, capped}) {
      const Result want = pool.execute(shop_db(), q, limits), got = sandbox.execute(shop_db(), q, limits);
      EXPECT_EQ(got.columns, want.columns) << q;
      EXPECT_EQ(got.decltypes, want.decltypes) << q;
      ASSERT_EQ(got.rows.size(), want.rows.size()) << q;
      for (size_t i = 0; i < got.rows.size(); ++i) {
        ASSERT_EQ(got.rows[i].size(), want.rows[i].size()) << q;
        for (size_t j = 0; j < got.rows[i].size(); ++j) {
          const Cell &a = got.rows[i][j], &b = want.rows[i][j];
          EXPECT_TRUE(a.type == b.type && a.integer == b.integer && a.text == b.text &&
                      (a.real == b.real || (a.real != a.real && b.real != b.real)))
              << q << " row " << i << " column " << j;
        }
      }
      EXPECT_EQ(got.error, want.error) << q;
      EXPECT_EQ(got.timed_out, want.timed_out) << q;
      EXPECT_EQ(got.infra_error, want.infra_error) << q;
      EXPECT_EQ(got.truncated, want.truncated) << q;
      EXPECT_EQ(got.truncation, want.truncation) << q;
      EXPECT_EQ(got.ignored_tail, want.ignored_tail) << q;
      EXPECT_EQ(got.vm_steps, want.vm_steps) << q;
      EXPECT_EQ(got.result_bytes, want.result_bytes) << q;
    }
  EXPECT_EQ(sandbox.stats().started, 1u) << "one caller at a time keeps reusing one worker";
}

// A query that crashes SQLite costs that query: an error naming the signal, then the next query
// runs on a new worker. In process, this test's own process would have died.
TEST(SqlSandbox, ACrashInsideSqliteIsOneFailedQuery) {
  Sandbox sandbox(test_sandbox());
  Result crashed = sandbox.execute(shop_db(), "SELECT sqlrl_test_crash()", Limits{});
  EXPECT_FALSE(crashed.ok());
  EXPECT_FALSE(crashed.infra_error) << "the query did it";
  EXPECT_NE(crashed.error.find("ended without an answer"), std::string::npos) << crashed.error;
  // AddressSanitizer's own SIGSEGV handler reports and exits with status 1 instead.
  if (!kAddressSanitizer) {
    EXPECT_NE(crashed.error.find("signal 11"), std::string::npos) << crashed.error;
  }
  Result next = sandbox.execute(shop_db(), "SELECT count(*) FROM products", Limits{});
  ASSERT_TRUE(next.ok()) << next.error;
  EXPECT_EQ(sandbox.stats().died, 1u);
  EXPECT_EQ(sandbox.stats().started, 2u);
}

// A loop inside one opcode (as printf('%.*c', 1e9, 'x') or a long LIKE are) ignores every SQLite
// budget; the worker is killed at the query's timeout plus the grace, the caller gets a timeout,
// and the next query runs. Catches a sandbox that waits for an answer that never comes.
TEST(SqlSandbox, AQueryThatNeverReturnsIsKilledAtItsDeadline) {
  Sandbox sandbox(test_sandbox());
  Limits limits;
  limits.timeout_ms = 200;
  const auto start = std::chrono::steady_clock::now();
  Result spun = sandbox.execute(shop_db(), "SELECT sqlrl_test_spin()", limits);
  const double took = seconds_since(start);
  EXPECT_TRUE(spun.timed_out) << spun.error;
  EXPECT_FALSE(spun.infra_error) << "the wall clock is the query's only budget here";
  EXPECT_GE(took, 0.45);
  EXPECT_LT(took, 5.0);
  EXPECT_EQ(sandbox.stats().killed, 1u);
  Result next = sandbox.execute(shop_db(), "SELECT count(*) FROM products", limits);
  ASSERT_TRUE(next.ok()) << next.error;
  // The stall: SQLite's printf pads one character at a time past its length limit.
  const auto printf_start = std::chrono::steady_clock::now();
  Result padded = sandbox.execute(shop_db(), "SELECT printf('%.*c', 1000000000, 'x')", limits);
  EXPECT_LT(seconds_since(printf_start), 5.0) << padded.error;
}

// Callers past the worker count wait; two slow queries run side by side in two workers.
TEST(SqlSandbox, CallersShareTheWorkers) {
  Sandbox sandbox(test_sandbox(2));
  std::vector<std::future<Result>> answers;
  for (int i = 0; i < 6; ++i)
    answers.push_back(std::async(std::launch::async, [&] {
      return sandbox.execute(shop_db(), "SELECT count(*) FROM products", Limits{});
    }));
  for (auto& a : answers) {
    Result r = a.get();
    ASSERT_TRUE(r.ok()) << r.error;
  }
  EXPECT_LE(sandbox.stats().started, 2u);
}

// Through the pool: PoolOptions::sandbox sends every execute() to the workers; a crash is one
// failed query and the pool's counters see it.
TEST(SqlSandbox, APoolWithTheSandboxSurvivesACrash) {
  PoolOptions options;
  options.sandbox = true;
  options.sandbox_options = test_sandbox();
  Pool pool(options);
  EXPECT_FALSE(pool.execute(shop_db(), "SELECT sqlrl_test_crash()").ok());
  Result r = pool.submit(shop_db(), "SELECT count(*) FROM products").get();
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(pool.stats().executions, 2u);
  EXPECT_EQ(pool.stats().errors, 1u);
}

// A worker that cannot start (here: no such binary) is the machine's failure, named, not the
// query's. (Before the worker's "ready", a failed exec read as the query's own crash.)
TEST(SqlSandbox, AWorkerThatCannotStartIsTheMachinesFailure) {
  SandboxOptions o = test_sandbox(1);
  o.worker_binary = "/nonexistent/llm_sqlrl";
  Sandbox missing(o);
  Result r = missing.execute(shop_db(), "SELECT 1", Limits{});
  EXPECT_TRUE(r.infra_error) << r.error;
  EXPECT_NE(r.error.find("did not start"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("exit status 127"), std::string::npos) << r.error;
}

// One request carries several queries; a crash and a spin in the middle of it cost themselves
// only: the queries before them keep their answers, the ones after run on a new worker, in order.
TEST(SqlSandbox, ABatchLosesOnlyTheQueriesThatCrashOrSpin) {
  Sandbox sandbox(test_sandbox(1));
  Limits limits;
  limits.timeout_ms = 200;
  const std::vector<std::string> sql = {"SELECT count(*) FROM products", "SELECT sqlrl_test_crash()",
                                        "SELECT name FROM products ORDER BY id", "SELECT sqlrl_test_spin()",
                                        "SELECT max(id) FROM products"};
  std::vector<SandboxQuery> batch;
  for (const std::string& q : sql) batch.push_back({shop_db(), q, &limits});
  const std::vector<Result> got = sandbox.execute_batch(batch);
  ASSERT_EQ(got.size(), sql.size());
  Pool pool;
  for (size_t i : {0u, 2u, 4u}) {
    const Result want = pool.execute(shop_db(), sql[i], limits);
    ASSERT_TRUE(got[i].ok()) << sql[i] << ": " << got[i].error;
    ASSERT_EQ(got[i].rows.size(), want.rows.size()) << sql[i];
    for (size_t r = 0; r < want.rows.size(); ++r)
      EXPECT_TRUE(got[i].rows[r][0].text == want.rows[r][0].text && got[i].rows[r][0].integer == want.rows[r][0].integer)
          << sql[i] << " row " << r;
  }
  EXPECT_NE(got[1].error.find("ended without an answer"), std::string::npos) << got[1].error;
  EXPECT_TRUE(got[3].timed_out) << got[3].error;
  const SandboxStats s = sandbox.stats();
  EXPECT_EQ(s.round_trips, 3u) << "the batch, then what followed the crash, then what followed the spin";
  EXPECT_EQ(s.started, 3u);
  EXPECT_EQ(s.died, 1u);
  EXPECT_EQ(s.killed, 1u);
}

// Queries submitted while others wait share round trips: 40 queued at once over 4 workers take
// batches of ceil(waiting / 4) (10, 8, 6, 4, 3, 3, 2, 1, 1, 1, 1: 11 requests), not 40; each
// caller still gets its own query's result. The pool's threads are held until all 40 are queued,
// so the count does not depend on timing.
TEST(SqlSandbox, SubmittedQueriesShareRoundTrips) {
  PoolOptions options;
  options.sandbox = true;
  options.sandbox_options = test_sandbox(4);
  ThreadPool threads(4);
  Pool pool(options, &threads);
  std::promise<void> go;
  std::shared_future<void> started = go.get_future().share();
  for (int i = 0; i < 4; ++i) threads.submit([started] { started.wait(); });
  std::vector<std::future<Result>> answers;
  for (int i = 0; i < 40; ++i)
    answers.push_back(pool.submit(shop_db(), "SELECT " + std::to_string(i) + " + count(*) FROM products"));
  go.set_value();
  Pool in_process;
  const int64_t products = in_process.execute(shop_db(), "SELECT count(*) FROM products").rows.at(0).at(0).integer;
  for (int i = 0; i < 40; ++i) {
    Result r = answers[i].get();
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.rows.at(0).at(0).integer, i + products) << "query " << i << " got another's result";
  }
  EXPECT_EQ(pool.stats().executions, 40u);
  EXPECT_LE(pool.stats().sandbox_round_trips, 11u);
}

}  // namespace
}  // namespace sqlrl::sql

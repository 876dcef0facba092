// 8 threads x 1000 mixed queries over 5 databases, some timing out: no deadlock, no leaked
// connection, and every result identical to the serial run of the same (database, query).
#include <gtest/gtest.h>

#include <thread>

#include "sql/exec/pool.h"
#include "tests/sql/pool_test_db.h"

namespace sqlrl::sql {
namespace {

struct Query {
  std::string sql;
  Limits limits;
};

std::vector<Query> query_mix() {
  Limits normal;
  normal.timeout_ms = 2000;
  normal.max_rows = 500;
  Limits steps = normal;
  steps.max_vm_steps = 20000;  // deterministic "timeout"
  Limits clock = normal;
  clock.timeout_ms = 5;  // wall-clock timeout on a query that never ends
  return {
      {"SELECT count(*), sum(val), min(name) FROM t", normal},
      {"SELECT grp, count(*), avg(val) FROM t GROUP BY grp ORDER BY grp", normal},
      {"SELECT name FROM t WHERE id % 7 = 0 ORDER BY id", normal},
      {"SELECT * FROM t WHERE id < 20", normal},
      {"SELECT a.id, b.id FROM t a, t b", normal},  // truncated at 500 rows
      {"SELECT x FROM nope", normal},
      {"INSERT INTO t VALUES (0, 0, 0, 'x')", normal},
      {"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c", steps},
      {"SELECT t.name, u.grp FROM t JOIN t u ON u.id = t.id + 1 WHERE t.val > 50 ORDER BY t.id", normal},
      {"SELECT DISTINCT grp FROM t ORDER BY grp DESC", normal},
      {"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c", clock},
  };
}

bool same_result(const Result& a, const Result& b) {
  if (a.columns != b.columns || a.error != b.error || a.timed_out != b.timed_out || a.truncated != b.truncated ||
      a.rows.size() != b.rows.size())
    return false;
  for (size_t i = 0; i < a.rows.size(); ++i) {
    if (a.rows[i].size() != b.rows[i].size()) return false;
    for (size_t j = 0; j < a.rows[i].size(); ++j) {
      const Cell& x = a.rows[i][j];
      const Cell& y = b.rows[i][j];
      if (x.type != y.type || x.integer != y.integer || x.real != y.real || x.text != y.text) return false;
    }
  }
  return true;
}

TEST(SqlPoolConcurrency, EightThreadsThousandQueriesEachMatchSerial) {
  std::vector<std::string> dbs;
  for (int d = 0; d < 5; ++d) {
    dbs.push_back(testing::make_db(
        "conc_" + std::to_string(d) + ".sqlite",
        "CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, val REAL, name TEXT);"
        "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 200) "
        "INSERT INTO t SELECT i, (i * " + std::to_string(d + 3) + ") % 7, i * 0.5 + " + std::to_string(d) +
            ", 'n' || (i * " + std::to_string(d + 11) + " % 97) FROM c;"));
  }
  std::vector<Query> queries = query_mix();
  const size_t nq = queries.size(), nd = dbs.size();

  Pool pool;
  std::vector<Result> serial(nq * nd);
  for (size_t d = 0; d < nd; ++d)
    for (size_t q = 0; q < nq; ++q) serial[d * nq + q] = pool.execute(dbs[d], queries[q].sql, queries[q].limits);

  const int threads = 8, per_thread = 1000;
  std::vector<int> mismatches(threads, 0), timeouts(threads, 0);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        // Clock timeouts are the slow ones (5 ms each): one in 40 calls is one.
        size_t q = static_cast<size_t>((i * 7 + t * 3) % 40);
        if (q >= nq - 1) q = (i % 40 == 0) ? nq - 1 : q % (nq - 1);
        size_t d = static_cast<size_t>((i + t) % static_cast<int>(nd));
        Result r = pool.execute(dbs[d], queries[q].sql, queries[q].limits);
        if (r.timed_out) ++timeouts[t];
        if (!same_result(r, serial[d * nq + q])) ++mismatches[t];
      }
    });
  }
  for (auto& w : workers) w.join();
  int total_mismatches = 0, total_timeouts = 0;
  for (int t = 0; t < threads; ++t) {
    total_mismatches += mismatches[t];
    total_timeouts += timeouts[t];
  }
  EXPECT_EQ(total_mismatches, 0);
  EXPECT_GT(total_timeouts, 100);
  PoolStats s = pool.stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.open, s.opened_total - s.closed_total);
  EXPECT_LE(s.open, nd * threads);
  EXPECT_EQ(s.executions, nq * nd + threads * per_thread);
  EXPECT_EQ(s.databases, nd);
  pool.close_idle();
  EXPECT_EQ(pool.stats().open, 0u);
}

}  // namespace
}  // namespace sqlrl::sql

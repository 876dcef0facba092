// Queries per second through the SQL pool (1, 2, 8 workers) on a generated ~100 MB database with
// a mixed query set, each result compared with its gold result (BIRD set semantics), as an RL
// step does; in process (second argument 0) and through the sandbox's worker processes (1: the
// trainer's setting, sql/exec/sandbox.h, as many worker processes as threads). Peer: bench/sql_pool_peer.py (Python sqlite3 loop, same database, queries and
// comparisons). The database is built once at $SQLRL_BENCH_DB (default /tmp/sqlrl_bench_pool.sqlite).
#include <benchmark/benchmark.h>
#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>

#include "runtime/error.h"
#include "runtime/thread_pool.h"
#include "sql/exec/compare.h"
#include "sql/exec/pool.h"

namespace {

using namespace sqlrl;

// Same script as bench/sql_pool_peer.py: 1,000,000 events (~100 bytes each) over 10,000 users.
const char* kBuildScript = R"sql(
CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT, country TEXT);
CREATE TABLE events(id INTEGER PRIMARY KEY, user_id INTEGER, kind TEXT, amount REAL, note TEXT);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 10000)
INSERT INTO users SELECT i, 'user_' || i, 'country_' || (i % 50) FROM c;
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 1000000)
INSERT INTO events SELECT i, (i * 7919) % 10000 + 1, 'kind_' || (i % 13), (i % 1000) * 0.25,
  printf('%080d', i) FROM c;
CREATE INDEX events_user ON events(user_id);
)sql";

std::string bench_db() {
  const char* env = std::getenv("SQLRL_BENCH_DB");
  std::string path = env ? env : "/tmp/sqlrl_bench_pool.sqlite";
  if (std::filesystem::exists(path)) return path;
  std::string tmp = path + ".tmp";
  std::filesystem::remove(tmp);
  sqlite3* db = nullptr;
  check(sqlite3_open(tmp.c_str(), &db) == SQLITE_OK, "cannot create ", tmp);
  char* message = nullptr;
  int rc = sqlite3_exec(db, kBuildScript, nullptr, nullptr, &message);
  std::string error = message ? message : "";
  sqlite3_free(message);
  sqlite3_close(db);
  check(rc == SQLITE_OK, "building ", tmp, ": ", error);
  std::filesystem::rename(tmp, path);
  return path;
}

// Query i of the mix (same formula as the peer): predicted SQL and its gold SQL.
std::pair<std::string, std::string> query(int i) {
  int k = (i * 2654435761u) % 9973 + 1;
  switch (i % 6) {
    case 0: return {str_cat("SELECT * FROM events WHERE id = ", k * 97), str_cat("SELECT * FROM events WHERE id = ", k * 97)};
    case 1: return {str_cat("SELECT count(*), sum(amount) FROM events WHERE user_id = ", k),
                    str_cat("SELECT count(id), total(amount) FROM events WHERE user_id = ", k)};
    case 2: return {str_cat("SELECT kind, count(*) FROM events WHERE user_id BETWEEN ", k, " AND ", k + 3, " GROUP BY kind"),
                    str_cat("SELECT kind, count(*) FROM events WHERE user_id BETWEEN ", k, " AND ", k + 3, " GROUP BY kind ORDER BY kind")};
    case 3: return {str_cat("SELECT u.name, e.amount FROM users u JOIN events e ON e.user_id = u.id WHERE u.id = ", k, " ORDER BY e.id LIMIT 20"),
                    str_cat("SELECT u.name, e.amount FROM events e JOIN users u ON e.user_id = u.id WHERE u.id = ", k, " ORDER BY e.id LIMIT 20")};
    case 4: return {str_cat("SELECT note FROM events WHERE id BETWEEN ", k * 50, " AND ", k * 50 + 40),
                    str_cat("SELECT note FROM events WHERE id >= ", k * 50, " AND id <= ", k * 50 + 40)};
    default: return {str_cat("SELECT missing_column FROM users WHERE id = ", k), str_cat("SELECT name FROM users WHERE id = ", k)};
  }
}

constexpr int kQueries = 3000;

// One benchmark row's world: threads (range 0), the pool in process or sandboxed (range 1) with
// as many workers, and the gold results cached per (db, SQL) as in training, computed outside
// the timing.
struct Setup {
  std::string db = bench_db();
  ThreadPool threads;
  sql::Pool pool;
  sql::GoldCache gold;
  static sql::PoolOptions options(const benchmark::State& state) {
    sql::PoolOptions o;
    o.sandbox = state.range(1) != 0;
    o.sandbox_options.worker_binary = SQLRL_BINARY;
    o.sandbox_options.workers = static_cast<size_t>(state.range(0));
    return o;
  }
  explicit Setup(const benchmark::State& state)
      : threads(static_cast<size_t>(state.range(0))), pool(options(state), &threads), gold(pool) {
    for (int i = 0; i < kQueries; ++i) gold.get(db, query(i).second);
  }
};

void BM_PoolQueriesCompared(benchmark::State& state) {
  Setup setup(state);
  const std::string& db = setup.db;
  ThreadPool& threads = setup.threads;
  sql::Pool& pool = setup.pool;
  sql::GoldCache& gold = setup.gold;
  int64_t matches = 0;
  for (auto _ : state) {
    std::vector<std::future<bool>> done;
    done.reserve(kQueries);
    for (int i = 0; i < kQueries; ++i) {
      done.push_back(threads.submit([&, i] {
        auto [pred_sql, gold_sql] = query(i);
        sql::Result pred = pool.execute(db, pred_sql);
        return sql::results_match(pred, *gold.get(db, gold_sql), {sql::CompareMode::BirdSet, false, 0});
      }));
    }
    matches = 0;
    for (auto& f : done) matches += f.get();
  }
  state.SetItemsProcessed(state.iterations() * kQueries);
  state.counters["matches"] = static_cast<double>(matches);
  state.counters["connections"] = static_cast<double>(pool.stats().opened_total);
}
BENCHMARK(BM_PoolQueriesCompared)
    ->ArgsProduct({{1, 2, 8}, {0, 1}})
    ->ArgNames({"threads", "sandbox"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The same queries handed to Pool::submit all at once, as the trainer's scoring does (each
// result compared on the caller's thread as it arrives): with the sandbox, queries waiting
// together go to a worker in one request (Pool::kMaxBatch).
void BM_PoolQueriesSubmitted(benchmark::State& state) {
  Setup setup(state);
  const std::string& db = setup.db;
  sql::Pool& pool = setup.pool;
  sql::GoldCache& gold = setup.gold;
  const size_t setup_trips = pool.stats().sandbox_round_trips;
  int64_t matches = 0;
  for (auto _ : state) {
    std::vector<std::future<sql::Result>> pending;
    pending.reserve(kQueries);
    for (int i = 0; i < kQueries; ++i) pending.push_back(pool.submit(db, query(i).first));
    matches = 0;
    for (int i = 0; i < kQueries; ++i)
      matches += sql::results_match(pending[i].get(), *gold.get(db, query(i).second), {sql::CompareMode::BirdSet, false, 0});
  }
  state.SetItemsProcessed(state.iterations() * kQueries);
  state.counters["matches"] = static_cast<double>(matches);
  state.counters["round_trips"] = static_cast<double>(pool.stats().sandbox_round_trips - setup_trips) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_PoolQueriesSubmitted)
    ->ArgsProduct({{1, 2, 8}, {0, 1}})
    ->ArgNames({"threads", "sandbox"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

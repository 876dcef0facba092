#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <chrono>
#include <future>
#include <thread>

#include <unistd.h>

#include "sql/exec/compare.h"
#include "sql/exec/pool.h"
#include "tests/sql/pool_test_db.h"
#include "tests/test_util.h"

namespace sqlrl::sql {
namespace {

using testing::file_bytes;
using testing::make_db;
using testing::shop_db;

TEST(SqlPool, SelectReturnsTypedCellsNamesAndDeclTypes) {
  Pool pool;
  Result r = pool.execute(shop_db(), "SELECT id, name, price, price * 2 AS twice FROM products ORDER BY id");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.columns, (std::vector<std::string>{"id", "name", "price", "twice"}));
  EXPECT_EQ(r.decltypes, (std::vector<std::string>{"INTEGER", "TEXT", "REAL", ""}));
  ASSERT_EQ(r.rows.size(), 4u);
  EXPECT_EQ(r.rows[0][0].type, CellType::Integer);
  EXPECT_EQ(r.rows[0][0].integer, 1);
  EXPECT_EQ(r.rows[0][1].text, "apple");
  EXPECT_EQ(r.rows[0][2].type, CellType::Real);
  EXPECT_EQ(r.rows[0][2].real, 1.5);
  EXPECT_EQ(r.rows[3][2].type, CellType::Null);
  EXPECT_FALSE(r.truncated);
  EXPECT_FALSE(r.timed_out);
}

TEST(SqlPool, ErrorIsSqlitesOwnMessage) {
  Pool pool;
  Result r = pool.execute(shop_db(), "SELECT x FROM products");
  EXPECT_EQ(r.error, "no such column: x");
  Result t = pool.execute(shop_db(), "SELECT * FROM nope");
  EXPECT_EQ(t.error, "no such table: nope");
}

// Unbound parameters would run as NULL and could match an empty gold result (a reward for no
// real query): each spelling SQLite accepts is an error naming the first parameter, and a query
// with the value written in runs.
TEST(SqlPool, UnboundParametersAreAnError) {
  Pool pool;
  for (const char* p : {"?", "?1", ":name", "@name", "$name"}) {
    Result r = pool.execute(shop_db(), std::string("SELECT id FROM products WHERE name = ") + p);
    EXPECT_FALSE(r.ok()) << p;
    EXPECT_NE(r.error.find("unbound parameter"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find(p), std::string::npos) << r.error;
    EXPECT_TRUE(r.rows.empty());
  }
  Result two = pool.execute(shop_db(), "SELECT id FROM products WHERE name = :a OR price > :b");
  EXPECT_NE(two.error.find("2 unbound parameters (:a, ...)"), std::string::npos) << two.error;
  Result literal = pool.execute(shop_db(), "SELECT id FROM products WHERE name = '$name' OR name = ':x?'");
  EXPECT_TRUE(literal.ok()) << literal.error;  // inside a string literal they are just text
}

TEST(SqlPool, RecursiveCteStopsAtWallClockTimeout) {
  Pool pool;
  Limits limits;
  limits.timeout_ms = 200;
  limits.max_rows = 1;  // the count() keeps it from producing rows: only the clock can stop it
  auto start = std::chrono::steady_clock::now();
  Result r = pool.execute(shop_db(),
                          "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(x) FROM c",
                          limits);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.error, "timeout after 200 ms");
  EXPECT_GE(ms, 195.0);
  EXPECT_LT(ms, 1500.0);
  EXPECT_EQ(pool.stats().timeouts, 1u);
}

TEST(SqlPool, RecursiveCteReturningRowsStopsAtRowCap) {
  Pool pool;
  Limits limits;
  limits.max_rows = 1000;
  Result r = pool.execute(shop_db(), "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT x FROM c",
                          limits);
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(r.truncated);
  ASSERT_EQ(r.rows.size(), 1000u);
  EXPECT_EQ(r.rows.back()[0].integer, 1000);
}

TEST(SqlPool, VmStepBudgetIsDeterministic) {
  Pool pool;
  Limits limits;
  limits.timeout_ms = 0;
  limits.max_vm_steps = 50000;
  const char* sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(x) FROM c";
  Result a = pool.execute(shop_db(), sql, limits);
  Result b = pool.execute(shop_db(), sql, limits);
  EXPECT_TRUE(a.timed_out);
  EXPECT_EQ(a.error, "timeout after 50000 VM steps");
  EXPECT_EQ(a.vm_steps, b.vm_steps);
  EXPECT_GE(a.vm_steps, 49000);
  EXPECT_LE(a.vm_steps, 51000);
  // A query under budget is unaffected.
  Result c = pool.execute(shop_db(), "SELECT count(*) FROM products", limits);
  ASSERT_TRUE(c.ok()) << c.error;
  EXPECT_EQ(c.rows[0][0].integer, 4);
}

TEST(SqlPool, CrossJoinStopsAtRowAndByteCaps) {
  // 10^4 x 10^4 = 10^8 rows: only the caps stop it in time.
  std::string db = make_db("big_cross.sqlite", R"sql(
    CREATE TABLE t(x INTEGER, pad TEXT);
    WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 10000)
    INSERT INTO t SELECT i, 'abcdefghij' FROM c;
  )sql");
  Pool pool;
  Limits rows_cap;
  rows_cap.max_rows = 5000;
  Result r = pool.execute(db, "SELECT a.x, b.x FROM t a, t b", rows_cap);
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.rows.size(), 5000u);

  Limits bytes_cap;
  bytes_cap.max_rows = 100000000;
  bytes_cap.max_result_bytes = 100000;
  // Each row: the row, two cells and 10 + 10 bytes of text.
  const size_t row = sizeof(Row) + 2 * sizeof(Cell) + 20;
  Result b = pool.execute(db, "SELECT a.pad, b.pad FROM t a, t b", bytes_cap);
  EXPECT_TRUE(b.truncated);
  EXPECT_EQ(b.rows.size(), 100000 / row);
  EXPECT_EQ(b.result_bytes, 100000 / row * row);
  EXPECT_EQ(b.truncation, "more than 100000 bytes of rows");
}

// Cells cost memory whatever they hold: 2,000 '' (or NULL) columns of 10,000 rows came from a
// 6 KB query and took 4 GiB (3.5 GiB) under the 16 MiB default when '' counted 0 bytes and NULL
// 1. Now the rows stop where their memory reaches the cap.
TEST(SqlPool, WideRowsOfEmptyCellsStopAtTheByteCap) {
  Pool pool;
  const Limits limits;
  const int columns = 2000;
  const size_t row = sizeof(Row) + columns * sizeof(Cell);
  for (const char* cell : {"''", "NULL"}) {
    std::string sql = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 10000) SELECT ";
    for (int k = 0; k < columns; ++k) sql += k ? std::string(", ") + cell : std::string(cell);
    sql += " FROM c";
    Result r = pool.execute(shop_db(), sql, limits);
    ASSERT_TRUE(r.ok()) << cell << ": " << r.error;
    EXPECT_TRUE(r.truncated) << cell;
    EXPECT_EQ(r.rows.size(), limits.max_result_bytes / row) << cell;
    EXPECT_LE(r.result_bytes, limits.max_result_bytes) << cell;
  }
}

// VmHWM (peak resident set) in bytes, after writing "5" to clear_refs reset it to the current RSS.
int64_t proc_status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field)));
  return -1;
}
bool reset_peak_rss() { return static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5"); }

// Each of these took 0.5-4 GB and seconds past a 500 ms timeout before the limits (the step-based
// timeout cannot interrupt one allocation): now each ends with an error naming the limit, long
// before its timeout, and four of them at once on the pool's workers keep the process within
// four per-query caps. Catches: no SQLITE_LIMIT_LENGTH (the first three allocate a gigabyte), no
// per-statement count (the sort and the CTE grow until the process-wide 4 GiB heap limit), a count
// shared by all threads (the concurrent ones fail each other or pass the cap together).
TEST(SqlPool, HostileQueriesStopAtTheMemoryLimitsWithAnError) {
  std::string db = make_db("hostile_memory.sqlite", R"sql(
    CREATE TABLE t(x INTEGER, pad TEXT);
    WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 1200)
    INSERT INTO t SELECT i, printf('%040d', i) FROM c;
  )sql");
  Limits limits;
  limits.timeout_ms = 60000;  // only the memory limits can stop these in time
  limits.max_query_memory_bytes = int64_t(64) << 20;
  const std::vector<std::pair<std::string, std::string>> hostile = {
      {"SELECT zeroblob(1000000000)", "too big"},
      {"SELECT randomblob(900000000)", "too big"},
      {"WITH RECURSIVE d(s) AS (SELECT 'xx' UNION ALL SELECT s || s FROM d) SELECT length(s) FROM d", "too big"},
      // 1.44e6 rows of 80 bytes to sort, or to keep distinct: ~130 MB each without the cap.
      {"SELECT a.pad || b.pad AS k FROM t a, t b ORDER BY k DESC", "per-query memory limit"},
      {"SELECT count(DISTINCT a.pad || b.pad) FROM t a, t b", "per-query memory limit"},
  };
  Pool pool;
  ASSERT_TRUE(pool.execute(db, "SELECT count(*) FROM t", limits).ok());
  const bool peak_reset = reset_peak_rss();
  const int64_t rss_before = proc_status_kb("VmRSS:");
  for (const auto& [sql, why] : hostile) {
    Result r = pool.execute(db, sql, limits);
    EXPECT_FALSE(r.ok()) << sql;
    EXPECT_FALSE(r.timed_out) << sql;
    EXPECT_NE(r.error.find(why), std::string::npos) << sql << ": " << r.error;
    std::printf("%-90s %7.0f ms  %s\n", sql.c_str(), r.elapsed_ms, r.error.c_str());
  }
  // printf's repeat count is a loop inside one function call in SQLite 3.40 (Debian 12): no limit
  // stops it early, but SQLITE_LIMIT_LENGTH keeps its memory at the cap and it returns NULL.
  Result repeat = pool.execute(db, "SELECT printf('%.*c', 100000000, 'x')", limits);
  ASSERT_TRUE(repeat.ok()) << repeat.error;
  EXPECT_TRUE(repeat.rows[0][0].is_null());
  std::vector<std::future<Result>> together;
  for (int i = 0; i < 4; ++i) together.push_back(pool.submit(db, hostile[4].first, limits));
  for (auto& f : together) {
    Result r = f.get();
    EXPECT_NE(r.error.find("per-query memory limit"), std::string::npos) << r.error;
  }
  // The same connection still answers.
  Result after = pool.execute(db, "SELECT count(*) FROM t", limits);
  ASSERT_TRUE(after.ok()) << after.error;
  EXPECT_EQ(after.rows[0][0].integer, 1200);
  if (kAddressSanitizer) std::printf("peak RSS not checked: AddressSanitizer build (quarantine, shadow memory)\n");
  if (peak_reset && !kAddressSanitizer) {
    const int64_t grew_mb = (proc_status_kb("VmHWM:") - rss_before) / 1024;
    std::printf("peak RSS grew by %lld MiB (four queries at a 64 MiB cap each)\n", static_cast<long long>(grew_mb));
    // Four caps at once, plus the main thread's malloc arena, which keeps the pages of the
    // sequential queries above for reuse (one cap).
    EXPECT_LE(grew_mb, 5 * 64 + 32);
  }
  // A query under the caps is untouched by them.
  Result fine = pool.execute(db, "SELECT a.x FROM t a, t b WHERE a.x = b.x ORDER BY a.pad DESC LIMIT 2", limits);
  ASSERT_TRUE(fine.ok()) << fine.error;
  EXPECT_EQ(fine.rows[0][0].integer, 1200);
}

// The official-script limits leave SQLite's own: a 2 MB value runs there and is refused under
// the rollout defaults.
TEST(SqlPool, OfficialScriptLimitsLeaveSqlitesOwn) {
  Pool pool;
  Result capped = pool.execute(shop_db(), "SELECT length(zeroblob(2000000))");
  EXPECT_NE(capped.error.find("too big"), std::string::npos) << capped.error;
  Result official = pool.execute(shop_db(), "SELECT length(zeroblob(2000000))", official_script_limits(5000));
  ASSERT_TRUE(official.ok()) << official.error;
  EXPECT_EQ(official.rows[0][0].integer, 2000000);
  // and the rollout's caps come back on the same connection
  Result again = pool.execute(shop_db(), "SELECT length(zeroblob(2000000))");
  EXPECT_NE(again.error.find("too big"), std::string::npos) << again.error;
}

// The official scripts have no memory cap; ours keep their limits but for two (OfficialCaps): a
// query's memory inside SQLite (a 30 MB blob and its 60 MB hex text against a 64 MiB cap fail at
// once, where a roomier cap runs them) and its rows (an endless CTE stops at the byte cap, truncated,
// instead of fetching until the clock). Catches the caps not reaching the official limits.
TEST(SqlPool, OfficialScriptLimitsCapAQuerysMemoryAndRows) {
  Pool pool;
  OfficialCaps caps;
  caps.query_memory_bytes = int64_t(64) << 20;
  caps.result_bytes = size_t(1) << 20;
  const std::string concat = "SELECT length(hex(zeroblob(30000000)))";
  Result big = pool.execute(shop_db(), concat, official_script_limits(20000, caps));
  EXPECT_FALSE(big.ok());
  EXPECT_FALSE(big.infra_error) << "the per-query cap is the query's own limit: " << big.error;
  OfficialCaps roomy;
  roomy.query_memory_bytes = int64_t(512) << 20;
  Result fits = pool.execute(shop_db(), concat, official_script_limits(20000, roomy));
  ASSERT_TRUE(fits.ok()) << fits.error;
  EXPECT_EQ(fits.rows[0][0].integer, 60000000);
  const auto start = std::chrono::steady_clock::now();
  Result endless = pool.execute(shop_db(), "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x FROM c) SELECT x FROM c",
                                official_script_limits(20000, caps));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(endless.ok()) << endless.error;
  EXPECT_TRUE(endless.truncated);
  EXPECT_LE(endless.result_bytes, caps.result_bytes);
  EXPECT_LT(seconds, 10.0);
}

// A LIKE is one VM step however long its matcher runs (pattern x string), so neither the wall
// clock nor the step budget stopped this one (a probe: 112 s under a 200 ms timeout). The pattern
// cap refuses it at once; the official-script limits keep SQLite's own cap (50,000 bytes).
TEST(SqlPool, LongLikePatternsAreRefusedBeforeTheyRun) {
  Pool pool;
  Limits limits;
  limits.timeout_ms = 200;
  const std::string hostile =
      "SELECT replace(hex(zeroblob(500000)),'0','a') LIKE ('%' || replace(hex(zeroblob(24995)),'0','a') || 'b')";
  const auto start = std::chrono::steady_clock::now();
  Result r = pool.execute(shop_db(), hostile, limits);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.error.find("pattern too complex"), std::string::npos) << r.error;
  EXPECT_LT(seconds, 5.0);
  // At the cap a pattern runs; one byte over it does not, GLOB included.
  const std::string at_cap = "SELECT 'abc' LIKE '" + std::string(limits.max_like_pattern_bytes - 1, '_') + "%'";
  Result fits = pool.execute(shop_db(), at_cap, limits);
  ASSERT_TRUE(fits.ok()) << fits.error;
  EXPECT_EQ(fits.rows[0][0].integer, 0);
  const std::string over = "SELECT 'abc' GLOB '" + std::string(limits.max_like_pattern_bytes, '?') + "*'";
  EXPECT_NE(pool.execute(shop_db(), over, limits).error.find("pattern too complex"), std::string::npos);
  Result official = pool.execute(shop_db(), over, official_script_limits(5000));
  ASSERT_TRUE(official.ok()) << official.error;
  EXPECT_EQ(official.rows[0][0].integer, 0);
}

// fts3_tokenizer (Debian's libsqlite3 has ENABLE_FTS3_TOKENIZER): with one argument it returns a
// module's address, with two it plants a pointer a later FTS3 query calls (a probe crashed the
// trainer at 0x4141414141414141). Both forms are refused, on a fresh connection and after other
// queries on a pooled one.
TEST(SqlPool, Fts3TokenizerIsRefusedInBothForms) {
  Pool pool;
  for (int round = 0; round < 2; ++round) {
    Result leak = pool.execute(shop_db(), "SELECT fts3_tokenizer('simple')");
    EXPECT_EQ(leak.error, "not authorized: fts3_tokenizer() is refused (it reads and sets native function pointers)");
    EXPECT_TRUE(leak.rows.empty());
    Result plant = pool.execute(shop_db(), "SELECT fts3_tokenizer('simple', x'4141414141414141')");
    EXPECT_EQ(plant.error, leak.error);
    Result upper = pool.execute(shop_db(), "SELECT FTS3_Tokenizer('porter')");
    EXPECT_EQ(upper.error, leak.error);
    ASSERT_TRUE(pool.execute(shop_db(), "SELECT count(*) FROM products").ok());
  }
}

TEST(SqlPool, WritesDdlAttachPragmasAndExtensionsAreRefusedAndFileIsUnchanged) {
  std::string db = make_db("guarded.sqlite", "CREATE TABLE t(x INTEGER); CREATE INDEX tx ON t(x); INSERT INTO t VALUES (1),(2);");
  std::string before = file_bytes(db);
  Pool pool;
  const char* attempts[] = {
      "INSERT INTO t VALUES (3)",
      "UPDATE t SET x = 5",
      "DELETE FROM t",
      "DROP TABLE t",
      "CREATE TABLE u(y)",
      "CREATE TEMP TABLE u(y)",
      "ALTER TABLE t ADD COLUMN z",
      "ATTACH DATABASE ':memory:' AS other",
      "DETACH DATABASE main",
      "PRAGMA journal_mode=WAL",
      "PRAGMA user_version=7",
      "SELECT load_extension('/tmp/evil.so')",
      "SELECT fts3_tokenizer('simple')",
      "VACUUM INTO '/tmp/sqlrl_vacuum_copy.sqlite'",
      "VACUUM",
      "BEGIN",
      "COMMIT",
      "SAVEPOINT s",
      "REINDEX",
      "ANALYZE",
      "CREATE INDEX i ON t(x)",
      "CREATE VIEW v AS SELECT 1",
      "PRAGMA writable_schema=1",
  };
  for (const char* sql : attempts) {
    Result r = pool.execute(db, sql);
    EXPECT_FALSE(r.ok()) << sql;
    EXPECT_NE(r.error.find("not authorized"), std::string::npos) << sql << " -> " << r.error;
  }
  EXPECT_FALSE(std::filesystem::exists("/tmp/sqlrl_vacuum_copy.sqlite"));
  // SQLite itself refuses this one before the authorizer is asked.
  EXPECT_EQ(pool.execute(db, "UPDATE sqlite_master SET sql = 'x'").error, "table sqlite_master may not be modified");
  Result insert = pool.execute(db, "INSERT INTO t VALUES (3)");
  EXPECT_EQ(insert.error, "not authorized: INSERT is refused (the database is read-only)");
  Result pragma = pool.execute(db, "PRAGMA journal_mode=WAL");
  EXPECT_EQ(pragma.error, "not authorized: PRAGMA journal_mode=WAL is refused (only read-only PRAGMAs run)");
  pool.close_idle();
  EXPECT_EQ(file_bytes(db), before);
  Result count = pool.execute(db, "SELECT count(*) FROM t");
  ASSERT_TRUE(count.ok()) << count.error;
  EXPECT_EQ(count.rows[0][0].integer, 2);
}

TEST(SqlPool, ReadOnlyPragmasRun) {
  Pool pool;
  Result info = pool.execute(shop_db(), "PRAGMA table_info(products)");
  ASSERT_TRUE(info.ok()) << info.error;
  EXPECT_EQ(info.rows.size(), 4u);
  Result fks = pool.execute(shop_db(), "PRAGMA foreign_key_list(orders)");
  ASSERT_TRUE(fks.ok()) << fks.error;
  ASSERT_EQ(fks.rows.size(), 1u);
  Result idx = pool.execute(shop_db(), "PRAGMA index_list('products')");
  EXPECT_TRUE(idx.ok()) << idx.error;
  Result fn = pool.execute(shop_db(), "SELECT name FROM pragma_table_info('orders') ORDER BY cid");
  ASSERT_TRUE(fn.ok()) << fn.error;
  EXPECT_EQ(fn.rows.size(), 3u);
}

TEST(SqlPool, OnlyFirstStatementRunsAndTheRestIsReported) {
  Pool pool;
  Result r = pool.execute(shop_db(), "SELECT 1; DROP TABLE products; -- bye");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.ignored_tail, "DROP TABLE products; -- bye");
  Result trailing = pool.execute(shop_db(), "SELECT 1;  -- comment\n /* block */ ;\n");
  EXPECT_EQ(trailing.ignored_tail, "");
  Result empty = pool.execute(shop_db(), "  -- nothing");
  EXPECT_FALSE(empty.ok());
}

TEST(SqlPool, SqlLengthLimit) {
  Pool pool;
  Limits limits;
  limits.max_sql_bytes = 10;
  Result r = pool.execute(shop_db(), "SELECT 1 + 1 + 1", limits);
  EXPECT_EQ(r.error, "SQL too long: 16 bytes, limit 10");
}

TEST(SqlPool, MissingAndCorruptDatabasesNameThePath) {
  Pool pool;
  std::string missing = testing::temp_dir() + "/does_not_exist.sqlite";
  Result r = pool.execute(missing, "SELECT 1");
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find(missing), std::string::npos) << r.error;
  EXPECT_FALSE(std::filesystem::exists(missing));

  std::string corrupt = testing::temp_dir() + "/corrupt.sqlite";
  {
    std::ofstream out(corrupt, std::ios::binary);
    out << std::string(8192, 'x');
  }
  Result c = pool.execute(corrupt, "SELECT 1");
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.error.find(corrupt), std::string::npos) << c.error;
  EXPECT_NE(c.error.find("not a database"), std::string::npos) << c.error;
  PoolStats s = pool.stats();
  EXPECT_EQ(s.open, 0u);
  EXPECT_EQ(s.in_use, 0u);
}

// Result::infra_error: the machine's failures are marked, the query's are not. Unreadable files
// are made without permissions (root reads a chmod 000 file): a directory in the file's place,
// and a database overwritten in place (same inode) while the pool holds an open connection to
// it, which is what a file going bad mid-run looks like to a connection opened before. (Deleting
// or renaming the file is not a failure for an open connection: it keeps reading the old inode.)
TEST(SqlPool, FailuresAreClassifiedAsTheModelsOrTheInfrastructures) {
  Pool pool;
  auto expect_infra = [](const Result& r, bool infra, const std::string& what) {
    EXPECT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.infra_error, infra) << what << ": " << r.error;
  };
  // The model's.
  expect_infra(pool.execute(shop_db(), "SELEC 1"), false, "syntax error");
  expect_infra(pool.execute(shop_db(), "SELECT x FROM products"), false, "no such column");
  expect_infra(pool.execute(shop_db(), "DELETE FROM products"), false, "authorizer refusal");
  expect_infra(pool.execute(shop_db(), "SELECT length(zeroblob(2000000))"), false, "value too big");
  const char* endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(x) FROM c";
  Limits steps;
  steps.timeout_ms = 0;
  steps.max_vm_steps = 50000;
  expect_infra(pool.execute(shop_db(), endless, steps), false, "VM-step budget");
  Limits clock_only;
  clock_only.timeout_ms = 50;
  expect_infra(pool.execute(shop_db(), endless, clock_only), false, "wall clock as the only budget");
  // The infrastructure's: the clock fires before a step budget the query would have reached.
  Limits both;
  both.timeout_ms = 50;
  both.max_vm_steps = int64_t(1) << 60;
  Result slow = pool.execute(shop_db(), endless, both);
  EXPECT_TRUE(slow.timed_out);
  EXPECT_EQ(slow.error, "timeout after 50 ms");
  expect_infra(slow, true, "wall clock under a step budget");

  std::string missing = testing::temp_dir() + "/infra_missing.sqlite";
  expect_infra(pool.execute(missing, "SELECT 1"), true, "missing file");
  std::string dir = testing::temp_dir() + "/infra_dir.sqlite";
  std::filesystem::create_directories(dir);
  expect_infra(pool.execute(dir, "SELECT 1"), true, "a directory in the file's place");

  std::string db = make_db("infra_goes_bad.sqlite", "CREATE TABLE t(x INTEGER); INSERT INTO t VALUES (1),(2);");
  ASSERT_TRUE(pool.execute(db, "SELECT count(*) FROM t").ok());
  ASSERT_EQ(pool.stats().open, 1u + 1u);  // shop and this one: the connection stays open
  const size_t size = std::filesystem::file_size(db);
  {
    std::fstream out(db, std::ios::binary | std::ios::in | std::ios::out);  // no truncation: same inode
    out << std::string(size, '\xff');
  }
  const size_t opened = pool.stats().opened_total;
  Result bad = pool.execute(db, "SELECT count(*) FROM t");
  expect_infra(bad, true, "overwritten under an open connection");
  EXPECT_EQ(pool.stats().opened_total, opened);  // it was the connection opened before
  std::printf("overwritten under an open connection: %s\n", bad.error.c_str());
  Result reopened = pool.execute(db, "SELECT count(*) FROM t");
  expect_infra(reopened, true, "overwritten, on a new connection");
  if (::geteuid() != 0) {
    std::string locked = make_db("infra_locked.sqlite", "CREATE TABLE t(x INTEGER);");
    std::filesystem::permissions(locked, std::filesystem::perms::none);
    expect_infra(pool.execute(locked, "SELECT 1"), true, "chmod 000");
  } else {
    std::printf("chmod 000 not checked: running as root, which reads the file anyway\n");
  }
  EXPECT_GE(pool.stats().infra_errors, 5u);
}

TEST(SqlPool, SubmitRunsOnWorkersAndReturnsConnections) {
  ThreadPool workers(4);
  Pool pool(PoolOptions{}, &workers);
  std::vector<std::future<Result>> futures;
  for (int i = 0; i < 50; ++i) futures.push_back(pool.submit(shop_db(), "SELECT count(*) FROM orders"));
  for (auto& f : futures) {
    Result r = f.get();
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.rows[0][0].integer, 4);
  }
  PoolStats s = pool.stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_LE(s.open, 5u);  // at most one per worker thread plus the caller
  EXPECT_EQ(s.executions, 50u);
}

TEST(SqlPool, MaxConnectionsPerDbMakesCallersWait) {
  PoolOptions options;
  options.max_connections_per_db = 2;
  ThreadPool workers(6);
  Pool pool(options, &workers);
  std::vector<std::future<Result>> futures;
  for (int i = 0; i < 24; ++i)
    futures.push_back(pool.submit(shop_db(), "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 20000) SELECT sum(x) FROM c"));
  for (auto& f : futures) {
    Result r = f.get();
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.rows[0][0].integer, 200010000);  // 20000 * 20001 / 2
  }
  PoolStats s = pool.stats();
  EXPECT_LE(s.opened_total, 2u);
  EXPECT_EQ(s.in_use, 0u);
}

// The default pool's threads all busy (what a batched decode step does to it): a query
// submitted to a Pool built without a worker pool still runs, on the Pool's own threads.
TEST(SqlPool, SubmitRunsWhileTheDefaultThreadPoolIsFullyBusy) {
  ThreadPool& shared = default_thread_pool();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<size_t> started{0};
  std::vector<std::future<void>> blockers;
  for (size_t i = 0; i < shared.size(); ++i)
    blockers.push_back(shared.submit([&started, released] {
      ++started;
      released.wait();
    }));
  while (started.load() < shared.size()) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  Pool pool;
  std::future<Result> f = pool.submit(shop_db(), "SELECT count(*) FROM orders");
  // Generous: the query takes well under a millisecond; on the shared pool it would never start
  // before the release below.
  bool ran = f.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  release.set_value();
  for (auto& b : blockers) b.get();
  ASSERT_TRUE(ran) << "the SQL job waited behind the default thread pool's jobs";
  Result r = f.get();
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.rows[0][0].integer, 4);
}

TEST(SqlPool, GivenWorkerPoolRunsTheJobs) {
  ThreadPool workers(1);
  Pool pool(PoolOptions{}, &workers);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::future<void> blocker = workers.submit([released] { released.wait(); });
  std::future<Result> f = pool.submit(shop_db(), "SELECT count(*) FROM orders");
  // The only worker is blocked, so the query is queued on `workers` and cannot have run.
  EXPECT_EQ(f.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  release.set_value();
  blocker.get();
  Result r = f.get();
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.rows[0][0].integer, 4);
}

}  // namespace
}  // namespace sqlrl::sql

// Connections are opened read-only (mode=ro, immutable=1 unless told otherwise), with defensive
// mode, no ATTACH slots, no extension loading, temp storage in memory with a page cap, and the
// read-only authorizer. Limits are enforced inside SQLite by a progress handler, so a runaway
// query stops where it runs instead of being abandoned by a timer (SkyRL #683).
#include "sql/exec/pool.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/error.h"
#include "sql/exec/authorizer.h"

namespace sqlrl::sql {

namespace {

using Clock = std::chrono::steady_clock;

// Opcodes between progress callbacks: fine enough that a 1 ms deadline is honoured, coarse enough
// that the clock read costs nothing measurable.
constexpr int kProgressPeriod = 1000;

std::string uri_for(const std::string& path, bool immutable) {
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (c == '%' || c == '?' || c == '#' || c <= ' ' || c >= 0x7f) {
      static const char* hex = "0123456789ABCDEF";
      uri += '%';
      uri += hex[c >> 4];
      uri += hex[c & 15];
    } else {
      uri += static_cast<char>(c);
    }
  }
  uri += "?mode=ro";
  if (immutable) uri += "&immutable=1";
  return uri;
}

// Whether anything but whitespace, semicolons and comments is left in a statement tail; counts
// the semicolons on the way.
std::string meaningful_tail(const char* tail, const char* end, int* semicolons) {
  const char* p = tail;
  while (p < end) {
    if (std::isspace(static_cast<unsigned char>(*p)) || *p == ';') {
      *semicolons += *p == ';';
      ++p;
    } else if (p + 1 < end && p[0] == '-' && p[1] == '-') {
      while (p < end && *p != '\n') ++p;
    } else if (p + 1 < end && p[0] == '/' && p[1] == '*') {
      const char* close = nullptr;
      for (const char* q = p + 2; q + 1 < end; ++q)
        if (q[0] == '*' && q[1] == '/') {
          close = q;
          break;
        }
      p = close ? close + 2 : end;
    } else {
      break;
    }
  }
  if (p >= end) return {};
  const char* e = end;
  while (e > p && std::isspace(static_cast<unsigned char>(e[-1]))) --e;
  return std::string(p, e);
}

// ---- Per-statement memory, counted per thread ---------------------------------------------------
// SQLite runs a statement on the thread that steps it (its sorter threads are off:
// SQLITE_LIMIT_WORKER_THREADS 0), so the bytes a thread allocates, net of what it frees, from the
// start of run_statement to its end are that statement's. The process-wide hard heap limit cannot
// tell one pool worker's query from another's: four queries each near it would need four times
// it. Every SQLite allocation carries its size in a 16-byte header (keeps malloc's alignment),
// and is counted with that header and malloc's own (kOverhead): SQLite's sorter makes millions of
// ~100-byte allocations, where the overheads are a third of the resident memory.
struct StatementMemory {
  int64_t used = 0;  // net bytes allocated on this thread since the statement began
  int64_t cap = 0;   // 0 = none (outside a statement, or no cap asked)
  bool hit = false;  // an allocation was refused for the cap
};
thread_local StatementMemory t_statement;
constexpr size_t kHeader = 16;
constexpr int64_t kOverhead = kHeader + 16;

bool over_cap(int64_t more) {
  if (t_statement.cap <= 0 || more <= 0 || t_statement.used + more <= t_statement.cap) return false;
  t_statement.hit = true;
  return true;
}
void* counted_malloc(int n) {
  if (n <= 0 || over_cap(n + kOverhead)) return nullptr;
  auto* p = static_cast<char*>(std::malloc(kHeader + static_cast<size_t>(n)));
  if (!p) return nullptr;
  std::memcpy(p, &n, sizeof n);
  t_statement.used += n + kOverhead;
  return p + kHeader;
}
int counted_size(void* p) {
  if (!p) return 0;
  int n;
  std::memcpy(&n, static_cast<char*>(p) - kHeader, sizeof n);
  return n;
}
void counted_free(void* p) {
  if (!p) return;
  t_statement.used -= counted_size(p) + kOverhead;
  std::free(static_cast<char*>(p) - kHeader);
}
void* counted_realloc(void* p, int n) {
  if (!p) return counted_malloc(n);
  const int old = counted_size(p);
  if (n <= 0 || over_cap(static_cast<int64_t>(n) - old)) return nullptr;  // p stays valid
  auto* q = static_cast<char*>(std::realloc(static_cast<char*>(p) - kHeader, kHeader + static_cast<size_t>(n)));
  if (!q) return nullptr;
  std::memcpy(q, &n, sizeof n);
  t_statement.used += static_cast<int64_t>(n) - old;
  return q + kHeader;
}
int counted_roundup(int n) { return (n + 7) & ~7; }
int counted_init(void*) { return SQLITE_OK; }
void counted_shutdown(void*) {}

// Installed before main (sqlite3_config must precede sqlite3_initialize): a binary that links the
// pool gets counted allocations for every SQLite use, the unbounded ones included.
const bool g_counting_allocator = [] {
  static const sqlite3_mem_methods methods = {counted_malloc, counted_free,  counted_realloc, counted_size,
                                              counted_roundup, counted_init, counted_shutdown, nullptr};
  return sqlite3_config(SQLITE_CONFIG_MALLOC, &methods) == SQLITE_OK;
}();

void ensure_heap_limit(int64_t bytes) {
  if (bytes <= 0) return;
  static std::once_flag once;
  std::call_once(once, [bytes] {
    sqlite3_int64 current = sqlite3_hard_heap_limit64(-1);
    if (current == 0 || current > bytes) sqlite3_hard_heap_limit64(bytes);
  });
}

}  // namespace

struct Pool::Connection {
  sqlite3* db = nullptr;
  AuthorizerState auth;
  // Per-call limit state, read by the progress handler.
  Clock::time_point deadline{};
  bool has_deadline = false;
  int64_t max_steps = 0;
  int64_t steps = 0;
  std::string stop_reason;
  // SQLite's own values of the limits a call may set (restored when a call asks for none).
  int default_length = 0, default_expr_depth = 0, default_compound = 0, default_like_pattern = 0;

  ~Connection() {
    if (db) sqlite3_close_v2(db);
  }
};

namespace {

int progress_handler(void* user) {
  auto* c = static_cast<Pool::Connection*>(user);
  c->steps += kProgressPeriod;
  if (c->max_steps > 0 && c->steps >= c->max_steps) {
    c->stop_reason = str_cat("timeout after ", c->max_steps, " VM steps");
    return 1;
  }
  if (c->has_deadline && Clock::now() >= c->deadline) return 1;  // reason filled in by the caller
  return 0;
}

std::unique_ptr<Pool::Connection> open_connection(const std::string& path, const PoolOptions& options,
                                                  std::string& error) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    error = str_cat("cannot open database '", path, "': ", std::strerror(errno));
    return nullptr;
  }
  if (!S_ISREG(st.st_mode)) {
    error = str_cat("cannot open database '", path, "': not a regular file");
    return nullptr;
  }
  auto conn = std::make_unique<Pool::Connection>();
  std::string uri = uri_for(path, options.immutable);
  int rc = sqlite3_open_v2(uri.c_str(), &conn->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    error = str_cat("cannot open database '", path, "': ",
                    conn->db ? sqlite3_errmsg(conn->db) : sqlite3_errstr(rc));
    return nullptr;
  }
  sqlite3* db = conn->db;
  if (options.on_open) options.on_open(db);
  sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, nullptr);
  sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER, 0, nullptr);  // authorizer.cpp: why
  sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
  sqlite3_limit(db, SQLITE_LIMIT_WORKER_THREADS, 0);  // statements stay on their thread (StatementMemory)
  conn->default_length = sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1);
  conn->default_expr_depth = sqlite3_limit(db, SQLITE_LIMIT_EXPR_DEPTH, -1);
  conn->default_compound = sqlite3_limit(db, SQLITE_LIMIT_COMPOUND_SELECT, -1);
  conn->default_like_pattern = sqlite3_limit(db, SQLITE_LIMIT_LIKE_PATTERN_LENGTH, -1);
  std::string setup = str_cat("PRAGMA temp_store=MEMORY; PRAGMA mmap_size=", options.mmap_bytes,
                              "; PRAGMA cache_size=", options.cache_pages,
                              "; PRAGMA temp.max_page_count=", options.temp_max_pages,
                              "; SELECT count(*) FROM sqlite_master;");
  char* message = nullptr;
  rc = sqlite3_exec(db, setup.c_str(), nullptr, nullptr, &message);
  if (rc != SQLITE_OK) {
    error = str_cat("cannot open database '", path, "': ", message ? message : sqlite3_errstr(rc));
    sqlite3_free(message);
    return nullptr;
  }
  install_read_only_authorizer(db, &conn->auth);
  sqlite3_progress_handler(db, kProgressPeriod, progress_handler, conn.get());
  return conn;
}

// Errors after which a connection is not trusted again.
bool connection_broken(int rc) {
  int primary = rc & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB || primary == SQLITE_IOERR ||
         primary == SQLITE_CANTOPEN;
}

// Whether a statement that ended with SQLite code `rc` failed for the infrastructure's reason
// (the cases and why: Result::infra_error). wall_clock: the deadline stopped it (not the steps).
bool infrastructure_failure(int rc, bool wall_clock, bool memory_cap_hit, const Limits& limits) {
  const int primary = rc & 0xff;
  if (primary == SQLITE_INTERRUPT) return wall_clock && limits.max_vm_steps > 0;
  if (primary == SQLITE_NOMEM) return limits.max_query_memory_bytes > 0 && !memory_cap_hit;
  return connection_broken(rc) || primary == SQLITE_BUSY || primary == SQLITE_LOCKED || primary == SQLITE_SCHEMA;
}

// What a row of `ncols` cells holds in memory, its text and blob bytes aside (read_cell adds
// those): every cell costs a Cell, NULL and '' included (counting those as 1 and 0 bytes let
// 2,000 '' columns x 10,000 rows of a 6 KB query take 4 GiB under a 16 MiB cap).
size_t row_overhead_bytes(int ncols) { return sizeof(Row) + static_cast<size_t>(ncols) * sizeof(Cell); }

Cell read_cell(sqlite3_stmt* stmt, int i, size_t& bytes) {
  switch (sqlite3_column_type(stmt, i)) {
    case SQLITE_INTEGER:
      return Cell::of_integer(sqlite3_column_int64(stmt, i));
    case SQLITE_FLOAT:
      return Cell::of_real(sqlite3_column_double(stmt, i));
    case SQLITE_TEXT: {
      const char* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt, i));
      int n = sqlite3_column_bytes(stmt, i);
      bytes += static_cast<size_t>(n);
      return Cell::of_text(std::string(p ? p : "", static_cast<size_t>(n)));
    }
    case SQLITE_BLOB: {
      const char* p = static_cast<const char*>(sqlite3_column_blob(stmt, i));
      int n = sqlite3_column_bytes(stmt, i);
      bytes += static_cast<size_t>(n);
      return Cell::of_blob(std::string(p ? p : "", static_cast<size_t>(n)));
    }
    default:
      return Cell::null();
  }
}

// The connection's limits for one call: the call's, or SQLite's own where it asks for none.
void apply_limits(Pool::Connection& conn, const Limits& limits) {
  auto pick = [](int64_t asked, int fallback) {
    return asked > 0 ? static_cast<int>(std::min<int64_t>(asked, fallback)) : fallback;
  };
  sqlite3_limit(conn.db, SQLITE_LIMIT_LENGTH, pick(limits.max_value_bytes, conn.default_length));
  sqlite3_limit(conn.db, SQLITE_LIMIT_EXPR_DEPTH, pick(limits.max_expr_depth, conn.default_expr_depth));
  sqlite3_limit(conn.db, SQLITE_LIMIT_COMPOUND_SELECT, pick(limits.max_compound_select, conn.default_compound));
  sqlite3_limit(conn.db, SQLITE_LIMIT_LIKE_PATTERN_LENGTH,
                pick(limits.max_like_pattern_bytes, conn.default_like_pattern));
}

// The message for an allocation refused under max_query_memory_bytes (SQLite says only "out of
// memory"), or SQLite's own.
std::string statement_error(sqlite3* db, int rc, const Limits& limits) {
  if ((rc & 0xff) == SQLITE_NOMEM && t_statement.hit)
    return str_cat("out of memory: the query needs more than ", limits.max_query_memory_bytes >> 20,
                   " MiB inside SQLite (the per-query memory limit)");
  if ((rc & 0xff) == SQLITE_TOOBIG)
    return str_cat(sqlite3_errmsg(db), ": a value would exceed ", limits.max_value_bytes, " bytes");
  return sqlite3_errmsg(db);
}

// Counts the statement's memory from construction to destruction (every return of run_statement).
struct StatementScope {
  explicit StatementScope(int64_t cap) { t_statement = {0, cap, false}; }
  ~StatementScope() { t_statement = {}; }
};

// Runs the first statement of `sql` on an open connection. Returns the last SQLite code seen.
int run_statement(Pool::Connection& conn, const std::string& sql, const Limits& limits, Result& r) {
  apply_limits(conn, limits);
  StatementScope memory(limits.max_query_memory_bytes);
  conn.auth.denied.clear();
  conn.stop_reason.clear();
  conn.steps = 0;
  conn.max_steps = limits.max_vm_steps;
  conn.has_deadline = limits.timeout_ms > 0;
  if (conn.has_deadline) conn.deadline = Clock::now() + std::chrono::milliseconds(limits.timeout_ms);

  auto timeout_message = [&] {
    return conn.stop_reason.empty() ? str_cat("timeout after ", limits.timeout_ms, " ms") : conn.stop_reason;
  };

  auto classify = [&](int code) {
    r.infra_error = conn.auth.denied.empty() &&
                    infrastructure_failure(code, conn.stop_reason.empty(), t_statement.hit, limits);
  };

  sqlite3_stmt* stmt = nullptr;
  const char* tail = nullptr;
  int rc = sqlite3_prepare_v2(conn.db, sql.data(), static_cast<int>(sql.size()), &stmt, &tail);
  if (rc != SQLITE_OK) {
    if (!conn.auth.denied.empty()) {
      r.error = conn.auth.denied;
    } else if (rc == SQLITE_INTERRUPT) {
      r.timed_out = true;
      r.error = timeout_message();
    } else {
      r.error = statement_error(conn.db, rc, limits);
    }
    classify(rc);
    sqlite3_finalize(stmt);
    return rc;
  }
  if (tail) {
    int semicolons = 0;
    r.ignored_tail = meaningful_tail(tail, sql.data() + sql.size(), &semicolons);
    r.extra_semicolon = semicolons > 0;
  }
  if (!stmt) {
    r.error = "no SQL statement to execute (the text is empty or only comments)";
    return SQLITE_OK;
  }
  // The authorizer sees no action for some writers (VACUUM INTO); the statement's own verdict
  // closes that gap.
  if (!sqlite3_stmt_readonly(stmt)) {
    r.error = "not authorized: only read-only statements run (the database is read-only)";
    sqlite3_finalize(stmt);
    return SQLITE_AUTH;
  }
  // A parameter (?, ?1, :name, @name, $name) would run bound to NULL: `WHERE name = :city` then
  // returns nothing and matches an empty gold result without the model having written a real
  // query (credit for nothing in a reward). BIRD's official evaluation fails such a prediction
  // (Python's sqlite3 raises on the missing binding); every query that runs here does too.
  if (const int params = sqlite3_bind_parameter_count(stmt); params > 0) {
    const char* first = sqlite3_bind_parameter_name(stmt, 1);
    r.error = str_cat("the query has ", params, " unbound parameter", params > 1 ? "s" : "", " (", first ? first : "?",
                      params > 1 ? ", ..." : "", "): write the values into the SQL");
    sqlite3_finalize(stmt);
    return SQLITE_RANGE;
  }
  int ncols = sqlite3_column_count(stmt);
  for (int i = 0; i < ncols; ++i) {
    const char* name = sqlite3_column_name(stmt, i);
    const char* decl = sqlite3_column_decltype(stmt, i);
    r.columns.emplace_back(name ? name : "");
    r.decltypes.emplace_back(decl ? decl : "");
  }
  size_t bytes = 0;
  while (true) {
    rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
      if (r.rows.size() >= limits.max_rows) {
        r.truncated = true;
        r.truncation = str_cat("more than ", limits.max_rows, " rows");
        break;
      }
      size_t row_bytes = row_overhead_bytes(ncols);
      Row row;
      row.reserve(static_cast<size_t>(ncols));
      for (int i = 0; i < ncols; ++i) row.push_back(read_cell(stmt, i, row_bytes));
      if (bytes + row_bytes > limits.max_result_bytes) {
        r.truncated = true;
        r.truncation = str_cat("more than ", limits.max_result_bytes, " bytes of rows");
        break;
      }
      bytes += row_bytes;
      r.rows.push_back(std::move(row));
      continue;
    }
    if (rc == SQLITE_DONE) break;
    if (rc == SQLITE_INTERRUPT) {
      r.timed_out = true;
      r.error = timeout_message();
    } else if (!conn.auth.denied.empty()) {
      r.error = conn.auth.denied;
    } else {
      r.error = statement_error(conn.db, rc, limits);
    }
    classify(rc);
    break;
  }
  r.result_bytes = bytes;
  r.vm_steps = sqlite3_stmt_status(stmt, SQLITE_STMTSTATUS_VM_STEP, 0);
  sqlite3_finalize(stmt);
  if (rc == SQLITE_ROW || rc == SQLITE_DONE) rc = SQLITE_OK;
  return rc;
}

}  // namespace

Pool::Pool(PoolOptions options, ThreadPool* workers)
    : options_(options), workers_(workers) {
  check(options_.max_connections_per_db > 0, "sql pool: max_connections_per_db must be > 0");
  check(workers_ != nullptr || options_.worker_threads > 0, "sql pool: worker_threads must be > 0");
  ensure_heap_limit(options_.heap_limit_bytes);
  if (options_.sandbox && sandbox_available(options_.sandbox_options))
    sandbox_ = std::make_unique<Sandbox>(options_.sandbox_options);
  static std::once_flag warned;
  if (!g_counting_allocator)
    std::call_once(warned, [] {
      std::fprintf(stderr, "warning: SQLite was initialized before the SQL pool could count its allocations: the "
                           "per-query memory limit is off (the process-wide heap limit still holds)\n");
    });
}

Pool::~Pool() {
  owned_workers_.reset();  // runs the queued jobs (they use the connections) and joins
  std::lock_guard<std::mutex> lock(mutex_);
  slots_.clear();
}

std::unique_ptr<Pool::Connection> Pool::acquire(const std::string& db_path, std::string& error) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto [it, inserted] = slots_.try_emplace(db_path);
  if (inserted) ++stats_.databases;
  DbSlot& slot = it->second;
  slot_freed_.wait(lock, [&] { return !slot.idle.empty() || slot.in_use < options_.max_connections_per_db; });
  ++slot.in_use;
  ++stats_.in_use;
  if (!slot.idle.empty()) {
    std::unique_ptr<Connection> conn = std::move(slot.idle.back());
    slot.idle.pop_back();
    return conn;
  }
  lock.unlock();
  std::unique_ptr<Connection> conn = open_connection(db_path, options_, error);
  lock.lock();
  if (!conn) {
    --slot.in_use;
    --stats_.in_use;
    slot_freed_.notify_one();
    return nullptr;
  }
  ++stats_.open;
  ++stats_.opened_total;
  return conn;
}

void Pool::release(const std::string& db_path, std::unique_ptr<Connection> conn) {
  std::unique_ptr<Connection> to_close;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    DbSlot& slot = slots_.at(db_path);
    --slot.in_use;
    --stats_.in_use;
    if (conn->db) {
      slot.idle.push_back(std::move(conn));
    } else {
      to_close = std::move(conn);
      --stats_.open;
      ++stats_.closed_total;
    }
  }
  slot_freed_.notify_one();
}

Result Pool::execute(const std::string& db_path, const std::string& sql, const Limits& limits) {
  auto start = Clock::now();
  Result r;
  if (sql.size() > limits.max_sql_bytes) {
    r.error = str_cat("SQL too long: ", sql.size(), " bytes, limit ", limits.max_sql_bytes);
  } else if (sandbox_) {
    r = sandbox_->execute(db_path, sql, limits);
  } else {
    std::string error;
    std::unique_ptr<Connection> conn = acquire(db_path, error);
    if (!conn) {
      r.error = error;
      r.infra_error = true;  // the file cannot be opened or read (Result::infra_error)
    } else {
      int rc = run_statement(*conn, sql, limits, r);
      if (connection_broken(rc)) {
        r.error = str_cat("database '", db_path, "': ", r.error);
        sqlite3_close_v2(conn->db);
        conn->db = nullptr;
      }
      release(db_path, std::move(conn));
    }
  }
  r.elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mutex_);
  count(r);
  return r;
}

void Pool::count(const Result& r) {
  ++stats_.executions;
  if (r.timed_out) ++stats_.timeouts;
  if (!r.ok()) ++stats_.errors;
  if (r.infra_error) ++stats_.infra_errors;
}

struct Pool::Queued {
  std::string db_path, sql;
  Limits limits;
  std::promise<Result> done;
};

ThreadPool& Pool::workers() {
  if (workers_) return *workers_;
  std::call_once(owned_started_, [this] { owned_workers_ = std::make_unique<ThreadPool>(options_.worker_threads); });
  return *owned_workers_;
}

std::future<Result> Pool::submit(std::string db_path, std::string sql, Limits limits) {
  if (!sandbox_ || sql.size() > limits.max_sql_bytes)
    return workers().submit([this, db_path = std::move(db_path), sql = std::move(sql), limits] {
      return execute(db_path, sql, limits);
    });
  auto q = std::make_unique<Queued>(Queued{std::move(db_path), std::move(sql), limits, {}});
  std::future<Result> result = q->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queued_.push_back(std::move(q));
  }
  // A job per query, so the queue is always drained; a job that finds it empty (earlier jobs
  // took its query in their batch) returns at once.
  workers().submit([this] { run_queued(); });
  return result;
}

void Pool::run_queued() {
  std::vector<std::unique_ptr<Queued>> batch;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Shared over the workers: 40 waiting queries and 4 workers make batches of 10, so each
    // worker process gets one; 3 queries make 3 batches of one (nothing is waiting to share).
    const size_t workers = std::max<size_t>(1, options_.sandbox_options.workers);
    const size_t take = std::min({queued_.size(), kMaxBatch, (queued_.size() + workers - 1) / workers});
    for (size_t i = 0; i < take; ++i) {
      batch.push_back(std::move(queued_.front()));
      queued_.pop_front();
    }
  }
  if (batch.empty()) return;
  std::vector<SandboxQuery> queries;
  for (const auto& q : batch) queries.push_back({q->db_path, q->sql, &q->limits});
  std::vector<Result> results;
  try {
    results = sandbox_->execute_batch(queries);
  } catch (...) {  // bad_alloc building a request: every caller hears of it
    for (auto& q : batch) q->done.set_exception(std::current_exception());
    return;
  }
  // elapsed_ms: the worker's time for an answered query, the wait for a killed or dead one.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Result& r : results) count(r);
  }
  for (size_t i = 0; i < batch.size(); ++i) batch[i]->done.set_value(std::move(results[i]));
}

PoolStats Pool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  PoolStats s = stats_;
  if (sandbox_) s.sandbox_round_trips = sandbox_->stats().round_trips;
  return s;
}

void Pool::close_idle() {
  std::vector<std::unique_ptr<Connection>> closing;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [path, slot] : slots_) {
      for (auto& c : slot.idle) closing.push_back(std::move(c));
      slot.idle.clear();
    }
    stats_.open -= closing.size();
    stats_.closed_total += closing.size();
  }
}

PoolOptions model_sql_pool_options() {
  PoolOptions o;
  o.sandbox = true;
  return o;
}

Limits official_script_limits(int64_t timeout_ms, const OfficialCaps& caps) {
  Limits l;
  l.timeout_ms = timeout_ms;
  l.max_rows = size_t(1) << 40;
  l.max_result_bytes = caps.result_bytes;
  l.max_sql_bytes = size_t(1) << 30;
  l.max_query_memory_bytes = caps.query_memory_bytes;
  l.max_value_bytes = 0;
  l.max_expr_depth = 0;
  l.max_compound_select = 0;
  l.max_like_pattern_bytes = 0;
  return l;
}

Result execute_once(const std::string& db_path, const std::string& sql, const Limits& limits) {
  PoolOptions options;
  options.max_connections_per_db = 1;
  Pool pool(options);
  return pool.execute(db_path, sql, limits);
}

}  // namespace sqlrl::sql

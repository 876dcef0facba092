#include "sql/exec/sandbox.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>

#include "runtime/error.h"
#include "runtime/socket_io.h"
#include "sql/exec/pool.h"

namespace sqlrl::sql {
namespace {

using Clock = std::chrono::steady_clock;

// ---- Wire format: a frame is a u64 length and that many bytes ---------------------------------

struct Writer {
  std::string buf;
  void u8(uint8_t v) { buf.push_back(static_cast<char>(v)); }
  void i64(int64_t v) { buf.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void f64(double v) { buf.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& s) {
    i64(static_cast<int64_t>(s.size()));
    buf += s;
  }
};

struct Reader {
  const std::string& buf;
  size_t at = 0;
  bool ok = true;
  bool take(void* out, size_t n) {
    if (!ok || buf.size() - at < n) return ok = false;
    std::memcpy(out, buf.data() + at, n);
    at += n;
    return true;
  }
  uint8_t u8() {
    uint8_t v = 0;
    take(&v, 1);
    return v;
  }
  int64_t i64() {
    int64_t v = 0;
    take(&v, sizeof v);
    return v;
  }
  double f64() {
    double v = 0;
    take(&v, sizeof v);
    return v;
  }
  std::string str() {
    const int64_t n = i64();
    if (!ok || n < 0 || static_cast<uint64_t>(n) > buf.size() - at) {
      ok = false;
      return {};
    }
    std::string s = buf.substr(at, static_cast<size_t>(n));
    at += static_cast<size_t>(n);
    return s;
  }
};

// A field added to Limits or PoolOptions must cross the pipe too: these fail to compile until
// the writers and readers below name it.
static_assert(sizeof(Limits) == 7 * 8 + 3 * 4 + 4, "Limits changed: update write_limits / read_limits");

std::mutex g_registered_mutex;
std::string g_registered_binary;

std::string worker_binary_of(const SandboxOptions& o) {
  if (!o.worker_binary.empty()) return o.worker_binary;
  std::lock_guard<std::mutex> lock(g_registered_mutex);
  return g_registered_binary;
}

void write_limits(Writer& w, const Limits& l) {
  w.i64(l.timeout_ms);
  w.i64(l.max_vm_steps);
  w.i64(static_cast<int64_t>(l.max_rows));
  w.i64(static_cast<int64_t>(l.max_result_bytes));
  w.i64(static_cast<int64_t>(l.max_sql_bytes));
  w.i64(l.max_query_memory_bytes);
  w.i64(l.max_value_bytes);
  w.i64(l.max_expr_depth);
  w.i64(l.max_compound_select);
  w.i64(l.max_like_pattern_bytes);
}

Limits read_limits(Reader& r) {
  Limits l;
  l.timeout_ms = r.i64();
  l.max_vm_steps = r.i64();
  l.max_rows = static_cast<size_t>(r.i64());
  l.max_result_bytes = static_cast<size_t>(r.i64());
  l.max_sql_bytes = static_cast<size_t>(r.i64());
  l.max_query_memory_bytes = r.i64();
  l.max_value_bytes = r.i64();
  l.max_expr_depth = static_cast<int>(r.i64());
  l.max_compound_select = static_cast<int>(r.i64());
  l.max_like_pattern_bytes = static_cast<int>(r.i64());
  return l;
}

void write_strings(Writer& w, const std::vector<std::string>& v) {
  w.i64(static_cast<int64_t>(v.size()));
  for (const std::string& s : v) w.str(s);
}

std::vector<std::string> read_strings(Reader& r) {
  const int64_t n = r.i64();
  std::vector<std::string> v;
  for (int64_t i = 0; r.ok && i < n; ++i) v.push_back(r.str());
  return v;
}

void write_result(Writer& w, const Result& res) {
  write_strings(w, res.columns);
  write_strings(w, res.decltypes);
  w.i64(static_cast<int64_t>(res.rows.size()));
  for (const Row& row : res.rows) {
    w.i64(static_cast<int64_t>(row.size()));
    for (const Cell& c : row) {
      w.u8(static_cast<uint8_t>(c.type));
      w.i64(c.integer);
      w.f64(c.real);
      w.str(c.text);
    }
  }
  w.str(res.error);
  w.u8(res.timed_out);
  w.u8(res.infra_error);
  w.u8(res.truncated);
  w.str(res.truncation);
  w.str(res.ignored_tail);
  w.u8(res.extra_semicolon);
  w.f64(res.elapsed_ms);
  w.i64(res.vm_steps);
  w.i64(static_cast<int64_t>(res.result_bytes));
}

Result read_result(Reader& r) {
  Result res;
  res.columns = read_strings(r);
  res.decltypes = read_strings(r);
  const int64_t rows = r.i64();
  for (int64_t i = 0; r.ok && i < rows; ++i) {
    Row row(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(r.i64(), 1 << 20))));
    for (Cell& c : row) {
      c.type = static_cast<CellType>(r.u8());
      c.integer = r.i64();
      c.real = r.f64();
      c.text = r.str();
    }
    res.rows.push_back(std::move(row));
  }
  res.error = r.str();
  res.timed_out = r.u8();
  res.infra_error = r.u8();
  res.truncated = r.u8();
  res.truncation = r.str();
  res.ignored_tail = r.str();
  res.extra_semicolon = r.u8();
  res.elapsed_ms = r.f64();
  res.vm_steps = r.i64();
  res.result_bytes = static_cast<size_t>(r.i64());
  return res;
}

bool send_frame(int fd, const std::string& payload) {
  const uint64_t n = payload.size();
  return socket_send_all(fd, &n, sizeof n) && socket_send_all(fd, payload.data(), payload.size());
}

int recv_frame(int fd, std::string& payload, Clock::time_point deadline) {
  uint64_t n = 0;
  if (int rc = socket_recv_all(fd, &n, sizeof n, deadline); rc != 1) return rc;
  if (n > (uint64_t(1) << 40)) return 0;
  payload.resize(n);
  return socket_recv_all(fd, payload.data(), n, deadline);
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status))
    return str_cat("signal ", WTERMSIG(status), ", ", strsignal(WTERMSIG(status)));
  if (WIFEXITED(status)) return str_cat("exit status ", WEXITSTATUS(status));
  return "unknown status";
}

// ---- The worker's own restrictions -------------------------------------------------------------

// No sockets (x86-64; elsewhere the other limits stand alone): a query cannot reach a network
// even through a SQLite bug. Everything else is allowed: SQLite reads its files, allocates, and
// the worker's threads start.
void forbid_sockets() {
#if defined(__x86_64__)
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EACCES & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
    std::fprintf(stderr, "sql worker: seccomp filter not installed (%s): sockets stay allowed\n", std::strerror(errno));
#endif
}

void test_crash(sqlite3_context*, int, sqlite3_value**) { raise(SIGSEGV); }

void test_spin(sqlite3_context* ctx, int, sqlite3_value**) {
  volatile uint64_t n = 0;
  for (;;) n = n + 1;
  sqlite3_result_int64(ctx, static_cast<int64_t>(n));
}

void add_test_functions(sqlite3* db) {
  sqlite3_create_function(db, "sqlrl_test_crash", 0, SQLITE_UTF8, nullptr, test_crash, nullptr, nullptr);
  sqlite3_create_function(db, "sqlrl_test_spin", 0, SQLITE_UTF8, nullptr, test_spin, nullptr, nullptr);
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

}  // namespace

// ---- The parent's side ------------------------------------------------------------------------

struct Sandbox::Worker {
  pid_t pid = -1;
  int channel = -1;   // our end of the socket pair
  int lifeline = -1;  // our end of the lifeline: the worker exits when it closes
  ~Worker() { end(); }
  // Closes our ends, kills the process (a no-op once it has exited) and reaps it: its wait
  // status, which says how a worker that died ended.
  int end() {
    if (channel >= 0) close(channel);
    if (lifeline >= 0) close(lifeline);
    channel = lifeline = -1;
    int status = 0;
    if (pid > 0) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      pid = -1;
    }
    return status;
  }
};

namespace {

// fork + exec of `binary --sql-worker 3 4`; in the child only async-signal-safe calls.
std::unique_ptr<Sandbox::Worker> spawn(const SandboxOptions& o, std::string& error) {
  int pair[2], life[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    error = str_cat("sql sandbox: socketpair: ", std::strerror(errno));
    return nullptr;
  }
  if (pipe2(life, O_CLOEXEC) != 0) {
    error = str_cat("sql sandbox: pipe: ", std::strerror(errno));
    close(pair[0]);
    close(pair[1]);
    return nullptr;
  }
  const std::string binary = worker_binary_of(o);
  const char* argv[] = {binary.c_str(), "--sql-worker", "3", "4", nullptr};
  rlimit no_core{0, 0};
  rlimit address{static_cast<rlim_t>(o.address_space_bytes), static_cast<rlim_t>(o.address_space_bytes)};
  const pid_t pid = fork();
  if (pid == 0) {
    // dup2 onto 3 and 4 clears close-on-exec there; the ends may already sit on 3 or 4.
    const int channel = pair[1] == 3 || pair[1] == 4 ? fcntl(pair[1], F_DUPFD_CLOEXEC, 5) : pair[1];
    const int lifeline = life[0] == 3 || life[0] == 4 ? fcntl(life[0], F_DUPFD_CLOEXEC, 5) : life[0];
    if (channel < 0 || lifeline < 0 || dup2(channel, 3) < 0 || dup2(lifeline, 4) < 0) _exit(126);
    setrlimit(RLIMIT_CORE, &no_core);
    if (!kSanitized && o.address_space_bytes > 0) setrlimit(RLIMIT_AS, &address);
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    execv(argv[0], const_cast<char* const*>(argv));
    _exit(127);
  }
  const int fork_errno = errno;
  close(pair[1]);
  close(life[0]);
  if (pid < 0) {
    close(pair[0]);
    close(life[1]);
    error = str_cat("sql sandbox: fork: ", std::strerror(fork_errno));
    return nullptr;
  }
  auto w = std::make_unique<Sandbox::Worker>();
  w->pid = pid;
  w->channel = pair[0];
  w->lifeline = life[1];
  return w;
}

}  // namespace

Sandbox::Sandbox(SandboxOptions options) : options_(std::move(options)) {
  check(options_.workers > 0, "sql sandbox: workers must be > 0");
}

Sandbox::~Sandbox() {
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.clear();  // each Worker's destructor closes its channel and kills it
}

std::unique_ptr<Sandbox::Worker> Sandbox::take() {
  std::unique_lock<std::mutex> lock(mutex_);
  freed_.wait(lock, [&] { return !idle_.empty() || busy_ < options_.workers; });
  ++busy_;
  if (idle_.empty()) return nullptr;  // the caller starts one
  std::unique_ptr<Worker> w = std::move(idle_.back());
  idle_.pop_back();
  return w;
}

void Sandbox::give_back(std::unique_ptr<Worker> worker) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --busy_;
    if (worker) idle_.push_back(std::move(worker));
  }
  freed_.notify_one();
}

Result Sandbox::execute(const std::string& db_path, const std::string& sql, const Limits& limits) {
  return std::move(execute_batch({{db_path, sql, &limits}}).front());
}

namespace {

// The result of a query that got no answer: killed past its deadline (`killed`) or its worker
// ended (`status`).
Result unanswered(bool killed, int64_t budget_ms, int status, const Limits& limits) {
  Result failed;
  if (killed) {
    failed.error = str_cat("timeout after ", budget_ms, " ms: the query ran past its budget inside one SQLite operation, "
                           "and its worker process was stopped");
    failed.timed_out = true;
    // As Result::infra_error says of the wall clock: the query's own limit unless a VM-step
    // budget was its deterministic one.
    failed.infra_error = limits.max_vm_steps > 0;
  } else {
    failed.error = str_cat("the query's worker process ended without an answer (", describe_exit(status),
                           "): SQLite failed on this query");
  }
  return failed;
}

}  // namespace

std::vector<Result> Sandbox::execute_batch(const std::vector<SandboxQuery>& queries) {
  std::vector<Result> results(queries.size());
  size_t next = 0;  // the first query without a result
  while (next < queries.size()) {
    std::unique_ptr<Worker> w = take();
    if (!w) {
      std::string error;
      w = spawn(options_, error);
      // A new worker says when it is ready (its loader, sanitizer runtime and pool set up), so
      // its start is not charged to the first query's deadline.
      std::string ready;
      if (w && recv_frame(w->channel, ready, Clock::now() + std::chrono::seconds(60)) != 1) {
        error = str_cat("sql sandbox: the worker process ", worker_binary_of(options_),
                        " did not start (", describe_exit(w->end()), ")");
        w.reset();
      }
      if (!w) {
        give_back(nullptr);
        for (; next < queries.size(); ++next) {
          results[next].error = error;
          results[next].infra_error = true;
        }
        break;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.started;
    }
    Writer req;
    req.i64(static_cast<int64_t>(queries.size() - next));
    for (size_t i = next; i < queries.size(); ++i) {
      req.str(queries[i].db_path);
      req.str(queries[i].sql);
      write_limits(req, *queries[i].limits);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.round_trips;
    }
    auto start = Clock::now();  // of the query answered next
    int rc = send_frame(w->channel, req.buf) ? 1 : 0;
    int64_t budget = 0;
    for (; rc == 1 && next < queries.size(); ++next) {
      const Limits& limits = *queries[next].limits;
      budget = limits.timeout_ms > 0 ? limits.timeout_ms + options_.grace_ms : options_.unlimited_deadline_ms;
      std::string answer;
      rc = recv_frame(w->channel, answer, start + std::chrono::milliseconds(budget));
      if (rc != 1) break;
      Reader r{answer};
      results[next] = read_result(r);
      if (!r.ok) {
        rc = 0;
        break;
      }
      start = Clock::now();
    }
    if (rc == 1) {
      give_back(std::move(w));
      break;
    }
    // No answer to query `next`: past its deadline (killed here), or dead. Either way this worker
    // is gone; the queries after it go to another.
    const int status = w->end();
    w.reset();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++(rc == -1 ? stats_.killed : stats_.died);
    }
    give_back(nullptr);
    results[next] = unanswered(rc == -1, budget, status, *queries[next].limits);
    results[next].elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    ++next;
  }
  return results;
}

void register_sql_worker_binary(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_registered_mutex);
  g_registered_binary = path;
}

bool sandbox_available(const SandboxOptions& o) { return !worker_binary_of(o).empty(); }

SandboxStats Sandbox::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

// ---- The worker's side ------------------------------------------------------------------------

int sql_worker_main(int channel, int lifeline) {
  // The trainer's end of the lifeline closes when it exits, however it exits: a worker busy in a
  // query that never ends goes with it.
  std::thread([lifeline] {
    char c;
    while (read(lifeline, &c, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }).detach();
  forbid_sockets();
  PoolOptions options;
  options.max_connections_per_db = 1;
  options.worker_threads = 1;
  const char* test = std::getenv("SQLRL_SQL_WORKER_TEST_FUNCTIONS");
  if (test && std::strcmp(test, "1") == 0) options.on_open = add_test_functions;
  Pool pool(options);
  if (!send_frame(channel, "ready")) return 0;
  std::string frame;
  for (;;) {
    if (recv_frame(channel, frame, Clock::time_point::max()) != 1) return 0;  // the trainer closed it
    Reader r{frame};
    const int64_t n = r.i64();
    if (!r.ok || n <= 0) return 2;
    for (int64_t i = 0; i < n; ++i) {
      const std::string db_path = r.str(), sql = r.str();
      const Limits limits = read_limits(r);
      if (!r.ok) return 2;
      Writer w;
      write_result(w, pool.execute(db_path, sql, limits));
      if (!send_frame(channel, w.buf)) return 0;
    }
  }
}

}  // namespace sqlrl::sql

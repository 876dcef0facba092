// Model-written SQL in worker processes. SQLite limits what it can (sql/exec/pool.h), but some
// work happens inside one opcode where no budget looks (printf('%.*c', 1e9, 'x') ran 11.5 s under
// a 500 ms budget), and a SQLite bug reachable from SQL (Debian's fts3_tokenizer planted a function
// pointer) kills the process that runs it. Here a query runs in a worker process: the trainer
// waits for its answer until the query's own timeout plus a grace, then kills the worker. A
// crash or a kill costs that one query (an error result, as the query's own failure) and the
// worker is started again for the next one.
//
// Workers are the same binary started with `--sql-worker IN OUT` (app/main.cpp): each runs an
// in-process Pool over length-prefixed requests and results on two pipes, keeps its connections
// between queries, and dies with the trainer (PR_SET_PDEATHSIG). Each lives under limits: address
// space (RLIMIT_AS), no core files, no new privileges, and (x86-64) no sockets (seccomp).
#pragma once
#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sql/exec/result.h"

namespace sqlrl::sql {

struct Limits;

struct SandboxOptions {
  // A binary whose main hands `--sql-worker CHANNEL LIFELINE` to sql_worker_main; "" = the one
  // registered (register_sql_worker_binary). Tests give the built binary.
  std::string worker_binary;
  size_t workers = 4;  // processes at most; callers past them wait for one
  // Address space of a worker (RLIMIT_AS): a query past it fails to allocate inside SQLite
  // (an error result) instead of taking the machine's memory. Not set in sanitizer builds
  // (AddressSanitizer reserves terabytes of address space).
  int64_t address_space_bytes = int64_t(8) << 30;
  // A query is killed this long after its own Limits::timeout_ms (the worker's limits stop it
  // first, and answer, in all but the cases this exists for).
  int64_t grace_ms = 1000;
  // The deadline of a query whose Limits set no wall clock (timeout_ms <= 0).
  int64_t unlimited_deadline_ms = 600000;
};

struct SandboxStats {
  size_t started = 0;  // worker processes started
  size_t killed = 0;   // killed past a deadline
  size_t died = 0;     // ended without answering (a crash, a signal)
  size_t round_trips = 0;  // requests sent: a batch of queries is one
};

struct SandboxQuery {
  std::string db_path, sql;
  const Limits* limits = nullptr;
};

class Sandbox {
 public:
  explicit Sandbox(SandboxOptions options);
  ~Sandbox();  // ends every worker
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Pool::execute in a worker. Never throws for what the query does: a worker that dies or is
  // killed gives an error result (timed_out when killed past the deadline).
  Result execute(const std::string& db_path, const std::string& sql, const Limits& limits);
  // The queries in order on one worker, sent in one request: a wake-up of the worker and of the
  // caller per batch instead of per query (the round trip, not SQLite, was most of what the
  // sandbox added). The worker answers each query as it finishes, so each keeps its own deadline,
  // counted from the previous answer; a query killed or crashed costs itself only, and the ones
  // after it run on a new worker. Results in the order of `queries`.
  std::vector<Result> execute_batch(const std::vector<SandboxQuery>& queries);
  SandboxStats stats() const;

  struct Worker;

 private:
  std::unique_ptr<Worker> take();
  void give_back(std::unique_ptr<Worker> worker);

  SandboxOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<Worker>> idle_;
  size_t busy_ = 0;
  SandboxStats stats_;
};

// The worker's loop (app/main.cpp calls it for `--sql-worker CHANNEL LIFELINE`): reads requests
// from and answers on the socket `channel` until it closes, and exits when `lifeline` does. Returns the process's exit status.
// SQLRL_SQL_WORKER_TEST_FUNCTIONS=1 adds sqlrl_test_crash() (SIGSEGV) and sqlrl_test_spin()
// (loops forever inside one opcode) to its connections, for the tests of the sandbox.
int sql_worker_main(int channel, int lifeline);

// The binary a SandboxOptions without worker_binary starts: the llm_sqlrl binary registers
// itself (/proc/self/exe) first thing in main; test binaries, which are not workers, do not.
void register_sql_worker_binary(const std::string& path);
// Whether `o` has a worker binary (its own or the registered one).
bool sandbox_available(const SandboxOptions& o);

}  // namespace sqlrl::sql

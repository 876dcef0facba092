// A query's result as SQLite returned it: typed cells, column names and declared types, and what
// stopped it (error, timeout, truncation). Plain data; formatting and comparison live elsewhere.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sqlrl::sql {

enum class CellType : uint8_t { Null = 0, Integer = 1, Real = 2, Text = 3, Blob = 4 };

// One value. `text` holds the bytes of TEXT and BLOB cells (TEXT is UTF-8 as stored, possibly
// invalid); `integer`/`real` hold the number for INTEGER/REAL cells.
struct Cell {
  CellType type = CellType::Null;
  int64_t integer = 0;
  double real = 0.0;
  std::string text;

  static Cell null() { return Cell{}; }
  static Cell of_integer(int64_t v) { return Cell{CellType::Integer, v, 0.0, {}}; }
  static Cell of_real(double v) { return Cell{CellType::Real, 0, v, {}}; }
  static Cell of_text(std::string v) { return Cell{CellType::Text, 0, 0.0, std::move(v)}; }
  static Cell of_blob(std::string bytes) { return Cell{CellType::Blob, 0, 0.0, std::move(bytes)}; }

  bool is_null() const { return type == CellType::Null; }
  bool is_number() const { return type == CellType::Integer || type == CellType::Real; }
};

using Row = std::vector<Cell>;

struct Result {
  std::vector<std::string> columns;    // sqlite3_column_name
  std::vector<std::string> decltypes;  // sqlite3_column_decltype, "" for expressions
  std::vector<Row> rows;

  // Empty when the statement ran to completion (or to a row/byte cap). Otherwise SQLite's own
  // message ("no such column: x"), "timeout after N ms", a refusal ("not authorized: ..."), or
  // an open failure naming the database path.
  std::string error;
  bool timed_out = false;       // wall-clock deadline or VM-step budget hit (error says which)
  // The failure is the infrastructure's, not the query's: a reward or an advantage built on it
  // would teach the model about the machine (GRPO leaves such trajectories out, rl/grpo/grpo.h).
  // Set by the pool (sql/exec/pool.cpp infrastructure_failure) only when `error` is set:
  //   infrastructure:
  //   - the database cannot be opened or read: missing, not a regular file, unreadable, not a
  //     database (SQLITE_CANTOPEN, SQLITE_NOTADB), or an I/O error or corruption while reading
  //     (SQLITE_IOERR, SQLITE_CORRUPT): the path comes from the dataset, and a read-only,
  //     defensive connection cannot damage the file, so the model could not have caused it;
  //   - SQLITE_BUSY / SQLITE_LOCKED / SQLITE_SCHEMA: someone else wrote the file meanwhile;
  //   - the wall clock firing while a VM-step budget (Limits::max_vm_steps > 0) is set: the step
  //     budget is the query's deterministic limit, so a deadline that comes first means the
  //     machine was slow (load, contention), not that the query was long;
  //   - SQLITE_NOMEM while a per-query memory cap (max_query_memory_bytes > 0) is set and was not
  //     reached: the shared process-wide heap limit, or malloc, ran out, i.e. the other queries
  //     or the machine; the cap is the query's own limit.
  //   the model's: everything else: syntax, names (no such column), type and value errors, the
  //   authorizer's and the pool's refusals (writes, unbound parameters, SQL too long, empty SQL),
  //   the VM-step budget, the wall clock when it is the only budget (the papers' evaluators
  //   time out on the clock alone), the per-query memory cap, SQLITE_TOOBIG, SQLITE_FULL (the
  //   temp-storage page cap), and NOMEM without a per-query cap (the heap limit is then the
  //   query's only memory limit). The pool never refuses for capacity: callers past
  //   max_connections_per_db wait, and a query's deadline starts once it has a connection.
  bool infra_error = false;
  bool truncated = false;       // stopped at max_rows or max_result_bytes; rows holds the prefix
  std::string truncation;       // why, when truncated: "more than 10000 rows", "more than N bytes"
  std::string ignored_tail;     // statements after the first one, reported and never executed
  // The first statement is followed by another ';' (outside comments): "SELECT 1;;". SQLite
  // runs it; Python's sqlite3 refuses it ("You can only execute one statement at a time"), so
  // BIRD's official evaluation scores it 0.
  bool extra_semicolon = false;
  double elapsed_ms = 0.0;      // prepare + all steps
  int64_t vm_steps = 0;         // SQLITE_STMTSTATUS_VM_STEP of the statement
  size_t result_bytes = 0;      // bytes counted against max_result_bytes

  bool ok() const { return error.empty(); }
};

}  // namespace sqlrl::sql

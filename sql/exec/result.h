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

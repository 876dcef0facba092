// Synthetic benchmark, part 1: domain specifications (tables, columns, value vocabularies) and
// the generation of one database's rows, messy values included. Internal to sql/data/synth*.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sqlrl::sql::synth {

// SplitMix64: fixed output on every platform (std distributions are implementation-defined).
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n ? static_cast<size_t>(next() % n) : 0; }
  int64_t range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(below(static_cast<size_t>(hi - lo + 1))); }
  double unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  bool chance(double p) { return unit() < p; }
};

enum class ColKind { Id, ForeignKey, Name, Category, Integer, Real, NumberText };

// A category value as people say it, and its usual abbreviation ("" when none).
struct CategoryValue {
  std::string canonical;
  std::string abbreviation;
};

struct ColumnSpec {
  std::string name;
  ColKind kind = ColKind::Integer;
  std::string phrase;              // "city", "age"; how questions name the column
  std::string filter;              // category filter wording with {v}: "from {v}"; "" = "with <phrase> {v}"
  std::string ref_table;           // ForeignKey: the referenced table (its id column)
  std::vector<CategoryValue> categories;  // Category
  std::vector<std::string> names;  // Name: the vocabulary (combined with a second word list)
  std::vector<std::string> names2;
  int64_t lo = 0, hi = 0;          // Integer / Real / NumberText range
  double null_share = 0.0;
};

struct TableSpec {
  std::string name, singular, plural;
  std::vector<ColumnSpec> columns;
  int rows_lo = 8, rows_hi = 16;
};

struct DomainSpec {
  std::string name;
  std::vector<TableSpec> tables;  // parents before children
};

const std::vector<DomainSpec>& domains();

// How a category value is stored in one database.
enum class MessStyle { None, Lower, Upper, Abbreviation, TrailingSpace };
const char* mess_style_name(MessStyle style);

struct Cell {
  bool null = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;       // stored text (Name, Category, NumberText)
  std::string canonical;  // Category: the value as a question says it
  MessStyle style = MessStyle::None;
};

struct TableData {
  const TableSpec* spec = nullptr;
  std::vector<std::vector<Cell>> rows;  // rows[r][c], column order of the spec; id = r + 1
};

struct Database {
  std::string db_id;
  const DomainSpec* domain = nullptr;
  std::vector<TableData> tables;
  const TableData& table(const std::string& name) const;
};

// Rows for every table of `domain`; `mess_share` = share of category values stored messily.
Database generate_database(const DomainSpec& domain, const std::string& db_id, Rng& rng, double mess_share);

// The SQL type a column is declared with ("INTEGER", "REAL", "TEXT").
const char* declared_type(ColKind kind);

}  // namespace sqlrl::sql::synth

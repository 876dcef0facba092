// Spider's process_sql.get_sql in C++: the same structure, the same column ids, the same
// failures. The structure mirrors the Python dicts and tuples one to one, because the official
// evaluation compares them with Python equality (None != False, lists keep order, conditions
// are a flat list alternating cond_unit / "and" / "or" that is not always well formed).
//
//   col_unit   (agg_id, col_id, isDistinct)
//   val_unit   (unit_op, col_unit1, col_unit2)
//   table_unit ("table_unit", "__t__") or ("sql", Sql)
//   cond_unit  (not_op, op_id, val_unit, val1, val2)
//   Sql        select (isDistinct, [(agg_id, val_unit)]), from {table_units, conds}, where,
//              groupBy, having, orderBy (asc|desc, [val_unit]) or [], limit None|1,
//              intersect / except / union
#pragma once
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sqlrl::sql {

inline constexpr const char* kAggOps[] = {"none", "max", "min", "count", "sum", "avg"};
inline constexpr const char* kUnitOps[] = {"none", "-", "+", "*", "/"};
inline constexpr const char* kWhereOps[] = {"not", "between", "=", ">", "<", ">=", "<=", "!=", "in", "like", "is", "exists"};
inline constexpr int kOpBetween = 1, kOpIn = 8, kOpLike = 9;

// Python's True / False / None where the evaluator replaces a flag by None (DISABLE_DISTINCT).
enum class Flag : signed char { None = -1, False = 0, True = 1 };

struct ColUnit {
  int agg = 0;
  std::string col;  // "__all__", "__table.column__"
  Flag distinct = Flag::False;
  bool operator==(const ColUnit&) const = default;
};

struct ValUnit {
  int op = 0;
  ColUnit col1;
  bool has_col2 = false;
  ColUnit col2;
  bool operator==(const ValUnit& o) const { return op == o.op && col1 == o.col1 && has_col2 == o.has_col2 && (!has_col2 || col2 == o.col2); }
};

struct Sql;

// A condition value: None (after value removal), a number, a quoted string, a column, a query.
struct Value {
  enum class Kind { None, Number, String, Column, Query } kind = Kind::None;
  double number = 0;
  std::string text;
  ColUnit column;
  std::shared_ptr<Sql> query;
};
bool operator==(const Value& a, const Value& b);

struct CondUnit {
  bool not_op = false;
  int op = 0;
  ValUnit val;
  Value val1, val2;
};
bool operator==(const CondUnit& a, const CondUnit& b);

// One element of a Python condition list: a cond_unit or the string "and"/"or".
struct CondItem {
  bool is_conj = false;
  std::string conj;
  CondUnit unit;
};
bool operator==(const CondItem& a, const CondItem& b);
using Condition = std::vector<CondItem>;

struct TableUnit {
  bool is_sql = false;
  std::string table;  // "__t__" for a table
  std::shared_ptr<Sql> query;
};
bool operator==(const TableUnit& a, const TableUnit& b);

struct Sql {
  Flag select_distinct = Flag::False;
  std::vector<std::pair<int, ValUnit>> select;
  std::vector<TableUnit> from_units;
  Condition from_conds;
  Condition where;
  std::vector<ColUnit> group_by;
  Condition having;
  bool has_order = false;  // orderBy == [] when false
  std::string order_dir;   // "asc" / "desc"
  std::vector<ValUnit> order_by;
  bool has_limit = false;  // limit is None or 1
  std::shared_ptr<Sql> intersect, except, union_;
};
bool operator==(const Sql& a, const Sql& b);

// The empty SQL evaluate() substitutes for a prediction that fails to parse.
Sql empty_sql();
// Deep copy (the shared_ptr children are cloned too).
Sql clone_sql(const Sql& sql);

// get_schema + Schema: table -> lower-cased column names in PRAGMA order, plus the idMap
// ("*" -> "__all__", "t.c" -> "__t.c__", "t" -> "__t__").
struct Schema {
  std::vector<std::string> table_order;
  std::unordered_map<std::string, std::vector<std::string>> columns;
  std::unordered_map<std::string, std::string> id_map;
};

// Reads <path> as process_sql.get_schema does: every sqlite_master table (sqlite_sequence too),
// PRAGMA table_info columns, all lower-cased. Throws on a missing or unreadable file.
Schema load_schema_sqlite(const std::string& path);
// Builds the schema from table -> columns (already in order), lower-casing as get_schema does.
Schema make_schema(const std::vector<std::pair<std::string, std::vector<std::string>>>& tables);

// get_sql(schema, query): tokenise and parse. Throws sqlrl::Error where the Python raises
// (assertion, IndexError, KeyError, ValueError), with the reason.
Sql parse_spider_sql(const Schema& schema, std::string_view query);

// A Python-like rendering of the structure, for error messages and test failures.
std::string to_string(const Sql& sql);

}  // namespace sqlrl::sql

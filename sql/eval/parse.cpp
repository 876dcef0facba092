// The recursive-descent parser of process_sql.py, function for function. Index arithmetic,
// lookahead and failure points follow the Python exactly (e.g. parse_sql reads FROM before
// SELECT, parse_value re-parses a column from the *start* of the value, LIMIT's value is never
// read), since the evaluation scores whatever structure the official parser builds.
#include "sql/eval/parse.h"

#include <sqlite3.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "runtime/error.h"
#include "sql/eval/lexer.h"

namespace sqlrl::sql {

bool operator==(const Value& a, const Value& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::None: return true;
    case Value::Kind::Number: return a.number == b.number;
    case Value::Kind::String: return a.text == b.text;
    case Value::Kind::Column: return a.column == b.column;
    case Value::Kind::Query: return *a.query == *b.query;
  }
  return false;
}

bool operator==(const CondUnit& a, const CondUnit& b) {
  return a.not_op == b.not_op && a.op == b.op && a.val == b.val && a.val1 == b.val1 && a.val2 == b.val2;
}

bool operator==(const CondItem& a, const CondItem& b) {
  if (a.is_conj != b.is_conj) return false;
  return a.is_conj ? a.conj == b.conj : a.unit == b.unit;
}

bool operator==(const TableUnit& a, const TableUnit& b) {
  if (a.is_sql != b.is_sql) return false;
  return a.is_sql ? *a.query == *b.query : a.table == b.table;
}

static bool same_child(const std::shared_ptr<Sql>& a, const std::shared_ptr<Sql>& b) {
  if (!a || !b) return !a && !b;
  return *a == *b;
}

bool operator==(const Sql& a, const Sql& b) {
  if (a.select_distinct != b.select_distinct || a.select != b.select || a.from_units != b.from_units ||
      a.from_conds != b.from_conds || a.where != b.where || a.group_by != b.group_by || a.having != b.having ||
      a.has_order != b.has_order || a.has_limit != b.has_limit)
    return false;
  if (a.has_order && (a.order_dir != b.order_dir || a.order_by != b.order_by)) return false;
  return same_child(a.intersect, b.intersect) && same_child(a.except, b.except) && same_child(a.union_, b.union_);
}

Sql empty_sql() { return Sql{}; }

static std::shared_ptr<Sql> clone_child(const std::shared_ptr<Sql>& s) {
  return s ? std::make_shared<Sql>(clone_sql(*s)) : nullptr;
}

static void clone_condition(Condition& c) {
  for (CondItem& item : c) {
    if (item.is_conj) continue;
    if (item.unit.val1.query) item.unit.val1.query = clone_child(item.unit.val1.query);
    if (item.unit.val2.query) item.unit.val2.query = clone_child(item.unit.val2.query);
  }
}

Sql clone_sql(const Sql& sql) {
  Sql out = sql;
  for (TableUnit& t : out.from_units)
    if (t.query) t.query = clone_child(t.query);
  clone_condition(out.from_conds);
  clone_condition(out.where);
  clone_condition(out.having);
  out.intersect = clone_child(sql.intersect);
  out.except = clone_child(sql.except);
  out.union_ = clone_child(sql.union_);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Schema

Schema make_schema(const std::vector<std::pair<std::string, std::vector<std::string>>>& tables) {
  Schema schema;
  for (const auto& [name, cols] : tables) {
    std::string table = python_lower(name);
    std::vector<std::string> lowered;
    lowered.reserve(cols.size());
    for (const std::string& c : cols) lowered.push_back(python_lower(c));
    if (!schema.columns.count(table)) schema.table_order.push_back(table);
    schema.columns[table] = std::move(lowered);  // a repeated name keeps the last, as a dict does
  }
  schema.id_map["*"] = "__all__";
  for (const std::string& table : schema.table_order)
    for (const std::string& col : schema.columns[table]) schema.id_map[table + "." + col] = "__" + table + "." + col + "__";
  for (const std::string& table : schema.table_order) schema.id_map[table] = "__" + table + "__";
  return schema;
}

Schema load_schema_sqlite(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  if (rc != SQLITE_OK) {
    std::string why = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    fail(path, ": cannot open database: ", why);
  }
  auto query_column = [&](const std::string& sql, int column) {
    sqlite3_stmt* stmt = nullptr;
    std::vector<std::string> out;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
      std::string why = sqlite3_errmsg(db);
      sqlite3_close(db);
      fail(path, ": reading the schema (", sql, "): ", why);
    }
    int step;
    while ((step = sqlite3_step(stmt)) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, column);
      out.emplace_back(text ? reinterpret_cast<const char*>(text) : "");
    }
    sqlite3_finalize(stmt);
    if (step != SQLITE_DONE) {
      std::string why = sqlite3_errmsg(db);
      sqlite3_close(db);
      fail(path, ": reading the schema (", sql, "): ", why);
    }
    return out;
  };
  std::vector<std::pair<std::string, std::vector<std::string>>> tables;
  for (const std::string& name : query_column("SELECT name FROM sqlite_master WHERE type='table'", 0)) {
    std::string lowered = python_lower(name);
    std::string quoted;
    for (char c : lowered) quoted += c == '\'' ? std::string("''") : std::string(1, c);
    tables.emplace_back(lowered, query_column("PRAGMA table_info('" + quoted + "')", 1));
  }
  sqlite3_close(db);
  return make_schema(tables);
}

// ---------------------------------------------------------------------------------------------
// Parser

namespace {

const char* const kClauseKeywords[] = {"select", "from", "where", "group", "order", "limit", "intersect", "union", "except"};
const char* const kJoinKeywords[] = {"join", "on", "as"};
const char* const kSqlOps[] = {"intersect", "union", "except"};

template <size_t N>
int index_in(const char* const (&list)[N], const std::string& tok) {
  for (size_t i = 0; i < N; ++i)
    if (tok == list[i]) return static_cast<int>(i);
  return -1;
}

bool is_clause_keyword(const std::string& t) { return index_in(kClauseKeywords, t) >= 0; }
bool is_join_keyword(const std::string& t) { return index_in(kJoinKeywords, t) >= 0; }
bool is_end_paren_or_semicolon(const std::string& t) { return t == ")" || t == ";"; }

// A Python list slice: toks[begin:end] of the whole token list; at() raises IndexError.
struct Toks {
  const std::vector<std::string>* all;
  size_t begin, end;
  size_t size() const { return end - begin; }
  const std::string& at(size_t i) const {
    if (i >= size()) fail("IndexError: token index ", i, " past the end (", size(), " tokens)");
    return (*all)[begin + i];
  }
  Toks slice(size_t from, size_t to) const {
    from = std::min(from, size());
    to = std::min(to, size());
    if (to < from) to = from;
    return Toks{all, begin + from, begin + to};
  }
};

using AliasMap = std::unordered_map<std::string, std::string>;

// Python's recursion limit (1000 frames, at least one per nested query) stops process_sql with
// a RecursionError before a query nests this deep, and evaluate() takes that as an unparsable
// prediction. Without the limit the C++ stack overflowed instead: a crash a few thousand levels
// down (about 2000 under ASan; fuzz/README.md).
constexpr int kMaxNesting = 1000;

struct Parser {
  const Schema& schema;
  const AliasMap& tables_with_alias;
  mutable int depth = 0;  // parse_sql calls in progress

  const std::string& lookup_alias(const std::string& alias) const {
    auto it = tables_with_alias.find(alias);
    if (it == tables_with_alias.end()) fail("KeyError: unknown table or alias '", alias, "'");
    return it->second;
  }
  const std::string& lookup_id(const std::string& key) const {
    auto it = schema.id_map.find(key);
    if (it == schema.id_map.end()) fail("KeyError: '", key, "' is not in the schema");
    return it->second;
  }

  size_t parse_col(const Toks& toks, size_t start, const std::vector<std::string>& default_tables, std::string& col_id) const {
    const std::string& tok = toks.at(start);
    if (tok == "*") {
      col_id = lookup_id(tok);
      return start + 1;
    }
    size_t dot = tok.find('.');
    if (dot != std::string::npos) {
      if (tok.find('.', dot + 1) != std::string::npos) fail("ValueError: too many values to unpack in '", tok, "'");
      std::string key = lookup_alias(tok.substr(0, dot)) + "." + tok.substr(dot + 1);
      col_id = lookup_id(key);
      return start + 1;
    }
    check(!default_tables.empty(), "Default tables should not be None or empty");
    for (const std::string& alias : default_tables) {
      const std::string& table = lookup_alias(alias);
      auto cols = schema.columns.find(table);
      if (cols == schema.columns.end()) fail("KeyError: '", table, "' is not a table");
      if (std::find(cols->second.begin(), cols->second.end(), tok) != cols->second.end()) {
        col_id = lookup_id(table + "." + tok);
        return start + 1;
      }
    }
    fail("Error col: ", tok);
  }

  size_t parse_col_unit(const Toks& toks, size_t start, const std::vector<std::string>& dt, ColUnit& out) const {
    size_t idx = start, len = toks.size();
    bool is_block = false;
    out = ColUnit{};
    if (toks.at(idx) == "(") {
      is_block = true;
      ++idx;
    }
    int agg = index_in(kAggOps, toks.at(idx));
    if (agg >= 0) {
      out.agg = agg;
      ++idx;
      check(idx < len && toks.at(idx) == "(", "AssertionError: '(' expected after aggregate at token ", idx);
      ++idx;
      if (toks.at(idx) == "distinct") {
        ++idx;
        out.distinct = Flag::True;
      }
      idx = parse_col(toks, idx, dt, out.col);
      check(idx < len && toks.at(idx) == ")", "AssertionError: ')' expected after aggregate at token ", idx);
      return idx + 1;
    }
    if (toks.at(idx) == "distinct") {
      ++idx;
      out.distinct = Flag::True;
    }
    idx = parse_col(toks, idx, dt, out.col);
    if (is_block) {
      check(toks.at(idx) == ")", "AssertionError: ')' expected at token ", idx);
      ++idx;
    }
    return idx;
  }

  size_t parse_val_unit(const Toks& toks, size_t start, const std::vector<std::string>& dt, ValUnit& out) const {
    size_t idx = start, len = toks.size();
    bool is_block = false;
    out = ValUnit{};
    if (toks.at(idx) == "(") {
      is_block = true;
      ++idx;
    }
    idx = parse_col_unit(toks, idx, dt, out.col1);
    if (idx < len) {
      int op = index_in(kUnitOps, toks.at(idx));
      if (op >= 0) {
        out.op = op;
        ++idx;
        out.has_col2 = true;
        idx = parse_col_unit(toks, idx, dt, out.col2);
      }
    }
    if (is_block) {
      check(toks.at(idx) == ")", "AssertionError: ')' expected at token ", idx);
      ++idx;
    }
    return idx;
  }

  size_t parse_table_unit(const Toks& toks, size_t start, TableUnit& out, std::string& table_name) const {
    size_t idx = start;
    const std::string& key = lookup_alias(toks.at(idx));
    if (idx + 1 < toks.size() && toks.at(idx + 1) == "as")
      idx += 3;
    else
      idx += 1;
    out = TableUnit{};
    out.table = lookup_id(key);
    table_name = key;
    return idx;
  }

  size_t parse_value(const Toks& toks, size_t start, const std::vector<std::string>& dt, Value& out) const;
  size_t parse_condition(const Toks& toks, size_t start, const std::vector<std::string>& dt, Condition& out) const;
  size_t parse_select(const Toks& toks, size_t start, const std::vector<std::string>& dt, Sql& sql) const;
  size_t parse_from(const Toks& toks, size_t start, Sql& sql, std::vector<std::string>& default_tables) const;
  size_t parse_sql(const Toks& toks, size_t start, Sql& sql) const;
};

// Python's float(): optional sign, then inf / infinity / nan, or decimal digits with optional
// single underscores between digits, a point and an exponent. Tokens are already lower-case.
bool python_float(const std::string& s, double& value) {
  size_t i = 0, n = s.size();
  std::string clean;
  if (i < n && (s[i] == '+' || s[i] == '-')) clean += s[i++];
  std::string rest = s.substr(i);
  if (rest == "inf" || rest == "infinity" || rest == "nan") {
    value = rest == "nan" ? std::nan("") : (clean == "-" ? -INFINITY : INFINITY);
    return true;
  }
  auto digits = [&](bool& any) {
    any = false;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
      clean += s[i++];
      any = true;
      if (i + 1 < n && s[i] == '_' && s[i + 1] >= '0' && s[i + 1] <= '9') ++i;
    }
  };
  bool int_part = false, frac_part = false;
  digits(int_part);
  if (i < n && s[i] == '.') {
    clean += s[i++];
    digits(frac_part);
  }
  if (!int_part && !frac_part) return false;
  if (i < n && s[i] == 'e') {
    clean += s[i++];
    if (i < n && (s[i] == '+' || s[i] == '-')) clean += s[i++];
    bool exp_part = false;
    digits(exp_part);
    if (!exp_part) return false;
  }
  if (i != n) return false;
  value = std::strtod(clean.c_str(), nullptr);
  return true;
}

size_t Parser::parse_value(const Toks& toks, size_t start, const std::vector<std::string>& dt, Value& out) const {
  size_t idx = start, len = toks.size();
  bool is_block = false;
  out = Value{};
  if (toks.at(idx) == "(") {
    is_block = true;
    ++idx;
  }
  const std::string& tok = toks.at(idx);
  double number = 0;
  if (tok == "select") {
    auto sub = std::make_shared<Sql>();
    idx = parse_sql(toks, idx, *sub);
    out.kind = Value::Kind::Query;
    out.query = std::move(sub);
  } else if (tok.find('"') != std::string::npos) {
    out.kind = Value::Kind::String;
    out.text = tok;
    ++idx;
  } else if (python_float(tok, number)) {
    out.kind = Value::Kind::Number;
    out.number = number;
    ++idx;
  } else {
    size_t end_idx = idx;
    while (end_idx < len) {
      const std::string& t = toks.at(end_idx);
      if (t == "," || t == ")" || t == "and" || is_clause_keyword(t) || is_join_keyword(t)) break;
      ++end_idx;
    }
    // The official code re-parses from start_idx (a leading "(" included), not from idx.
    out.kind = Value::Kind::Column;
    parse_col_unit(toks.slice(start, end_idx), 0, dt, out.column);
    idx = end_idx;
  }
  if (is_block) {
    check(toks.at(idx) == ")", "AssertionError: ')' expected after value at token ", idx);
    ++idx;
  }
  return idx;
}

size_t Parser::parse_condition(const Toks& toks, size_t start, const std::vector<std::string>& dt, Condition& conds) const {
  size_t idx = start, len = toks.size();
  conds.clear();
  while (idx < len) {
    CondItem item;
    idx = parse_val_unit(toks, idx, dt, item.unit.val);
    if (toks.at(idx) == "not") {
      item.unit.not_op = true;
      ++idx;
    }
    int op = idx < len ? index_in(kWhereOps, toks.at(idx)) : -1;
    check(op >= 0, "Error condition: idx: ", idx, ", tok: ", idx < len ? toks.at(idx) : std::string("<end>"));
    item.unit.op = op;
    ++idx;
    if (op == kOpBetween) {
      idx = parse_value(toks, idx, dt, item.unit.val1);
      check(toks.at(idx) == "and", "AssertionError: 'and' expected in BETWEEN at token ", idx);
      ++idx;
      idx = parse_value(toks, idx, dt, item.unit.val2);
    } else {
      idx = parse_value(toks, idx, dt, item.unit.val1);
    }
    conds.push_back(std::move(item));
    if (idx < len) {
      const std::string& t = toks.at(idx);
      if (is_clause_keyword(t) || is_end_paren_or_semicolon(t) || is_join_keyword(t)) break;
      if (t == "and" || t == "or") {
        CondItem conj;
        conj.is_conj = true;
        conj.conj = t;
        conds.push_back(std::move(conj));
        ++idx;
      }
    }
  }
  return idx;
}

size_t Parser::parse_select(const Toks& toks, size_t start, const std::vector<std::string>& dt, Sql& sql) const {
  size_t idx = start, len = toks.size();
  check(toks.at(idx) == "select", "'select' not found at token ", idx);
  ++idx;
  sql.select_distinct = Flag::False;
  if (idx < len && toks.at(idx) == "distinct") {
    ++idx;
    sql.select_distinct = Flag::True;
  }
  sql.select.clear();
  while (idx < len && !is_clause_keyword(toks.at(idx))) {
    int agg = index_in(kAggOps, toks.at(idx));
    if (agg >= 0)
      ++idx;
    else
      agg = 0;
    ValUnit vu;
    idx = parse_val_unit(toks, idx, dt, vu);
    sql.select.emplace_back(agg, std::move(vu));
    if (idx < len && toks.at(idx) == ",") ++idx;
  }
  return idx;
}

size_t Parser::parse_from(const Toks& toks, size_t start, Sql& sql, std::vector<std::string>& default_tables) const {
  size_t len = toks.size();
  size_t from_at = start;
  while (from_at < len && toks.at(from_at) != "from") ++from_at;
  check(from_at < len, "'from' not found");
  size_t idx = from_at + 1;
  default_tables.clear();
  sql.from_units.clear();
  sql.from_conds.clear();
  while (idx < len) {
    bool is_block = false;
    if (toks.at(idx) == "(") {
      is_block = true;
      ++idx;
    }
    if (toks.at(idx) == "select") {
      TableUnit unit;
      unit.is_sql = true;
      unit.query = std::make_shared<Sql>();
      idx = parse_sql(toks, idx, *unit.query);
      sql.from_units.push_back(std::move(unit));
    } else {
      if (idx < len && toks.at(idx) == "join") ++idx;
      TableUnit unit;
      std::string name;
      idx = parse_table_unit(toks, idx, unit, name);
      sql.from_units.push_back(std::move(unit));
      default_tables.push_back(std::move(name));
    }
    if (idx < len && toks.at(idx) == "on") {
      ++idx;
      Condition these;
      idx = parse_condition(toks, idx, default_tables, these);
      if (!sql.from_conds.empty()) {
        CondItem conj;
        conj.is_conj = true;
        conj.conj = "and";
        sql.from_conds.push_back(std::move(conj));
      }
      for (CondItem& c : these) sql.from_conds.push_back(std::move(c));
    }
    if (is_block) {
      check(toks.at(idx) == ")", "AssertionError: ')' expected in FROM at token ", idx);
      ++idx;
    }
    if (idx < len && (is_clause_keyword(toks.at(idx)) || is_end_paren_or_semicolon(toks.at(idx)))) break;
  }
  return idx;
}

size_t Parser::parse_sql(const Toks& toks, size_t start, Sql& sql) const {
  check(depth < kMaxNesting, "RecursionError: queries nested more than ", kMaxNesting, " deep");
  struct Nested {
    int& depth;
    explicit Nested(int& d) : depth(d) { ++depth; }
    ~Nested() { --depth; }
  } nested(depth);
  size_t idx = start, len = toks.size();
  bool is_block = false;
  if (toks.at(idx) == "(") {
    is_block = true;
    ++idx;
  }
  std::vector<std::string> dt;
  size_t from_end = parse_from(toks, start, sql, dt);
  parse_select(toks, idx, dt, sql);
  idx = from_end;
  if (idx < len && toks.at(idx) == "where") idx = parse_condition(toks, idx + 1, dt, sql.where);
  if (idx < len && toks.at(idx) == "group") {
    ++idx;
    check(toks.at(idx) == "by", "AssertionError: 'by' expected after GROUP at token ", idx);
    ++idx;
    while (idx < len && !(is_clause_keyword(toks.at(idx)) || is_end_paren_or_semicolon(toks.at(idx)))) {
      ColUnit cu;
      idx = parse_col_unit(toks, idx, dt, cu);
      sql.group_by.push_back(std::move(cu));
      if (idx < len && toks.at(idx) == ",")
        ++idx;
      else
        break;
    }
  }
  if (idx < len && toks.at(idx) == "having") idx = parse_condition(toks, idx + 1, dt, sql.having);
  if (idx < len && toks.at(idx) == "order") {
    ++idx;
    check(toks.at(idx) == "by", "AssertionError: 'by' expected after ORDER at token ", idx);
    ++idx;
    sql.has_order = true;
    sql.order_dir = "asc";
    while (idx < len && !(is_clause_keyword(toks.at(idx)) || is_end_paren_or_semicolon(toks.at(idx)))) {
      ValUnit vu;
      idx = parse_val_unit(toks, idx, dt, vu);
      sql.order_by.push_back(std::move(vu));
      if (idx < len && (toks.at(idx) == "desc" || toks.at(idx) == "asc")) {
        sql.order_dir = toks.at(idx);
        ++idx;
      }
      if (idx < len && toks.at(idx) == ",")
        ++idx;
      else
        break;
    }
  }
  if (idx < len && toks.at(idx) == "limit") {
    idx += 2;  // the value is never read: limit is None or 1
    sql.has_limit = true;
  }
  while (idx < len && toks.at(idx) == ";") ++idx;
  if (is_block) {
    check(toks.at(idx) == ")", "AssertionError: ')' expected to close the query at token ", idx);
    ++idx;
  }
  while (idx < len && toks.at(idx) == ";") ++idx;
  if (idx < len) {
    int op = index_in(kSqlOps, toks.at(idx));
    if (op >= 0) {
      ++idx;
      auto sub = std::make_shared<Sql>();
      idx = parse_sql(toks, idx, *sub);
      (op == 0 ? sql.intersect : op == 1 ? sql.union_ : sql.except) = std::move(sub);
    }
  }
  return idx;
}

}  // namespace

Sql parse_spider_sql(const Schema& schema, std::string_view query) {
  std::vector<std::string> toks = spider_tokenize(query);
  // scan_alias: every "as" maps the next token to the previous one (toks[-1] for "as" first).
  AliasMap aliases;
  for (size_t i = 0; i < toks.size(); ++i) {
    if (toks[i] != "as") continue;
    if (i + 1 >= toks.size()) fail("IndexError: 'as' is the last token");
    aliases[toks[i + 1]] = i == 0 ? toks.back() : toks[i - 1];
  }
  for (const std::string& table : schema.table_order) {
    check(!aliases.count(table), "Alias ", table, " has the same name in table");
    aliases[table] = table;
  }
  Parser parser{schema, aliases};
  Sql sql;
  parser.parse_sql(Toks{&toks, 0, toks.size()}, 0, sql);
  return sql;
}

// ---------------------------------------------------------------------------------------------
// Rendering

namespace {

const char* flag_str(Flag f) { return f == Flag::None ? "None" : f == Flag::True ? "True" : "False"; }

void render(std::ostream& o, const Sql& s);

void render(std::ostream& o, const ColUnit& c) { o << "(" << c.agg << ", '" << c.col << "', " << flag_str(c.distinct) << ")"; }

void render(std::ostream& o, const ValUnit& v) {
  o << "(" << v.op << ", ";
  render(o, v.col1);
  o << ", ";
  if (v.has_col2)
    render(o, v.col2);
  else
    o << "None";
  o << ")";
}

void render(std::ostream& o, const Value& v) {
  switch (v.kind) {
    case Value::Kind::None: o << "None"; break;
    case Value::Kind::Number: o << v.number; break;
    case Value::Kind::String: o << "'" << v.text << "'"; break;
    case Value::Kind::Column: render(o, v.column); break;
    case Value::Kind::Query: render(o, *v.query); break;
  }
}

void render(std::ostream& o, const Condition& c) {
  o << "[";
  for (size_t i = 0; i < c.size(); ++i) {
    if (i) o << ", ";
    if (c[i].is_conj) {
      o << "'" << c[i].conj << "'";
      continue;
    }
    const CondUnit& u = c[i].unit;
    o << "(" << (u.not_op ? "True" : "False") << ", " << u.op << ", ";
    render(o, u.val);
    o << ", ";
    render(o, u.val1);
    o << ", ";
    render(o, u.val2);
    o << ")";
  }
  o << "]";
}

void render(std::ostream& o, const Sql& s) {
  o << "{'select': (" << flag_str(s.select_distinct) << ", [";
  for (size_t i = 0; i < s.select.size(); ++i) {
    o << (i ? ", (" : "(") << s.select[i].first << ", ";
    render(o, s.select[i].second);
    o << ")";
  }
  o << "]), 'from': {'table_units': [";
  for (size_t i = 0; i < s.from_units.size(); ++i) {
    if (i) o << ", ";
    if (s.from_units[i].is_sql) {
      o << "('sql', ";
      render(o, *s.from_units[i].query);
      o << ")";
    } else {
      o << "('table_unit', '" << s.from_units[i].table << "')";
    }
  }
  o << "], 'conds': ";
  render(o, s.from_conds);
  o << "}, 'where': ";
  render(o, s.where);
  o << ", 'groupBy': [";
  for (size_t i = 0; i < s.group_by.size(); ++i) {
    if (i) o << ", ";
    render(o, s.group_by[i]);
  }
  o << "], 'having': ";
  render(o, s.having);
  o << ", 'orderBy': ";
  if (s.has_order) {
    o << "('" << s.order_dir << "', [";
    for (size_t i = 0; i < s.order_by.size(); ++i) {
      if (i) o << ", ";
      render(o, s.order_by[i]);
    }
    o << "])";
  } else {
    o << "[]";
  }
  o << ", 'limit': " << (s.has_limit ? "1" : "None");
  const std::pair<const char*, const std::shared_ptr<Sql>*> children[] = {
      {"intersect", &s.intersect}, {"union", &s.union_}, {"except", &s.except}};
  for (const auto& [name, child] : children) {
    o << ", '" << name << "': ";
    if (*child)
      render(o, **child);
    else
      o << "None";
  }
  o << "}";
}

}  // namespace

std::string to_string(const Sql& sql) {
  std::ostringstream o;
  render(o, sql);
  return o.str();
}

}  // namespace sqlrl::sql

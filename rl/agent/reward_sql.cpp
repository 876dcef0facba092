// SQL structure for the reward terms: Spider parses of predicted and gold queries, a lexical
// fallback for schema items when Spider's parser rejects a query, and difficulty labels.
#include <cctype>
#include <unordered_map>
#include <unordered_set>

#include "rl/agent/reward_detail.h"
#include "runtime/error.h"
#include "sql/eval/lexer.h"
#include "sql/eval/sql_features.h"

namespace sqlrl::rl::detail {
namespace {

bool parse_on(const DbFacts& db, std::string_view sql, sql::Sql& raw, sql::Sql& rebuilt) {
  try {
    raw = sql::parse_spider_sql(db.schema, sql);
    rebuilt = sql::rebuild_for_match(raw, db.schema, db.kmap);
    return true;
  } catch (const std::exception&) {  // the official evaluator scores an unparsable query as empty
    return false;
  }
}

struct LexToken {
  std::string text;    // lower-case; identifiers without their quotes
  bool ident = false;  // bare word or `quoted` / [quoted] / "quoted" name
  bool dquoted = false;
};

// SQLite's token shapes, enough to find names: strings, numbers, quoted and bare identifiers,
// one-character punctuation.
std::vector<LexToken> lex(std::string_view s) {
  std::vector<LexToken> out;
  size_t i = 0;
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || (c & 0x80); };
  while (i < s.size()) {
    char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == '\'') {  // string literal ('' escapes a quote)
      size_t j = i + 1;
      while (j < s.size() && !(s[j] == '\'' && (j + 1 >= s.size() || s[j + 1] != '\''))) j += (s[j] == '\'') ? 2 : 1;
      out.push_back({"'", false, false});
      i = j + 1;
    } else if (c == '"' || c == '`' || c == '[') {
      char close = c == '[' ? ']' : c;
      size_t j = s.find(close, i + 1);
      if (j == std::string_view::npos) j = s.size();
      out.push_back({sql::python_lower(s.substr(i + 1, j - i - 1)), true, c == '"'});
      i = j + 1;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && (word(s[j]) || s[j] == '.')) ++j;
      out.push_back({"0", false, false});
      i = j;
    } else if (word(c)) {
      size_t j = i;
      while (j < s.size() && word(s[j])) ++j;
      out.push_back({sql::python_lower(s.substr(i, j - i)), true, false});
      i = j;
    } else {
      out.push_back({std::string(1, c), false, false});
      ++i;
    }
  }
  return out;
}

const std::unordered_set<std::string>& keywords() {
  static const std::unordered_set<std::string> k = {
      "select", "from",  "where",  "group",    "by",      "order",   "having",  "limit", "offset", "join",
      "inner",  "left",  "right",  "outer",    "cross",   "natural", "full",    "on",    "using",  "as",
      "and",    "or",    "not",    "in",       "like",    "glob",    "between", "is",    "null",   "distinct",
      "all",    "asc",   "desc",   "union",    "intersect", "except", "exists", "case",  "when",   "then",
      "else",   "end",   "cast",   "collate",  "escape",  "true",    "false",   "with",  "recursive", "values",
      "nocase", "integer", "real", "text",     "numeric", "float",   "int",     "date",  "nulls",  "first",
      "last",   "over",  "partition", "rows",  "filter",  "regexp",  "match",   "isnull", "notnull"};
  return k;
}

}  // namespace

std::set<std::string> lexical_schema_items(const sql::Schema& schema, std::string_view sql) {
  std::vector<LexToken> t = lex(sql);
  auto is_table = [&](const std::string& n) { return schema.columns.count(n) > 0; };
  auto has_column = [&](const std::string& table, const std::string& col) {
    auto it = schema.columns.find(table);
    if (it == schema.columns.end()) return false;
    for (const std::string& c : it->second)
      if (c == col) return true;
    return false;
  };
  // Aliases: "t AS x" / "t x" name a table; "expr AS x" names an output column (skipped).
  std::unordered_map<std::string, std::string> alias;  // alias -> table ("" for column aliases)
  std::vector<std::string> query_tables;
  for (size_t i = 0; i < t.size(); ++i) {
    if (!t[i].ident) continue;
    bool after_as = i > 0 && t[i - 1].ident && t[i - 1].text == "as";
    if (is_table(t[i].text) && !after_as) {
      query_tables.push_back(t[i].text);
      size_t a = (i + 1 < t.size() && t[i + 1].text == "as") ? i + 2 : i + 1;
      if (a < t.size() && t[a].ident && !keywords().count(t[a].text) && !(a + 1 < t.size() && t[a + 1].text == "."))
        alias[t[a].text] = t[i].text;
    } else if (after_as && !alias.count(t[i].text)) {
      alias[t[i].text] = "";
    }
  }
  std::set<std::string> items;
  for (size_t i = 0; i < t.size(); ++i) {
    if (!t[i].ident) continue;
    const std::string& name = t[i].text;
    if (i + 2 < t.size() && t[i + 1].text == "." && t[i + 2].ident) {  // qualified x.c
      std::string table = is_table(name) ? name : (alias.count(name) ? alias[name] : "");
      const std::string& col = t[i + 2].text;
      if (table.empty())
        items.insert("?" + name + "." + col);
      else {
        items.insert(table);
        items.insert(has_column(table, col) ? table + "." + col : "?" + table + "." + col);
      }
      i += 2;
      continue;
    }
    if (i > 0 && t[i - 1].text == ".") continue;  // x.* and the like
    if (is_table(name) && !alias.count(name)) {
      items.insert(name);
      continue;
    }
    if (alias.count(name) || keywords().count(name)) continue;
    if (i + 1 < t.size() && t[i + 1].text == "(") continue;  // a function
    std::string owner;
    for (const std::string& table : query_tables)
      if (has_column(table, name)) {
        owner = table;
        break;
      }
    if (!owner.empty()) {
      items.insert(owner);
      items.insert(owner + "." + name);
    } else if (!t[i].dquoted) {  // SQLite reads an unknown "name" as a string: not a schema item
      items.insert("?" + name);
    }
  }
  return items;
}

QueryFacts query_facts(const DbFacts& db, std::string_view sql) {
  QueryFacts q;
  q.parsed = parse_on(db, sql, q.raw, q.rebuilt);
  if (q.parsed) q.parsed_items = sql::schema_items(q.raw);
  q.lexical_items = lexical_schema_items(db.schema, sql);
  return q;
}

double clause_f1_to_gold(const DbFacts& db, const GoldFacts& gold, std::string_view pred) {
  sql::Sql raw, rebuilt;
  if (!gold.q.parsed || !parse_on(db, pred, raw, rebuilt)) return 0;
  return sql::clause_f1(rebuilt, gold.q.rebuilt).mean;
}

TurnClass turn_class_of_label(std::string_view label, std::string_view example_id) {
  std::string l = sql::python_lower(label);
  // Spider hardness (easy/medium/hard/extra), BIRD (simple/moderate/challenging), SynSQL
  // sql_complexity (simple/moderate/complex/highly complex).
  if (l == "easy" || l == "simple") return TurnClass::Simple;
  if (l == "medium" || l == "moderate") return TurnClass::Medium;
  if (l == "hard" || l == "extra" || l == "challenging" || l == "complex" || l == "highly complex") return TurnClass::Hard;
  fail("sqltrail turns reward: example '", example_id, "' has difficulty '", label,
       "'; known: easy, simple, medium, moderate, hard, extra, challenging, complex, highly complex");
}

}  // namespace sqlrl::rl::detail

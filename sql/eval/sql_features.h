// SQL structure for rewards, computed on the same parse as the official evaluation
// (sql/eval/parse.h), so a reward and the EM metric never disagree about what a query contains.
//   schema_items    tables and columns a query touches (SQL-Trail's schema-item Jaccard)
//   token_bigrams   consecutive pairs of the official tokens (SQL-Trail's bigram Jaccard)
//   clause_f1       per-clause F1 over SELECT / WHERE / JOIN / GROUP / ORDER units (MTSQL-R1)
//   string_em       exact match of normalised SQL text
#pragma once
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "sql/eval/eval_spider.h"
#include "sql/eval/parse.h"

namespace sqlrl::sql {

// "t" for tables and "t.c" for columns (lower-case), from every part of the query, nested
// queries included; "*" is not a column.
std::set<std::string> schema_items(const Sql& sql);

// Bigrams of spider_tokenize(sql); quoted values count as one token. Throws on an odd number
// of quotes (as the tokeniser does).
std::set<std::pair<std::string, std::string>> token_bigrams(std::string_view sql);

// |a ∩ b| / |a ∪ b|, and 1 when both are empty.
template <typename T>
double jaccard(const std::set<T>& a, const std::set<T>& b) {
  if (a.empty() && b.empty()) return 1.0;
  size_t common = 0;
  for (const T& x : a) common += b.count(x);
  return static_cast<double>(common) / static_cast<double>(a.size() + b.size() - common);
}

struct ClauseF1 {
  // Per clause: F1 of the multiset of units (precision = matched / pred units, recall =
  // matched / gold units); -1 when the clause is absent from both queries.
  double select = -1, where = -1, join = -1, group = -1, order = -1;
  double mean = 0;  // average over the clauses present in either query
};

// Units are compared after the official rebuild (values dropped, DISTINCT ignored, foreign keys
// unified), i.e. on rebuild_for_match outputs: SELECT (agg, val_unit); WHERE and HAVING
// condition units; JOIN the FROM table units; GROUP the group-by columns; ORDER the ordered
// val_units with the direction, plus "limit" when present.
ClauseF1 clause_f1(const Sql& pred_rebuilt, const Sql& gold_rebuilt);

// Equality after collapsing whitespace, lower-casing outside quoted strings and dropping a
// trailing ';'.
bool string_em(std::string_view pred, std::string_view gold);

}  // namespace sqlrl::sql

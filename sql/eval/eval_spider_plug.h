// test-suite-sql-eval's --plug_value: for a model that does not predict values, every way of
// filling the prediction's value slots with the gold query's values is tried, and the pair counts
// as correct if the prediction itself or any filled-in variant matches on every database file.
// Follows parse.py (tokenize, reformat_query, replace_values, strip_query, extract_query_values,
// plugin, plugin_all_permutations, get_all_preds_for_execution) at test-suite-sql-eval e97acc5
// with sqlparse 0.4.2's lexer:
//   reformat: strip, drop every ';' and TAB, join the non-whitespace sqlparse tokens with ' ';
//   strip_query: every '...' / "..." string token of that text is a value (replaced by a slot in
//     the text, all occurrences); the text is split on whitespace; a piece equal to a match of
//     [-+]?\d*\.\d+ is a value/slot, then a piece equal to a (stripped) match of [^tT]\d+ on the
//     re-joined text; pieces are lower-cased, T<n>.x pieces split around '.';
//   a variant is the prediction's pieces joined by ' ' with each slot replaced by a gold value
//   (itertools.product: values may repeat; a prediction with no slot gives one variant, the
//   lower-cased re-spaced text; gold without values and a prediction with slots give none).
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace sqlrl::sql {

// The pieces of sqlparse 0.4.2's lexer that plug-value depends on.
enum class SqlparseTokenKind { Whitespace, String, Other };
struct SqlparseToken {
  SqlparseTokenKind kind;
  std::string_view text;
};
std::vector<SqlparseToken> sqlparse_tokens(std::string_view sql);

// parse.extract_query_values: the lower-cased pieces with "valuerare" for each slot, and the
// values (set semantics, in first-seen order).
struct QueryValues {
  std::vector<std::string> pieces;
  std::vector<std::string> values;
};
QueryValues extract_query_values(std::string_view sql);

inline constexpr std::string_view kValueSlot = "valuerare";

// Calls visit(variant) for each variant of get_all_preds_for_execution, in product order over
// the gold values, until visit returns true; returns whether one did.
bool for_each_plugged_prediction(std::string_view gold, std::string_view pred,
                                 const std::function<bool(const std::string&)>& visit);

}  // namespace sqlrl::sql

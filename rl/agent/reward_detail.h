// Internals shared by rl/agent/reward*.cpp: what one scoring call knows about the predicted and gold
// queries, and the per-context caches of parsed gold queries and database schemas.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rl/agent/reward.h"
#include "sql/eval/eval_spider.h"
#include "sql/eval/parse.h"

namespace sqlrl::rl::detail {

// Spider's process_sql schema of a database plus the foreign-key map the official evaluation
// reads from tables.json, rebuilt here from the file's own FOREIGN KEY clauses.
struct DbFacts {
  sql::Schema schema;
  sql::ForeignKeyMap kmap;
};

// One query parsed on its database (Spider's parser; BIRD-style SQL often fails it).
struct QueryFacts {
  bool parsed = false;
  sql::Sql raw;      // as parsed (hardness reads this)
  sql::Sql rebuilt;  // rebuild_for_match: what EM and clause F1 compare
  std::set<std::string> parsed_items;   // schema_items(raw) when parsed
  std::set<std::string> lexical_items;  // lexical_schema_items, always
};

QueryFacts query_facts(const DbFacts& db, std::string_view sql);

// Tables and columns named in `sql` without a full parse, in schema_items' spelling ("t",
// "t.c", lower-case): table names; "x.c" with x a table or an alias ("t AS x", "t x") -> "t.c";
// a bare identifier that is a column of a table named in the query -> "t.c" (first such table)
// plus its table; any other identifier not followed by "(" (not a function) is kept as "?name"
// so that a hallucinated name counts in the union and never in the intersection.
std::set<std::string> lexical_schema_items(const sql::Schema& schema, std::string_view sql);

// SQL-Trail's difficulty classes (A.4 eq. 7).
enum class TurnClass { Simple, Medium, Hard };
// Maps a dataset label: easy/simple -> Simple; medium/moderate -> Medium; hard/extra/
// challenging/complex/highly complex -> Hard. Unknown labels throw naming the example.
TurnClass turn_class_of_label(std::string_view label, std::string_view example_id);

struct GoldFacts {
  std::string sql;  // as executed (Spider mode: postprocessed, DISTINCT removed)
  QueryFacts q;
  std::set<std::pair<std::string, std::string>> bigrams;
  bool bigrams_ok = false;  // false: the tokeniser rejected it (odd quotes)
};

std::shared_ptr<const DbFacts> db_facts(RewardContext& ctx, const std::string& db_path);
std::shared_ptr<const GoldFacts> gold_facts(RewardContext& ctx, const sql::Example& example);

// The query text a mode executes: Spider mode applies the official exec preprocessing.
std::string exec_text(const RewardContext& ctx, std::string_view sql);

// What every panel needs about the final answer.
struct Outcome {
  bool answered = false;
  std::string pred;         // the final SQL as submitted
  bool executable = false;  // ran: no error, no timeout, no second statement
  bool ex = false;          // executable and equal to the gold result
  // The gold's or the answer's execution failed for the infrastructure's reason
  // (sql::Result::infra_error): executable and ex then say nothing about the model.
  bool infra_failure = false;
  std::string infra_reason;  // "gold SQL: <error>" / "final SQL: <error>"
};
Outcome final_outcome(const sql::Example& example, const Trajectory& traj, RewardContext& ctx);

// Raw (unweighted) term values in the panel's term order.
std::vector<double> mtir_terms(const sql::Example& ex, const Trajectory& t, const Outcome& o, RewardContext& ctx);
std::vector<double> sqltrail_terms(const sql::Example& ex, const Trajectory& t, const Outcome& o, RewardContext& ctx);
std::vector<double> skyrl_terms(const sql::Example& ex, const Trajectory& t, const Outcome& o, RewardContext& ctx);
std::vector<double> mtsql_terms(const sql::Example& ex, const Trajectory& t, const Outcome& o, RewardContext& ctx);
// In rl/agent/protocol_arctic.cpp, beside its protocol.
std::vector<double> arctic_terms(const sql::Example& ex, const Trajectory& t, const Outcome& o, RewardContext& ctx);

// Clause-level F1 (SELECT/WHERE/JOIN/GROUP/ORDER mean, sql/eval/sql_features.h) of `pred` against
// the gold; 0 when either side fails Spider's parser.
double clause_f1_to_gold(const DbFacts& db, const GoldFacts& gold, std::string_view pred);

}  // namespace sqlrl::rl::detail

// Spider exact-set-match (EM), its ten partial components and the hardness levels, as
// test-suite-sql-eval's evaluation.py computes them on process_sql structures (sql/eval/parse.h).
//
// Per pair the official flow is: hardness(gold parse) -> rebuild both parses (values dropped
// except nested queries, DISTINCT -> None, foreign-key columns canonicalised for columns of
// the FROM tables) -> partial scores -> exact. The quirks kept here on purpose: JOIN conditions
// are never compared, GROUP BY compares column names without their table, ORDER compares only
// LIMIT's presence, and/or compares sets, count_others counts a WHERE with >= 2 conditions and
// counts every "and"/"or" of HAVING as an aggregate.
#pragma once
#include <array>
#include <string>
#include <unordered_map>

#include <nlohmann/json_fwd.hpp>

#include "sql/eval/parse.h"

namespace sqlrl::sql {

// "__table.column__" -> the member of its foreign-key group with the smallest column index.
using ForeignKeyMap = std::unordered_map<std::string, std::string>;

// build_foreign_key_map for one tables.json entry; throws naming the field when it is malformed.
ForeignKeyMap build_foreign_key_map(const nlohmann::json& entry);
// db_id -> map, for every entry of a tables.json file.
std::unordered_map<std::string, ForeignKeyMap> load_foreign_key_maps(const std::string& tables_json_path);

enum class Hardness { Easy = 0, Medium = 1, Hard = 2, Extra = 3 };
const char* hardness_name(Hardness h);  // "easy", "medium", "hard", "extra"

// eval_hardness on the gold parse *before* rebuilding. Throws where the Python raises (a
// malformed condition list reaching get_nestedSQL).
Hardness spider_hardness(const Sql& gold);

inline constexpr int kNumPartial = 10;
inline constexpr const char* kPartialTypes[kNumPartial] = {
    "select", "select(no AGG)", "where", "where(no OP)", "group(no Having)", "group", "order", "and/or", "IUEN", "keywords"};

struct PartialScore {
  int acc = 0, rec = 0, f1 = 0, label_total = 0, pred_total = 0;
};

struct MatchScores {
  bool exact = false;
  std::array<PartialScore, kNumPartial> partial{};
};

// rebuild_sql_val then rebuild_sql_col (with the valid columns of this query's own FROM).
Sql rebuild_for_match(const Sql& sql, const Schema& schema, const ForeignKeyMap& kmap);

// Evaluator.eval_exact_match(pred, gold) on rebuilt parses: the partial scores and exact.
MatchScores spider_match(const Sql& pred_rebuilt, const Sql& gold_rebuilt);

}  // namespace sqlrl::sql

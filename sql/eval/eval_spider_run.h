// The official evaluate() of test-suite-sql-eval as a library call: read the gold and prediction
// files (blank lines separate interactions; Spider files are one interaction), score every pair
// (hardness, EM with partial components, EX), aggregate by hardness and by turn (question
// match), joint_all (interaction match), and render exactly the text the official script prints.
#pragma once
#include <array>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sql/eval/eval_spider.h"
#include "sql/exec/pool.h"

namespace sqlrl::sql {

class Pool;

enum class EvalType { All, Match, Exec };

struct SpiderEvalOptions {
  std::string gold_path, pred_path;
  std::string db_dir;       // <db_dir>/<db_id>/<db_id>.sqlite (+ other *.sqlite there for EX)
  std::string tables_path;  // tables.json, for the foreign-key map (match only)
  EvalType etype = EvalType::All;
  bool keep_distinct = false;
  bool plug_value = false;  // EX: also try the gold values in the prediction's value slots
  size_t threads = 0;  // items scored in parallel; 0 = the default thread pool's size
  OfficialCaps caps;   // memory per query (sql/exec/pool.h)
};

struct SpiderItem {
  int index = 0, interaction = 0, turn = 0;
  int gold_line = 0;  // 1-based line of the gold file
  std::string db_id, gold, pred;  // pred after the official .replace("value", "1")
  bool pred_parsed = true;
  // The official parser's error when it rejects the gold query (CAST, say: the synthetic
  // benchmark writes it): the item is scored for EX only, outside the hardness levels and EM.
  std::string gold_unparsed;
  Hardness hardness = Hardness::Easy;
  bool has_match = false;  // etype all|match
  MatchScores match;
  int exec = -1;  // -1 when EX was not computed
};

struct SpiderEvalReport {
  std::vector<SpiderItem> items;
  size_t interactions = 0;
  std::string printout;  // byte for byte what the official script prints to stdout
};

// Throws sqlrl::Error naming the file and line for unreadable input, an interaction whose
// prediction and gold line counts differ, a gold query the official parser rejects when only EM
// is asked, or a gold query that fails to execute.
SpiderEvalReport run_spider_eval(const SpiderEvalOptions& options, Pool* pool);

// {"index","interaction","turn","db_id","gold","pred","pred_parsed","hardness","exact",
//  "partial":{component:{"acc","rec","f1","label_total","pred_total"}},"exec"}
nlohmann::json spider_item_json(const SpiderItem& item);

// print_scores's table from scored items (what run_spider_eval appends to its printout).
// Interactions without any item (empty ones) count as jointly correct, as in the official code.
std::string spider_score_table(const std::vector<SpiderItem>& items, size_t interactions, EvalType etype);

}  // namespace sqlrl::sql

// BIRD execution accuracy as BIRD's evaluation.py scores it (AlibabaResearch/DAMO-ConvAI
// bird/llm/src/evaluation.py: package_sqls, execute_sql, execute_model, compute_acc_by_diff,
// print_data):
//   predictions: predict_dev.json, an object whose values are taken in FILE order (keys are not
//     read), each "SQL\t----- bird -----\tdb_id" (exactly one separator) or a non-string, which
//     becomes " " on "financial"; gold: dev_gold.sql, each line strip()ped and split on TAB into
//     exactly SQL and db_id; pairs are zip()ped (the shorter side decides the count);
//   both queries run on the PREDICTION's <db_root>/<db_id>/<db_id>.sqlite, prediction first,
//     under one meta_time_out (30 s) for the pair; 1 iff set(pred rows) == set(gold rows)
//     (sql/exec/compare.h bird_rows_equal: 1 == 1.0, column order matters, duplicates do not),
//     0 on any error or timeout; an empty statement (" ") yields no rows, as Python's sqlite3;
//   dev.json's i-th "difficulty" belongs to pair i; accuracy in percent per simple / moderate /
//     challenging and in total, printed by print_data with "{:<20.2f}".
// Where the official script crashes (a dev.json longer than the pairs or without "difficulty",
// a bad separator or gold line) this throws, naming the file and item. Where it divides by zero
// (a difficulty with no pair) this prints 0.00 instead; without dev.json every pair is "simple".
#pragma once
#include <string>
#include <vector>

#include "sql/exec/pool.h"

namespace sqlrl::sql {

class Pool;

struct BirdEvalOptions {
  std::string pred_path;   // predict_dev.json: {"0": "SQL\t----- bird -----\tdb_id", ...}
  std::string gold_path;   // dev_gold.sql: "SQL\tdb_id" per line
  std::string db_root;     // folder holding <db_id>/<db_id>.sqlite
  std::string diff_path;   // dev.json: a list whose items carry "difficulty"; "" = all "simple"
  double timeout_s = 30;   // BIRD's meta_time_out: prediction and gold together
  OfficialCaps caps;       // memory per query (sql/exec/pool.h)
};

struct BirdItem {
  int index = 0;
  std::string db_id, pred, gold, difficulty;
  int exec = 0;
};

struct BirdEvalReport {
  std::vector<BirdItem> items;
  std::string printout;  // the official stdout: "start calculate", print_data's table, the footer
};

BirdEvalReport run_bird_eval(const BirdEvalOptions& options, Pool& pool);

}  // namespace sqlrl::sql

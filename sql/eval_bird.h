// BIRD execution accuracy as BIRD's evaluation.py scores it: the prediction and the gold run on
// <db_root>/<db_id>/<db_id>.sqlite (db_id taken from the prediction's "\t----- bird -----\t"
// suffix), 1 iff set(pred rows) == set(gold rows) (sql/compare.h bird_rows_equal), 0 on any
// error or timeout on either side; accuracy per difficulty of dev.json (simple / moderate /
// challenging) and in total, in percent.
#pragma once
#include <string>
#include <vector>

namespace sqlrl::sql {

class Pool;

struct BirdEvalOptions {
  std::string pred_path;   // predict_dev.json: {"0": "SQL\t----- bird -----\tdb_id", ...}
  std::string gold_path;   // dev_gold.sql: "SQL\tdb_id" per line
  std::string db_root;     // folder holding <db_id>/<db_id>.sqlite
  std::string diff_path;   // dev.json: a list whose items carry "difficulty"; "" = all "simple"
  double timeout_s = 30;   // BIRD's meta_time_out
};

struct BirdItem {
  int index = 0;
  std::string db_id, pred, gold, difficulty;
  int exec = 0;
};

struct BirdEvalReport {
  std::vector<BirdItem> items;
  std::string printout;  // print_data's table
};

BirdEvalReport run_bird_eval(const BirdEvalOptions& options, Pool& pool);

}  // namespace sqlrl::sql

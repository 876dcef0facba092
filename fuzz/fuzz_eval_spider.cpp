// eval-sql's Spider / SParC / CoSQL inputs (sql/eval/eval_spider_run.h run_spider_eval): the gold
// file (SQL<TAB>db_id lines, blank lines between interactions), the prediction file and
// tables.json, each read from a file, so the input is cut into those three at lines "=====":
//     gold lines
//     =====
//     prediction lines
//     =====
//     tables.json (optional: empty = the fixed concert entry)
// The database folder holds concert/concert.sqlite. Exact matching only (etype match): execution
// would run the fuzzed SQL, which is the SQL pool's business, not this reader's.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_sqlite.h"
#include "fuzz/fuzz_util.h"
#include "sql/eval/eval_spider_run.h"

namespace {

const std::string& eval_folder() {
  static const std::string dir = [] {
    std::string d = sqlrl::fuzz::scratch_dir() + "/spider_eval";
    sqlrl::fuzz::make_sqlite_db(d + "/database/concert/concert.sqlite");
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sqlrl;
  const std::string& dir = eval_folder();
  std::vector<std::string> parts = fuzz::split_parts(fuzz::as_text(data, size), "=====", 3);
  fuzz::write_file(dir + "/gold.txt", parts[0]);
  fuzz::write_file(dir + "/pred.txt", parts[1]);
  fuzz::write_file(dir + "/tables.json", parts[2].empty() ? std::string(fuzz::kConcertTablesJson) : parts[2]);
  fuzz::expect_ok_or_error([&] {
    sql::SpiderEvalOptions options;
    options.gold_path = dir + "/gold.txt";
    options.pred_path = dir + "/pred.txt";
    options.db_dir = dir + "/database";
    options.tables_path = dir + "/tables.json";
    options.etype = sql::EvalType::Match;
    options.threads = 1;
    sql::SpiderEvalReport report = sql::run_spider_eval(options, nullptr);
    // As `eval-sql --dump` writes them (app/cmd_eval_sql.cpp).
    for (const sql::SpiderItem& item : report.items)
      (void)sql::spider_item_json(item).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  });
  return 0;
}

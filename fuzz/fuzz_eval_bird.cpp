// eval-sql's BIRD inputs (sql/eval/eval_bird.h run_bird_eval): predict_dev.json (an object of
// "SQL\t----- bird -----\tdb_id" strings), dev_gold.sql (SQL<TAB>db_id lines) and the optional
// dev.json of difficulties, each read from a file, so the input is cut into those three at
// lines "=====":
//     predict_dev.json
//     =====
//     dev_gold.sql lines
//     =====
//     dev.json (optional: empty = no difficulty file)
// Pairs run on <root>/concert/concert.sqlite through a SQLite pool, with a short timeout and a
// small SQLite heap cap, so a fuzzed query costs little (the official limits have no row cap);
// inputs of more than 32 gold lines are skipped for the same reason.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_sqlite.h"
#include "fuzz/fuzz_util.h"
#include "sql/eval/eval_bird.h"
#include "sql/exec/pool.h"

namespace {

const std::string& eval_folder() {
  static const std::string dir = [] {
    std::string d = sqlrl::fuzz::scratch_dir() + "/bird_eval";
    sqlrl::fuzz::make_sqlite_db(d + "/dev_databases/concert/concert.sqlite");
    return d;
  }();
  return dir;
}

sqlrl::sql::Pool& pool() {
  static sqlrl::sql::Pool* p = [] {
    sqlrl::sql::PoolOptions options;
    options.heap_limit_bytes = int64_t(256) << 20;
    options.worker_threads = 1;
    // Never destroyed: its queries ran on default_thread_pool(), whose destruction at exit is not
    // ordered against this one's.
    return new sqlrl::sql::Pool(options);
  }();
  return *p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sqlrl;
  const std::string& dir = eval_folder();
  std::vector<std::string> parts = fuzz::split_parts(fuzz::as_text(data, size), "=====", 3);
  // Every pair may run into the timeout: more than a few pairs make a slow input, not a finding.
  if (std::count(parts[1].begin(), parts[1].end(), '\n') > 32) return 0;
  fuzz::write_file(dir + "/predict_dev.json", parts[0]);
  fuzz::write_file(dir + "/dev_gold.sql", parts[1]);
  fuzz::write_file(dir + "/dev.json", parts[2]);
  fuzz::expect_ok_or_error([&] {
    sql::BirdEvalOptions options;
    options.pred_path = dir + "/predict_dev.json";
    options.gold_path = dir + "/dev_gold.sql";
    options.db_root = dir + "/dev_databases";
    options.diff_path = parts[2].empty() ? "" : dir + "/dev.json";
    options.timeout_s = 0.5;
    sql::BirdEvalReport report = sql::run_bird_eval(options, pool());
    // As `eval-sql --bird --dump` writes them (app/cmd_eval_sql.cpp).
    for (const sql::BirdItem& it : report.items)
      (void)nlohmann::json{{"index", it.index}, {"db_id", it.db_id}, {"gold", it.gold}, {"pred", it.pred},
                           {"difficulty", it.difficulty}, {"exec", it.exec}}
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  });
  return 0;
}

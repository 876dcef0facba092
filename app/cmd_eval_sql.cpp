// `llm_sqlrl eval-sql`: the official Spider / SParC / CoSQL evaluation (test-suite-sql-eval's
// evaluation.py: EM with partial components, hardness, EX, turn and interaction match), or with
// --bird BIRD's execution accuracy. Prints what the official script prints.
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "runtime/error.h"
#include "sql/eval/eval_bird.h"
#include "sql/eval/eval_spider_run.h"
#include "sql/exec/pool.h"

namespace sqlrl {

// The input files are read as bytes, so a query in the dump may hold invalid UTF-8: written as
// U+FFFD (as eval's examples.jsonl does) instead of nlohmann's strict dump throwing half-way.
constexpr auto kReplace = nlohmann::json::error_handler_t::replace;

void add_eval_sql_command(CLI::App& app) {
  struct Args {
    std::string gold, pred, db, table, etype = "all", dump, diff;
    bool keep_distinct = false, plug_value = false, bird = false;
    size_t threads = 0;
    double bird_timeout = 30;
    int64_t query_memory_mb = 1024, result_mb = 512;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("eval-sql", "Official Spider/SParC/CoSQL (EM, EX) or BIRD (EX) evaluation of predicted SQL");
  cmd->add_option("--gold", args->gold, "gold file: 'SQL<TAB>db_id' lines, blank lines between interactions (BIRD: dev_gold.sql)")->required();
  cmd->add_option("--pred", args->pred, "predictions: one SQL per line, same layout as --gold (BIRD: predict_dev.json)")->required();
  cmd->add_option("--db", args->db, "database folder: <db>/<db_id>/<db_id>.sqlite (EX runs every *.sqlite there)")->required();
  cmd->add_option("--table", args->table, "tables.json (foreign keys for EM)");
  cmd->add_option("--etype", args->etype, "all | match | exec")->check(CLI::IsMember({"all", "match", "exec"}));
  cmd->add_option("--dump", args->dump, "write one JSON line per evaluated pair to this file");
  cmd->add_flag("--keep-distinct", args->keep_distinct, "EX: keep DISTINCT (the official default removes it)");
  cmd->add_flag("--plug-value", args->plug_value,
                "EX: also try every way of putting the gold query's values into the prediction's value slots "
                "(for models that do not predict values)");
  cmd->add_flag("--bird", args->bird, "BIRD input format and scoring (set semantics, by difficulty)");
  cmd->add_option("--diff", args->diff, "BIRD: dev.json with each question's difficulty");
  cmd->add_option("--bird-timeout", args->bird_timeout, "BIRD: seconds for a prediction and its gold together (meta_time_out)");
  cmd->add_option("--threads", args->threads, "pairs scored in parallel (0 = all cores)");
  // The official scripts have no memory cap (sql/exec/pool.h OfficialCaps); a query past one of
  // these is a miss, as it would be in Python on a machine without the memory.
  cmd->add_option("--max-query-memory-mb", args->query_memory_mb,
                  "memory one query may hold inside SQLite (sorts, temp tables, values); past it the query fails")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--max-result-mb", args->result_mb,
                  "memory of one query's result rows; a prediction past it is a miss (its rows are not all there)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->callback([args] {
    sql::Pool pool;
    sql::OfficialCaps caps;
    caps.query_memory_bytes = args->query_memory_mb << 20;
    caps.result_bytes = static_cast<size_t>(args->result_mb) << 20;
    std::ofstream dump;
    if (!args->dump.empty()) {
      dump.open(args->dump);
      check(dump.good(), args->dump, ": cannot write");
    }
    if (args->bird) {
      sql::BirdEvalOptions o;
      o.pred_path = args->pred;
      o.gold_path = args->gold;
      o.db_root = args->db;
      o.diff_path = args->diff;
      o.timeout_s = args->bird_timeout;
      o.caps = caps;
      sql::BirdEvalReport r = sql::run_bird_eval(o, pool);
      std::fputs(r.printout.c_str(), stdout);
      if (dump.is_open())
        for (const sql::BirdItem& it : r.items)
          dump << nlohmann::json{{"index", it.index}, {"db_id", it.db_id}, {"gold", it.gold}, {"pred", it.pred},
                                 {"difficulty", it.difficulty}, {"exec", it.exec}}.dump(-1, ' ', false, kReplace) << "\n";
      return;
    }
    sql::SpiderEvalOptions o;
    o.gold_path = args->gold;
    o.pred_path = args->pred;
    o.db_dir = args->db;
    o.tables_path = args->table;
    o.etype = args->etype == "match" ? sql::EvalType::Match : args->etype == "exec" ? sql::EvalType::Exec : sql::EvalType::All;
    o.keep_distinct = args->keep_distinct;
    o.plug_value = args->plug_value;
    o.threads = args->threads;
    o.caps = caps;
    check(o.etype == sql::EvalType::Exec || !o.tables_path.empty(), "eval-sql: --table tables.json is needed for --etype ", args->etype);
    sql::SpiderEvalReport r = sql::run_spider_eval(o, &pool);
    std::fputs(r.printout.c_str(), stdout);
    if (dump.is_open())
      for (const sql::SpiderItem& it : r.items) dump << sql::spider_item_json(it).dump(-1, ' ', false, kReplace) << "\n";
  });
}

}  // namespace sqlrl

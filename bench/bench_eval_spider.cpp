// Items evaluated per second by the Spider evaluation (sql/eval/eval_spider_run.h) on the 1,034 dev
// pairs of tests/fixtures/spider_eval: EM only (parse both, rebuild, partial match, hardness)
// and all (EM + EX on the two populated databases of each db_id). One thread, so the figure is
// comparable with the single-threaded official Python script.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include "sql/eval/eval_spider_run.h"
#include "sql/exec/pool.h"

namespace {

sqlrl::sql::SpiderEvalOptions options(sqlrl::sql::EvalType etype) {
  // Run from the repository root, or set SQLRL_SOURCE_DIR to it.
  const char* root = std::getenv("SQLRL_SOURCE_DIR");
  const std::string dir = std::string(root ? root : ".") + "/tests/fixtures/spider_eval/";
  sqlrl::sql::SpiderEvalOptions o;
  o.gold_path = dir + "gold.txt";
  o.pred_path = dir + "pred.txt";
  o.db_dir = dir + "data_db";
  o.tables_path = dir + "tables.json";
  o.etype = etype;
  o.threads = 1;
  return o;
}

void run(benchmark::State& state, sqlrl::sql::EvalType etype) {
  sqlrl::sql::Pool pool;
  size_t items = 0;
  for (auto _ : state) {
    auto report = sqlrl::sql::run_spider_eval(options(etype), &pool);
    items += report.items.size();
    benchmark::DoNotOptimize(report.printout.data());
  }
  state.counters["items/s"] = benchmark::Counter(static_cast<double>(items), benchmark::Counter::kIsRate);
}

void BM_SpiderEvalMatch(benchmark::State& state) { run(state, sqlrl::sql::EvalType::Match); }
void BM_SpiderEvalAll(benchmark::State& state) { run(state, sqlrl::sql::EvalType::All); }
BENCHMARK(BM_SpiderEvalMatch)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SpiderEvalAll)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

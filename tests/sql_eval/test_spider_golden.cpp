// Every one of the 1,034 Spider dev pairs against the official evaluator's own per-item output
// (tests/fixtures/spider_eval/items_exec.jsonl, made by test-suite-sql-eval @ e97acc5 through
// its oracle wrapper) and the official printouts, byte for byte.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "sql/eval/eval_spider_run.h"
#include "sql/exec/pool.h"
#include "tests/test_util.h"

namespace sqlrl::sql {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

SpiderEvalOptions fixture_options(EvalType etype) {
  SpiderEvalOptions o;
  o.gold_path = testing::fixture_path("spider_eval/gold.txt");
  o.pred_path = testing::fixture_path("spider_eval/pred.txt");
  o.db_dir = testing::fixture_path("spider_eval/data_db");
  o.tables_path = testing::fixture_path("spider_eval/tables.json");
  o.etype = etype;
  return o;
}

// The official stdout minus the per-miss lines is the table; both must match byte for byte.
TEST(SpiderGolden, EveryItemMatchesTheOfficialEvaluator) {
  Pool pool;
  SpiderEvalReport report = run_spider_eval(fixture_options(EvalType::All), &pool);
  std::ifstream in(testing::fixture_path("spider_eval/items_exec.jsonl"));
  std::string line;
  size_t n = 0, mismatches = 0;
  while (std::getline(in, line)) {
    nlohmann::json want = nlohmann::json::parse(line);
    ASSERT_LT(n, report.items.size());
    nlohmann::json got = spider_item_json(report.items[n]);
    std::vector<std::string> diffs;
    for (const char* key : {"interaction", "turn", "db_id", "gold", "pred", "pred_parsed", "hardness", "exact", "exec"})
      if (got[key] != want[key]) diffs.push_back(str_cat(key, ": got ", got[key].dump(), ", want ", want[key].dump()));
    for (const char* comp : kPartialTypes)
      if (got["partial"][comp] != want["partial"][comp])
        diffs.push_back(str_cat(comp, ": got ", got["partial"][comp].dump(), ", want ", want["partial"][comp].dump()));
    if (!diffs.empty()) {
      ++mismatches;
      std::string all;
      for (const auto& d : diffs) all += "\n  " + d;
      ADD_FAILURE() << "item " << n << " (" << want["db_id"] << ")\n  gold: " << want["gold"] << "\n  pred: " << want["pred"] << all;
      if (mismatches > 20) break;
    }
    ++n;
  }
  EXPECT_EQ(n, 1034u);
  EXPECT_EQ(report.items.size(), n);
  EXPECT_EQ(mismatches, 0u);
}

TEST(SpiderGolden, PrintoutAllEqualsOfficial) {
  Pool pool;
  SpiderEvalReport report = run_spider_eval(fixture_options(EvalType::All), &pool);
  EXPECT_EQ(report.printout, read_file(testing::fixture_path("spider_eval/official_all_out.txt")));
}

// official_match_out.txt was printed with the schema-only databases; data_db has the same
// table and column names (only the declared types differ), which is all EM reads.
TEST(SpiderGolden, PrintoutMatchEqualsOfficial) {
  SpiderEvalReport report = run_spider_eval(fixture_options(EvalType::Match), nullptr);
  EXPECT_EQ(report.printout, read_file(testing::fixture_path("spider_eval/official_match_out.txt")));
}

}  // namespace
}  // namespace sqlrl::sql

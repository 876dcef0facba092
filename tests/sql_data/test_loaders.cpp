// Loaders on hand-made mini fixtures in each benchmark's real format (tests/fixtures/sql_data,
// databases built by make_fixtures.sh), malformed records included, and the gold audit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/error.h"
#include "sql/data/datasets.h"
#include "tests/test_util.h"

using namespace sqlrl;
using namespace sqlrl::sql;
using sqlrl::testing::fixture_path;

namespace {

LoadOptions opts(DatasetFormat format, const std::string& folder, const std::string& split = "dev") {
  LoadOptions o;
  o.format = format;
  o.dir = fixture_path("sql_data/" + folder);
  o.split = split;
  return o;
}

std::string error_of(const LoadOptions& o) {
  try {
    load_dataset(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(SqlDataLoaders, SpiderFieldsAndComputedHardness) {
  LoadOptions o = opts(DatasetFormat::Spider, "spider");
  o.compute_difficulty = true;
  Dataset ds = load_dataset(o);
  ASSERT_EQ(ds.examples.size(), 3u);
  const Example& e = ds.examples[0];
  EXPECT_EQ(e.id, "dev_0");
  EXPECT_EQ(e.db_id, "concert");
  EXPECT_EQ(e.question, "How many singers do we have?");
  EXPECT_EQ(e.gold_sql, "SELECT count(*) FROM singer");
  EXPECT_NE(e.db_path.find("spider/database/concert/concert.sqlite"), std::string::npos);
  EXPECT_TRUE(e.history.empty());
  EXPECT_EQ(e.turn_index, 0);
  // Spider eval_hardness by hand: count(*) FROM singer -> component1 0, component2 0,
  // others 0 -> easy; one WHERE condition -> component1 1 -> easy.
  EXPECT_EQ(ds.examples[0].difficulty, "easy");
  EXPECT_EQ(ds.examples[1].difficulty, "easy");
  // avg(rating): no such column, the Spider parser raises -> no label, counted.
  EXPECT_EQ(ds.examples[2].difficulty, "");
  EXPECT_EQ(ds.unparsed_difficulty, 1u);
  EXPECT_NE(ds.tables_path.find("tables.json"), std::string::npos);
}

// A question written by `data synth` names its trap category (synth.category); others have none,
// and a category that is not a string is an error naming the record.
TEST(SqlDataLoaders, SpiderSynthCategory) {
  const std::filesystem::path file = sqlrl::testing::process_temp_path("sqlrl_loaders_category.json");
  LoadOptions o = opts(DatasetFormat::Spider, "spider");
  o.file = file.string();
  std::ofstream(file) << R"([{"db_id": "concert", "question": "q0", "query": "SELECT 1",
                               "synth": {"category": "stored_form:abbreviation", "traps": []}},
                              {"db_id": "concert", "question": "q1", "query": "SELECT 2", "synth": {"template": "t"}},
                              {"db_id": "concert", "question": "q2", "query": "SELECT 3"}])";
  Dataset ds = load_dataset(o);
  ASSERT_EQ(ds.examples.size(), 3u);
  EXPECT_EQ(ds.examples[0].category, "stored_form:abbreviation");
  EXPECT_EQ(ds.examples[1].category, "");
  EXPECT_EQ(ds.examples[2].category, "");
  std::ofstream(file) << R"([{"db_id": "concert", "question": "q0", "query": "SELECT 1", "synth": {"category": 3}}])";
  EXPECT_NE(error_of(o).find("record 0: field 'category' is not a string"), std::string::npos) << error_of(o);
  std::filesystem::remove(file);
}

TEST(SqlDataLoaders, MissingDatabaseIsAnErrorUnlessSkipped) {
  LoadOptions o = opts(DatasetFormat::Spider, "spider", "train");
  std::string err = error_of(o);
  EXPECT_NE(err.find("train_spider.json"), std::string::npos) << err;
  EXPECT_NE(err.find("1 record(s)"), std::string::npos) << err;
  EXPECT_NE(err.find("ghost"), std::string::npos) << err;
  o.skip_missing = true;
  Dataset ds = load_dataset(o);
  EXPECT_EQ(ds.examples.size(), 2u);
  EXPECT_EQ(ds.missing_records, 1u);
  ASSERT_EQ(ds.missing_ids.size(), 1u);
  EXPECT_EQ(ds.missing_ids[0], "ghost");
  EXPECT_EQ(ds.examples[1].record_index, 2u);
}

TEST(SqlDataLoaders, MalformedRecordsNameFileRecordAndField) {
  LoadOptions o = opts(DatasetFormat::Spider, "spider");
  o.file = fixture_path("sql_data/spider/dev_missing_query.json");
  std::string err = error_of(o);
  EXPECT_NE(err.find("dev_missing_query.json: record 1: field 'query' is missing"), std::string::npos) << err;

  o.file = fixture_path("sql_data/spider/dev_bad_question.json");
  err = error_of(o);
  EXPECT_NE(err.find("record 0: field 'question' is not a string (number)"), std::string::npos) << err;

  o.file = fixture_path("sql_data/spider/dev_truncated.json");
  err = error_of(o);
  EXPECT_NE(err.find("dev_truncated.json: not valid JSON"), std::string::npos) << err;

  LoadOptions s = opts(DatasetFormat::Sparc, "sparc");
  s.file = fixture_path("sql_data/sparc/dev_bad_turn.json");
  err = error_of(s);
  EXPECT_NE(err.find("record 0: interaction[1].query is missing"), std::string::npos) << err;

  LoadOptions nowhere = opts(DatasetFormat::Bird, "no_such_folder");
  err = error_of(nowhere);
  EXPECT_NE(err.find("no_such_folder/dev.json: no such file (the bird dev questions; the set comes from "
                     "https://bird-bench.github.io)"),
            std::string::npos)
      << err;
  EXPECT_THROW(parse_dataset_format("wikisql"), Error);
}

TEST(SqlDataLoaders, BirdEvidenceDifficultyAndDescriptions) {
  Dataset ds = load_dataset(opts(DatasetFormat::Bird, "bird"));
  ASSERT_EQ(ds.examples.size(), 2u);
  EXPECT_EQ(ds.examples[0].evidence, "older than 30 refers to age > 30");
  EXPECT_EQ(ds.examples[0].difficulty, "simple");
  EXPECT_EQ(ds.examples[1].difficulty, "moderate");
  EXPECT_NE(ds.examples[1].gold_sql.find("T1.city = 'NYC'"), std::string::npos);
  EXPECT_NE(ds.examples[1].db_path.find("dev_databases/pets/pets.sqlite"), std::string::npos);
  EXPECT_NE(ds.tables_path.find("dev_tables.json"), std::string::npos);

  auto d = load_bird_descriptions(fixture_path("sql_data/bird/dev_databases/concert"));
  ASSERT_EQ(d.count("singer"), 1u);
  // BOM stripped from the header; quoted commas and doubled quotes kept; empty value_description
  // leaves the description alone.
  EXPECT_EQ(d["singer"]["singer_id"], "the id of the singer");
  EXPECT_EQ(d["singer"]["name"], "name of the singer, as credited");
  EXPECT_EQ(d["singer"]["country"], "country of origin; values: full names, e.g. \"United States\"");
  EXPECT_TRUE(load_bird_descriptions(fixture_path("sql_data/bird/dev_databases/pets")).empty());
}

TEST(SqlDataLoaders, SparcFlattensInteractionsWithHistory) {
  Dataset ds = load_dataset(opts(DatasetFormat::Sparc, "sparc"));
  ASSERT_EQ(ds.examples.size(), 5u);  // 3 + 2 turns
  const Example& third = ds.examples[2];
  EXPECT_EQ(third.id, "dev_0_t2");
  EXPECT_EQ(third.turn_index, 2);
  EXPECT_EQ(third.question, "How many are there?");
  ASSERT_EQ(third.history.size(), 2u);
  EXPECT_EQ(third.history[0].question, "Show all singers.");
  EXPECT_EQ(third.history[1].gold_sql, "SELECT name FROM singer WHERE country = 'France'");
  EXPECT_EQ(ds.examples[3].db_id, "pets");
  EXPECT_EQ(ds.examples[3].turn_index, 0);
  EXPECT_TRUE(ds.examples[3].history.empty());
  EXPECT_EQ(ds.examples[4].record_index, 1u);
}

TEST(SqlDataLoaders, CosqlReadsSqlStateTracking) {
  Dataset ds = load_dataset(opts(DatasetFormat::Cosql, "cosql"));
  ASSERT_EQ(ds.examples.size(), 2u);
  EXPECT_NE(ds.questions_path.find("sql_state_tracking/cosql_dev.json"), std::string::npos);
  EXPECT_EQ(ds.examples[1].history.size(), 1u);
  EXPECT_EQ(ds.examples[1].question, "Just the ones with cats.");
}

TEST(SqlDataLoaders, SynsqlComplexityAndKnowledge) {
  Dataset ds = load_dataset(opts(DatasetFormat::Synsql, "synsql"));
  ASSERT_EQ(ds.examples.size(), 2u);
  EXPECT_EQ(ds.examples[0].difficulty, "moderate");
  EXPECT_EQ(ds.examples[0].evidence, "");
  EXPECT_EQ(ds.examples[1].difficulty, "simple");
  EXPECT_EQ(ds.examples[1].evidence, "dogs are pets whose kind is 'dog'");
  EXPECT_NE(ds.examples[1].db_path.find("synsql/databases/pets/pets.sqlite"), std::string::npos);
}

TEST(SqlDataAudit, CountsOkEmptyErrorAndKeepsOnlyPassingRecords) {
  Dataset ds = load_dataset(opts(DatasetFormat::Spider, "spider"));
  Pool pool;
  AuditReport audit = audit_gold(pool, ds.examples, Limits{});
  ASSERT_EQ(audit.items.size(), 3u);
  EXPECT_EQ(audit.items[0].status, GoldStatus::Ok);
  EXPECT_EQ(audit.items[0].rows, 1u);
  EXPECT_EQ(audit.items[1].status, GoldStatus::Empty);  // no owner in 'Chicago'
  EXPECT_EQ(audit.items[2].status, GoldStatus::Error);
  EXPECT_NE(audit.items[2].error.find("no such column: rating"), std::string::npos) << audit.items[2].error;
  EXPECT_EQ(audit.ok, 1u);
  EXPECT_EQ(audit.empty, 1u);
  EXPECT_EQ(audit.errors, 1u);
  nlohmann::json kept = kept_records(ds, audit);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0]["query"], "SELECT count(*) FROM singer");
  EXPECT_TRUE(kept[0].contains("query_toks"));  // the record as read, not a re-encoding

  // A dialogue is kept only when every turn passes: all five SParC turns return rows.
  Dataset sparc = load_dataset(opts(DatasetFormat::Sparc, "sparc"));
  AuditReport a2 = audit_gold(pool, sparc.examples, Limits{});
  EXPECT_EQ(a2.ok, 5u);
  EXPECT_EQ(kept_records(sparc, a2).size(), 2u);
}

TEST(SqlDataAudit, TimeoutIsReported) {
  Dataset ds = load_dataset(opts(DatasetFormat::Spider, "spider"));
  std::vector<Example> slow = {ds.examples[0]};
  // A recursive CTE counting to 10^9 cannot finish in 50 ms.
  slow[0].gold_sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000000) SELECT count(*) FROM c";
  Pool pool;
  Limits limits;
  limits.timeout_ms = 50;
  AuditReport audit = audit_gold(pool, slow, limits);
  EXPECT_EQ(audit.timeouts, 1u);
  EXPECT_EQ(audit.items[0].status, GoldStatus::Timeout);
}

// The synthetic benchmark: byte determinism, every gold executes with rows, the hardness mix,
// disjoint splits, trap metadata that matches the data, and dialogue turns that are the edits
// they claim to be (checked on Spider's parse of both turns).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "runtime/error.h"
#include "tests/test_util.h"
#include "sql/data/datasets.h"
#include "sql/eval/eval_spider.h"
#include "sql/eval/parse.h"
#include "sql/data/synth.h"
#include "sql/data/synth_questions.h"
#include "sql/exec/schema.h"

using namespace sqlrl;
using namespace sqlrl::sql;
namespace fs = std::filesystem;

namespace {

SynthOptions small_options(uint64_t seed) {
  SynthOptions o;
  o.seed = seed;
  o.train_databases = 2;
  o.dev_databases = 2;
  o.questions_per_database = 12;
  o.dialogues_per_database = 4;
  o.mix = {0.25, 0.25, 0.25, 0.25};
  return o;
}

fs::path temp_dir(const std::string& name) {
  fs::path p = sqlrl::testing::process_temp_path("sqlrl_synth_" + name);
  fs::remove_all(p);
  return p;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::map<std::string, std::string> all_files(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) out[fs::relative(e.path(), root).string()] = slurp(e.path());
  return out;
}

// One generated benchmark shared by the tests below.
const fs::path& benchmark() {
  static fs::path dir = [] {
    fs::path d = temp_dir("shared");
    write_synth_benchmark(d.string(), small_options(11));
    return d;
  }();
  return dir;
}

}  // namespace

TEST(SqlDataSynth, SameSeedSameBytesOtherSeedDiffers) {
  fs::path a = temp_dir("a"), b = temp_dir("b"), c = temp_dir("c");
  write_synth_benchmark(a.string(), small_options(5));
  write_synth_benchmark(b.string(), small_options(5));
  write_synth_benchmark(c.string(), small_options(6));
  auto fa = all_files(a), fb = all_files(b), fc = all_files(c);
  ASSERT_GT(fa.size(), 10u);
  ASSERT_EQ(fa.size(), fb.size());
  for (const auto& [name, bytes] : fa) {
    ASSERT_TRUE(fb.count(name)) << name;
    EXPECT_TRUE(bytes == fb[name]) << name << " differs between two runs with the same seed";
  }
  EXPECT_NE(fa["dev.json"], fc["dev.json"]);
  for (const fs::path& p : {a, b, c}) fs::remove_all(p);
}

TEST(SqlDataSynth, EveryGoldExecutesWithRowsInBothFormats) {
  Pool pool;
  for (auto [format, dir] : {std::pair{DatasetFormat::Spider, benchmark()}, std::pair{DatasetFormat::Sparc, benchmark() / "sparc"}})
    for (const char* split : {"train", "dev"}) {
      LoadOptions o;
      o.format = format;
      o.dir = dir.string();
      o.split = split;
      Dataset ds = load_dataset(o);
      ASSERT_FALSE(ds.examples.empty());
      AuditReport audit = audit_gold(pool, ds.examples, Limits{});
      EXPECT_EQ(audit.ok, ds.examples.size()) << dataset_format_name(format) << " " << split << "\n"
                                              << audit_summary(ds, audit, 5);
    }
}

TEST(SqlDataSynth, HardnessMixAndLabelsFollowSpiderRules) {
  // 12 questions per database at 25% each = 3 per level per database, 4 databases.
  std::map<std::string, int> histogram;
  for (const char* split : {"train", "dev"}) {
    LoadOptions o;
    o.dir = benchmark().string();
    o.split = split;
    Dataset ds = load_dataset(o);
    EXPECT_EQ(ds.examples.size(), 24u);
    for (const Example& e : ds.examples) {
      histogram[e.difficulty]++;
      // Recomputed here from the gold with the evaluation's parser and eval_hardness.
      Sql parsed = parse_spider_sql(load_schema_sqlite(e.db_path), synth::strip_casts(e.gold_sql));
      EXPECT_EQ(e.difficulty, hardness_name(spider_hardness(parsed))) << e.gold_sql;
    }
  }
  EXPECT_EQ(histogram, (std::map<std::string, int>{{"easy", 12}, {"medium", 12}, {"hard", 12}, {"extra", 12}}));
}

TEST(SqlDataSynth, TrainAndDevDatabasesAreDisjoint) {
  std::set<std::string> train, dev;
  for (const auto& r : nlohmann::json::parse(slurp(benchmark() / "train_spider.json"))) train.insert(r["db_id"]);
  for (const auto& r : nlohmann::json::parse(slurp(benchmark() / "dev.json"))) dev.insert(r["db_id"]);
  EXPECT_EQ(train.size(), 2u);
  EXPECT_EQ(dev.size(), 2u);
  for (const std::string& d : dev) EXPECT_EQ(train.count(d), 0u) << d;
  auto tables = nlohmann::json::parse(slurp(benchmark() / "tables.json"));
  EXPECT_EQ(tables.size(), 4u);
}

TEST(SqlDataSynth, SurfaceFormTrapsMatchQuestionQueryAndData) {
  Pool pool;
  int traps = 0;
  for (const char* file : {"train_spider.json", "dev.json"})
    for (const auto& r : nlohmann::json::parse(slurp(benchmark() / file))) {
      std::string db = r["db_id"];
      std::string db_path = (benchmark() / "database" / db / (db + ".sqlite")).string();
      for (const auto& t : r["synth"]["traps"]) {
        if (t["kind"] == "number_as_text") {
          EXPECT_NE(r["query"].get<std::string>().find("CAST(" ), std::string::npos) << r.dump();
          continue;
        }
        ++traps;
        std::string asked = t["question_value"], stored = t["stored_value"];
        EXPECT_NE(asked, stored);
        EXPECT_NE(r["question"].get<std::string>().find(asked), std::string::npos) << r.dump();
        EXPECT_NE(r["query"].get<std::string>().find(synth::sql_quote(stored)), std::string::npos) << r.dump();
        // The stored form is in the column; the form the question uses is not.
        auto count = [&](const std::string& v) {
          Result res = pool.execute(db_path, "SELECT count(*) FROM " + t["table"].get<std::string>() + " WHERE " +
                                                 t["column"].get<std::string>() + " = " + synth::sql_quote(v));
          EXPECT_TRUE(res.ok()) << res.error;
          return res.rows.empty() ? -1 : res.rows[0][0].integer;
        };
        EXPECT_GT(count(stored), 0) << r.dump();
        EXPECT_EQ(count(asked), 0) << r.dump();
      }
    }
  EXPECT_GT(traps, 0);
}

// Issue 28: a trap question's stored form must be a fact only execution shows: not among the
// sample values the prompt's schema lists (read_schema, as a rollout builds its prompt), and the
// question's naive query visibly finds nothing; a question whose stored forms the samples show is
// "visible_form". Each category is recomputed here from the data.
TEST(SqlDataSynth, TrapQuestionsHideTheStoredFormFromThePromptAndTheNaiveQueryFindsNothing) {
  Pool pool;
  std::map<std::string, int> categories;
  int questions = 0;
  for (const char* file : {"train_spider.json", "dev.json"})
    for (const auto& r : nlohmann::json::parse(slurp(benchmark() / file))) {
      ++questions;
      const std::string db = r["db_id"], category = r["synth"]["category"];
      const std::string db_path = (benchmark() / "database" / db / (db + ".sqlite")).string();
      const DatabaseSchema schema = read_schema(pool, db_path);
      std::vector<synth::Trap> traps;
      bool any_surface = false, any_number = false;
      for (const auto& t : r["synth"]["traps"]) {
        if (t["kind"] == "number_as_text") {
          any_number = true;
          continue;
        }
        any_surface = true;
        synth::Trap trap{t["kind"], t["table"], t["column"], t["question_value"], t["stored_value"], t["style"]};
        bool shown = false;
        for (const TableInfo& table : schema.tables)
          for (const ColumnInfo& col : table.columns)
            if (table.name == trap.table && col.name == trap.column)
              for (const sql::Cell& v : col.samples) shown = shown || v.text == trap.stored_value;
        EXPECT_EQ(t["hidden"], !shown) << r.dump();
        // A question names only hidden or only shown stored forms (a mix would be neither category).
        EXPECT_EQ(shown, category == "visible_form") << r.dump();
        traps.push_back(trap);
      }
      categories[category]++;
      if (any_surface && category != "visible_form") {
        EXPECT_TRUE(category.starts_with("stored_form:")) << r.dump();
        EXPECT_EQ(category, "stored_form:" + traps.front().style) << r.dump();
        Result naive = pool.execute(db_path, synth::naive_sql(r["query"], traps));
        EXPECT_TRUE(naive.ok()) << naive.error;
        bool nothing = naive.rows.empty() ||
                       (naive.rows.size() == 1 && std::all_of(naive.rows[0].begin(), naive.rows[0].end(), [](const sql::Cell& c) {
                          return c.is_null() || (c.is_number() && c.integer == 0 && c.real == 0);
                        }));
        EXPECT_TRUE(nothing) << "the naive query finds rows: " << r.dump();
      } else {
        EXPECT_EQ(category, any_surface ? "visible_form" : any_number ? "number_as_text" : "plain") << r.dump();
      }
    }
  // 3 questions per level and database: lround(trap_share * 3) trap questions per level (4
  // databases, 4 levels) where the values allow it; at least half of them are placed.
  const int quota = 16 * static_cast<int>(std::lround(small_options(11).trap_share * 3));
  int stored = 0;
  for (const auto& [name, n] : categories) stored += name.starts_with("stored_form:") ? n : 0;
  EXPECT_GE(stored, quota / 2) << "too few trap questions";
  EXPECT_LE(stored, quota);
  EXPECT_GT(categories["plain"] + categories["number_as_text"] + categories["visible_form"], 0);
  EXPECT_EQ(stored + categories["plain"] + categories["number_as_text"] + categories["visible_form"], questions);
}

TEST(SqlDataSynth, DialogueTurnsAreTheEditsTheyClaim) {
  int checked = 0;
  for (const char* file : {"train.json", "dev.json"})
    for (const auto& inter : nlohmann::json::parse(slurp(benchmark() / "sparc" / file))) {
      std::string db = inter["database_id"];
      Schema schema = load_schema_sqlite((benchmark() / "sparc" / "database" / db / (db + ".sqlite")).string());
      const auto& turns = inter["interaction"];
      ASSERT_GE(turns.size(), 2u);
      ASSERT_LE(turns.size(), 4u);
      EXPECT_EQ(inter["final"]["query"], turns.back()["query"]);
      for (size_t k = 1; k < turns.size(); ++k) {
        Sql prev = parse_spider_sql(schema, synth::strip_casts(turns[k - 1]["query"]));
        Sql cur = parse_spider_sql(schema, synth::strip_casts(turns[k]["query"]));
        std::string edit = turns[k]["synth"]["edit"];
        SCOPED_TRACE(turns[k - 1]["query"].get<std::string>() + "  ->  " + turns[k]["query"].get<std::string>());
        EXPECT_TRUE(cur.from_units == prev.from_units);
        if (edit == "add_filter") {
          EXPECT_TRUE(cur.select == prev.select);
          EXPECT_EQ(cur.where.size(), prev.where.empty() ? 1u : prev.where.size() + 2);  // cond, or "and" + cond
          for (size_t i = 0; i < prev.where.size(); ++i) EXPECT_TRUE(cur.where[i] == prev.where[i]);
        } else if (edit == "add_column") {
          EXPECT_EQ(cur.select.size(), prev.select.size() + 1);
          EXPECT_TRUE(cur.where == prev.where);
        } else if (edit == "order_by") {
          EXPECT_FALSE(prev.has_order);
          EXPECT_TRUE(cur.has_order);
          EXPECT_TRUE(cur.select == prev.select);
          EXPECT_TRUE(cur.where == prev.where);
        } else if (edit == "count") {
          ASSERT_EQ(cur.select.size(), 1u);
          EXPECT_EQ(cur.select[0].first, 3);  // count
          EXPECT_EQ(cur.select[0].second.col1.col, "__all__");
          EXPECT_TRUE(cur.where == prev.where);
          EXPECT_EQ(k, turns.size() - 1);
        } else {
          ADD_FAILURE() << "unknown edit " << edit;
        }
        ++checked;
      }
    }
  EXPECT_GT(checked, 8);
}

TEST(SqlDataSynth, BadOptionsAreErrors) {
  SynthOptions o = small_options(1);
  o.dev_databases = 0;
  EXPECT_THROW(write_synth_benchmark(temp_dir("bad").string(), o), Error);
  o = small_options(1);
  o.mix = {0, 0, 0, 0};
  EXPECT_THROW(write_synth_benchmark(temp_dir("bad").string(), o), Error);
}

TEST(SqlDataCli, StatsFilterEmptyWritesKeptRecords) {
  fs::path out = temp_dir("kept");
  fs::create_directories(out);
  std::string cmd = std::string(SQLRL_BINARY) + " data stats --dataset spider:" + SQLRL_FIXTURES_DIR +
                    "/sql_data/spider --filter-empty " + (out / "kept.json").string() + " > " + (out / "log.txt").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(out / "log.txt");
  std::string log = slurp(out / "log.txt");
  EXPECT_NE(log.find("gold audit:  ok 1, empty 1, error 1, timeout 0"), std::string::npos) << log;
  EXPECT_EQ(nlohmann::json::parse(slurp(out / "kept.json")).size(), 1u);
  fs::remove_all(out);
}

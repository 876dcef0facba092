// The evaluation sets beside Spider/BIRD/SParC/CoSQL dev, each laid out in a scratch folder as its
// public release ships it (file names and JSON fields as released; the databases are copies of the
// fixtures' tiny concert.sqlite under the names the records use):
//   Spider test  spider_data.zip of https://yale-lily.github.io/spider: test.json,
//                test_tables.json, test_database/<db>/<db>.sqlite
//   Spider-DK    github.com/ygan/Spider-DK: Spider-DK.json {type, db_id, query, question},
//                tables.json, database/ with only the databases it modified
//   Spider-Syn   github.com/ygan/Spider-Syn: Spider-Syn/{train_spider,dev}.json {db_id,
//                SpiderQuestion, SpiderSynQuestion, query}; no databases
//   Spider-Realistic  zenodo.org/record/5205322: spider-realistic.json in Spider's dev format
// Each set's records differ from the neighbouring files' (dev.json beside test.json, SpiderQuestion
// beside SpiderSynQuestion, a database in both folders), so reading the wrong one fails an assert.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/error.h"
#include "sql/data/datasets.h"
#include "tests/test_util.h"

using namespace sqlrl;
using namespace sqlrl::sql;
using nlohmann::json;
using sqlrl::testing::error_of;
using sqlrl::testing::fixture_path;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  fs::path dir = sqlrl::testing::process_temp_path("sqlrl_variants_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_json(const fs::path& path, const json& value) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << value.dump(2);
}

// <root>/<db>/<db>.sqlite, a copy of the fixtures' concert database.
void make_db(const fs::path& root, const std::string& db_id) {
  fs::create_directories(root / db_id);
  fs::copy_file(fixture_path("sql_data/spider/database/concert/concert.sqlite"), root / db_id / (db_id + ".sqlite"),
                fs::copy_options::overwrite_existing);
}

// A Spider record as the releases write it (tokens included, never read by the loader).
json spider_record(const std::string& db, const std::string& question, const std::string& query) {
  return {{"db_id", db}, {"query", query}, {"query_toks", json::array()}, {"query_toks_no_value", json::array()},
          {"question", question}, {"question_toks", json::array()}};
}

json tables_for(const std::string& db) { return json::array({{{"db_id", db}, {"table_names_original", {"singer"}}}}); }

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// spider_data/ as the Spider 1.0 release unpacks: dev beside test, each with its own databases.
fs::path make_spider(const std::string& name) {
  fs::path root = scratch(name) / "spider_data";
  write_json(root / "dev.json", json::array({spider_record("concert_singer", "How many singers do we have?",
                                                           "SELECT count(*) FROM singer")}));
  write_json(root / "tables.json", tables_for("concert_singer"));
  make_db(root / "database", "concert_singer");
  write_json(root / "test.json",
             json::array({spider_record("sakila_1", "How many cities are in Australia?", "SELECT count(*) FROM singer"),
                          spider_record("world_1", "List every singer's name.", "SELECT name FROM singer")}));
  write_json(root / "test_tables.json", tables_for("sakila_1"));
  make_db(root / "test_database", "sakila_1");
  make_db(root / "test_database", "world_1");
  return root;
}

}  // namespace

TEST(SqlDataVariants, SpiderTestReadsTestJsonTablesAndDatabases) {
  fs::path root = make_spider("test");
  Dataset ds = load_dataset(parse_dataset_spec("spider:" + root.string(), "test"));
  ASSERT_EQ(ds.examples.size(), 2u);
  EXPECT_EQ(ds.examples[0].id, "test_0");
  EXPECT_EQ(ds.examples[0].db_id, "sakila_1");
  EXPECT_EQ(ds.examples[0].question, "How many cities are in Australia?");
  EXPECT_EQ(ds.examples[1].gold_sql, "SELECT name FROM singer");
  EXPECT_EQ(ds.examples[1].db_path, (root / "test_database/world_1/world_1.sqlite").string());
  EXPECT_TRUE(ends_with(ds.questions_path, "spider_data/test.json")) << ds.questions_path;
  EXPECT_TRUE(ends_with(ds.tables_path, "spider_data/test_tables.json")) << ds.tables_path;
  // dev is still dev.json over database/.
  Dataset dev = load_dataset(parse_dataset_spec("spider:" + root.string(), "dev"));
  ASSERT_EQ(dev.examples.size(), 1u);
  EXPECT_EQ(dev.examples[0].db_path, (root / "database/concert_singer/concert_singer.sqlite").string());
  fs::remove_all(root.parent_path());
}

TEST(SqlDataVariants, SpiderTestMissingFilesNameThePathAndTheRelease) {
  fs::path root = make_spider("test_missing");
  fs::remove_all(root / "test_database");
  std::string err = error_of([&] { load_dataset(parse_dataset_spec("spider:" + root.string(), "test")); });
  EXPECT_NE(err.find("2 record(s) name a database missing"), std::string::npos) << err;
  EXPECT_NE(err.find((root / "test_database").string() + " does not exist"), std::string::npos) << err;
  EXPECT_NE(err.find("spider_data.zip of https://yale-lily.github.io/spider"), std::string::npos) << err;

  fs::remove(root / "test.json");
  err = error_of([&] { load_dataset(parse_dataset_spec("spider:" + root.string(), "test")); });
  EXPECT_NE(err.find((root / "test.json").string() + ": no such file (the spider test questions"), std::string::npos)
      << err;
  EXPECT_NE(err.find("yale-lily.github.io/spider"), std::string::npos) << err;
  fs::remove_all(root.parent_path());
}

TEST(SqlDataVariants, SplitsASetDoesNotPublishAreErrorsSayingWhy) {
  // No folder needed: the split is refused before any file is looked for.
  for (const char* format : {"bird", "sparc", "cosql"}) {
    std::string err = error_of([&] { load_dataset(parse_dataset_spec(std::string(format) + ":/nowhere", "test")); });
    EXPECT_NE(err.find(std::string("dataset ") + format + ": there is no public test split"), std::string::npos) << err;
    EXPECT_NE(err.find("evaluate on dev"), std::string::npos) << err;
  }
  std::string err = error_of([&] { load_dataset(parse_dataset_spec("bird:/nowhere", "test")); });
  EXPECT_NE(err.find("bird-bench.github.io"), std::string::npos) << err;
  err = error_of([&] { load_dataset(parse_dataset_spec("spider-dk:/nowhere", "train")); });
  EXPECT_NE(err.find("spider-dk is one evaluation set built from Spider dev: use split dev, got 'train'"),
            std::string::npos)
      << err;
  err = error_of([&] { load_dataset(parse_dataset_spec("spider-realistic:/nowhere", "test")); });
  EXPECT_NE(err.find("spider-realistic is one evaluation set"), std::string::npos) << err;
  err = error_of([&] { load_dataset(parse_dataset_spec("spider-syn:/nowhere", "test")); });
  EXPECT_NE(err.find("spider-syn: split must be train or dev"), std::string::npos) << err;
  err = error_of([&] { load_dataset(parse_dataset_spec("spider:/nowhere", "validation")); });
  EXPECT_NE(err.find("split must be train, dev or test, got 'validation'"), std::string::npos) << err;
}

TEST(SqlDataVariants, SpiderSynReadsTheSynonymQuestionOverSpiderDatabases) {
  fs::path base = scratch("syn");
  fs::path spider = make_spider("syn_spider");
  // The repository's layout: the files sit in its Spider-Syn/ folder.
  fs::path repo = base / "Spider-Syn";
  write_json(repo / "Spider-Syn/dev.json",
             json::array({{{"db_id", "concert_singer"},
                           {"SpiderQuestion", "How many singers do we have?"},
                           {"SpiderSynQuestion", "How many vocalists do we have?"},
                           {"query", "SELECT count(*) FROM singer"}}}));
  write_json(repo / "Spider-Syn/train_spider.json",
             json::array({{{"db_id", "concert_singer"},
                           {"SpiderQuestion", "Show all singers."},
                           {"SpiderSynQuestion", "Show all vocalists."},
                           {"query", "SELECT name FROM singer"}}}));
  const std::string spec = "spider-syn:" + repo.string() + ",db=" + (spider / "database").string();
  Dataset ds = load_dataset(parse_dataset_spec(spec, "dev"));
  ASSERT_EQ(ds.examples.size(), 1u);
  EXPECT_EQ(ds.examples[0].id, "dev_0");
  EXPECT_EQ(ds.examples[0].question, "How many vocalists do we have?");
  EXPECT_EQ(ds.examples[0].gold_sql, "SELECT count(*) FROM singer");
  EXPECT_EQ(ds.examples[0].db_path, (spider / "database/concert_singer/concert_singer.sqlite").string());
  EXPECT_EQ(ds.tables_path, (spider / "tables.json").string());  // Spider's, beside its database/
  EXPECT_EQ(ds.format, DatasetFormat::SpiderSyn);

  Dataset train = load_dataset(parse_dataset_spec(spec, "train"));
  ASSERT_EQ(train.examples.size(), 1u);
  EXPECT_EQ(train.examples[0].question, "Show all vocalists.");
  // The inner folder works as DIR too.
  Dataset inner = load_dataset(
      parse_dataset_spec("spider-syn:" + (repo / "Spider-Syn").string() + ",db=" + (spider / "database").string(), "dev"));
  EXPECT_EQ(inner.examples.size(), 1u);

  // Without db= nothing holds the databases: the error says to add it.
  std::string err = error_of([&] { load_dataset(parse_dataset_spec("spider-syn:" + repo.string(), "dev")); });
  EXPECT_NE(err.find("1 record(s) name a database missing"), std::string::npos) << err;
  EXPECT_NE(err.find("spider-syn uses Spider's databases: add ,db=SPIDER/database"), std::string::npos) << err;
  fs::remove_all(base);
  fs::remove_all(spider.parent_path());
}

TEST(SqlDataVariants, SpiderDkSearchesItsOwnDatabasesBeforeSpiders) {
  fs::path dk = scratch("dk") / "Spider-DK";
  fs::path spider = make_spider("dk_spider");
  write_json(dk / "Spider-DK.json",
             json::array({{{"type", 0},
                           {"db_id", "new_concert_singer"},
                           {"query", "SELECT count(*) FROM singer"},
                           {"question", "How many singers do we have?"}},
                          {{"type", 2},
                           {"db_id", "concert_singer"},
                           {"query", "SELECT name FROM singer ORDER BY age DESC"},
                           {"question", "Show names of all singers from the oldest to the youngest."}}}));
  write_json(dk / "tables.json", tables_for("new_concert_singer"));
  make_db(dk / "database", "new_concert_singer");
  make_db(spider / "database", "new_concert_singer");  // also in Spider's folder: Spider-DK's copy wins
  Dataset ds = load_dataset(parse_dataset_spec("spider-dk:" + dk.string() + ",db=" + (spider / "database").string(), "dev"));
  ASSERT_EQ(ds.examples.size(), 2u);
  EXPECT_EQ(ds.examples[0].id, "dev_0");
  EXPECT_EQ(ds.examples[0].db_path, (dk / "database/new_concert_singer/new_concert_singer.sqlite").string());
  EXPECT_EQ(ds.examples[1].db_path, (spider / "database/concert_singer/concert_singer.sqlite").string());
  EXPECT_EQ(ds.examples[1].question, "Show names of all singers from the oldest to the youngest.");
  EXPECT_EQ(ds.examples[1].gold_sql, "SELECT name FROM singer ORDER BY age DESC");
  EXPECT_EQ(ds.tables_path, (dk / "tables.json").string());  // its own, not Spider's

  fs::remove(dk / "Spider-DK.json");
  std::string err = error_of([&] { load_dataset(parse_dataset_spec("spider-dk:" + dk.string(), "dev")); });
  EXPECT_NE(err.find((dk / "Spider-DK.json").string() + ": no such file"), std::string::npos) << err;
  EXPECT_NE(err.find("github.com/ygan/Spider-DK"), std::string::npos) << err;
  fs::remove_all(dk.parent_path());
  fs::remove_all(spider.parent_path());
}

TEST(SqlDataVariants, SpiderRealisticReadsItsFileOverSpiderDevDatabases) {
  fs::path real = scratch("realistic") / "spider-realistic";
  fs::path spider = make_spider("realistic_spider");
  write_json(real / "spider-realistic.json",
             json::array({spider_record("concert_singer", "How many singers are there?", "SELECT count(*) FROM singer"),
                          spider_record("concert_singer", "Which singers are from France?",
                                        "SELECT name FROM singer WHERE country = 'France'")}));
  Dataset ds = load_dataset(
      parse_dataset_spec("spider-realistic:" + real.string() + ",db=" + (spider / "database").string(), "dev"));
  ASSERT_EQ(ds.examples.size(), 2u);
  EXPECT_EQ(ds.examples[1].id, "dev_1");
  EXPECT_EQ(ds.examples[1].question, "Which singers are from France?");
  EXPECT_EQ(ds.examples[1].gold_sql, "SELECT name FROM singer WHERE country = 'France'");
  EXPECT_EQ(ds.examples[0].db_path, (spider / "database/concert_singer/concert_singer.sqlite").string());
  EXPECT_EQ(ds.questions_path, (real / "spider-realistic.json").string());
  fs::remove_all(real.parent_path());
  fs::remove_all(spider.parent_path());
}

TEST(SqlDataVariants, DatasetSpecParsesFormatFolderAndDbOption) {
  LoadOptions o = parse_dataset_spec("spider-dk:/data/Spider-DK,db=/data/spider/database", "dev");
  EXPECT_EQ(o.format, DatasetFormat::SpiderDk);
  EXPECT_EQ(o.dir, "/data/Spider-DK");
  EXPECT_EQ(o.extra_db_root, "/data/spider/database");
  EXPECT_EQ(o.split, "dev");
  o = parse_dataset_spec("spider:/data/a,b", "test");  // a comma without name= is part of the folder
  EXPECT_EQ(o.dir, "/data/a,b");
  EXPECT_EQ(o.extra_db_root, "");
  EXPECT_EQ(dataset_format_name(parse_dataset_format("spider-realistic")), std::string("spider-realistic"));

  EXPECT_NE(error_of([] { parse_dataset_spec("spider", "dev", "eval: --dataset"); })
                .find("eval: --dataset 'spider': expected FORMAT:PATH"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_dataset_spec("spider:/x,database=/y", "dev"); })
                .find("unknown option 'database' (the one option is db=DBDIR)"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_dataset_spec("spider-syn:/x,db=", "dev"); }).find("db= names no folder"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_dataset_spec("wikisql:/x", "dev"); }).find("unknown dataset format 'wikisql'"),
            std::string::npos);
  // A db= folder that is not there is named when loading.
  fs::path spider = make_spider("db_missing");
  std::string err =
      error_of([&] { load_dataset(parse_dataset_spec("spider:" + spider.string() + ",db=/no/such/db", "dev")); });
  EXPECT_NE(err.find("db=/no/such/db: no such folder"), std::string::npos) << err;
  fs::remove_all(spider.parent_path());
}

TEST(SqlDataCli, StatsTakesTheEvalSpec) {
  fs::path base = scratch("cli");
  fs::path spider = make_spider("cli_spider");
  write_json(base / "spider-realistic.json",
             json::array({spider_record("concert_singer", "How many singers are there?", "SELECT count(*) FROM singer")}));
  fs::path log = base / "log.txt";
  std::string cmd = std::string(SQLRL_BINARY) + " data stats --dataset spider-realistic:" + base.string() +
                    ",db=" + (spider / "database").string() + " > " + log.string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::stringstream text;
  text << std::ifstream(log).rdbuf();
  EXPECT_NE(text.str().find("format:      spider-realistic"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("gold audit:  ok 1,"), std::string::npos) << text.str();
  cmd = std::string(SQLRL_BINARY) + " data stats --dataset bird:" + base.string() + " --split test > " + log.string() +
        " 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  text.str("");
  text << std::ifstream(log).rdbuf();
  EXPECT_NE(text.str().find("no public test split"), std::string::npos) << text.str();
  fs::remove_all(base);
  fs::remove_all(spider.parent_path());
}

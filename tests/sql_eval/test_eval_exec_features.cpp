// EX text rewrites (parse.remove_distinct, postprocess, replace_cur_year), EX on a fixture
// database, and the reward helpers.
#include "runtime/error.h"
#include "sql/eval/eval_spider_exec.h"
#include "sql/eval/sql_features.h"
#include "tests/test_util.h"

namespace sqlrl::sql {
namespace {

TEST(SpiderExec, RemoveDistinctDropsEveryDistinctWordToken) {
  EXPECT_EQ(sqlparse_remove_distinct("SELECT DISTINCT a FROM t"), "SELECT  a FROM t");
  EXPECT_EQ(sqlparse_remove_distinct("SELECT count(DISTINCT a) FROM t"), "SELECT count( a) FROM t");
  EXPECT_EQ(sqlparse_remove_distinct("SELECT distinct_id, 'distinct' FROM t"), "SELECT distinct_id, 'distinct' FROM t");
  // sqlparse.parse(s)[0]: only the first statement (with the whitespace after its ';').
  EXPECT_EQ(sqlparse_remove_distinct("SELECT a FROM t;  SELECT DISTINCT b FROM t"), "SELECT a FROM t;  ");
}

TEST(SpiderExec, PostprocessAndCurrentYear) {
  EXPECT_EQ(exec_postprocess("a > = 1 AND b < = 2 AND c ! = 3"), "a >= 1 AND b <= 2 AND c != 3");
  EXPECT_EQ(replace_cur_year("SELECT YEAR ( CURDATE ( ) ) - age FROM t"), "SELECT 2020- age FROM t");
  EXPECT_EQ(replace_cur_year("select year(curdate())"), "select 2020");
}

TEST(SpiderExec, RunsOnEveryDatabaseFileOfTheFolder) {
  auto files = sqlite_files_in(testing::fixture_path("spider_eval/data_db/concert_singer"));
  ASSERT_EQ(files.size(), 2u);  // concert_singer.sqlite and concert_singer_v2.sqlite
  Pool pool;
  SpiderExecOptions o;
  // DISTINCT is removed from both sides, so these agree whatever the data.
  EXPECT_EQ(spider_exec_match(pool, files, "SELECT DISTINCT name FROM singer", "SELECT name FROM singer", o), 1);
  EXPECT_EQ(spider_exec_match(pool, files, "SELECT name, age FROM singer", "SELECT age, name FROM singer", o), 1);
  EXPECT_EQ(spider_exec_match(pool, files, "SELECT nosuch FROM singer", "SELECT name FROM singer", o), 0);
  EXPECT_EQ(spider_exec_match(pool, files, "SELECT count(*) + 1 FROM singer", "SELECT count(*) FROM singer", o), 0);
  EXPECT_THROW(spider_exec_match(pool, files, "SELECT 1", "SELECT nosuch FROM singer", o), Error);
}

Schema tiny_schema() {
  return make_schema({{"singer", {"singer_id", "name", "age"}}, {"concert", {"concert_id", "singer_id", "year"}}});
}

TEST(SqlFeatures, SchemaItemsAndJaccard) {
  Schema s = tiny_schema();
  auto items = schema_items(parse_spider_sql(
      s, "SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id WHERE T2.year > 2000"));
  EXPECT_EQ(items, (std::set<std::string>{"concert", "concert.singer_id", "concert.year", "singer", "singer.name", "singer.singer_id"}));
  auto other = schema_items(parse_spider_sql(s, "SELECT name FROM singer"));
  EXPECT_EQ(other, (std::set<std::string>{"singer", "singer.name"}));
  EXPECT_DOUBLE_EQ(jaccard(items, other), 2.0 / 6.0);
}

TEST(SqlFeatures, BigramsUseTheOfficialTokens) {
  auto b = token_bigrams("SELECT a FROM t WHERE x = 'Y z'");
  EXPECT_TRUE(b.count({"select", "a"}));
  EXPECT_TRUE(b.count({"=", "\"Y z\""}));
  EXPECT_EQ(b.size(), 7u);  // 8 tokens
}

TEST(SqlFeatures, ClauseF1) {
  Schema s = tiny_schema();
  ForeignKeyMap none;
  auto rb = [&](const char* q) { return rebuild_for_match(parse_spider_sql(s, q), s, none); };
  ClauseF1 same = clause_f1(rb("SELECT name FROM singer WHERE age > 1"), rb("SELECT name FROM singer WHERE age > 2"));
  EXPECT_DOUBLE_EQ(same.mean, 1.0);
  EXPECT_EQ(same.group, -1);
  // select: pred {name, age} vs gold {name}: p = 1/2, r = 1 -> 2/3; join: same table -> 1;
  // where: pred has none, gold has one -> 0. Mean of (2/3, 1, 0) = 5/9.
  ClauseF1 f = clause_f1(rb("SELECT name, age FROM singer"), rb("SELECT name FROM singer WHERE age > 2"));
  EXPECT_DOUBLE_EQ(f.select, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(f.join, 1.0);
  EXPECT_DOUBLE_EQ(f.where, 0.0);
  EXPECT_DOUBLE_EQ(f.mean, 5.0 / 9.0);
}

TEST(SqlFeatures, StringEm) {
  EXPECT_TRUE(string_em("SELECT  name\nFROM singer;", "select name from singer"));
  EXPECT_FALSE(string_em("SELECT name FROM singer WHERE x = 'A'", "select name from singer where x = 'a'"));
}

}  // namespace
}  // namespace sqlrl::sql

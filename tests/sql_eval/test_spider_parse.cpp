// The official tokenisation and parsing quirks, one by one. Token lists come from NLTK 3.8
// itself (tools/make_nltk_tokenize_fixture.py); parse outcomes are the behaviours the
// fixtures README documents for process_sql.py.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "sql/eval/eval_spider.h"
#include "sql/eval/eval_spider_run.h"
#include "sql/eval/lexer.h"
#include "sql/eval/parse.h"
#include "tests/test_util.h"

namespace sqlrl::sql {
namespace {

TEST(SpiderLexer, NltkWordTokenizeMatchesNltk38) {
  std::ifstream in(testing::fixture_path("spider_eval/nltk_tokenize.jsonl"));
  ASSERT_TRUE(in.good());
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(nltk_word_tokenize(j["text"].get<std::string>()), j["tokens"].get<std::vector<std::string>>())
        << "text: " << j["text"];
    ++cases;
  }
  EXPECT_EQ(cases, 62);
}

using Toks = std::vector<std::string>;

TEST(SpiderLexer, ComparisonOperatorsAreMergedOnlyWhenSpaced) {
  EXPECT_EQ(spider_tokenize("SELECT a FROM t WHERE a >= 1"), (Toks{"select", "a", "from", "t", "where", "a", ">=", "1"}));
  EXPECT_EQ(spider_tokenize("a != 1"), (Toks{"a", "!=", "1"}));
  EXPECT_EQ(spider_tokenize("a>=1"), (Toks{"a", ">", "=1"}));
  EXPECT_EQ(spider_tokenize("a=1"), (Toks{"a=1"}));
  EXPECT_EQ(spider_tokenize("a<>1"), (Toks{"a", "<", ">", "1"}));
}

TEST(SpiderLexer, QuotedValuesKeepTheirCaseAndBecomeDoubleQuoted) {
  EXPECT_EQ(spider_tokenize("WHERE Name = 'Bob Dylan' AND x = \"Y\""),
            (Toks{"where", "name", "=", "\"Bob Dylan\"", "and", "x", "=", "\"Y\""}));
  // 'O''Neil' -> "O""Neil": two adjacent placeholders glue into one unknown word.
  Toks t = spider_tokenize("x = 'O''Neil'");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[2].find('"'), std::string::npos);
  EXPECT_THROW(spider_tokenize("x = 'abc"), Error);
}

Schema tiny_schema() {
  return make_schema({{"Singer", {"Singer_ID", "Name", "Age"}}, {"concert", {"concert_id", "singer_id", "Year"}}});
}

TEST(SpiderParse, ColumnsResolveThroughAliasesAndDefaultTables) {
  Schema s = tiny_schema();
  Sql q = parse_spider_sql(s, "SELECT T2.year, count(*) FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id WHERE age > 20");
  ASSERT_EQ(q.select.size(), 2u);
  EXPECT_EQ(q.select[0].second.col1.col, "__concert.year__");
  EXPECT_EQ(q.select[1].first, 3);  // count
  EXPECT_EQ(q.select[1].second.col1.col, "__all__");
  ASSERT_EQ(q.from_units.size(), 2u);
  EXPECT_EQ(q.from_units[1].table, "__concert__");
  ASSERT_EQ(q.from_conds.size(), 1u);
  ASSERT_EQ(q.where.size(), 1u);
  EXPECT_EQ(q.where[0].unit.val.col1.col, "__singer.age__");  // the first FROM table that has it
  EXPECT_EQ(q.where[0].unit.op, 3);                          // '>'
}

TEST(SpiderParse, OfficialFailuresAreErrors) {
  Schema s = tiny_schema();
  EXPECT_THROW(parse_spider_sql(s, "SELECT name FROM singer WHERE age>=20"), Error);
  EXPECT_THROW(parse_spider_sql(s, "SELECT name FROM singer WHERE age=20"), Error);
  EXPECT_THROW(parse_spider_sql(s, "SELECT name FROM singer WHERE age<>20"), Error);
  EXPECT_THROW(parse_spider_sql(s, "SELECT age-singer_id FROM singer"), Error);  // one token
  EXPECT_THROW(parse_spider_sql(s, "SELECT name FROM singer WHERE age IN (1, 2)"), Error);
  EXPECT_THROW(parse_spider_sql(s, "SELECT name FROM singer AS concert"), Error);  // alias = table name
  EXPECT_THROW(parse_spider_sql(s, "SELECT name FROM singer WHERE name = 'O''Neil'"), Error);
  EXPECT_THROW(parse_spider_sql(s, "SELECT nosuch FROM singer"), Error);
  EXPECT_THROW(parse_spider_sql(s, "SELECT age - 1 FROM singer"), Error);  // the second operand must be a column
  EXPECT_NO_THROW(parse_spider_sql(s, "SELECT age - singer_id FROM singer"));
}

TEST(SpiderParse, TrailingTokensIgnoredAndLimitIsPresenceOnly) {
  Schema s = tiny_schema();
  Sql a = parse_spider_sql(s, "SELECT name FROM singer ORDER BY age DESC LIMIT 7 )");
  Sql b = parse_spider_sql(s, "SELECT name FROM singer ORDER BY age DESC LIMIT 1");
  EXPECT_TRUE(a.has_limit);
  EXPECT_EQ(a.order_dir, "desc");
  EXPECT_TRUE(a == b);
}

TEST(SpiderHardness, HandComputedLevels) {
  Schema s = tiny_schema();
  auto level = [&](const char* q) { return std::string(hardness_name(spider_hardness(parse_spider_sql(s, q)))); };
  // component1 = 0, others = 0.
  EXPECT_EQ(level("SELECT count(*) FROM singer"), "easy");
  // where (1 component); the list [c, 'and', c] has length 3 > 1 -> others = 1.
  EXPECT_EQ(level("SELECT name FROM singer WHERE age > 20 AND age < 30"), "medium");
  // one INTERSECT: component2 = 1, component1 = 0, others = 0.
  EXPECT_EQ(level("SELECT name FROM singer INTERSECT SELECT name FROM singer"), "hard");
  // group (1); aggregates: select count = 1, HAVING's count(*) is not counted (cond_unit[0] is
  // not_op) -> 1, not > 1 -> others = 0.
  EXPECT_EQ(level("SELECT count(*) FROM singer GROUP BY name HAVING count(*) > 1"), "easy");
  // the same plus "AND ...": the string 'and' counts as an aggregate -> 2 > 1 -> others = 1.
  EXPECT_EQ(level("SELECT count(*) FROM singer GROUP BY name HAVING count(*) > 1 AND count(*) < 5"), "medium");
  // join (2 tables -> 1) + where + order + limit = 4 components -> extra.
  EXPECT_EQ(level("SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id WHERE T2.year > 2000 "
                  "ORDER BY T1.age LIMIT 1"),
            "extra");
}

TEST(SpiderMatch, ValuesAndDistinctIgnoredJoinConditionsNeverCompared) {
  Schema s = tiny_schema();
  ForeignKeyMap none;
  auto em = [&](const char* p, const char* g) {
    return spider_match(rebuild_for_match(parse_spider_sql(s, p), s, none), rebuild_for_match(parse_spider_sql(s, g), s, none)).exact;
  };
  EXPECT_TRUE(em("SELECT DISTINCT name FROM singer WHERE age > 99", "SELECT name FROM singer WHERE age > 20"));
  EXPECT_FALSE(em("SELECT name FROM singer WHERE age < 20", "SELECT name FROM singer WHERE age > 20"));
  EXPECT_TRUE(em("SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.age = T2.year",
                 "SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id"));
  EXPECT_TRUE(em("SELECT name, age FROM singer", "SELECT age, name FROM singer"));  // select is a multiset
  EXPECT_FALSE(em("SELECT name FROM singer ORDER BY age", "SELECT name FROM singer ORDER BY age LIMIT 3"));
}

TEST(SpiderMatch, ForeignKeyColumnsAreUnifiedForFromTablesOnly) {
  Schema s = tiny_schema();
  ForeignKeyMap fk{{"__concert.singer_id__", "__singer.singer_id__"}, {"__singer.singer_id__", "__singer.singer_id__"}};
  auto em = [&](const char* p, const char* g) {
    return spider_match(rebuild_for_match(parse_spider_sql(s, p), s, fk), rebuild_for_match(parse_spider_sql(s, g), s, fk)).exact;
  };
  EXPECT_TRUE(em("SELECT T2.singer_id FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id",
                 "SELECT T1.singer_id FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id"));
}

// A gold query the official parser rejects: an error naming the gold file and line, no crash.
TEST(SpiderRun, RejectedGoldNamesTheLine) {
  auto dir = std::filesystem::temp_directory_path() / "sqlrl_sql_eval_reject";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "gold.txt") << "SELECT count(*) FROM singer\tconcert_singer\nSELECT name FROM singer WHERE age=20\tconcert_singer\n";
  std::ofstream(dir / "pred.txt") << "SELECT count(*) FROM singer\nSELECT name FROM singer\n";
  SpiderEvalOptions o;
  o.gold_path = (dir / "gold.txt").string();
  o.pred_path = (dir / "pred.txt").string();
  o.db_dir = testing::fixture_path("spider_eval/data_db");
  o.tables_path = testing::fixture_path("spider_eval/tables.json");
  o.etype = EvalType::Match;
  try {
    run_spider_eval(o, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("gold.txt:2:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rejects the gold query"), std::string::npos) << msg;
  }
  std::filesystem::remove_all(dir);
}

std::string pad20(const std::string& s) { return s + std::string(s.size() < 20 ? 20 - s.size() : 0, ' '); }

// SParC layout: two interactions (blank line between). Hand-computed: 3 easy pairs, 2 exact ->
// 0.667; turn 1 = pairs 1 and 3 (both exact) -> 1.000, turn 2 = pair 2 (wrong) -> 0.000;
// joint_all: interaction 1 has a miss, interaction 2 does not -> 1/2 = 0.500.
TEST(SpiderRun, TurnAndInteractionMatch) {
  auto dir = std::filesystem::temp_directory_path() / "sqlrl_sql_eval_sparc";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "gold.txt") << "SELECT count(*) FROM singer\tconcert_singer\nSELECT name FROM singer\tconcert_singer\n\n"
                                     "SELECT name FROM singer\tconcert_singer\n";
  std::ofstream(dir / "pred.txt") << "SELECT count(*) FROM singer\nSELECT age FROM singer\n\nSELECT name FROM singer\n";
  SpiderEvalOptions o;
  o.gold_path = (dir / "gold.txt").string();
  o.pred_path = (dir / "pred.txt").string();
  o.db_dir = testing::fixture_path("spider_eval/data_db");
  o.tables_path = testing::fixture_path("spider_eval/tables.json");
  o.etype = EvalType::Match;
  SpiderEvalReport r = run_spider_eval(o, nullptr);
  ASSERT_EQ(r.items.size(), 3u);
  EXPECT_EQ(r.items[1].turn, 1);
  EXPECT_EQ(r.items[2].interaction, 1);
  std::string exact_row = pad20("exact match") + " " + pad20("0.667") + " " + pad20("0.000") + " " + pad20("0.000") + " " +
                          pad20("0.000") + " " + pad20("0.667") + " " + pad20("0.500") + "\n";
  EXPECT_NE(r.printout.find(exact_row), std::string::npos) << r.printout;
  std::string turn_row = pad20("exact match") + " " + pad20("1.000") + " " + pad20("0.000") + " " + pad20("0.000") + " " +
                         pad20("0.000") + " " + pad20("0.000") + "\n";
  EXPECT_NE(r.printout.find("TURN EXACT MATCHING ACCURACY =====================\n" + turn_row), std::string::npos) << r.printout;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sqlrl::sql

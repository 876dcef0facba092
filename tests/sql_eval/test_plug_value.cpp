// --plug-value. Expected values are worked by hand from test-suite-sql-eval's parse.py
// (reformat_query -> replace_values -> strip_query, then plugin_all_permutations) and
// exec_eval.eval_exec_match (the prediction first, then the variants), with sqlparse 0.4.2's
// lexer rules (keywords.SQL_REGEX); the reasoning is written next to each case.
#include <sqlite3.h>

#include <filesystem>

#include "sql/eval/eval_spider_exec.h"
#include "sql/eval/eval_spider_plug.h"
#include "tests/test_util.h"

namespace sqlrl::sql {
namespace {

using Strings = std::vector<std::string>;

TEST(PlugValue, LexerKeepsStringsAndSplitsNamesNumbersAndOperators) {
  // Name rule [A-Z]\w*(?=\s*\.) gives "T1", '.' is punctuation, (?<=\.)[A-Z]\w* gives "name";
  // ">=" is one [<>=~!]+ run; "-5" is one Integer (-?\d+); strings keep their quotes.
  Strings got;
  for (const SqlparseToken& t : sqlparse_tokens("T1.name>=-5 AND x='a b''c'"))
    got.push_back(std::string(t.kind == SqlparseTokenKind::String ? "S:" : t.kind == SqlparseTokenKind::Whitespace ? "W:" : "") +
                  std::string(t.text));
  EXPECT_EQ(got, (Strings{"T1", ".", "name", ">=", "-5", "W: ", "AND", "W: ", "x", "=", "S:'a b''c'"}));
  // Integer rule backtracks \d+ until the next character is no letter: "12abc" -> "1", "2abc".
  got.clear();
  for (const SqlparseToken& t : sqlparse_tokens("12abc")) got.emplace_back(t.text);
  EXPECT_EQ(got, (Strings{"1", "2abc"}));
}

TEST(PlugValue, ExtractQueryValues) {
  // reformat: "SELECT name FROM singer WHERE age > 30 AND country = 'France'" (already spaced);
  // strip_query: the String.Single token 'France' -> VALUERARE; no float; re.findall([^tT]\d+)
  // finds " 30" -> "30", a whole piece -> VALUERARE. Pieces lower-cased.
  QueryValues q = extract_query_values("SELECT name FROM singer WHERE age > 30 AND country = 'France'");
  EXPECT_EQ(q.pieces, (Strings{"select", "name", "from", "singer", "where", "age", ">", "valuerare", "and", "country", "=",
                               "valuerare"}));
  EXPECT_EQ(q.values, (Strings{"'France'", "30"}));

  // Tokens re-joined with ' ': "SELECT T1 . name FROM singer AS T1 WHERE T1 . age >= 25.5 LIMIT 3;"
  // minus ';'. [-+]?\d*\.\d+ finds "25.5"; [^tT]\d+ finds " 3" but not the 1 of "T1" (the T is
  // excluded and "1" alone has no second digit). LIMIT's number is a slot too.
  q = extract_query_values("SELECT T1.name FROM singer AS T1 WHERE T1.age >= 25.5 LIMIT 3;");
  EXPECT_EQ(q.pieces, (Strings{"select", "t1", ".", "name", "from", "singer", "as", "t1", "where", "t1", ".", "age", ">=",
                               "valuerare", "limit", "valuerare"}));
  EXPECT_EQ(q.values, (Strings{"25.5", "3"}));

  // count(*) -> "count ( * )"; "a1" is matched whole by [^tT]\d+ ('a' then '1'), so the column
  // a1 becomes a value slot, as in the official code; "-5" is one token and a match ("-5").
  // The double-quoted "Bob" is String.Symbol, a value with its quotes.
  q = extract_query_values("SELECT count(*), a1 FROM t WHERE b = -5 OR c = \"Bob\"");
  EXPECT_EQ(q.pieces, (Strings{"select", "count", "(", "*", ")", ",", "valuerare", "from", "t", "where", "b", "=",
                               "valuerare", "or", "c", "=", "valuerare"}));
  EXPECT_EQ(q.values, (Strings{"\"Bob\"", "a1", "-5"}));
}

Strings variants(const std::string& gold, const std::string& pred) {
  Strings out;
  for_each_plugged_prediction(gold, pred, [&](const std::string& v) {
    out.push_back(v);
    return false;
  });
  return out;
}

TEST(PlugValue, VariantsAreTheProductOfGoldValuesOverSlots) {
  const std::string gold = "SELECT name FROM singer WHERE age > 30 AND country = 'France'";
  // Two slots, gold values {'France', 30}: itertools.product(values, repeat=2), last slot fastest.
  EXPECT_EQ(variants(gold, "SELECT name FROM singer WHERE age > 1 AND country = 'x'"),
            (Strings{"select name from singer where age > 'France' and country = 'France'",
                     "select name from singer where age > 'France' and country = 30",
                     "select name from singer where age > 30 and country = 'France'",
                     "select name from singer where age > 30 and country = 30"}));
  // No slot: product() of nothing yields one empty tuple -> the lower-cased, re-spaced query.
  EXPECT_EQ(variants(gold, "SELECT Name FROM Singer"), (Strings{"select name from singer"}));
  // Slots but a gold query without values: product over empty lists yields nothing.
  EXPECT_EQ(variants("SELECT name FROM singer", "SELECT name FROM singer WHERE age > 3"), Strings{});
}

class PlugValueExec : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("sqlrl_plug_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::string path = (dir_ / "db.sqlite").string();
    std::filesystem::remove(path);
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE singer(name TEXT, age INTEGER, country TEXT);"
                           "INSERT INTO singer VALUES ('Ann', 35, 'France'), ('Bob', 25, 'France'), ('Cid', 40, 'Spain');",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
    files_ = {path};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  Strings files_;
};

TEST_F(PlugValueExec, AVariantWithTheGoldValuesPasses) {
  Pool pool;
  SpiderExecOptions plain, plug;
  plug.plug_value = true;
  const std::string gold = "SELECT name FROM singer WHERE age > 30 AND country = 'France'";  // {Ann}
  const std::string pred = "SELECT name FROM singer WHERE age > 1 AND country = 'x'";         // {}
  EXPECT_EQ(spider_exec_match(pool, files_, pred, gold, plain), 0);
  // Variants in order: age > 'France' is false in SQLite (an INTEGER sorts before any TEXT), so
  // the first two give {}; the third, age > 30 AND country = 'France', gives {Ann}: a pass.
  EXPECT_EQ(spider_exec_match(pool, files_, pred, gold, plug), 1);
  // age < 'France' holds for every row ({Ann, Bob, Cid}); age < 30 gives {Bob}: no variant passes.
  EXPECT_EQ(spider_exec_match(pool, files_, "SELECT name FROM singer WHERE age < 1", gold, plug), 0);
  // The prediction itself is tried first, unchanged: a right prediction passes either way.
  EXPECT_EQ(spider_exec_match(pool, files_, gold, gold, plug), 1);
}

}  // namespace
}  // namespace sqlrl::sql

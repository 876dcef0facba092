// The evaluation's SQL front end on one query: Spider's tokenizer (sql/eval/lexer.h) and parser
// (sql/eval/parse.h parse_spider_sql) over a fixed schema (the concert database), then what
// eval-sql does with a parse (hardness, rebuild for matching, exact match against itself, clause
// F1, schema items), and the text-level passes the execution and plug-value paths run on the
// raw query (sqlparse lexer, distinct removal, postprocess, value extraction and plugging).
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_sqlite.h"
#include "fuzz/fuzz_util.h"
#include "sql/eval/eval_spider.h"
#include "sql/eval/eval_spider_exec.h"
#include "sql/eval/eval_spider_plug.h"
#include "sql/eval/lexer.h"
#include "sql/eval/parse.h"
#include "sql/eval/sql_features.h"

namespace {

struct Fixed {
  sqlrl::sql::Schema schema;
  sqlrl::sql::ForeignKeyMap kmap;
};

const Fixed& fixed() {
  static const Fixed f = [] {
    Fixed x;
    x.schema = sqlrl::sql::make_schema({{"singer", {"singer_id", "name", "country", "age"}},
                                        {"concert", {"concert_id", "title", "year", "singer_id"}}});
    x.kmap = sqlrl::sql::build_foreign_key_map(nlohmann::json::parse(sqlrl::fuzz::kConcertTablesJson)[0]);
    return x;
  }();
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sqlrl;
  using namespace sqlrl::sql;
  const std::string query(fuzz::as_text(data, size));
  const Fixed& f = fixed();
  fuzz::expect_ok_or_error([&] { (void)spider_tokenize(query); });
  fuzz::expect_ok_or_error([&] { (void)nltk_word_tokenize(query); });
  fuzz::expect_ok_or_error([&] { (void)python_lower(query); });
  fuzz::expect_ok_or_error([&] {
    Sql parsed = parse_spider_sql(f.schema, query);
    (void)to_string(parsed);
    Sql copy = clone_sql(parsed);
    (void)schema_items(parsed);
    fuzz::expect_ok_or_error([&] { (void)spider_hardness(parsed); });
    Sql rebuilt = rebuild_for_match(copy, f.schema, f.kmap);
    (void)spider_match(rebuilt, rebuilt);
    (void)spider_match(rebuilt, rebuild_for_match(empty_sql(), f.schema, f.kmap));
    (void)clause_f1(rebuilt, rebuilt);
  });
  fuzz::expect_ok_or_error([&] { (void)sqlparse_tokens(query); });
  fuzz::expect_ok_or_error([&] { (void)sqlparse_remove_distinct(query); });
  fuzz::expect_ok_or_error([&] { (void)exec_postprocess(query); });
  fuzz::expect_ok_or_error([&] { (void)replace_cur_year(query); });
  fuzz::expect_ok_or_error([&] { (void)token_bigrams(query); });
  fuzz::expect_ok_or_error([&] { (void)string_em(query, query); });
  fuzz::expect_ok_or_error([&] { (void)extract_query_values(query); });
  // Variants are a product over the gold values (exponential, as in the official script): a few.
  fuzz::expect_ok_or_error([&] {
    int variants = 0;
    (void)for_each_plugged_prediction(query, query, [&](const std::string&) { return ++variants >= 16; });
  });
  return 0;
}

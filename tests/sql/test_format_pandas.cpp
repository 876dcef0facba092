// pandas_to_string against 300 renderings made by pandas 1.5.3, Debian python3-pandas
// (tests/fixtures/sql/pandas_df_golden.jsonl: SQLite result sets with pd.DataFrame(rows,
// columns=columns).to_string(), .to_string(index=False) and the first 50 rows rendered).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "sql/exec/format.h"
#include "tests/test_util.h"

namespace sqlrl::sql {
namespace {

std::string base64_decode(const std::string& in) {
  static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (char c : in) {
    size_t pos = alphabet.find(c);
    if (pos == std::string::npos) break;
    val = (val << 6) + static_cast<int>(pos);
    bits += 6;
    if (bits >= 0) {
      out += static_cast<char>((val >> bits) & 0xff);
      bits -= 8;
    }
  }
  return out;
}

Cell cell_from_json(const nlohmann::json& j) {
  if (j.is_null()) return Cell::null();
  if (j.is_number_integer()) return Cell::of_integer(j.get<int64_t>());
  if (j.is_number_float()) return Cell::of_real(j.get<double>());
  if (j.is_string()) return Cell::of_text(j.get<std::string>());
  return Cell::of_blob(base64_decode(j.at("blob").get<std::string>()));
}

struct GoldenCase {
  std::vector<std::string> columns;
  std::vector<Row> rows;
  std::string to_string, to_string_noindex, head50;
};

std::vector<GoldenCase> load_golden() {
  std::ifstream in(testing::fixture_path("sql/pandas_df_golden.jsonl"));
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    GoldenCase g;
    g.columns = j.at("columns").get<std::vector<std::string>>();
    for (const auto& r : j.at("rows")) {
      Row row;
      for (const auto& c : r) row.push_back(cell_from_json(c));
      g.rows.push_back(std::move(row));
    }
    g.to_string = j.at("to_string").get<std::string>();
    g.to_string_noindex = j.at("to_string_noindex").get<std::string>();
    g.head50 = j.at("head50").get<std::string>();
    cases.push_back(std::move(g));
  }
  return cases;
}

TEST(PandasGolden, AllThreeRenderingsOfEveryCase) {
  std::vector<GoldenCase> cases = load_golden();
  ASSERT_EQ(cases.size(), 300u);
  int failures = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const GoldenCase& g = cases[i];
    std::string a = pandas_to_string(g.columns, g.rows, true);
    std::string b = pandas_to_string(g.columns, g.rows, false);
    std::string c = pandas_to_string_head(g.columns, g.rows, 50, true);
    if (a != g.to_string && failures++ < 5) ADD_FAILURE() << "case " << i << " to_string\nwant:\n" << g.to_string << "\ngot:\n" << a;
    if (b != g.to_string_noindex && failures++ < 5) ADD_FAILURE() << "case " << i << " noindex\nwant:\n" << g.to_string_noindex << "\ngot:\n" << b;
    if (c != g.head50 && failures++ < 5) ADD_FAILURE() << "case " << i << " head50\nwant:\n" << g.head50 << "\ngot:\n" << c;
  }
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace sqlrl::sql

// Observation styles, expected strings worked out by hand from the papers' examples and from
// pandas' layout rules (header right-aligned over the column, index column, floats trimmed to
// the decimals the column needs, Python reprs).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include "sql/exec/format.h"
#include "sql/exec/pool.h"
#include "sql/exec/pyrepr.h"
#include "tests/sql/pool_test_db.h"
#include "tests/test_util.h"

namespace sqlrl::sql {
namespace {

// Observations name the database by its folder and file only: where the data lives on the host
// must not change the model's input (and with it every result).
TEST(ShownDbPath, LastTwoComponents) {
  EXPECT_EQ(shown_db_path("/home/a/runs/demo/cache/synth/database/farm/farm.sqlite"), "farm/farm.sqlite");
  EXPECT_EQ(shown_db_path("runs/demo/database/farm/farm.sqlite"), "farm/farm.sqlite");
  EXPECT_EQ(shown_db_path("farm/farm.sqlite"), "farm/farm.sqlite");
  EXPECT_EQ(shown_db_path("/data/a.sqlite"), "data/a.sqlite");
  EXPECT_EQ(shown_db_path("/a.sqlite"), "/a.sqlite");
  EXPECT_EQ(shown_db_path("a.sqlite"), "a.sqlite");
  EXPECT_EQ(shown_db_path("/x/farm/"), "x/farm");
}

TEST(PythonRepr, FloatsAsPythonPrintsThem) {
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(python_float_repr(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(python_float_repr(24.75), "24.75");
  EXPECT_EQ(python_float_repr(3.0), "3.0");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(0.00001), "1e-05");
  EXPECT_EQ(python_float_repr(2.5e-7), "2.5e-07");
  EXPECT_EQ(python_float_repr(1.5e300), "1.5e+300");
  EXPECT_EQ(python_str_repr("it's"), "\"it's\"");
  EXPECT_EQ(python_str_repr("a\tb"), "'a\\tb'");
  EXPECT_EQ(python_bytes_repr(std::string("\x00\x01" "a", 3)), "b'\\x00\\x01a'");
}

Result result_of(std::vector<std::string> columns, std::vector<Row> rows) {
  Result r;
  r.columns = std::move(columns);
  r.rows = std::move(rows);
  return r;
}

TEST(DataFrameStyle, SqlTrailAvgPriceFrame) {
  // SQL-Trail appendix A.8: "   AVG(price)\n0       24.75". Header " AVG(price)" (numeric column:
  // leading space) is 11 wide; " 24.750000" trims to " 24.75" and is right-aligned to 11.
  Result r = result_of({"AVG(price)"}, {{Cell::of_real(24.75)}});
  EXPECT_EQ(format_df_observation(r, DataFrameStyle{}, {}), "   AVG(price)\n0       24.75");
}

TEST(DataFrameStyle, SkyRlFrameErrorsAndTimeouts) {
  DataFrameStyle skyrl;
  skyrl.index = false;
  skyrl.column_names = false;
  skyrl.dedupe_rows = true;
  // set(rows): the duplicate (1, 'a') appears once; labels 0 and 1; ints without leading space.
  Result r = result_of({"id", "name"}, {{Cell::of_integer(1), Cell::of_text("a")},
                                        {Cell::of_integer(1), Cell::of_text("a")},
                                        {Cell::of_integer(10), Cell::of_text("bb")}});
  EXPECT_EQ(format_df_observation(r, skyrl, {}), " 0  1\n 1  a\n10 bb");
  Result error;
  error.error = "no such column: x";
  EXPECT_EQ(format_df_observation(error, skyrl, {"/data/a.sqlite", "SELECT x"}),
            "Error executing SQL: no such column: x, db file: /data/a.sqlite");
  Result timeout;
  timeout.error = "timeout after 5000 ms";
  timeout.timed_out = true;
  EXPECT_EQ(format_df_observation(timeout, skyrl, {"/data/a.sqlite", "SELECT 1"}), "SQL Timeout:\nSELECT 1");
}

TEST(DataFrameStyle, LongResultsAreTruncatedToFiftyRowsWithTheNote) {
  std::vector<Row> rows;
  for (int i = 0; i < 120; ++i) rows.push_back({Cell::of_integer(i), Cell::of_text(std::string(100, 'x'))});
  Result r = result_of({"id", "pad"}, rows);
  std::string out = format_df_observation(r, DataFrameStyle{}, {});
  const std::string note = "Truncated to 50 lines since returned response too long: ";
  ASSERT_EQ(out.substr(0, note.size()), note);
  std::string frame = out.substr(note.size());
  EXPECT_EQ(frame, pandas_to_string({"id", "pad"}, std::vector<Row>(rows.begin(), rows.begin() + 50), true));
  EXPECT_EQ(std::count(frame.begin(), frame.end(), '\n'), 50);  // header + 50 rows
  // Short results are never truncated.
  Result small = result_of({"id"}, {{Cell::of_integer(1)}});
  EXPECT_EQ(format_df_observation(small, DataFrameStyle{}, {}), "   id\n0   1");
}

size_t peak_rss_mib() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<size_t>(usage.ru_maxrss) / 1024;  // KiB on Linux
}

// One 1 MB cell in 2,000 rows: pandas pads every row of its column to 1 MB, so rendering the
// whole frame to measure it (then cutting it to 50 rows) held 2 GB of padded cells and 2 GB of
// text for a 50 MB observation; the recap style wrote every row's repr for 200 characters. Both
// now write only what they show: the same texts, the memory of the rows shown.
TEST(DataFrameStyle, AWideCellInALongResultCostsOnlyTheRowsShown) {
  std::vector<Row> rows;
  for (int i = 0; i < 2000; ++i) rows.push_back({Cell::of_integer(i), Cell::of_text(i == 1 ? std::string(1 << 20, 'w') : "x")});
  Result r = result_of({"id", "pad"}, rows);
  const size_t before = peak_rss_mib();
  const std::string out = format_df_observation(r, DataFrameStyle{}, {});
  const std::string recap = format_recap_observation(r, 200);
  const size_t grown = peak_rss_mib() - before;
  const std::string note = "Truncated to 50 lines since returned response too long: ";
  ASSERT_EQ(out.substr(0, note.size()), note);
  EXPECT_EQ(out.substr(note.size()), pandas_to_string({"id", "pad"}, std::vector<Row>(rows.begin(), rows.begin() + 50), true));
  EXPECT_EQ(recap, utf8_prefix("The sql results example is: " + python_rows_repr(rows), 200));
  EXPECT_EQ(pandas_to_string_within({"id", "pad"}, rows, rows.size(), true, 9000), std::nullopt);
  if (!kAddressSanitizer) {
    EXPECT_LT(grown, 400u) << "MiB of peak memory to format a 50-row observation";
  }
}

// A result the pool stopped fetching says so: a single value over the byte cap leaves no row, and
// without the note the model would read "Empty DataFrame" as the query's whole answer.
TEST(DataFrameStyle, AFetchCutShortSaysSo) {
  Result r = result_of({"id"}, {});
  r.truncated = true;
  r.truncation = "more than 16777216 bytes of values";
  EXPECT_EQ(format_df_observation(r, DataFrameStyle{}, {}),
            "Empty DataFrame\nColumns: [id]\nIndex: []\n(Result truncated: the query returned more than 16777216 "
            "bytes of values; only the first 0 rows were fetched.)");
  Result two = result_of({"id"}, {{Cell::of_integer(1)}, {Cell::of_integer(2)}});
  two.truncated = true;
  two.truncation = "more than 2 rows";
  EXPECT_EQ(format_df_observation(two, DataFrameStyle{}, {}),
            "   id\n0   1\n1   2\n(Result truncated: the query returned more than 2 rows; only the first 2 rows were "
            "fetched.)");
  EXPECT_EQ(format_mtir_observation(two), R"({"columns": ["id"], "data": [[1], [2]], "truncated": "the query returned more than 2 rows"})");
}

TEST(DataFrameStyle, IntColumnWithNullTurnsFloatAsInPandas) {
  // ints + NULL -> float64: 42 -> " 42.0", NULL -> "NaN"; header " n".
  Result r = result_of({"n"}, {{Cell::of_integer(42)}, {Cell::null()}});
  EXPECT_EQ(pandas_to_string(r.columns, r.rows, true), "      n\n0  42.0\n1   NaN");
  EXPECT_EQ(pandas_to_string({"a", "b"}, {}, true), "Empty DataFrame\nColumns: [a, b]\nIndex: []");
}

TEST(MtirStyle, ColumnsAndAtMostTenRecords) {
  std::vector<Row> rows;
  for (int i = 0; i < 12; ++i) rows.push_back({Cell::of_integer(i), Cell::of_real(i + 0.5)});
  rows[1][1] = Cell::null();
  Result r = result_of({"id", "price"}, rows);
  EXPECT_EQ(format_mtir_observation(r),
            "{\"columns\": [\"id\", \"price\"], \"data\": [[0, 0.5], [1, null], [2, 2.5], [3, 3.5], [4, 4.5], "
            "[5, 5.5], [6, 6.5], [7, 7.5], [8, 8.5], [9, 9.5]]}");
  Result error;
  error.error = "no such table: t";
  EXPECT_EQ(format_mtir_observation(error), "{\"error\": \"no such table: t\"}");
}

TEST(RecapStyle, PythonListOfTuplesCutTo200Characters) {
  Result one = result_of({"n"}, {{Cell::of_integer(4)}});
  EXPECT_EQ(format_recap_observation(one), "The sql results example is: [(4,)]");
  Result pairs = result_of({"c", "n"}, {{Cell::of_text("america"), Cell::of_integer(4)},
                                        {Cell::of_text("asia"), Cell::null()}});
  EXPECT_EQ(format_recap_observation(pairs), "The sql results example is: [('america', 4), ('asia', None)]");
  std::vector<Row> many;
  for (int i = 0; i < 100; ++i) many.push_back({Cell::of_text("Constitutional Monarchy"), Cell::of_integer(i)});
  std::string cut = format_recap_observation(result_of({"g", "n"}, many));
  EXPECT_EQ(utf8_length(cut), 200u);
  EXPECT_EQ(cut.substr(0, 60), "The sql results example is: [('Constitutional Monarchy', 0),");
  Result error;
  error.error = "no such column: x";
  EXPECT_EQ(format_recap_observation(error), "Error: no such column: x");
}

TEST(Cli, SqlCommandPrintsTheObservation) {
  auto run = sqlrl::testing::run_command(std::string(SQLRL_BINARY) + " sql --db " + testing::shop_db() +
                                  " 'SELECT AVG(price) FROM products'");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  // AVG(1.5, 2.25, 3.0) = 2.25 (NULL ignored): " 2.250000" -> " 2.25", right-aligned to 11.
  EXPECT_EQ(run.output, "   AVG(price)\n0        2.25\n");
  run = sqlrl::testing::run_command(std::string(SQLRL_BINARY) + " sql --db /nonexistent/x.sqlite --format recap 'SELECT 1'");
  EXPECT_EQ(run.output, "Error: cannot open database '/nonexistent/x.sqlite': No such file or directory\n");
}

}  // namespace
}  // namespace sqlrl::sql

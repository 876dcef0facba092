// Observation text for the model, one function per paper's style. Each reproduces what the paper's
// Python environment printed, so a model trained here sees the same bytes it saw there.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "sql/exec/result.h"

namespace sqlrl::sql {

// pandas 1.5 `pd.DataFrame(rows, columns=columns).to_string(index=index)`, byte for byte:
// dtype inference per column (int, float when ints meet NULL or floats, object otherwise), the
// shared-decimals float format with scientific fallback, right alignment by code points,
// "Empty DataFrame" for zero rows. `columns` empty = pandas' default labels 0..k-1.
std::string pandas_to_string(const std::vector<std::string>& columns, const std::vector<Row>& rows, bool index);
// df.head(head_rows).to_string(index=index): dtypes come from all rows, only the first are shown.
std::string pandas_to_string_head(const std::vector<std::string>& columns, const std::vector<Row>& all_rows,
                                  size_t head_rows, bool index);
// pandas_to_string_head, or nullopt when its text would be longer than max_chars code points
// (decided from the column widths, before any of it is written).
std::optional<std::string> pandas_to_string_within(const std::vector<std::string>& columns,
                                                   const std::vector<Row>& all_rows, size_t head_rows, bool index,
                                                   size_t max_chars);

// The `df` observation of SkyRL-SQL (index = false, positional labels, set of rows) and SQL-Trail
// (index = true, column names). Over max_chars characters, the first head_rows rows are rendered
// after truncation_note (pandas' head() keeps the dtypes of the whole frame).
struct DataFrameStyle {
  bool index = true;                 // SQL-Trail: true; SkyRL-SQL: false
  bool column_names = true;          // SQL-Trail: true; SkyRL-SQL: false (labels 0..k-1)
  bool dedupe_rows = false;          // SkyRL-SQL renders set(rows): duplicates dropped
  size_t max_chars = 9000;           // SkyRL-SQL's threshold on the rendered frame
  size_t head_rows = 50;
  std::string truncation_note = "Truncated to 50 lines since returned response too long: ";
};

// What the environment knows about the call, for the error texts the papers show.
struct ObservationContext {
  std::string db_path;
  std::string sql;
};

// The database file as observations name it: its last two path components ("farm/farm.sqlite").
// SkyRL-SQL prints the full path; the host's folders would make the model's input, and so every
// result, depend on where the data happens to live.
std::string shown_db_path(const std::string& db_path);

// SkyRL-SQL: errors "Error executing SQL: {e}, db file: {path}", timeouts "SQL Timeout:\n{sql}".
std::string format_df_observation(const Result& result, const DataFrameStyle& style, const ObservationContext& ctx);

// MTIR-SQL's sql-execute_sql_query tool result: JSON {"columns": [...], "data": [[...], ...]} with
// at most max_records rows (json.dumps layout, floats as Python repr); errors {"error": "..."}.
std::string format_mtir_observation(const Result& result, size_t max_records = 10);

// MTSQL-R1's exec recap return_msg: "The sql results example is: " + str(list of row tuples),
// the whole message cut to max_chars code points; errors "Error: {e}".
std::string format_recap_observation(const Result& result, size_t max_chars = 200);

// Whole result as JSON (CLI `--format json`): columns, decltypes, rows, error, flags.
std::string format_result_json(const Result& result);

// str(list of tuples) as Python prints fetchall(): [(1, 'a'), (2.5, None)]. With max_chars, it
// stops after the row that takes it past max_chars code points: then a prefix of the whole.
std::string python_rows_repr(const std::vector<Row>& rows, size_t max_chars = std::string::npos);

// Number of Unicode code points in UTF-8 text (what Python's len() counts).
size_t utf8_length(const std::string& text);
std::string utf8_prefix(const std::string& text, size_t code_points);

}  // namespace sqlrl::sql

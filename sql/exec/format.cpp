#include "sql/exec/format.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

#include "runtime/error.h"
#include "sql/exec/pyrepr.h"

namespace sqlrl::sql {

size_t utf8_length(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text)
    if ((c & 0xc0) != 0x80) ++n;
  return n;
}

std::string utf8_prefix(const std::string& text, size_t code_points) {
  size_t seen = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xc0) != 0x80) {
      if (seen == code_points) return text.substr(0, i);
      ++seen;
    }
  }
  return text;
}

std::string python_rows_repr(const std::vector<Row>& rows, size_t max_chars) {
  std::string out = "[";
  size_t counted = 0, chars = 0;  // code points of out[0, counted)
  for (size_t i = 0; i < rows.size(); ++i) {
    chars += utf8_length(out.substr(counted));
    counted = out.size();
    if (chars > max_chars) return out;
    if (i) out += ", ";
    out += '(';
    for (size_t j = 0; j < rows[i].size(); ++j) {
      if (j) out += ", ";
      out += python_repr(rows[i][j]);
    }
    if (rows[i].size() == 1) out += ',';
    out += ')';
  }
  out += ']';
  return out;
}

namespace {

std::vector<Row> distinct_rows(const std::vector<Row>& rows) {
  // set(rows) in Python keeps one of each ==-equal row (INTEGER 1 and REAL 1.0 are one); its
  // iteration order is arbitrary there, here it is first occurrence (deterministic).
  std::vector<Row> out;
  std::set<std::string> seen;
  for (const Row& r : rows) {
    std::string key;
    for (const Cell& c : r) {
      bool integral = c.type == CellType::Real && c.real == std::floor(c.real) && std::fabs(c.real) < 9.2e18;
      key += integral || c.type == CellType::Integer ? 'n' : static_cast<char>('0' + static_cast<int>(c.type));
      std::string text = integral ? std::to_string(static_cast<int64_t>(c.real)) : python_str(c);
      key += std::to_string(text.size()) + ':' + text;
    }
    if (seen.insert(key).second) out.push_back(r);
  }
  return out;
}

nlohmann::ordered_json cell_json(const Cell& c) {
  switch (c.type) {
    case CellType::Null: return nullptr;
    case CellType::Integer: return c.integer;
    case CellType::Real: return c.real;
    case CellType::Text: return c.text;
    case CellType::Blob: return python_bytes_repr(c.text);
  }
  return nullptr;
}

// json.dumps(obj, ensure_ascii=False) layout: ", " and ": " separators, floats as repr.
std::string python_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += nlohmann::json(it.key()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out += ": ";
        out += python_json(it.value());
      }
      return out + "}";
    }
    case nlohmann::json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < j.size(); ++i) {
        if (i) out += ", ";
        out += python_json(j[i]);
      }
      return out + "]";
    }
    case nlohmann::json::value_t::number_float: {
      double v = j.get<double>();
      if (std::isnan(v)) return "NaN";
      if (std::isinf(v)) return v < 0 ? "-Infinity" : "Infinity";
      return python_float_repr(v);
    }
    default:
      return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
}

}  // namespace

std::string shown_db_path(const std::string& db_path) {
  std::string p = db_path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t last = p.rfind('/');
  if (last == std::string::npos || last == 0) return p;
  const size_t prev = p.rfind('/', last - 1);
  return prev == std::string::npos ? p : p.substr(prev + 1);
}

namespace {
// The pool stopped fetching (Limits::max_rows / max_result_bytes): said outright, so a model (or a
// reader of the log) never takes a prefix, or an "Empty DataFrame" left by one oversized row, for
// the whole answer.
std::string fetch_truncation_note(const Result& result) {
  return str_cat("\n(Result truncated: the query returned ", result.truncation, "; only the first ",
                 result.rows.size(), " rows were fetched.)");
}

std::string df_body(const Result& result, const DataFrameStyle& style) {
  std::vector<Row> rows = style.dedupe_rows ? distinct_rows(result.rows) : result.rows;
  std::vector<std::string> columns = style.column_names ? result.columns : std::vector<std::string>{};
  if (!style.column_names && rows.empty()) {
    // pd.DataFrame(set()) has no columns at all.
    return "Empty DataFrame\nColumns: []\nIndex: []";
  }
  if (rows.size() <= style.head_rows) return pandas_to_string(columns, rows, style.index);
  if (std::optional<std::string> full = pandas_to_string_within(columns, rows, rows.size(), style.index, style.max_chars))
    return *full;
  // df.head(n) keeps the frame's dtypes: an int column with a NULL past row n stays float.
  return style.truncation_note + pandas_to_string_head(columns, rows, style.head_rows, style.index);
}
}  // namespace

std::string format_df_observation(const Result& result, const DataFrameStyle& style, const ObservationContext& ctx) {
  if (result.timed_out) return "SQL Timeout:\n" + ctx.sql;
  if (!result.ok()) return "Error executing SQL: " + result.error + ", db file: " + ctx.db_path;
  std::string body = df_body(result, style);
  return result.truncated ? body + fetch_truncation_note(result) : body;
}

std::string format_mtir_observation(const Result& result, size_t max_records) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  if (!result.ok()) {
    out["error"] = result.error;
    return python_json(out);
  }
  out["columns"] = result.columns;
  nlohmann::ordered_json data = nlohmann::ordered_json::array();
  for (size_t i = 0; i < result.rows.size() && i < max_records; ++i) {
    nlohmann::ordered_json row = nlohmann::ordered_json::array();
    for (const Cell& c : result.rows[i]) row.push_back(cell_json(c));
    data.push_back(std::move(row));
  }
  out["data"] = std::move(data);
  if (result.truncated) out["truncated"] = "the query returned " + result.truncation;
  return python_json(out);
}

std::string format_recap_observation(const Result& result, size_t max_chars) {
  // Only as many rows as the cut shows are written (10,000 rows of 16 MiB made a 50 MB string
  // for 200 characters).
  std::string message = result.ok() ? "The sql results example is: " + python_rows_repr(result.rows, max_chars)
                                    : "Error: " + result.error;
  return utf8_prefix(message, max_chars);
}

std::string format_result_json(const Result& result) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["columns"] = result.columns;
  out["decltypes"] = result.decltypes;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const Row& r : result.rows) {
    nlohmann::ordered_json row = nlohmann::ordered_json::array();
    for (const Cell& c : r) row.push_back(cell_json(c));
    rows.push_back(std::move(row));
  }
  out["rows"] = std::move(rows);
  out["error"] = result.error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(result.error);
  out["timed_out"] = result.timed_out;
  out["truncated"] = result.truncated;
  if (!result.ignored_tail.empty()) out["ignored_tail"] = result.ignored_tail;
  out["elapsed_ms"] = result.elapsed_ms;
  return python_json(out);
}

}  // namespace sqlrl::sql

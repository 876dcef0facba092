// A port of the parts of pandas 1.5.3's DataFrameFormatter that SQL results reach (io/formats/
// format.py: format_array, FloatArrayFormatter, IntArrayFormatter, GenericArrayFormatter,
// _make_fixed_width, _trim_zeros_float; printing.adjoin). Options at their defaults: precision
// 6, na_rep "NaN", colheader_justify right, max_colwidth None (to_string lifts it).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "sql/exec/format.h"
#include "sql/exec/pyrepr.h"

namespace sqlrl::sql {

namespace {

enum class ColumnKind { Int, Float, Object };

ColumnKind infer_kind(const std::vector<Row>& rows, size_t col) {
  bool any_real = false, any_int = false, any_null = false, any_other = false;
  for (const Row& r : rows) {
    switch (r[col].type) {
      case CellType::Null: any_null = true; break;
      case CellType::Integer: any_int = true; break;
      case CellType::Real: any_real = true; break;
      default: any_other = true; break;
    }
  }
  if (any_other) return ColumnKind::Object;
  if (any_real) return ColumnKind::Float;
  if (any_int) return any_null ? ColumnKind::Float : ColumnKind::Int;
  return ColumnKind::Object;  // only NULLs
}

std::string escape_chars(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\t') out += "\\t";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  return out;
}

std::string printf_double(const char* fmt, double v) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

double as_double(const Cell& c) { return c.type == CellType::Integer ? static_cast<double>(c.integer) : c.real; }

// ^\s*[\+-]?[0-9]+\.[0-9]*$
bool is_number_with_decimal(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  if (digits == 0 || i >= s.size() || s[i] != '.') return false;
  ++i;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  return i == s.size();
}

std::vector<std::string> trim_zeros_float(std::vector<std::string> values) {
  auto should_trim = [&] {
    bool any = false;
    for (const std::string& x : values) {
      if (!is_number_with_decimal(x)) continue;
      any = true;
      if (x.back() != '0') return false;
    }
    return any;
  };
  while (should_trim())
    for (std::string& x : values)
      if (is_number_with_decimal(x)) x.pop_back();
  for (std::string& x : values)
    if (is_number_with_decimal(x) && x.back() == '.') x += '0';
  return values;
}

std::vector<std::string> format_float_column(const std::vector<Row>& rows, size_t col, bool leading_space) {
  auto format_with = [&](const char* fmt) {
    std::vector<std::string> out;
    for (const Row& r : rows) out.push_back(r[col].is_null() ? "NaN" : printf_double(fmt, as_double(r[col])));
    return trim_zeros_float(std::move(out));
  };
  std::vector<std::string> values = format_with(leading_space ? "% .6f" : "%.6f");
  size_t maxlen = 0;
  for (const std::string& v : values) maxlen = std::max(maxlen, v.size());
  bool too_long = maxlen > 6 + 6;
  bool has_large = false, has_small = false;
  for (const Row& r : rows) {
    if (r[col].is_null()) continue;
    double a = std::fabs(as_double(r[col]));
    if (a > 1e6) has_large = true;
    if (a < 1e-6 && a > 0) has_small = true;
  }
  if (has_small || (too_long && has_large)) values = format_with(leading_space ? "% .6e" : "%.6e");
  return values;
}

std::vector<std::string> format_int_column(const std::vector<Row>& rows, size_t col, bool leading_space) {
  std::vector<std::string> out;
  for (const Row& r : rows) {
    std::string s = std::to_string(r[col].integer);
    if (leading_space && r[col].integer >= 0) s = " " + s;
    out.push_back(s);
  }
  return out;
}

std::string trim_zeros_single_float(std::string s) {
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s += '0';
  return s;
}

std::vector<std::string> format_object_column(const std::vector<Row>& rows, size_t col, bool leading_space) {
  std::vector<std::string> out;
  for (const Row& r : rows) {
    const Cell& c = r[col];
    if (c.type == CellType::Real) {  // is_float: formatted, never prefixed
      out.push_back(trim_zeros_single_float(printf_double("% .6f", c.real)));
      continue;
    }
    std::string s = c.type == CellType::Text ? escape_chars(c.text) : python_str(c);
    out.push_back(leading_space ? " " + s : s);
  }
  return out;
}

std::string rjust(const std::string& s, size_t width) {
  size_t n = utf8_length(s);
  return n >= width ? s : std::string(width - n, ' ') + s;
}

std::string ljust(const std::string& s, size_t width) {
  size_t n = utf8_length(s);
  return n >= width ? s : s + std::string(width - n, ' ');
}

size_t max_length(const std::vector<std::string>& v) {
  size_t m = 0;
  for (const std::string& s : v) m = std::max(m, utf8_length(s));
  return m;
}

}  // namespace

std::string pandas_to_string(const std::vector<std::string>& columns, const std::vector<Row>& rows, bool index) {
  return pandas_to_string_head(columns, rows, rows.size(), index);
}

std::string pandas_to_string_head(const std::vector<std::string>& columns, const std::vector<Row>& all_rows,
                                  size_t head_rows, bool index) {
  return *pandas_to_string_within(columns, all_rows, head_rows, index, std::string::npos);
}

std::optional<std::string> pandas_to_string_within(const std::vector<std::string>& columns,
                                                   const std::vector<Row>& all_rows, size_t head_rows, bool index,
                                                   size_t max_chars) {
  std::vector<ColumnKind> kinds;
  size_t ncols = columns.empty() ? (all_rows.empty() ? 0 : all_rows[0].size()) : columns.size();
  std::vector<std::string> labels;
  if (columns.empty()) {
    // RangeIndex labels, left-justified to the widest.
    size_t width = ncols == 0 ? 0 : std::to_string(ncols - 1).size();
    for (size_t i = 0; i < ncols; ++i) labels.push_back(ljust(std::to_string(i), width));
  } else {
    for (const std::string& c : columns) labels.push_back(escape_chars(c));
  }
  if (ncols > 0 && !all_rows.empty())
    for (size_t c = 0; c < ncols; ++c) kinds.push_back(infer_kind(all_rows, c));
  std::vector<Row> rows(all_rows.begin(), all_rows.begin() + static_cast<std::ptrdiff_t>(std::min(head_rows, all_rows.size())));
  if (rows.empty() || ncols == 0) {
    std::string out = "Empty DataFrame\nColumns: [";
    for (size_t i = 0; i < ncols; ++i) {
      if (i) out += ", ";
      out += columns.empty() ? std::to_string(i) : columns[i];
    }
    out += "]\nIndex: []";
    return out;
  }
  // The header's leading space comes from a dict {label: is_numeric(dtype)}: with duplicate
  // labels the last column of that name decides for all of them.
  std::map<std::string, bool> numeric_by_label;
  for (size_t c = 0; c < ncols; ++c) numeric_by_label[labels[c]] = kinds[c] != ColumnKind::Object;

  // Each column's header and values unpadded, and the width pandas right-justifies them to:
  // padding them here held (rows x the widest cell) bytes, 10 GB for one 1 MB cell in 10,000 rows.
  std::vector<std::vector<std::string>> strcols;
  std::vector<size_t> justify;
  if (index) {
    size_t width = std::to_string(rows.size() - 1).size();
    std::vector<std::string> idx{""};
    for (size_t i = 0; i < rows.size(); ++i) idx.push_back(ljust(std::to_string(i), width));
    strcols.push_back(std::move(idx));
    justify.push_back(width);
  }
  for (size_t c = 0; c < ncols; ++c) {
    std::string header = numeric_by_label[labels[c]] ? " " + labels[c] : labels[c];
    std::vector<std::string> values = kinds[c] == ColumnKind::Float ? format_float_column(rows, c, index)
                                      : kinds[c] == ColumnKind::Int ? format_int_column(rows, c, index)
                                                                    : format_object_column(rows, c, index);
    justify.push_back(std::max(max_length(values), utf8_length(header)));
    values.insert(values.begin(), std::move(header));
    strcols.push_back(std::move(values));
  }
  // printing.adjoin(1, ...): every column but the last padded to its width + 1. Every line is
  // then exactly the sum of the widths, so the length is known before anything is written.
  std::vector<size_t> widths;
  size_t line_chars = 0;
  for (size_t i = 0; i < strcols.size(); ++i) {
    widths.push_back(justify[i] + (i + 1 < strcols.size() ? 1 : 0));
    line_chars += widths.back();
  }
  const size_t lines = rows.size() + 1;
  if (max_chars != std::string::npos && (line_chars + 1) * lines - 1 > max_chars) return std::nullopt;
  std::string out;
  for (size_t line = 0; line < lines; ++line) {
    if (line) out += '\n';
    for (size_t i = 0; i < strcols.size(); ++i) out += ljust(rjust(strcols[i][line], justify[i]), widths[i]);
  }
  return out;
}

}  // namespace sqlrl::sql

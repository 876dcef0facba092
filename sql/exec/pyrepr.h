// Python's printing of values, needed wherever observations or comparisons must match what the
// papers' Python environments produced: repr(float) (shortest round-trip), str() of cells.
#pragma once
#include <string>

#include "sql/exec/result.h"

namespace sqlrl::sql {

std::string python_float_repr(double value);     // repr(0.1) == "0.1", repr(1e16) == "1e+16"
std::string python_bytes_repr(const std::string& bytes);  // b'a\x00'
std::string python_str_repr(const std::string& text);     // repr('it''s') == "\"it's\""
std::string python_str(const Cell& cell);       // str(x): None, 1, 1.5, text, b'..'
std::string python_repr(const Cell& cell);      // repr(x): None, 1, 1.5, 'text', b'..'
const char* python_type_name(const Cell& cell);  // str(type(x)): "<class 'int'>" ...

}  // namespace sqlrl::sql

#include "sql/exec/pyrepr.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace sqlrl::sql {

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  // Shortest round-trip digits come from to_chars in scientific form "d.ddde±XX"; Python then
  // writes them in fixed notation when -4 <= exponent < 16, else as d.ddde±XX.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string out;
  size_t pos = 0;
  if (sci[0] == '-') {
    out += '-';
    pos = 1;
  }
  size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t i = pos; i < e_pos; ++i)
    if (sci[i] != '.') digits += sci[i];
  int exponent = std::atoi(sci.c_str() + e_pos + 1);
  if (exponent >= -4 && exponent < 16) {
    // decimal point after (exponent + 1) digits
    int point = exponent + 1;
    if (point <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-point), '0');
      out += digits;
    } else if (static_cast<size_t>(point) >= digits.size()) {
      out += digits;
      out.append(static_cast<size_t>(point) - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(point));
      out += '.';
      out += digits.substr(static_cast<size_t>(point));
    }
    return out;
  }
  out += digits[0];
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  out += exp_buf;
  return out;
}

std::string python_bytes_repr(const std::string& bytes) {
  bool has_single = bytes.find('\'') != std::string::npos;
  bool has_double = bytes.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out = "b";
  out += quote;
  for (unsigned char c : bytes) {
    if (c == static_cast<unsigned char>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c >= 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

namespace {

// Decodes one UTF-8 code point at s[i]; returns its length (0 if invalid).
size_t utf8_decode(const std::string& s, size_t i, uint32_t& cp) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    unsigned char d = static_cast<unsigned char>(s[i + k]);
    if ((d >> 6) != 2) return 0;
    cp = (cp << 6) | (d & 0x3f);
  }
  return n;
}

// Python's str.isprintable() for the code points that matter in database text: control
// characters and the separators/format characters below are escaped by repr().
bool python_printable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) return false;
  if (cp == 0xad) return false;                       // soft hyphen (Cf)
  if (cp >= 0x2000 && cp <= 0x200f && cp != 0x2000) {  // U+2001..200A spaces, ZW chars
    return false;
  }
  if (cp == 0x2000 || cp == 0x2028 || cp == 0x2029 || (cp >= 0x202a && cp <= 0x202f) ||
      (cp >= 0x2060 && cp <= 0x206f) || cp == 0x3000 || cp == 0xfeff || cp == 0x1680 || cp == 0x205f)
    return false;
  if (cp >= 0xd800 && cp <= 0xdfff) return false;
  if (cp >= 0xe000 && cp <= 0xf8ff) return false;  // private use (Co)
  return true;
}

}  // namespace

std::string python_str_repr(const std::string& text) {
  bool has_single = text.find('\'') != std::string::npos;
  bool has_double = text.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    size_t n = utf8_decode(text, i, cp);
    if (n == 0) {  // invalid byte: Python would not have decoded it; show it as \x escape
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(text[i]));
      out += hex;
      ++i;
      continue;
    }
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (!python_printable(cp)) {
      char hex[16];
      if (cp < 0x100)
        std::snprintf(hex, sizeof hex, "\\x%02x", cp);
      else if (cp < 0x10000)
        std::snprintf(hex, sizeof hex, "\\u%04x", cp);
      else
        std::snprintf(hex, sizeof hex, "\\U%08x", cp);
      out += hex;
    } else {
      out.append(text, i, n);
    }
    i += n;
  }
  out += quote;
  return out;
}

std::string python_str(const Cell& cell) {
  switch (cell.type) {
    case CellType::Null: return "None";
    case CellType::Integer: return std::to_string(cell.integer);
    case CellType::Real: return python_float_repr(cell.real);
    case CellType::Text: return cell.text;
    case CellType::Blob: return python_bytes_repr(cell.text);
  }
  return "";
}

std::string python_repr(const Cell& cell) {
  if (cell.type == CellType::Text) return python_str_repr(cell.text);
  return python_str(cell);
}

const char* python_type_name(const Cell& cell) {
  switch (cell.type) {
    case CellType::Null: return "<class 'NoneType'>";
    case CellType::Integer: return "<class 'int'>";
    case CellType::Real: return "<class 'float'>";
    case CellType::Text: return "<class 'str'>";
    case CellType::Blob: return "<class 'bytes'>";
  }
  return "";
}

}  // namespace sqlrl::sql

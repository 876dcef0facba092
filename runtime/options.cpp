#include "runtime/options.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>
#include <type_traits>

#include "runtime/error.h"

namespace sqlrl {
namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

// %.17g (double) or %.9g (float) reads back to the same bits; TOML floats need a '.' or an
// exponent, and %g gives "1" for 1.0.
std::string format_floating(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// A TOML basic string or a bare word, unescaped.
std::string parse_string(std::string_view v, const std::string& where) {
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'')) {
    check(v.back() == v.front(), where, ": unterminated string");
    std::string out;
    for (size_t i = 1; i + 1 < v.size(); ++i) {
      if (v.front() == '"' && v[i] == '\\' && i + 2 < v.size()) ++i;
      out += v[i];
    }
    return out;
  }
  return std::string(v);
}

// The index of the quote that closes the "..." string starting at s[0], skipping backslash
// escapes (as parse_string reads them); npos when it is unterminated.
size_t closing_quote(std::string_view s) {
  for (size_t i = 1; i < s.size(); ++i) {
    if (s[i] == '\\') ++i;
    else if (s[i] == '"') return i;
  }
  return std::string_view::npos;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The value text with a trailing '# comment' removed (a '#' inside quotes is kept).
std::string_view strip_comment(std::string_view s) {
  char in = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (in) {
      if (s[i] == '\\' && in == '"') ++i;
      else if (s[i] == in) in = 0;
    } else if (s[i] == '"' || s[i] == '\'') {
      in = s[i];
    } else if (s[i] == '#') {
      return s.substr(0, i);
    }
  }
  return s;
}

}  // namespace

std::string option_value_text(const Option& option) {
  std::string out;
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>) out = *p ? "true" : "false";
        else if constexpr (std::is_same_v<T, double>) out = format_floating(*p, 17);
        else if constexpr (std::is_same_v<T, float>) out = format_floating(*p, 9);
        else if constexpr (std::is_same_v<T, std::string>) out = quote(*p);
        else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          out = "[";
          for (size_t i = 0; i < p->size(); ++i) out += (i ? ", " : "") + quote((*p)[i]);
          out += "]";
        } else out = std::to_string(*p);
      },
      option.value);
  return out;
}

std::string options_to_toml(const OptionTable& table, const std::string& title) {
  std::string out = "# " + title + "\n";
  for (const Option& o : table) out += std::string(o.key) + " = " + option_value_text(o) + "\n";
  return out;
}

std::string options_to_toml(const OptionTable& table, const std::string& title, const OptionSources& sources) {
  check(sources.size() == table.size(), "options: ", sources.size(), " sources for ", table.size(), " options");
  std::string out = "# " + title + "\n";
  for (size_t i = 0; i < table.size(); ++i)
    out += std::string(table[i].key) + " = " + option_value_text(table[i]) + "  # " + sources[i] + "\n";
  return out;
}

void set_option_value(const Option& option, std::string_view value, const std::string& where) {
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        std::string text = parse_string(value, where);
        if constexpr (std::is_same_v<T, bool>) {
          check(text == "true" || text == "false", where, ": expected true or false, got ", text);
          *p = text == "true";
        } else if constexpr (std::is_same_v<T, std::string>) {
          *p = text;
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          check(value.size() >= 2 && value.front() == '[' && value.back() == ']', where, ": expected [\"...\", ...]");
          p->clear();
          std::string_view body = trim(value.substr(1, value.size() - 2));
          while (!body.empty()) {
            size_t end = body.find(',');
            if (body.front() == '"') {
              const size_t close = closing_quote(body);
              end = close == std::string_view::npos ? close : body.find(',', close);
            }
            p->push_back(parse_string(trim(body.substr(0, end)), where));
            body = end == std::string_view::npos ? std::string_view{} : trim(body.substr(end + 1));
          }
        } else {
          errno = 0;
          char* end = nullptr;
          T parsed{};  // the field changes only when the whole text is a number
          if constexpr (std::is_same_v<T, double>) parsed = std::strtod(text.c_str(), &end);
          else if constexpr (std::is_same_v<T, float>) parsed = std::strtof(text.c_str(), &end);
          else if constexpr (std::is_same_v<T, uint64_t>) {
            // strtoull reads "-1" as 2^64 - 1: a negative seed would become another seed silently.
            check(text.find('-') == std::string::npos, where, ": must be >= 0, got ", text);
            parsed = std::strtoull(text.c_str(), &end, 10);
          }
          else parsed = std::strtoll(text.c_str(), &end, 10);
          check(!text.empty() && end && *end == 0 && errno == 0, where, ": not a number: ", text);
          *p = parsed;
        }
      },
      option.value);
}

void read_options_toml(const std::string& path, const OptionTable& table, std::vector<size_t>* present,
                       const ConfigSection& section) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path, ": cannot read the config file");
  std::ostringstream text;
  text << in.rdbuf();
  read_options_text(text.str(), path, table, present, section);
}

namespace {

// "[eval]" -> "eval"; "" when the line is not a section header.
std::string section_header(std::string_view s, const std::string& where) {
  if (s.empty() || s.front() != '[') return "";
  check(s.size() > 2 && s.back() == ']', where, ": malformed section header '", s, "'");
  return std::string(trim(s.substr(1, s.size() - 2)));
}

}  // namespace

std::vector<std::string> config_sections(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> names;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    std::string name = section_header(trim(strip_comment(line)), str_cat("line ", line_no));
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

void read_options_text(const std::string& text, const std::string& origin, const OptionTable& table,
                       std::vector<size_t>* present, const ConfigSection& section) {
  // A flat file is entirely the reading command's, whatever section it asks for.
  const bool flat = config_sections(text).empty();
  std::istringstream in(text);
  std::string line, current;  // current: the section the line is in ("" = the top)
  int line_no = 0;
  std::map<std::string, int> seen;  // "section/key" -> its line: a section may override the top
  while (std::getline(in, line)) {
    ++line_no;
    std::string_view s = trim(strip_comment(line));
    std::string where = str_cat(origin, ":", line_no);
    if (s.empty()) continue;
    if (s.front() == '[') {
      current = section_header(s, where);
      if (current == "train") current.clear();  // [train] names the top: the RL run's keys
      continue;
    }
    size_t eq = s.find('=');
    check(eq != std::string_view::npos, where, ": expected key = value");
    std::string key(trim(s.substr(0, eq)));
    std::string_view value = trim(s.substr(eq + 1));
    const Option* option = nullptr;
    for (const Option& o : table)
      if (key == o.key) option = &o;
    bool strict = flat || current == section.name;  // the part this command owns
    if (!strict) {
      // Another phase's key: only the shared ones of the top are taken, and only if known here.
      bool shared = current.empty() && option != nullptr;
      if (shared) {
        shared = false;
        for (const std::string& k : section.inherit) shared = shared || k == key;
      }
      if (!shared) continue;
    }
    std::string part = current.empty() ? "" : str_cat(" [", current, "]");
    check(option != nullptr, where, ": unknown config key '", key, "'", part,
          flat && !section.name.empty()
              ? str_cat(" (a file without [sections] is one command's settings; a recipe for several phases "
                        "puts this command's keys under [", section.name, "])")
              : "");
    // A second line for a key would silently win over the first: a typo or a merge left over.
    auto [first, fresh] = seen.emplace(current + "/" + key, line_no);
    check(fresh, where, ": key '", key, "' is set twice (first at line ", first->second, ")");
    if (present) present->push_back(static_cast<size_t>(option - table.data()));
    set_option_value(*option, value, str_cat(where, " (", key, ")"));
  }
}

void set_option_help(OptionTable& table, const char* key, const char* help) {
  for (Option& o : table)
    if (std::string_view(o.key) == key) {
      o.help = help;
      return;
    }
  fail("option table has no key '", key, "'");
}

void set_option_resumable(OptionTable& table, const char* key, bool resumable) {
  for (Option& o : table)
    if (std::string_view(o.key) == key) {
      o.resumable = resumable;
      return;
    }
  fail("option table has no key '", key, "'");
}

void copy_option(const OptionTable& from, const OptionTable& to, size_t index) {
  check(index < from.size() && index < to.size(), "option index ", index, " out of range");
  std::visit([&](auto* s) { *std::get<decltype(s)>(to[index].value) = *s; }, from[index].value);
}

}  // namespace sqlrl

// Errors: one exception type for host code, messages that carry context.
// CUDA kernels never throw; launchers check the CUDA status on the host side and throw there.
#pragma once
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sqlrl {

// The caller's file and line for error messages. std::source_location where the library has it;
// clang 14 with libstdc++ 12 lacks the __builtin_source_location it needs (<source_location> is
// then empty), so the fuzz build (scripts/fuzz.sh) uses the older builtins clang and GCC share.
#if defined(__cpp_lib_source_location)
using SourceLocation = std::source_location;
#else
struct SourceLocation {
  static constexpr SourceLocation current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) noexcept {
    SourceLocation where;
    where.file_ = file;
    where.line_ = line;
    return where;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr unsigned line() const noexcept { return line_; }

 private:
  const char* file_ = "";
  unsigned line_ = 0;
};
#endif

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Concatenates anything printable with operator<<; the way every message here is built.
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

[[noreturn]] void throw_error(const std::string& message, SourceLocation where);
const char* relative_source_path(const char* file);  // "runtime/tensor.cpp", not "/home/.../runtime/tensor.cpp"

// The first argument of fail(): a message start that also records the caller's location (a
// default argument is evaluated at the call site, so `where` is where fail was called).
struct MessageStart {
  std::string_view text;
  SourceLocation where;
  MessageStart(const char* s, SourceLocation w = SourceLocation::current()) : text(s), where(w) {}
  MessageStart(const std::string& s, SourceLocation w = SourceLocation::current()) : text(s), where(w) {}
  MessageStart(std::string_view s, SourceLocation w = SourceLocation::current()) : text(s), where(w) {}
};

// The first argument of check(): the condition, with the caller's location.
struct Condition {
  bool ok;
  SourceLocation where;
  template <typename T>
  Condition(const T& value, SourceLocation w = SourceLocation::current())
      : ok(static_cast<bool>(value)), where(w) {}
};

// fail("model.safetensors: tensor '", name, "' ends at byte ", end, " past file size ", size)
template <typename... Args>
[[noreturn]] void fail(MessageStart first, const Args&... rest) {
  throw_error(str_cat(first.text, rest...), first.where);
}

// check(n > 0, "n must be positive, got ", n): throws with the message when the condition is false.
template <typename... Args>
void check(Condition condition, const Args&... message) {
  if (!condition.ok) throw_error(str_cat(message...), condition.where);
}

}  // namespace sqlrl

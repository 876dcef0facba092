// Errors: one exception type for host code, messages that carry context.
// CUDA kernels never throw; launchers check the CUDA status on the host side and throw there.
#pragma once
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sqlrl {

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

[[noreturn]] void throw_error(const std::string& message, std::source_location where);
const char* relative_source_path(const char* file);  // "runtime/tensor.cpp", not "/home/.../runtime/tensor.cpp"

// The first argument of fail(): a message start that also records the caller's location (a
// default argument is evaluated at the call site, so `where` is where fail was called).
struct MessageStart {
  std::string_view text;
  std::source_location where;
  MessageStart(const char* s, std::source_location w = std::source_location::current()) : text(s), where(w) {}
  MessageStart(const std::string& s, std::source_location w = std::source_location::current()) : text(s), where(w) {}
  MessageStart(std::string_view s, std::source_location w = std::source_location::current()) : text(s), where(w) {}
};

// The first argument of check(): the condition, with the caller's location.
struct Condition {
  bool ok;
  std::source_location where;
  template <typename T>
  Condition(const T& value, std::source_location w = std::source_location::current())
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

// Errors: one exception type for host code, messages that carry context.
// CUDA kernels never throw; launchers check the CUDA status on the host side and throw there.
#pragma once
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>

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

// fail("model.safetensors: tensor '", name, "' ends at byte ", end, " past file size ", size)
template <typename... Args>
struct fail {
  [[noreturn]] fail(const Args&... args, std::source_location where = std::source_location::current()) {
    throw_error(str_cat(args...), where);
  }
};
template <typename... Args>
fail(const Args&...) -> fail<Args...>;

// check(n > 0, "n must be positive, got ", n): the message is only built when the check fails.
template <typename... Args>
struct check {
  check(bool ok, const Args&... args, std::source_location where = std::source_location::current()) {
    if (!ok) throw_error(str_cat(args...), where);
  }
};
template <typename... Args>
check(bool, const Args&...) -> check<Args...>;

}  // namespace sqlrl

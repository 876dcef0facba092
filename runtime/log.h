// A small logger: level-filtered lines on stderr with elapsed seconds, thread-safe.
// SQLRL_LOG=debug|info|warn|error sets the level at start-up; set_log_level overrides it.
#pragma once
#include <string>

#include "runtime/error.h"

namespace sqlrl {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
LogLevel parse_log_level(const std::string& name);  // throws on an unknown name
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log_debug(const Args&... args) {
  if (log_level() <= LogLevel::Debug) log_line(LogLevel::Debug, str_cat(args...));
}
template <typename... Args>
void log_info(const Args&... args) {
  if (log_level() <= LogLevel::Info) log_line(LogLevel::Info, str_cat(args...));
}
template <typename... Args>
void log_warn(const Args&... args) {
  if (log_level() <= LogLevel::Warn) log_line(LogLevel::Warn, str_cat(args...));
}
template <typename... Args>
void log_error(const Args&... args) {
  if (log_level() <= LogLevel::Error) log_line(LogLevel::Error, str_cat(args...));
}

}  // namespace sqlrl

#include "runtime/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace sqlrl {
namespace {

LogLevel level_from_env() {
  const char* env = std::getenv("SQLRL_LOG");
  if (!env || !*env) return LogLevel::Info;
  try {
    return parse_log_level(env);
  } catch (const Error&) {
    std::fprintf(stderr, "warning: SQLRL_LOG='%s' is not one of debug|info|warn|error|off; using info\n", env);
    return LogLevel::Info;
  }
}

std::atomic<int>& current_level() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

const auto start_time = std::chrono::steady_clock::now();
std::mutex write_mutex;

}  // namespace

void set_log_level(LogLevel level) { current_level().store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(current_level().load(std::memory_order_relaxed)); }

LogLevel parse_log_level(const std::string& name) {
  if (name == "debug") return LogLevel::Debug;
  if (name == "info") return LogLevel::Info;
  if (name == "warn" || name == "warning") return LogLevel::Warn;
  if (name == "error") return LogLevel::Error;
  if (name == "off") return LogLevel::Off;
  fail("unknown log level '", name, "' (expected debug, info, warn, error or off)");
}

void log_line(LogLevel level, const std::string& message) {
  static const char* tags[] = {"debug", "info", "warn", "error", ""};
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  std::lock_guard<std::mutex> lock(write_mutex);
  std::fprintf(stderr, "[%9.3f %-5s] %s\n", seconds, tags[static_cast<int>(level)], message.c_str());
}

}  // namespace sqlrl

#include "rl/grpo/async.h"

#include <vector>

#include "runtime/error.h"

namespace sqlrl::rl {
namespace {

const std::vector<AsyncMode>& rows() {
  static const std::vector<AsyncMode> r{
      {"off", "each step samples with the weights it trains: on-policy", 0},
      {"one-step", "the next step's batch is sampled before this step's update: staleness 1", 1},
  };
  return r;
}

}  // namespace

const AsyncMode& find_async_mode(const std::string& name) {
  std::string names;
  for (const AsyncMode& m : rows()) {
    if (name == m.name) return m;
    names += str_cat(names.empty() ? "" : " | ", m.name);
  }
  fail("async '", name, "' is not one of ", names);
}

const char* async_mode_help() {
  static const std::string help = [] {
    std::string h;
    for (const AsyncMode& m : rows()) h += str_cat(h.empty() ? "" : " | ", m.name, " (", m.help, ")");
    return h;
  }();
  return help.c_str();
}

}  // namespace sqlrl::rl

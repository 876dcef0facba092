#include "rl/grpo/async.h"

#include <vector>

#include "runtime/error.h"

namespace sqlrl::rl {
namespace {

const std::vector<AsyncMode>& rows() {
  static const std::vector<AsyncMode> r{
      {"off", "each step samples with the weights it trains: on-policy", [](int64_t) -> int64_t { return 0; }},
      {"one-step", "the next step's batch is sampled before this step's update: staleness 1",
       [](int64_t) -> int64_t { return 1; }},
      {"full", "max-staleness K batches are sampled ahead: each batch after the first K is trained K updates after "
               "the weights that sampled it (the bound, on every batch, so the bits never depend on timing; no "
               "partial trajectories)", [](int64_t k) { return k; }},
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

int64_t async_lag(const std::string& name, int64_t max_staleness) { return find_async_mode(name).lag(max_staleness); }

const char* async_mode_help() {
  static const std::string help = [] {
    std::string h;
    for (const AsyncMode& m : rows()) h += str_cat(h.empty() ? "" : " | ", m.name, " (", m.help, ")");
    return h;
  }();
  return help.c_str();
}

}  // namespace sqlrl::rl

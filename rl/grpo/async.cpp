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
               "the weights that sampled it (the bound, on every batch, so the bits never depend on timing; with "
               "--partial-rollout the newest batch ahead switches to the next weights mid-trajectory)",
       [](int64_t k) { return k; }},
  };
  return r;
}

const std::vector<PartialKvMode>& kv_rows() {
  static const std::vector<PartialKvMode> r{
      {"recompute", "the live samples' cached tokens are computed again under the new weights (exact; each "
                    "group's prompt is prefilled once more, the rest of each history fed)", false},
      {"keep", "the cached tokens stay as the old weights computed them (no recompute; the new weights attend over "
               "old keys and values)", true},
  };
  return r;
}

template <class Row>
const Row& find_row(const std::vector<Row>& rows, const std::string& name, const char* key) {
  std::string names;
  for (const Row& m : rows) {
    if (name == m.name) return m;
    names += str_cat(names.empty() ? "" : " | ", m.name);
  }
  fail(key, " '", name, "' is not one of ", names);
}

template <class Row>
std::string rows_help(const std::vector<Row>& rows) {
  std::string h;
  for (const Row& m : rows) h += str_cat(h.empty() ? "" : " | ", m.name, " (", m.help, ")");
  return h;
}

}  // namespace

const AsyncMode& find_async_mode(const std::string& name) { return find_row(rows(), name, "async"); }
const PartialKvMode& find_partial_kv(const std::string& name) { return find_row(kv_rows(), name, "partial-kv"); }

int64_t async_lag(const std::string& name, int64_t max_staleness) { return find_async_mode(name).lag(max_staleness); }

const char* async_mode_help() {
  static const std::string help = rows_help(rows());
  return help.c_str();
}

const char* partial_kv_help() {
  static const std::string help = rows_help(kv_rows());
  return help.c_str();
}

}  // namespace sqlrl::rl

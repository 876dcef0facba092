#include "rl/grpo/data_schedule.h"

#include <numeric>

#include "runtime/error.h"
#include "runtime/philox.h"

namespace sqlrl::rl {
namespace {

// Philox stream of the data shuffle (the sampler uses sample ids as streams under the same seed;
// a different key half keeps the two apart). Level L > 0 xors in L * kLevelKey, so level 0 (the
// whole dataset without a curriculum) shuffles as the trainer always did.
constexpr uint64_t kShuffleKey = 0x53485546464c45ull;  // "SHUFFLE"
constexpr uint64_t kLevelKey = 0x9E3779B97F4A7C15ull;

// The order of one epoch over n items: Fisher-Yates with Philox(key, epoch, i) draws.
std::vector<int64_t> shuffled_order(uint64_t key, int64_t epoch, int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    Philox4 r = philox_draw(key, static_cast<uint64_t>(epoch), static_cast<uint64_t>(i));
    uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(bits % static_cast<uint64_t>(i + 1))]);
  }
  return order;
}

const std::vector<int64_t>& current_level(const DataSchedule& s, const DataCursor& c) {
  check(c.level >= 0 && c.level < static_cast<int64_t>(s.levels.size()), "data schedule: level ", c.level,
        " of a schedule with ", s.levels.size(), " levels");
  const std::vector<int64_t>& level = s.levels[static_cast<size_t>(c.level)];
  check(!level.empty(), "data schedule: level ", c.level + 1, " holds no example");
  return level;
}

}  // namespace

DataSchedule whole_dataset_schedule(int64_t n) {
  DataSchedule s;
  s.levels.emplace_back(static_cast<size_t>(n));
  std::iota(s.levels[0].begin(), s.levels[0].end(), 0);
  return s;
}

int64_t draw_example(const DataSchedule& s, DataCursor& c, uint64_t seed) {
  const std::vector<int64_t>& level = current_level(s, c);
  const int64_t n = static_cast<int64_t>(level.size()), epoch = c.level_draws / n;
  // An epoch's order costs n Philox draws (2.5M for SynSQL) and a step draws batch-size times
  // from it: the last order is kept, per thread, keyed by everything it depends on.
  const uint64_t key = (seed ^ kShuffleKey) ^ (static_cast<uint64_t>(c.level) * kLevelKey);
  struct Cached {
    uint64_t key = 0;
    int64_t epoch = -1, n = -1;
    std::vector<int64_t> order;
  };
  thread_local Cached cache;
  if (cache.key != key || cache.epoch != epoch || cache.n != n) cache = {key, epoch, n, shuffled_order(key, epoch, n)};
  const int64_t pick = level[static_cast<size_t>(cache.order[static_cast<size_t>(c.level_draws % n)])];
  ++c.level_draws, ++c.draws;
  return pick;
}

int64_t cursor_epoch(const DataSchedule& s, const DataCursor& c) {
  return c.level_draws / static_cast<int64_t>(current_level(s, c).size());
}

bool observe_step(const DataSchedule& s, DataCursor& c, double step_ex) {
  if (c.level + 1 >= static_cast<int64_t>(s.levels.size())) return false;
  c.recent_ex.push_back(step_ex);
  if (static_cast<int64_t>(c.recent_ex.size()) > s.window) c.recent_ex.erase(c.recent_ex.begin());
  const int64_t n = static_cast<int64_t>(current_level(s, c).size());
  bool solved = false;
  if (s.promote_at > 0 && static_cast<int64_t>(c.recent_ex.size()) == s.window) {
    double mean = 0;
    for (double x : c.recent_ex) mean += x;
    solved = mean / static_cast<double>(s.window) >= s.promote_at;
  }
  if (!solved && c.level_draws < s.level_epochs * n) return false;
  ++c.level, c.level_draws = 0, c.recent_ex.clear();
  return true;
}

nlohmann::ordered_json cursor_json(const DataCursor& c) {
  nlohmann::ordered_json j;
  j["level"] = c.level;
  j["level_draws"] = c.level_draws;
  j["draws"] = c.draws;
  j["recent_ex"] = c.recent_ex;
  return j;
}

DataCursor cursor_from_json(const nlohmann::json& state, int64_t fallback_draws) {
  DataCursor c;
  if (!state.contains("data_cursor")) {
    c.draws = c.level_draws = fallback_draws;
    return c;
  }
  try {
    const nlohmann::json& j = state.at("data_cursor");
    c.level = j.at("level").get<int64_t>();
    c.level_draws = j.at("level_draws").get<int64_t>();
    c.draws = j.at("draws").get<int64_t>();
    c.recent_ex = j.at("recent_ex").get<std::vector<double>>();
  } catch (const nlohmann::json::exception& e) {
    fail("trainer_state.json: data_cursor: ", e.what());
  }
  return c;
}

}  // namespace sqlrl::rl

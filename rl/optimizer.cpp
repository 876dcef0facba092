#include "rl/optimizer.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "runtime/error.h"
#include "weights/safetensors.h"

namespace sqlrl::rl {

OptimizerState make_optimizer_state(int64_t num_params) {
  OptimizerState s;
  s.m.assign(static_cast<size_t>(num_params), 0.0f);
  s.v.assign(static_cast<size_t>(num_params), 0.0f);
  return s;
}

void save_optimizer(const OptimizerState& state, const std::string& path) {
  check(state.m.size() == state.v.size(), "optimizer: m has ", state.m.size(), " elements but v ", state.v.size());
  int64_t n = static_cast<int64_t>(state.m.size());
  std::vector<TensorRecord> records = {{"m", StDType::F32, {n}, state.m.data()}, {"v", StDType::F32, {n}, state.v.data()}};
  WriteOptions options;
  options.metadata = {{"format", "sqlrl-adamw"},
                      {"adam_step", std::to_string(state.adam_step)},
                      {"train_step", std::to_string(state.train_step)}};
  write_safetensors(path, records, options);
}

namespace {

int64_t metadata_int(const SafetensorsFile& file, const std::string& key) {
  auto it = file.metadata.find(key);
  check(it != file.metadata.end(), file.path, ": optimizer metadata '", key, "' is missing");
  size_t used = 0;
  int64_t value = -1;
  try {
    value = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  check(used == it->second.size() && value >= 0, file.path, ": optimizer metadata '", key, "' = '", it->second,
        "' is not a non-negative integer");
  return value;
}

void read_moment(const SafetensorsFile& file, const char* name, int64_t num_params, std::vector<float>& out) {
  const TensorEntry* e = file.find(name);
  check(e != nullptr, file.path, ": optimizer tensor '", name, "' is missing");
  check(e->dtype == StDType::F32 && e->shape.size() == 1 && e->shape[0] == num_params, file.path,
        ": optimizer tensor '", name, "' is ", st_dtype_name(e->dtype), e->shape_str(), ", expected F32[", num_params,
        "] (the model's parameter count)");
  out.resize(static_cast<size_t>(num_params));
  std::memcpy(out.data(), file.bytes(*e), e->nbytes());
}

}  // namespace

OptimizerState load_optimizer(const std::string& path, int64_t num_params) {
  SafetensorsFile file = open_safetensors(path);
  OptimizerState s;
  read_moment(file, "m", num_params, s.m);
  read_moment(file, "v", num_params, s.v);
  s.adam_step = metadata_int(file, "adam_step");
  s.train_step = metadata_int(file, "train_step");
  return s;
}

float lr_at(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps) return s.lr * static_cast<float>(step) / static_cast<float>(s.warmup_steps);
  if (s.decay == LrDecay::Constant) return s.lr;
  check(s.total_steps > s.warmup_steps, "lr schedule: cosine needs total_steps (", s.total_steps,
        ") above warmup_steps (", s.warmup_steps, ")");
  double progress = static_cast<double>(step - s.warmup_steps) / static_cast<double>(s.total_steps - s.warmup_steps);
  double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(progress, 1.0)));
  return s.lr * static_cast<float>(s.min_lr_ratio + (1.0 - s.min_lr_ratio) * cosine);
}

}  // namespace sqlrl::rl

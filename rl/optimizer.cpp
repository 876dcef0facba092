#include "rl/optimizer.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numbers>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "weights/safetensors.h"

namespace sqlrl::rl {

namespace fs = std::filesystem;

OptimizerState make_optimizer_state(int64_t num_params, bool bf16) {
  OptimizerState s;
  s.bf16 = bf16;
  if (bf16) {
    s.m16.assign(static_cast<size_t>(num_params), 0);
    s.v16.assign(static_cast<size_t>(num_params), 0);
  } else {
    s.m.assign(static_cast<size_t>(num_params), 0.0f);
    s.v.assign(static_cast<size_t>(num_params), 0.0f);
  }
  return s;
}

void set_moment_precision(OptimizerState& s, bool bf16) {
  if (s.bf16 == bf16) return;
  s.bf16 = bf16;
  if (bf16) {
    s.m16.resize(s.m.size()), s.v16.resize(s.v.size());
    convert_f32_to_bf16(s.m.data(), s.m16.data(), s.m.size());
    convert_f32_to_bf16(s.v.data(), s.v16.data(), s.v.size());
    s.m = {}, s.v = {};
  } else {
    s.m.resize(s.m16.size()), s.v.resize(s.v16.size());
    convert_bf16_to_f32(s.m16.data(), s.m.data(), s.m16.size());
    convert_bf16_to_f32(s.v16.data(), s.v.data(), s.v16.size());
    s.m16 = {}, s.v16 = {};
  }
}

int64_t moments_size(const OptimizerState& s) { return static_cast<int64_t>(s.bf16 ? s.m16.size() : s.m.size()); }

void save_optimizer(const OptimizerState& state, const std::string& path,
                    const std::vector<std::pair<std::string, std::string>>& extra_metadata) {
  const size_t nm = state.bf16 ? state.m16.size() : state.m.size(), nv = state.bf16 ? state.v16.size() : state.v.size();
  check(nm == nv, "optimizer: m has ", nm, " elements but v ", nv);
  int64_t n = static_cast<int64_t>(nm);
  const StDType dtype = state.bf16 ? StDType::BF16 : StDType::F32;
  const void* m = state.bf16 ? static_cast<const void*>(state.m16.data()) : state.m.data();
  const void* v = state.bf16 ? static_cast<const void*>(state.v16.data()) : state.v.data();
  std::vector<TensorRecord> records = {{"m", dtype, {n}, m}, {"v", dtype, {n}, v}};
  WriteOptions options;
  options.metadata = {{"format", "sqlrl-adamw"},
                      {"adam_step", std::to_string(state.adam_step)},
                      {"train_step", std::to_string(state.train_step)}};
  for (const auto& [key, value] : extra_metadata) options.metadata[key] = value;
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

// Elements [a, b) of moment `name` (a tensor of `count`) into f32 or bf16 as `want_bf16` says,
// at out_f32 / out_bf16, from an F32 or BF16 tensor.
void read_moment_part(const SafetensorsFile& file, const char* name, int64_t count, int64_t a, int64_t b,
                      bool want_bf16, float* out_f32, uint16_t* out_bf16) {
  const TensorEntry* e = file.find(name);
  check(e != nullptr, file.path, ": optimizer tensor '", name, "' is missing");
  check((e->dtype == StDType::F32 || e->dtype == StDType::BF16) && e->shape.size() == 1 && e->shape[0] == count,
        file.path, ": optimizer tensor '", name, "' is ", st_dtype_name(e->dtype), e->shape_str(),
        ", expected F32 or BF16 [", count, "]");
  const size_t n = static_cast<size_t>(b - a);
  if (n == 0) return;
  // Copied out as stored first: the mapped bytes need not be aligned for their type.
  if (e->dtype == StDType::BF16) {
    std::vector<uint16_t> tmp;
    uint16_t* dst = want_bf16 ? out_bf16 : (tmp.resize(n), tmp.data());
    std::memcpy(dst, file.bytes(*e) + a * 2, n * 2);
    if (!want_bf16) convert_bf16_to_f32(dst, out_f32, n);
  } else {
    std::vector<float> tmp;
    float* dst = want_bf16 ? (tmp.resize(n), tmp.data()) : out_f32;
    std::memcpy(dst, file.bytes(*e) + a * 4, n * 4);
    if (want_bf16) convert_f32_to_bf16(dst, out_bf16, n);
  }
}

// Moments [a, b) of the file's `count` into `s` from its position `at` (s sized already).
void read_moments_part(const SafetensorsFile& file, int64_t count, int64_t a, int64_t b, int64_t at, OptimizerState& s) {
  read_moment_part(file, "m", count, a, b, s.bf16, s.bf16 ? nullptr : s.m.data() + at, s.bf16 ? s.m16.data() + at : nullptr);
  read_moment_part(file, "v", count, a, b, s.bf16, s.bf16 ? nullptr : s.v.data() + at, s.bf16 ? s.v16.data() + at : nullptr);
}

// rank, world of a shard file's name; {-1, -1} for any other name.
std::pair<int, int> shard_of_name(const std::string& name) {
  int rank = -1, world = -1;
  if (std::sscanf(name.c_str(), "optimizer-%d-of-%d.safetensors", &rank, &world) != 2 || rank < 0 || world < 1 ||
      rank >= world || name != optimizer_shard_name(rank, world))
    return {-1, -1};
  return {rank, world};
}

}  // namespace

OptimizerState load_optimizer(const std::string& path, int64_t num_params, bool bf16) {
  SafetensorsFile file = open_safetensors(path);
  OptimizerState s = make_optimizer_state(num_params, bf16);
  read_moments_part(file, num_params, 0, num_params, 0, s);
  s.adam_step = metadata_int(file, "adam_step");
  s.train_step = metadata_int(file, "train_step");
  return s;
}

std::string optimizer_shard_name(int rank, int world_size) {
  char name[64];
  std::snprintf(name, sizeof name, "optimizer-%05d-of-%05d.safetensors", rank, world_size);
  return name;
}

void save_optimizer_shard(const OptimizerState& slice, const std::string& path, int64_t offset, int64_t total) {
  check(offset >= 0 && offset + moments_size(slice) <= total, "optimizer: shard of ", moments_size(slice),
        " moments at offset ", offset, " of ", total);
  save_optimizer(slice, path, {{"offset", std::to_string(offset)}, {"total", std::to_string(total)}});
}

bool has_optimizer_state(const std::string& checkpoint_dir) {
  const fs::path dir = checkpoint_dir;
  if (fs::exists(dir / "optimizer.safetensors")) return true;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (shard_of_name(entry.path().filename().string()).first >= 0) return true;
  return false;
}

OptimizerState load_optimizer_range(const std::string& checkpoint_dir, int64_t total, int64_t lo, int64_t hi,
                                    bool bf16) {
  check(0 <= lo && lo <= hi && hi <= total, "optimizer: range [", lo, ", ", hi, ") of ", total, " moments");
  const fs::path dir = checkpoint_dir;
  OptimizerState s = make_optimizer_state(hi - lo, bf16);
  if (fs::exists(dir / "optimizer.safetensors")) {
    SafetensorsFile file = open_safetensors((dir / "optimizer.safetensors").string());
    read_moments_part(file, total, lo, hi, 0, s);
    s.adam_step = metadata_int(file, "adam_step");
    s.train_step = metadata_int(file, "train_step");
    return s;
  }
  // The shards: every rank of one world size, tiling [0, total) in rank order.
  std::vector<std::string> shards;
  int world = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto [rank, w] = shard_of_name(entry.path().filename().string());
    if (rank < 0) continue;
    check(world < 0 || w == world, checkpoint_dir, ": optimizer shards of two world sizes (", world, " and ", w, ")");
    world = w;
    shards.resize(static_cast<size_t>(w));
    shards[static_cast<size_t>(rank)] = entry.path().string();
  }
  check(world > 0, checkpoint_dir, ": no optimizer state (optimizer.safetensors or optimizer-*-of-*.safetensors)");
  int64_t expect = 0;
  bool counters = false;
  for (int r = 0; r < world; ++r) {
    check(!shards[r].empty(), checkpoint_dir, ": optimizer shard ", optimizer_shard_name(r, world), " is missing");
    SafetensorsFile file = open_safetensors(shards[r]);
    const int64_t offset = metadata_int(file, "offset"), file_total = metadata_int(file, "total");
    check(file_total == total, file.path, ": holds moments of ", file_total, " parameters, this run trains ", total);
    check(offset == expect, file.path, ": starts at moment ", offset, ", the shards before it end at ", expect);
    const TensorEntry* m = file.find("m");
    check(m != nullptr && m->shape.size() == 1, file.path, ": optimizer tensor 'm' is missing or not 1-D");
    const int64_t count = m->shape[0];
    check(offset + count <= total, file.path, ": moments [", offset, ", ", offset + count, ") pass the total ", total);
    const int64_t a = std::max(lo, offset), b = std::min(hi, offset + count);
    if (a < b) read_moments_part(file, count, a - offset, b - offset, a - lo, s);
    const int64_t adam_step = metadata_int(file, "adam_step"), train_step = metadata_int(file, "train_step");
    check(!counters || (adam_step == s.adam_step && train_step == s.train_step), file.path, ": at adam step ", adam_step,
          " and train step ", train_step, ", the shards before it at ", s.adam_step, " and ", s.train_step);
    s.adam_step = adam_step, s.train_step = train_step, counters = true;
    expect = offset + count;
  }
  check(expect == total, checkpoint_dir, ": the optimizer shards hold ", expect, " of ", total, " moments");
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

OptimizerState optimizer_slice_of(const OptimizerState& all, int64_t lo, int64_t hi) {
  const int64_t n = moments_size(all);
  check(0 <= lo && lo <= hi && hi <= n, "optimizer: slice [", lo, ", ", hi, ") of ", n, " moments");
  OptimizerState out = all;
  auto cut = [&](auto& v) {
    if (!v.empty()) v = std::vector<typename std::decay_t<decltype(v)>::value_type>(v.begin() + lo, v.begin() + hi);
  };
  cut(out.m), cut(out.v), cut(out.m16), cut(out.v16);
  return out;
}

}  // namespace sqlrl::rl

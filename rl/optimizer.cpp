#include "rl/optimizer.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "weights/safetensors.h"

namespace sqlrl::rl {

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

void save_optimizer(const OptimizerState& state, const std::string& path) {
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

// One moment into f32 (`f32`) or bf16 (`bf16`) as `want_bf16` says, from an F32 or BF16 tensor.
void read_moment(const SafetensorsFile& file, const char* name, int64_t num_params, bool want_bf16,
                 std::vector<float>& f32, std::vector<uint16_t>& bf16) {
  const TensorEntry* e = file.find(name);
  check(e != nullptr, file.path, ": optimizer tensor '", name, "' is missing");
  check((e->dtype == StDType::F32 || e->dtype == StDType::BF16) && e->shape.size() == 1 && e->shape[0] == num_params,
        file.path, ": optimizer tensor '", name, "' is ", st_dtype_name(e->dtype), e->shape_str(),
        ", expected F32 or BF16 [", num_params, "] (the model's parameter count)");
  const size_t n = static_cast<size_t>(num_params);
  const bool file_bf16 = e->dtype == StDType::BF16;
  // Copied out as stored first: the mapped bytes need not be aligned for their type.
  if (file_bf16) {
    bf16.resize(n);
    std::memcpy(bf16.data(), file.bytes(*e), e->nbytes());
    if (!want_bf16) f32.resize(n), convert_bf16_to_f32(bf16.data(), f32.data(), n), bf16 = {};
  } else {
    f32.resize(n);
    std::memcpy(f32.data(), file.bytes(*e), e->nbytes());
    if (want_bf16) bf16.resize(n), convert_f32_to_bf16(f32.data(), bf16.data(), n), f32 = {};
  }
}

}  // namespace

OptimizerState load_optimizer(const std::string& path, int64_t num_params, bool bf16) {
  SafetensorsFile file = open_safetensors(path);
  OptimizerState s;
  s.bf16 = bf16;
  read_moment(file, "m", num_params, bf16, s.m, s.m16);
  read_moment(file, "v", num_params, bf16, s.v, s.v16);
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

OptimizerState gather_optimizer(const Comm& comm, const OptimizerState& slice, int64_t num_params) {
  const std::vector<int64_t> b = shard_bounds(num_params, comm.world_size);
  const int64_t lo = b[comm.rank], count = b[comm.rank + 1] - lo;
  check(moments_size(slice) == count, "optimizer: rank ", comm.rank, " holds ", moments_size(slice),
        " moments, its slice has ", count);
  OptimizerState out = slice;
  // bf16 moments travel widened to f32 (exact both ways): the all-gather moves floats.
  auto gather = [&](const float* mine) {
    std::vector<float> all(static_cast<size_t>(num_params), 0.0f);
    std::copy(mine, mine + count, all.begin() + lo);
    comm_all_gather(comm, all.data(), num_params);
    return all;
  };
  auto widen = [](const std::vector<uint16_t>& h) {
    std::vector<float> f(h.size());
    for (size_t i = 0; i < h.size(); ++i) f[i] = bf16_bits_to_f32(h[i]);
    return f;
  };
  auto narrow = [](const std::vector<float>& f) {
    std::vector<uint16_t> h(f.size());
    for (size_t i = 0; i < f.size(); ++i) h[i] = f32_to_bf16_bits(f[i]);  // exact: f[i] is a widened bf16
    return h;
  };
  if (slice.bf16) {
    out.m16 = narrow(gather(widen(slice.m16).data()));
    out.v16 = narrow(gather(widen(slice.v16).data()));
  } else {
    out.m = gather(slice.m.data());
    out.v = gather(slice.v.data());
  }
  return out;
}

}  // namespace sqlrl::rl

#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/random.h"
#include "runtime/tensor.h"
#include "weights/checkpoint.h"

namespace sqlrl {

QwenModel make_model(const QwenConfig& config) {
  validate_config(config, "model");
  QwenModel model;
  model.config = config;
  for (const ParamSpec& spec : qwen_parameters(config)) {
    model.table.push_back({spec, model.num_params});
    model.num_params += spec.numel();
  }
  // The f32 parameters must fit the host before anything is allocated: a config that asks for
  // more is an error that says so, not a std::bad_alloc.
  const int64_t bytes = model.num_params * static_cast<int64_t>(sizeof(float)), host = host_memory_bytes();
  check(host == 0 || bytes <= host, "model: a ", arch_name(config.arch), " of hidden size ", config.hidden_size, ", ",
        config.num_hidden_layers, " layers and vocabulary ", config.vocab_size, " has ", model.num_params,
        " parameters, ", bytes >> 30, " GiB as f32, more than this machine's ", host >> 30, " GiB of memory");
  model.params.assign(static_cast<size_t>(model.num_params), 0.0f);
  return model;
}

WeightSlot weight_slot(const std::string& name, int64_t num_layers) {
  if (name == "embed") return {-1, WeightField::embed};
  if (name == "final_norm") return {-1, WeightField::final_norm};
  if (name == "lm_head") return {-1, WeightField::lm_head};
  check(name.size() > 1 && name[0] == 'L', "model: unexpected parameter name '", name, "'");
  size_t dot = name.find('.');
  int64_t layer = std::stoll(name.substr(1, dot - 1));
  check(layer >= 0 && layer < num_layers, "model: parameter '", name, "' names a layer past ", num_layers);
  static const std::pair<const char*, WeightField> fields[] = {
      {"attn_norm", WeightField::attn_norm}, {"wq", WeightField::wq},         {"bq", WeightField::bq},
      {"wk", WeightField::wk},               {"bk", WeightField::bk},         {"wv", WeightField::wv},
      {"bv", WeightField::bv},               {"wo", WeightField::wo},         {"bo", WeightField::bo},
      {"q_norm", WeightField::q_norm},       {"k_norm", WeightField::k_norm}, {"mlp_norm", WeightField::mlp_norm},
      {"w_gate", WeightField::w_gate},       {"w_up", WeightField::w_up},     {"w_down", WeightField::w_down}};
  std::string field = name.substr(dot + 1);
  for (const auto& [n, f] : fields)
    if (field == n) return {layer, f};
  fail("model: unknown layer parameter '", name, "'");
}

ModelWeights QwenModel::bind_weights(const QwenModel& model, float* base) {
  check(base != nullptr, "model: binding views to an unallocated buffer");
  return bind_views<ModelWeights>(model, base);
}

// The norm scales start at 1; every other tensor is drawn (init_random_weights, save_random_model).
static bool is_norm_param(const ParamSpec& spec) { return spec.name.find("norm") != std::string::npos; }

void init_random_weights(QwenModel& model, uint64_t seed, float stddev) {
  uint64_t stream = 0;
  for (const ParamView& view : model.table) {
    float* p = model.params.data() + view.offset;
    int64_t n = view.spec.numel();
    if (is_norm_param(view.spec))
      std::fill(p, p + n, 1.0f);
    else
      fill_normal(wrap(p, {n}, DType::F32, cpu_device(), nullptr), seed, stream++, 0.0f, stddev);
  }
}

static StDType saved_st_dtype(DType dtype) {
  return dtype == DType::F32 ? StDType::F32 : dtype == DType::BF16 ? StDType::BF16 : StDType::F16;
}
static const char* torch_dtype_name(DType dtype) {
  return dtype == DType::F32 ? "float32" : dtype == DType::BF16 ? "bfloat16" : "float16";
}
static void check_saved_dtype(DType dtype, const std::string& folder) {
  check(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16, "save_model: ", folder,
        ": weights are written as f32, bf16 or f16, not ", dtype_name(dtype));
}

void save_random_model(const QwenConfig& config, const std::string& folder, uint64_t seed, float stddev, DType dtype,
                       const std::function<void(uint64_t)>& on_written) {
  validate_config(config, "model");
  check_saved_dtype(dtype, folder);
  // A norm scale of 1 in the file's dtype, as save_model's rounding of 1.0f gives it.
  const float one = 1.0f;
  const uint16_t one_half = dtype == DType::BF16 ? f32_to_bf16_bits(one) : f32_to_f16_bits(one);
  std::vector<TensorRecord> records;
  uint64_t stream = 0;  // init_random_weights' numbering: the non-norm tensors in table order
  for (const ParamSpec& spec : qwen_parameters(config)) {
    TensorRecord r;
    r.name = spec.hf_name;
    r.dtype = saved_st_dtype(dtype);
    r.shape = spec.shape;
    if (is_norm_param(spec)) {
      r.generate = [dtype, one, one_half](uint64_t, uint64_t count, void* out) {
        if (dtype == DType::F32) std::fill_n(static_cast<float*>(out), count, one);
        else std::fill_n(static_cast<uint16_t*>(out), count, one_half);
      };
    } else {
      r.generate = [dtype, seed, stddev, s = stream++](uint64_t first, uint64_t count, void* out) {
        fill_normal_range(out, dtype, first, count, seed, s, 0.0f, stddev);
      };
    }
    records.push_back(std::move(r));
  }
  QwenConfig saved = config;
  saved.torch_dtype = torch_dtype_name(dtype);
  SaveOptions options;
  options.write.on_written = on_written;
  save_checkpoint(folder, records, saved, options);
}

QwenModel load_model(const std::string& path) {
  Checkpoint checkpoint = open_checkpoint(path);
  QwenConfig config = checkpoint_config(checkpoint);
  QwenModel model = make_model(config);
  std::vector<LoadedParam> loaded = load_qwen_weights(checkpoint, config, DType::F32, cpu_device());
  check(loaded.size() == model.table.size(), path, ": loaded ", loaded.size(), " tensors, the model has ",
        model.table.size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    const ParamView& view = model.table[i];
    check(loaded[i].spec.hf_name == view.spec.hf_name && loaded[i].tensor.numel() == view.spec.numel(), path,
          ": tensor ", i, " is '", loaded[i].spec.hf_name, "', expected '", view.spec.hf_name, "'");
    std::memcpy(model.params.data() + view.offset, loaded[i].tensor.data(), sizeof(float) * view.spec.numel());
    check_finite_tensor(path, view.spec.hf_name, model.params.data() + view.offset, view.spec.numel());
  }
  return model;
}

void check_finite_tensor(const std::string& path, const std::string& name, const float* p, int64_t n) {
  int64_t bad = 0, first = -1;
  for (int64_t k = 0; k < n; ++k)
    if (!std::isfinite(p[k])) bad += 1, first = first < 0 ? k : first;
  check(bad == 0, path, ": tensor '", name, "' holds ", bad, " non-finite value", bad > 1 ? "s" : "", " (the first, ",
        p[first < 0 ? 0 : first], ", at element ", first, " of ", n,
        "): the checkpoint is corrupt or was saved after training diverged");
}

void save_model(const QwenModel& model, const std::string& folder, DType dtype) {
  check_saved_dtype(dtype, folder);
  // The rounded copy of every parameter, alive until the files are written.
  std::vector<uint16_t> half;
  if (dtype != DType::F32) {
    half.resize(model.params.size());
    if (dtype == DType::BF16) convert_f32_to_bf16(model.params.data(), half.data(), half.size());
    else convert_f32_to_f16(model.params.data(), half.data(), half.size());
  }
  std::vector<TensorRecord> records;
  for (const ParamView& view : model.table) {
    TensorRecord r;
    r.name = view.spec.hf_name;
    r.dtype = saved_st_dtype(dtype);
    r.shape = view.spec.shape;
    r.data = dtype == DType::F32 ? static_cast<const void*>(model.params.data() + view.offset)
                                 : static_cast<const void*>(half.data() + view.offset);
    records.push_back(r);
  }
  QwenConfig config = model.config;
  config.torch_dtype = torch_dtype_name(dtype);
  save_checkpoint(folder, records, config);
}

const ParamView& find_param(const QwenModel& model, const std::string& hf_name) {
  for (const ParamView& view : model.table)
    if (view.spec.hf_name == hf_name) return view;
  fail("model: no parameter named '", hf_name, "' in the ", arch_name(model.config.arch), " table");
}

void alloc_grads(QwenModel& model) { model.grads.assign(static_cast<size_t>(model.num_params), 0.0f); }

void zero_grads(QwenModel& model) { std::fill(model.grads.begin(), model.grads.end(), 0.0f); }

}  // namespace sqlrl

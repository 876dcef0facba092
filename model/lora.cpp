// LoRA adapters: PEFT's config and file layout, init, merge and the unmerged CPU forward and backward.
#include "model/lora.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "runtime/error.h"
#include "runtime/json_depth.h"
#include "runtime/file_io.h"
#include "runtime/gemm.h"
#include "runtime/random.h"
#include "kernels/matmul.h"
#include "weights/safetensors.h"

namespace sqlrl {

using json = nlohmann::json;

namespace {

constexpr LoraModule kModules[kLoraModules] = {LoraModule::q_proj,    LoraModule::k_proj,  LoraModule::v_proj,
                                               LoraModule::o_proj,    LoraModule::gate_proj, LoraModule::up_proj,
                                               LoraModule::down_proj};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A value PEFT's defaults leave "off": null, false, "", [] or {}.
bool is_unset(const json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_string() && v.get<std::string>().empty()) ||
         (v.is_array() && v.empty()) || (v.is_object() && v.empty());
}

}  // namespace

const char* lora_module_name(LoraModule m) {
  static const char* names[kLoraModules] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return names[static_cast<int>(m)];
}

std::string lora_module_path(int64_t layer, LoraModule m) {
  const bool attn = m == LoraModule::q_proj || m == LoraModule::k_proj || m == LoraModule::v_proj || m == LoraModule::o_proj;
  return "model.layers." + std::to_string(layer) + (attn ? ".self_attn." : ".mlp.") + lora_module_name(m);
}

std::array<int64_t, 2> lora_module_dims(const QwenConfig& c, LoraModule m) {
  switch (m) {
    case LoraModule::q_proj: return {c.hidden_size, c.q_dim()};
    case LoraModule::k_proj:
    case LoraModule::v_proj: return {c.hidden_size, c.kv_dim()};
    case LoraModule::o_proj: return {c.q_dim(), c.hidden_size};
    case LoraModule::gate_proj:
    case LoraModule::up_proj: return {c.hidden_size, c.intermediate_size};
    case LoraModule::down_proj: return {c.intermediate_size, c.hidden_size};
  }
  fail("lora: unknown module ", static_cast<int>(m));
}

float lora_scale(const LoraConfig& c) {
  return static_cast<float>(c.use_rslora ? c.alpha / std::sqrt(static_cast<double>(c.rank))
                                         : c.alpha / static_cast<double>(c.rank));
}

std::vector<std::array<bool, kLoraModules>> lora_targets(const LoraConfig& c, const QwenConfig& model,
                                                         const std::string& source) {
  check(c.target_modules.empty() != c.target_pattern.empty(), source,
        ": target_modules must be either a list of module names or one pattern");
  const int64_t L = model.num_hidden_layers;
  std::vector<std::array<bool, kLoraModules>> adapted(static_cast<size_t>(L));
  const std::string supported = "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj";
  // lm_head and the embedding are modules PEFT could adapt (the embedding with other tensors,
  // lora_embedding_A/B): named by a target, they are refused rather than skipped.
  const char* refused[] = {"lm_head", "model.embed_tokens"};
  if (c.target_pattern == "all-linear") {  // PEFT: every linear layer except the output layer
    for (auto& row : adapted) row.fill(true);
    return adapted;
  }
  auto apply = [&](const std::string& what, const std::function<bool(const std::string&)>& matches) {
    for (const char* name : refused)
      check(!matches(name), source, ": target_modules ", what, " names ", name, ", which is not supported (only ",
            supported, ")");
    bool any = false;
    for (int64_t l = 0; l < L; ++l)
      for (LoraModule m : kModules)
        if (matches(lora_module_path(l, m))) adapted[l][static_cast<int>(m)] = any = true;
    check(any, source, ": target_modules ", what, " matches no projection of this ", arch_name(model.arch), " (",
          supported, " in model.layers.0 to ", L - 1, ")");
  };
  if (!c.target_pattern.empty()) {
    std::regex re;
    try {
      re = std::regex(c.target_pattern);
    } catch (const std::regex_error& e) {
      fail(source, ": target_modules '", c.target_pattern, "' is not a valid regular expression: ", e.what());
    }
    apply("'" + c.target_pattern + "'", [&](const std::string& name) { return std::regex_match(name, re); });
  }
  for (const std::string& entry : c.target_modules) {
    check(!entry.empty(), source, ": target_modules holds an empty name");
    apply("entry '" + entry + "'", [&](const std::string& name) { return name == entry || ends_with(name, "." + entry); });
  }
  return adapted;
}

LoraConfig parse_lora_config_json(const std::string& text, const std::string& source) {
  check_json_depth(text, source);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(source, ": invalid JSON: ", e.what());
  }
  check(j.is_object(), source, ": an adapter config must be a JSON object");
  auto field = [&](const char* name) -> const json& {
    static const json null;
    return j.contains(name) ? j.at(name) : null;
  };
  LoraConfig c;
  const json& peft_type = field("peft_type");
  check(peft_type.is_null() || peft_type == "LORA", source, ": peft_type ", peft_type.dump(),
        " is not supported (only \"LORA\")");
  const json& task_type = field("task_type");
  check(task_type.is_null() || task_type == "CAUSAL_LM", source, ": task_type ", task_type.dump(),
        " is not supported (only \"CAUSAL_LM\")");
  if (!field("r").is_null()) {
    check(field("r").is_number_integer() && field("r").get<int64_t>() > 0, source, ": r must be a positive integer, got ",
          field("r").dump());
    c.rank = field("r").get<int64_t>();
  }
  if (!field("lora_alpha").is_null()) {
    check(field("lora_alpha").is_number(), source, ": lora_alpha must be a number, got ", field("lora_alpha").dump());
    c.alpha = field("lora_alpha").get<double>();
  }
  if (!field("lora_dropout").is_null()) {
    const json& d = field("lora_dropout");
    check(d.is_number() && d.get<double>() >= 0 && d.get<double>() < 1, source,
          ": lora_dropout must be a number in [0, 1), got ", d.dump());
    c.dropout = d.get<double>();
  }
  if (!field("use_rslora").is_null()) {
    check(field("use_rslora").is_boolean(), source, ": use_rslora must be true or false, got ", field("use_rslora").dump());
    c.use_rslora = field("use_rslora").get<bool>();
  }
  const json& targets = field("target_modules");
  if (targets.is_string()) {
    c.target_pattern = targets.get<std::string>();
  } else if (targets.is_array() && !targets.empty()) {
    for (const json& t : targets) {
      check(t.is_string(), source, ": target_modules must hold module names, got ", t.dump());
      c.target_modules.push_back(t.get<std::string>());
    }
  }
  // PEFT would pick defaults per architecture for a null target_modules; a saved adapter always
  // names them, so an adapter without any is refused rather than guessed.
  check(!c.target_pattern.empty() || !c.target_modules.empty(), source, ": target_modules ", targets.dump(),
        " must name the adapted modules (a list of names or a pattern)");
  if (field("base_model_name_or_path").is_string()) c.base_model = field("base_model_name_or_path").get<std::string>();

  // Options that change what the adapter computes. Each must be off (PEFT's default); on, the
  // adapter would compute something else here than in PEFT, so it is refused by name.
  static const std::pair<const char*, const char*> refused[] = {
      {"use_dora", "DoRA (a magnitude vector per projection)"},
      {"fan_in_fan_out", "fan_in_fan_out (Conv1D weights stored [in, out], GPT-2)"},
      {"modules_to_save", "modules_to_save (full trainable copies of other modules)"},
      {"rank_pattern", "rank_pattern (per-module ranks)"},
      {"alpha_pattern", "alpha_pattern (per-module alphas)"},
      {"layers_to_transform", "layers_to_transform (a subset of layers)"},
      {"exclude_modules", "exclude_modules"},
      {"lora_bias", "lora_bias (a bias on lora_B)"},
      {"layer_replication", "layer_replication"},
      {"target_parameters", "target_parameters (LoRA on parameters, not modules)"},
      {"trainable_token_indices", "trainable_token_indices"},
      {"use_qalora", "QALoRA"},
      {"alora_invocation_tokens", "activated LoRA (alora_invocation_tokens)"},
  };
  for (const auto& [name, what] : refused)
    check(is_unset(field(name)), source, ": ", name, " = ", field(name).dump(), ": ", what,
          " is not supported; only plain LoRA on the Qwen projections is");
  const json& bias = field("bias");
  check(bias.is_null() || bias == "none", source, ": bias = ", bias.dump(),
        " (training the base model's biases) is not supported; only \"none\"");
  // Fields that do not change a forward: how the adapter was initialised, where it came from,
  // inference_mode, Megatron's layer classes (absent from a Hugging Face Qwen).
  static const char* harmless[] = {"peft_type", "task_type", "r", "lora_alpha", "lora_dropout", "use_rslora",
                                   "target_modules", "base_model_name_or_path", "bias", "auto_mapping", "revision",
                                   "inference_mode", "init_lora_weights", "loftq_config", "eva_config",
                                   "corda_config", "megatron_config", "megatron_core", "runtime_config",
                                   "layers_pattern", "qalora_group_size", "peft_version"};
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* h : harmless) known = known || key == h;
    for (const auto& [name, what] : refused) known = known || key == name;
    // A field this loader does not know may change the computation: refused unless it is off.
    check(known || is_unset(value), source, ": field '", key, "' = ", value.dump(),
          " is not understood here (PEFT 0.17 LoRA fields only), so the adapter is refused rather than misread");
  }
  return c;
}

std::string lora_config_to_json(const LoraConfig& c) {
  // The fields PEFT 0.17's LoraConfig reads back into the same adapter; the others take their
  // defaults there. Older PEFT versions reject fields they do not know, so no more are written.
  json j = json::object();
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  j["base_model_name_or_path"] = c.base_model.empty() ? json(nullptr) : json(c.base_model);
  j["r"] = c.rank;
  if (c.alpha == std::floor(c.alpha) && std::fabs(c.alpha) < 1e15) j["lora_alpha"] = static_cast<int64_t>(c.alpha);
  else j["lora_alpha"] = c.alpha;
  j["lora_dropout"] = c.dropout;
  j["target_modules"] = c.target_pattern.empty() ? json(c.target_modules) : json(c.target_pattern);
  j["use_rslora"] = c.use_rslora;
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["modules_to_save"] = nullptr;
  j["init_lora_weights"] = true;
  j["inference_mode"] = true;
  return j.dump(2) + "\n";
}

namespace {

// The adapter's table and size, nothing allocated.
LoraAdapter lay_out_adapter(const LoraConfig& config, const QwenConfig& model, const std::string& source) {
  validate_config(model, "LoRA base model");
  check(config.rank > 0, source, ": r must be positive, got ", config.rank);
  check(config.dropout >= 0 && config.dropout < 1, source, ": lora_dropout must be in [0, 1), got ", config.dropout);
  auto adapted = lora_targets(config, model, source);
  LoraAdapter a;
  a.config = config;
  a.model = model;
  for (int64_t l = 0; l < model.num_hidden_layers; ++l)
    for (LoraModule m : kModules) {
      if (!adapted[l][static_cast<int>(m)]) continue;
      const auto [in, out] = lora_module_dims(model, m);
      const std::string prefix = "base_model.model." + lora_module_path(l, m);
      for (bool is_b : {false, true}) {
        LoraView v;
        v.hf_name = prefix + (is_b ? ".lora_B.weight" : ".lora_A.weight");
        v.shape = is_b ? std::vector<int64_t>{out, config.rank} : std::vector<int64_t>{config.rank, in};
        v.offset = a.num_params;
        v.layer = l;
        v.module = m;
        v.is_b = is_b;
        a.num_params += v.numel();
        a.table.push_back(v);
      }
    }
  return a;
}

}  // namespace

LoraAdapter make_adapter(const LoraConfig& config, const QwenConfig& model, const std::string& source) {
  LoraAdapter a = lay_out_adapter(config, model, source);
  a.params.assign(static_cast<size_t>(a.num_params), 0.0f);
  return a;
}

int64_t lora_num_params(const LoraConfig& config, const QwenConfig& model) {
  return lay_out_adapter(config, model, "LoRA").num_params;
}

void alloc_lora_grads(LoraAdapter& adapter) { adapter.grads.assign(static_cast<size_t>(adapter.num_params), 0.0f); }

void zero_lora_grads(LoraAdapter& adapter) { std::fill(adapter.grads.begin(), adapter.grads.end(), 0.0f); }

LoraWeights bind_lora(const LoraAdapter& adapter, float* base) {
  check(base != nullptr, "LoRA: binding views to an unallocated buffer");
  LoraWeights w;
  w.layers.resize(static_cast<size_t>(adapter.model.num_hidden_layers));
  w.rank = adapter.config.rank;
  w.scale = lora_scale(adapter.config);
  for (const LoraView& v : adapter.table)
    (v.is_b ? w.layers[v.layer].b : w.layers[v.layer].a)[static_cast<int>(v.module)] = base + v.offset;
  return w;
}

LoraAdapter init_adapter(const LoraConfig& config, const QwenConfig& model, uint64_t seed) {
  LoraAdapter a = make_adapter(config, model);
  uint64_t stream = 0;
  for (const LoraView& v : a.table) {
    if (v.is_b) continue;  // B stays zero
    // kaiming_uniform_(a = sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in).
    const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(v.shape[1])));
    fill_uniform(wrap(a.params.data() + v.offset, {v.numel()}, DType::F32, cpu_device(), nullptr), seed, stream++,
                 -bound, bound);
  }
  return a;
}

LoraAdapter load_adapter(const std::string& dir, const QwenModel& model) {
  const std::string config_path = dir + "/adapter_config.json", weights_path = dir + "/adapter_model.safetensors";
  LoraConfig config = parse_lora_config_json(read_file_text(config_path), config_path);
  LoraAdapter a = make_adapter(config, model.config, config_path);
  SafetensorsFile file = open_safetensors(weights_path);
  std::vector<std::string> problems;
  std::vector<const TensorEntry*> entries;
  std::vector<Tensor> destinations;
  std::map<std::string, const LoraView*> expected;
  for (const LoraView& v : a.table) {
    expected[v.hf_name] = &v;
    const TensorEntry* e = file.find(v.hf_name);
    if (!e) {
      problems.push_back(str_cat("missing tensor '", v.hf_name, "' ", shape_str(v.shape), " (", config_path,
                                 " targets ", lora_module_path(v.layer, v.module), ")"));
    } else if (e->shape != v.shape) {
      problems.push_back(str_cat("tensor '", v.hf_name, "' has shape ", e->shape_str(), ", expected ", shape_str(v.shape)));
    } else if (!(e->dtype == StDType::F32 || e->dtype == StDType::BF16 || e->dtype == StDType::F16 ||
                 e->dtype == StDType::F64)) {
      problems.push_back(str_cat("tensor '", v.hf_name, "' is ", st_dtype_name(e->dtype), ", not a float type"));
    } else {
      entries.push_back(e);
      destinations.push_back(wrap(a.params.data() + v.offset, {v.shape[0], v.shape[1]}, DType::F32, cpu_device(), nullptr));
    }
  }
  for (const TensorEntry& e : file.tensors) {
    if (expected.count(e.name)) continue;
    // A LoRA tensor of a projection this model has, that the config does not target, says so.
    std::string why = "not the lora_A or lora_B weight of a projection of this " +
                      std::to_string(model.config.num_hidden_layers) + "-layer model";
    for (int64_t l = 0; l < model.config.num_hidden_layers; ++l)
      for (LoraModule m : kModules) {
        const std::string prefix = "base_model.model." + lora_module_path(l, m) + ".";
        if (e.name.rfind(prefix, 0) == 0) why = "adapts " + lora_module_path(l, m) + ", which target_modules does not name";
      }
    problems.push_back(str_cat("unexpected tensor '", e.name, "' ", e.shape_str(), " (", why, ")"));
  }
  if (!problems.empty()) {
    std::string all;
    for (const std::string& p : problems) all += (all.empty() ? "" : "; ") + p;
    fail(weights_path, ": ", all);
  }
  load_tensors_into(file, entries, destinations);
  for (const LoraView& v : a.table) check_finite_tensor(weights_path, v.hf_name, a.params.data() + v.offset, v.numel());
  return a;
}

void save_adapter(const LoraAdapter& adapter, const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) fail(dir, ": cannot create the folder: ", std::strerror(errno));
  std::vector<TensorRecord> records;
  for (const LoraView& v : adapter.table) {
    TensorRecord r;
    r.name = v.hf_name;
    r.dtype = StDType::F32;
    r.shape = v.shape;
    r.data = adapter.params.data() + v.offset;
    records.push_back(r);
  }
  write_safetensors(dir + "/adapter_model.safetensors", records);
  write_text_atomic(dir + "/adapter_config.json", lora_config_to_json(adapter.config));
}

void check_adapter_fits(const LoraAdapter& adapter, const QwenConfig& model, const char* who) {
  const QwenConfig& a = adapter.model;
  check(a.num_hidden_layers == model.num_hidden_layers && a.hidden_size == model.hidden_size &&
            a.intermediate_size == model.intermediate_size && a.q_dim() == model.q_dim() && a.kv_dim() == model.kv_dim(),
        who, ": the LoRA adapter was made for ", a.num_hidden_layers, " layers of hidden size ", a.hidden_size,
        " (intermediate ", a.intermediate_size, ", q ", a.q_dim(), ", kv ", a.kv_dim(), "), the model has ",
        model.num_hidden_layers, " of ", model.hidden_size, " (intermediate ", model.intermediate_size, ", q ",
        model.q_dim(), ", kv ", model.kv_dim(), ")");
  check(static_cast<int64_t>(adapter.params.size()) == adapter.num_params, who, ": the LoRA adapter holds ",
        adapter.params.size(), " floats, its table ", adapter.num_params);
}

float* lora_base_weight(const LayerWeights& w, LoraModule m) {
  switch (m) {
    case LoraModule::q_proj: return w.wq;
    case LoraModule::k_proj: return w.wk;
    case LoraModule::v_proj: return w.wv;
    case LoraModule::o_proj: return w.wo;
    case LoraModule::gate_proj: return w.w_gate;
    case LoraModule::up_proj: return w.w_up;
    case LoraModule::down_proj: return w.w_down;
  }
  fail("lora: unknown module ", static_cast<int>(m));
}

void merge_adapter(QwenModel& model, const LoraAdapter& adapter) {
  check_adapter_fits(adapter, model.config, "merge_adapter");
  ModelWeights w = model.weights();
  LoraWeights lw = bind_lora(adapter, const_cast<float*>(adapter.params.data()));
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l)
    for (LoraModule m : kModules) {
      const int i = static_cast<int>(m);
      if (!lw.layers[l].a[i]) continue;
      const auto [in, out] = lora_module_dims(model.config, m);
      // W[out, in] += scale * B[out, r] @ A[r, in]
      GemmProblem p;
      p.m = out;
      p.n = in;
      p.k = lw.rank;
      p.a = lw.layers[l].b[i];
      p.lda = lw.rank;
      p.b = lw.layers[l].a[i];
      p.ldb = in;
      p.c = lora_base_weight(w.layers[l], m);
      p.ldc = in;
      p.alpha = lw.scale;
      p.beta = 1.0f;
      gemm_cpu(p);
    }
}

LoraForward lora_forward_state(const LoraAdapter& adapter, const QwenConfig& model, int64_t tokens, const char* who) {
  check_adapter_fits(adapter, model, who);
  LoraForward f;
  f.weights = bind_lora(adapter, const_cast<float*>(adapter.params.data()));
  f.scratch.assign(static_cast<size_t>(tokens * adapter.config.rank), 0.0f);
  return f;
}

void lora_add_cpu(LoraForward* lora, int64_t layer, LoraModule m, float* out, const float* x, int64_t tokens,
                  int64_t in_features, int64_t out_features) {
  if (!lora) return;
  const LoraLayerWeights& w = lora->weights.layers[layer];
  const int i = static_cast<int>(m);
  if (!w.a[i]) return;
  const int64_t r = lora->weights.rank;
  check(static_cast<int64_t>(lora->scratch.size()) >= tokens * r, "lora_add_cpu: scratch for ",
        lora->scratch.size() / static_cast<size_t>(r), " tokens, ", tokens, " given");
  float* u = lora->scratch.data();
  if (lora->rows_kernel) {
    matmul_forward_rows_cpu(u, x, w.a[i], nullptr, tokens, in_features, r);
    lora->added.resize(static_cast<size_t>(tokens * out_features));
    matmul_forward_rows_cpu(lora->added.data(), u, w.b[i], nullptr, tokens, r, out_features);
    const float scale = lora->weights.scale;
    for (int64_t k = 0; k < tokens * out_features; ++k) out[k] += scale * lora->added[k];
    return;
  }
  matmul_forward_cpu(u, x, w.a[i], nullptr, tokens, in_features, r);  // u[T, r] = x A^T
  GemmProblem p;  // out[T, out] += scale * u B^T
  p.m = tokens;
  p.n = out_features;
  p.k = r;
  p.a = u;
  p.lda = r;
  p.b = w.b[i];
  p.ldb = r;
  p.trans_b = true;
  p.c = out;
  p.ldc = out_features;
  p.alpha = lora->weights.scale;
  p.beta = 1.0f;
  if (tokens > 0) gemm_cpu(p);
}

int64_t lora_backward_scratch_floats(const LoraConfig& config, int64_t tokens) { return 2 * tokens * config.rank; }

LoraBackward lora_backward_state(LoraAdapter& adapter, const QwenConfig& model, int64_t tokens, const char* who) {
  check(adapter.config.dropout == 0, who, ": lora_dropout = ", adapter.config.dropout,
        ": training with LoRA dropout is not implemented (PEFT drops the adapter's input in training mode); "
        "set lora_dropout to 0");
  check(static_cast<int64_t>(adapter.grads.size()) == adapter.num_params, who,
        ": the LoRA adapter's gradients are not allocated (call alloc_lora_grads)");
  LoraBackward b;
  b.forward = lora_forward_state(adapter, model, tokens, who);
  b.grads = bind_lora(adapter, adapter.grads.data());
  b.du.assign(static_cast<size_t>(tokens * adapter.config.rank), 0.0f);
  check(static_cast<int64_t>(b.forward.scratch.size() + b.du.size()) == lora_backward_scratch_floats(adapter.config, tokens),
        who, ": LoRA backward scratch drifted from lora_backward_scratch_floats");
  return b;
}

void lora_backward_cpu(LoraBackward* lora, int64_t layer, LoraModule m, float* dx, const float* dy, const float* x,
                       int64_t tokens, int64_t in_features, int64_t out_features) {
  if (!lora || tokens == 0) return;
  const int i = static_cast<int>(m);
  const LoraLayerWeights& w = lora->forward.weights.layers[layer];
  if (!w.a[i]) return;
  const LoraLayerWeights& g = lora->grads.layers[layer];
  const int64_t r = lora->forward.weights.rank;
  const float scale = lora->forward.weights.scale;
  check(static_cast<int64_t>(lora->du.size()) >= tokens * r, "lora_backward_cpu: scratch for ",
        lora->du.size() / static_cast<size_t>(r), " tokens, ", tokens, " given");
  float* u = lora->forward.scratch.data();
  float* du = lora->du.data();
  matmul_forward_cpu(u, x, w.a[i], nullptr, tokens, in_features, r);  // u[T, r] = x A^T, as the forward made it
  GemmProblem db;  // dB[out, r] += scale * dy^T u
  db.m = out_features;
  db.n = r;
  db.k = tokens;
  db.a = dy;
  db.lda = out_features;
  db.trans_a = true;
  db.b = u;
  db.ldb = r;
  db.c = g.b[i];
  db.ldc = r;
  db.alpha = scale;
  db.beta = 1.0f;
  gemm_cpu(db);
  GemmProblem dup;  // du[T, r] = scale * dy B
  dup.m = tokens;
  dup.n = r;
  dup.k = out_features;
  dup.a = dy;
  dup.lda = out_features;
  dup.b = w.b[i];
  dup.ldb = r;
  dup.c = du;
  dup.ldc = r;
  dup.alpha = scale;
  dup.beta = 0.0f;
  gemm_cpu(dup);
  // A is the weight [r, in] of the product u = x A^T: dx += du A, dA += du^T x.
  matmul_backward_cpu(dx, g.a[i], nullptr, du, x, w.a[i], tokens, in_features, r);
}

}  // namespace sqlrl

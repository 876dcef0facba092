// The Qwen2/Qwen3 parameter list, checkpoint checks, config inference and weight loading.
#include "weights/qwen_params.h"

#include <sstream>

namespace sqlrl {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<ParamSpec> qwen_parameters(const QwenConfig& c) {
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), ff = c.intermediate_size;
  std::vector<ParamSpec> specs;
  specs.push_back({"model.embed_tokens.weight", "embed", {c.vocab_size, h}});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string hf = "model.layers." + std::to_string(i) + ".";
    const std::string ours = "L" + std::to_string(i) + ".";
    specs.push_back({hf + "input_layernorm.weight", ours + "attn_norm", {h}});
    specs.push_back({hf + "self_attn.q_proj.weight", ours + "wq", {q, h}});
    if (c.has_qkv_bias()) specs.push_back({hf + "self_attn.q_proj.bias", ours + "bq", {q}});
    specs.push_back({hf + "self_attn.k_proj.weight", ours + "wk", {kv, h}});
    if (c.has_qkv_bias()) specs.push_back({hf + "self_attn.k_proj.bias", ours + "bk", {kv}});
    specs.push_back({hf + "self_attn.v_proj.weight", ours + "wv", {kv, h}});
    if (c.has_qkv_bias()) specs.push_back({hf + "self_attn.v_proj.bias", ours + "bv", {kv}});
    specs.push_back({hf + "self_attn.o_proj.weight", ours + "wo", {h, q}});
    if (c.has_o_bias()) specs.push_back({hf + "self_attn.o_proj.bias", ours + "bo", {h}});
    if (c.has_qk_norm()) {
      specs.push_back({hf + "self_attn.q_norm.weight", ours + "q_norm", {c.head_dim}});
      specs.push_back({hf + "self_attn.k_norm.weight", ours + "k_norm", {c.head_dim}});
    }
    specs.push_back({hf + "post_attention_layernorm.weight", ours + "mlp_norm", {h}});
    specs.push_back({hf + "mlp.gate_proj.weight", ours + "w_gate", {ff, h}});
    specs.push_back({hf + "mlp.up_proj.weight", ours + "w_up", {ff, h}});
    specs.push_back({hf + "mlp.down_proj.weight", ours + "w_down", {h, ff}});
  }
  specs.push_back({"model.norm.weight", "final_norm", {h}});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", "lm_head", {c.vocab_size, h}});
  return specs;
}

int64_t count_parameters(const std::vector<ParamSpec>& specs) {
  int64_t n = 0;
  for (const ParamSpec& s : specs) n += s.numel();
  return n;
}

bool is_ignorable_tensor(const std::string& hf_name, const QwenConfig& config) {
  if (hf_name == "lm_head.weight" && config.tie_word_embeddings) return true;
  const std::string suffix = "rotary_emb.inv_freq";
  return hf_name.size() >= suffix.size() && hf_name.compare(hf_name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string CheckReport::str() const {
  std::ostringstream out;
  for (const std::string& s : missing) out << "missing    " << s << "\n";
  for (const std::string& s : unexpected) out << "unexpected " << s << "\n";
  for (const std::string& s : mismatched) out << "shape      " << s << "\n";
  for (const std::string& s : ignored) out << "ignored    " << s << "\n";
  return out.str();
}

CheckReport check_checkpoint(const Checkpoint& checkpoint, const std::vector<ParamSpec>& specs, const QwenConfig& config) {
  CheckReport report;
  std::map<std::string, const ParamSpec*> expected;
  for (const ParamSpec& s : specs) expected[s.hf_name] = &s;
  for (const ParamSpec& s : specs) {
    const TensorEntry* e = checkpoint.find(s.hf_name);
    if (!e) report.missing.push_back(s.hf_name + " " + shape_str(s.shape));
    else if (e->shape != s.shape)
      report.mismatched.push_back(s.hf_name + " expected " + shape_str(s.shape) + ", file has " + e->shape_str());
  }
  for (const auto& [name, location] : checkpoint.tensors) {
    if (expected.count(name)) continue;
    const TensorEntry& e = checkpoint.files[location.file].tensors[location.entry];
    std::string line = name + " " + st_dtype_name(e.dtype) + " " + e.shape_str();
    (is_ignorable_tensor(name, config) ? report.ignored : report.unexpected).push_back(line);
  }
  return report;
}

// --- inference ----------------------------------------------------------------------------------

static const TensorEntry& need(const Checkpoint& c, const std::string& name, size_t ndim) {
  const TensorEntry* e = c.find(name);
  check(e != nullptr, c.path, ": cannot infer a config without config.json: no tensor '", name, "'");
  check(e->shape.size() == ndim, c.path, ": cannot infer a config: '", name, "' has shape ", e->shape_str(), ", expected ",
        ndim, " dimensions");
  return *e;
}

QwenConfig infer_config(const Checkpoint& c) {
  QwenConfig cfg;
  const TensorEntry embed = need(c, "model.embed_tokens.weight", 2);
  cfg.vocab_size = embed.shape[0];
  cfg.hidden_size = embed.shape[1];
  cfg.inferred.push_back("vocab_size, hidden_size from model.embed_tokens.weight " + embed.shape_str());
  int64_t layers = 0;
  while (c.find("model.layers." + std::to_string(layers) + ".input_layernorm.weight")) ++layers;
  check(layers > 0, c.path, ": cannot infer a config: no model.layers.0.input_layernorm.weight");
  cfg.num_hidden_layers = layers;
  cfg.inferred.push_back("num_hidden_layers = " + std::to_string(layers) + " from the model.layers.N tensors");
  const std::string l0 = "model.layers.0.";
  const TensorEntry gate = need(c, l0 + "mlp.gate_proj.weight", 2);
  cfg.intermediate_size = gate.shape[0];
  cfg.inferred.push_back("intermediate_size from mlp.gate_proj.weight " + gate.shape_str());
  const int64_t q_dim = need(c, l0 + "self_attn.q_proj.weight", 2).shape[0];
  const int64_t kv_dim = need(c, l0 + "self_attn.k_proj.weight", 2).shape[0];
  const TensorEntry* q_norm = c.find(l0 + "self_attn.q_norm.weight");
  cfg.arch = q_norm ? QwenArch::Qwen3 : QwenArch::Qwen2;
  cfg.inferred.push_back(std::string("architecture ") + arch_name(cfg.arch) +
                         (q_norm ? " (q_norm present)" : " (no q_norm)"));
  if (cfg.arch == QwenArch::Qwen3) {
    cfg.attention_bias = c.find(l0 + "self_attn.q_proj.bias") != nullptr;
    cfg.inferred.push_back(std::string("attention_bias = ") + (cfg.attention_bias ? "true" : "false") +
                           " from the presence of q_proj.bias");
  }
  cfg.tie_word_embeddings = c.find("lm_head.weight") == nullptr;
  cfg.inferred.push_back(std::string("tie_word_embeddings = ") + (cfg.tie_word_embeddings ? "true (no lm_head.weight)" : "false (lm_head.weight present)"));

  // Head counts are not in the shapes (only heads * head_dim is): take them from the preset with
  // these shapes, else assume head_dim 128 as every published Qwen2.5/Qwen3 model of 1B+ has.
  for (const std::string& name : preset_names()) {
    QwenConfig p = preset_config(name);
    if (p.arch == cfg.arch && p.vocab_size == cfg.vocab_size && p.hidden_size == cfg.hidden_size &&
        p.intermediate_size == cfg.intermediate_size && p.num_hidden_layers == layers && p.q_dim() == q_dim &&
        p.kv_dim() == kv_dim) {
      cfg.num_attention_heads = p.num_attention_heads;
      cfg.num_key_value_heads = p.num_key_value_heads;
      cfg.head_dim = p.head_dim;
      cfg.rms_norm_eps = p.rms_norm_eps;
      cfg.rope_theta = p.rope_theta;
      cfg.max_position_embeddings = p.max_position_embeddings;
      cfg.bos_token_id = p.bos_token_id;
      cfg.eos_token_ids = p.eos_token_ids;
      cfg.inferred.push_back("heads, head_dim, rms_norm_eps, rope_theta, max_position_embeddings, bos/eos from preset " + name +
                             " (all shapes match)");
      validate_config(cfg, c.path + " (inferred config)");
      return cfg;
    }
  }
  cfg.head_dim = q_norm ? q_norm->shape.at(0) : 128;
  check(cfg.head_dim > 0 && q_dim % cfg.head_dim == 0 && kv_dim % cfg.head_dim == 0, c.path,
        ": cannot infer head counts: q_proj rows ", q_dim, " and k_proj rows ", kv_dim, " are not multiples of head_dim ",
        cfg.head_dim, "; add a config.json");
  cfg.num_attention_heads = q_dim / cfg.head_dim;
  cfg.num_key_value_heads = kv_dim / cfg.head_dim;
  cfg.inferred.push_back("head_dim = " + std::to_string(cfg.head_dim) + (q_norm ? " from q_norm.weight" : " (assumed)") +
                         ", heads = " + std::to_string(cfg.num_attention_heads) + " / " +
                         std::to_string(cfg.num_key_value_heads) + " from q_proj / k_proj rows");
  cfg.rope_theta = 1000000.0;
  cfg.max_position_embeddings = 32768;
  cfg.torch_dtype = st_dtype_name(embed.dtype) == std::string("F32") ? "float32" : "bfloat16";
  cfg.inferred.push_back("rms_norm_eps = 1e-6, rope_theta = 1e6, max_position_embeddings = 32768 (Qwen defaults, not in the file)");
  validate_config(cfg, c.path + " (inferred config)");
  return cfg;
}

// --- loading ------------------------------------------------------------------------------------

std::vector<LoadedParam> load_qwen_weights(const Checkpoint& checkpoint, const QwenConfig& config, DType dtype,
                                           Device device) {
  std::vector<ParamSpec> specs = qwen_parameters(config);
  CheckReport report = check_checkpoint(checkpoint, specs, config);
  if (!report.ok()) {
    fail(checkpoint.path, ": does not match the ", arch_name(config.arch), " config (", report.missing.size(),
         " missing, ", report.unexpected.size(), " unexpected, ", report.mismatched.size(), " mis-shaped):\n", report.str());
  }
  // One load_tensors per file, so each file is read front to back with the reads ahead of the
  // conversion, whatever order the parameter table has.
  std::vector<LoadedParam> params;
  params.reserve(specs.size());
  std::vector<std::vector<size_t>> by_file(checkpoint.files.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    params.push_back({specs[i], Tensor()});
    by_file[checkpoint.tensors.at(specs[i].hf_name).file].push_back(i);
  }
  for (size_t f = 0; f < by_file.size(); ++f) {
    std::vector<const TensorEntry*> entries;
    for (size_t i : by_file[f]) entries.push_back(checkpoint.files[f].find(specs[i].hf_name));
    std::vector<Tensor> loaded = load_tensors(checkpoint.files[f], entries, dtype, device);
    for (size_t k = 0; k < loaded.size(); ++k) params[by_file[f][k]].tensor = std::move(loaded[k]);
  }
  return params;
}

std::vector<TensorRecord> records_of(const std::vector<LoadedParam>& params, std::vector<Tensor>& holder) {
  std::vector<TensorRecord> records;
  records.reserve(params.size());
  for (const LoadedParam& p : params) records.push_back(record_of(p.spec.hf_name, p.tensor, holder));
  return records;
}

}  // namespace sqlrl

// config.json parsing, writing, validation and the published presets.
#include "weights/config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/error.h"
#include "runtime/json_depth.h"

namespace sqlrl {

using json = nlohmann::json;

const char* arch_name(QwenArch arch) { return arch == QwenArch::Qwen2 ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM"; }
const char* arch_model_type(QwenArch arch) { return arch == QwenArch::Qwen2 ? "qwen2" : "qwen3"; }

void validate_config(const QwenConfig& c, const std::string& source) {
  auto positive = [&](int64_t v, const char* field) { check(v > 0, source, ": ", field, " must be positive, got ", v); };
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_hidden_layers, "num_hidden_layers");
  positive(c.num_attention_heads, "num_attention_heads");
  positive(c.num_key_value_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  positive(c.max_position_embeddings, "max_position_embeddings");
  // Ceilings far above any released Qwen (vocab 152k, hidden 8k, 94 layers, 64 heads, 128k
  // positions) that keep every size product inside int64 and turn a corrupt config into an error
  // here instead of a bad_alloc later.
  auto at_most = [&](int64_t v, int64_t ceiling, const char* field) {
    check(v <= ceiling, source, ": ", field, " ", v, " is beyond any Qwen model (at most ", ceiling, ")");
  };
  at_most(c.vocab_size, int64_t(1) << 24, "vocab_size");
  at_most(c.hidden_size, int64_t(1) << 17, "hidden_size");
  at_most(c.intermediate_size, int64_t(1) << 20, "intermediate_size");
  at_most(c.num_hidden_layers, 4096, "num_hidden_layers");
  at_most(c.num_attention_heads, 4096, "num_attention_heads");
  at_most(c.head_dim, 4096, "head_dim");
  at_most(c.max_position_embeddings, int64_t(1) << 24, "max_position_embeddings");
  check(c.num_attention_heads % c.num_key_value_heads == 0, source, ": num_attention_heads ", c.num_attention_heads,
        " is not a multiple of num_key_value_heads ", c.num_key_value_heads);
  check(c.head_dim % 2 == 0, source, ": head_dim ", c.head_dim, " must be even for rotary embeddings");
  check(c.rms_norm_eps > 0, source, ": rms_norm_eps must be positive, got ", c.rms_norm_eps);
  check(c.rope_theta > 0, source, ": rope_theta must be positive, got ", c.rope_theta);
}

static int64_t get_int(const json& j, const char* field, const std::string& source) {
  const json& v = j.at(field);
  if (!v.is_number_integer()) fail(source, ": field '", field, "' must be an integer, got ", v.dump());
  return v.get<int64_t>();
}

static int64_t required_int(const json& j, const char* field, const std::string& source) {
  check(j.contains(field), source, ": missing required field '", field, "'");
  return get_int(j, field, source);
}

static int64_t optional_int(const json& j, const char* field, int64_t fallback, const std::string& source) {
  return j.contains(field) && !j.at(field).is_null() ? get_int(j, field, source) : fallback;
}

static double optional_number(const json& j, const char* field, double fallback, const std::string& source) {
  if (!j.contains(field) || j.at(field).is_null()) return fallback;
  const json& v = j.at(field);
  if (!v.is_number()) fail(source, ": field '", field, "' must be a number, got ", v.dump());
  return v.get<double>();
}

static bool optional_bool(const json& j, const char* field, bool fallback, const std::string& source) {
  if (!j.contains(field) || j.at(field).is_null()) return fallback;
  const json& v = j.at(field);
  if (!v.is_boolean()) fail(source, ": field '", field, "' must be true or false, got ", v.dump());
  return v.get<bool>();
}

QwenConfig parse_config_json(const std::string& text, const std::string& source) {
  check_json_depth(text, source);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(source, ": invalid JSON: ", e.what());
  }
  check(j.is_object(), source, ": config must be a JSON object");

  QwenConfig c;
  std::string model_type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  std::string architecture;
  if (j.contains("architectures")) {
    const json& a = j["architectures"];
    if (!a.is_array() || a.size() != 1 || !a[0].is_string())
      fail(source, ": 'architectures' must be a list of one name, got ", a.dump());
    architecture = a[0].get<std::string>();
  }
  if (architecture == "Qwen2ForCausalLM" || (architecture.empty() && model_type == "qwen2")) c.arch = QwenArch::Qwen2;
  else if (architecture == "Qwen3ForCausalLM" || (architecture.empty() && model_type == "qwen3")) c.arch = QwenArch::Qwen3;
  else
    fail(source, ": unsupported architecture '", architecture.empty() ? model_type : architecture,
         "' (supported: Qwen2ForCausalLM, Qwen3ForCausalLM)");

  c.vocab_size = required_int(j, "vocab_size", source);
  c.hidden_size = required_int(j, "hidden_size", source);
  c.intermediate_size = required_int(j, "intermediate_size", source);
  c.num_hidden_layers = required_int(j, "num_hidden_layers", source);
  c.num_attention_heads = required_int(j, "num_attention_heads", source);
  check(c.num_attention_heads > 0, source, ": num_attention_heads must be positive, got ", c.num_attention_heads);
  c.num_key_value_heads = optional_int(j, "num_key_value_heads", c.num_attention_heads, source);
  // transformers: Qwen3Config defaults head_dim to 128; Qwen2 uses hidden_size / heads.
  c.head_dim = optional_int(j, "head_dim", c.arch == QwenArch::Qwen3 ? 128 : c.hidden_size / c.num_attention_heads, source);
  c.rms_norm_eps = optional_number(j, "rms_norm_eps", 1e-6, source);
  c.rope_theta = optional_number(j, "rope_theta", 10000.0, source);
  c.max_position_embeddings = optional_int(j, "max_position_embeddings", 32768, source);
  c.tie_word_embeddings = optional_bool(j, "tie_word_embeddings", false, source);
  c.attention_bias = optional_bool(j, "attention_bias", false, source);

  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    fail(source, ": rope_scaling ", j["rope_scaling"].dump(),
         " is not supported (only null: plain RoPE with rope_theta)");
  if (optional_bool(j, "use_sliding_window", false, source))
    fail(source, ": use_sliding_window = true is not supported (full causal attention only)");
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    if (!j["layer_types"].is_array()) fail(source, ": layer_types must be a list, got ", j["layer_types"].dump());
    for (const json& t : j["layer_types"])
      if (t != "full_attention")
        fail(source, ": layer_types holds ", t.dump(), "; only \"full_attention\" layers are supported");
  }
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    fail(source, ": hidden_act ", j["hidden_act"].dump(), " is not supported (only \"silu\")");

  // transformers 5 writes "dtype"; 4.x writes "torch_dtype".
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (j.contains(key) && !j[key].is_null()) {
      if (!j[key].is_string()) fail(source, ": field '", key, "' must be a string, got ", j[key].dump());
      c.torch_dtype = j[key].get<std::string>();
      break;
    }
  }
  c.bos_token_id = optional_int(j, "bos_token_id", -1, source);
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    const json& e = j["eos_token_id"];
    if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int64_t>());
    else if (e.is_array()) {
      for (const json& id : e) {
        if (!id.is_number_integer()) fail(source, ": eos_token_id list holds a non-integer ", id.dump());
        c.eos_token_ids.push_back(id.get<int64_t>());
      }
    } else {
      fail(source, ": eos_token_id must be an integer or a list of integers, got ", e.dump());
    }
  }
  validate_config(c, source);
  return c;
}

QwenConfig read_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path, ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  return parse_config_json(text.str(), path);
}

std::string config_to_json(const QwenConfig& c) {
  json j = json::object();
  j["architectures"] = {arch_name(c.arch)};
  j["model_type"] = arch_model_type(c.arch);
  if (c.arch == QwenArch::Qwen3) j["attention_bias"] = c.attention_bias;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = c.bos_token_id >= 0 ? json(c.bos_token_id) : json(nullptr);
  if (c.eos_token_ids.empty()) j["eos_token_id"] = nullptr;
  else if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else j["eos_token_id"] = c.eos_token_ids;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["max_window_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_scaling"] = nullptr;
  j["rope_theta"] = c.rope_theta;
  j["sliding_window"] = nullptr;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = c.torch_dtype;
  j["use_cache"] = true;
  j["use_sliding_window"] = false;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

// Values from the published config.json of Qwen/Qwen3-{0.6B,1.7B,4B,8B} and
// Qwen/Qwen2.5-Coder-{3B,7B,14B}-Instruct.
static QwenConfig make_preset(QwenArch arch, int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads,
                              int64_t kv_heads, bool tied, int64_t max_pos, double eps, int64_t eos) {
  QwenConfig c;
  c.arch = arch;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 128;  // every model listed here: Qwen3 sets 128, Qwen2.5 hidden/heads = 128
  c.rms_norm_eps = eps;
  c.rope_theta = 1000000.0;
  c.max_position_embeddings = max_pos;
  c.tie_word_embeddings = tied;
  c.attention_bias = false;
  c.torch_dtype = "bfloat16";
  c.bos_token_id = 151643;
  c.eos_token_ids = {eos};
  return c;
}

std::vector<std::string> preset_names() {
  return {"qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen2.5-coder-3b", "qwen2.5-coder-7b", "qwen2.5-coder-14b"};
}

QwenConfig preset_config(const std::string& name) {
  const QwenArch q3 = QwenArch::Qwen3, q2 = QwenArch::Qwen2;
  if (name == "qwen3-0.6b") return make_preset(q3, 151936, 1024, 3072, 28, 16, 8, true, 40960, 1e-6, 151645);
  if (name == "qwen3-1.7b") return make_preset(q3, 151936, 2048, 6144, 28, 16, 8, true, 40960, 1e-6, 151645);
  if (name == "qwen3-4b") return make_preset(q3, 151936, 2560, 9728, 36, 32, 8, true, 40960, 1e-6, 151645);
  if (name == "qwen3-8b") return make_preset(q3, 151936, 4096, 12288, 36, 32, 8, false, 40960, 1e-6, 151645);
  if (name == "qwen2.5-coder-3b") return make_preset(q2, 151936, 2048, 11008, 36, 16, 2, true, 32768, 1e-6, 151645);
  if (name == "qwen2.5-coder-7b") return make_preset(q2, 152064, 3584, 18944, 28, 28, 4, false, 32768, 1e-6, 151645);
  if (name == "qwen2.5-coder-14b") return make_preset(q2, 152064, 5120, 13824, 48, 40, 8, false, 32768, 1e-5, 151645);
  std::string known;
  for (const std::string& n : preset_names()) known += " " + n;
  fail("unknown preset '", name, "' (known:", known, ")");
}

std::string describe_config(const QwenConfig& c) {
  std::ostringstream out;
  out << "architecture      : " << arch_name(c.arch) << "\n"
      << "vocab_size        : " << c.vocab_size << "\n"
      << "hidden_size       : " << c.hidden_size << "\n"
      << "intermediate_size : " << c.intermediate_size << "\n"
      << "layers            : " << c.num_hidden_layers << "\n"
      << "heads (q / kv)    : " << c.num_attention_heads << " / " << c.num_key_value_heads << ", head_dim "
      << c.head_dim << "\n"
      << "rms_norm_eps      : " << c.rms_norm_eps << "\n"
      << "rope_theta        : " << c.rope_theta << "\n"
      << "max_positions     : " << c.max_position_embeddings << "\n"
      << "tied embeddings   : " << (c.tie_word_embeddings ? "yes" : "no") << "\n"
      << "biases            : " << (c.has_o_bias() ? "q, k, v, o" : c.has_qkv_bias() ? "q, k, v" : "none") << "\n"
      << "q/k norm          : " << (c.has_qk_norm() ? "yes" : "no") << "\n"
      << "torch_dtype       : " << c.torch_dtype << "\n"
      << "bos / eos         : " << c.bos_token_id << " /";
  for (int64_t id : c.eos_token_ids) out << " " << id;
  out << "\n";
  for (const std::string& note : c.inferred) out << "inferred          : " << note << "\n";
  return out.str();
}

}  // namespace sqlrl

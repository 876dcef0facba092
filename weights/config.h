// Qwen2 / Qwen3 model configuration as Hugging Face writes it in config.json.
// Missing optional fields take the defaults transformers' Qwen2Config / Qwen3Config give them,
// so a config means here what it means there. Features we do not implement (rope_scaling,
// sliding-window attention, activations other than SiLU) are refused by name, not ignored.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sqlrl {

enum class QwenArch : uint8_t { Qwen2, Qwen3 };

struct QwenConfig {
  QwenArch arch = QwenArch::Qwen3;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 32768;
  bool tie_word_embeddings = false;
  // Qwen3: bias on q, k, v and o projections when set. Qwen2 always has q/k/v biases and no o
  // bias, whatever this says (its config has no such field).
  bool attention_bias = false;
  std::string torch_dtype = "bfloat16";
  int64_t bos_token_id = -1;  // -1: absent / null
  std::vector<int64_t> eos_token_ids;
  // How each field not read from a config.json was obtained ("hidden_size = 64 from
  // model.embed_tokens.weight [256, 64]"); empty for a parsed or preset config.
  std::vector<std::string> inferred;

  bool has_qkv_bias() const { return arch == QwenArch::Qwen2 || attention_bias; }
  bool has_o_bias() const { return arch == QwenArch::Qwen3 && attention_bias; }
  bool has_qk_norm() const { return arch == QwenArch::Qwen3; }
  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
};

const char* arch_name(QwenArch arch);        // "Qwen3ForCausalLM"
const char* arch_model_type(QwenArch arch);  // "qwen3"

// Checks the relations the model relies on (positive sizes, heads divide into kv groups, ...).
// `source` names where the config came from in the error.
void validate_config(const QwenConfig& config, const std::string& source);

// Parses config.json text; `source` (the file name) prefixes every error.
QwenConfig parse_config_json(const std::string& text, const std::string& source);
QwenConfig read_config_file(const std::string& path);
// The config.json transformers' from_pretrained reads back into the same model.
std::string config_to_json(const QwenConfig& config);

// Published configurations: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen2.5-coder-3b,
// qwen2.5-coder-7b, qwen2.5-coder-14b (the instruct checkpoints' config.json values).
QwenConfig preset_config(const std::string& name);
std::vector<std::string> preset_names();

std::string describe_config(const QwenConfig& config);  // multi-line, for `inspect`

}  // namespace sqlrl

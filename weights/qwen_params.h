// The parameters a Qwen2/Qwen3 causal LM has, as data: Hugging Face name, our short name,
// shape. The model's parameter table is built from this list; loading checks a checkpoint
// against it and reports every missing, unexpected or mis-shaped tensor by name and shape.
//
//   model.embed_tokens.weight                      embed          [vocab, hidden]
//   model.layers.{i}.input_layernorm.weight        L{i}.attn_norm [hidden]
//   model.layers.{i}.self_attn.q_proj.weight       L{i}.wq        [heads*head_dim, hidden]
//   model.layers.{i}.self_attn.q_proj.bias         L{i}.bq        [heads*head_dim]    Qwen2 / attention_bias
//   model.layers.{i}.self_attn.k_proj.weight|bias  L{i}.wk|bk     [kv_heads*head_dim, hidden]
//   model.layers.{i}.self_attn.v_proj.weight|bias  L{i}.wv|bv     [kv_heads*head_dim, hidden]
//   model.layers.{i}.self_attn.o_proj.weight       L{i}.wo        [hidden, heads*head_dim]
//   model.layers.{i}.self_attn.o_proj.bias         L{i}.bo        [hidden]            Qwen3 attention_bias
//   model.layers.{i}.self_attn.q_norm.weight       L{i}.q_norm    [head_dim]          Qwen3
//   model.layers.{i}.self_attn.k_norm.weight       L{i}.k_norm    [head_dim]          Qwen3
//   model.layers.{i}.post_attention_layernorm.weight L{i}.mlp_norm [hidden]
//   model.layers.{i}.mlp.gate_proj.weight          L{i}.w_gate    [intermediate, hidden]
//   model.layers.{i}.mlp.up_proj.weight            L{i}.w_up      [intermediate, hidden]
//   model.layers.{i}.mlp.down_proj.weight          L{i}.w_down    [hidden, intermediate]
//   model.norm.weight                              final_norm     [hidden]
//   lm_head.weight                                 lm_head        [vocab, hidden]     untied only
#pragma once
#include <string>
#include <vector>

#include "weights/checkpoint.h"
#include "weights/config.h"

namespace sqlrl {

struct ParamSpec {
  std::string hf_name;
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

std::vector<ParamSpec> qwen_parameters(const QwenConfig& config);
std::string shape_str(const std::vector<int64_t>& shape);  // "[64, 32]"
int64_t count_parameters(const std::vector<ParamSpec>& specs);

// Tensors a checkpoint may carry that the model does not need: transformers drops them on load
// too (lm_head.weight with tied embeddings, rotary inv_freq buffers of old exports).
bool is_ignorable_tensor(const std::string& hf_name, const QwenConfig& config);

struct CheckReport {
  std::vector<std::string> missing;     // "model.norm.weight [64]"
  std::vector<std::string> unexpected;  // "model.layers.2.mlp.up_proj.weight F32 [128, 64]"
  std::vector<std::string> mismatched;  // "... expected [64, 64], file has [64, 32]"
  std::vector<std::string> ignored;
  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  std::string str() const;  // one line per finding
};

CheckReport check_checkpoint(const Checkpoint& checkpoint, const std::vector<ParamSpec>& specs, const QwenConfig& config);

// Derives a config from tensor shapes (no config.json): sizes from embed_tokens, q/k/v/o and
// MLP shapes; Qwen3 if q_norm exists (its length is head_dim), Qwen2 otherwise; heads and the
// remaining constants from the matching preset when one matches, else from Qwen defaults.
// Every inferred value is noted in config.inferred.
QwenConfig infer_config(const Checkpoint& checkpoint);

struct LoadedParam {
  ParamSpec spec;
  Tensor tensor;
};

// Checks the checkpoint (any finding is an error listing them all) and converts every parameter
// into `dtype` on `device`, in the order of qwen_parameters(config).
std::vector<LoadedParam> load_qwen_weights(const Checkpoint& checkpoint, const QwenConfig& config, DType dtype,
                                           Device device);

// Records for saving loaded parameters back under their Hugging Face names.
std::vector<TensorRecord> records_of(const std::vector<LoadedParam>& params, std::vector<Tensor>& holder);

}  // namespace sqlrl

// A Qwen2/Qwen3 causal LM on the CPU, llm.c style: every parameter lives in ONE contiguous f32
// buffer, described by a table of named views (the order of weights/qwen_params.h); gradients
// live in a second buffer with the same table, so optimizers, all-reduce and checkpoints work
// on offsets. LayerWeights binds the views of one layer to pointers into either buffer.
// With tied embeddings there is no lm_head view: the output projection reads (and its gradient
// adds into) the embedding.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "weights/config.h"
#include "weights/qwen_params.h"

namespace sqlrl {

struct ParamView {
  ParamSpec spec;      // HF name, short name, shape
  int64_t offset = 0;  // floats from the start of the buffer
};

// Pointers to one layer's tensors in a buffer laid out by the table (null when the
// architecture has no such tensor: biases, q/k norms).
struct LayerWeights {
  float* attn_norm = nullptr;
  float *wq = nullptr, *bq = nullptr, *wk = nullptr, *bk = nullptr, *wv = nullptr, *bv = nullptr;
  float *wo = nullptr, *bo = nullptr;
  float *q_norm = nullptr, *k_norm = nullptr;
  float* mlp_norm = nullptr;
  float *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;
};

struct ModelWeights {
  float* embed = nullptr;
  std::vector<LayerWeights> layers;
  float* final_norm = nullptr;
  float* lm_head = nullptr;  // == embed when tied
};

struct QwenModel {
  QwenConfig config;
  std::vector<ParamView> table;
  int64_t num_params = 0;
  std::vector<float> params;
  std::vector<float> grads;  // empty until alloc_grads()

  ModelWeights weights() { return bind_weights(*this, params.data()); }
  ModelWeights grad_weights() { return bind_weights(*this, grads.data()); }
  static ModelWeights bind_weights(const QwenModel& model, float* base);
};

// A model with every parameter zero (the caller fills params).
QwenModel make_model(const QwenConfig& config);
// A fresh model's weights, as transformers initialises one: norm scales 1, every other tensor
// N(0, stddev) from Philox (seed, stream = the tensor's index among the non-norm tensors in
// table order), so the numbers are the same on every machine.
void init_random_weights(QwenModel& model, uint64_t seed, float stddev);
// From a Hugging Face checkpoint (file or folder); bf16/f16 weights are widened to f32.
QwenModel load_model(const std::string& path);
// config.json + model.safetensors (f32) in `folder`, loadable by transformers.
void save_model(const QwenModel& model, const std::string& folder);

const ParamView& find_param(const QwenModel& model, const std::string& hf_name);  // throws naming the tensor
void alloc_grads(QwenModel& model);  // sized like params, zeroed
void zero_grads(QwenModel& model);

}  // namespace sqlrl

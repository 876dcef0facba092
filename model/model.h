// A Qwen2/Qwen3 causal LM on the CPU, llm.c style: every parameter lives in ONE contiguous f32
// buffer, described by a table of named views (the order of weights/qwen_params.h); gradients
// live in a second buffer with the same table, so optimizers, all-reduce and checkpoints work
// on offsets. LayerWeights binds the views of one layer to pointers into either buffer.
// With tied embeddings there is no lm_head view: the output projection reads (and its gradient
// adds into) the embedding.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/error.h"
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

// Which field of ModelWeights / LayerWeights a table entry binds (layer -1: a model-level
// tensor), parsed from its short name once for every binding (host f32, device bf16 views).
enum class WeightField : uint8_t {
  embed, final_norm, lm_head, attn_norm, wq, bq, wk, bk, wv, bv, wo, bo, q_norm, k_norm, mlp_norm, w_gate, w_up, w_down
};
struct WeightSlot {
  int64_t layer = -1;
  WeightField field = WeightField::embed;
};
WeightSlot weight_slot(const std::string& name, int64_t num_layers);

template <class Layer, class P>
P* layer_field(Layer& l, WeightField f) {
  switch (f) {
    case WeightField::attn_norm: return &l.attn_norm;
    case WeightField::wq: return &l.wq;
    case WeightField::bq: return &l.bq;
    case WeightField::wk: return &l.wk;
    case WeightField::bk: return &l.bk;
    case WeightField::wv: return &l.wv;
    case WeightField::bv: return &l.bv;
    case WeightField::wo: return &l.wo;
    case WeightField::bo: return &l.bo;
    case WeightField::q_norm: return &l.q_norm;
    case WeightField::k_norm: return &l.k_norm;
    case WeightField::mlp_norm: return &l.mlp_norm;
    case WeightField::w_gate: return &l.w_gate;
    case WeightField::w_up: return &l.w_up;
    case WeightField::w_down: return &l.w_down;
    default: return nullptr;
  }
}

struct QwenModel;
// Views of every table entry at base + offset, in any struct shaped like ModelWeights (embed,
// layers[], final_norm, lm_head) over any element type: the host f32 buffers and the device
// bf16 copy (model/cuda_layers.h CudaWeights) bind through this one function.
template <class Weights, class T>
Weights bind_views(const QwenModel& model, T* base);

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
// A NaN or Inf weight (a checkpoint saved after a diverged step, a corrupt file) would train and
// evaluate silently into NaN log-probs: refused on load, naming the file and the tensor.
void check_finite_tensor(const std::string& path, const std::string& name, const float* p, int64_t n);
// config.json + model.safetensors in `folder`, loadable by transformers: f32 (the training
// checkpoints: exactly the parameters), or bf16 / f16 (rounded to nearest even; torch_dtype says so).
void save_model(const QwenModel& model, const std::string& folder, DType dtype = DType::F32);
// The files save_model(model, folder, dtype) writes after init_random_weights(model, seed, stddev),
// byte for byte, without the model: each tensor is drawn on the thread pool straight into the
// writer's buffers in `dtype` (weights/safetensors.h TensorRecord::generate) while the previous
// buffer goes to disk, so the bytes do not depend on the thread count, nothing the size of the model
// is held, and the time is about the disk's (llm_sqlrl init of Qwen3-4B: 8 GB of bf16).
// on_written(bytes): tensor bytes written since the last call (progress).
void save_random_model(const QwenConfig& config, const std::string& folder, uint64_t seed, float stddev, DType dtype,
                       const std::function<void(uint64_t)>& on_written = {});

const ParamView& find_param(const QwenModel& model, const std::string& hf_name);  // throws naming the tensor
void alloc_grads(QwenModel& model);  // sized like params, zeroed
void zero_grads(QwenModel& model);

template <class Weights, class T>
Weights bind_views(const QwenModel& model, T* base) {
  Weights w;
  const int64_t L = model.config.num_hidden_layers;
  w.layers.resize(static_cast<size_t>(L));
  for (const ParamView& view : model.table) {
    T* p = base + view.offset;
    WeightSlot s = weight_slot(view.spec.name, L);
    if (s.field == WeightField::embed) w.embed = p;
    else if (s.field == WeightField::final_norm) w.final_norm = p;
    else if (s.field == WeightField::lm_head) w.lm_head = p;
    else *layer_field<decltype(w.layers[0]), T*>(w.layers[s.layer], s.field) = p;
  }
  if (model.config.tie_word_embeddings) w.lm_head = w.embed;
  check(w.embed && w.final_norm && w.lm_head, "model: parameter table lacks embed, final_norm or lm_head");
  return w;
}

}  // namespace sqlrl

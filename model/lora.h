// LoRA adapters (Hu et al. 2021) on the seven linear projections of a Qwen layer, in Hugging Face
// PEFT's file format and with PEFT's semantics (peft 0.17.1, tuners/lora):
//
//   adapter_config.json         r, lora_alpha, lora_dropout, target_modules, use_rslora, ...
//   adapter_model.safetensors   base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight [r, in]
//                               base_model.model.model.layers.{i}.self_attn.q_proj.lora_B.weight [out, r]
//                               ... for every adapted (layer, projection)
//
// An adapted projection computes y = x W^T (+ b) + scale * (x A^T) B^T, scale = alpha / r, or
// alpha / sqrt(r) with rsLoRA; merging folds it into the base: W += scale * B A.
//
// As QwenModel does for the base, an adapter keeps every A and B in ONE contiguous f32 buffer
// described by a table of named views, so the later trainer can run AdamW, the gradient norm,
// all-reduce and checkpoints on offsets of `params` (and of a grads buffer with the same table),
// while the base model stays frozen and needs neither gradients nor moments. LoraWeights binds
// the views of either buffer to per-layer pointers (null where a projection is not adapted).
//
// The adapter is passed to the forward as an optional argument, not stored in QwenModel: the
// same base then runs with the adapter (the policy) and without it (GRPO's KL reference, which
// for LoRA is the base itself) at no extra memory, and a copied or moved QwenModel never carries
// a pointer to an adapter it does not own. Without an adapter the forward is unchanged, bit for bit.
//
// Only what changes a forward's result is checked and anything PEFT would compute differently is
// refused by name (bias, DoRA, modules_to_save, rank/alpha patterns, layer subsets, LoRA on the
// embedding or lm_head, unknown options); lora_dropout is read and kept but acts only in
// training, as in PEFT (every forward here is eval mode), and the backward refuses a non-zero one.
//
// Training (model/train.h backward_logprobs with an adapter) differentiates the adapter only: its
// gradients go to LoraAdapter::grads and the base model's weights are frozen, so a LoRA run
// allocates no base gradients and no base AdamW moments.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"

namespace sqlrl {

// The projections LoRA adapts here, named as PEFT names their modules.
enum class LoraModule : uint8_t { q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj };
constexpr int kLoraModules = 7;
const char* lora_module_name(LoraModule m);                 // "q_proj"
std::string lora_module_path(int64_t layer, LoraModule m);  // "model.layers.3.self_attn.q_proj"
// {in_features, out_features} of the projection in this model.
std::array<int64_t, 2> lora_module_dims(const QwenConfig& config, LoraModule m);

struct LoraConfig {
  int64_t rank = 8;     // r
  double alpha = 8;     // lora_alpha
  double dropout = 0;   // lora_dropout (training only)
  // PEFT's target_modules has two forms. A list: a module is adapted when its full name
  // ("model.layers.0.self_attn.q_proj") equals an entry or ends with "." + entry. A string:
  // "all-linear" (every projection, never lm_head) or a regex the full name must match
  // (std::regex ECMAScript, which agrees with Python's re on the usual patterns; a pattern read
  // differently is still caught, as the file's tensors must be exactly the targeted ones).
  // Exactly one of the two is set.
  std::vector<std::string> target_modules;
  std::string target_pattern;
  bool use_rslora = false;
  std::string base_model;  // base_model_name_or_path: written back on save, never checked
};

// PEFT's scaling: alpha / r, or alpha / sqrt(r) with use_rslora.
float lora_scale(const LoraConfig& config);
// adapted[layer][module] for this model. An entry (or the pattern) that matches no projection,
// or that matches lm_head or the embedding, is an error naming it; `source` (a file) prefixes errors.
std::vector<std::array<bool, kLoraModules>> lora_targets(const LoraConfig& config, const QwenConfig& model,
                                                         const std::string& source = "LoRA");

// adapter_config.json text <-> LoraConfig; `source` prefixes every error.
LoraConfig parse_lora_config_json(const std::string& text, const std::string& source);
std::string lora_config_to_json(const LoraConfig& config);

struct LoraView {
  std::string hf_name;         // PEFT's: base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight
  std::vector<int64_t> shape;  // A [r, in_features], B [out_features, r]
  int64_t offset = 0;          // floats from the start of the buffer
  int64_t layer = 0;
  LoraModule module = LoraModule::q_proj;
  bool is_b = false;
  int64_t numel() const { return shape[0] * shape[1]; }
};

// One layer's A and B of each projection, indexed by LoraModule; null when not adapted.
struct LoraLayerWeights {
  std::array<float*, kLoraModules> a{}, b{};
};
struct LoraWeights {
  std::vector<LoraLayerWeights> layers;
  int64_t rank = 0;
  float scale = 0;
};

struct LoraAdapter {
  LoraConfig config;
  QwenConfig model;  // the base model the table was laid out for
  std::vector<LoraView> table;  // by layer, then q k v o gate up down, A before B
  int64_t num_params = 0;
  std::vector<float> params;
  std::vector<float> grads;  // empty until alloc_lora_grads(); the same table as params
};

// An adapter with every A and B zero, laid out for `model` (the caller fills params).
LoraAdapter make_adapter(const LoraConfig& config, const QwenConfig& model, const std::string& source = "LoRA");
// The floats make_adapter's params hold (and alloc_lora_grads' grads), without allocating them.
int64_t lora_num_params(const LoraConfig& config, const QwenConfig& model);
void alloc_lora_grads(LoraAdapter& adapter);  // sized like params, zeroed
void zero_lora_grads(LoraAdapter& adapter);
// Views of the table at base + offset: `params`, or later a gradient buffer of num_params floats.
LoraWeights bind_lora(const LoraAdapter& adapter, float* base);
// PEFT's default init (init_lora_weights = true): A ~ kaiming_uniform(a = sqrt(5)), i.e.
// U(-1/sqrt(in), 1/sqrt(in)), B = 0, so a fresh adapter leaves the model's outputs unchanged.
// A draws from Philox (seed, stream = the A's index among the table's A views): the same numbers
// on every machine.
LoraAdapter init_adapter(const LoraConfig& config, const QwenConfig& model, uint64_t seed);

// Reads `dir`/adapter_config.json and `dir`/adapter_model.safetensors (bf16, f16, f32 or f64
// tensors), checking every tensor against the targets and the model's shapes; the errors name
// the file, the tensor and the shapes.
LoraAdapter load_adapter(const std::string& dir, const QwenModel& model);
// Writes the same two files (f32 tensors, PEFT's names) into `dir`, created if missing.
void save_adapter(const LoraAdapter& adapter, const std::string& dir);

// The base weight [out, in] that projection m adapts, in a layer's views of either buffer
// (model.weights() or model.grad_weights()).
float* lora_base_weight(const LayerWeights& w, LoraModule m);
// Throws, naming `who`, unless the adapter was laid out for a model of this shape.
void check_adapter_fits(const LoraAdapter& adapter, const QwenConfig& model, const char* who);
// W += scale * B A for every adapted projection (PEFT's merge_and_unload); the base then
// computes what base + adapter did, and runs without it.
void merge_adapter(QwenModel& model, const LoraAdapter& adapter);

// What a forward over T tokens needs: the adapter's bound weights and a [T, rank] scratch.
struct LoraForward {
  LoraWeights weights;
  std::vector<float> scratch;
  // Batch-invariant (model/infer.h forward_cached): both products by matmul_forward_rows_cpu,
  // whose bits for a token do not depend on the other tokens of the call, B's into `added` first.
  bool rows_kernel = false;
  std::vector<float> added;
};
LoraForward lora_forward_state(const LoraAdapter& adapter, const QwenConfig& model, int64_t tokens, const char* who);
// out[T, out_features] += scale * (x[T, in_features] A^T) B^T for projection m of `layer`; a
// no-op when lora is null or the projection is not adapted. The existing GEMMs: A's product by
// matmul_forward_cpu, B's added into `out` by sgemm with beta = 1 (rows_kernel: see LoraForward).
void lora_add_cpu(LoraForward* lora, int64_t layer, LoraModule m, float* out, const float* x, int64_t tokens,
                  int64_t in_features, int64_t out_features);

// What a backward over T tokens needs: the forward's state (recomputed layers re-run the forward
// with it), the gradient views and du. Each adapted projection recomputes its u = x A^T in the
// backward instead of keeping one [T, rank] per projection from the forward: 2 T in r flops, under
// half the adapter's own backward (4 T (in + out) r) and r / out of the base's dx product, for no
// adapter-shaped storage in TrainState.
struct LoraBackward {
  LoraForward forward;      // weights, and u [T, rank] in its scratch
  LoraWeights grads;        // views of adapter.grads
  std::vector<float> du;    // [T, rank]
};
// The floats lora_backward_state allocates for T tokens (u and du), what a train step holds at
// its peak beyond TrainState (the forward alone holds u only); model/memory_plan prices it.
int64_t lora_backward_scratch_floats(const LoraConfig& config, int64_t tokens);
// Throws, naming `who`, unless adapter.grads is allocated and lora_dropout is 0: dropout acts on
// the adapter's input in PEFT's training mode, which the training path here does not implement.
LoraBackward lora_backward_state(LoraAdapter& adapter, const QwenConfig& model, int64_t tokens, const char* who);
// The backward of lora_add_cpu for projection m of `layer` (y = x W^T + scale * (x A^T) B^T),
// given dy = d(loss)/dy [T, out]: with u = x A^T and du = scale * dy B,
//   dB[out, r] += scale * dy^T u,   dA[r, in] += du^T x,   dx[T, in] += du A
// (dx, nullable, the input's gradient, to which the base's dy W was or will be added). A no-op
// when lora is null or the projection is not adapted.
void lora_backward_cpu(LoraBackward* lora, int64_t layer, LoraModule m, float* dx, const float* dy, const float* x,
                       int64_t tokens, int64_t in_features, int64_t out_features);

}  // namespace sqlrl

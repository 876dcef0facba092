// Training forward and backward over a packed varlen batch (no padding; causal within each
// sequence), written out per layer as llm.c does. Activation memory is planned once for
// max_tokens (TrainState); a layer marked for recomputation keeps only its input and re-runs
// its forward inside the backward (gradient checkpointing), all such layers sharing one slot.
#pragma once
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace sqlrl {

struct LoraAdapter;  // model/lora.h

struct PackedBatch {
  std::vector<int32_t> tokens;      // [T]
  std::vector<int32_t> positions;   // [T], restarting at 0 in each sequence (at prefix_len if it has one)
  std::vector<int32_t> cu_seqlens;  // [num_seqs + 1], starting at 0, ending at T
  // Shared prefixes (kernels/attention.h SharedPrefixes; CPU and CUDA): empty, or [num_seqs] each:
  // sequence s continues the first prefix_len[s] tokens of sequence prefix_seq[s] (-1: none).
  std::vector<int32_t> prefix_seq, prefix_len;
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(cu_seqlens.size()) - 1; }
  bool has_prefixes() const { return !prefix_seq.empty(); }
};

PackedBatch pack_sequences(const std::vector<std::vector<int32_t>>& sequences);

// A sequence to pack that continues the first `shared` tokens of an earlier one: it stores only
// tokens [shared, end) (positions from `shared`). source = -1: a plain sequence.
struct PackItem {
  const std::vector<int32_t>* tokens = nullptr;
  int64_t end = 0;       // tokens [0, end) are the sequence
  int64_t source = -1;   // index of an earlier item (itself plain) whose first `shared` tokens these are
  int64_t shared = 0;
};
PackedBatch pack_with_prefixes(const std::vector<PackItem>& items);
void validate_batch(const PackedBatch& batch, int64_t max_tokens, int64_t vocab);

struct TrainOptions {
  int64_t max_tokens = 0;
  int64_t logprob_chunk = 128;  // tokens per lm_head chunk of the fused log-prob
  std::vector<bool> recompute;  // per layer; empty = store everything
};

// One layer's saved activations (pointers into TrainState::layer_storage).
struct LayerActs {
  float *ln1 = nullptr, *rstd1 = nullptr;
  float *q_raw = nullptr, *k_raw = nullptr, *q_rstd = nullptr, *k_rstd = nullptr;  // Qwen3 q/k norm inputs
  float *q = nullptr, *k = nullptr, *v = nullptr, *att = nullptr, *lse = nullptr;
  float *resid_mid = nullptr, *ln2 = nullptr, *rstd2 = nullptr;
  float *gate = nullptr, *up = nullptr, *h = nullptr;
};

struct TrainState {
  QwenConfig config;
  TrainOptions options;
  std::vector<float> resid;          // [(layers + 1), max_tokens, hidden]: each layer's input, then the last output
  std::vector<float> layer_storage;  // one slot per stored layer, plus one shared by recomputed layers
  std::vector<LayerActs> layer_acts;
  std::vector<float> lnf, rstdf, vocab_lse, logits_scratch;
  float logit_scale = 1.0f;  // of the last log-prob forward: vocab_lse belongs to it, the backward uses it
  // The LoRA adapter the last forward ran with (null: none): the backward must get the same one,
  // as the activations it differentiates are those of the base plus that adapter.
  const LoraAdapter* lora = nullptr;
  // backward scratch
  std::vector<float> dresid, dln, datt, dq, dk, dv, dq_raw, dk_raw, dh, dgate, dup;
  int64_t num_floats() const;  // activation + scratch memory, for reports
};

TrainState make_train_state(const QwenConfig& config, const TrainOptions& options);
// The floats make_train_state allocates (what model/memory_plan.h prices on the CPU).
int64_t train_state_floats(const QwenConfig& config, const TrainOptions& options);

// Every forward takes an optional LoRA adapter (model/lora.h; null: the base model alone, bit for
// bit as without the argument): its projections then add their low-rank terms, unmerged.
// Runs the layers and the final norm (state.lnf holds the normalised last hidden states).
void forward_hidden(const QwenModel& model, TrainState& state, const PackedBatch& batch,
                    const LoraAdapter* lora = nullptr);
// Full logits [T, vocab] (inference and tests; training uses forward_logprobs).
void forward_logits(const QwenModel& model, TrainState& state, const PackedBatch& batch, float* logits,
                    const LoraAdapter* lora = nullptr);
// logprobs[t] = log p(targets[t] | tokens up to t), via the fused chunked lm_head; entropy[t]
// (nullable) = -sum_v p log p of the same softmax row (logprobs are the same bits either way).
// p = softmax(logit_scale * logits): 1 / temperature gives the policy that sampled at that
// temperature; backward_logprobs differentiates the same scaled softmax.
void forward_logprobs(const QwenModel& model, TrainState& state, const PackedBatch& batch,
                      const std::vector<int32_t>& targets, float* logprobs, float* entropy = nullptr,
                      float logit_scale = 1.0f, const LoraAdapter* lora = nullptr);
// As forward_logprobs for the rows with mask[t] != 0; the others get logprob 0 and are not run
// through the lm_head. backward_logprobs after it is exact as long as those rows' dlogprobs are 0.
void forward_logprobs_masked(const QwenModel& model, TrainState& state, const PackedBatch& batch,
                             const std::vector<int32_t>& targets, const uint8_t* mask, float* logprobs,
                             const LoraAdapter* lora = nullptr);
// After forward_logprobs on the same batch: adds d(sum_t dlogprobs[t] logprob_t + dentropy[t]
// entropy_t)/d(param) into model.grads (allocated by the caller). dentropy (nullable) needs
// `entropy`, what that forward wrote (the state keeps no copy of it).
// With `lora` (the adapter that forward ran with; its grads allocated by alloc_lora_grads) the
// base is frozen: the gradients of the adapter's A and B add into lora->grads, model.grads is
// neither needed nor touched, and no base weight's gradient is computed (only the products that
// carry d(loss) down to the adapters). lora_dropout > 0 is refused.
void backward_logprobs(QwenModel& model, TrainState& state, const PackedBatch& batch,
                       const std::vector<int32_t>& targets, const float* dlogprobs, const float* dentropy = nullptr,
                       const float* entropy = nullptr, LoraAdapter* lora = nullptr);

}  // namespace sqlrl

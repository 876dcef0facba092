#include "model/train.h"

#include <algorithm>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/logprob.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "model/lora.h"
#include "runtime/error.h"

namespace sqlrl {

PackedBatch pack_sequences(const std::vector<std::vector<int32_t>>& sequences) {
  PackedBatch batch;
  batch.cu_seqlens.push_back(0);
  for (const auto& seq : sequences) {
    for (size_t i = 0; i < seq.size(); ++i) {
      batch.tokens.push_back(seq[i]);
      batch.positions.push_back(static_cast<int32_t>(i));
    }
    batch.cu_seqlens.push_back(static_cast<int32_t>(batch.tokens.size()));
  }
  return batch;
}

PackedBatch pack_with_prefixes(const std::vector<PackItem>& items) {
  PackedBatch batch;
  batch.cu_seqlens.push_back(0);
  bool any = false;
  for (size_t i = 0; i < items.size(); ++i) {
    const PackItem& it = items[i];
    const int64_t skip = it.source >= 0 ? it.shared : 0;
    check(it.source < static_cast<int64_t>(i) && (it.source < 0 || items[it.source].source < 0),
          "pack: item ", i, " shares a prefix with item ", it.source, ", which is not an earlier plain item");
    check(skip >= 0 && skip <= it.end && it.end <= static_cast<int64_t>(it.tokens->size()) &&
              (it.source < 0 || (skip >= 1 && skip <= items[it.source].end)),
          "pack: item ", i, " shares ", skip, " tokens and ends at ", it.end, " of ", it.tokens->size());
    for (int64_t t = skip; t < it.end; ++t) {
      batch.tokens.push_back((*it.tokens)[t]);
      batch.positions.push_back(static_cast<int32_t>(t));
    }
    batch.cu_seqlens.push_back(static_cast<int32_t>(batch.tokens.size()));
    batch.prefix_seq.push_back(static_cast<int32_t>(it.source >= 0 ? it.source : -1));
    batch.prefix_len.push_back(static_cast<int32_t>(skip));
    any = any || it.source >= 0;
  }
  if (!any) batch.prefix_seq.clear(), batch.prefix_len.clear();
  return batch;
}

void validate_batch(const PackedBatch& batch, int64_t max_tokens, int64_t vocab) {
  int64_t T = batch.num_tokens();
  check(batch.positions.size() == batch.tokens.size(), "batch: ", batch.positions.size(), " positions for ", T,
        " tokens");
  check(T <= max_tokens, "batch: ", T, " tokens exceed the planned max_tokens ", max_tokens);
  check(batch.cu_seqlens.size() >= 2 && batch.cu_seqlens.front() == 0 && batch.cu_seqlens.back() == T,
        "batch: cu_seqlens must run from 0 to ", T);
  for (size_t s = 0; s + 1 < batch.cu_seqlens.size(); ++s)
    check(batch.cu_seqlens[s] <= batch.cu_seqlens[s + 1], "batch: cu_seqlens decreases at sequence ", s);
  for (int64_t t = 0; t < T; ++t) {
    check(batch.tokens[t] >= 0 && batch.tokens[t] < vocab, "batch: token ", batch.tokens[t], " at ", t,
          " outside the vocabulary of ", vocab);
    check(batch.positions[t] >= 0, "batch: negative position at ", t);
  }
  if (batch.has_prefixes()) {
    const int64_t S = batch.num_seqs();
    check(static_cast<int64_t>(batch.prefix_seq.size()) == S && static_cast<int64_t>(batch.prefix_len.size()) == S,
          "batch: ", batch.prefix_seq.size(), " prefix entries and ", batch.prefix_len.size(), " prefix lengths for ", S,
          " sequences");
    for (int64_t s = 0; s < S; ++s) {
      const int32_t p = batch.prefix_seq[s];
      if (p < 0) continue;
      check(p < s && batch.prefix_seq[p] < 0, "batch: sequence ", s, " shares the prefix of sequence ", p,
            ", which is not an earlier sequence without a prefix");
      check(batch.prefix_len[s] >= 1 && batch.prefix_len[s] <= batch.cu_seqlens[p + 1] - batch.cu_seqlens[p],
            "batch: sequence ", s, " shares ", batch.prefix_len[s], " tokens of sequence ", p, ", which has ",
            batch.cu_seqlens[p + 1] - batch.cu_seqlens[p]);
      // The prefix holds positions 0..len-1, so the sharer's own tokens must start right after it.
      check(batch.cu_seqlens[s] == batch.cu_seqlens[s + 1] || batch.positions[batch.cu_seqlens[s]] == batch.prefix_len[s],
            "batch: sequence ", s, " starts at position ", batch.positions[batch.cu_seqlens[s]], " after a shared prefix of ",
            batch.prefix_len[s], " tokens");
    }
  }
}

namespace {

SharedPrefixes prefixes_of(const PackedBatch& batch) {
  if (!batch.has_prefixes()) return {};
  return {batch.prefix_seq.data(), batch.prefix_len.data()};
}

}  // namespace

namespace {

struct Dims {
  int64_t C, I, H, KVH, D, qd, kvd, V, L;
};

Dims dims_of(const QwenConfig& c) {
  return {c.hidden_size, c.intermediate_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
          c.q_dim(),     c.kv_dim(),          c.vocab_size,          c.num_hidden_layers};
}

// Floats one layer slot needs for T tokens, and the pointers into it.
int64_t layer_slot_floats(const Dims& d, int64_t T) {
  return T * (2 * d.C + 2 + 2 * d.qd + 2 * d.kvd + d.H + d.KVH + 2 * d.kvd + d.qd + d.H + d.C + d.C + 3 * d.I) +
         T * d.qd;
}

LayerActs carve_slot(const Dims& d, int64_t T, float* p) {
  LayerActs a;
  auto take = [&](int64_t n) {
    float* r = p;
    p += n;
    return r;
  };
  a.ln1 = take(T * d.C);
  a.rstd1 = take(T);
  a.q_raw = take(T * d.qd);
  a.k_raw = take(T * d.kvd);
  a.q_rstd = take(T * d.H);
  a.k_rstd = take(T * d.KVH);
  a.q = take(T * d.qd);
  a.k = take(T * d.kvd);
  a.v = take(T * d.kvd);
  a.att = take(T * d.qd);
  a.lse = take(T * d.H);
  a.resid_mid = take(T * d.C);
  a.ln2 = take(T * d.C);
  a.rstd2 = take(T);
  a.gate = take(T * d.I);
  a.up = take(T * d.I);
  a.h = take(T * d.I);
  return a;
}

// lora (null: none) adds each adapted projection's low-rank term to its output, before the q/k
// norms, the activation and the residual adds, where PEFT's wrapped Linear puts it.
void layer_forward(const QwenConfig& config, const LayerWeights& w, const float* x, float* out, const LayerActs& a,
                   const PackedBatch& batch, LoraForward* lora, int64_t layer) {
  Dims d = dims_of(config);
  int64_t T = batch.num_tokens();
  float eps = static_cast<float>(config.rms_norm_eps), theta = static_cast<float>(config.rope_theta);
  rmsnorm_forward_cpu(a.ln1, a.rstd1, x, w.attn_norm, T, d.C, eps);
  if (config.has_qk_norm()) {
    matmul_forward_cpu(a.q_raw, a.ln1, w.wq, w.bq, T, d.C, d.qd);
    lora_add_cpu(lora, layer, LoraModule::q_proj, a.q_raw, a.ln1, T, d.C, d.qd);
    matmul_forward_cpu(a.k_raw, a.ln1, w.wk, w.bk, T, d.C, d.kvd);
    lora_add_cpu(lora, layer, LoraModule::k_proj, a.k_raw, a.ln1, T, d.C, d.kvd);
    rmsnorm_forward_cpu(a.q, a.q_rstd, a.q_raw, w.q_norm, T * d.H, d.D, eps);
    rmsnorm_forward_cpu(a.k, a.k_rstd, a.k_raw, w.k_norm, T * d.KVH, d.D, eps);
  } else {
    matmul_forward_cpu(a.q, a.ln1, w.wq, w.bq, T, d.C, d.qd);
    lora_add_cpu(lora, layer, LoraModule::q_proj, a.q, a.ln1, T, d.C, d.qd);
    matmul_forward_cpu(a.k, a.ln1, w.wk, w.bk, T, d.C, d.kvd);
    lora_add_cpu(lora, layer, LoraModule::k_proj, a.k, a.ln1, T, d.C, d.kvd);
  }
  matmul_forward_cpu(a.v, a.ln1, w.wv, w.bv, T, d.C, d.kvd);
  lora_add_cpu(lora, layer, LoraModule::v_proj, a.v, a.ln1, T, d.C, d.kvd);
  rope_forward_cpu(a.q, batch.positions.data(), T, d.H, d.D, theta);
  rope_forward_cpu(a.k, batch.positions.data(), T, d.KVH, d.D, theta);
  attention_forward_cpu(a.att, a.lse, a.q, a.k, a.v, batch.cu_seqlens.data(), batch.num_seqs(), {d.H, d.KVH, d.D},
                        prefixes_of(batch));
  matmul_forward_cpu(a.resid_mid, a.att, w.wo, w.bo, T, d.qd, d.C);
  lora_add_cpu(lora, layer, LoraModule::o_proj, a.resid_mid, a.att, T, d.qd, d.C);
  for (int64_t i = 0; i < T * d.C; ++i) a.resid_mid[i] += x[i];
  rmsnorm_forward_cpu(a.ln2, a.rstd2, a.resid_mid, w.mlp_norm, T, d.C, eps);
  matmul_forward_cpu(a.gate, a.ln2, w.w_gate, nullptr, T, d.C, d.I);
  lora_add_cpu(lora, layer, LoraModule::gate_proj, a.gate, a.ln2, T, d.C, d.I);
  matmul_forward_cpu(a.up, a.ln2, w.w_up, nullptr, T, d.C, d.I);
  lora_add_cpu(lora, layer, LoraModule::up_proj, a.up, a.ln2, T, d.C, d.I);
  swiglu_forward_cpu(a.h, a.gate, a.up, T * d.I);
  matmul_forward_cpu(out, a.h, w.w_down, nullptr, T, d.I, d.C);
  lora_add_cpu(lora, layer, LoraModule::down_proj, out, a.h, T, d.I, d.C);
  for (int64_t i = 0; i < T * d.C; ++i) out[i] += a.resid_mid[i];
}

void zero(std::vector<float>& v, int64_t n) { std::fill(v.begin(), v.begin() + n, 0.0f); }

// dresid: in = d(layer output), out = d(layer input). Gradients add into g (null pointers: a
// frozen tensor, no gradient computed) and, through lora (null: none), into the adapter's.
void layer_backward(const QwenConfig& config, const LayerWeights& w, const LayerWeights& g, const float* x,
                    const LayerActs& a, const PackedBatch& batch, TrainState& s, LoraBackward* lora, int64_t layer) {
  Dims d = dims_of(config);
  int64_t T = batch.num_tokens();
  float theta = static_cast<float>(config.rope_theta);
  float* dresid = s.dresid.data();
  zero(s.dh, T * d.I);
  matmul_backward_cpu(s.dh.data(), g.w_down, nullptr, dresid, a.h, w.w_down, T, d.I, d.C);
  lora_backward_cpu(lora, layer, LoraModule::down_proj, s.dh.data(), dresid, a.h, T, d.I, d.C);
  swiglu_backward_cpu(s.dgate.data(), s.dup.data(), s.dh.data(), a.gate, a.up, T * d.I);
  zero(s.dln, T * d.C);
  matmul_backward_cpu(s.dln.data(), g.w_gate, nullptr, s.dgate.data(), a.ln2, w.w_gate, T, d.C, d.I);
  lora_backward_cpu(lora, layer, LoraModule::gate_proj, s.dln.data(), s.dgate.data(), a.ln2, T, d.C, d.I);
  matmul_backward_cpu(s.dln.data(), g.w_up, nullptr, s.dup.data(), a.ln2, w.w_up, T, d.C, d.I);
  lora_backward_cpu(lora, layer, LoraModule::up_proj, s.dln.data(), s.dup.data(), a.ln2, T, d.C, d.I);
  rmsnorm_backward_cpu(dresid, g.mlp_norm, s.dln.data(), a.resid_mid, w.mlp_norm, a.rstd2, T, d.C);

  zero(s.datt, T * d.qd);
  matmul_backward_cpu(s.datt.data(), g.wo, g.bo, dresid, a.att, w.wo, T, d.qd, d.C);
  lora_backward_cpu(lora, layer, LoraModule::o_proj, s.datt.data(), dresid, a.att, T, d.qd, d.C);
  attention_backward_cpu(s.dq.data(), s.dk.data(), s.dv.data(), s.datt.data(), a.att, a.lse, a.q, a.k, a.v,
                         batch.cu_seqlens.data(), batch.num_seqs(), {d.H, d.KVH, d.D}, prefixes_of(batch));
  rope_backward_cpu(s.dq.data(), batch.positions.data(), T, d.H, d.D, theta);
  rope_backward_cpu(s.dk.data(), batch.positions.data(), T, d.KVH, d.D, theta);
  float* dq = s.dq.data();
  float* dk = s.dk.data();
  if (config.has_qk_norm()) {
    zero(s.dq_raw, T * d.qd);
    zero(s.dk_raw, T * d.kvd);
    rmsnorm_backward_cpu(s.dq_raw.data(), g.q_norm, dq, a.q_raw, w.q_norm, a.q_rstd, T * d.H, d.D);
    rmsnorm_backward_cpu(s.dk_raw.data(), g.k_norm, dk, a.k_raw, w.k_norm, a.k_rstd, T * d.KVH, d.D);
    dq = s.dq_raw.data();
    dk = s.dk_raw.data();
  }
  zero(s.dln, T * d.C);
  matmul_backward_cpu(s.dln.data(), g.wq, g.bq, dq, a.ln1, w.wq, T, d.C, d.qd);
  lora_backward_cpu(lora, layer, LoraModule::q_proj, s.dln.data(), dq, a.ln1, T, d.C, d.qd);
  matmul_backward_cpu(s.dln.data(), g.wk, g.bk, dk, a.ln1, w.wk, T, d.C, d.kvd);
  lora_backward_cpu(lora, layer, LoraModule::k_proj, s.dln.data(), dk, a.ln1, T, d.C, d.kvd);
  matmul_backward_cpu(s.dln.data(), g.wv, g.bv, s.dv.data(), a.ln1, w.wv, T, d.C, d.kvd);
  lora_backward_cpu(lora, layer, LoraModule::v_proj, s.dln.data(), s.dv.data(), a.ln1, T, d.C, d.kvd);
  rmsnorm_backward_cpu(dresid, g.attn_norm, s.dln.data(), x, w.attn_norm, a.rstd1, T, d.C);
}

}  // namespace

int64_t TrainState::num_floats() const {
  int64_t n = 0;
  for (const auto* v : {&resid, &layer_storage, &lnf, &rstdf, &vocab_lse, &logits_scratch, &dresid, &dln, &datt, &dq,
                        &dk, &dv, &dq_raw, &dk_raw, &dh, &dgate, &dup})
    n += static_cast<int64_t>(v->size());
  return n;
}

namespace {

// Layers that keep their activations, and whether any is recomputed (they share one more slot).
struct LayerSlots {
  int64_t stored = 0;
  bool any_recompute = false;
  int64_t slots() const { return stored + (any_recompute ? 1 : 0); }
};
LayerSlots layer_slots(const TrainOptions& options, int64_t L) {
  LayerSlots s;
  for (int64_t l = 0; l < L; ++l) {
    bool r = !options.recompute.empty() && options.recompute[l];
    s.any_recompute |= r;
    s.stored += r ? 0 : 1;
  }
  return s;
}

}  // namespace

int64_t train_state_floats(const QwenConfig& config, const TrainOptions& options) {
  Dims d = dims_of(config);
  const int64_t T = options.max_tokens, slots = layer_slots(options, d.L).slots();
  return (d.L + 1) * T * d.C + slots * layer_slot_floats(d, T) + T * d.C /*lnf*/ + 2 * T /*rstdf, vocab_lse*/ +
         std::min(T, options.logprob_chunk) * d.V +
         T * (2 * d.C + 2 * d.qd + 2 * d.kvd + d.qd + d.kvd + 3 * d.I) /*backward scratch*/;
}

TrainState make_train_state(const QwenConfig& config, const TrainOptions& options) {
  validate_config(config, "train state");
  check(options.max_tokens > 0, "train state: max_tokens must be positive, got ", options.max_tokens);
  check(options.logprob_chunk > 0, "train state: logprob_chunk must be positive, got ", options.logprob_chunk);
  Dims d = dims_of(config);
  check(options.recompute.empty() || static_cast<int64_t>(options.recompute.size()) == d.L, "train state: recompute has ",
        options.recompute.size(), " entries for ", d.L, " layers");
  TrainState s;
  s.config = config;
  s.options = options;
  int64_t T = options.max_tokens;
  s.resid.assign(static_cast<size_t>((d.L + 1) * T * d.C), 0.0f);
  const LayerSlots ls = layer_slots(options, d.L);
  int64_t slot_floats = layer_slot_floats(d, T);
  s.layer_storage.assign(static_cast<size_t>(ls.slots() * slot_floats), 0.0f);
  int64_t next = 0;
  float* shared = ls.any_recompute ? s.layer_storage.data() + ls.stored * slot_floats : nullptr;
  for (int64_t l = 0; l < d.L; ++l) {
    bool r = !options.recompute.empty() && options.recompute[l];
    s.layer_acts.push_back(carve_slot(d, T, r ? shared : s.layer_storage.data() + (next++) * slot_floats));
  }
  s.lnf.assign(static_cast<size_t>(T * d.C), 0.0f);
  s.rstdf.assign(static_cast<size_t>(T), 0.0f);
  s.vocab_lse.assign(static_cast<size_t>(T), 0.0f);
  s.logits_scratch.assign(static_cast<size_t>(std::min(T, options.logprob_chunk) * d.V), 0.0f);
  for (auto [v, n] : {std::pair{&s.dresid, d.C}, {&s.dln, d.C}, {&s.datt, d.qd}, {&s.dq, d.qd}, {&s.dk, d.kvd},
                      {&s.dv, d.kvd}, {&s.dq_raw, d.qd}, {&s.dk_raw, d.kvd}, {&s.dh, d.I}, {&s.dgate, d.I},
                      {&s.dup, d.I}})
    v->assign(static_cast<size_t>(T * n), 0.0f);
  // The memory planner prices this state with train_state_floats: the two must not drift apart.
  check(s.num_floats() == train_state_floats(config, options), "train state: ", s.num_floats(),
        " floats allocated, train_state_floats says ", train_state_floats(config, options));
  return s;
}

void forward_hidden(const QwenModel& model, TrainState& state, const PackedBatch& batch, const LoraAdapter* lora) {
  const QwenConfig& config = model.config;
  Dims d = dims_of(config);
  validate_batch(batch, state.options.max_tokens, d.V);
  int64_t T = batch.num_tokens(), maxT = state.options.max_tokens;
  ModelWeights w = QwenModel::bind_weights(model, const_cast<float*>(model.params.data()));
  // The adapter's [T, rank] scratch is allocated here, not in TrainState: it is a few KB against
  // the state's megabytes, and a run without an adapter allocates nothing.
  LoraForward adapter;
  if (lora) adapter = lora_forward_state(*lora, config, T, "forward");
  state.lora = lora;
  embedding_forward_cpu(state.resid.data(), w.embed, batch.tokens.data(), T, d.V, d.C);
  for (int64_t l = 0; l < d.L; ++l)
    layer_forward(config, w.layers[l], state.resid.data() + l * maxT * d.C, state.resid.data() + (l + 1) * maxT * d.C,
                  state.layer_acts[l], batch, lora ? &adapter : nullptr, l);
  rmsnorm_forward_cpu(state.lnf.data(), state.rstdf.data(), state.resid.data() + d.L * maxT * d.C, w.final_norm, T,
                      d.C, static_cast<float>(config.rms_norm_eps));
}

void forward_logits(const QwenModel& model, TrainState& state, const PackedBatch& batch, float* logits,
                    const LoraAdapter* lora) {
  forward_hidden(model, state, batch, lora);
  ModelWeights w = QwenModel::bind_weights(model, const_cast<float*>(model.params.data()));
  matmul_forward_cpu(logits, state.lnf.data(), w.lm_head, nullptr, batch.num_tokens(), model.config.hidden_size,
                     model.config.vocab_size);
}

void forward_logprobs(const QwenModel& model, TrainState& state, const PackedBatch& batch,
                      const std::vector<int32_t>& targets, float* logprobs, float* entropy, float logit_scale,
                      const LoraAdapter* lora) {
  check(static_cast<int64_t>(targets.size()) == batch.num_tokens(), "forward_logprobs: ", targets.size(),
        " targets for ", batch.num_tokens(), " tokens");
  forward_hidden(model, state, batch, lora);
  ModelWeights w = QwenModel::bind_weights(model, const_cast<float*>(model.params.data()));
  LogprobShape shape{batch.num_tokens(), model.config.hidden_size, model.config.vocab_size, state.options.logprob_chunk,
                     logit_scale};
  logprob_forward_cpu(logprobs, state.vocab_lse.data(), state.lnf.data(), w.lm_head, targets.data(), shape,
                      state.logits_scratch.data(), entropy);
  state.logit_scale = logit_scale;
}

void forward_logprobs_masked(const QwenModel& model, TrainState& state, const PackedBatch& batch,
                             const std::vector<int32_t>& targets, const uint8_t* mask, float* logprobs,
                             const LoraAdapter* lora) {
  const int64_t T = batch.num_tokens(), C = model.config.hidden_size;
  check(static_cast<int64_t>(targets.size()) == T, "forward_logprobs_masked: ", targets.size(), " targets for ", T,
        " tokens");
  forward_hidden(model, state, batch, lora);
  state.logit_scale = 1.0f;
  // Only the kept rows go through the lm_head: in SFT and GRPO batches most positions are prompt
  // or observation tokens, and the [rows x vocab] product is a large share of the forward.
  std::vector<int64_t> rows;
  for (int64_t t = 0; t < T; ++t) {
    logprobs[t] = 0.0f;
    state.vocab_lse[t] = 0.0f;
    if (mask[t]) rows.push_back(t);
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  if (n == 0) return;
  std::vector<float> hidden(static_cast<size_t>(n * C)), lp(static_cast<size_t>(n)), lse(static_cast<size_t>(n));
  std::vector<int32_t> kept_targets(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(state.lnf.data() + rows[i] * C, C, hidden.data() + i * C);
    kept_targets[i] = targets[rows[i]];
  }
  ModelWeights w = QwenModel::bind_weights(model, const_cast<float*>(model.params.data()));
  LogprobShape shape{n, C, model.config.vocab_size, state.options.logprob_chunk};
  logprob_forward_cpu(lp.data(), lse.data(), hidden.data(), w.lm_head, kept_targets.data(), shape,
                      state.logits_scratch.data());
  for (int64_t i = 0; i < n; ++i) logprobs[rows[i]] = lp[i], state.vocab_lse[rows[i]] = lse[i];
}

void backward_logprobs(QwenModel& model, TrainState& state, const PackedBatch& batch,
                       const std::vector<int32_t>& targets, const float* dlogprobs, const float* dentropy,
                       const float* entropy, LoraAdapter* lora) {
  // The activations of a forward with an adapter are not the base model's (nor another adapter's):
  // differentiating them with other weights would give wrong gradients.
  check(state.lora == lora, "backward: the forward ran ",
        !state.lora ? "without a LoRA adapter; pass none" : lora ? "with another LoRA adapter; pass the same one"
                                                                : "with a LoRA adapter; pass the same one");
  if (!lora) check(model.grads.size() == model.params.size(), "backward: gradients are not allocated (call alloc_grads)");
  const QwenConfig& config = model.config;
  Dims d = dims_of(config);
  int64_t T = batch.num_tokens(), maxT = state.options.max_tokens;
  ModelWeights w = model.weights();
  // With an adapter the base is frozen: every gradient pointer null, so each kernel skips its
  // dW / db product and computes only what carries the gradient down to the adapters.
  ModelWeights g;
  LoraBackward adapter;
  if (lora) {
    g.layers.resize(static_cast<size_t>(d.L));
    adapter = lora_backward_state(*lora, config, T, "backward");
  } else {
    g = model.grad_weights();
  }
  LoraBackward* ad = lora ? &adapter : nullptr;
  zero(state.dln, T * d.C);
  LogprobShape shape{T, d.C, d.V, state.options.logprob_chunk, state.logit_scale};
  logprob_backward_cpu(state.dln.data(), g.lm_head, dlogprobs, state.lnf.data(), w.lm_head, targets.data(),
                       state.vocab_lse.data(), shape, state.logits_scratch.data(), dentropy, entropy);
  zero(state.dresid, T * d.C);
  rmsnorm_backward_cpu(state.dresid.data(), g.final_norm, state.dln.data(), state.resid.data() + d.L * maxT * d.C,
                       w.final_norm, state.rstdf.data(), T, d.C);
  for (int64_t l = d.L - 1; l >= 0; --l) {
    const float* x = state.resid.data() + l * maxT * d.C;
    bool recomputed = !state.options.recompute.empty() && state.options.recompute[l];
    // Re-running the forward rewrites resid[l + 1] with the bytes it already holds.
    if (recomputed)
      layer_forward(config, w.layers[l], x, state.resid.data() + (l + 1) * maxT * d.C, state.layer_acts[l], batch,
                    ad ? &ad->forward : nullptr, l);
    layer_backward(config, w.layers[l], g.layers[l], x, state.layer_acts[l], batch, state, ad, l);
  }
  if (g.embed) embedding_backward_cpu(g.embed, state.dresid.data(), batch.tokens.data(), T, d.V, d.C);
}

}  // namespace sqlrl

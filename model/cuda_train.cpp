// Training forward and backward of the CUDA model over a packed varlen batch: model/train.cpp
// step for step (same activation list, same recomputation scheme), bf16 activations.
#include <algorithm>

#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/logprob.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "model/cuda_layers.h"
#include "model/cuda_ops.h"
#include "runtime/error.h"

namespace sqlrl {
namespace {

struct Dims {
  int64_t C, I, H, KVH, D, qd, kvd, V, L;
};
Dims dims_of(const QwenConfig& c) {
  return {c.hidden_size, c.intermediate_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
          c.q_dim(),     c.kv_dim(),          c.vocab_size,          c.num_hidden_layers};
}

// Hands out 256-byte aligned pieces of one arena; with a null base it only measures.
struct Carver {
  char* base = nullptr;
  size_t used = 0;
  template <typename T>
  T* take(int64_t n) {
    used = (used + 255) / 256 * 256;
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    used += static_cast<size_t>(n) * sizeof(T);
    return p;
  }
};

CudaLayerActs carve_layer(Carver& c, const Dims& d, int64_t T, bool qk_norm) {
  CudaLayerActs a;
  a.ln1 = c.take<uint16_t>(T * d.C);
  a.rstd1 = c.take<float>(T);
  if (qk_norm) {
    a.q_raw = c.take<uint16_t>(T * d.qd);
    a.k_raw = c.take<uint16_t>(T * d.kvd);
    a.q_rstd = c.take<float>(T * d.H);
    a.k_rstd = c.take<float>(T * d.KVH);
  }
  a.q = c.take<uint16_t>(T * d.qd);
  a.k = c.take<uint16_t>(T * d.kvd);
  a.v = c.take<uint16_t>(T * d.kvd);
  a.att = c.take<uint16_t>(T * d.qd);
  a.lse = c.take<float>(T * d.H);
  a.resid_mid = c.take<uint16_t>(T * d.C);
  a.ln2 = c.take<uint16_t>(T * d.C);
  a.rstd2 = c.take<float>(T);
  a.gate = c.take<uint16_t>(T * d.I);
  a.up = c.take<uint16_t>(T * d.I);
  a.h = c.take<uint16_t>(T * d.I);
  return a;
}

bool recomputed(const TrainOptions& o, int64_t l) { return !o.recompute.empty() && o.recompute[l]; }

// Lays every buffer of the state out in `c` (measuring when c.base is null).
void carve_state(CudaTrainState& s, Carver& c, const Dims& d, bool qk_norm) {
  int64_t T = s.options.max_tokens;
  s.resid = c.take<uint16_t>((d.L + 1) * T * d.C);
  s.layer_acts.assign(static_cast<size_t>(d.L), CudaLayerActs{});
  CudaLayerActs shared{};
  bool have_shared = false;
  for (int64_t l = 0; l < d.L; ++l) {
    if (!recomputed(s.options, l)) {
      s.layer_acts[l] = carve_layer(c, d, T, qk_norm);
    } else {
      if (!have_shared) shared = carve_layer(c, d, T, qk_norm);
      have_shared = true;
      s.layer_acts[l] = shared;
    }
  }
  s.lnf = c.take<uint16_t>(T * d.C);
  s.rstdf = c.take<float>(T);
  s.vocab_lse = c.take<float>(T);
  s.logprobs = c.take<float>(T);
  s.entropy = c.take<float>(T);
  s.dlogprobs = c.take<float>(T);
  s.dentropy = c.take<float>(T);
  s.tokens = c.take<int32_t>(T);
  s.positions = c.take<int32_t>(T);
  s.targets = c.take<int32_t>(T);
  s.dresid = c.take<uint16_t>(T * d.C);
  s.dln = c.take<uint16_t>(T * d.C);
  s.dln_f32 = c.take<float>(T * d.C);
  s.datt = c.take<uint16_t>(T * d.qd);
  s.dq = c.take<uint16_t>(T * d.qd);
  s.dk = c.take<uint16_t>(T * d.kvd);
  s.dv = c.take<uint16_t>(T * d.kvd);
  if (qk_norm) {
    s.dq_raw = c.take<uint16_t>(T * d.qd);
    s.dk_raw = c.take<uint16_t>(T * d.kvd);
  }
  s.dh = c.take<uint16_t>(T * d.I);
  s.dgate = c.take<uint16_t>(T * d.I);
  s.dup = c.take<uint16_t>(T * d.I);
  s.workspace = c.take<char>(static_cast<int64_t>(s.workspace_bytes));
}

LogprobCudaShape logprob_shape(const CudaTrainState& s, int64_t T) {
  return {T, s.config.hidden_size, s.config.vocab_size, std::min(s.options.logprob_chunk, std::max<int64_t>(T, 1)),
          s.chunk_vocab, s.logit_scale};
}

// lora (null: none) adds each adapted projection's low-rank term to its output right after the
// base product, before the q/k norms, RoPE, the activation and the next residual add, where
// model/train.cpp's layer_forward adds it.
void layer_forward(const CudaModel& m, const CudaLayerWeights& w, const uint16_t* x, uint16_t* out,
                   const CudaLayerActs& a, const CudaTrainState& s, int64_t T, int64_t num_seqs,
                   const CudaLoraRun* lora, int64_t layer) {
  const QwenConfig& config = m.config();
  Dims d = dims_of(config);
  const CudaStream& st = m.stream;
  float eps = static_cast<float>(config.rms_norm_eps), theta = static_cast<float>(config.rope_theta);
  rmsnorm_forward_cuda(a.ln1, a.rstd1, x, w.attn_norm, T, d.C, eps, st);
  if (config.has_qk_norm()) {
    linear_forward_cuda(a.q_raw, a.ln1, w.wq, w.bq, T, d.C, d.qd, false, m);
    lora_forward_cuda(lora, layer, LoraModule::q_proj, a.q_raw, a.ln1, T, d.C, d.qd, m);
    linear_forward_cuda(a.k_raw, a.ln1, w.wk, w.bk, T, d.C, d.kvd, false, m);
    lora_forward_cuda(lora, layer, LoraModule::k_proj, a.k_raw, a.ln1, T, d.C, d.kvd, m);
    rmsnorm_forward_cuda(a.q, a.q_rstd, a.q_raw, w.q_norm, T * d.H, d.D, eps, st);
    rmsnorm_forward_cuda(a.k, a.k_rstd, a.k_raw, w.k_norm, T * d.KVH, d.D, eps, st);
  } else {
    linear_forward_cuda(a.q, a.ln1, w.wq, w.bq, T, d.C, d.qd, false, m);
    lora_forward_cuda(lora, layer, LoraModule::q_proj, a.q, a.ln1, T, d.C, d.qd, m);
    linear_forward_cuda(a.k, a.ln1, w.wk, w.bk, T, d.C, d.kvd, false, m);
    lora_forward_cuda(lora, layer, LoraModule::k_proj, a.k, a.ln1, T, d.C, d.kvd, m);
  }
  linear_forward_cuda(a.v, a.ln1, w.wv, w.bv, T, d.C, d.kvd, false, m);
  lora_forward_cuda(lora, layer, LoraModule::v_proj, a.v, a.ln1, T, d.C, d.kvd, m);
  rope_forward_cuda(a.q, s.positions, T, d.H, d.D, d.qd, theta, st);
  rope_forward_cuda(a.k, s.positions, T, d.KVH, d.D, d.kvd, theta, st);
  attention_forward_cuda(a.att, a.lse, a.q, a.k, a.v, s.cu_seqlens, num_seqs, s.max_seqlen, {d.H, d.KVH, d.D}, st,
                         s.prefixes);
  model_copy(a.resid_mid, x, sizeof(uint16_t) * T * d.C, CopyKind::DeviceToDevice, st);
  linear_forward_cuda(a.resid_mid, a.att, w.wo, w.bo, T, d.qd, d.C, true, m);
  lora_forward_cuda(lora, layer, LoraModule::o_proj, a.resid_mid, a.att, T, d.qd, d.C, m);
  rmsnorm_forward_cuda(a.ln2, a.rstd2, a.resid_mid, w.mlp_norm, T, d.C, eps, st);
  linear_forward_cuda(a.gate, a.ln2, w.w_gate, nullptr, T, d.C, d.I, false, m);
  lora_forward_cuda(lora, layer, LoraModule::gate_proj, a.gate, a.ln2, T, d.C, d.I, m);
  linear_forward_cuda(a.up, a.ln2, w.w_up, nullptr, T, d.C, d.I, false, m);
  lora_forward_cuda(lora, layer, LoraModule::up_proj, a.up, a.ln2, T, d.C, d.I, m);
  swiglu_forward_cuda(a.h, a.gate, a.up, T * d.I, st);
  model_copy(out, a.resid_mid, sizeof(uint16_t) * T * d.C, CopyKind::DeviceToDevice, st);
  linear_forward_cuda(out, a.h, w.w_down, nullptr, T, d.I, d.C, true, m);
  lora_forward_cuda(lora, layer, LoraModule::down_proj, out, a.h, T, d.I, d.C, m);
}

// s.dresid: in = d(layer output), out = d(layer input). Gradients add into g (null pointers: a
// frozen tensor, its product skipped) and, through lora (null: none), into the adapter's. Each
// adapter term's dx is added after the base's dinp (in f32 for q/k/v and gate/up: dln_f32; in
// bf16 for down and o: dh and datt, one more rounding there).
void layer_backward(const CudaModel& m, const CudaLayerWeights& w, const LayerWeights& g, const uint16_t* x,
                    const CudaLayerActs& a, CudaTrainState& s, int64_t T, int64_t num_seqs, const CudaLoraRun* lora,
                    int64_t layer) {
  const QwenConfig& config = m.config();
  Dims d = dims_of(config);
  const CudaStream& st = m.stream;
  float theta = static_cast<float>(config.rope_theta);
  linear_backward_cuda(s.dh, false, false, g.w_down, nullptr, s.dresid, a.h, w.w_down, T, d.I, d.C, m);
  lora_backward_cuda(lora, layer, LoraModule::down_proj, s.dh, false, s.dresid, a.h, T, d.I, d.C, m);
  swiglu_backward_cuda(s.dgate, s.dup, s.dh, a.gate, a.up, T * d.I, st);
  linear_backward_cuda(s.dln_f32, true, false, g.w_gate, nullptr, s.dgate, a.ln2, w.w_gate, T, d.C, d.I, m);
  lora_backward_cuda(lora, layer, LoraModule::gate_proj, s.dln_f32, true, s.dgate, a.ln2, T, d.C, d.I, m);
  linear_backward_cuda(s.dln_f32, true, true, g.w_up, nullptr, s.dup, a.ln2, w.w_up, T, d.C, d.I, m);
  lora_backward_cuda(lora, layer, LoraModule::up_proj, s.dln_f32, true, s.dup, a.ln2, T, d.C, d.I, m);
  f32_to_bf16_cuda(s.dln, s.dln_f32, T * d.C, st);
  rmsnorm_backward_cuda(s.dresid, g.mlp_norm, s.dln, a.resid_mid, w.mlp_norm, a.rstd2, T, d.C, s.workspace,
                        s.workspace_bytes, st);

  linear_backward_cuda(s.datt, false, false, g.wo, g.bo, s.dresid, a.att, w.wo, T, d.qd, d.C, m);
  lora_backward_cuda(lora, layer, LoraModule::o_proj, s.datt, false, s.dresid, a.att, T, d.qd, d.C, m);
  attention_backward_cuda(s.dq, s.dk, s.dv, s.datt, a.att, a.lse, a.q, a.k, a.v, s.cu_seqlens, num_seqs, T,
                          s.max_seqlen, {d.H, d.KVH, d.D}, s.workspace, s.workspace_bytes, st, s.prefixes);
  rope_backward_cuda(s.dq, s.positions, T, d.H, d.D, d.qd, theta, st);
  rope_backward_cuda(s.dk, s.positions, T, d.KVH, d.D, d.kvd, theta, st);
  uint16_t* dq = s.dq;
  uint16_t* dk = s.dk;
  if (config.has_qk_norm()) {
    model_zero(s.dq_raw, sizeof(uint16_t) * T * d.qd, st);
    model_zero(s.dk_raw, sizeof(uint16_t) * T * d.kvd, st);
    rmsnorm_backward_cuda(s.dq_raw, g.q_norm, dq, a.q_raw, w.q_norm, a.q_rstd, T * d.H, d.D, s.workspace,
                          s.workspace_bytes, st);
    rmsnorm_backward_cuda(s.dk_raw, g.k_norm, dk, a.k_raw, w.k_norm, a.k_rstd, T * d.KVH, d.D, s.workspace,
                          s.workspace_bytes, st);
    dq = s.dq_raw;
    dk = s.dk_raw;
  }
  linear_backward_cuda(s.dln_f32, true, false, g.wq, g.bq, dq, a.ln1, w.wq, T, d.C, d.qd, m);
  lora_backward_cuda(lora, layer, LoraModule::q_proj, s.dln_f32, true, dq, a.ln1, T, d.C, d.qd, m);
  linear_backward_cuda(s.dln_f32, true, true, g.wk, g.bk, dk, a.ln1, w.wk, T, d.C, d.kvd, m);
  lora_backward_cuda(lora, layer, LoraModule::k_proj, s.dln_f32, true, dk, a.ln1, T, d.C, d.kvd, m);
  linear_backward_cuda(s.dln_f32, true, true, g.wv, g.bv, s.dv, a.ln1, w.wv, T, d.C, d.kvd, m);
  lora_backward_cuda(lora, layer, LoraModule::v_proj, s.dln_f32, true, s.dv, a.ln1, T, d.C, d.kvd, m);
  f32_to_bf16_cuda(s.dln, s.dln_f32, T * d.C, st);
  rmsnorm_backward_cuda(s.dresid, g.attn_norm, s.dln, x, w.attn_norm, a.rstd1, T, d.C, s.workspace,
                        s.workspace_bytes, st);
}

uint16_t* resid_at(const CudaTrainState& s, int64_t l) {
  return s.resid + l * s.options.max_tokens * s.config.hidden_size;
}

void upload_batch(const CudaModel& m, CudaTrainState& s, const PackedBatch& batch) {
  validate_batch(batch, s.options.max_tokens, m.config().vocab_size);
  int64_t T = batch.num_tokens();
  check(T > 0, "forward (cuda): empty batch");
  const CudaStream& st = m.stream;
  model_copy(s.tokens, batch.tokens.data(), sizeof(int32_t) * T, CopyKind::HostToDevice, st);
  model_copy(s.positions, batch.positions.data(), sizeof(int32_t) * T, CopyKind::HostToDevice, st);
  const int64_t n = static_cast<int64_t>(batch.cu_seqlens.size()), S = n - 1;
  // Shared prefixes: [seq S][len S][sharer offsets S + 1][sharers <= S] after cu_seqlens.
  s.prefix_staging.clear();
  if (batch.has_prefixes()) {
    std::vector<int32_t> offsets, sharers;
    shared_prefix_sharers({batch.prefix_seq.data(), batch.prefix_len.data()}, batch.cu_seqlens.data(), S, offsets,
                          sharers);
    const std::vector<int32_t>* parts[] = {&batch.prefix_seq, &batch.prefix_len, &offsets, &sharers};
    for (const std::vector<int32_t>* part : parts)
      s.prefix_staging.insert(s.prefix_staging.end(), part->begin(), part->end());
  }
  const int64_t words = n + static_cast<int64_t>(s.prefix_staging.size());
  if (!s.cu_seqlens_buf.defined() || s.cu_seqlens_buf.numel() < words)
    s.cu_seqlens_buf = empty({std::max<int64_t>(words, 64)}, DType::I32, cuda_device(m.device));
  s.cu_seqlens = s.cu_seqlens_buf.data_as<int32_t>();
  model_copy(s.cu_seqlens, batch.cu_seqlens.data(), sizeof(int32_t) * n, CopyKind::HostToDevice, st);
  s.prefixes = {};
  if (!s.prefix_staging.empty()) {
    int32_t* dev = s.cu_seqlens + n;
    model_copy(dev, s.prefix_staging.data(), sizeof(int32_t) * s.prefix_staging.size(), CopyKind::HostToDevice, st);
    s.prefixes = {dev, dev + S, dev + 2 * S, dev + 3 * S + 1};
  }
  s.max_seqlen = 1;
  for (int64_t i = 0; i + 1 < n; ++i)
    s.max_seqlen = std::max<int64_t>(s.max_seqlen, batch.cu_seqlens[i + 1] - batch.cu_seqlens[i]);
  s.num_tokens = T;
}

void forward_hidden(const CudaModel& m, CudaTrainState& s, const PackedBatch& batch, const CudaLora* lora) {
  Dims d = dims_of(m.config());
  upload_batch(m, s, batch);
  int64_t T = batch.num_tokens();
  CudaWeights w = bf16_weights(m);
  // The adapter's u [T, rank] comes from the caching allocator per call, freed (for reuse on this
  // stream) when the call returns; without an adapter nothing is allocated.
  CudaLoraRun run;
  if (lora) run = lora_run_cuda(*lora, m, T, false, "forward (cuda)");
  s.lora = lora;
  embedding_forward_cuda(s.resid, w.embed, s.tokens, T, d.V, d.C, m.stream);
  for (int64_t l = 0; l < d.L; ++l)
    layer_forward(m, w.layers[l], resid_at(s, l), resid_at(s, l + 1), s.layer_acts[l], s, T, batch.num_seqs(),
                  lora ? &run : nullptr, l);
  rmsnorm_forward_cuda(s.lnf, s.rstdf, resid_at(s, d.L), w.final_norm, T, d.C,
                       static_cast<float>(m.config().rms_norm_eps), m.stream);
}

}  // namespace

namespace {

// The state with every size set and nothing placed: what make_cuda_train_state carves.
CudaTrainState measured_state(const QwenConfig& config, const TrainOptions& options, size_t& bytes) {
  check(options.max_tokens > 0, "cuda train state: max_tokens must be positive, got ", options.max_tokens);
  check(options.logprob_chunk > 0, "cuda train state: logprob_chunk must be positive, got ", options.logprob_chunk);
  Dims d = dims_of(config);
  check(options.recompute.empty() || static_cast<int64_t>(options.recompute.size()) == d.L,
        "cuda train state: recompute has ", options.recompute.size(), " entries for ", d.L, " layers");
  check(cuda_attention_takes_head_dim(d.D), "cuda train state: head_dim ", d.D,
        " (the CUDA attention kernels take 64 or 128, kernels/attention.h)");
  CudaTrainState s;
  s.config = config;
  s.options = options;
  int64_t T = options.max_tokens;
  AttentionShape shape{d.H, d.KVH, d.D};
  s.workspace_bytes = std::max({attention_backward_workspace_bytes(T, shape), rmsnorm_backward_workspace_bytes(T, d.C),
                                rmsnorm_backward_workspace_bytes(T * d.H, d.D),
                                rmsnorm_backward_workspace_bytes(T * d.KVH, d.D),
                                embedding_backward_workspace_bytes(T, d.V),
                                logprob_cuda_workspace_bytes(logprob_shape(s, T))});
  Carver measure;
  carve_state(s, measure, d, config.has_qk_norm());
  bytes = measure.used;
  return s;
}

}  // namespace

int64_t cuda_train_state_bytes(const QwenConfig& config, const TrainOptions& options) {
  size_t bytes = 0;
  measured_state(config, options, bytes);
  return static_cast<int64_t>(bytes);
}

CudaTrainState make_cuda_train_state(const CudaModel& model, const TrainOptions& options, const Tensor* place_in) {
  size_t bytes = 0;
  CudaTrainState s = measured_state(model.config(), options, bytes);
  if (place_in) {
    check(place_in->nbytes() >= bytes && place_in->device().is_cuda(), "cuda train state: needs ", bytes,
          " device bytes, the region given holds ", place_in->nbytes());
    s.arena = *place_in;
  } else {
    s.arena = empty({static_cast<int64_t>(bytes)}, DType::U8, cuda_device(model.device));
  }
  Carver place{static_cast<char*>(s.arena.data()), 0};
  carve_state(s, place, dims_of(model.config()), model.config().has_qk_norm());
  return s;
}

void forward_logits_cuda(const CudaModel& model, CudaTrainState& state, const PackedBatch& batch, float* logits,
                         const CudaLora* lora) {
  forward_hidden(model, state, batch, lora);
  int64_t T = batch.num_tokens(), V = model.config().vocab_size;
  Tensor out = empty({T, V}, DType::F32, cuda_device(model.device));
  logits_cuda(out.data_as<float>(), state.lnf, bf16_weights(model).lm_head, T, model.config().hidden_size, V, model);
  model_copy(logits, out.data(), out.nbytes(), CopyKind::DeviceToHost, model.stream);
}

void forward_logprobs_cuda(const CudaModel& model, CudaTrainState& state, const PackedBatch& batch,
                           const std::vector<int32_t>& targets, float* logprobs, float* entropy, float logit_scale,
                           const CudaLora* lora) {
  int64_t T = batch.num_tokens();
  check(static_cast<int64_t>(targets.size()) == T, "forward_logprobs_cuda: ", targets.size(), " targets for ", T,
        " tokens");
  for (int64_t t = 0; t < T; ++t)
    check(targets[t] >= 0 && targets[t] < model.config().vocab_size, "forward_logprobs_cuda: target ", targets[t],
          " at ", t, " outside the vocabulary of ", model.config().vocab_size);
  forward_hidden(model, state, batch, lora);
  model_copy(state.targets, targets.data(), sizeof(int32_t) * T, CopyKind::HostToDevice, model.stream);
  state.logit_scale = logit_scale;
  state.has_entropy = entropy != nullptr;
  LogprobCudaShape shape = logprob_shape(state, T);
  check(logprob_cuda_workspace_bytes(shape) <= state.workspace_bytes, "forward_logprobs_cuda: the log-prob needs ",
        logprob_cuda_workspace_bytes(shape), " workspace bytes, the state planned ", state.workspace_bytes);
  logprob_forward_cuda(state.logprobs, state.vocab_lse, entropy ? state.entropy : nullptr, state.lnf,
                       bf16_weights(model).lm_head, state.targets, shape, state.workspace, state.workspace_bytes,
                       model.stream);
  model_copy(logprobs, state.logprobs, sizeof(float) * T, CopyKind::DeviceToHost, model.stream);
  if (entropy) model_copy(entropy, state.entropy, sizeof(float) * T, CopyKind::DeviceToHost, model.stream);
}

void backward_logprobs_cuda(CudaModel& model, CudaTrainState& state, const PackedBatch& batch,
                            const std::vector<int32_t>& targets, const float* dlogprobs, const float* dentropy,
                            CudaLora* lora) {
  const QwenConfig& config = model.config();
  Dims d = dims_of(config);
  int64_t T = batch.num_tokens();
  check(state.num_tokens == T && static_cast<int64_t>(targets.size()) == T, "backward_logprobs_cuda: the batch has ",
        T, " tokens and ", targets.size(), " targets, the last forward ran ", state.num_tokens);
  // The activations of a forward with an adapter are not the base model's (nor another adapter's):
  // differentiating them with other weights would give wrong gradients.
  check(state.lora == lora, "backward_logprobs_cuda: the forward ran ",
        !state.lora ? "without a LoRA adapter; pass none" : lora ? "with another LoRA adapter; pass the same one"
                                                                : "with a LoRA adapter; pass the same one");
  const CudaStream& st = model.stream;
  CudaWeights w = bf16_weights(model);
  // With an adapter the base is frozen: every gradient pointer null, so each launcher skips its
  // dW / db / dnorm / dembedding work and only the input gradients carry d(loss) to the adapters.
  ModelWeights g;
  CudaLoraRun run;
  if (lora) {
    g.layers.resize(static_cast<size_t>(d.L));
    run = lora_run_cuda(*lora, model, T, true, "backward_logprobs_cuda");
  } else {
    check(model.grads.defined(), "backward_logprobs_cuda: the model has no gradient buffer on the device");
    g = grad_views(model);
  }
  const CudaLoraRun* ad = lora ? &run : nullptr;
  check(!dentropy || state.has_entropy, "backward_logprobs_cuda: dentropy needs the entropy of the last forward "
        "(forward_logprobs_cuda with an entropy buffer)");
  model_copy(state.dlogprobs, dlogprobs, sizeof(float) * T, CopyKind::HostToDevice, st);
  if (dentropy) model_copy(state.dentropy, dentropy, sizeof(float) * T, CopyKind::HostToDevice, st);
  model_zero(state.dln, sizeof(uint16_t) * T * d.C, st);
  logprob_backward_cuda(state.dln, g.lm_head, state.dlogprobs, dentropy ? state.dentropy : nullptr, state.lnf,
                        w.lm_head, state.targets, state.vocab_lse, dentropy ? state.entropy : nullptr,
                        logprob_shape(state, T), state.workspace, state.workspace_bytes, st);
  model_zero(state.dresid, sizeof(uint16_t) * T * d.C, st);
  rmsnorm_backward_cuda(state.dresid, g.final_norm, state.dln, resid_at(state, d.L), w.final_norm, state.rstdf, T,
                        d.C, state.workspace, state.workspace_bytes, st);
  for (int64_t l = d.L - 1; l >= 0; --l) {
    // Re-running the forward rewrites resid[l + 1] with the bytes it already holds.
    if (recomputed(state.options, l))
      layer_forward(model, w.layers[l], resid_at(state, l), resid_at(state, l + 1), state.layer_acts[l], state, T,
                    batch.num_seqs(), ad, l);
    layer_backward(model, w.layers[l], g.layers[l], resid_at(state, l), state.layer_acts[l], state, T,
                   batch.num_seqs(), ad, l);
  }
  if (g.embed)
    embedding_backward_cuda(g.embed, state.dresid, state.tokens, T, d.V, d.C, state.workspace, state.workspace_bytes,
                            st);
}

}  // namespace sqlrl

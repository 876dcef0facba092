#include "model/infer.h"

#include <algorithm>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "model/lora.h"
#include "runtime/error.h"

namespace sqlrl {

namespace {

// Decode steps carry a few tokens: stream the weights once rather than pack them for sgemm.
// Batch-invariant calls take that kernel whatever their size (forward_cached).
void linear_layer(float* out, const float* inp, const float* weight, const float* bias, int64_t T, int64_t C,
                  int64_t OC, bool batch_invariant) {
  if (T <= kRowsKernelTokens || batch_invariant) {
    matmul_forward_rows_cpu(out, inp, weight, bias, T, C, OC);
  } else {
    matmul_forward_cpu(out, inp, weight, bias, T, C, OC);
  }
}

}  // namespace

void forward_cached(const QwenModel& model, PagedKVCache& cache, const std::vector<CachedInput>& inputs,
                    std::vector<float>& logits, bool all_positions, const LoraAdapter* lora, bool batch_invariant) {
  const QwenConfig& c = model.config;
  const int64_t C = c.hidden_size, H = c.num_attention_heads, KVH = c.num_key_value_heads, D = c.head_dim,
                I = c.intermediate_size, V = c.vocab_size, qd = c.q_dim(), kvd = c.kv_dim();
  const float eps = static_cast<float>(c.rms_norm_eps), theta = static_cast<float>(c.rope_theta);
  check(cache.layers == c.num_hidden_layers && cache.kv_heads == KVH && cache.head_dim == D,
        "forward_cached: the cache was made for another model shape");
  auto linear = [batch_invariant](float* out, const float* inp, const float* weight, const float* bias, int64_t rows,
                                  int64_t in, int64_t outs) {
    linear_layer(out, inp, weight, bias, rows, in, outs, batch_invariant);
  };
  std::vector<int32_t> tokens, positions;
  std::vector<int64_t> owner;  // input index of each token
  std::vector<int64_t> last_row;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check(!inputs[i].tokens.empty(), "forward_cached: input ", i, " has no tokens");
    kv_reserve(cache, inputs[i].sequence, static_cast<int64_t>(inputs[i].tokens.size()));
    int64_t start = cache.sequence(inputs[i].sequence).length;
    for (size_t j = 0; j < inputs[i].tokens.size(); ++j) {
      tokens.push_back(inputs[i].tokens[j]);
      positions.push_back(static_cast<int32_t>(start + static_cast<int64_t>(j)));
      owner.push_back(static_cast<int64_t>(i));
    }
    last_row.push_back(static_cast<int64_t>(tokens.size()) - 1);
  }
  const int64_t T = static_cast<int64_t>(tokens.size());
  int64_t max_blocks = 0;
  for (const CachedInput& in : inputs)
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(cache.sequence(in.sequence).blocks.size()));
  std::vector<int32_t> tables(static_cast<size_t>(T * max_blocks), 0);
  for (int64_t t = 0; t < T; ++t) {
    const auto& blocks = cache.sequence(inputs[owner[t]].sequence).blocks;
    std::copy(blocks.begin(), blocks.end(), tables.begin() + t * max_blocks);
  }

  ModelWeights w = QwenModel::bind_weights(model, const_cast<float*>(model.params.data()));
  std::vector<float> x(T * C), ln(T * C), q(T * qd), k(T * kvd), v(T * kvd), att(T * qd), o(T * C), gate(T * I),
      up(T * I), rstd(T * std::max(H, int64_t{1}));
  LoraForward adapter;
  if (lora) adapter = lora_forward_state(*lora, c, T, "forward_cached");
  adapter.rows_kernel = batch_invariant;
  LoraForward* ad = lora ? &adapter : nullptr;
  embedding_forward_cpu(x.data(), w.embed, tokens.data(), T, V, C);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    rmsnorm_forward_cpu(ln.data(), rstd.data(), x.data(), lw.attn_norm, T, C, eps);
    linear(q.data(), ln.data(), lw.wq, lw.bq, T, C, qd);
    lora_add_cpu(ad, l, LoraModule::q_proj, q.data(), ln.data(), T, C, qd);
    linear(k.data(), ln.data(), lw.wk, lw.bk, T, C, kvd);
    lora_add_cpu(ad, l, LoraModule::k_proj, k.data(), ln.data(), T, C, kvd);
    linear(v.data(), ln.data(), lw.wv, lw.bv, T, C, kvd);
    lora_add_cpu(ad, l, LoraModule::v_proj, v.data(), ln.data(), T, C, kvd);
    if (c.has_qk_norm()) {
      rmsnorm_forward_cpu(q.data(), rstd.data(), q.data(), lw.q_norm, T * H, D, eps);
      rmsnorm_forward_cpu(k.data(), rstd.data(), k.data(), lw.k_norm, T * KVH, D, eps);
    }
    rope_forward_cpu(q.data(), positions.data(), T, H, D, theta);
    rope_forward_cpu(k.data(), positions.data(), T, KVH, D, theta);
    for (int64_t t = 0; t < T; ++t) {
      int32_t block = tables[t * max_blocks + positions[t] / cache.block_size];
      int64_t slot = (positions[t] % cache.block_size) * kvd;
      std::memcpy(cache.k_block(l, block) + slot, k.data() + t * kvd, sizeof(float) * kvd);
      std::memcpy(cache.v_block(l, block) + slot, v.data() + t * kvd, sizeof(float) * kvd);
    }
    PagedQueries queries{T, tables.data(), max_blocks, positions.data(), cache.block_size};
    paged_attention_cpu(att.data(), q.data(), cache.k_block(l, 0), cache.v_block(l, 0), queries, {H, KVH, D});
    linear(o.data(), att.data(), lw.wo, lw.bo, T, qd, C);
    lora_add_cpu(ad, l, LoraModule::o_proj, o.data(), att.data(), T, qd, C);
    for (int64_t i = 0; i < T * C; ++i) x[i] += o[i];
    rmsnorm_forward_cpu(ln.data(), rstd.data(), x.data(), lw.mlp_norm, T, C, eps);
    linear(gate.data(), ln.data(), lw.w_gate, nullptr, T, C, I);
    lora_add_cpu(ad, l, LoraModule::gate_proj, gate.data(), ln.data(), T, C, I);
    linear(up.data(), ln.data(), lw.w_up, nullptr, T, C, I);
    lora_add_cpu(ad, l, LoraModule::up_proj, up.data(), ln.data(), T, C, I);
    swiglu_forward_cpu(gate.data(), gate.data(), up.data(), T * I);
    linear(o.data(), gate.data(), lw.w_down, nullptr, T, I, C);
    lora_add_cpu(ad, l, LoraModule::down_proj, o.data(), gate.data(), T, I, C);
    for (int64_t i = 0; i < T * C; ++i) x[i] += o[i];
  }
  for (const CachedInput& in : inputs) cache.sequence(in.sequence).length += static_cast<int64_t>(in.tokens.size());
  // Only the rows whose logits are wanted go through the final norm and lm_head.
  std::vector<int64_t> rows;
  if (all_positions) {
    for (int64_t t = 0; t < T; ++t) rows.push_back(t);
  } else {
    rows = last_row;
  }
  int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> sel(R * C);
  for (int64_t r = 0; r < R; ++r) std::copy(x.begin() + rows[r] * C, x.begin() + (rows[r] + 1) * C, sel.begin() + r * C);
  rmsnorm_forward_cpu(sel.data(), rstd.data(), sel.data(), w.final_norm, R, C, eps);
  logits.resize(static_cast<size_t>(R * V));
  linear(logits.data(), sel.data(), w.lm_head, nullptr, R, C, V);
}

std::vector<GeneratedSample> generate_with(const DecodeSteps& steps, PagedKVCache& book,
                                           const std::vector<int32_t>& prompt, int64_t num_samples,
                                           const GenerateOptions& options, const TokenCallback& on_token,
                                           const char* who) {
  check(!prompt.empty(), who, ": empty prompt");
  check(num_samples > 0, who, ": num_samples must be positive, got ", num_samples);
  std::vector<GeneratedSample> samples(static_cast<size_t>(num_samples));
  std::vector<int64_t> handles;
  handles.push_back(kv_new_sequence(book));
  try {
    steps.forward({{handles[0], prompt}});
    for (int64_t i = 1; i < num_samples; ++i) handles.push_back(kv_fork(book, handles[0]));
    std::vector<int64_t> active(static_cast<size_t>(num_samples));
    for (int64_t i = 0; i < num_samples; ++i) active[i] = i;
    for (int64_t step = 0; step < options.max_new_tokens && !active.empty(); ++step) {
      std::vector<SamplingRequest> requests;
      for (int64_t i : active)
        requests.push_back({options.sampling, options.first_sample_id + static_cast<uint64_t>(i),
                            static_cast<uint64_t>(prompt.size()) + static_cast<uint64_t>(step)});
      // Every sample's first token is drawn from the prompt's last logits.
      std::vector<SampledToken> drawn = steps.sample(requests, step == 0);
      std::vector<CachedInput> next;
      std::vector<int64_t> still;
      for (size_t a = 0; a < active.size(); ++a) {
        int64_t i = active[a];
        const SampledToken& s = drawn[a];
        GeneratedSample& out = samples[i];
        out.tokens.push_back(s.token);
        out.logprobs.push_back(s.logprob);
        out.logprobs_t1.push_back(s.logprob_t1);
        bool keep = !on_token || on_token(i, s.token);
        bool stop = std::find(options.stop_tokens.begin(), options.stop_tokens.end(), s.token) != options.stop_tokens.end();
        if (!keep || stop) {
          out.stopped = true;
          continue;
        }
        if (step + 1 < options.max_new_tokens) {
          next.push_back({handles[i], {s.token}});
          still.push_back(i);
        }
      }
      active = still;
      if (!next.empty()) steps.forward(next);
    }
  } catch (...) {
    for (int64_t h : handles) kv_free(book, h);
    throw;
  }
  for (int64_t h : handles) kv_free(book, h);
  return samples;
}

std::vector<GeneratedSample> generate(const QwenModel& model, PagedKVCache& cache, const std::vector<int32_t>& prompt,
                                      int64_t num_samples, const GenerateOptions& options,
                                      const TokenCallback& on_token, const LoraAdapter* lora) {
  const int64_t V = model.config.vocab_size;
  std::vector<float> logits;
  SamplingScratch scratch;
  DecodeSteps steps;
  steps.forward = [&](const std::vector<CachedInput>& inputs) { forward_cached(model, cache, inputs, logits, false, lora); };
  steps.sample = [&](const std::vector<SamplingRequest>& requests, bool from_prompt) {
    std::vector<SampledToken> drawn;
    for (size_t a = 0; a < requests.size(); ++a) {
      const SamplingRequest& r = requests[a];
      const float* row = logits.data() + (from_prompt ? 0 : static_cast<int64_t>(a) * V);
      drawn.push_back(sample_token_cpu(row, V, r.params, r.sequence_id, r.position, scratch));
    }
    return drawn;
  };
  return generate_with(steps, cache, prompt, num_samples, options, on_token, "generate");
}

}  // namespace sqlrl

// Inference on the CUDA model with a paged bf16 KV cache on the device: forward_cached of
// model/infer.cpp step for step (prefill and decode are one call), the device sampler, and
// generate() over both. The host PagedKVCache does the bookkeeping; only the copy of a shared,
// partly filled block (copy on write) touches device memory, here, before kv_reserve runs.
#include <algorithm>

#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "model/cuda_decode.h"
#include "model/cuda_layers.h"
#include "model/cuda_ops.h"
#include "runtime/error.h"

namespace sqlrl {

CudaKVCache make_cuda_kv_cache(const CudaModel& model, int64_t num_blocks, int64_t block_size, const Tensor* place_in) {
  const QwenConfig& c = model.config();
  check(num_blocks > 0 && block_size > 0, "cuda kv cache: num_blocks (", num_blocks, ") and block_size (", block_size,
        ") must be positive");
  CudaKVCache cache;
  cache.decode_mode = cuda_decode_mode_from_env();
  PagedKVCache& b = cache.book;
  b.layers = c.num_hidden_layers;
  b.kv_heads = c.num_key_value_heads;
  b.head_dim = c.head_dim;
  b.block_size = block_size;
  b.num_blocks = num_blocks;
  b.refcount.assign(static_cast<size_t>(num_blocks), 0);
  for (int64_t i = num_blocks - 1; i >= 0; --i) b.free_blocks.push_back(static_cast<int32_t>(i));
  int64_t n = b.layers * num_blocks * b.block_floats();
  if (place_in) {  // K then V, V starting on a 256-byte boundary
    const size_t v_at = (static_cast<size_t>(n) * 2 + 255) / 256 * 256;
    cache.k = view_bytes(*place_in, 0, {n}, DType::BF16);
    cache.v = view_bytes(*place_in, v_at, {n}, DType::BF16);
  } else {
    cache.k = empty({n}, DType::BF16, cuda_device(model.device));
    cache.v = empty({n}, DType::BF16, cuda_device(model.device));
  }
  return cache;
}

uint16_t* layer_cache(const Tensor& t, const PagedKVCache& b, int64_t layer) {
  return t.data_as<uint16_t>() + layer * b.num_blocks * b.block_floats();
}

void reserve_on_device(const CudaModel& m, CudaKVCache& cache, int64_t handle, int64_t n) {
  PagedKVCache& b = cache.book;
  KVSequence& s = b.sequence(handle);
  if (n > 0 && s.length % b.block_size != 0) {
    int32_t& last = s.blocks[s.length / b.block_size];
    if (b.refcount[last] > 1) {
      check(!b.free_blocks.empty(), "cuda kv cache: out of blocks (", b.num_blocks, " blocks of ", b.block_size,
            " tokens) copying a shared block for sequence ", handle);
      int32_t fresh = b.free_blocks.back();
      b.free_blocks.pop_back();
      b.refcount[fresh] = 1;
      size_t bytes = sizeof(uint16_t) * b.block_floats();
      for (int64_t l = 0; l < b.layers; ++l)
        for (const Tensor* t : {&cache.k, &cache.v})
          model_copy(layer_cache(*t, b, l) + fresh * b.block_floats(), layer_cache(*t, b, l) + last * b.block_floats(),
                     bytes, CopyKind::DeviceToDevice, m.stream);
      --b.refcount[last];
      last = fresh;
    }
  }
  kv_reserve(b, handle, n);
}

void forward_cached_cuda(const CudaModel& m, CudaKVCache& cache, const std::vector<CachedInput>& inputs,
                         Tensor& logits, bool all_positions, const CudaLora* lora) {
  const QwenConfig& c = m.config();
  const int64_t C = c.hidden_size, H = c.num_attention_heads, KVH = c.num_key_value_heads, D = c.head_dim,
                I = c.intermediate_size, V = c.vocab_size, qd = c.q_dim(), kvd = c.kv_dim();
  const float eps = static_cast<float>(c.rms_norm_eps), theta = static_cast<float>(c.rope_theta);
  if (cache.decode_mode != CudaDecodeMode::unfused && decode_step_supported(m, inputs, all_positions, lora)) {
    decode_step_cuda(m, cache, inputs, logits);
    return;
  }
  PagedKVCache& book = cache.book;
  check(book.layers == c.num_hidden_layers && book.kv_heads == KVH && book.head_dim == D,
        "forward_cached_cuda: the cache was made for another model shape");
  check(!inputs.empty(), "forward_cached_cuda: no inputs");
  // Host bookkeeping, as forward_cached: tokens, positions, block tables, cache slots.
  std::vector<int32_t> tokens, positions, rows;
  std::vector<int64_t> owner;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check(!inputs[i].tokens.empty(), "forward_cached_cuda: input ", i, " has no tokens");
    reserve_on_device(m, cache, inputs[i].sequence, static_cast<int64_t>(inputs[i].tokens.size()));
    int64_t start = book.sequence(inputs[i].sequence).length;
    for (size_t j = 0; j < inputs[i].tokens.size(); ++j) {
      tokens.push_back(inputs[i].tokens[j]);
      positions.push_back(static_cast<int32_t>(start + static_cast<int64_t>(j)));
      owner.push_back(static_cast<int64_t>(i));
      if (all_positions) rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
    }
    if (!all_positions) rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
  }
  const int64_t T = static_cast<int64_t>(tokens.size()), R = static_cast<int64_t>(rows.size());
  int64_t max_blocks = 0, max_context = 0;
  for (const CachedInput& in : inputs)
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(book.sequence(in.sequence).blocks.size()));
  for (int32_t p : positions) max_context = std::max<int64_t>(max_context, p + 1);
  std::vector<int32_t> ints(static_cast<size_t>(3 * T + R + T * max_blocks), 0);
  int32_t* h_tokens = ints.data();
  int32_t* h_positions = h_tokens + T;
  int32_t* h_slots = h_positions + T;
  int32_t* h_rows = h_slots + T;
  int32_t* h_tables = h_rows + R;
  std::copy(tokens.begin(), tokens.end(), h_tokens);
  std::copy(positions.begin(), positions.end(), h_positions);
  std::copy(rows.begin(), rows.end(), h_rows);
  for (int64_t t = 0; t < T; ++t) {
    const auto& blocks = book.sequence(inputs[owner[t]].sequence).blocks;
    std::copy(blocks.begin(), blocks.end(), h_tables + t * max_blocks);
    h_slots[t] = blocks[positions[t] / book.block_size] * static_cast<int32_t>(book.block_size) +
                 positions[t] % static_cast<int32_t>(book.block_size);
  }
  Device dev = cuda_device(m.device);
  Tensor d_ints = empty({static_cast<int64_t>(ints.size())}, DType::I32, dev);
  model_copy(d_ints.data(), ints.data(), sizeof(int32_t) * ints.size(), CopyKind::HostToDevice, m.stream);
  const int32_t* d_tokens = d_ints.data_as<int32_t>();
  const int32_t* d_positions = d_tokens + T;
  const int32_t* d_slots = d_positions + T;
  const int32_t* d_rows = d_slots + T;
  const int32_t* d_tables = d_rows + R;

  // Activations for this call (the caching allocator makes repeated calls cheap).
  auto bf16 = [&](int64_t n) { return empty({std::max<int64_t>(n, 1)}, DType::BF16, dev); };
  Tensor x = bf16(T * C), ln = bf16(T * C), q = bf16(T * qd), k = bf16(T * kvd), v = bf16(T * kvd), att = bf16(T * qd),
         q_raw = bf16(c.has_qk_norm() ? T * qd : 1), k_raw = bf16(c.has_qk_norm() ? T * kvd : 1), gate = bf16(T * I),
         up = bf16(T * I), h = bf16(T * I), sel = bf16(R * C), sel_ln = bf16(R * C);
  AttentionShape shape{H, KVH, D};
  size_t ws_bytes = paged_attention_workspace_bytes(T, shape, max_context);
  Tensor ws = empty({static_cast<int64_t>(std::max<size_t>(ws_bytes, 1))}, DType::U8, dev);
  auto p = [](const Tensor& t) { return t.data_as<uint16_t>(); };

  CudaWeights w = bf16_weights(m);
  const CudaStream& st = m.stream;
  CudaLoraRun run;  // the adapter's u [T, rank], from the caching allocator like the activations
  if (lora) run = lora_run_cuda(*lora, m, T, false, "forward_cached_cuda");
  const CudaLoraRun* ad = lora ? &run : nullptr;
  embedding_forward_cuda(p(x), w.embed, d_tokens, T, V, C, st);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const CudaLayerWeights& lw = w.layers[l];
    rmsnorm_forward_cuda(p(ln), nullptr, p(x), lw.attn_norm, T, C, eps, st);
    bool qk = c.has_qk_norm();
    linear_forward_cuda(qk ? p(q_raw) : p(q), p(ln), lw.wq, lw.bq, T, C, qd, false, m);
    lora_forward_cuda(ad, l, LoraModule::q_proj, qk ? p(q_raw) : p(q), p(ln), T, C, qd, m);
    linear_forward_cuda(qk ? p(k_raw) : p(k), p(ln), lw.wk, lw.bk, T, C, kvd, false, m);
    lora_forward_cuda(ad, l, LoraModule::k_proj, qk ? p(k_raw) : p(k), p(ln), T, C, kvd, m);
    linear_forward_cuda(p(v), p(ln), lw.wv, lw.bv, T, C, kvd, false, m);
    lora_forward_cuda(ad, l, LoraModule::v_proj, p(v), p(ln), T, C, kvd, m);
    if (qk) {
      rmsnorm_forward_cuda(p(q), nullptr, p(q_raw), lw.q_norm, T * H, D, eps, st);
      rmsnorm_forward_cuda(p(k), nullptr, p(k_raw), lw.k_norm, T * KVH, D, eps, st);
    }
    rope_forward_cuda(p(q), d_positions, T, H, D, qd, theta, st);
    rope_forward_cuda(p(k), d_positions, T, KVH, D, kvd, theta, st);
    uint16_t* kc = layer_cache(cache.k, book, l);
    uint16_t* vc = layer_cache(cache.v, book, l);
    kv_write_cuda(kc, vc, p(k), p(v), d_slots, T, kvd, st);
    PagedQueries queries{T, d_tables, max_blocks, d_positions, book.block_size};
    paged_attention_cuda(p(att), p(q), kc, vc, queries, shape, max_context, ws.data(), ws_bytes, kPagedSplitTokens, st);
    linear_forward_cuda(p(x), p(att), lw.wo, lw.bo, T, qd, C, true, m);
    lora_forward_cuda(ad, l, LoraModule::o_proj, p(x), p(att), T, qd, C, m);
    rmsnorm_forward_cuda(p(ln), nullptr, p(x), lw.mlp_norm, T, C, eps, st);
    linear_forward_cuda(p(gate), p(ln), lw.w_gate, nullptr, T, C, I, false, m);
    lora_forward_cuda(ad, l, LoraModule::gate_proj, p(gate), p(ln), T, C, I, m);
    linear_forward_cuda(p(up), p(ln), lw.w_up, nullptr, T, C, I, false, m);
    lora_forward_cuda(ad, l, LoraModule::up_proj, p(up), p(ln), T, C, I, m);
    swiglu_forward_cuda(p(h), p(gate), p(up), T * I, st);
    linear_forward_cuda(p(x), p(h), lw.w_down, nullptr, T, I, C, true, m);
    lora_forward_cuda(ad, l, LoraModule::down_proj, p(x), p(h), T, I, C, m);
  }
  for (const CachedInput& in : inputs) book.sequence(in.sequence).length += static_cast<int64_t>(in.tokens.size());
  // Only the rows whose logits are wanted go through the final norm and lm_head.
  gather_rows_cuda(p(sel), p(x), d_rows, R, C, st);
  rmsnorm_forward_cuda(p(sel_ln), nullptr, p(sel), w.final_norm, R, C, eps, st);
  if (!logits.defined() || !(logits.shape == Shape{R, V}) || logits.dtype != DType::F32 || logits.device() != dev)
    logits = empty({R, V}, DType::F32, dev);
  logits_cuda(logits.data_as<float>(), p(sel_ln), w.lm_head, R, C, V, m);
}

std::vector<SampledToken> sample_cuda(const CudaModel& m, const Tensor& logits,
                                      const std::vector<SamplingRequest>& requests) {
  int64_t rows = static_cast<int64_t>(requests.size()), V = m.config().vocab_size;
  check(logits.numel() >= rows * V, "sample_cuda: ", rows, " requests for ", logits.numel() / V, " rows of logits");
  std::vector<SampledToken> out(static_cast<size_t>(rows));
  if (rows == 0) return out;
  Device dev = cuda_device(m.device);
  Tensor d_req = empty({static_cast<int64_t>(rows * sizeof(SamplingRequest))}, DType::U8, dev);
  Tensor d_out = empty({static_cast<int64_t>(rows * sizeof(SampledToken))}, DType::U8, dev);
  Tensor d_ws = empty({static_cast<int64_t>(sample_tokens_cuda_workspace_bytes(rows, V))}, DType::U8, dev);
  model_copy(d_req.data(), requests.data(), d_req.nbytes(), CopyKind::HostToDevice, m.stream);
  sample_tokens_cuda(static_cast<SampledToken*>(d_out.data()), logits.data_as<float>(), rows, V, V,
                     static_cast<const SamplingRequest*>(d_req.data()), d_ws.data(), d_ws.nbytes(), m.stream);
  model_copy(out.data(), d_out.data(), d_out.nbytes(), CopyKind::DeviceToHost, m.stream);
  return out;
}

std::vector<GeneratedSample> generate_cuda(const CudaModel& m, CudaKVCache& cache, const std::vector<int32_t>& prompt,
                                           int64_t num_samples, const GenerateOptions& options,
                                           const TokenCallback& on_token, const CudaLora* lora) {
  const int64_t V = m.config().vocab_size;
  Tensor logits, prompt_rows;
  DecodeSteps steps;
  steps.forward = [&](const std::vector<CachedInput>& inputs) { forward_cached_cuda(m, cache, inputs, logits, false, lora); };
  steps.sample = [&](const std::vector<SamplingRequest>& requests, bool from_prompt) {
    if (!from_prompt) return sample_cuda(m, logits, requests);
    // The sampler reads one row per request: give each sample its copy of the prompt's row.
    const int64_t n = static_cast<int64_t>(requests.size());
    prompt_rows = empty({n, V}, DType::F32, cuda_device(m.device));
    for (int64_t i = 0; i < n; ++i)
      model_copy(prompt_rows.data_as<float>() + i * V, logits.data(), sizeof(float) * V, CopyKind::DeviceToDevice,
                 m.stream);
    return sample_cuda(m, prompt_rows, requests);
  };
  return generate_with(steps, cache.book, prompt, num_samples, options, on_token, "generate_cuda");
}

}  // namespace sqlrl

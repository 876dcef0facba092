// The fused, graph-replayed decode step (model/cuda_decode.h).
#include "model/cuda_decode.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/attention.h"
#include "kernels/decode_qkv.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/swiglu.h"
#include "model/cuda_layers.h"
#include "model/cuda_ops.h"
#include "runtime/device_memory.h"
#include "runtime/error.h"
#include "runtime/gemm.h"

namespace sqlrl {

CudaDecodeMode cuda_decode_mode_from_env() {
  const char* v = std::getenv("SQLRL_CUDA_DECODE");
  const CudaDecodeMode fallback = cuda_graphs_supported() ? CudaDecodeMode::graphs : CudaDecodeMode::kernels;
  if (!v || !*v) return fallback;
  const std::string s = v;
  if (s == cuda_decode_mode_name(CudaDecodeMode::graphs)) return fallback;
  if (s == cuda_decode_mode_name(CudaDecodeMode::kernels)) return CudaDecodeMode::kernels;
  if (s == cuda_decode_mode_name(CudaDecodeMode::unfused)) return CudaDecodeMode::unfused;
  fail("SQLRL_CUDA_DECODE=", s, ": expected graphs, kernels or unfused");
}

const char* cuda_decode_mode_name(CudaDecodeMode mode) {
  switch (mode) {
    case CudaDecodeMode::graphs: return "graphs";
    case CudaDecodeMode::kernels: return "kernels";
    case CudaDecodeMode::unfused: return "unfused";
  }
  return "?";
}

// Few buckets at small batches (where a step is one pass over the weights whatever the rows),
// steps of 8 and then 16 above: a padded row costs its share of attention only.
int64_t decode_rows_bucket(int64_t rows) {
  check(rows >= 1 && rows <= kDecodeMaxRows, "decode_rows_bucket: ", rows, " rows outside 1..", kDecodeMaxRows);
  for (int64_t b : {1, 2, 4, 8})
    if (rows <= b) return b;
  if (rows <= 64) return (rows + 7) / 8 * 8;
  return (rows + 15) / 16 * 16;
}

// Powers of two from 8 blocks: a longer table costs only its upload and the attention blocks
// past a sequence's context, which exit at once.
int64_t decode_blocks_bucket(int64_t blocks) {
  check(blocks >= 1, "decode_blocks_bucket: ", blocks, " blocks");
  int64_t b = 8;
  while (b < blocks) b *= 2;
  return b;
}

namespace {

// The products of one layer (and the lm_head) as the few-row kernel takes them; x, out and M
// are set per launch.
struct LayerProducts {
  MatmulRowsProblem qkv, o, gate_up, down;
};

LayerProducts layer_products(const QwenConfig& c, const CudaLayerWeights& w) {
  const int64_t C = c.hidden_size, I = c.intermediate_size, qd = c.q_dim(), kvd = c.kv_dim();
  LayerProducts p;
  p.qkv.in_features = C;
  p.qkv.num_parts = 3;
  p.qkv.parts[0] = {w.wq, w.bq, qd};
  p.qkv.parts[1] = {w.wk, w.bk, kvd};
  p.qkv.parts[2] = {w.wv, w.bv, kvd};
  p.qkv.epilogue = MatmulRowsEpilogue::store;
  p.qkv.ld_x = C;
  p.qkv.ld_out = qd + 2 * kvd;
  p.o.in_features = qd;
  p.o.parts[0] = {w.wo, w.bo, C};
  p.o.epilogue = MatmulRowsEpilogue::accumulate;
  p.o.ld_x = qd;
  p.o.ld_out = C;
  p.gate_up.in_features = C;
  p.gate_up.num_parts = 2;
  p.gate_up.parts[0] = {w.w_gate, nullptr, I};
  p.gate_up.parts[1] = {w.w_up, nullptr, I};
  p.gate_up.epilogue = MatmulRowsEpilogue::swiglu;
  p.gate_up.ld_x = C;
  p.gate_up.ld_out = I;
  p.down.in_features = I;
  p.down.parts[0] = {w.w_down, nullptr, C};
  p.down.epilogue = MatmulRowsEpilogue::accumulate;
  p.down.ld_x = I;
  p.down.ld_out = C;
  return p;
}

MatmulRowsProblem lm_head_product(const QwenConfig& c, const CudaWeights& w) {
  MatmulRowsProblem p;
  p.in_features = c.hidden_size;
  p.parts[0] = {w.lm_head, nullptr, c.vocab_size};
  p.epilogue = MatmulRowsEpilogue::store_f32;
  p.ld_x = c.hidden_size;
  p.ld_out = c.vocab_size;
  return p;
}

// The problem with its activations bound (the pointers only matter for the alignment checks of
// decode_step_supported, which binds any 256-byte-aligned address).
MatmulRowsProblem bind(MatmulRowsProblem p, void* out, const uint16_t* x, int64_t rows) {
  p.out = out;
  p.x = x;
  p.rows = rows;
  return p;
}

size_t workspace_for(const MatmulRowsProblem& p, int64_t rows, int sms) {
  return matmul_rows_workspace_bytes(matmul_rows_total(p), p.in_features, p.epilogue == MatmulRowsEpilogue::swiglu,
                                     rows, sms);
}

}  // namespace

bool decode_step_supported(const CudaModel& m, const std::vector<CachedInput>& inputs, bool all_positions,
                           const CudaLora* lora, const char** why) {
  auto no = [&](const char* reason) {
    if (why) *why = reason;
    return false;
  };
  if (inputs.empty()) return no("no inputs");
  if (lora) return no("a LoRA adapter (the fused products do not apply one)");
  if (all_positions) return no("logits of every position asked for");
  for (const CachedInput& in : inputs)
    if (in.tokens.size() != 1) return no("an input of more than one token (a prefill)");
  const QwenConfig& c = m.config();
  if (!cuda_attention_takes_head_dim(c.head_dim)) return no("head_dim not 64 or 128");
  const CudaWeights w = bf16_weights(m);
  alignas(256) static const uint16_t probe[8] = {};
  for (const CudaLayerWeights& lw : w.layers) {
    const LayerProducts p = layer_products(c, lw);
    for (const MatmulRowsProblem* q : {&p.qkv, &p.o, &p.gate_up, &p.down})
      if (!matmul_rows_supported(bind(*q, nullptr, probe, 1), why)) return false;
  }
  return matmul_rows_supported(bind(lm_head_product(c, w), nullptr, probe, 1), why);
}

struct CudaDecodeState {
  int device = 0;
  int sms = 1;
  CudaStream stream;  // its own: the legacy default stream (the model's usual one) cannot be captured
  CudaEvent model_ready, step_done;
  int64_t rows_cap = 0, blocks_cap = 0;  // the buffers' capacity: the largest buckets seen
  Tensor arena;
  int32_t* ints = nullptr;  // tokens [R], positions [R], slots [R], block tables [R, W] of a bucket (R, W)
  uint16_t *x = nullptr, *ln = nullptr, *qkv = nullptr, *q = nullptr, *att = nullptr, *h = nullptr;
  uint16_t *gate = nullptr, *up = nullptr;  // the GEMM products' gate and up (SwiGLU after)
  float* logits = nullptr;
  size_t logits_offset = 0;
  void* gemm_ws = nullptr;
  size_t gemm_ws_bytes = 0;
  void* attn_ws = nullptr;
  size_t attn_ws_bytes = 0;
  // Two pinned staging buffers for the ints, each free again once its upload has run.
  int32_t* staging[2] = {nullptr, nullptr};
  CudaEvent staged[2];
  bool staging_busy[2] = {false, false};
  int next_staging = 0;
  // Per (rows bucket, table bucket, GEMM products): one graph each.
  using Key = std::tuple<int64_t, int64_t, bool>;
  std::map<Key, CudaGraph> graphs;
  std::set<Key> seen;  // buckets run once without a graph (modules loaded, GEMM plans made)
  CudaDecodeStats stats;

  CudaDecodeState() = default;
  CudaDecodeState(const CudaDecodeState&) = delete;
  CudaDecodeState& operator=(const CudaDecodeState&) = delete;
  ~CudaDecodeState() {
    drop_graphs();
    for (int i = 0; i < 2; ++i) {
      if (staging_busy[i]) cuda_event_synchronize(staged[i]);
      cuda_host_free(staging[i]);
      cuda_event_destroy(staged[i]);
    }
    cuda_event_destroy(model_ready);
    cuda_event_destroy(step_done);
    if (stream.handle) cuda_stream_synchronize(stream);
    cuda_stream_destroy(stream);
  }
  void drop_graphs() {
    for (auto& [key, g] : graphs) cuda_graph_destroy(g);
    graphs.clear();
    seen.clear();
  }
};

CudaDecodeStats decode_stats(const CudaKVCache& cache) { return cache.decoder ? cache.decoder->stats : CudaDecodeStats{}; }

namespace {

size_t ints_for(int64_t rows, int64_t blocks) { return static_cast<size_t>(rows * (3 + blocks)); }

// (Re)allocates every buffer for buckets up to (rows, blocks); graphs captured over the old
// buffers are dropped. Happens a few times per run at most: the caps only grow.
void ensure_capacity(const CudaModel& m, CudaKVCache& cache, CudaDecodeState& st, int64_t rows, int64_t blocks) {
  if (rows <= st.rows_cap && blocks <= st.blocks_cap) return;
  const QwenConfig& c = m.config();
  const int64_t R = std::max(rows, st.rows_cap), W = std::max(blocks, st.blocks_cap);
  const int64_t C = c.hidden_size, I = c.intermediate_size, qd = c.q_dim(), kvd = c.kv_dim(), V = c.vocab_size;
  cuda_stream_synchronize(st.stream);
  st.drop_graphs();
  st.arena = Tensor{};
  size_t gemm_ws = 0;
  const CudaWeights w = bf16_weights(m);
  const LayerProducts lp = layer_products(c, w.layers[0]);  // every layer has these shapes
  for (const MatmulRowsProblem* p : {&lp.qkv, &lp.o, &lp.gate_up, &lp.down})
    gemm_ws = std::max(gemm_ws, workspace_for(*p, R, st.sms));
  gemm_ws = std::max(gemm_ws, workspace_for(lm_head_product(c, w), R, st.sms));
  AttentionShape shape{c.num_attention_heads, c.num_key_value_heads, c.head_dim};
  const size_t attn_ws = paged_attention_workspace_bytes(R, shape, W * cache.book.block_size);
  // One arena, every piece 256-byte aligned.
  size_t offset = 0;
  auto take = [&](size_t bytes) {
    size_t at = offset;
    offset += (bytes + 255) / 256 * 256;
    return at;
  };
  const size_t o_ints = take(sizeof(int32_t) * ints_for(R, W)), o_x = take(2 * R * C), o_ln = take(2 * R * C),
               o_qkv = take(2 * R * (qd + 2 * kvd)), o_q = take(2 * R * qd), o_att = take(2 * R * qd),
               o_h = take(2 * R * I), o_gate = take(2 * R * I), o_up = take(2 * R * I), o_logits = take(sizeof(float) * R * V), o_gemm = take(gemm_ws),
               o_attn = take(std::max<size_t>(attn_ws, 1));
  st.arena = empty({static_cast<int64_t>(offset)}, DType::U8, cuda_device(m.device));
  char* base = static_cast<char*>(st.arena.data());
  st.ints = reinterpret_cast<int32_t*>(base + o_ints);
  st.x = reinterpret_cast<uint16_t*>(base + o_x);
  st.ln = reinterpret_cast<uint16_t*>(base + o_ln);
  st.qkv = reinterpret_cast<uint16_t*>(base + o_qkv);
  st.q = reinterpret_cast<uint16_t*>(base + o_q);
  st.att = reinterpret_cast<uint16_t*>(base + o_att);
  st.h = reinterpret_cast<uint16_t*>(base + o_h);
  st.gate = reinterpret_cast<uint16_t*>(base + o_gate);
  st.up = reinterpret_cast<uint16_t*>(base + o_up);
  st.logits = reinterpret_cast<float*>(base + o_logits);
  st.logits_offset = o_logits;
  st.gemm_ws = base + o_gemm;
  st.gemm_ws_bytes = gemm_ws;
  st.attn_ws = base + o_attn;
  st.attn_ws_bytes = attn_ws;
  // The few-row product's tickets start at zero (each launch leaves them so); the rest need no
  // initial value: the padding rows' outputs are never read.
  model_zero(st.gemm_ws, gemm_ws, st.stream);
  for (int i = 0; i < 2; ++i) {
    if (st.staging_busy[i]) cuda_event_synchronize(st.staged[i]);
    st.staging_busy[i] = false;
    cuda_host_free(st.staging[i]);
    st.staging[i] = static_cast<int32_t*>(cuda_host_alloc(sizeof(int32_t) * ints_for(R, W)));
  }
  cuda_stream_synchronize(st.stream);
  st.rows_cap = R;
  st.blocks_cap = W;
}

CudaDecodeState& decoder_of(const CudaModel& m, CudaKVCache& cache) {
  if (!cache.decoder) {
    auto st = std::make_shared<CudaDecodeState>();
    st->device = m.device;
    st->sms = cuda_device_info(m.device).multiprocessors;
    st->stream = cuda_stream_create(m.device);
    st->model_ready = cuda_event_create(m.device);
    st->step_done = cuda_event_create(m.device);
    for (CudaEvent& e : st->staged) e = cuda_event_create(m.device);
    cache.decoder = std::move(st);
  }
  return *cache.decoder;
}

// Whether cuBLASLt can run the product as one GEMM: no bias (it would need a broadcast into a
// strided output) and, for the plain epilogues, the parts one matrix in memory (Qwen3's q/k/v and
// gate/up are stored back to back; Qwen2's biases sit between them).
bool gemm_takes(const MatmulRowsProblem& p) {
  for (int i = 0; i < p.num_parts; ++i)
    if (p.parts[i].bias) return false;
  if (p.epilogue == MatmulRowsEpilogue::swiglu) return true;  // two GEMMs and the SwiGLU kernel
  for (int i = 0; i + 1 < p.num_parts; ++i)
    if (p.parts[i + 1].weight != p.parts[i].weight + p.parts[i].rows * p.in_features) return false;
  return true;
}

// The product through cuBLASLt (runtime/gemm.h), as the unfused path computes it: bf16 out
// (the residual added in f32 through beta = 1), f32 logits, gate and up rounded to bf16 before
// SwiGLU.
void gemm_product(const MatmulRowsProblem& p, void* out, const uint16_t* x, int64_t R, const CudaDecodeState& st,
                  int device) {
  const int64_t K = p.in_features;
  auto gemm = [&](int64_t n, const uint16_t* w, void* c, DType c_type, float beta) {
    gemm_cuda(bf16_row_major(R, n, K, x, false, w, true, c, c_type, beta), device, st.stream);
  };
  switch (p.epilogue) {
    case MatmulRowsEpilogue::store: gemm(matmul_rows_total(p), p.parts[0].weight, out, DType::BF16, 0.0f); break;
    case MatmulRowsEpilogue::accumulate:
      gemm(matmul_rows_total(p), p.parts[0].weight, out, DType::BF16, 1.0f);
      break;
    case MatmulRowsEpilogue::store_f32: gemm(matmul_rows_total(p), p.parts[0].weight, out, DType::F32, 0.0f); break;
    case MatmulRowsEpilogue::swiglu:
      gemm(p.parts[0].rows, p.parts[0].weight, st.gate, DType::BF16, 0.0f);
      gemm(p.parts[1].rows, p.parts[1].weight, st.up, DType::BF16, 0.0f);
      swiglu_forward_cuda(static_cast<uint16_t*>(out), st.gate, st.up, R * p.parts[0].rows, st.stream);
      break;
  }
}

// A profile's marks: an event recorded (as a graph node) before each op, and which op it opens.
struct Marks {
  std::vector<CudaEvent> events;
  std::vector<int> ops;
  const CudaStream* stream = nullptr;
  void operator()(DecodeOp op) {
    events.push_back(cuda_event_create(stream->device));
    cuda_event_record_captured(events.back(), *stream);
    ops.push_back(static_cast<int>(op));
  }
};

// Every launch of one step of the bucket (rows R, table width W) on st.stream: what a graph
// records, or what runs directly. marks (nullable): a profile's events between the ops.
// gemms: the products through cuBLASLt where it takes them (steps above decode_fused_rows).
void launch_step(const CudaModel& m, const CudaKVCache& cache, const CudaDecodeState& st, int64_t R, int64_t W,
                 bool gemms, Marks* marks = nullptr) {
  const QwenConfig& c = m.config();
  const int64_t C = c.hidden_size, V = c.vocab_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const PagedKVCache& book = cache.book;
  const int32_t* tokens = st.ints;
  const int32_t* positions = st.ints + R;
  const int32_t* slots = st.ints + 2 * R;
  const int32_t* tables = st.ints + 3 * R;
  const CudaStream& s = st.stream;
  const CudaWeights w = bf16_weights(m);
  const DecodeQkvShape qkv_shape{c.num_attention_heads, c.num_key_value_heads, c.head_dim, eps,
                                 static_cast<float>(c.rope_theta)};
  const AttentionShape shape{c.num_attention_heads, c.num_key_value_heads, c.head_dim};
  const PagedQueries queries{R, tables, W, positions, book.block_size};
  auto product = [&](const MatmulRowsProblem& p, void* out, const uint16_t* x) {
    if (gemms && gemm_takes(p))
      gemm_product(p, out, x, R, st, m.device);
    else
      matmul_rows_cuda(bind(p, out, x, R), st.gemm_ws, st.gemm_ws_bytes, s);
  };
  auto mark = [&](DecodeOp op) {
    if (marks) (*marks)(op);
  };
  mark(DecodeOp::embed);
  embedding_forward_cuda(st.x, w.embed, tokens, R, V, C, s);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const CudaLayerWeights& lw = w.layers[l];
    const LayerProducts p = layer_products(c, lw);
    uint16_t* kc = layer_cache(cache.k, book, l);
    uint16_t* vc = layer_cache(cache.v, book, l);
    mark(DecodeOp::norm);
    rmsnorm_forward_cuda(st.ln, nullptr, st.x, lw.attn_norm, R, C, eps, s);
    mark(DecodeOp::qkv);
    product(p.qkv, st.qkv, st.ln);
    mark(DecodeOp::prologue);
    decode_qkv_cuda(st.q, kc, vc, st.qkv, lw.q_norm, lw.k_norm, positions, slots, R, qkv_shape, s);
    mark(DecodeOp::attention);
    paged_attention_cuda(st.att, st.q, kc, vc, queries, shape, W * book.block_size, st.attn_ws, st.attn_ws_bytes,
                         kPagedSplitTokens, s);
    mark(DecodeOp::o);
    product(p.o, st.x, st.att);
    mark(DecodeOp::norm);
    rmsnorm_forward_cuda(st.ln, nullptr, st.x, lw.mlp_norm, R, C, eps, s);
    mark(DecodeOp::gate_up);
    product(p.gate_up, st.h, st.ln);
    mark(DecodeOp::down);
    product(p.down, st.x, st.h);
  }
  mark(DecodeOp::norm);
  rmsnorm_forward_cuda(st.ln, nullptr, st.x, w.final_norm, R, C, eps, s);
  mark(DecodeOp::lm_head);
  product(lm_head_product(c, w), st.logits, st.ln);
  mark(DecodeOp::count);  // the end
}

// Reserves the inputs' cache rows and uploads the step's ints (after the model stream's earlier
// work); returns the bucket (R, W) the step runs as.
std::pair<int64_t, int64_t> stage_step(const CudaModel& m, CudaKVCache& cache, CudaDecodeState& st,
                                       const CachedInput* inputs, int64_t n) {
  PagedKVCache& book = cache.book;
  int64_t widest = 1;
  for (int64_t i = 0; i < n; ++i) {
    reserve_on_device(m, cache, inputs[i].sequence, 1);  // a shared last block is copied on m.stream
    widest = std::max<int64_t>(widest, static_cast<int64_t>(book.sequence(inputs[i].sequence).blocks.size()));
  }
  const int64_t R = decode_rows_bucket(n), W = decode_blocks_bucket(widest);
  ensure_capacity(m, cache, st, R, W);

  // Stage the ints in pinned memory; the upload runs on the decode stream after the model
  // stream's earlier work (prefills, block copies, the last step's sampler).
  const int slot = st.next_staging;
  st.next_staging ^= 1;
  if (st.staging_busy[slot]) cuda_event_synchronize(st.staged[slot]);
  int32_t* h = st.staging[slot];
  int32_t *tokens = h, *positions = h + R, *slots = h + 2 * R, *tables = h + 3 * R;
  std::fill(h, h + ints_for(R, W), 0);
  const int32_t bs = static_cast<int32_t>(book.block_size);
  for (int64_t i = 0; i < R; ++i) {
    if (i >= n) {  // padding: attends to nothing, writes nothing
      positions[i] = -1;
      slots[i] = -1;
      continue;
    }
    const KVSequence& seq = book.sequence(inputs[i].sequence);
    const int32_t pos = static_cast<int32_t>(seq.length);
    tokens[i] = inputs[i].tokens[0];
    positions[i] = pos;
    slots[i] = seq.blocks[pos / bs] * bs + pos % bs;
    std::copy(seq.blocks.begin(), seq.blocks.end(), tables + i * W);
  }
  cuda_event_record(st.model_ready, m.stream);
  cuda_stream_wait(st.stream, st.model_ready);
  cuda_copy_async(st.ints, h, sizeof(int32_t) * ints_for(R, W), st.stream);
  cuda_event_record(st.staged[slot], st.stream);
  st.staging_busy[slot] = true;
  return {R, W};
}

// The step's K/V are written: the sequences advance, and the model stream waits for the step.
void finish_step(const CudaModel& m, CudaKVCache& cache, CudaDecodeState& st, const CachedInput* inputs, int64_t n) {
  ++st.stats.steps;
  for (int64_t i = 0; i < n; ++i) cache.book.sequence(inputs[i].sequence).length += 1;
  cuda_event_record(st.step_done, st.stream);
  cuda_stream_wait(m.stream, st.step_done);
}

// One step of at most kDecodeMaxRows inputs; their logits stay in st.logits rows [0, n).
void run_chunk(const CudaModel& m, CudaKVCache& cache, CudaDecodeState& st, const CachedInput* inputs, int64_t n) {
  const auto [R, W] = stage_step(m, cache, st, inputs, n);
  const bool gemms = n > cache.decode_fused_rows;
  const CudaDecodeState::Key key{R, W, gemms};
  if (cache.decode_mode == CudaDecodeMode::graphs && cuda_graphs_supported()) {
    auto it = st.graphs.find(key);
    if (it == st.graphs.end() && st.seen.count(key)) {
      // Second step of this bucket: every kernel has run (and its module loaded), so capture.
      cuda_graph_begin_capture(st.stream);
      launch_step(m, cache, st, R, W, gemms);
      it = st.graphs.emplace(key, cuda_graph_end_capture(st.stream)).first;
      ++st.stats.captures;
    }
    if (it != st.graphs.end()) {
      cuda_graph_launch(it->second, st.stream);
      ++st.stats.graph_launches;
    } else {
      launch_step(m, cache, st, R, W, gemms);
      st.seen.insert(key);
      ++st.stats.eager_steps;
    }
  } else {
    launch_step(m, cache, st, R, W, gemms);
    ++st.stats.eager_steps;
  }
  finish_step(m, cache, st, inputs, n);
}

}  // namespace

const char* decode_op_name(DecodeOp op) {
  static const char* const names[] = {"embedding", "RMSNorm", "q/k/v product", "prologue (norm, RoPE, cache)",
                                      "paged attention", "o product", "gate/up product", "down product", "lm_head"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(DecodeOp::count));
  return names[static_cast<int>(op)];
}

std::vector<double> decode_step_profile_cuda(const CudaModel& m, CudaKVCache& cache,
                                             const std::vector<CachedInput>& inputs) {
  const char* why = nullptr;
  check(decode_step_supported(m, inputs, false, nullptr, &why), "decode_step_profile_cuda: ", why);
  check(static_cast<int64_t>(inputs.size()) <= kDecodeMaxRows, "decode_step_profile_cuda: ", inputs.size(),
        " rows: one step takes at most ", kDecodeMaxRows);
  check(cuda_graphs_supported(), "decode_step_profile_cuda: needs CUDA graphs");
  CudaDecodeState& st = decoder_of(m, cache);
  const int64_t n = static_cast<int64_t>(inputs.size());
  const auto [R, W] = stage_step(m, cache, st, inputs.data(), n);
  Marks marks;
  marks.stream = &st.stream;
  const bool gemms = n > cache.decode_fused_rows;
  launch_step(m, cache, st, R, W, gemms);  // once without marks: modules loaded, plans made
  cuda_graph_begin_capture(st.stream);
  launch_step(m, cache, st, R, W, gemms, &marks);
  CudaGraph graph = cuda_graph_end_capture(st.stream);
  // Replayed twice (the second is the one read): the same inputs write the same K/V rows.
  cuda_graph_launch(graph, st.stream);
  cuda_graph_launch(graph, st.stream);
  cuda_stream_synchronize(st.stream);
  std::vector<double> ms(static_cast<size_t>(DecodeOp::count), 0.0);
  for (size_t i = 0; i + 1 < marks.events.size(); ++i)
    ms[static_cast<size_t>(marks.ops[i])] += cuda_event_elapsed_ms(marks.events[i], marks.events[i + 1]);
  cuda_graph_destroy(graph);
  for (CudaEvent& e : marks.events) cuda_event_destroy(e);
  finish_step(m, cache, st, inputs.data(), n);
  return ms;
}

void decode_step_cuda(const CudaModel& m, CudaKVCache& cache, const std::vector<CachedInput>& inputs, Tensor& logits) {
  check(cache.decode_mode != CudaDecodeMode::unfused, "decode_step_cuda: the cache's decode mode is unfused");
  const char* why = nullptr;
  check(decode_step_supported(m, inputs, false, nullptr, &why), "decode_step_cuda: ", why);
  const QwenConfig& c = m.config();
  check(cache.book.layers == c.num_hidden_layers && cache.book.kv_heads == c.num_key_value_heads &&
            cache.book.head_dim == c.head_dim,
        "decode_step_cuda: the cache was made for another model shape");
  CudaDecodeState& st = decoder_of(m, cache);
  const int64_t n = static_cast<int64_t>(inputs.size()), V = c.vocab_size;
  if (n <= kDecodeMaxRows) {
    run_chunk(m, cache, st, inputs.data(), n);
    logits = view_bytes(st.arena, st.logits_offset, {n, V}, DType::F32);
    return;
  }
  // More rows than one step takes: several steps, each chunk's logits copied out.
  Device dev = cuda_device(m.device);
  // The last step's logits may be a view of the arena: a fresh tensor then (a chunk would
  // overwrite rows it still has to copy out).
  const char* arena = st.arena.defined() ? static_cast<const char*>(st.arena.data()) : nullptr;
  const char* at = logits.defined() ? static_cast<const char*>(logits.data()) : nullptr;
  const bool in_arena = arena && at && at >= arena && at < arena + st.arena.nbytes();
  if (!logits.defined() || !(logits.shape == Shape{n, V}) || logits.dtype != DType::F32 || logits.device() != dev ||
      in_arena)
    logits = empty({n, V}, DType::F32, dev);
  for (int64_t from = 0; from < n; from += kDecodeMaxRows) {
    const int64_t k = std::min(kDecodeMaxRows, n - from);
    run_chunk(m, cache, st, inputs.data() + from, k);
    model_copy(logits.data_as<float>() + from * V, st.logits, sizeof(float) * k * V, CopyKind::DeviceToDevice,
               m.stream);
  }
}

}  // namespace sqlrl

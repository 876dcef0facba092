// The memory plan: its byte counts against figures derived by hand from the published Qwen3
// configs (Qwen3-4B: 36 layers, hidden 2560, intermediate 9728, 32 query / 8 KV heads of 128,
// vocab 151936, tied embeddings) and against the functions that size the real allocations, and
// the modes it chooses (minimal recomputation, bf16 moments only when needed, offload only when
// the KV cache would otherwise fall short); LoRA on the CPU and on one GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "model/cuda_model.h"
#include "model/memory_plan.h"
#include "model/train.h"
#include "runtime/comm.h"
#include "runtime/error.h"
#include "tests/test_util.h"

namespace sqlrl {
namespace {

// Parameters counted from the architecture by hand: embedding, per layer the q/k/v/o
// projections, two norms, q/k norms and the three MLP matrices, then the final norm.
int64_t qwen3_4b_params_by_hand() {
  int64_t V = 151936, C = 2560, I = 9728, L = 36, qd = 32 * 128, kvd = 8 * 128, D = 128;
  int64_t layer = C * qd + 2 * C * kvd + qd * C + 2 * C + 2 * D + 3 * C * I;
  return V * C + L * layer + C;
}

constexpr int64_t kGiB = int64_t(1) << 30;

TrainOptions train_options(int64_t tokens, int64_t chunk, int64_t layers, int64_t recomputed) {
  TrainOptions to;
  to.max_tokens = tokens;
  to.logprob_chunk = chunk;
  if (recomputed > 0) {
    to.recompute.assign(static_cast<size_t>(layers), false);
    for (int64_t l = 0; l < recomputed; ++l) to.recompute[l] = true;
  }
  return to;
}

// The issue-22 target: Qwen3-4B GRPO with a KL reference on one 80 GB H100, 8K-token
// micro-batches, >= 40 GiB of KV cache while rollouts run.
TEST(MemoryPlan, Qwen3_4bWithKlOnAnH100LeavesFortyGibOfKvCache) {
  QwenConfig config = preset_config("qwen3-4b");
  MemoryPlanOptions o;
  o.reference_model = true;
  MemoryPlan p = plan_memory(config, o);
  const int64_t N = qwen3_4b_params_by_hand();
  ASSERT_EQ(p.num_params, N);
  ASSERT_TRUE(p.fits) << p.problem;
  EXPECT_TRUE(p.modes.bf16_moments);        // fp32 moments cannot fit beside the reference
  EXPECT_TRUE(p.modes.offload_optimizer);   // resident moments would leave < 64 trajectories
  // Resident: bf16 weights 2 + fp32 master 4 + bf16 reference 2 bytes per parameter.
  EXPECT_EQ(p.resident_bytes, 8 * N);
  // Train step: fp32 gradients 4 + bf16 moments 4 bytes per parameter + the activation state
  // that make_cuda_train_state allocates for these layers.
  const int64_t k = p.modes.recomputed_layers();
  EXPECT_EQ(p.activation_bytes, cuda_train_state_bytes(config, train_options(8192, 1024, 36, k)));
  EXPECT_EQ(p.train_bytes, 8 * N + p.activation_bytes);
  EXPECT_LE(p.peak_bytes, p.usable_bytes);
  // The fewest layers: one fewer recomputed does not fit (k = 1 stores as much as k = 0).
  ASSERT_GE(k, 2);
  const int64_t fewer = cuda_train_state_bytes(config, train_options(8192, 1024, 36, k - 1));
  EXPECT_GT(p.resident_bytes + 8 * N + fewer, p.usable_bytes);
  EXPECT_GE(p.kv_blocks * p.kv_block_bytes, 40 * kGiB);
  EXPECT_EQ(p.kv_bytes_per_token, 36 * 2 * 8 * 128 * 2);  // 144 KiB
  EXPECT_EQ(p.kv_sequences, p.kv_blocks / (8192 / 16));
}

TEST(MemoryPlan, MomentsStayFp32WhenRecomputationAloneFits) {
  QwenConfig config = preset_config("qwen3-4b");
  MemoryPlanOptions o;
  MemoryPlan p = plan_memory(config, o);
  ASSERT_TRUE(p.fits) << p.problem;
  EXPECT_FALSE(p.modes.bf16_moments);
  EXPECT_EQ(p.train_bytes, 12 * p.num_params + p.activation_bytes);  // fp32 grads 4 + moments 8
  // Forcing bf16 moments frees 4 bytes per parameter for activations: fewer layers recomputed.
  o.bf16_moments = Choice::On;
  MemoryPlan q = plan_memory(config, o);
  EXPECT_TRUE(q.modes.bf16_moments);
  EXPECT_LT(q.modes.recomputed_layers(), p.modes.recomputed_layers());
}

TEST(MemoryPlan, SmallModelNeedsNoModeAndKeepsMomentsOnTheDevice) {
  QwenConfig config = preset_config("qwen3-0.6b");
  MemoryPlanOptions o;
  o.tokens_per_micro_batch = 4096;
  o.rollout_sequence_tokens = 4096;
  o.rollout_sequences = 16;
  MemoryPlan p = plan_memory(config, o);
  ASSERT_TRUE(p.fits) << p.problem;
  EXPECT_EQ(p.modes.recomputed_layers(), 0);
  EXPECT_FALSE(p.modes.bf16_moments);
  EXPECT_FALSE(p.modes.offload_optimizer);
  EXPECT_EQ(p.kv_sequences, 16);  // exactly what the rollout wants, not the whole device
  EXPECT_EQ(p.resident_bytes, 14 * p.num_params);  // bf16 2 + master 4 + moments 8
}

// A CPU plan of short sequences: 512-token micro-batches, 4 rollouts of 1024 tokens.
MemoryPlanOptions small_cpu_options(int64_t device_bytes) {
  MemoryPlanOptions o;
  o.device = DeviceType::CPU;
  o.device_bytes = device_bytes;
  o.reserve_bytes = 0;
  o.tokens_per_micro_batch = 512;
  o.logprob_chunk_tokens = 128;
  o.rollout_sequence_tokens = 1024;
  o.rollout_sequences = 4;
  return o;
}

TEST(MemoryPlan, CpuPlanHoldsEverythingInFp32) {
  QwenConfig config = preset_config("qwen3-0.6b");
  MemoryPlanOptions o = small_cpu_options(int64_t(24) << 30);
  o.reference_model = true;
  MemoryPlan p = plan_memory(config, o);
  ASSERT_TRUE(p.fits) << p.problem;
  const int64_t N = p.num_params;
  EXPECT_EQ(p.activation_bytes, 4 * train_state_floats(config, train_options(512, 128, config.num_hidden_layers, 0)));
  const int64_t kv = 4 * (1024 / 16) * p.kv_block_bytes, logits = 4 * config.vocab_size * 4;
  // weights, reference, gradients 4 + moments 8 bytes per parameter, activations, KV, logits.
  EXPECT_EQ(p.resident_bytes, 20 * N + p.activation_bytes + kv + logits);
  EXPECT_EQ(p.peak_bytes, p.resident_bytes);
  EXPECT_EQ(p.kv_block_bytes, 2 * 28 * 16 * 8 * 128 * 4);  // fp32 K and V of 28 layers
  o.offload_optimizer = Choice::On;
  EXPECT_THROW(plan_memory(config, o), Error);
}

// LoRA on the CPU: the frozen base's fp32 weights, the adapter's A and B, their gradients and
// fp32 moments, the activations and the adapter's backward scratch, each the size the code
// allocates (make_adapter, alloc_lora_grads, lora_backward_state, make_train_state), and neither
// base gradients, base moments nor a reference copy (the base without the adapter is the reference).
TEST(MemoryPlan, LoraPricesTheAdapterAndNoBaseGradientsOrMoments) {
  QwenConfig config = preset_config("qwen3-0.6b");
  LoraConfig lora;
  lora.rank = 16;
  lora.alpha = 32;
  lora.target_pattern = "all-linear";
  MemoryPlanOptions o = small_cpu_options(int64_t(24) << 30);
  o.reference_model = true;
  const MemoryPlan full = plan_memory(config, o);
  o.lora = lora;
  const MemoryPlan p = plan_memory(config, o);
  ASSERT_TRUE(p.fits) << p.problem;

  LoraAdapter adapter = make_adapter(lora, config);
  alloc_lora_grads(adapter);
  const LoraBackward b = lora_backward_state(adapter, config, o.tokens_per_micro_batch, "test");
  const int64_t N = p.num_params, P = static_cast<int64_t>(adapter.params.size());
  const int64_t scratch = 4 * static_cast<int64_t>(b.forward.scratch.size() + b.du.size());
  // r (in + out) for each of the 7 projections of 28 layers: q 1024 -> 2048, k and v 1024 -> 1024,
  // o 2048 -> 1024, gate and up 1024 -> 3072, down 3072 -> 1024.
  EXPECT_EQ(P, 28 * 16 * (3072 + 2 * 2048 + 3072 + 2 * 4096 + 4096));
  EXPECT_EQ(p.trainable_params, P);
  EXPECT_EQ(static_cast<int64_t>(adapter.grads.size()), P);
  EXPECT_EQ(scratch, 4 * 2 * 512 * 16);
  EXPECT_EQ(p.activation_bytes, 4 * train_state_floats(config, train_options(512, 128, config.num_hidden_layers, 0)));
  const int64_t kv = 4 * (1024 / 16) * p.kv_block_bytes, logits = 4 * config.vocab_size * 4;
  // base weights 4 bytes per parameter; adapter, its gradients and moments 4 + 4 + 8 per adapter parameter.
  EXPECT_EQ(p.resident_bytes, 4 * N + 16 * P + p.activation_bytes + scratch + kv + logits);
  // Against full fine-tuning: no reference 4, gradients 4 and moments 8 bytes per base parameter.
  EXPECT_EQ(full.resident_bytes - p.resident_bytes, 16 * N - 16 * P - scratch);
  auto line = [&](const std::string& what) {
    for (const MemoryLine& l : p.resident)
      if (l.what.find(what) != std::string::npos) return l.bytes;
    return int64_t(-1);
  };
  EXPECT_EQ(line("LoRA adapter gradients (fp32)"), 4 * P);
  EXPECT_EQ(line("AdamW moments m, v (fp32, LoRA adapter)"), 8 * P);
  EXPECT_EQ(line("LoRA backward scratch"), scratch);
  EXPECT_EQ(line("reference model"), -1);
  EXPECT_NE(format_memory_plan(config, p, o).find(str_cat("LoRA rank 16: ", P, " trainable parameters")),
            std::string::npos);
}

// GRPO on one 80 GB GPU at a realistic rollout: 4K-token micro-batches and trajectories, groups
// of 8, 64 trajectories wanted, a KL reference.
MemoryPlanOptions grpo_on_one_gpu() {
  MemoryPlanOptions o;
  o.tokens_per_micro_batch = 4096;
  o.rollout_sequence_tokens = 4096;
  o.rollout_sequences = 64;
  o.min_rollout_sequences = 8;
  o.reference_model = true;
  return o;
}

LoraConfig rank16_all_linear() {
  LoraConfig lora;
  lora.rank = 16;
  lora.alpha = 32;
  lora.target_pattern = "all-linear";
  return lora;
}

// r (in + out) summed over the seven projections of one layer, times the layers: the adapter's
// parameters counted by hand from the config, to check lora_num_params against.
int64_t all_linear_params_by_hand(const QwenConfig& c, int64_t r) {
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const int64_t layer = (C + q) + 2 * (C + kv) + (q + C) + 2 * (C + I) + (I + C);
  return c.num_hidden_layers * r * layer;
}

// LoRA on CUDA, priced as the CUDA LoRA layout allocates it: the frozen base as bf16 weights only
// (2 bytes a parameter: no master, gradients or moments of its own), the adapter's fp32 master (4),
// its bf16 copy for the GEMMs (2), fp32 gradients (4) and AdamW moments (8, or 4 in bf16), the
// CUDA train state's activations plus the adapter's backward scratch, and no second copy for the
// KL reference (the base with the adapter off). Qwen3-8B and Qwen2.5-Coder-14B both fit one
// 80 GB GPU this way with KV cache for rollouts; the 14B's full fine-tuning does not (below).
TEST(MemoryPlan, LoraFitsQwen3_8bAndCoder14bOnOneGpu) {
  for (const char* preset : {"qwen3-8b", "qwen2.5-coder-14b"}) {
    SCOPED_TRACE(preset);
    const QwenConfig config = preset_config(preset);
    const LoraConfig lora = rank16_all_linear();
    MemoryPlanOptions o = grpo_on_one_gpu();
    o.lora = lora;
    const MemoryPlan p = plan_memory(config, o);
    ASSERT_TRUE(p.fits) << p.problem;
    const int64_t N = p.num_params, P = lora_num_params(lora, config), L = config.num_hidden_layers;
    ASSERT_EQ(P, all_linear_params_by_hand(config, 16));
    EXPECT_EQ(p.trainable_params, P);
    // Tiny moments: neither bf16 moments nor recomputation is needed for 4K-token micro-batches.
    EXPECT_FALSE(p.modes.bf16_moments);
    const int64_t k = p.modes.recomputed_layers();
    const int64_t moments = 8 * P;
    const int64_t resident = 2 * N + 4 * P + 2 * P + (p.modes.offload_optimizer ? 0 : moments);
    EXPECT_EQ(p.resident_bytes, resident);
    const int64_t acts = cuda_train_state_bytes(config, train_options(4096, 1024, L, k));
    const int64_t scratch = 4 * lora_backward_scratch_floats(lora, 4096);
    EXPECT_EQ(scratch, 4 * 2 * 4096 * 16);
    EXPECT_EQ(p.activation_bytes, acts);
    EXPECT_EQ(p.train_bytes, region_aligned(4 * P) + (p.modes.offload_optimizer ? 2 * region_aligned(moments / 2) : 0) +
                                 region_aligned(scratch) + acts);
    EXPECT_LE(p.peak_bytes, p.usable_bytes);
    // A positive KV budget: at least one group of 8 trajectories of 4K tokens at once.
    EXPECT_GT(p.kv_blocks, 0);
    EXPECT_GE(p.kv_sequences, 8);
    EXPECT_EQ(p.kv_blocks * p.kv_block_bytes, p.rollout_bytes);
    auto line = [&](const std::vector<MemoryLine>& lines, const std::string& what) {
      for (const MemoryLine& l : lines)
        if (l.what.find(what) != std::string::npos) return l.bytes;
      return int64_t(-1);
    };
    EXPECT_EQ(line(p.resident, "base weights (bf16, frozen; adapter off: the KL reference)"), 2 * N);
    EXPECT_EQ(line(p.resident, "LoRA adapter master A, B (fp32, rank 16"), 4 * P);
    EXPECT_EQ(line(p.resident, "LoRA adapter copy (bf16"), 2 * P);
    EXPECT_EQ(line(p.resident, "master weights"), -1);
    EXPECT_EQ(line(p.resident, "reference model"), -1);
    EXPECT_EQ(line(p.train, "LoRA adapter gradients (fp32)"), region_aligned(4 * P));
    EXPECT_EQ(line(p.train, "LoRA backward scratch"), region_aligned(scratch));
    const std::string text = format_memory_plan(config, p, o);
    EXPECT_NE(text.find(str_cat("LoRA rank 16: ", P, " trainable parameters, the base frozen (alpha 32: scale 2; "
                                "targets all-linear)")),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("peak  (fits)"), std::string::npos) << text;
  }
}

// The KL reference of a LoRA run is the base with the adapter off: it costs nothing, where full
// fine-tuning holds a second bf16 copy of the weights.
TEST(MemoryPlan, LoraKlReferenceCostsNothing) {
  const QwenConfig config = preset_config("qwen3-8b");
  MemoryPlanOptions o = grpo_on_one_gpu();
  o.lora = rank16_all_linear();
  const MemoryPlan with_kl = plan_memory(config, o);
  o.reference_model = false;
  const MemoryPlan without = plan_memory(config, o);
  EXPECT_EQ(with_kl.resident_bytes, without.resident_bytes);
  EXPECT_EQ(with_kl.train_bytes, without.train_bytes);
  EXPECT_EQ(with_kl.kv_blocks, without.kv_blocks);
  EXPECT_EQ(with_kl.modes, without.modes);
  // Full fine-tuning of the 0.6B (which fits either way): the reference is 2 bytes a parameter.
  const QwenConfig small = preset_config("qwen3-0.6b");
  MemoryPlanOptions f = grpo_on_one_gpu();
  f.bf16_moments = f.recompute = f.offload_optimizer = Choice::Off;
  const MemoryPlan full_kl = plan_memory(small, f);
  f.reference_model = false;
  EXPECT_EQ(full_kl.resident_bytes - plan_memory(small, f).resident_bytes, 2 * full_kl.num_params);
}

// Why LoRA matters on one GPU: full fine-tuning of Qwen2.5-Coder-14B needs bf16 weights 2 + fp32
// master 4 + gradients 4 + moments at least 4 bytes a parameter (14 x 14.8 B = 207 GB) before any
// activation, so no mode fits it in 80 GB; the LoRA run above does, with KV cache to spare.
TEST(MemoryPlan, FullFineTuningOfCoder14bDoesNotFitOneGpu) {
  const QwenConfig config = preset_config("qwen2.5-coder-14b");
  const MemoryPlanOptions o = grpo_on_one_gpu();
  const MemoryPlan p = plan_memory(config, o);
  EXPECT_FALSE(p.fits);
  EXPECT_TRUE(p.modes.bf16_moments);
  EXPECT_EQ(p.modes.recomputed_layers(), config.num_hidden_layers);
  EXPECT_GT(14 * p.num_params, p.usable_bytes);
  EXPECT_NE(p.problem.find("the train step needs"), std::string::npos) << p.problem;
  MemoryPlanOptions lora = o;
  lora.lora = rank16_all_linear();
  EXPECT_TRUE(plan_memory(config, lora).fits);
}

// One rank of a data-parallel job: ZeRO 1 keeps the moments of the rank's slice (the largest of
// shard_bounds, as the trainer's optimizer_slice allocates), ZeRO 2 adds the slice's reduced
// gradient (CPU; CUDA reduces it in place), ZeRO 3 the slice of the fp32 master instead of all of it (CUDA; on the CPU the fp32
// weights are the master, so ZeRO 3 holds what ZeRO 2 does); ZeRO 0 keeps every moment. Catches a
// plan that still prices every moment (or the whole master) on every rank: the prediction of a
// ZeRO run would be off by 8 (or 4) bytes a parameter x (N-1)/N.
TEST(MemoryPlan, ZeroStagesPriceOneRanksSlice) {
  QwenConfig config = preset_config("qwen3-0.6b");
  MemoryPlanOptions o = small_cpu_options(int64_t(64) << 30);
  const MemoryPlan whole = plan_memory(config, o);
  const int64_t N = whole.num_params;
  std::vector<int64_t> b = shard_bounds(N, 4);
  int64_t slice = 0;
  for (int r = 0; r < 4; ++r) slice = std::max(slice, b[r + 1] - b[r]);
  ASSERT_LT(slice, N / 3);
  o.world_size = 4;
  const MemoryPlan zero0 = plan_memory(config, o);
  EXPECT_EQ(zero0.resident_bytes, whole.resident_bytes);
  o.zero_stage = 1;
  const MemoryPlan zero1 = plan_memory(config, o);
  EXPECT_EQ(whole.resident_bytes - zero1.resident_bytes, 8 * (N - slice));
  o.zero_stage = 2;
  const MemoryPlan zero2 = plan_memory(config, o);
  EXPECT_EQ(zero2.resident_bytes - zero1.resident_bytes, 4 * slice);
  EXPECT_NE(format_memory_plan(config, zero2, o).find("data parallel: each of 4 ranks, ZeRO 2"), std::string::npos);
  o.zero_stage = 3;
  const MemoryPlan zero3 = plan_memory(config, o);
  EXPECT_EQ(zero3.resident_bytes, zero2.resident_bytes);
  EXPECT_NE(format_memory_plan(config, zero3, o).find("ZeRO 3 holds what ZeRO 2 does"), std::string::npos);

  // CUDA, every mode fixed so that the stages differ only in what they shard.
  o.device = DeviceType::CUDA;
  o.device_bytes = 80'000'000'000;
  o.bf16_moments = Choice::Off, o.recompute = Choice::Off, o.offload_optimizer = Choice::Off;
  std::vector<MemoryPlan> cuda;
  for (int stage = 0; stage <= 3; ++stage) {
    o.zero_stage = stage;
    cuda.push_back(plan_memory(config, o));
    EXPECT_TRUE(cuda.back().fits) << stage << ": " << cuda.back().problem;
  }
  EXPECT_EQ(cuda[0].resident_bytes - cuda[1].resident_bytes, 8 * (N - slice));  // the moments
  // ZeRO 2 reduce-scatters in place in the gradient buffer on CUDA: no slice buffer of its own.
  EXPECT_EQ(cuda[2].train_bytes, cuda[1].train_bytes);
  EXPECT_EQ(cuda[2].resident_bytes, cuda[1].resident_bytes);
  EXPECT_EQ(cuda[2].resident_bytes - cuda[3].resident_bytes, 4 * (N - slice));  // the master
  EXPECT_EQ(cuda[3].train_bytes, cuda[2].train_bytes);
}

TEST(MemoryPlan, SaysWhyItDoesNotFit) {
  QwenConfig config = preset_config("qwen3-4b");
  MemoryPlanOptions o;
  o.device_bytes = 40'000'000'000;  // a 40 GB card cannot hold the 4B training state
  MemoryPlan p = plan_memory(config, o);
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.problem.find("the train step needs"), std::string::npos) << p.problem;
  EXPECT_NE(format_memory_plan(config, p, o).find("does NOT fit"), std::string::npos);
  o.device_bytes = 80'000'000'000;
  o.min_rollout_sequences = 64;  // a group of 64 x 8K needs 72 GiB of KV cache
  MemoryPlan q = plan_memory(config, o);
  EXPECT_FALSE(q.fits);
  EXPECT_NE(q.problem.find("KV cache"), std::string::npos) << q.problem;
}

// kv_blocks (train --kv-cache-blocks): exactly that many blocks are priced and allocated, on the
// CPU and CUDA; a count that does not fit, or holds less than one group at the full length,
// makes the plan fail naming the key.
TEST(MemoryPlan, KvBlocksByHandAreWhatThePlanAllocates) {
  QwenConfig config = preset_config("qwen3-0.6b");
  MemoryPlanOptions o = small_cpu_options(int64_t(24) << 30);
  const MemoryPlan sized = plan_memory(config, o);
  ASSERT_TRUE(sized.fits) << sized.problem;
  EXPECT_EQ(sized.kv_blocks, 4 * (1024 / 16));  // the 4 trajectories wanted, at the full length
  o.kv_blocks = 100;
  MemoryPlan p = plan_memory(config, o);
  ASSERT_TRUE(p.fits) << p.problem;
  EXPECT_EQ(p.kv_blocks, 100);
  EXPECT_EQ(p.resident_bytes - sized.resident_bytes, (100 - sized.kv_blocks) * p.kv_block_bytes);
  EXPECT_NE(format_memory_plan(config, p, o).find("(sized by hand)"), std::string::npos);
  o.min_rollout_sequences = 2;  // a group of 2 x 1024 tokens: 128 blocks
  p = plan_memory(config, o);
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.problem.find("kv-cache-blocks 100 holds 1 trajectories of 1024 tokens; the rollout needs 2 (one "
                           "group): at least 128 blocks"),
            std::string::npos)
      << p.problem;
  o.min_rollout_sequences = 1;
  o.kv_blocks = int64_t(1) << 30;  // far more than 24 GB
  p = plan_memory(config, o);
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.problem.find("does not fit"), std::string::npos) << p.problem;
  MemoryPlanOptions g = grpo_on_one_gpu();
  g.kv_blocks = 3000;  // a group of 8 x 4096 tokens takes 2048
  p = plan_memory(config, g);
  ASSERT_TRUE(p.fits) << p.problem;
  EXPECT_EQ(p.kv_blocks, 3000);
  EXPECT_EQ(p.rollout[0].bytes, 3000 * p.kv_block_bytes);
}

// The trajectories of a mean length the cache holds: blocks over blocks per trajectory.
TEST(MemoryPlan, KvSequencesAtAMeanLength) {
  MemoryPlan p;
  p.kv_blocks = 1000;
  p.kv_block_size = 16;
  EXPECT_EQ(kv_sequences_at(p, 800), 1000 / 50);
  EXPECT_EQ(kv_sequences_at(p, 801), 1000 / 51);  // a partly filled last block is a block
  EXPECT_EQ(kv_sequences_at(p, 1), 1000);
  EXPECT_EQ(kv_sequences_at(p, 0), 0);
}

TEST(MemoryPlan, RejectsNonPositiveSizes) {
  MemoryPlanOptions options;
  options.tokens_per_micro_batch = 0;
  EXPECT_THROW(plan_memory(preset_config("qwen3-4b"), options), Error);
  EXPECT_THROW(parse_choice("maybe", "--recompute"), Error);
}

std::string run(const std::string& args, int* status) {
  testing::CommandResult r = testing::run_command(std::string(SQLRL_BINARY) + " " + args);
  *status = r.exit_code;
  return r.output;
}

TEST(MemoryPlanCli, PrintsTheQwen3_4bPlanOnAnH100) {
  int status = 0;
  std::string out = run("plan --preset qwen3-4b --seq 8192 --gpu-memory 80 --kl", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("modes: recompute "), std::string::npos) << out;
  EXPECT_NE(out.find("AdamW moments bf16, moments offloaded to host during rollouts"), std::string::npos) << out;
  EXPECT_NE(out.find("peak  (fits)"), std::string::npos) << out;
  EXPECT_NE(out.find("trajectories of 8192 tokens at once"), std::string::npos) << out;
}

// --world-size: the plan is one GPU's, and its rollout holds its share of the job's trajectories
// (64 over 8 ranks: 8, whole groups of 8).
TEST(MemoryPlanCli, WorldSizeGivesEachRankItsShareOfTheRollout) {
  int status = 0;
  std::string out = run("plan --preset qwen3-8b --world-size 8 --rollout-seqs 64 --group 8 --kl", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("data parallel: each of 8 ranks (one GPU each), ZeRO 0"), std::string::npos) << out;
  EXPECT_NE(out.find("(8 wanted)"), std::string::npos) << out;
}

// SkyRL-SQL's recipe (Qwen2.5-Coder-7B-Instruct, full fine-tuning, 8 x 80 GB, trajectories of
// 9000 tokens, 1280 a step): ZeRO 0 does not fit (every rank holds the fp32 master, gradients and
// moments of all 7.6 B parameters); ZeRO 3 fits with at least 20 GiB of KV cache per GPU.
TEST(MemoryPlanCli, SevenBillionFullFineTuningFitsEightGpusWithZero3) {
  const std::string recipe = "plan --preset qwen2.5-coder-7b --gpu-memory 80 --world-size 8 --rollout-seq 9000 "
                             "--rollout-seqs 1280";
  int status = 0;
  std::string out = run(recipe, &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("peak  (does NOT fit)"), std::string::npos) << out;
  out = run(recipe + " --zero-stage 3", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("peak  (fits)"), std::string::npos) << out;
  EXPECT_NE(out.find("master weights (fp32, AdamW, this rank's ZeRO slice of 1/8)"), std::string::npos) << out;
  const size_t kv = out.find("KV cache: ");
  ASSERT_NE(kv, std::string::npos) << out;
  double gib = 0;
  ASSERT_EQ(std::sscanf(out.c_str() + kv, "KV cache: %lf GiB", &gib), 1) << out;
  EXPECT_GE(gib, 20.0) << out;
}

// --rollout-mean-tokens: beside the full-length count, the trajectories of that mean length the
// same cache holds (its tokens over the mean rounded up to blocks of 16).
TEST(MemoryPlanCli, RolloutMeanTokensShowsTheTrajectoriesInFlight) {
  int status = 0;
  std::string out = run("plan --preset qwen3-4b --gpu-memory 80 --kl --rollout-seq 8192 --rollout-mean-tokens 2000",
                        &status);
  ASSERT_EQ(status, 0) << out;
  long long tokens = 0, full = 0, flight = 0, full_again = 0;
  const size_t kv = out.find("KV cache: ");
  ASSERT_NE(kv, std::string::npos) << out;
  double gib = 0;
  ASSERT_EQ(std::sscanf(out.c_str() + kv, "KV cache: %lf GiB at %*f KiB per token = %lld tokens = %lld trajectories",
                        &gib, &tokens, &full),
            3)
      << out.substr(kv);
  const size_t mean = out.find("at a mean of 2000 tokens: ");
  ASSERT_NE(mean, std::string::npos) << out;
  ASSERT_EQ(std::sscanf(out.c_str() + mean, "at a mean of 2000 tokens: %lld trajectories in flight (optimistic "
                                            "admission, preempting when the cache runs out; %lld",
                        &flight, &full_again),
            2)
      << out.substr(mean);
  EXPECT_EQ(full, tokens / 8192);
  EXPECT_EQ(full_again, full);
  EXPECT_EQ(flight, tokens / 16 / 125);  // 2000 tokens: 125 blocks
  EXPECT_GT(flight, 3 * full);
  out = run("plan --preset qwen3-4b --gpu-memory 80", &status);
  EXPECT_EQ(out.find("at a mean of"), std::string::npos) << "shown without --rollout-mean-tokens";
}

// --lora-rank and the rest of the lora group (rl/options.h): alpha defaults to twice the rank,
// targets to all-linear; a bad value is an error naming the key and the value.
TEST(MemoryPlanCli, LoraFlagsPlanTheAdapter) {
  int status = 0;
  std::string out = run("plan --preset qwen2.5-coder-14b --lora-rank 16 --gpu-memory 80", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("trainable parameters, the base frozen (alpha 32: scale 2; targets all-linear)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("base weights (bf16, frozen)"), std::string::npos) << out;
  EXPECT_NE(out.find("peak  (fits)"), std::string::npos) << out;
  out = run("plan --preset qwen3-0.6b --lora-rank 8 --lora-alpha 4 --lora-rslora --lora-target-modules q_proj,v_proj",
            &status);
  ASSERT_EQ(status, 0) << out;
  // q: 1024 -> 2048, v: 1024 -> 1024, rank 8, 28 layers.
  EXPECT_NE(out.find(str_cat("LoRA rank 8: ", 28 * 8 * (3072 + 2048), " trainable parameters, the base frozen (alpha 4, "
                             "rsLoRA: scale 1.41421; targets q_proj,v_proj)")),
            std::string::npos)
      << out;
  out = run("plan --preset qwen3-0.6b --lora-rank 16 --lora-target-modules q_proj,lm_head", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("lora-target-modules 'q_proj,lm_head': 'lm_head' is not all-linear or one of"), std::string::npos)
      << out;
  out = run("plan --preset qwen3-0.6b --lora-rank -1", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("lora-rank must be in [0, 65536] (0 = off), got -1"), std::string::npos) << out;
  out = run("plan --preset qwen3-0.6b --lora-rank 16 --lora-target-modules v_proj,v_proj", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("names v_proj twice"), std::string::npos) << out;
  // Rank 0 is off: the full fine-tuning plan, with no LoRA line.
  out = run("plan --preset qwen3-0.6b --lora-rank 0", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(out.find("LoRA"), std::string::npos) << out;
}

TEST(MemoryPlanCli, UnknownPresetIsAnError) {
  int status = 0;
  std::string out = run("plan --preset qwen9-1t", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("qwen9-1t"), std::string::npos) << out;
}

}  // namespace
}  // namespace sqlrl

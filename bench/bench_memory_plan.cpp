// The memory plan against reality: for a Qwen3-shaped random model, each mode runs in its own
// child process what a GRPO step allocates and touches, as the trainer does it
// (rl/train_memory.h start_train_memory; a few decode steps through the KV cache; the KL
// reference's log-probs with --kl; one training forward/backward over a packed micro-batch and
// one AdamW update; the switch back to the rollout phase, which offloads the moments when the
// plan says so), and reports the plan's predicted peak next to the measured one: on the CPU
// VmHWM (the prediction adds the process's RSS before the model existed), on CUDA the caching
// allocator's peak bytes in use (the CUDA context and cuBLASLt's own workspaces are outside it,
// inside the plan's reserve).
//   bench_memory_plan [--shape qwen3-0.6b] [--tokens 512] [--device cpu|cuda] [--kl] [--memory GB]
// scripts/gpu_check.sh runs `--device cuda --shape qwen3-4b --tokens 8192 --kl`. Not a Google
// Benchmark binary: one measurement per mode, printed as a table.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "model/infer.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "rl/policy.h"
#include "rl/train_memory.h"
#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "weights/checkpoint.h"

namespace sqlrl {
namespace {

// kB fields of /proc/self/status ("VmRSS", "VmHWM").
int64_t status_bytes(const char* field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field, 0) == 0 && line[std::strlen(field)] == ':') return std::atoll(line.c_str() + std::strlen(field) + 1) * 1024;
  return -1;
}

struct Mode {
  const char* name;
  const char* recompute;
  const char* bf16;
};

struct Setup {
  QwenConfig config;
  int64_t tokens = 512;
  bool cuda = false, kl = false;
  double memory_gb = 0;
};

// In the child process only: the CUDA runtime must not be initialised before fork().
void run_mode(const Setup& su, const Mode& mode) {
  if (su.cuda && cuda_device_count() == 0) {
    std::printf("bench_memory_plan --device cuda: no CUDA device (%s); nothing measured\n",
                cuda_unavailable_reason().c_str());
    return;
  }
  const QwenConfig& config = su.config;
  const int64_t tokens = su.tokens;
  const int64_t baseline = su.cuda ? 0 : status_bytes("VmRSS");
  rl::MemoryOptions knobs;
  knobs.recompute = mode.recompute;
  knobs.bf16_moments = mode.bf16;
  knobs.memory_gb = su.memory_gb;
  const rl::PolicyBackend& backend = rl::policy_backend(su.cuda ? DeviceType::CUDA : DeviceType::CPU);
  MemoryPlanOptions o = rl::memory_plan_options(knobs, backend);
  o.tokens_per_micro_batch = tokens;
  o.rollout_sequence_tokens = su.cuda ? 8192 : tokens;
  o.rollout_sequences = su.cuda ? 64 : 4;
  o.min_rollout_sequences = 4;
  o.reference_model = su.kl;
  const MemoryPlan plan = plan_memory(config, o);
  check(plan.fits, plan.problem);

  QwenModel model = make_model(config);
  init_random_weights(model, 1, 0.02f);
  rl::Policy policy = rl::training_policy(backend, model, {});
  rl::Policy reference;
  if (su.kl) reference = rl::frozen_policy(backend, model);
  rl::OptimizerState opt = rl::fresh_optimizer_state(backend, model.num_params, plan.modes.bf16_moments);
  TrainOptions to;
  to.max_tokens = o.tokens_per_micro_batch;
  to.logprob_chunk = o.logprob_chunk_tokens;
  to.recompute = plan.modes.recompute;
  const AdamWConfig adamw{};
  rl::TrainMemory mem = rl::start_train_memory(policy, plan, to, o.kv_block_size, adamw, opt);

  // Rollout: 4 sequences prefilled and decoded a few steps (the KV cache and the logits rows).
  rl::PolicyKV& kv = rl::memory_for_rollout(policy, mem, opt);
  rl::PolicyLogits logits;
  std::vector<CachedInput> inputs;
  for (int s = 0; s < 4; ++s) inputs.push_back({kv_new_sequence(kv.book()), std::vector<int32_t>(16, 100 + s)});
  rl::policy_forward_cached(policy, kv, inputs, logits);
  for (int step = 0; step < 4; ++step) {
    for (CachedInput& in : inputs) in.tokens = {7};
    rl::policy_forward_cached(policy, kv, inputs, logits);
  }
  for (const CachedInput& in : inputs) kv_free(kv.book(), in.sequence);

  // Train: one packed micro-batch of `tokens` positions, the reference's log-probs, forward,
  // backward, AdamW; then back to the rollout phase (offloaded moments go to the host).
  rl::PolicyActivations& acts = rl::memory_for_train(policy, mem, opt);
  std::vector<std::vector<int32_t>> seqs(4);
  for (int s = 0; s < 4; ++s)
    for (int64_t t = 0; t < tokens / 4; ++t) seqs[s].push_back(static_cast<int32_t>((t * 31 + s * 7) % config.vocab_size));
  PackedBatch batch = pack_sequences(seqs);
  std::vector<int32_t> targets(batch.tokens.begin() + 1, batch.tokens.end());
  targets.push_back(0);
  std::vector<float> logp(targets.size()), dlogp(targets.size(), -1.0f / static_cast<float>(targets.size()));
  if (su.kl) rl::policy_forward_logprobs(reference, acts, batch, targets, logp.data());
  rl::policy_zero_grads(policy);
  rl::policy_forward_logprobs(policy, acts, batch, targets, logp.data());
  rl::policy_backward_logprobs(policy, acts, batch, targets, dlogp.data());
  const double sq = rl::policy_grad_sq_sum(policy);
  ++opt.adam_step;
  rl::policy_adamw_step(policy, opt, adamw, 1e-5f, 1.0f, sq);
  rl::memory_for_rollout(policy, mem, opt);
  if (su.cuda) cuda_synchronize();

  const int64_t peak = su.cuda ? static_cast<int64_t>(cuda_allocator_stats(0).peak_in_use) : status_bytes("VmHWM");
  const int64_t predicted = baseline + plan.peak_bytes;
  std::printf("%-28s %-62s %10.3f %10.3f %10.3f %+7.1f%%\n", mode.name, plan.modes.describe().c_str(),
              baseline / 1e9, predicted / 1e9, peak / 1e9, 100.0 * (peak - predicted) / static_cast<double>(predicted));
  if (su.cuda)
    std::printf("  KV cache %.2f GiB (%lld trajectories of 8192 tokens at once); device region %.2f GiB\n",
                plan.kv_blocks * plan.kv_block_bytes / double(int64_t(1) << 30),
                static_cast<long long>(plan.kv_sequences), plan.phase_bytes / double(int64_t(1) << 30));
  std::fflush(stdout);
}

}  // namespace
}  // namespace sqlrl

int main(int argc, char** argv) {
  std::string shape = "qwen3-0.6b";
  sqlrl::Setup su;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--kl") su.kl = true;
    else if (i + 1 < argc && a == "--shape") shape = argv[++i];
    else if (i + 1 < argc && a == "--tokens") su.tokens = std::atoll(argv[++i]);
    else if (i + 1 < argc && a == "--device") su.cuda = std::string(argv[++i]) == "cuda";
    else if (i + 1 < argc && a == "--memory") su.memory_gb = std::atof(argv[++i]);
  }
  su.config = sqlrl::preset_config(shape);
  std::printf("memory plan vs measured peak (%s) on %s: %s shape, %lld-token micro-batch%s; GB = 10^9 bytes\n",
              su.cuda ? "caching allocator" : "peak RSS", su.cuda ? "cuda" : "the CPU", shape.c_str(),
              static_cast<long long>(su.tokens), su.kl ? ", KL reference" : "");
  std::printf("%-28s %-62s %10s %10s %10s %8s\n", "mode", "plan", "baseline", "predicted", "measured", "error");
  const sqlrl::Mode cpu_modes[] = {{"store all, fp32 moments", "off", "off"},
                                   {"recompute all, fp32 moments", "on", "off"},
                                   {"recompute all, bf16 moments", "on", "on"}};
  const sqlrl::Mode cuda_modes[] = {{"the plan's choice", "auto", "auto"}};
  int failures = 0;
  for (const sqlrl::Mode& mode : su.cuda ? std::vector<sqlrl::Mode>(std::begin(cuda_modes), std::end(cuda_modes))
                                          : std::vector<sqlrl::Mode>(std::begin(cpu_modes), std::end(cpu_modes))) {
    std::fflush(stdout);  // the child must not print the parent's buffered lines again
    pid_t pid = fork();
    if (pid == 0) {
      try {
        sqlrl::run_mode(su, mode);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_memory_plan: %s: %s\n", mode.name, e.what());
        _exit(1);
      }
      std::fflush(stdout);  // _exit does not flush
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failures == 0 ? 0 : 1;
}

// The memory plan against reality on the CPU: for a Qwen3-0.6B-shaped random model, each mode
// runs in its own child process (its own peak RSS) what a GRPO step allocates and touches, as
// the trainer does it (rl/train_memory.h start_train_memory: gradients, moments, activations,
// the KV cache; then a few decode steps through the cache, one training forward/backward over a
// packed micro-batch and one AdamW update), and reports the plan's predicted peak (plus the
// process's RSS before the model existed) next to the measured VmHWM.
//   bench_memory_plan [--shape qwen3-0.6b] [--tokens 512]
// Not a Google Benchmark binary: one measurement per mode, printed as a table.
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

void run_mode(const QwenConfig& config, const Mode& mode, int64_t tokens) {
  const int64_t baseline = status_bytes("VmRSS");
  rl::MemoryOptions knobs;
  knobs.recompute = mode.recompute;
  knobs.bf16_moments = mode.bf16;
  MemoryPlanOptions o = rl::memory_plan_options(knobs, /*cuda=*/false);
  o.tokens_per_micro_batch = tokens;
  o.rollout_sequence_tokens = tokens;
  o.rollout_sequences = 4;
  o.min_rollout_sequences = 4;
  const MemoryPlan plan = plan_memory(config, o);
  check(plan.fits, plan.problem);

  QwenModel model = make_model(config);
  init_random_weights(model, 1, 0.02f);
  rl::Policy policy = rl::cpu_policy(model);
  rl::OptimizerState opt = rl::make_optimizer_state(model.num_params, plan.modes.bf16_moments);
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

  // Train: one packed micro-batch of `tokens` positions, forward, backward, AdamW.
  rl::PolicyActivations& acts = rl::memory_for_train(policy, mem, opt);
  std::vector<std::vector<int32_t>> seqs(4);
  for (int s = 0; s < 4; ++s)
    for (int64_t t = 0; t < tokens / 4; ++t) seqs[s].push_back(static_cast<int32_t>((t * 31 + s * 7) % config.vocab_size));
  PackedBatch batch = pack_sequences(seqs);
  std::vector<int32_t> targets(batch.tokens.begin() + 1, batch.tokens.end());
  targets.push_back(0);
  std::vector<float> logp(targets.size()), dlogp(targets.size(), -1.0f / static_cast<float>(targets.size()));
  rl::policy_zero_grads(policy);
  rl::policy_forward_logprobs(policy, acts, batch, targets, logp.data());
  rl::policy_backward_logprobs(policy, acts, batch, targets, dlogp.data());
  const double sq = rl::policy_grad_sq_sum(policy);
  ++opt.adam_step;
  rl::policy_adamw_step(policy, opt, adamw, 1e-5f, 1.0f, sq);

  const int64_t peak = status_bytes("VmHWM");
  const int64_t predicted = baseline + plan.peak_bytes;
  std::printf("%-28s %-44s %10.3f %10.3f %10.3f %+7.1f%%\n", mode.name, plan.modes.describe().c_str(),
              baseline / 1e9, predicted / 1e9, peak / 1e9, 100.0 * (peak - predicted) / static_cast<double>(predicted));
  std::fflush(stdout);
}

}  // namespace
}  // namespace sqlrl

int main(int argc, char** argv) {
  std::string shape = "qwen3-0.6b";
  int64_t tokens = 512;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--shape") shape = argv[++i];
    else if (std::string(argv[i]) == "--tokens") tokens = std::atoll(argv[++i]);
  }
  const sqlrl::QwenConfig config = sqlrl::preset_config(shape);
  std::printf("memory plan vs measured peak RSS on the CPU: %s shape, %lld-token micro-batch, 4 sequences of %lld "
              "tokens in the KV cache; GB = 10^9 bytes\n",
              shape.c_str(), static_cast<long long>(tokens), static_cast<long long>(tokens));
  std::printf("%-28s %-44s %10s %10s %10s %8s\n", "mode", "plan", "baseline", "predicted", "measured", "error");
  const sqlrl::Mode modes[] = {{"store all, fp32 moments", "off", "off"},
                               {"recompute all, fp32 moments", "on", "off"},
                               {"recompute all, bf16 moments", "on", "on"}};
  int failures = 0;
  for (const sqlrl::Mode& mode : modes) {
    std::fflush(stdout);  // the child must not print the parent's buffered lines again
    pid_t pid = fork();
    if (pid == 0) {
      try {
        sqlrl::run_mode(config, mode, tokens);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_memory_plan: %s: %s\n", mode.name, e.what());
        _exit(1);
      }
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failures == 0 ? 0 : 1;
}

// The devices as rows (rl/policy_backend.h): every row answers every call and its own name, a
// policy's buffers of another device are refused by name before any call reaches a backend, the
// optimizer state starts where the row keeps its moments, and the CUDA row's usability check names
// the command (the half of it a machine without a GPU can run).
#include <gtest/gtest.h>

#include <functional>

#include "rl/policy_backend.h"
#include "runtime/device.h"
#include "tests/rl_grpo/grpo_fixture.h"

namespace sqlrl::rl {
namespace {

// The error's message without the " [file:line]" the build appends (runtime/error.h).
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const size_t at = what.rfind(" [");
    return at == std::string::npos ? what : what.substr(0, at);
  }
  return "";
}

// A row with a call left out would dereference null the first time a policy of its device used
// it: every call is named here, so a new call or a new row that forgets one fails now.
TEST(PolicyBackend, EveryRowImplementsEveryCallAndIsFoundByItsName) {
  ASSERT_GE(policy_backends().size(), 2u);
  EXPECT_EQ(policy_backends().front(), &cpu_backend()) << "the CPU is the first row (the default device)";
  for (const PolicyBackend* b : policy_backends()) {
    SCOPED_TRACE(b->name);
    EXPECT_EQ(&find_backend(b->name), b);
    EXPECT_EQ(&policy_backend(b->device), b);
    EXPECT_STREQ(device_type_name(b->device), b->name);
    EXPECT_NE(backend_help().find(str_cat(b->name, " (", b->help, ")")), std::string::npos) << backend_help();
    EXPECT_GT(b->reserve_bytes, 0);
    const void* calls[] = {
        reinterpret_cast<const void*>(b->memory_bytes),      reinterpret_cast<const void*>(b->check_usable),
        reinterpret_cast<const void*>(b->frozen),            reinterpret_cast<const void*>(b->training),
        reinterpret_cast<const void*>(b->attach_lora),       reinterpret_cast<const void*>(b->base),
        reinterpret_cast<const void*>(b->kv_block_bytes),    reinterpret_cast<const void*>(b->make_kv),
        reinterpret_cast<const void*>(b->kv_book),           reinterpret_cast<const void*>(b->forward_cached),
        reinterpret_cast<const void*>(b->sample),            reinterpret_cast<const void*>(b->generate),
        reinterpret_cast<const void*>(b->init_training),     reinterpret_cast<const void*>(b->acts_options),
        reinterpret_cast<const void*>(b->training_ready),    reinterpret_cast<const void*>(b->num_trainable),
        reinterpret_cast<const void*>(b->trainable),         reinterpret_cast<const void*>(b->forward_logprobs),
        reinterpret_cast<const void*>(b->backward_logprobs), reinterpret_cast<const void*>(b->zero_grads),
        reinterpret_cast<const void*>(b->grad_sq_sum),       reinterpret_cast<const void*>(b->adamw_step),
        reinterpret_cast<const void*>(b->adamw_step_slice),  reinterpret_cast<const void*>(b->download),
        reinterpret_cast<const void*>(b->download_optimizer), reinterpret_cast<const void*>(b->upload_optimizer),
        reinterpret_cast<const void*>(b->rollout_weight_bytes), reinterpret_cast<const void*>(b->read_rollout_weights),
        reinterpret_cast<const void*>(b->write_rollout_weights),
        reinterpret_cast<const void*>(b->reduce_gradients),  reinterpret_cast<const void*>(b->gather_update),
        reinterpret_cast<const void*>(b->gather_download),   reinterpret_cast<const void*>(b->start_memory),
        reinterpret_cast<const void*>(b->memory_to_rollout), reinterpret_cast<const void*>(b->memory_to_train),
        reinterpret_cast<const void*>(b->memory_optimizer_to_host), reinterpret_cast<const void*>(b->live_modes)};
    for (size_t i = 0; i < std::size(calls); ++i) EXPECT_NE(calls[i], nullptr) << "call " << i;
  }
  // The message every command's --device check shows (tests of sft, eval, generate read it).
  EXPECT_EQ(message_of([] { find_backend("tpu"); }), "device 'tpu' is not cpu or cuda");
}

// A cache or activations of one device handed with a policy of another would have the backend
// read the wrong half of them (an empty host cache, or device pointers on the host).
TEST(PolicyBackend, BuffersOfAnotherDeviceAreRefusedByName) {
  QwenModel model = sqlrl::testing::random_model(sqlrl::testing::tiny_config(), 1);
  const Policy policy = frozen_policy(cpu_backend(), model);
  EXPECT_EQ(policy_device(policy), DeviceType::CPU);
  PolicyKV kv = make_policy_kv(policy, 4, 4);
  PolicyLogits logits;
  const int64_t h = kv_new_sequence(kv.book());
  policy_forward_cached(policy, kv, {{h, {1, 2, 3}}}, logits);  // its own device's cache: runs
  EXPECT_EQ(logits.host.size(), static_cast<size_t>(model.config.vocab_size));
  kv.backend = &cuda_backend();
  EXPECT_EQ(message_of([&] { policy_forward_cached(policy, kv, {{h, {4}}}, logits); }),
            "policy: the KV cache is on cuda, the policy on cpu");

  Policy trained = training_policy(cpu_backend(), model, {});
  TrainOptions to;
  to.max_tokens = 16;
  PolicyActivations acts = policy_init_training(trained, to, AdamWConfig{});
  acts.backend = &cuda_backend();
  PackedBatch batch = pack_sequences({{1, 2, 3}});
  std::vector<float> lp(3);
  EXPECT_EQ(message_of([&] { policy_forward_logprobs(trained, acts, batch, {2, 3, 4}, lp.data()); }),
            "policy: the activations are on cuda, the model on cpu");
}

// The trainers start from this state: on the CPU the moments are the state's own (AdamW reads
// them), on CUDA the device holds them and the host keeps only the counters (a host copy there
// would take 8 bytes per parameter for nothing, and be mistaken for a resumed run's moments).
TEST(PolicyBackend, FreshOptimizerStateHoldsTheMomentsWhereTheRowKeepsThem) {
  const OptimizerState cpu = fresh_optimizer_state(cpu_backend(), 10, true);
  EXPECT_EQ(moments_size(cpu), 10);
  EXPECT_TRUE(cpu.bf16);
  const OptimizerState cuda = fresh_optimizer_state(cuda_backend(), 10, true);
  EXPECT_EQ(moments_size(cuda), 0);
  EXPECT_TRUE(cuda.bf16);
  EXPECT_TRUE(cpu_backend().host_moments && !cuda_backend().host_moments);
}

// A LoRA trainer's policy carries its adapter on the CPU as on CUDA: the row attaches it.
TEST(PolicyBackend, TrainingPolicyAttachesTheSpecsAdapter) {
  QwenModel model = sqlrl::testing::random_model(sqlrl::testing::tiny_config(), 2);
  LoraConfig lc;
  lc.rank = 2, lc.alpha = 4, lc.target_pattern = "all-linear";
  LoraAdapter adapter = init_adapter(lc, model.config, 3);
  Policy p = training_policy(cpu_backend(), model, {&adapter, 0, -1, false, 0});
  EXPECT_EQ(p.lora, &adapter);
  EXPECT_EQ(policy_num_trainable(p), adapter.num_params);
}

// Without a GPU the CUDA row refuses before anything runs, naming the command; with one, a
// head_dim the attention kernels do not take is named. The CPU row runs any model.
TEST(PolicyBackend, TheCudaRowNamesWhyItCannotRun) {
  EXPECT_EQ(message_of([] { check_backend_usable(cpu_backend(), "eval", 16); }), "");
  const std::string why = message_of([] { check_backend_usable(cuda_backend(), "eval", 16, "use 64"); });
  if (cuda_device_count() == 0) {
    EXPECT_EQ(why.rfind("eval: --device cuda: ", 0), 0u) << why;
  } else {
    EXPECT_NE(why.find("eval: --device cuda: the model's head_dim is 16"), std::string::npos) << why;
    EXPECT_NE(why.find("(use 64)"), std::string::npos) << why;
  }
  EXPECT_EQ(message_of([] { check_backend_usable(cuda_backend(), "", 0); }).rfind("device cuda: ", 0),
            cuda_device_count() == 0 ? 0u : std::string::npos);
}

}  // namespace
}  // namespace sqlrl::rl

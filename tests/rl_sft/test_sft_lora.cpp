// SFT of a LoRA adapter (SftRunOptions::adapter): the base's bytes never change, the loss falls,
// checkpoints hold the adapter in PEFT's files and the adapter's moments, and a run continued
// from a checkpoint ends on the uninterrupted run's adapter and moments, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "rl/run_folder.h"
#include "rl/sft/sft.h"
#include "runtime/gemm.h"
#include "tests/model/fixture.h"
#include "tests/rl_sft/sft_fixture.h"
#include "weights/safetensors.h"

namespace sqlrl::rl {
namespace {
namespace fs = std::filesystem;

using testing::sft_model;
using testing::sft_temp_dir;
using testing::sft_tokenizer;

std::vector<SftSequence> lora_data() {
  std::vector<SftSequence> out;
  const char* sqls[] = {"SELECT count(*) FROM city", "SELECT name FROM city", "SELECT id FROM city ORDER BY id",
                        "SELECT name FROM city WHERE population > 1000", "SELECT population FROM city"};
  for (const char* sql : sqls)
    out.push_back(tokenize_segments(
        sft_tokenizer(), {{"<|im_start|>user\nHow many cities are there?<|im_end|>\n<|im_start|>assistant\n", false},
                          {std::string("<sql>") + sql + "</sql><|im_end|>", true}}));
  return out;
}

SftConfig lora_sft_config() {
  SftConfig c;
  c.lr = 2e-2f;
  c.epochs = 4;
  c.max_steps = 8;
  c.micro_batch_tokens = 48;
  c.grad_accum = 2;
  c.save_every = 4;
  return c;
}

LoraAdapter lora_of(const QwenModel& model, uint64_t seed) {
  LoraConfig c;
  c.rank = 4;
  c.alpha = 8;
  c.target_pattern = "all-linear";
  return init_adapter(c, model.config, seed);
}

TEST(SftLora, TrainsTheAdapterAloneAndResumesBitForBit) {
  const std::string root = sft_temp_dir() + "/lora";
  fs::remove_all(root);
  const int64_t vocab = static_cast<int64_t>(sft_tokenizer().size());
  QwenModel model = sft_model(vocab);
  const std::vector<float> base = model.params;
  LoraAdapter adapter = lora_of(model, 3);
  const std::vector<float> initial = adapter.params;
  OptimizerState opt;
  SftRunOptions ro;
  ro.out_dir = root + "/full", ro.tokenizer_path = "";
  ro.adapter = &adapter;
  const SftRunStats st = run_sft(model, opt, lora_data(), lora_sft_config(), ro);
  ASSERT_EQ(st.updates, 8);
  EXPECT_TRUE(model.params == base) << "LoRA SFT changed the frozen base";
  EXPECT_FALSE(adapter.params == initial);
  EXPECT_LT(st.last_loss, st.first_loss);
  EXPECT_EQ(moments_size(opt), adapter.num_params);
  const std::string last = root + "/full/checkpoints/step-8";
  EXPECT_TRUE(fs::exists(last + "/adapter_model.safetensors"));
  EXPECT_FALSE(fs::exists(last + "/model.safetensors")) << "a LoRA checkpoint wrote the frozen base";
  EXPECT_TRUE(load_adapter(last, model).params == adapter.params);

  // Continue from step 4 in a copy of the run.
  const std::string run = root + "/from4";
  fs::copy(root + "/full", run, fs::copy_options::recursive);
  fs::remove_all(run + "/checkpoints/step-8");
  const std::string ckpt = resolve_checkpoint(run);
  ASSERT_EQ(fs::path(ckpt).filename().string(), "step-4");
  SftCheckpoint ck = read_sft_checkpoint(ckpt);
  QwenModel model2 = sft_model(vocab);
  LoraAdapter adapter2 = lora_of(model2, 99);  // replaced by the checkpoint's
  load_checkpoint_weights(ckpt, model2, &adapter2);
  EXPECT_FALSE(adapter2.params == adapter.params);
  OptimizerState opt2 = load_optimizer(ckpt + "/optimizer.safetensors", adapter2.num_params);
  SftRunOptions ro2;
  ro2.out_dir = run, ro2.tokenizer_path = "";
  ro2.resume = &ck;
  ro2.adapter = &adapter2;
  const SftRunStats st2 = run_sft(model2, opt2, lora_data(), SftConfig{}, ro2);
  EXPECT_EQ(st2.updates, 4);
  EXPECT_TRUE(adapter2.params == adapter.params);
  EXPECT_EQ(opt2.m, opt.m);
  EXPECT_EQ(opt2.v, opt.v);
  EXPECT_TRUE(model2.params == base);
}

}  // namespace
}  // namespace sqlrl::rl

namespace sqlrl::rl {
namespace {

// An adapter trained here, read by PEFT: SFT of a rank-4 adapter for a few updates on the base of
// tests/fixtures/model/qwen3_tied, then tools/make_lora_fixtures.py --trained loaded the saved
// adapter with PeftModel.from_pretrained and wrote its float64 logits on the base fixture's batch
// (tests/fixtures/lora/trained_qwen3_tied). The test trains the same adapter again (it must be the
// committed one, so the fixture follows the trainer) and checks this project's logits of base +
// that adapter against PEFT's. SQLRL_LORA_TRAINED_DIR=DIR saves the adapter it trained into DIR
// (how the fixture was made: tests/fixtures/lora/README.md).
TEST(SftLora, AnAdapterTrainedHereGivesPeftsLogits) {
  const std::string fixture = testing::fixture_path("lora/trained_qwen3_tied");
  QwenModel base = load_model(testing::fixture_path("model/qwen3_tied"));
  LoraConfig lc;
  lc.rank = 4;
  lc.alpha = 8;
  lc.target_pattern = "all-linear";
  LoraAdapter adapter = init_adapter(lc, base.config, 5);
  // Token runs of the fixture's vocabulary: the second half of each trained.
  std::vector<SftSequence> data;
  const int64_t V = base.config.vocab_size;
  for (int s = 0; s < 6; ++s) {
    SftSequence q;
    for (int t = 0; t < 12 + 2 * s; ++t) {
      q.tokens.push_back(static_cast<int32_t>((7 * t + 13 * s + 3) % V));
      q.mask.push_back(t >= 6 + s ? 1 : 0);
    }
    data.push_back(q);
  }
  SftConfig cfg;
  cfg.lr = 5e-2f;
  cfg.max_steps = 6;
  cfg.epochs = 6;
  cfg.micro_batch_tokens = 64;
  cfg.warmup_ratio = 0;
  OptimizerState opt;
  SftRunOptions ro;
  ro.adapter = &adapter;
  set_gemm_thread_independent(true);  // the same bits on any core count (runtime/gemm.h)
  run_sft(base, opt, data, cfg, ro);
  set_gemm_thread_independent(false);
  if (const char* dir = std::getenv("SQLRL_LORA_TRAINED_DIR")) save_adapter(adapter, dir);

  const LoraAdapter committed = load_adapter(fixture, base);
  ASSERT_EQ(committed.num_params, adapter.num_params);
  // The committed adapter is this trainer's. Other compiler flags or BLAS kernels round the f32
  // sums differently (the -O1 sanitizer build: 2e-4 of the largest value, 6e-6 in L2), and AdamW's
  // m / sqrt(v) passes such differences on in full where a gradient is near zero; a changed
  // trainer (another scale, update or init) moves the adapter by tens of percent.
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < adapter.num_params; ++i) {
    diff += (double(adapter.params[i]) - committed.params[i]) * (double(adapter.params[i]) - committed.params[i]);
    norm += double(committed.params[i]) * committed.params[i];
  }
  const double rel = std::sqrt(diff / norm);
  std::printf("retrained adapter vs the committed one: %.3g relative L2\n", rel);
  EXPECT_LE(rel, 1e-3) << "the trainer no longer makes the committed adapter (regenerate the fixture?)";

  const SafetensorsFile expected = open_safetensors(fixture + "/expected.safetensors");
  auto ints = [&](const char* name) {
    const Tensor t = tensor_view(expected, *expected.find(name));
    return std::vector<int32_t>(t.data_as<int32_t>(), t.data_as<int32_t>() + t.numel());
  };
  PackedBatch batch;
  batch.tokens = ints("tokens");
  batch.positions = ints("positions");
  batch.cu_seqlens = ints("cu_seqlens");
  const std::vector<float> want = to_floats(tensor_view(expected, *expected.find("logits")));
  auto logits_of = [&](const LoraAdapter* lora) {
    TrainState state = make_train_state(base.config, testing::options(batch.num_tokens()));
    std::vector<float> out(static_cast<size_t>(batch.num_tokens() * V));
    forward_logits(base, state, batch, out.data(), lora);
    return out;
  };
  // test_lora.cpp's budget for PEFT's logits (f32 sums against float64).
  const double err = testing::scaled_max_error(logits_of(&committed), want);
  const double moved = testing::scaled_max_error(logits_of(nullptr), want);
  // The adapter as retrained here, through PEFT's logits: the same budget widened by its distance
  // from the committed one.
  const double again = testing::scaled_max_error(logits_of(&adapter), want);
  std::printf("trained adapter: logits vs PEFT's %.3g of the largest (retrained here: %.3g); the base alone %.3g\n",
              err, again, moved);
  EXPECT_LE(err, 1e-4);
  EXPECT_LE(again, 1e-2);
  EXPECT_GT(moved, 1e-2) << "the trained adapter must move the logits well past the budget";
}

}  // namespace
}  // namespace sqlrl::rl

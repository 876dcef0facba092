// SFT of a LoRA adapter (SftRunOptions::adapter): the base's bytes never change, the loss falls,
// checkpoints hold the adapter in PEFT's files and the adapter's moments, and a run continued
// from a checkpoint ends on the uninterrupted run's adapter and moments, bit for bit.
#include <gtest/gtest.h>

#include <filesystem>

#include "rl/run_folder.h"
#include "rl/sft/sft.h"
#include "tests/rl_sft/sft_fixture.h"

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
  SftRunOptions ro{root + "/full", "", {}};
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
  SftRunOptions ro2{run, "", {}};
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

// `llm_sqlrl merge` and `--adapter` end to end on the LoRA fixtures (tests/fixtures/lora: PEFT
// adapters on the fixture models, with PEFT's merge_and_unload logits): the merged checkpoint
// loads with load_model and gives PEFT's merged logits; its default dtype is the base's; generate
// --adapter decodes what the merged checkpoint decodes; and the refusals say what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fixture.h"
#include "model/lora.h"
#include "runtime/device.h"
#include "runtime/file_io.h"
#include "tests/test_util.h"

namespace sqlrl {
namespace {

namespace fs = std::filesystem;

// test_lora.cpp's budget for fp32 logits against PEFT's float64 ones (its comment says why).
constexpr double kLogitBudget = 1e-4;

std::string bin() { return SQLRL_BINARY; }

testing::CommandResult merge(const std::string& name, const std::string& out, const std::string& extra = "") {
  return testing::run_command(bin() + " merge --weights " + testing::fixture_path("model/" + name) + " --adapter " +
                              testing::fixture_path("lora/" + name) + " --out " + out + extra);
}

fs::path fresh(const std::string& name) {
  const fs::path p = testing::process_temp_path("merge_cli_" + name);
  fs::remove_all(p);
  return p;
}

std::vector<float> logits_of(const QwenModel& model, const PackedBatch& batch) {
  const int64_t T = batch.num_tokens();
  TrainState state = make_train_state(model.config, testing::options(T));
  std::vector<float> logits(static_cast<size_t>(T * model.config.vocab_size), NAN);
  forward_logits(model, state, batch, logits.data());
  return logits;
}

// The fixture's packed batch and PEFT's expected logits (tests/fixtures/lora/<name>/expected.safetensors).
testing::ModelFixture expected_of(const std::string& name) {
  testing::ModelFixture f;
  f.folder = testing::fixture_path("lora/" + name);
  f.expected = open_safetensors(f.folder + "/expected.safetensors");
  f.batch.tokens = f.ints("tokens");
  f.batch.positions = f.ints("positions");
  f.batch.cu_seqlens = f.ints("cu_seqlens");
  return f;
}

class MergeCli : public ::testing::TestWithParam<const char*> {};

TEST_P(MergeCli, F32CheckpointGivesPeftsMergeAndUnloadLogits) {
  const std::string name = GetParam();
  const fs::path out = fresh(name + "_f32");
  testing::CommandResult r = merge(name, out.string(), " --dtype f32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const QwenModel merged = load_model(out.string());
  const testing::ModelFixture f = expected_of(name);
  const std::vector<float> want = f.floats("merged_logits");
  const double err = testing::scaled_max_error(logits_of(merged, f.batch), want);
  const double base = testing::scaled_max_error(logits_of(load_model(testing::fixture_path("model/" + name)), f.batch), want);
  std::printf("%s: merged checkpoint's logits vs PEFT merge_and_unload %.3g (budget %g); the base alone %.3g\n",
              name.c_str(), err, kLogitBudget, base);
  EXPECT_LE(err, kLogitBudget);
  EXPECT_GT(base, 100 * kLogitBudget) << "the adapter must move the logits past the budget";
  const nlohmann::json config = nlohmann::json::parse(read_file_text((out / "config.json").string()));
  EXPECT_EQ(config["torch_dtype"], "float32");
  // The base's generation_config.json (the fixtures have no tokenizer.json to copy).
  EXPECT_EQ(read_file_text((out / "generation_config.json").string()),
            read_file_text(testing::fixture_path("model/" + name + "/generation_config.json")));
}

// The fixture bases are stored in bf16, so the default writes bf16: the f32 merge rounded to
// nearest even, tensor for tensor.
TEST_P(MergeCli, DefaultDtypeIsTheBasesBf16) {
  const std::string name = GetParam();
  const fs::path out = fresh(name + "_auto");
  testing::CommandResult r = merge(name, out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("bf16 weights"), std::string::npos) << r.output;
  const SafetensorsFile file = open_safetensors((out / "model.safetensors").string());
  for (const TensorEntry& e : file.tensors) EXPECT_EQ(e.dtype, StDType::BF16) << e.name;
  const nlohmann::json config = nlohmann::json::parse(read_file_text((out / "config.json").string()));
  EXPECT_EQ(config["torch_dtype"], "bfloat16");

  QwenModel want = load_model(testing::fixture_path("model/" + name));
  merge_adapter(want, load_adapter(testing::fixture_path("lora/" + name), want));
  std::vector<uint16_t> bits(want.params.size());
  convert_f32_to_bf16(want.params.data(), bits.data(), bits.size());
  convert_bf16_to_f32(bits.data(), want.params.data(), bits.size());
  EXPECT_EQ(load_model(out.string()).params, want.params);
}

// generate --adapter (base + adapter, unmerged) decodes the merged checkpoint's greedy tokens,
// which differ from the base's.
TEST_P(MergeCli, GenerateWithAdapterDecodesAsTheMergedCheckpoint) {
  const std::string name = GetParam();
  const fs::path out = fresh(name + "_gen");
  ASSERT_EQ(merge(name, out.string(), " --dtype f32").exit_code, 0);
  const std::string args = " --prompt-ids 5,17,42,99,3,200,64 --print-ids --temperature 0 --max-new-tokens 24";
  const std::string base = testing::fixture_path("model/" + name);
  testing::CommandResult with = testing::run_command(bin() + " generate --weights " + base + " --adapter " +
                                                     testing::fixture_path("lora/" + name) + args);
  testing::CommandResult merged = testing::run_command(bin() + " generate --weights " + out.string() + args);
  testing::CommandResult alone = testing::run_command(bin() + " generate --weights " + base + args);
  ASSERT_EQ(with.exit_code, 0) << with.output;
  ASSERT_EQ(merged.exit_code, 0) << merged.output;
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  std::printf("%s: with the adapter: %s", name.c_str(), with.output.c_str());
  EXPECT_EQ(with.output, merged.output);
  EXPECT_NE(with.output, alone.output) << "generate --adapter decodes the base's tokens: the adapter was dropped";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MergeCli, ::testing::Values("qwen3_tied", "qwen2_untied"));

TEST(MergeCliErrors, RefusesAFolderInUseMissingFilesAndAnotherShape) {
  const fs::path root = fresh("errors");
  // --out that holds something: refused before anything is read or written.
  fs::create_directories(root / "used");
  std::ofstream(root / "used" / "keep.txt") << "mine\n";
  testing::CommandResult used = merge("qwen3_tied", (root / "used").string());
  EXPECT_NE(used.exit_code, 0);
  EXPECT_NE(used.output.find("exists and is not an empty folder"), std::string::npos) << used.output;
  EXPECT_EQ(read_file_text((root / "used" / "keep.txt").string()), "mine\n");

  // A folder without PEFT's files.
  fs::create_directories(root / "empty_adapter");
  testing::CommandResult missing = testing::run_command(
      bin() + " merge --weights " + testing::fixture_path("model/qwen3_tied") + " --adapter " +
      (root / "empty_adapter").string() + " --out " + (root / "out1").string());
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("empty_adapter/adapter_config.json"), std::string::npos) << missing.output;
  EXPECT_FALSE(fs::exists(root / "out1"));

  // An adapter laid out for another shape (intermediate_size 96, the base's is 128): the error
  // names the tensor and both shapes, and nothing is written.
  QwenModel base = load_model(testing::fixture_path("model/qwen3_tied"));
  QwenConfig other = base.config;
  other.intermediate_size = 96;
  LoraConfig lc;
  lc.rank = 4;
  lc.target_pattern = "all-linear";
  save_adapter(init_adapter(lc, other, 1), (root / "other_adapter").string());
  testing::CommandResult shape = testing::run_command(
      bin() + " merge --weights " + testing::fixture_path("model/qwen3_tied") + " --adapter " +
      (root / "other_adapter").string() + " --out " + (root / "out2").string());
  EXPECT_NE(shape.exit_code, 0);
  EXPECT_NE(shape.output.find("model.layers.0.mlp.gate_proj.lora_B.weight' has shape [96, 4], expected [128, 4]"),
            std::string::npos)
      << shape.output;
  EXPECT_FALSE(fs::exists(root / "out2"));
}

// --adapter with --device cuda runs the adapter unmerged on the device (tests/rl_cuda checks it
// against the CPU): it is no longer refused, and without a GPU the one-line failure is the
// device's (checked before anything is loaded), never the adapter's.
TEST(MergeCliErrors, AdapterOnCudaIsNotRefused) {
  const std::string adapter = testing::fixture_path("lora/qwen3_tied");
  for (const std::string& cmd :
       {bin() + " generate --weights " + testing::fixture_path("model/qwen3_tied") + " --adapter " + adapter +
            " --device cuda --prompt-ids 5,6 --print-ids",
        bin() + " eval --weights " + testing::fixture_path("model/qwen3_tied") + " --adapter " + adapter +
            " --device cuda --dataset spider:/nonexistent"}) {
    testing::CommandResult r = testing::run_command(cmd);
    EXPECT_EQ(r.output.find("merge it first"), std::string::npos) << cmd << "\n" << r.output;
    EXPECT_EQ(r.output.find("not implemented"), std::string::npos) << cmd << "\n" << r.output;
    // The fixture's head_dim 16 (or the missing dataset) stops it on a GPU too.
    EXPECT_NE(r.exit_code, 0);
    if (cuda_device_count() == 0) {
      EXPECT_NE(r.output.find("device cuda"), std::string::npos) << cmd << "\n" << r.output;
    }
  }
}

}  // namespace
}  // namespace sqlrl

// `llm_sqlrl inspect` end to end: the binary on the transformers-made fixtures and on a bad file.
#include <gtest/gtest.h>

#include <string>

#include "tests/test_util.h"
#include "tests/weights/weights_test_util.h"

namespace sqlrl {
namespace {

// The built binary with these arguments, stdout and stderr together.
testing::CommandResult run_binary(const std::string& args) {
  return testing::run_command(std::string(SQLRL_BINARY) + " " + args);
}

TEST(InspectCli, PrintsConfigTensorsAndTotalsForShardedFixture) {
  auto run = run_binary("inspect " + testing::fixture_path("weights/qwen3_bias_sharded"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("architecture      : Qwen3ForCausalLM"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("biases            : q, k, v, o"), std::string::npos) << run.output;
  // 2 * 256*64 (embed, lm_head) + 2 layers * (2*64*64 q/o + 2*32*64 k/v + 3*64*128 mlp
  // + 64+32+32+64 biases + 2*64 norms + 2*16 q/k norms) + 64 final norm
  // = 32768 + 2 * (8192 + 4096 + 24576 + 192 + 128 + 32) + 64 = 107264 f32 = 429056 bytes.
  EXPECT_NE(run.output.find("parameters: 107264 (separate lm_head)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("tensors: 33 in 3 file(s), 107264 elements, 429056 bytes"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("model.layers.1.self_attn.k_proj.bias"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("check: all 33 parameters present"), std::string::npos) << run.output;
}

TEST(InspectCli, ListsAnyTensorFileEvenWithoutAQwenConfig) {
  auto run = run_binary("inspect " + testing::fixture_path("weights/st_all_dtypes.safetensors"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("config: none"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("five_dims_u8"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("[1, 1, 1, 2, 3]"), std::string::npos) << run.output;
}

TEST(InspectCli, BadFileExitsNonZeroWithTheError) {
  testing::TempDir dir;
  std::string path = dir.file("broken.safetensors");
  testing::write_bytes(path, testing::safetensors_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                                                        "12345678"));
  auto run = run_binary("inspect " + path);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("error: " + path + ": tensor 'w' ends at byte 16"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace sqlrl

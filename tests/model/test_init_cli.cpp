// `llm_sqlrl init`: the folder it writes loads as the shape asked for, with norm weights 1, the
// other tensors N(0, std) (sample mean and std within 5 standard errors), the tokenizer beside
// them, the same bytes again for the same seed, and it refuses to write into a non-empty folder.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "model/model.h"
#include "runtime/file_io.h"
#include "tests/test_util.h"
#include "weights/config.h"

namespace sqlrl {
namespace {

namespace fs = std::filesystem;

// tie: lm_head shares the embedding (false: lm_head is drawn too).
std::string tiny_config_file(const std::string& dir, int64_t vocab = 512, bool tie = true) {
  QwenConfig c;
  c.arch = QwenArch::Qwen3;
  c.vocab_size = vocab;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.tie_word_embeddings = tie;
  fs::create_directories(dir);
  const std::string path = dir + "/config.json";
  std::ofstream(path) << config_to_json(c);
  return path;
}

testing::CommandResult init(const std::string& config, const std::string& out, int seed,
                            const std::string& extra = "", const std::string& env = "") {
  return testing::run_command(str_cat(env, SQLRL_BINARY, " init --config ", config, " --tokenizer ", SQLRL_FIXTURES_DIR,
                                      "/tokenizer/qwen3_tokenizer.json --out ", out, " --seed ", seed, " --std 0.05",
                                      extra));
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(InitCli, WritesARandomCheckpointOfTheShape) {
  const std::string root = ::testing::TempDir() + "/init_cli";
  fs::remove_all(root);
  const std::string config = tiny_config_file(root + "/shape");
  testing::CommandResult r = init(config, root + "/a", 3);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  QwenModel m = load_model(root + "/a");
  EXPECT_EQ(m.config.hidden_size, 64);
  EXPECT_EQ(m.config.num_hidden_layers, 2);
  EXPECT_TRUE(fs::exists(root + "/a/tokenizer.json"));
  double sum = 0, sq = 0;
  int64_t n = 0;
  for (const ParamView& v : m.table) {
    const float* p = m.params.data() + v.offset;
    if (v.spec.name.find("norm") != std::string::npos) {
      for (int64_t i = 0; i < v.spec.numel(); ++i) ASSERT_EQ(p[i], 1.0f) << v.spec.name;
      continue;
    }
    for (int64_t i = 0; i < v.spec.numel(); ++i) sum += p[i], sq += double(p[i]) * p[i], ++n;
  }
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_LE(std::fabs(mean), 5 * 0.05 / std::sqrt(double(n))) << mean;
  EXPECT_NEAR(sd, 0.05, 5 * 0.05 / std::sqrt(2.0 * n)) << sd;

  ASSERT_EQ(init(config, root + "/b", 3).exit_code, 0);
  EXPECT_EQ(load_model(root + "/b").params, m.params);  // same seed, same weights
  ASSERT_EQ(init(config, root + "/c", 4).exit_code, 0);
  EXPECT_NE(load_model(root + "/c").params, m.params);

  testing::CommandResult again = init(config, root + "/a", 3);
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.output.find("is not an empty folder"), std::string::npos) << again.output;
}

// The seed means what it meant before init wrote its draws straight to disk: --dtype f32 writes
// the very files save_model writes of init_random_weights' model (what init wrote then), and the
// default, bf16, those of save_model(..., BF16), the same draws rounded. And the bytes do not
// depend on the thread count (SQLRL_THREADS 1, 3, 4: the writer's pool cuts its buffers at other
// elements, some inside a Philox block of four), since each element's draw is a function of its
// index alone. The vocabulary of 509 makes the cuts fall off block boundaries.
TEST(InitCli, WritesTheSeedsBytesOnAnyThreadCount) {
  const std::string root = ::testing::TempDir() + "/init_cli_bytes";
  fs::remove_all(root);
  const std::string config = tiny_config_file(root, 509, /*tie=*/false);  // lm_head drawn too
  QwenModel m = make_model(read_config_file(config));
  init_random_weights(m, 7, 0.05f);
  save_model(m, root + "/want_f32");
  save_model(m, root + "/want_bf16", DType::BF16);

  ASSERT_EQ(init(config, root + "/f32", 7, " --dtype f32").exit_code, 0);
  EXPECT_TRUE(slurp(root + "/f32/model.safetensors") == slurp(root + "/want_f32/model.safetensors"))
      << "--dtype f32 is not init_random_weights' model as save_model writes it";
  EXPECT_EQ(slurp(root + "/f32/config.json"), slurp(root + "/want_f32/config.json"));
  const std::string want = slurp(root + "/want_bf16/model.safetensors");
  for (int threads : {1, 3, 4}) {
    const std::string out = str_cat(root, "/bf16_", threads);
    testing::CommandResult r = init(config, out, 7, "", str_cat("SQLRL_THREADS=", threads, " "));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(slurp(out + "/model.safetensors") == want) << threads << " threads: not the seed's bf16 bytes";
    EXPECT_EQ(slurp(out + "/config.json"), slurp(root + "/want_bf16/config.json"));
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace sqlrl

// load_model and make_model at the boundary: a checkpoint with NaN or Inf weights and a config
// whose sizes no machine holds are errors that name the tensor or the sizes, before anything
// trains on them or asks for the memory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "fixture.h"
#include "runtime/device.h"
#include "tests/test_util.h"

namespace sqlrl {
namespace {

namespace fs = std::filesystem;

using sqlrl::testing::error_of;

// Catches: a loader that copies weights without looking at them (NaN log-probs at step 1 of
// train, eval and generate, or a NaN checkpoint resumed without a word).
TEST(LoadModel, NonFiniteWeightsAreRefusedNamingTheTensor) {
  QwenModel m = load_model(testing::fixture_path("model/qwen3_tied"));
  const std::string dir = (fs::temp_directory_path() / ("sqlrl_nonfinite_" + std::to_string(getpid()))).string();
  fs::remove_all(dir);
  save_model(m, dir);
  EXPECT_NO_THROW(load_model(dir));  // the clean copy loads
  const ParamView up = find_param(m, "model.layers.1.mlp.up_proj.weight");
  m.params[up.offset + 7] = NAN;
  m.params[up.offset + 9] = INFINITY;
  save_model(m, dir);
  const std::string e = error_of([&] { load_model(dir); });
  EXPECT_NE(e.find("tensor 'model.layers.1.mlp.up_proj.weight' holds 2 non-finite values (the first, nan, at element "
                   "7 of "),
            std::string::npos)
      << e;
  fs::remove_all(dir);
}

// Catches: sizes taken on trust (a std::bad_alloc, or an int64 overflow that allocates a wrong
// small buffer).
TEST(LoadModel, SizesNoMachineHoldsAreAnErrorNotABadAlloc) {
  QwenConfig c = load_model(testing::fixture_path("model/qwen3_tied")).config;
  QwenConfig absurd = c;
  absurd.hidden_size = int64_t(1) << 40;
  EXPECT_NE(error_of([&] { make_model(absurd); }).find("hidden_size 1099511627776 is beyond any Qwen model"),
            std::string::npos);
  // Within every ceiling, but 2^24 x 2^17 embeddings alone are 8 TiB of f32.
  QwenConfig big = c;
  big.vocab_size = int64_t(1) << 24;
  big.hidden_size = int64_t(1) << 17;
  big.head_dim = 128;
  big.num_attention_heads = 1024;
  big.num_key_value_heads = 1024;
  const std::string e = error_of([&] { make_model(big); });
  EXPECT_NE(e.find("GiB as f32, more than this machine's " + std::to_string(host_memory_bytes() >> 30) + " GiB"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace sqlrl

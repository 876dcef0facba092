// The sharded checkpoint reader (weights/checkpoint.h open_checkpoint): the input is
// model.safetensors.index.json, read from a scratch folder that also holds two fixed shards
// written once per process (the reader takes only a folder). Shard names the index may use:
// model-00001-of-00002.safetensors (model.embed_tokens.weight, model.norm.weight) and
// model-00002-of-00002.safetensors (lm_head.weight).
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "weights/checkpoint.h"
#include "weights/qwen_params.h"

namespace {

const std::string& checkpoint_folder() {
  static const std::string folder = [] {
    using namespace sqlrl;
    std::string dir = fuzz::scratch_dir() + "/checkpoint";
    std::filesystem::create_directories(dir);
    static const std::vector<uint16_t> embed(8 * 4, 0x3f80);  // bf16 1.0
    static const std::vector<float> norm(4, 1.0f);
    std::vector<TensorRecord> first = {
        {"model.embed_tokens.weight", StDType::BF16, {8, 4}, embed.data()},
        {"model.norm.weight", StDType::F32, {4}, norm.data()},
    };
    std::vector<TensorRecord> second = {{"lm_head.weight", StDType::BF16, {8, 4}, embed.data()}};
    WriteOptions options;
    options.sync = false;
    write_safetensors(dir + "/model-00001-of-00002.safetensors", first, options);
    write_safetensors(dir + "/model-00002-of-00002.safetensors", second, options);
    return dir;
  }();
  return folder;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sqlrl;
  const std::string& folder = checkpoint_folder();
  fuzz::write_file(folder + "/model.safetensors.index.json", fuzz::as_text(data, size));
  fuzz::expect_ok_or_error([&] {
    Checkpoint checkpoint = open_checkpoint(folder);
    for (const auto& [name, location] : checkpoint.tensors) {
      const TensorEntry* entry = checkpoint.find(name);
      if (!entry) std::abort();  // every listed tensor must be found
      (void)checkpoint.file_of(name);
    }
    // No config.json in the folder: the config is inferred from the tensors the index gave.
    fuzz::expect_ok_or_error([&] { (void)checkpoint_config(checkpoint); });
  });
  return 0;
}

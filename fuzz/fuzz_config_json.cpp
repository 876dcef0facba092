// Hugging Face config.json (weights/config.h parse_config_json). A config that parses must also
// survive the way checkpoints store it: config_to_json, parsed again, is the same config (a
// saved checkpoint that reloads as a different model is a bug even though nothing crashed).
#include <cstring>
#include <optional>

#include "fuzz/fuzz_util.h"
#include "weights/config.h"

namespace {

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool same_config(const sqlrl::QwenConfig& a, const sqlrl::QwenConfig& b) {
  return a.arch == b.arch && a.vocab_size == b.vocab_size && a.hidden_size == b.hidden_size &&
         a.intermediate_size == b.intermediate_size && a.num_hidden_layers == b.num_hidden_layers &&
         a.num_attention_heads == b.num_attention_heads && a.num_key_value_heads == b.num_key_value_heads &&
         a.head_dim == b.head_dim && same_bits(a.rms_norm_eps, b.rms_norm_eps) && same_bits(a.rope_theta, b.rope_theta) &&
         a.max_position_embeddings == b.max_position_embeddings && a.tie_word_embeddings == b.tie_word_embeddings &&
         a.attention_bias == b.attention_bias && a.torch_dtype == b.torch_dtype && a.bos_token_id == b.bos_token_id &&
         a.eos_token_ids == b.eos_token_ids;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sqlrl;
  const std::string text(fuzz::as_text(data, size));
  std::optional<QwenConfig> config;
  fuzz::expect_ok_or_error([&] { config = parse_config_json(text, "config.json"); });
  if (!config) return 0;
  (void)describe_config(*config);
  const std::string saved = config_to_json(*config);
  try {
    if (same_config(*config, parse_config_json(saved, "saved config.json"))) return 0;
    std::fprintf(stderr, "fuzz: config.json reads back as a different config; saved as:\n%s\n", saved.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: config.json does not read back: %s\nsaved as:\n%s\n", e.what(), saved.c_str());
  }
  std::abort();
}

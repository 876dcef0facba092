// SFT data (rl/sft/sft_data.h load_sft_jsonl): JSONL lines in the three shapes (chat messages
// rendered and cut into trained / masked pieces, text segments with "plain" byte ranges,
// pre-tokenised ids with a mask), tokenised with fuzz/fuzz_tokenizer.h's small BPE tokenizer.
// The loader reads a file, so the input is written to one. Both chat templates.
#include <string>

#include "fuzz/fuzz_tokenizer.h"
#include "fuzz/fuzz_util.h"
#include "rl/sft/sft_data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sqlrl;
  const Tokenizer& tok = fuzz::tiny_tokenizer();
  const std::string path = fuzz::scratch_dir() + "/sft.jsonl";
  fuzz::write_file(path, fuzz::as_text(data, size));
  for (ChatTemplate chat_template : {ChatTemplate::qwen3, ChatTemplate::qwen2_5}) {
    fuzz::expect_ok_or_error([&] {
      ChatOptions options;
      options.chat_template = chat_template;
      rl::SftLoadStats stats;
      for (const rl::SftSequence& seq : rl::load_sft_jsonl(path, tok, options, 0, &stats)) {
        if (seq.tokens.size() != seq.mask.size()) std::abort();  // every token has its mask bit
        for (int32_t id : seq.tokens)
          if (id < 0 || static_cast<size_t>(id) >= tok.size()) std::abort();  // the loader bounds ids
      }
    });
  }
  return 0;
}

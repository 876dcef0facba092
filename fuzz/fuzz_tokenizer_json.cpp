// tokenizer.json (tokenizer/tokenizer.h load_tokenizer_from_string): the normaliser,
// pre-tokenizer and decoder checks, the vocabulary, merges and added tokens. A tokenizer that
// loads is then used the way a run uses it: encode, decode and stream-decode a fixed text (so an
// accepted but inconsistent table, e.g. a merge to an id that is not there, shows up).
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "tokenizer/stream.h"
#include "tokenizer/tokenizer.h"

namespace {

// ASCII, SQL, markup, multi-byte UTF-8 (NFC-relevant: a combining accent), digits, newlines.
const char* const kTexts[] = {
    "<|im_start|>user\nHow many singers are there?<|im_end|>\n",
    "SELECT count(*) FROM singer WHERE age > 30;  -- 'x'\n\n\t",
    "caf\xC3\xA9 cafe\xCC\x81 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 12345 don't",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sqlrl;
  fuzz::expect_ok_or_error([&] {
    std::unique_ptr<Tokenizer> tok = load_tokenizer_from_string(fuzz::as_text(data, size), "tokenizer.json");
    for (size_t t = 0; t < std::size(kTexts); ++t) {
      const std::string text = kTexts[t];
      for (bool parse_added : {true, false}) {
        EncodeOptions options;
        options.parse_added_tokens = parse_added;
        std::vector<int32_t> ids = encode(*tok, text, options);
        for (int32_t id : ids)
          if (id < 0 || static_cast<size_t>(id) >= tok->size()) std::abort();  // encode gave an id it cannot decode
        // Byte-level BPE loses nothing: ASCII text (which NFC leaves alone) must come back as is.
        if (decode(*tok, ids, false) != text && t < 2) {
          std::fprintf(stderr, "fuzz: decode(encode(text)) != text for \"%s\"\n", text.c_str());
          std::abort();
        }
        (void)decode(*tok, ids, true);
        TokenStream stream(*tok, {"</sql>", "<|im_end|>"});
        for (int32_t id : ids) {
          if (stream.stopped) break;
          (void)stream.push(id);
        }
        (void)stream.finish();
      }
    }
  });
  return 0;
}

// Incremental decoding for the rollout engine: feed token ids one at a time, get the text that
// became complete (never half a UTF-8 character), and learn when any of a set of stop strings
// (`</sql>`, `</solution>`, `</tool_call>`, `<|im_end|>`, ...) has appeared, even when it
// spans several tokens. The concatenated output equals decode() of the same ids.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace sqlrl {

// Bytes in, valid UTF-8 out. Holds back only a trailing, still-completable partial character;
// an invalid sequence becomes U+FFFD exactly where utf8_lossy would put it.
struct Utf8Stream {
  std::string pending;
  std::string push(std::string_view bytes);  // the newly completed text
  std::string finish();                      // flushes a dangling partial character as U+FFFD
};

// Finds the first occurrence of any stop string in a text that arrives in chunks. Keeps only the
// last (longest stop - 1) bytes between chunks.
struct StopMatcher {
  std::vector<std::string> stops;
  std::string tail;     // end of the text seen so far, long enough to complete a stop
  size_t consumed = 0;  // bytes of text fed so far

  explicit StopMatcher(std::vector<std::string> stop_strings = {});
  struct Hit {
    int stop = -1;     // index into stops, -1 when none
    size_t begin = 0;  // byte offsets of the stop string in the whole text
    size_t end = 0;
  };
  // The earliest-starting stop string that ends inside this chunk (ties: the longer one).
  Hit feed(std::string_view chunk);
};

struct TokenStream {
  const Tokenizer* tok;
  bool skip_special = false;
  Utf8Stream utf8;
  StopMatcher matcher;
  std::string text;    // everything emitted so far
  bool stopped = false;
  int stop = -1;       // which stop string ended the stream

  TokenStream(const Tokenizer& tokenizer, std::vector<std::string> stops, bool skip_special_tokens = false);

  struct Step {
    std::string text;    // new text, cut right after the stop string when one was found
    int stop = -1;       // index of the stop string found by this token, -1 when none
    size_t overflow = 0; // bytes of this token's text past the end of the stop string (cut off)
  };
  // Pushing after the stream stopped is an error.
  Step push(int32_t id);
  Step finish();
};

}  // namespace sqlrl

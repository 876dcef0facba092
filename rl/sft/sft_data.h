// SFT data: JSONL files of multi-turn conversations turned into token ids with a loss mask
// (MTSQL-R1 §3.2.1: only what the agent generates is supervised; instructions, observations,
// tool outputs and the chat scaffolding are masked). One JSON object per line, in one of three
// shapes (extra keys are ignored, so lines can carry ids and metadata):
//
//   {"messages": [{"role", "content", ...}, ...]}  Hugging Face chat messages, rendered with the
//       chat template (tokenizer/chat_template.h). Trained: every assistant message's rendered
//       text between "<|im_start|>assistant\n" and its "<|im_end|>", that <|im_end|> included
//       (the model must learn to end its turn); the "\n" after it, role headers, system, user and
//       tool messages are masked. Whatever the template writes inside an assistant turn (Qwen3's
//       "<think>\n…\n</think>\n\n", tool-call markup) is the assistant's and trained.
//   {"segments": [{"text", "train": bool, "plain"?: [[begin, end], ...]}, ...]}  raw text pieces in order: a protocol
//       trajectory exactly as the rollout engine streams it (rendered prompt, sampled turns,
//       injected observations) — the form `sft synth-demos` writes, because SkyRL-SQL's
//       observations live inside the assistant's own stream, which chat messages cannot express.
//       "plain": byte ranges of the text that are data (schema values, question, results), where
//       added-token texts stay text, as the rollout engine encodes them (rl/agent/untrusted.h).
//   {"tokens": [ids], "mask": [0|1, ...]}            pre-tokenised; used as is.
//
// Text is tokenised segment by segment (each trained or masked piece on its own, added tokens
// such as <|im_end|> parsed), as the rollout engine tokenises prompt, turns and observations
// separately: a token never straddles a trained/masked boundary, and the ids match what the
// policy sees at rollout time.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace sqlrl::rl {

struct SftSegment {
  std::string text;
  bool train = false;
  std::vector<std::pair<size_t, size_t>> plain = {};  // data byte ranges of text (EncodeOptions::plain_ranges)
};

// A segment of protocol text as the protocols write it (untrusted() spans marked): the marks
// become `plain`, so it tokenizes exactly as the rollout engine's encode_marked().
SftSegment marked_segment(std::string_view marked, bool train);

struct SftSequence {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;  // 1 = trained: the log-prob of this token is in the loss
  std::string source;         // "file:line" for messages about it
  int64_t trained() const;    // count of mask == 1
};

// The rendered conversation cut into masked / trained pieces (see the header comment). Fails
// naming `source` when an assistant message's rendering cannot be located (a non-assistant
// message holding "<|im_start|>assistant\n", or assistant text holding "<|im_end|>").
std::vector<SftSegment> chat_segments(const std::vector<ChatMessage>& messages, const ChatOptions& options,
                                      const std::string& source);

SftSequence tokenize_segments(const Tokenizer& tok, const std::vector<SftSegment>& segments);

// One JSONL object -> a sequence; errors name `source` ("file:line") and the field.
SftSequence sft_sequence_from_json(const nlohmann::ordered_json& line, const Tokenizer& tok, const ChatOptions& options,
                                   const std::string& source);

// {"segments": [...]} plus the given extra fields, as one line (no trailing newline).
std::string segments_jsonl(const std::vector<SftSegment>& segments, const nlohmann::ordered_json& extra = {});

struct SftLoadStats {
  int64_t lines = 0, sequences = 0, skipped_no_target = 0, tokens = 0, trained_tokens = 0;
};

// Every non-blank line of `path`. Sequences with no trained token are skipped (counted); ids
// must be below vocab_limit (the model's vocabulary; 0 = the tokenizer's size).
std::vector<SftSequence> load_sft_jsonl(const std::string& path, const Tokenizer& tok, const ChatOptions& options,
                                        int64_t vocab_limit = 0, SftLoadStats* stats = nullptr);

}  // namespace sqlrl::rl

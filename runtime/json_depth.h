// Nesting depth of JSON text, checked before it is parsed. nlohmann::json parses without
// recursion, but a parsed value's dump(), copies and comparisons recurse once per level, and so
// do error messages that quote a value: a 200 KB file of 100,000 '[' crashed 13 of our parsers
// (safetensors headers, config.json, tokenizer.json, SFT JSONL) with a stack overflow. Every file
// or line a user or a model hands us is held to kJsonMaxDepth first: an error naming the source,
// never a crash. Real inputs nest a few levels (tokenizer.json: 6).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace sqlrl {

constexpr int kJsonMaxDepth = 256;

// The byte offset of the bracket at which text's arrays and objects first nest deeper than
// max_depth, or std::string_view::npos when they never do. Brackets inside strings (escaped quotes
// included) do not count; ill-formed text is the parser's to reject. Linear, no recursion.
size_t json_too_deep_at(std::string_view text, int max_depth = kJsonMaxDepth);

// fail()s with "<source>: JSON nests deeper than <max_depth> levels (at byte N)" when it does.
void check_json_depth(std::string_view text, const std::string& source, int max_depth = kJsonMaxDepth);

}  // namespace sqlrl

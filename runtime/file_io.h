// Whole-file text writes that a crash cannot leave half-written: `<path>.tmp`, then rename.
#pragma once
#include <string>

namespace sqlrl {

// Writes `text` to `<path>.tmp` and renames it over `path`; throws naming the file on failure.
void write_text_atomic(const std::string& path, const std::string& text);

}  // namespace sqlrl

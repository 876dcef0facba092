// Whole-file reads, and whole-file text writes that a crash cannot leave half-written
// (`<path>.tmp`, then rename).
#pragma once
#include <string>

namespace sqlrl {

// Writes `text` to `<path>.tmp` and renames it over `path`; throws naming the file on failure.
void write_text_atomic(const std::string& path, const std::string& text);
// The file's bytes; throws "<path>: cannot read" when it cannot be opened.
std::string read_file_text(const std::string& path);

}  // namespace sqlrl

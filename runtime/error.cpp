#include "runtime/error.h"

#include <string_view>

namespace sqlrl {

const char* relative_source_path(const char* file) {
  // Builds pass -fmacro-prefix-map, so most names are already relative to the repository root;
  // names nvcc hands through stay absolute and lose the root here.
  constexpr std::string_view root = SQLRL_SOURCE_ROOT;
  return std::string_view(file).starts_with(root) ? file + root.size() : file;
}

void throw_error(const std::string& message, SourceLocation where) {
  throw Error(str_cat(message, " [", relative_source_path(where.file_name()), ":", where.line(), "]"));
}

}  // namespace sqlrl

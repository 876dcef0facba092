#include "runtime/error.h"

#include <cstring>

namespace sqlrl {

void throw_error(const std::string& message, std::source_location where) {
  // Keep only the path below the repository root: "runtime/tensor.cpp:42", not an absolute path.
  const char* file = where.file_name();
  for (const char* marker : {"/runtime/", "/kernels/", "/weights/", "/tokenizer/", "/model/", "/sql/",
                             "/rl/", "/app/", "/tests/", "/bench/"}) {
    if (const char* at = std::strstr(file, marker)) {
      file = at + 1;
      break;
    }
  }
  throw Error(str_cat(message, " [", file, ":", where.line(), "]"));
}

}  // namespace sqlrl

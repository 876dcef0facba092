// The read-only authorizer installed on every pool connection: reads pass, everything that could
// write, escape the database file or load code is refused with a reason the model can read.
#pragma once
#include <string>

struct sqlite3;

namespace sqlrl::sql {

// State the authorizer writes its refusal reason into (one per connection).
struct AuthorizerState {
  std::string denied;  // why the last statement was refused; "" when nothing was
};

void install_read_only_authorizer(sqlite3* db, AuthorizerState* state);

// True for PRAGMAs that only read (table_info, index_list, foreign_key_list, ...).
bool is_read_only_pragma(const std::string& name, bool has_argument);

}  // namespace sqlrl::sql

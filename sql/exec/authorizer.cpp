#include "sql/exec/authorizer.h"

#include <sqlite3.h>

#include <algorithm>
#include <cctype>

#include "runtime/error.h"

namespace sqlrl::sql {

namespace {

std::string lower(const char* s) {
  std::string out = s ? s : "";
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

const char* action_name(int action) {
  switch (action) {
    case SQLITE_INSERT: return "INSERT";
    case SQLITE_UPDATE: return "UPDATE";
    case SQLITE_DELETE: return "DELETE";
    case SQLITE_ATTACH: return "ATTACH";
    case SQLITE_DETACH: return "DETACH";
    case SQLITE_TRANSACTION: return "a transaction statement";
    case SQLITE_SAVEPOINT: return "SAVEPOINT";
    case SQLITE_ALTER_TABLE: return "ALTER TABLE";
    case SQLITE_REINDEX: return "REINDEX";
    case SQLITE_ANALYZE: return "ANALYZE";
    case SQLITE_CREATE_VTABLE: return "CREATE VIRTUAL TABLE";
    case SQLITE_DROP_VTABLE: return "DROP VIRTUAL TABLE";
    case SQLITE_CREATE_INDEX: case SQLITE_CREATE_TEMP_INDEX: return "CREATE INDEX";
    case SQLITE_CREATE_TABLE: case SQLITE_CREATE_TEMP_TABLE: return "CREATE TABLE";
    case SQLITE_CREATE_TRIGGER: case SQLITE_CREATE_TEMP_TRIGGER: return "CREATE TRIGGER";
    case SQLITE_CREATE_VIEW: case SQLITE_CREATE_TEMP_VIEW: return "CREATE VIEW";
    case SQLITE_DROP_INDEX: case SQLITE_DROP_TEMP_INDEX: return "DROP INDEX";
    case SQLITE_DROP_TABLE: case SQLITE_DROP_TEMP_TABLE: return "DROP TABLE";
    case SQLITE_DROP_TRIGGER: case SQLITE_DROP_TEMP_TRIGGER: return "DROP TRIGGER";
    case SQLITE_DROP_VIEW: case SQLITE_DROP_TEMP_VIEW: return "DROP VIEW";
    default: return "this statement";
  }
}

// Functions a read-only agent never needs and that reach past SQL: load_extension runs a shared
// library's code; fts3_tokenizer (Debian's libsqlite3 is built with ENABLE_FTS3_TOKENIZER) returns
// a tokenizer module's address with one argument (an ASLR leak) and with two plants a pointer that
// a later FTS3 query on the same pooled connection calls. The connection also turns the
// two-argument form off (pool.cpp); the authorizer refuses both forms with a reason.
struct RefusedFunction {
  const char* name;
  const char* why;
};
constexpr RefusedFunction kRefusedFunctions[] = {
    {"load_extension", "the database is read-only"},
    {"fts3_tokenizer", "it reads and sets native function pointers"},
};

int authorize(void* user, int action, const char* arg1, const char* arg2, const char* /*db*/,
              const char* /*trigger*/) {
  auto* state = static_cast<AuthorizerState*>(user);
  switch (action) {
    case SQLITE_SELECT:
    case SQLITE_READ:
    case SQLITE_RECURSIVE:
      return SQLITE_OK;
    case SQLITE_FUNCTION: {
      const std::string name = lower(arg2);
      for (const RefusedFunction& f : kRefusedFunctions)
        if (name == f.name) {
          state->denied = str_cat("not authorized: ", f.name, "() is refused (", f.why, ")");
          return SQLITE_DENY;
        }
      return SQLITE_OK;
    }
    case SQLITE_UPDATE: {
      // Preparing a pragma table-valued function (pragma_table_info('t')) asks for UPDATE on
      // sqlite_master's columns although nothing is written. A real UPDATE of sqlite_master is
      // still stopped: the statement is not read-only (checked after prepare), defensive mode
      // forbids schema writes, and the file is opened read-only.
      std::string table = lower(arg1);
      if (table == "sqlite_master" || table == "sqlite_temp_master" || table == "sqlite_schema") return SQLITE_OK;
      state->denied = "not authorized: UPDATE is refused (the database is read-only)";
      return SQLITE_DENY;
    }
    case SQLITE_PRAGMA: {
      std::string name = lower(arg1);
      if (is_read_only_pragma(name, arg2 != nullptr)) return SQLITE_OK;
      state->denied = str_cat("not authorized: PRAGMA ", name, arg2 ? str_cat("=", arg2) : std::string(),
                              " is refused (only read-only PRAGMAs run)");
      return SQLITE_DENY;
    }
    default:
      state->denied = str_cat("not authorized: ", action_name(action), " is refused (the database is read-only)");
      return SQLITE_DENY;
  }
}

}  // namespace

bool is_read_only_pragma(const std::string& name, bool has_argument) {
  // Pragmas whose argument names a table or index: they only describe the schema.
  static const char* const kSchemaReaders[] = {"table_info", "table_xinfo", "index_list", "index_info",
                                               "index_xinfo", "foreign_key_list", "table_list"};
  // Pragmas that only report, and only when called without an argument (an argument sets them).
  static const char* const kReporters[] = {"database_list", "collation_list", "function_list",
                                           "pragma_list", "module_list", "compile_options",
                                           "encoding", "page_count", "page_size", "user_version",
                                           "schema_version", "application_id", "freelist_count",
                                           "data_version", "foreign_keys", "table_list"};
  for (const char* p : kSchemaReaders)
    if (name == p) return true;
  if (has_argument) return false;
  for (const char* p : kReporters)
    if (name == p) return true;
  return false;
}

void install_read_only_authorizer(sqlite3* db, AuthorizerState* state) {
  sqlite3_set_authorizer(db, authorize, state);
}

}  // namespace sqlrl::sql

// A small SQLite database made once per process for the harnesses whose parsers look databases
// up (dataset loaders, the Spider and BIRD evaluations): the fixtures' concert database.
#pragma once
#include <sqlite3.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace sqlrl::fuzz {

inline constexpr const char* kConcertSql =
    "CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);"
    "CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, title TEXT, year TEXT, singer_id INTEGER,"
    " FOREIGN KEY (singer_id) REFERENCES singer(singer_id));"
    "INSERT INTO singer VALUES (1, 'Joe Sharp', 'Netherlands', 52), (2, 'Timbaland', 'United States', 32),"
    " (3, 'Justin Brown', 'France', 29), (4, 'Rose White', 'France', 41);"
    "INSERT INTO concert VALUES (1, 'Auditions', '2014', 1), (2, 'Super bootcamp', '2014', 2),"
    " (3, 'Home Visits', '2015', 2);";

// The Spider tables.json entry of kConcertSql (for the foreign-key map of exact matching).
inline constexpr const char* kConcertTablesJson = R"([{"db_id": "concert",
  "table_names_original": ["singer", "concert"], "table_names": ["singer", "concert"],
  "column_names_original": [[-1, "*"], [0, "singer_id"], [0, "name"], [0, "country"], [0, "age"],
                            [1, "concert_id"], [1, "title"], [1, "year"], [1, "singer_id"]],
  "column_names": [[-1, "*"], [0, "singer id"], [0, "name"], [0, "country"], [0, "age"],
                   [1, "concert id"], [1, "title"], [1, "year"], [1, "singer id"]],
  "column_types": ["text", "number", "text", "text", "number", "number", "text", "text", "number"],
  "primary_keys": [1, 5], "foreign_keys": [[8, 1]]}])";

// Writes <path> (its folder created) from `sql`; aborts on failure, which is the harness's own fault.
inline void make_sqlite_db(const std::string& path, const char* sql = kConcertSql) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  sqlite3* db = nullptr;
  char* error = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK || sqlite3_exec(db, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    std::fprintf(stderr, "fuzz: cannot create %s: %s\n", path.c_str(), error ? error : sqlite3_errmsg(db));
    std::abort();
  }
  sqlite3_close(db);
}

}  // namespace sqlrl::fuzz

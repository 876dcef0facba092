// Small SQLite databases built at test time, in a fresh temporary folder per test binary.
#pragma once
#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/error.h"
#include "tests/test_util.h"

namespace sqlrl::sql::testing {

inline std::string temp_dir() {
  static std::string dir = [] {
    std::string d = sqlrl::testing::process_temp_path("sqlrl_sql_test").string();
    // A dead process with the same pid may have left databases here, and the Spider test-suite
    // EX runs a query on every .sqlite file beside the example's: start from an empty folder.
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Creates (replacing) `name` in the temp folder by running `script`; returns its path.
inline std::string make_db(const std::string& name, const std::string& script) {
  std::string path = temp_dir() + "/" + name;
  std::filesystem::remove(path);
  sqlite3* db = nullptr;
  check(sqlite3_open(path.c_str(), &db) == SQLITE_OK, "cannot create ", path);
  char* message = nullptr;
  int rc = sqlite3_exec(db, script.c_str(), nullptr, nullptr, &message);
  std::string error = message ? message : "";
  sqlite3_free(message);
  sqlite3_close(db);
  check(rc == SQLITE_OK, "building ", path, ": ", error);
  return path;
}

inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A shop database: products(id, name, price REAL, category), orders(id, product_id FK, qty).
inline std::string shop_db() {
  static std::string path = make_db("shop.sqlite", R"sql(
    CREATE TABLE products(id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL, category TEXT);
    CREATE TABLE orders(id INTEGER PRIMARY KEY, product_id INTEGER REFERENCES products(id), qty INTEGER);
    INSERT INTO products VALUES (1,'apple',1.5,'fruit'),(2,'pear',2.25,'fruit'),(3,'kale',3.0,'veg'),
                                (4,'leek',NULL,'veg');
    INSERT INTO orders VALUES (1,1,3),(2,1,2),(3,2,1),(4,3,5);
  )sql");
  return path;
}

}  // namespace sqlrl::sql::testing

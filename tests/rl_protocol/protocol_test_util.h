// Hand-built inputs for the protocol tests: a one-table schema, examples, results.
#pragma once
#include <string>
#include <vector>

#include "rl/agent/protocol.h"
#include "rl/agent/untrusted.h"
#include "tests/sql/pool_test_db.h"

namespace sqlrl::rl::testing {

inline sql::DatabaseSchema farm_schema() {
  sql::ColumnInfo id{"id", "INTEGER", true, true, {sql::Cell::of_integer(1)}, ""};
  sql::ColumnInfo species{"species", "TEXT", false, false, {sql::Cell::of_text("pig"), sql::Cell::of_text("cow")}, ""};
  sql::TableInfo animals{"animals", {id, species}, {}};
  return sql::DatabaseSchema{{animals}};
}

inline sql::Example farm_example() {
  sql::Example e;
  e.id = "dev_0";
  e.db_id = "farm";
  e.db_path = "/db/farm/farm.sqlite";
  e.question = "how many pigs are in the farm?";
  e.evidence = "pig refers to species = 'pig'";
  e.gold_sql = "SELECT COUNT(*) FROM animals WHERE species = 'pig'";
  return e;
}

// The protocols' texts as shown: the data marks of rl/agent/untrusted.h removed.
inline std::vector<ChatMessage> prompt_text(const Protocol& p, const sql::Example& e, const sql::DatabaseSchema& s) {
  std::vector<ChatMessage> m = p.first_prompt(e, s);
  for (ChatMessage& x : m) x.content = strip_marks(x.content);
  return m;
}
inline std::string inject_text(const Protocol& p, const Action& a, const StepOutcome& o, const sql::Example& e) {
  return strip_marks(p.inject(a, o, e));
}

inline sql::Result result_of(std::vector<std::string> columns, std::vector<sql::Row> rows) {
  sql::Result r;
  r.columns = std::move(columns);
  r.rows = std::move(rows);
  return r;
}

inline sql::Result error_result(std::string message) {
  sql::Result r;
  r.error = std::move(message);
  return r;
}

// The tables of MTSQL-R1's appendix D.1 memory (Spider's car_1 and world_1, the columns the
// case study's queries name), for Spider's parse of the history's gold SQL.
inline std::string car_db() {
  static std::string path = sql::testing::make_db("protocol_car.sqlite", R"sql(
    CREATE TABLE continents(ContId INTEGER PRIMARY KEY, Continent TEXT);
    CREATE TABLE countries(CountryId INTEGER PRIMARY KEY, CountryName TEXT, Continent INTEGER);
    CREATE TABLE car_makers(Id INTEGER PRIMARY KEY, Maker TEXT, FullName TEXT, Country TEXT);
    CREATE TABLE country(Code TEXT PRIMARY KEY, Name TEXT, GovernmentForm TEXT, LifeExpectancy REAL,
                         Population INTEGER);
  )sql");
  return path;
}

}  // namespace sqlrl::rl::testing

// Hand-made trajectories and a tiny SQLite database for the reward tests.
#pragma once
#include <string>
#include <vector>

#include "../sql/pool_test_db.h"
#include "rl/agent/reward.h"
#include "runtime/error.h"

namespace sqlrl::rl::testing {

// employees(id, name, salary, dept_id -> dept.id), dept(id, dname), student(id, name),
// teacher(id, name); built once per test binary in its temp folder.
inline std::string reward_db() {
  static std::string path = sql::testing::make_db("school.sqlite", R"sql(
      CREATE TABLE dept(id INTEGER PRIMARY KEY, dname TEXT);
      CREATE TABLE employees(id INTEGER PRIMARY KEY, name TEXT, salary REAL, dept_id INTEGER REFERENCES dept(id));
      CREATE TABLE student(id INTEGER PRIMARY KEY, name TEXT);
      CREATE TABLE teacher(id INTEGER PRIMARY KEY, name TEXT);
      INSERT INTO dept VALUES (1,'math'),(2,'art');
      INSERT INTO employees VALUES (1,'ann',40,1),(2,'bob',55,1),(3,'cy',70,2),(4,'di',55,2);
      INSERT INTO student VALUES (1,'eve'),(2,'fay');
      INSERT INTO teacher VALUES (1,'gus'),(2,'hal');
    )sql");
  return path;
}

inline sql::Example example(const std::string& gold, const std::string& difficulty = "easy", const std::string& id = "ex0") {
  sql::Example e;
  e.id = id;
  e.db_id = "school";
  e.db_path = reward_db();
  e.question = "q";
  e.gold_sql = gold;
  e.difficulty = difficulty;
  return e;
}

// One turn; `executed`/`sql_error`/`rows` describe what the environment did with an ExecSql.
inline TurnRecord turn(const std::string& text, ActionKind kind, const std::string& sql = "", int64_t rows = 1,
                       bool sql_error = false) {
  TurnRecord t;
  t.assistant_text = text;
  t.action.kind = kind;
  t.action.sql = sql;
  t.executed = kind == ActionKind::ExecSql || kind == ActionKind::MemoryRetrieve;
  t.sql_error = sql_error;
  t.rows = sql_error ? 0 : rows;
  return t;
}

// A trajectory over `turns`; answered (with final_sql) when the last turn is an Answer.
inline Trajectory trajectory(std::vector<TurnRecord> turns) {
  Trajectory t;
  t.turns = std::move(turns);
  for (const TurnRecord& r : t.turns) t.invalid_actions += r.action.kind == ActionKind::Invalid;
  if (!t.turns.empty() && t.turns.back().action.kind == ActionKind::Answer) {
    t.answered = true;
    t.final_sql = t.turns.back().action.sql;
  }
  return t;
}

inline double term(const Trajectory& t, const std::string& name) {
  for (const auto& [n, v] : t.reward_terms)
    if (n == name) return v;
  fail("no reward term '", name, "'");
}

}  // namespace sqlrl::rl::testing

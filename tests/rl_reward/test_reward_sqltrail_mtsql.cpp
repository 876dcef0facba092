// SQL-Trail's six terms (A.4, with its worked examples) and MTSQL-R1's outcome and process terms.
#include <gtest/gtest.h>

#include "reward_fixture.h"

namespace sqlrl::rl {
namespace {

using testing::example;
using testing::term;
using testing::trajectory;
using testing::turn;

constexpr double kTol = 1e-12;  // ratios of small integers, summed: exact to a few ulps

Trajectory answer_after(int exploring_turns, const std::string& sql, const std::string& think = "<think>t</think>") {
  std::vector<TurnRecord> turns(exploring_turns, turn(think + "<sql>SELECT 1</sql>", ActionKind::ExecSql, "SELECT 1"));
  turns.push_back(turn(think + "\n<solution>" + sql + "</solution>", ActionKind::Answer, sql));
  return trajectory(turns);
}

TEST(RewardSqlTrail, BigramWorkedExample) {
  // A.4: gold SELECT name FROM student, prediction SELECT name FROM teacher: bigrams
  // {SELECT name, name FROM, FROM student} vs {..., FROM teacher}: 2 common of 4 -> 2/4 = 0.5.
  sql::Pool pool;
  RewardContext ctx(pool);
  Trajectory t = answer_after(0, "SELECT name FROM teacher");
  score(make_reward_panel("sqltrail"), example("SELECT name FROM student"), t, ctx);
  EXPECT_NEAR(term(t, "bigram"), 2.0 / 4.0, kTol);
  EXPECT_EQ(term(t, "exec"), 0);    // different names
  EXPECT_EQ(term(t, "syntax"), 1);  // but it runs
  EXPECT_EQ(term(t, "schema"), 0);  // {teacher, teacher.name} vs {student, student.name}
  EXPECT_EQ(term(t, "format"), 1);
  EXPECT_EQ(term(t, "turns"), 2);   // easy, answered in turn 1 (weight 2)
}

TEST(RewardSqlTrail, SchemaWorkedExample) {
  // A.4: gold reads Employees and Salary; the prediction Employees and the hallucinated Wages:
  // intersection {Employees}, union {Employees, Salary, Wages} -> 1/3.
  sql::Pool pool;
  RewardContext ctx(pool);
  Trajectory t = answer_after(0, "SELECT Wages FROM Employees");
  score(make_reward_panel("sqltrail"), example("SELECT Salary FROM Employees"), t, ctx);
  EXPECT_NEAR(term(t, "schema"), 1.0 / 3.0, kTol);
  EXPECT_EQ(term(t, "syntax"), 0);  // no such column
  EXPECT_EQ(term(t, "exec"), 0);
}

TEST(RewardSqlTrail, SchemaItemsThroughAliasesAndJoins) {
  sql::Pool pool;
  RewardContext ctx(pool);
  // Both parse: items {employees, employees.name, employees.dept_id, dept, dept.id, dept.dname}
  // vs gold {employees, employees.name, employees.salary}: 2 common of 7.
  Trajectory t = answer_after(0, "SELECT T1.name FROM employees AS T1 JOIN dept AS T2 ON T1.dept_id = T2.id WHERE T2.dname = 'art'");
  score(make_reward_panel("sqltrail"), example("SELECT name FROM employees WHERE salary > 50"), t, ctx);
  EXPECT_NEAR(term(t, "schema"), 2.0 / 7.0, kTol);
  // Lexical path for both (a hallucinated column makes the prediction's parse fail).
  t = answer_after(0, "SELECT T1.name, T1.bonus FROM employees AS T1 JOIN dept AS T2 ON T1.dept_id = T2.id");
  score(make_reward_panel("sqltrail"), example("SELECT name FROM employees WHERE salary > 50"), t, ctx);
  // pred {employees, employees.name, ?employees.bonus, dept, employees.dept_id, dept.id};
  // gold {employees, employees.name, employees.salary}: 2 common of 7.
  EXPECT_NEAR(term(t, "schema"), 2.0 / 7.0, kTol);
}

TEST(RewardSqlTrail, TurnTermFollowsDifficulty) {
  // A.4 eq. 7: simple ∧ t≤2, medium ∧ t≤3, (hard ∨ extra) ∧ r_exec=1 ∧ t<T (T = 10 here).
  sql::Pool pool;
  RewardContext ctx(pool);
  RewardPanel p = make_reward_panel("sqltrail");
  const std::string gold = "SELECT name FROM student", right = gold, wrong = "SELECT name FROM teacher";
  struct Case {
    std::string difficulty;
    int turns;  // the finishing turn t
    std::string answer;
    double want;  // raw r_turns
  };
  std::vector<Case> cases = {
      {"easy", 2, wrong, 1},  {"easy", 3, right, 0},        {"simple", 2, right, 1},      // BIRD simple
      {"medium", 3, wrong, 1}, {"medium", 4, right, 0},     {"moderate", 3, right, 1},    // BIRD moderate
      {"hard", 9, right, 1},  {"hard", 9, wrong, 0},        {"hard", 10, right, 0},       // t < T
      {"extra", 1, right, 1}, {"challenging", 5, right, 1}, {"challenging", 5, wrong, 0},  // BIRD challenging
      {"", 2, wrong, 1},      {"", 3, right, 0},  // unlabelled: Spider hardness of the gold = easy
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    Trajectory t = answer_after(cases[i].turns - 1, cases[i].answer);
    score(p, example(gold, cases[i].difficulty), t, ctx);
    EXPECT_EQ(term(t, "turns"), 2 * cases[i].want) << i << " " << cases[i].difficulty;
  }
  Trajectory unanswered = trajectory({turn("<think>t</think><sql>SELECT 1</sql>", ActionKind::ExecSql, "SELECT 1")});
  score(p, example(gold, "easy"), unanswered, ctx);
  EXPECT_EQ(term(unanswered, "turns"), 0);
  EXPECT_EQ(unanswered.reward, 0);

  Trajectory t = answer_after(0, right);
  try {
    score(p, example(gold, "tricky", "dev_7"), t, ctx);
    FAIL() << "unknown difficulty accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("example 'dev_7' has difficulty 'tricky'"), std::string::npos) << e.what();
  }
}

TEST(RewardSqlTrail, FormatNeedsReasoningThenSolutionInTheFinalTurn) {
  sql::Pool pool;
  RewardContext ctx(pool);
  RewardPanel p = make_reward_panel("sqltrail");
  sql::Example ex = example("SELECT name FROM student");
  Trajectory think = answer_after(1, "SELECT name FROM student");
  Trajectory reasoning = answer_after(1, "SELECT name FROM student", "<reasoning>r</reasoning>");
  Trajectory none = answer_after(1, "SELECT name FROM student", "no tags");
  Trajectory after = trajectory({turn("<solution>SELECT name FROM student</solution><think>t</think>",
                                      ActionKind::Answer, "SELECT name FROM student")});
  for (auto [t, want] : {std::pair{&think, 1.0}, {&reasoning, 1.0}, {&none, 0.0}, {&after, 0.0}}) {
    score(p, ex, *t, ctx);
    EXPECT_EQ(term(*t, "format"), want);
    EXPECT_EQ(term(*t, "exec"), 5);  // the answer is right whatever the tags
  }
}

TEST(RewardSqlTrail, SyntaxMeansItRanOnce) {
  sql::Pool pool;
  sql::Limits limits;
  limits.max_rows = 2;
  RewardContext ctx(pool, limits);
  RewardPanel p = make_reward_panel("sqltrail");
  // Cut at the row cap: it ran (syntax 1) but a truncated result never matches (exec 0).
  Trajectory big = answer_after(0, "SELECT name FROM employees");
  score(p, example("SELECT name FROM employees"), big, ctx);
  EXPECT_EQ(term(big, "syntax"), 1);
  EXPECT_EQ(term(big, "exec"), 0);
  // Python's sqlite3 refuses a second statement: not executable, even if the first is right
  // (BIRD/SkyRL). Spider's exec_eval keeps only sqlparse's first statement, so there it counts.
  Trajectory two = answer_after(0, "SELECT name FROM student; SELECT 1");
  RewardContext bird(pool, limits, sql::CompareMode::BirdSet);
  score(p, example("SELECT name FROM student"), two, bird);
  EXPECT_EQ(term(two, "syntax"), 0);
  EXPECT_EQ(term(two, "exec"), 0);
  score(p, example("SELECT name FROM student"), two, ctx);
  EXPECT_EQ(term(two, "syntax"), 1);
  EXPECT_EQ(term(two, "exec"), 5);
}

// ---- MTSQL-R1 §3.3.2 ----
const char* kGold = "SELECT name FROM employees WHERE salary > 50";

TEST(RewardMtsql, ProposeVerifyCorrectFinalize) {
  sql::Pool pool;
  RewardContext ctx(pool);
  RewardPanel p = make_reward_panel("mtsql");
  // PROPOSE a query without the WHERE, E-VERIFY no_pass, SELF-CORRECT, E-VERIFY pass,
  // M-VERIFY pass, FINALIZE.
  Trajectory t = trajectory({
      turn("<think>a</think><tool_call>exec</tool_call>", ActionKind::ExecSql, "SELECT name FROM employees", 4),
      turn("<exec_verify>no_pass</exec_verify><tool_call>exec</tool_call>", ActionKind::ExecSql, kGold, 3),
      turn("<exec_verify>pass</exec_verify><tool_call>mem</tool_call>", ActionKind::MemoryRetrieve, kGold, 3),
      turn("<memory_verify>pass</memory_verify><answer_sql>" + std::string(kGold) + "</answer_sql>",
           ActionKind::Answer, kGold),
  });
  score(p, example(kGold), t, ctx);
  EXPECT_EQ(term(t, "ex"), 1);
  EXPECT_EQ(term(t, "em"), 1);
  // Clause F1 of the proposal: SELECT 1, WHERE 0 (absent), JOIN (FROM tables) 1 -> 2/3; the
  // correction: 1. Mean over the two candidates 5/6, weight 0.8.
  EXPECT_NEAR(term(t, "clause_f1"), 0.8 * (2.0 / 3.0 + 1.0) / 2.0, kTol);
  // E-VERIFY: rows ok + no_pass = 0, rows ok + pass = 1 -> mean 0.5; M-VERIFY: pass, F1 1 -> 1.
  EXPECT_NEAR(term(t, "verify"), 0.1 * (0.5 + 1.0), kTol);
  EXPECT_NEAR(t.reward, 1 + 1 + 0.8 * 5.0 / 6.0 + 0.15, kTol);
}

TEST(RewardMtsql, ExecVerifyTable) {
  // §3.3.2's table: ok: fail 0 / pass 1; null: fail 0.1 / pass 0; error: fail 1 / pass 0.
  sql::Pool pool;
  RewardContext ctx(pool);
  RewardPanel p = make_reward_panel("mtsql");
  struct Case {
    int64_t rows;
    bool error;
    std::string verdict;
    double want;
  };
  std::vector<Case> cases = {{2, false, "pass", 1},   {2, false, "no_pass", 0}, {0, false, "no_pass", 0.1},
                             {0, false, "pass", 0},   {0, true, "no_pass", 1},  {0, true, "pass", 0},
                             {0, true, "fail", 1},
                             // No verdict (or none of the two words) reads "pass", as MTSQL-R1's released
                             // text2sql_process.py (_first_exec_verify_outside_responses) does.
                             {0, true, "", 0},        {0, true, "maybe", 0},    {2, false, "", 1},
                             {2, false, "maybe", 1},  {0, false, "", 0}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    std::string tag = c.verdict.empty() ? "" : "<exec_verify>" + c.verdict + "</exec_verify>";
    Trajectory t = trajectory({turn("<tool_call>x</tool_call>", ActionKind::ExecSql, "SELECT 1", c.rows, c.error),
                               turn(tag + "<answer_sql>SELECT 1</answer_sql>", ActionKind::Answer, "SELECT 1")});
    score(p, example(kGold), t, ctx);
    EXPECT_NEAR(term(t, "verify"), 0.1 * c.want, kTol) << i;
  }
  // A verdict inside <think> is not the verdict; the last one outside counts.
  Trajectory thought = trajectory(
      {turn("<tool_call>x</tool_call>", ActionKind::ExecSql, "SELECT 1", 0, true),
       turn("<think>say <exec_verify>pass</exec_verify>?</think><exec_verify>pass</exec_verify> no, "
            "<exec_verify>no_pass</exec_verify><answer_sql>SELECT 1</answer_sql>",
            ActionKind::Answer, "SELECT 1")});
  score(p, example(kGold), thought, ctx);
  EXPECT_NEAR(term(thought, "verify"), 0.1 * 1, kTol);  // error + no_pass
  // mtsql-missing-verdict = zero: a turn without a verdict earns nothing.
  ctx.mtsql_missing_verdict_passes = false;
  Trajectory silent = trajectory({turn("<tool_call>x</tool_call>", ActionKind::ExecSql, "SELECT 1", 2, false),
                                  turn("<answer_sql>SELECT 1</answer_sql>", ActionKind::Answer, "SELECT 1")});
  score(p, example(kGold), silent, ctx);
  EXPECT_EQ(term(silent, "verify"), 0);
  ctx.mtsql_missing_verdict_passes = true;
  score(p, example(kGold), silent, ctx);
  EXPECT_NEAR(term(silent, "verify"), 0.1 * 1, kTol);
  // A tool call that ends the episode (turn budget) was never verified: nothing to average.
  Trajectory cut = trajectory({turn("<tool_call>x</tool_call>", ActionKind::ExecSql, "SELECT 1", 0, true)});
  score(p, example(kGold), cut, ctx);
  EXPECT_EQ(term(cut, "verify"), 0);
}

// No <answer_sql>: the protocol's fallback (the last tool call's SQL, MTSQL-R1's released
// extract_code) is scored as the answer: EX and EM of the gold itself are 1.
TEST(RewardMtsql, FallbackAnswerIsScored) {
  sql::Pool pool;
  RewardContext ctx(pool);
  RewardPanel p = make_reward_panel("mtsql");
  Trajectory t = trajectory({turn("<tool_call>exec</tool_call>", ActionKind::ExecSql, kGold, 3)});
  score(p, example(kGold), t, ctx);
  EXPECT_EQ(term(t, "ex"), 0);  // unanswered, no fallback: nothing scored
  t.final_sql = kGold;
  t.answer_fallback = true;
  score(p, example(kGold), t, ctx);
  EXPECT_EQ(term(t, "ex"), 1);
  EXPECT_EQ(term(t, "em"), 1);
}

TEST(RewardMtsql, MemoryVerifyRewardsAgreementWithClauseF1) {
  sql::Pool pool;
  RewardContext ctx(pool);
  RewardPanel p = make_reward_panel("mtsql");
  // The SQL under check lacks the WHERE: clause F1 2/3. pass -> 2/3, no_pass -> 1/3.
  for (auto [verdict, want] : {std::pair{"pass", 2.0 / 3.0}, {"no_pass", 1.0 / 3.0}}) {
    Trajectory t = trajectory({turn("<tool_call>m</tool_call>", ActionKind::MemoryRetrieve, "SELECT name FROM employees"),
                               turn(std::string("<memory_verify>") + verdict + "</memory_verify><answer_sql>x</answer_sql>",
                                    ActionKind::Answer, "SELECT name FROM employees")});
    score(p, example(kGold), t, ctx);
    EXPECT_NEAR(term(t, "verify"), 0.1 * want, kTol) << verdict;
    // No exec_sql call: the answer itself is the PROPOSE candidate.
    EXPECT_NEAR(term(t, "clause_f1"), 0.8 * 2.0 / 3.0, kTol);
    EXPECT_EQ(term(t, "ex"), 0);
    EXPECT_EQ(term(t, "em"), 0);
  }
}

TEST(RewardMtsql, ExactMatchIgnoresValuesButNotStructure) {
  // EM is Spider's exact-set match (values dropped), EX compares the rows.
  sql::Pool pool;
  RewardContext ctx(pool);
  RewardPanel p = make_reward_panel("mtsql");
  auto final_only = [](const std::string& sql) {
    return trajectory({turn("<answer_sql>" + sql + "</answer_sql>", ActionKind::Answer, sql)});
  };
  Trajectory other_value = final_only("SELECT name FROM employees WHERE salary > 60");
  score(p, example(kGold), other_value, ctx);
  EXPECT_EQ(term(other_value, "em"), 1);
  EXPECT_EQ(term(other_value, "ex"), 0);
  Trajectory reordered = final_only("select NAME from EMPLOYEES where 50 < salary");
  score(p, example(kGold), reordered, ctx);
  EXPECT_EQ(term(reordered, "em"), 0);
  EXPECT_EQ(term(reordered, "ex"), 1);
  // Foreign-key columns are unified (employees.dept_id -> dept.id), as tables.json makes the
  // official evaluation do; the map here comes from the database's REFERENCES clause.
  const std::string join = "SELECT T1.name FROM employees AS T1 JOIN dept AS T2 ON T1.dept_id = T2.id WHERE ";
  Trajectory via_fk = final_only(join + "T1.dept_id = 1");
  score(p, example(join + "T2.id = 1"), via_fk, ctx);
  EXPECT_EQ(term(via_fk, "em"), 1);
  EXPECT_EQ(term(via_fk, "ex"), 1);
  // A gold Spider's parser rejects (CAST): EM falls back to normalised string equality.
  Trajectory cast = final_only("select cast(salary as integer)  from employees;");
  score(p, example("SELECT CAST(salary AS INTEGER) FROM employees"), cast, ctx);
  EXPECT_EQ(term(cast, "em"), 1);
  EXPECT_EQ(term(cast, "clause_f1"), 0);
  Trajectory unparsable = final_only("SELECT nme FROM employees");
  score(p, example(kGold), unparsable, ctx);
  EXPECT_EQ(term(unparsable, "em"), 0);
  EXPECT_EQ(term(unparsable, "clause_f1"), 0);
}

}  // namespace
}  // namespace sqlrl::rl

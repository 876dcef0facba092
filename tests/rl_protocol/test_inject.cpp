// What the environment writes back after a turn, against expected text written out by hand from
// the papers' formats (SkyRL-SQL's tool string, SQL-Trail's Algorithm 1 and prompt example,
// MTIR-SQL's tool JSON and rethink line, MTSQL-R1's recap / verifier texts of appendix B.0.1 as
// the case study D.1 shows them); and when each protocol ends an episode.
#include <gtest/gtest.h>

#include "rl/agent/protocol.h"
#include "tests/rl_protocol/protocol_test_util.h"

namespace sqlrl::rl {
namespace {

using testing::error_result;
using testing::farm_example;
using testing::result_of;

Action action(ActionKind kind, std::string sql = "", std::string tool = "") {
  Action a;
  a.kind = kind;
  a.sql = std::move(sql);
  a.tool = std::move(tool);
  if (kind == ActionKind::Invalid) a.error = "no action";
  return a;
}

StepOutcome outcome(const sql::Result* result, int turns_left) {
  StepOutcome o;
  o.result = result;
  o.db_path = "/db/farm/farm.sqlite";
  o.turns_left = turns_left;
  return o;
}

TEST(InjectSkyrl, ObservationAppendedToTheAssistantStream) {
  auto p = make_protocol("skyrl");
  // pd.DataFrame(frozenset({(12,)})).to_string(index=False): label 0 over the value.
  sql::Result r = result_of({"COUNT(*)"}, {{sql::Cell::of_integer(12)}});
  EXPECT_EQ(testing::inject_text(*p, action(ActionKind::ExecSql, "SELECT COUNT(*) FROM animals"), outcome(&r, 4), farm_example()),
            "\n\n<observation> 0\n12\n<reminder>You have 4 turns left to complete the task.</reminder></observation>\n\n");
  sql::Result e = error_result("no such column: specie");
  EXPECT_EQ(testing::inject_text(*p, action(ActionKind::ExecSql, "SELECT specie FROM animals"), outcome(&e, 3), farm_example()),
            "\n\n<observation>Error executing SQL: no such column: specie, db file: /db/farm/farm.sqlite\n"
            "<reminder>You have 3 turns left to complete the task.</reminder></observation>\n\n");
  sql::Result t = error_result("timeout after 5000 ms");
  t.timed_out = true;
  EXPECT_EQ(testing::inject_text(*p, action(ActionKind::ExecSql, "SELECT 1"), outcome(&t, 1), farm_example()),
            "\n\n<observation>SQL Timeout:\nSELECT 1\n<reminder>You have 1 turns left to complete the task.</reminder>"
            "</observation>\n\n");
  EXPECT_EQ(testing::inject_text(*p, action(ActionKind::Invalid), outcome(nullptr, 2), farm_example()),
            "\n\n<observation>Your previous action is invalid. Follow the format of outputting thinking process and sql "
            "tool, and try again.\n<reminder>You have 2 turns left to complete the task.</reminder></observation>\n\n");
}

TEST(InjectSqlTrail, ObservationUserTurnWithHeadersAndTurnsLeft) {
  auto p = make_protocol("sqltrail");
  // The example in A.8's system prompt: AVG(price) = 24.75 under its header, index 0.
  sql::Result r = result_of({"AVG(price)"}, {{sql::Cell::of_real(24.75)}});
  EXPECT_EQ(testing::inject_text(*p, action(ActionKind::ExecSql, "SELECT AVG(price) FROM products;"), outcome(&r, 10), farm_example()),
            "<|im_end|>\n<|im_start|>user\n<observation>\n   AVG(price)\n0       24.75\n"
            "You have 10 turns left to complete the task.\n</observation><|im_end|>\n<|im_start|>assistant\n");
  // Algorithm 1 line 22: an invalid result gives the fixed line, not SQLite's message.
  sql::Result e = error_result("near \"SELEC\": syntax error");
  const std::string invalid_obs =
      "<|im_start|>user\n<observation>\nYour previous action is invalid. Think and try again.\n"
      "You have 7 turns left to complete the task.\n</observation><|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(testing::inject_text(*p, action(ActionKind::ExecSql, "SELEC 1"), outcome(&e, 7), farm_example()), "<|im_end|>\n" + invalid_obs);
  StepOutcome eos = outcome(nullptr, 7);
  eos.turn_ended_with_eos = true;  // <|im_end|> already sampled: only its newline is written
  EXPECT_EQ(testing::inject_text(*p, action(ActionKind::Invalid), eos, farm_example()), "\n" + invalid_obs);
}

TEST(InjectMtir, ToolResponseJsonAtMostTenRecords) {
  auto p = make_protocol("mtir");
  sql::Result r = result_of({"COUNT(*)"}, {{sql::Cell::of_integer(4)}});
  Action call = action(ActionKind::ExecSql, "SELECT COUNT(*) FROM animals", "sql-execute_sql_query");
  EXPECT_EQ(testing::inject_text(*p, call, outcome(&r, 5), farm_example()),
            "<|im_end|>\n<|im_start|>user\n<tool_response>\n{\"columns\": [\"COUNT(*)\"], \"data\": [[4]]}\n</tool_response>"
            "<|im_end|>\n<|im_start|>assistant\n");
  sql::Result many = result_of({"id", "name"}, {});
  for (int i = 1; i <= 12; ++i) many.rows.push_back({sql::Cell::of_integer(i), sql::Cell::of_text(i % 2 ? "pig" : "cow")});
  EXPECT_EQ(testing::inject_text(*p, call, outcome(&many, 5), farm_example()),
            "<|im_end|>\n<|im_start|>user\n<tool_response>\n{\"columns\": [\"id\", \"name\"], \"data\": [[1, \"pig\"], "
            "[2, \"cow\"], [3, \"pig\"], [4, \"cow\"], [5, \"pig\"], [6, \"cow\"], [7, \"pig\"], [8, \"cow\"], [9, \"pig\"], "
            "[10, \"cow\"]]}\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  sql::Result e = error_result("no such table: animal");
  EXPECT_EQ(testing::inject_text(*p, call, outcome(&e, 5), farm_example()),
            "<|im_end|>\n<|im_start|>user\n<tool_response>\n{\"error\": \"no such table: animal\"}\n</tool_response>"
            "<|im_end|>\n<|im_start|>assistant\n");
  // Algorithm 1 line 20: y <- y + "My action is not correct. Let me rethink.": the model's own
  // stream, no user turn; after a turn closed with <|im_end|> a new assistant message opens.
  EXPECT_EQ(testing::inject_text(*p, action(ActionKind::Invalid), outcome(nullptr, 5), farm_example()),
            "My action is not correct. Let me rethink.");
  StepOutcome eos = outcome(nullptr, 5);
  eos.turn_ended_with_eos = true;
  EXPECT_EQ(testing::inject_text(*p, action(ActionKind::Invalid), eos, farm_example()),
            "\n<|im_start|>assistant\nMy action is not correct. Let me rethink.");
  eos.empty_think_block = true;
  EXPECT_EQ(testing::inject_text(*p, action(ActionKind::Invalid), eos, farm_example()),
            "\n<|im_start|>assistant\n<think>\n\n</think>\n\nMy action is not correct. Let me rethink.");
  // mtir-rethink = user: the line as a user turn.
  ProtocolSettings user;
  user.mtir_rethink = "user";
  EXPECT_EQ(testing::inject_text(*make_protocol("mtir", user), action(ActionKind::Invalid), outcome(nullptr, 5), farm_example()),
            "<|im_end|>\n<|im_start|>user\nMy action is not correct. Let me rethink.<|im_end|>\n<|im_start|>assistant\n");
}

sql::Example car_example() {
  sql::Example e;
  e.db_id = "car_1";
  e.question = "What about the number of car makers in the country USA?";
  e.history = {{"Can you list the number of car makers on each continent?",
                "SELECT T1.Continent , count ( * ) FROM CONTINENTS AS T1 JOIN COUNTRIES AS T2 ON T1.ContId = T2.continent "
                "JOIN car_makers AS T3 ON T2.CountryId = T3.Country GROUP BY T1.Continent"}};
  e.turn_index = 1;
  e.db_path = testing::car_db();
  return e;
}

const char* kCarSql =
    "SELECT COUNT(*) FROM car_makers JOIN countries ON car_makers.Country = countries.CountryId WHERE "
    "countries.CountryName = 'usa';";

// Appendix D.1, the second exec_sql response, with B.0.1's line layout.
TEST(InjectMtsql, ExecRecap) {
  auto p = make_protocol("mtsql");
  sql::Result r = result_of({"COUNT(*)"}, {{sql::Cell::of_integer(4)}});
  EXPECT_EQ(
      testing::inject_text(*p, action(ActionKind::ExecSql, kCarSql, "exec_sql"), outcome(&r, 2), car_example()),
      "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
      "Recap:\n"
      "- Current question: Question: What about the number of car makers in the country USA?\n"
      "- Generated SQL: SELECT COUNT(*) FROM car_makers JOIN countries ON car_makers.Country = countries.CountryId "
      "WHERE countries.CountryName = 'usa';\n"
      "- SQL execution results (truncated to 200 characters): The sql results example is: [(4,)]\n"
      "\n"
      "Now please:\n"
      "1. Verify whether the SQL execution results are valid:\n"
      "   - Check if the SQL runs without errors.\n"
      "   - Check if the returned columns exist in the schema and are relevant to the question.\n"
      "   - Check if the results contain unexpected NULL values, empty sets, or error messages.\n"
      "\n"
      "2. After verifying, output:\n"
      "   - <exec_verify>pass</exec_verify> if the results are valid and consistent with the schema.\n"
      "   - <exec_verify>no_pass</exec_verify> if the results show errors, irrelevant columns, or invalid values.\n"
      "\n"
      "3. If <exec_verify>no_pass</exec_verify>, think step by step, refine the SQL and provide a corrected SQL and then "
      "execute it via re-calling 'exec_sql' tool again via <tool_call>. Repeat until you get valid results.\n"
      "\n"
      "4. If <exec_verify>pass</exec_verify>, You have to call 'memory_retrieve' tool via <tool_call> at least once to "
      "ensure the current generated SQL is coherent with the historical memory.\n"
      "</tool_response><|im_end|>\n<|im_start|>assistant\n");
  // Results are cut to 200 code points, the error as "Error: ...".
  sql::Result e = error_result("no such column: CountryNam");
  std::string text = testing::inject_text(*p, action(ActionKind::ExecSql, "SELECT CountryNam FROM countries", "exec_sql"), outcome(&e, 2), car_example());
  EXPECT_NE(text.find("- SQL execution results (truncated to 200 characters): Error: no such column: CountryNam\n"), std::string::npos);
}

// Appendix D.1's memory_retrieve response, its "Parsed Elements" line included (the PDF prints
// "None)]], 'select'" where the dict closes the FROM part: "None)]}, 'select'").
TEST(InjectMtsql, MemoryVerifier) {
  auto p = make_protocol("mtsql");
  sql::Result r = result_of({"COUNT(*)"}, {{sql::Cell::of_integer(4)}});
  std::vector<sql::Result> history = {result_of({"Continent", "count"}, {{sql::Cell::of_text("america"), sql::Cell::of_integer(4)},
                                                                         {sql::Cell::of_text("asia"), sql::Cell::of_integer(7)},
                                                                         {sql::Cell::of_text("europe"), sql::Cell::of_integer(11)}})};
  StepOutcome o = outcome(&r, 1);
  o.history_results = &history;
  EXPECT_EQ(
      testing::inject_text(*p, action(ActionKind::MemoryRetrieve, kCarSql, "memory_retrieve"), o, car_example()),
      "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
      "You are a coherence verifier for Multi-turn Text2SQL.\n"
      "\n"
      "Current Question: Question: What about the number of car makers in the country USA?\n"
      "Proposed SQL: SELECT COUNT(*) FROM car_makers JOIN countries ON car_makers.Country = countries.CountryId WHERE "
      "countries.CountryName = 'usa';\n"
      "The execution results of the proposed SQL: The sql results example is: [(4,)]\n"
      "\n"
      "Memory (historical information in order):\n"
      "== Turn 0 ==\n"
      "Question: Question: Can you list the number of car makers on each continent?\n"
      "Ground-Truth SQL: SELECT T1.Continent , count ( * ) FROM CONTINENTS AS T1 JOIN COUNTRIES AS T2 ON T1.ContId = "
      "T2.continent JOIN car_makers AS T3 ON T2.CountryId = T3.Country GROUP BY T1.Continent\n"
      "Parsed Elements for each term: {'from': {'table_units': [('table_unit', '__continents__'), ('table_unit', "
      "'__countries__'), ('table_unit', '__car_makers__')], 'conds': [(False, 2, (0, (0, '__continents.contid__', False), "
      "None), (0, '__countries.continent__', False), None), 'and', (False, 2, (0, (0, '__countries.countryid__', False), "
      "None), (0, '__car_makers.country__', False), None)]}, 'select': ['__continents.continent__', '__all__'], 'where': "
      "[], 'groupBy': [(0, '__continents.continent__', False)], 'having': [], 'orderBy': [], 'limit': None, 'intersect': "
      "None, 'union': None, 'except': None}\n"
      "SQL Results (truncated to 50 characters): [('america', 4), ('asia', 7), ('europe', 11)]\n"
      "== Turn 0 ==\n"
      "\n"
      "Your tasks:\n"
      "1. Verify whether the Proposed SQL is coherent with the Current Question and the Memory, based on the relation "
      "between the Current Question and Historical Questions.\n"
      "   - If the Current Question introduces changes (new columns, conditions, ordering, etc.), SQL should update "
      "accordingly.\n"
      "   - If not, SQL must remain consistent with the Historical Questions.\n"
      "\n"
      "Step-by-step reasoning checklist:\n"
      "1. First parse the Proposed SQL into its components (SELECT, FROM, WHERE, GROUP BY, HAVING, ORDER BY, JOINs).\n"
      "2. Check tables are consistent with context.\n"
      "3. Check selected columns match current and historical intent.\n"
      "4. Check conditions (WHERE/GROUP/HAVING) reflect the relation between current and past questions.\n"
      "5. Check ordering (ORDER BY) is preserved unless explicitly changed.\n"
      "6. Verify that joins and table relationships follow the established context.\n"
      "7. Make sure the SQL and the execution results of the proposed SQL answer the current question while remaining "
      "logically coherent with the conversation history and execution results.\n"
      "\n"
      "2. After verifying, output one of the following:\n"
      "   - '<memory_verify>pass</memory_verify>' if coherent.\n"
      "   - '<memory_verify>no_pass</memory_verify>' if not coherent.\n"
      "\n"
      "3. If 'no_pass': explain issues, think step by step to refine SQL, and then please call 'exec_sql' tool again via "
      "<tool_call> to check the corrected SQL and get the execution results. Repeat until you get 'pass'.\n"
      "\n"
      "4. If 'pass': return the final SQL inside '<answer_sql>...</answer_sql>'.\n"
      "\n"
      "Note finally you should return the final SQL inside '<answer_sql>...</answer_sql>\n"
      "</tool_response><|im_end|>\n<|im_start|>assistant\n");
  // Without the engine's history results the per-turn "SQL Results" line is left out; long
  // history results are cut to 50 code points (1 + 4 x 12 for "[" and four "('maker',), ", then "(").
  o.history_results = nullptr;
  std::string text = testing::inject_text(*p, action(ActionKind::MemoryRetrieve, kCarSql, "memory_retrieve"), o, car_example());
  EXPECT_NE(text.find("'except': None}\n== Turn 0 ==\n\nYour tasks:"), std::string::npos);
  std::vector<sql::Result> long_history = {result_of({"name"}, {})};
  for (int i = 0; i < 20; ++i) long_history[0].rows.push_back({sql::Cell::of_text("maker")});
  o.history_results = &long_history;
  text = testing::inject_text(*p, action(ActionKind::MemoryRetrieve, kCarSql, "memory_retrieve"), o, car_example());
  EXPECT_NE(text.find("SQL Results (truncated to 50 characters): [('maker',), ('maker',), ('maker',), ('maker',), (\n"),
            std::string::npos);
}

TEST(Done, PerPaperTermination) {
  for (const char* name : {"skyrl", "sqltrail", "mtir"}) {
    auto p = make_protocol(name);
    EXPECT_TRUE(p->done(action(ActionKind::Answer, "SELECT 1"), 0)) << name;
    EXPECT_FALSE(p->done(action(ActionKind::ExecSql, "SELECT 1"), 0)) << name;
    EXPECT_FALSE(p->done(action(ActionKind::Invalid), 0)) << name << ": invalid turns get an observation and go on";
    EXPECT_TRUE(p->executes(action(ActionKind::ExecSql, "SELECT 1")));
    EXPECT_FALSE(p->executes(action(ActionKind::Answer, "SELECT 1")));
  }
  auto m = make_protocol("mtsql");
  EXPECT_TRUE(m->done(action(ActionKind::Answer, "SELECT 1"), 0));
  EXPECT_TRUE(m->done(action(ActionKind::Invalid), 0));  // verl: no tool call parsed ends the rollout
  EXPECT_FALSE(m->done(action(ActionKind::ExecSql, "SELECT 1"), 0));
  EXPECT_FALSE(m->done(action(ActionKind::MemoryRetrieve, "SELECT 1"), 0));
  EXPECT_TRUE(m->executes(action(ActionKind::MemoryRetrieve, "SELECT 1")));
  EXPECT_EQ(testing::inject_text(*m, action(ActionKind::Invalid), outcome(nullptr, 1), car_example()), "");

  EXPECT_EQ(make_protocol("skyrl")->max_turns(), 5);
  EXPECT_EQ(make_protocol("sqltrail")->max_turns(), 11);
  EXPECT_EQ(make_protocol("mtir")->max_turns(), 6);
  EXPECT_EQ(m->max_turns(), 4);
  EXPECT_EQ(make_protocol("skyrl")->stop_strings(), (std::vector<std::string>{"</sql>", "</solution>"}));
  // SQL-Trail Algorithm 1 line 10 also stops at </reasoning>; sqltrail-reasoning-stop=false does not.
  EXPECT_EQ(make_protocol("sqltrail")->stop_strings(), (std::vector<std::string>{"</reasoning>", "</sql>", "</solution>"}));
  ProtocolSettings legacy;
  legacy.sqltrail_reasoning_stop = false;
  EXPECT_EQ(make_protocol("sqltrail", legacy)->stop_strings(), (std::vector<std::string>{"</sql>", "</solution>"}));
  EXPECT_EQ(make_protocol("mtir")->stop_strings(), (std::vector<std::string>{"</tool_call>", "</answer>"}));
  EXPECT_EQ(m->stop_strings(), (std::vector<std::string>{"</tool_call>", "</answer_sql>"}));
}

}  // namespace
}  // namespace sqlrl::rl

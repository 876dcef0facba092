// Reading assistant turns: well-formed actions of each protocol, and malformed ones (unclosed
// tags, two actions, bad tool JSON, unknown tools, empty SQL, random bytes) as Invalid, never a
// throw.
#include <gtest/gtest.h>

#include <random>

#include "rl/agent/protocol.h"
#include "tests/rl_protocol/protocol_test_util.h"

namespace sqlrl::rl {
namespace {

// SQL-Trail as it was before its Algorithm 1 reasoning segments (sqltrail-reasoning-stop=false),
// where a turn without an action is invalid: "sqltrail-legacy" here.
Action parse(const char* protocol, std::string_view text) {
  ProtocolSettings s;
  s.sqltrail_reasoning_stop = std::string_view(protocol) != "sqltrail-legacy";
  return make_protocol(std::string_view(protocol) == "sqltrail-legacy" ? "sqltrail" : protocol, s)->parse(text);
}

void expect_invalid(const char* protocol, std::string_view text, const std::string& error_part) {
  Action a = parse(protocol, text);
  EXPECT_EQ(a.kind, ActionKind::Invalid) << protocol << ": " << text;
  EXPECT_NE(a.error.find(error_part), std::string::npos) << protocol << ": error '" << a.error << "' lacks '" << error_part << "'";
}

TEST(ProtocolNames, MakeEachAndRejectUnknown) {
  for (const std::string& name : protocol_names()) EXPECT_EQ(make_protocol(name)->name(), name);
  try {
    make_protocol("sqlr1");
    FAIL() << "unknown protocol accepted";
  } catch (const std::exception& e) {
    for (const std::string& name : protocol_names())  // the error lists the paper rows (rl/agent/paper.h)
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST(ParseTags, SkyrlSqlAndSolution) {
  for (const char* p : {"skyrl", "sqltrail", "sqltrail-legacy"}) {
    Action a = parse(p, "<think>count pigs</think>\n<sql> SELECT COUNT(*) FROM animals\n</sql>");
    EXPECT_EQ(a.kind, ActionKind::ExecSql) << p;
    EXPECT_EQ(a.sql, "SELECT COUNT(*) FROM animals");
    a = parse(p, "<think>done</think>\n<solution>SELECT 1;</solution>");
    EXPECT_EQ(a.kind, ActionKind::Answer) << p;
    EXPECT_EQ(a.sql, "SELECT 1;");
    // The stop string's token may carry a newline and the engine may keep <|im_end|>.
    a = parse(p, "<sql>SELECT 2</sql>\n");
    EXPECT_EQ(a.kind, ActionKind::ExecSql);
    EXPECT_EQ(a.sql, "SELECT 2");
    a = parse(p, "<think>x</think><solution>SELECT 5</solution><|im_end|>");
    EXPECT_EQ(a.kind, ActionKind::Answer);
    EXPECT_EQ(a.sql, "SELECT 5");
  }
  // SQL-Trail's reasoning block, mentioning tags it does not mean.
  Action a = parse("sqltrail", "<reasoning>I could use <solution> now, or <sql> first.</reasoning>\n<sql>SELECT 3</sql>");
  EXPECT_EQ(a.kind, ActionKind::ExecSql);
  EXPECT_EQ(a.sql, "SELECT 3");
  // Qwen3-style: the opener came with the prompt, only </think> was sampled.
  a = parse("skyrl", "let me think <sql>x</sql> later\n</think>\n<solution>SELECT 4</solution>");
  EXPECT_EQ(a.kind, ActionKind::Answer);
  EXPECT_EQ(a.sql, "SELECT 4");
}

TEST(ParseTags, MalformedTurnsAreInvalid) {
  for (const char* p : {"skyrl", "sqltrail", "sqltrail-legacy"}) {
    expect_invalid(p, "<think>x</think><sql>SELECT 1", "unclosed <sql>");
    expect_invalid(p, "<sql>SELECT 1</sql><sql>SELECT 2</sql>", "2 <sql> blocks");
    expect_invalid(p, "<sql><sql>SELECT 1</sql></sql>", "2 <sql> blocks");
    expect_invalid(p, "<sql>SELECT 1</sql></sql>", "2 </sql> for one <sql>");
    expect_invalid(p, "<sql>SELECT 1</sql>\n<solution>SELECT 1</solution>", "two actions");
    expect_invalid(p, "<solution>SELECT 1</solution><sql>SELECT 1</sql>", "two actions");
    expect_invalid(p, "SELECT 1</sql>", "</sql> without <sql>");
    expect_invalid(p, "</sql>SELECT 1<sql>", "</sql> before <sql>");
    expect_invalid(p, "<sql> \n\t </sql>", "empty <sql>");
    expect_invalid(p, "<solution></solution>", "empty <solution>");
    if (std::string_view(p) != "sqltrail") expect_invalid(p, "", "no <sql> or <solution>");
    if (std::string_view(p) != "sqltrail") expect_invalid(p, "<think>SELECT 1</think>", "no <sql> or <solution>");
    if (std::string_view(p) != "sqltrail") expect_invalid(p, "< sql>SELECT 1</ sql>", "no <sql> or <solution>");
  }
  // SQL-Trail's Algorithm 1 (lines 15-28): a segment with neither block is a reasoning segment.
  for (const char* text : {"", "<think>SELECT 1</think>", "< sql>SELECT 1</ sql>", "<reasoning>r</reasoning>"})
    EXPECT_EQ(parse("sqltrail", text).kind, ActionKind::Reasoning) << text;
  // An unclosed <think> is not masked: its <sql> is read (SkyRL's regex would run it too).
  EXPECT_EQ(parse("skyrl", "<think><sql>SELECT 1</sql>").kind, ActionKind::ExecSql);
}

TEST(ParseMtir, ToolCallAndAnswer) {
  Action a = parse("mtir",
                   "<think>\ncheck the count\n</think>\n\n<tool_call>\n{\"name\": \"sql-execute_sql_query\", \"arguments\": "
                   "{\"db_name\": \"farm\", \"sql\": \"SELECT COUNT(*) FROM animals\"}}\n</tool_call>");
  ASSERT_EQ(a.kind, ActionKind::ExecSql) << a.error;
  EXPECT_EQ(a.sql, "SELECT COUNT(*) FROM animals");
  EXPECT_EQ(a.tool, "sql-execute_sql_query");
  a = parse("mtir", "<think>ok</think>\n<answer>\n```sql\nSELECT COUNT(*) FROM animals\n```\n</answer>");
  ASSERT_EQ(a.kind, ActionKind::Answer);
  EXPECT_EQ(a.sql, "SELECT COUNT(*) FROM animals");
  // C.2's own example leaves the fence unclosed.
  a = parse("mtir", "<answer> ```sql\nSELECT 1\n</answer>");
  EXPECT_EQ(a.kind, ActionKind::Answer);
  EXPECT_EQ(a.sql, "SELECT 1");
  a = parse("mtir", "<answer>SELECT 2</answer>");
  EXPECT_EQ(a.sql, "SELECT 2");
  // Odd whitespace inside the call's JSON is still JSON.
  a = parse("mtir", "<tool_call>  \n\t{ \"name\" :\"sql-execute_sql_query\",\n\"arguments\":{ \"db_name\":\"farm\" ,\r\n"
                    " \"sql\":\"SELECT\\n1\" } }  </tool_call>");
  ASSERT_EQ(a.kind, ActionKind::ExecSql) << a.error;
  EXPECT_EQ(a.sql, "SELECT\n1");
}

TEST(ParseMtir, MalformedCalls) {
  expect_invalid("mtir", "<tool_call>{\"name\": \"sql-execute_sql_query\", \"arguments\": {\"db_name\": \"f\", \"sql\": }}</tool_call>",
                 "not valid JSON");
  expect_invalid("mtir", "<tool_call>[1, 2]</tool_call>", "not a JSON object");
  expect_invalid("mtir", "<tool_call>{\"arguments\": {}}</tool_call>", "no \"name\"");
  expect_invalid("mtir", "<tool_call>{\"name\": \"sql-execute_sql_query\", \"arguments\": \"SELECT 1\"}</tool_call>",
                 "no \"arguments\" object");
  expect_invalid("mtir", "<tool_call>{\"name\": \"python\", \"arguments\": {\"code\": \"1\"}}</tool_call>", "unknown tool 'python'");
  expect_invalid("mtir", "<tool_call>{\"name\": \"sql-execute_sql_query\", \"arguments\": {\"db_name\": \"f\"}}</tool_call>",
                 "\"sql\" missing");
  expect_invalid("mtir", "<tool_call>{\"name\": \"sql-execute_sql_query\", \"arguments\": {\"db_name\": \"f\", \"sql\": \" \"}}</tool_call>",
                 "\"sql\" is empty");
  expect_invalid("mtir", "<tool_call>{\"name\": \"sql-execute_sql_query\", \"arguments\": {\"sql\": \"SELECT 1\"}}</tool_call>",
                 "\"db_name\" missing");
  expect_invalid("mtir", "<tool_call>{\"name\": \"sql-execute_sql_query\"", "unclosed <tool_call>");
  expect_invalid("mtir", "<answer>SELECT 1</answer><tool_call>{}</tool_call>", "two actions");
  expect_invalid("mtir", "<answer>```sql\n```</answer>", "empty <answer>");
  expect_invalid("mtir", "I think the answer is 4.", "no <tool_call> or <answer>");
  expect_invalid("mtir", "<tool_call>" + std::string(100000, '[') + "</tool_call>", "nests");
}

TEST(ParseMtsql, ToolsVerdictsAndAnswer) {
  // Appendix D.1's turns.
  Action a = parse("mtsql",
                   "<think>\nOkay, let's see.\n</think>\n\n<tool_call>\n{\"name\": \"exec_sql\", \"arguments\": {\"code\": \"SELECT "
                   "COUNT(*) FROM car_makers JOIN countries ON car_makers.Country = countries.CountryId WHERE "
                   "countries.CountryName = 'usa';\"}}\n</tool_call>");
  ASSERT_EQ(a.kind, ActionKind::ExecSql) << a.error;
  EXPECT_EQ(a.tool, "exec_sql");
  EXPECT_EQ(a.sql, "SELECT COUNT(*) FROM car_makers JOIN countries ON car_makers.Country = countries.CountryId WHERE "
                   "countries.CountryName = 'usa';");
  EXPECT_EQ(a.verdict, "");
  a = parse("mtsql", "<think>fine</think>\n<exec_verify>pass</exec_verify>\n<tool_call>\n{\"name\": \"memory_retrieve\", "
                     "\"arguments\": {\"code\": \"SELECT 1\"}}\n</tool_call>");
  ASSERT_EQ(a.kind, ActionKind::MemoryRetrieve) << a.error;
  EXPECT_EQ(a.sql, "SELECT 1");
  EXPECT_EQ(a.verdict, "pass");
  a = parse("mtsql", "<think>the memory agrees <memory_verify>no_pass</memory_verify>?</think>\n"
                     "<memory_verify>pass</memory_verify>\n<answer_sql>SELECT 1</answer_sql>");
  ASSERT_EQ(a.kind, ActionKind::Answer);
  EXPECT_EQ(a.sql, "SELECT 1");
  EXPECT_EQ(a.verdict, "pass");
  VerifyVerdicts v = mtsql_verdicts("<exec_verify> no_pass </exec_verify> then <memory_verify>pass</memory_verify>");
  EXPECT_EQ(v.exec, "no_pass");
  EXPECT_EQ(v.memory, "pass");
  // D.1's base-model answer wraps the SQL in a fence inside the tags.
  a = parse("mtsql", "<answer_sql>```\nSELECT COUNT(*) AS n\nFROM car_makers;\n</answer_sql>");
  EXPECT_EQ(a.kind, ActionKind::Answer);
  EXPECT_EQ(a.sql, "SELECT COUNT(*) AS n\nFROM car_makers;");
}

TEST(ParseMtsql, MalformedCalls) {
  expect_invalid("mtsql", "<tool_call>{\"name\": \"exec_sql\", \"arguments\": {\"sql\": \"SELECT 1\"}}</tool_call>", "\"code\" missing");
  expect_invalid("mtsql", "<tool_call>{\"name\": \"sql-execute_sql_query\", \"arguments\": {\"code\": \"SELECT 1\"}}</tool_call>",
                 "unknown tool");
  expect_invalid("mtsql", "<tool_call>{'name': 'exec_sql'}</tool_call>", "not valid JSON");
  expect_invalid("mtsql", "<tool_call>{\"name\": \"exec_sql\", \"arguments\": {\"code\": \"SELECT 1\"}}</tool_call>\n"
                          "<tool_call>{\"name\": \"exec_sql\", \"arguments\": {\"code\": \"SELECT 2\"}}</tool_call>",
                 "2 <tool_call> blocks");
  expect_invalid("mtsql", "<answer_sql>SELECT 1", "unclosed <answer_sql>");
  expect_invalid("mtsql", "<exec_verify>pass</exec_verify>", "no <tool_call> or <answer_sql>");
}

// Random byte strings, mostly built from the protocols' own tag fragments so that the parsers'
// deeper paths are reached, plus raw bytes (invalid UTF-8, NULs). No input may throw.
TEST(ParseFuzz, NeverThrows) {
  const std::vector<std::string> pieces = {
      "<think>", "</think>", "<reasoning>", "</reasoning>", "<sql>", "</sql>", "<solution>", "</solution>", "<answer>",
      "</answer>", "<answer_sql>", "</answer_sql>", "<tool_call>", "</tool_call>", "<exec_verify>", "</exec_verify>",
      "{", "}", "[", "]", "\"", ":", ",", "\"name\"", "\"arguments\"", "\"exec_sql\"", "\"memory_retrieve\"",
      "\"sql-execute_sql_query\"", "\"sql\"", "\"code\"", "\"db_name\"", "SELECT 1", "```sql", "```", "\n", " ",
      "\\u0000", "\\ud800", "<|im_end|>", "\xff", "\xc3", "\xe2\x82", std::string("\0", 1)};
  std::mt19937_64 rng(20251123);
  std::vector<std::unique_ptr<Protocol>> protocols;
  for (const std::string& n : protocol_names()) protocols.push_back(make_protocol(n));
  const sql::Example example = testing::farm_example();
  const sql::Result result = testing::result_of({"n"}, {{sql::Cell::of_integer(1)}});
  int64_t invalid = 0, valid = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string text;
    const int parts = static_cast<int>(rng() % 24);
    for (int k = 0; k < parts; ++k) {
      if (rng() % 3 == 0) {
        for (int b = static_cast<int>(rng() % 8); b > 0; --b) text.push_back(static_cast<char>(rng() & 0xff));
      } else {
        text += pieces[rng() % pieces.size()];
      }
    }
    for (const auto& p : protocols) {
      Action a;
      ASSERT_NO_THROW(a = p->parse(text)) << p->name() << " on a " << text.size() << "-byte turn";
      if (a.kind == ActionKind::Invalid) {
        EXPECT_FALSE(a.error.empty());
        ++invalid;
      } else {
        EXPECT_TRUE(a.error.empty());
        ++valid;
      }
      StepOutcome outcome;
      outcome.result = p->executes(a) ? &result : nullptr;
      outcome.turns_left = 2;
      ASSERT_NO_THROW(p->done(a, 0));
      ASSERT_NO_THROW(p->inject(a, outcome, example)) << p->name();
    }
  }
  EXPECT_GT(invalid, 0);
  EXPECT_GT(valid, 0);  // the fragments do form actions now and then
}

}  // namespace
}  // namespace sqlrl::rl

// First prompts: the papers' texts with schema, evidence and question in the paper's order, and
// a chat rendering that ends on the assistant generation prompt.
#include <gtest/gtest.h>

#include "rl/agent/protocol.h"
#include "tests/rl_protocol/protocol_test_util.h"

namespace sqlrl::rl {
namespace {

using testing::farm_example;
using testing::farm_schema;

std::string render(const std::vector<ChatMessage>& messages, ChatTemplate t, std::vector<std::string> tools = {}) {
  ChatOptions options;
  options.chat_template = t;
  options.add_generation_prompt = true;
  options.tools = std::move(tools);
  return render_chat(messages, options);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// a before b before c in text, all present.
void expect_order(const std::string& text, const std::vector<std::string>& parts) {
  size_t at = 0;
  for (const std::string& part : parts) {
    size_t found = text.find(part, at);
    ASSERT_NE(found, std::string::npos) << "'" << part << "' missing or out of order in:\n" << text;
    at = found + part.size();
  }
}

TEST(FirstPrompt, SystemThenUserAndRendersToAGenerationPrompt) {
  for (const std::string& name : protocol_names()) {
    auto p = make_protocol(name);
    std::vector<ChatMessage> m = testing::prompt_text(*p, farm_example(), farm_schema());
    ASSERT_EQ(m.size(), 2u) << name;
    EXPECT_EQ(m[0].role, "system");
    EXPECT_EQ(m[1].role, "user");
    for (ChatTemplate t : {ChatTemplate::qwen3, ChatTemplate::qwen2_5}) {
      std::string text = render(m, t);
      EXPECT_TRUE(ends_with(text, "<|im_end|>\n<|im_start|>assistant\n")) << name;
      EXPECT_EQ(text.rfind("<|im_start|>system\n", 0), 0u) << name;
    }
  }
}

TEST(FirstPrompt, SkyrlAsItsPublicCodeBuildsIt) {
  std::vector<ChatMessage> m = testing::prompt_text(*make_protocol("skyrl"), farm_example(), farm_schema());
  // Appendix A's text with its placeholders unfilled, as sql_dataset.py's THINKING_SYSTEM.
  EXPECT_EQ(m[0].content.rfind("\nTask Overview:\nYou are a data science expert. Below, you are provided with a database "
                               "schema and a natural language question.", 0),
            0u);
  expect_order(m[0].content, {"Database Engine:\nSQLite\n\nDatabase Schema:\n{db_details}\n", "External Knowledge:\n{external_knowledge}\n",
                              "Question:\n{question}\n", "within a single <sql>your sql</sql> block",
                              "truncated in 50 rows if observation is too long. \n",
                              "<solution>SELECT COUNT(*) FROM animals WHERE species = 'pig';</solution>\n"
                              "------------------------ END OF EXAMPLE ------------------------\n"});
  EXPECT_TRUE(ends_with(m[0].content, "END OF EXAMPLE ------------------------\n"));
  // The user message: schema (OmniSQL CREATE TABLE), then evidence, then question.
  expect_order(m[1].content, {"{db_details}:CREATE TABLE animals (\n", "PRIMARY KEY (id)\n);",
                              ";\n {external_knowledge}: pig refers to species = 'pig'",
                              ";\n {question}: how many pigs are in the farm?"});
  EXPECT_TRUE(ends_with(m[1].content, "{question}: how many pigs are in the farm?"));
}

TEST(FirstPrompt, SqlTrailFillsTheA8Template) {
  std::vector<ChatMessage> m = testing::prompt_text(*make_protocol("sqltrail"), farm_example(), farm_schema());
  EXPECT_EQ(m[0].content.rfind("Task Overview:\nYou are a helpful text-to-SQL expert assistant.", 0), 0u);
  // schema_sqltrail's "Table: t / - col (TYPE, PRIMARY KEY)" lines, written out by hand.
  expect_order(m[0].content, {"Database Engine:\nSQLite\n\nDatabase Schema:\nTable: animals\n- id (INTEGER, PRIMARY KEY)\n"
                              "- species (TEXT)\n\nExternal Knowledge:\npig refers to species = 'pig'\n\nQuestion:\n"
                              "how many pigs are in the farm?\n\nInstructions:\n1. Make sure",
                              "3. In your first response, you must identify all tables and columns",
                              "1. Conduct thinking inside <reasoning>...</reasoning> blocks",
                              "<observation>\n   AVG(price)\n0       24.75\n</observation>"});
  EXPECT_EQ(m[1].content, "how many pigs are in the farm?");
}

TEST(FirstPrompt, MtirToolSystemAndUserPrompt) {
  std::vector<ChatMessage> m = testing::prompt_text(*make_protocol("mtir"), farm_example(), farm_schema());
  EXPECT_EQ(m[0].content,
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
            "signatures within <tools></tools> XML tags:\n<tools>\n{\"name\": \"sql-execute_sql_query\", \"description\": "
            "\"Execute SQL query and return partial results containing column names (maximum 10 records). Args:db_name "
            "(str): The name of the database. sql (str): The SQL query to execute. Returns:Dict[str, Union[List[Dict], "
            "Dict, None]]: A dictionary containing columns and data of the query (maximum of 10 records). Raises: "
            "TimeoutError: If the query execution exceeds the timeout. sqlite3.Error: If an error occurs during the query "
            "execution. \", \"parameters\": {\"type\": \"object\", \"properties\": {\"db_name\": {\"title\": \"Db Name\", "
            "\"type\": \"string\"}, \"sql\": {\"title\": \"Sql\", \"type\": \"string\"}}, \"required\": [\"db_name\", "
            "\"sql\"]}}\n</tools>\n\nFor each function call, return a JSON object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
            "<args-json-object>}\n</tool_call>");
  expect_order(m[1].content, {"You are a helpful SQL expert assistant.", "Database Engine: SQLite\nDatabase: farm\n",
                              "Database Schema:\nCREATE TABLE animals (\n",
                              "User Question: pig refers to species = 'pig' how many pigs are in the farm?\n",
                              "Option B (final answer):\n<think> Your final analysis... </think>\n<answer>\n```sql\nYOUR_SQL_QUERY\n</answer>"});
}

// The mtsql system message is exactly what Qwen3's template writes for B.0.1's two tools.
TEST(FirstPrompt, MtsqlToolsAsTheTemplateWritesThem) {
  std::vector<ChatMessage> m = testing::prompt_text(*make_protocol("mtsql"), farm_example(), farm_schema());
  const std::vector<std::string> tools = {
      "{\"type\": \"function\", \"function\": {\"name\": \"exec_sql\", \"description\": \"A tool for executing sql and "
      "return the query results\", \"parameters\": {\"type\": \"object\", \"properties\": {\"code\": {\"type\": "
      "\"string\", \"description\": \"The current generated SQL that will be executed\"}}, \"required\": [\"code\"]}}}",
      "{\"type\": \"function\", \"function\": {\"name\": \"memory_retrieve\", \"description\": \"A tool for retrieving the "
      "historical questions and ground-truth SQL in this dialogue\", \"parameters\": {\"type\": \"object\", "
      "\"properties\": {\"code\": {\"type\": \"string\", \"description\": \"The current generated SQL that needs to be "
      "verified coherence with the given historical memory\"}}, \"required\": [\"code\"]}}}"};
  EXPECT_EQ(render(m, ChatTemplate::qwen3), render({m[1]}, ChatTemplate::qwen3, tools));
  // First turn of a dialogue: the schema (Spider's create-table text) before the question.
  expect_order(m[1].content, {"You are a SQL expert. Your task is to translate a natural language question into SQL",
                              "2. Return the final SQL enclosed in: <answer_sql> ... </answer_sql>\n\n",
                              "Database schema:\ncreate table animals (\n    id number,\n    species text,\n    primary key (id)\n)\n"
                              "/*\n1 example rows from table animals:\nid\tspecies\n1\tpig\n*/\n",
                              "Now please translate the following question to SQL step by step\nQuestion: how many pigs are in "
                              "the farm? (Note you only need to translate"});
  EXPECT_TRUE(ends_with(m[1].content, "Note please call 'exec_sql' tool at least once)"));
}

TEST(FirstPrompt, MtsqlDialogueHistoryAsAppendixD) {
  sql::Example e = farm_example();
  e.question = "And how many cows?";
  e.history = {{"how many pigs are in the farm?", "SELECT count(*) FROM animals WHERE species = 'pig'"},
               {"Which is the oldest?", "SELECT name FROM animals ORDER BY age DESC LIMIT 1"}};
  std::vector<ChatMessage> m = testing::prompt_text(*make_protocol("mtsql"), e, farm_schema());
  expect_order(m[1].content,
               {"Here are previous question and corresponding correct SQL in this dialogue:\n\n## Turn 1 ##\nUser: \"Database "
                "schema:\ncreate table animals (\n",
                "*/\nQuestion: how many pigs are in the farm? \"\nCorresponding Correct SQL: \"SELECT count(*) FROM animals "
                "WHERE species = 'pig'\"\n\n## Turn 2 ##\nUser: \"Question: Which is the oldest? \"\nCorresponding Correct "
                "SQL: \"SELECT name FROM animals ORDER BY age DESC LIMIT 1\"\n\nNow please translate the following question "
                "to SQL step by step\nQuestion: And how many cows? (Note"});
  EXPECT_EQ(m[1].content.find("Database schema:", m[1].content.find("## Turn 2 ##")), std::string::npos);
}

// Prompt + sampled turn + inject() is the chat the template writes for the same conversation
// (assistant turn, then the observation as the paper's role, then the generation prompt): the
// token stream the policy sees mid-episode is the one it would see re-rendered.
TEST(InjectMarkup, MatchesTheTemplateOfTheWholeConversation) {
  const sql::Example example = farm_example();
  const sql::Result result = testing::result_of({"n"}, {{sql::Cell::of_integer(3)}});
  struct Case {
    const char* protocol;
    std::string turn;
    const char* observation_role;
  };
  const std::vector<Case> cases = {
      {"mtir", "<tool_call>\n{\"name\": \"sql-execute_sql_query\", \"arguments\": {\"db_name\": \"farm\", \"sql\": \"SELECT 3\"}}\n</tool_call>", "tool"},
      {"mtsql", "<tool_call>\n{\"name\": \"exec_sql\", \"arguments\": {\"code\": \"SELECT 3\"}}\n</tool_call>", "tool"},
      {"sqltrail", "<reasoning>count</reasoning>\n<sql>SELECT 3</sql>", "user"}};
  for (const Case& c : cases) {
    auto p = make_protocol(c.protocol);
    std::vector<ChatMessage> m = testing::prompt_text(*p, example, farm_schema());
    Action a = p->parse(c.turn);
    ASSERT_EQ(a.kind, ActionKind::ExecSql) << c.protocol << ": " << a.error;
    StepOutcome o;
    o.result = &result;
    o.turns_left = 3;
    const std::string injected = testing::inject_text(*p, a, o, example);
    const std::string streamed = render(m, ChatTemplate::qwen3) + c.turn + injected;
    // The observation message's content is what inject() put between the markers.
    std::string content = injected.substr(std::string("<|im_end|>\n<|im_start|>user\n").size());
    content = content.substr(0, content.size() - std::string("<|im_end|>\n<|im_start|>assistant\n").size());
    if (std::string(c.observation_role) == "tool") {
      ASSERT_EQ(content.rfind("<tool_response>\n", 0), 0u) << c.protocol;
      content = content.substr(16, content.size() - 16 - 17);  // "<tool_response>\n" ... "\n</tool_response>"
    }
    m.push_back(ChatMessage{"assistant", c.turn, std::nullopt, {}});
    m.push_back(ChatMessage{c.observation_role, content, std::nullopt, {}});
    EXPECT_EQ(streamed, render(m, ChatTemplate::qwen3)) << c.protocol;
  }
  // enable_thinking=false: the next assistant turn opens with the empty think block, as the
  // template's generation prompt does.
  ProtocolSettings user_rethink;  // the rethink line as a user turn (mtir-rethink=user)
  user_rethink.mtir_rethink = "user";
  auto p = make_protocol("mtir", user_rethink);
  StepOutcome o;
  o.empty_think_block = true;
  EXPECT_EQ(testing::inject_text(*p, p->parse("no action"), o, example),
            "<|im_end|>\n<|im_start|>user\nMy action is not correct. Let me rethink.<|im_end|>\n<|im_start|>assistant\n"
            "<think>\n\n</think>\n\n");
}

}  // namespace
}  // namespace sqlrl::rl

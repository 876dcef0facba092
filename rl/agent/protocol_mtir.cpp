// MTIR-SQL (arXiv 2510.25510): Qwen3 tool calling. <think>…</think> then either
// <tool_call>{"name": "sql-execute_sql_query", "arguments": {"db_name": …, "sql": …}}</tool_call>
// or <answer>```sql …</answer>; tool results come back as <tool_response> JSON (≤ 10 records);
// a turn with neither gets "My action is not correct. Let me rethink." in its own stream
// (Algorithm 1 line 20, appendix B).
#include "rl/agent/protocol_impl.h"
#include "sql/exec/format.h"

namespace sqlrl::rl::detail {
namespace {

constexpr const char* kToolName = "sql-execute_sql_query";

// Appendix C.1's tool signature, word for word (the docstring as the PDF prints it, on one line).
nlohmann::ordered_json tool_schema() {
  nlohmann::ordered_json db_name = {{"title", "Db Name"}, {"type", "string"}};
  nlohmann::ordered_json sql = {{"title", "Sql"}, {"type", "string"}};
  nlohmann::ordered_json tool;
  tool["name"] = kToolName;
  tool["description"] =
      "Execute SQL query and return partial results containing column names (maximum 10 records). Args:db_name "
      "(str): The name of the database. sql (str): The SQL query to execute. Returns:Dict[str, Union[List[Dict], "
      "Dict, None]]: A dictionary containing columns and data of the query (maximum of 10 records). Raises: "
      "TimeoutError: If the query execution exceeds the timeout. sqlite3.Error: If an error occurs during the query "
      "execution. ";
  tool["parameters"] = {{"type", "object"},
                        {"properties", {{"db_name", db_name}, {"sql", sql}}},
                        {"required", {"db_name", "sql"}}};
  return tool;
}

// Appendix C.2, verbatim; the PDF lost its line breaks, which we put where the headings and
// numbered items are. "{external_knowledge} + {question}?" is read as the two joined by a
// space (no "?" added). The answer example's ```sql fence is unclosed in the paper: kept.
std::string user_prompt(const sql::Example& example, const sql::DatabaseSchema& schema) {
  std::string question = untrusted(example.evidence.empty() ? example.question : example.evidence + " " + example.question);
  return "You are a helpful SQL expert assistant. You should first think about how to write the SQL query by "
         "analyzing the question, database schema, and external knowledge, then validate your SQL with the tool "
         "until it is correct. Finally, you provide the final SQL query in <answer> </answer>.\n"
         "\n"
         "Task Configuration\n"
         "Database Engine: SQLite\n"
         "Database: " + untrusted(example.db_id) + "\n"
         "Database Schema:\n" + untrusted(sql::schema_ddl(schema)) + "\n"
         "User Question: " + question + "\n"
         "\n"
         "Requirements\n"
         "1. Precision: Make sure you only output the information that is asked in the question. If the question "
         "asks for a specific column, make sure to only include that column in the SELECT clause, nothing more.\n"
         "2. Completeness: The generated query should return all of the information asked in the question without "
         "any missing or extra information.\n"
         "3. Correctness: Before generating the final SQL query, please think through the steps of how to write the "
         "query. Validate your SQL through tool testing.\n"
         "\n"
         "Output Format:\n"
         "Important: Use EITHER thinking + tool calls OR thinking + final answer. Do not mix the structures.\n"
         "Option A (when validation needed):\n"
         "<think> Your analysis... </think>\n"
         "[Tool calls for validation]\n"
         "Option B (final answer):\n"
         "<think> Your final analysis... </think>\n"
         "<answer>\n"
         "```sql\n"
         "YOUR_SQL_QUERY\n"
         "</answer>";
}

constexpr const char* kRethink = "My action is not correct. Let me rethink.";

struct Mtir final : Protocol {
  ProtocolSettings settings;
  explicit Mtir(const ProtocolSettings& s) : settings(s) {}
  const char* name() const override { return "mtir"; }
  // Section 4.1 / Table 4: max turns 6 (the action budget B of Algorithm 1).
  int max_turns() const override { return 6; }
  // Algorithm 1 line 8 stops a segment on </tool_call> (and EOS) and the answer closes the
  // trajectory; </answer> stops it as well so nothing is sampled after the answer.
  std::vector<std::string> stop_strings() const override { return {"</tool_call>", "</answer>"}; }

  // C.1 is the system prompt: Qwen's "# Tools" block around the signature above. The paper's
  // words are kept ("return a JSON object", where Qwen's template says "json"); the layout is
  // the Qwen3 template's. C.2 is the user message. The schema style is not given: OmniSQL's
  // CREATE TABLE text (schema_ddl), as for the other BIRD/Spider Qwen agents here.
  std::vector<ChatMessage> first_prompt(const sql::Example& example, const sql::DatabaseSchema& schema) const override {
    return {ChatMessage{"system", qwen_tools_system({chat_json_dumps(tool_schema())}, "JSON"), std::nullopt, {}},
            ChatMessage{"user", user_prompt(example, schema), std::nullopt, {}}};
  }

  Action parse(std::string_view turn_text) const override {
    std::string text = drop_blocks(turn_text, "<think>", "</think>");
    Action a = find_action(text, "<tool_call>", "</tool_call>", "<answer>", "</answer>");
    if (a.kind == ActionKind::Invalid) return a;
    if (a.kind == ActionKind::Answer) {
      a.sql = strip_sql_fence(a.sql);
      if (a.sql.empty()) return invalid("empty <answer>");
      return a;
    }
    ToolCall call = parse_tool_call(a.sql);
    if (!call.error.empty()) return invalid(call.error);
    if (call.name != kToolName) return invalid("unknown tool '" + call.name + "' (the only tool is " + kToolName + ")");
    std::string sql, db_name, error;
    // db_name is required by the signature; the environment runs the example's own database
    // whatever name is written (the paper's env is per-example).
    if (!string_argument(call, "db_name", &db_name, &error) || !string_argument(call, "sql", &sql, &error)) {
      return invalid(error);
    }
    a.kind = ActionKind::ExecSql;
    a.tool = call.name;
    a.sql = std::move(sql);
    return a;
  }

  // Algorithm 1: the answer returns; an invalid segment gets the rethink line and the loop
  // goes on (the budget B counts it as an action).
  bool done(const Action& action, int) const override { return action.kind == ActionKind::Answer; }

  // Section 3.2: the execution result is appended "in the user role"; Qwen3's template renders a
  // tool message as a user turn holding <tool_response>\n…\n</tool_response>, which is what we
  // write. The result is the tool's JSON ({"columns", "data"} with at most 10 records, or
  // {"error"}). The rethink line: Algorithm 1 line 20, y <- y + "My action is not correct. Let
  // me rethink.", goes into the rollout sequence y itself, the model's own stream (as Search-R1's
  // Algorithm 1, which MTIR's follows, appends it to the response), so it is the head of the
  // model's next segment; like every text the environment writes it is not trained on
  // (policy_mask 0: the policy did not sample it). mtir-rethink=user writes it as a user turn.
  std::string inject(const Action& action, const StepOutcome& outcome, const sql::Example&) const override {
    if (action.kind == ActionKind::ExecSql && outcome.result != nullptr) {
      return tool_response_turn(untrusted(sql::format_mtir_observation(*outcome.result, 10)), outcome);
    }
    if (settings.mtir_rethink == "user") return user_turn(kRethink, outcome);
    return assistant_continuation(kRethink, outcome);
  }

  std::string demo_turn(const DemoStep& turn) const override {
    const std::string head = demo_think_head(turn);
    if (turn.action == DemoAction::Answer) return head + "<answer>\n```sql\n" + turn.sql + "\n```\n</answer>";
    const nlohmann::ordered_json call = {{"name", "sql-execute_sql_query"},
                                         {"arguments", {{"db_name", turn.db_id}, {"sql", turn.sql}}}};
    return head + "<tool_call>\n" + chat_json_dumps(call) + "\n</tool_call>";
  }
};

}  // namespace

std::unique_ptr<Protocol> make_mtir(const ProtocolSettings& settings) { return std::make_unique<Mtir>(settings); }

}  // namespace sqlrl::rl::detail

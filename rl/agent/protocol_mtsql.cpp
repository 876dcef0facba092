// MTSQL-R1 (arXiv 2510.12831): verl multi-turn tool calling with two tools, exec_sql{code} and
// memory_retrieve{code} (appendix B.0.1); the agent writes <exec_verify>/<memory_verify> verdicts
// and ends with <answer_sql>…</answer_sql>. Tool results are verl tool messages, which Qwen3's
// template renders as a user turn holding <tool_response>.
#include <cctype>
#include <map>
#include <mutex>

#include "rl/agent/protocol_impl.h"
#include "sql/exec/format.h"
#include "runtime/error.h"
#include "sql/exec/pyrepr.h"

namespace sqlrl::rl::detail {
namespace {

// B.0.1's tool_schema entries as verl passes them to the chat template ({"type": "function",
// "function": {...}}). The YAML indents "required" under "properties"; we read it as the
// parameters' required list, its evident meaning.
std::string tool_json(const char* name, const char* description, const char* code_description) {
  nlohmann::ordered_json code = {{"type", "string"}, {"description", code_description}};
  nlohmann::ordered_json function;
  function["name"] = name;
  function["description"] = description;
  function["parameters"] = {{"type", "object"}, {"properties", {{"code", code}}}, {"required", {"code"}}};
  return chat_json_dumps(nlohmann::ordered_json{{"type", "function"}, {"function", function}});
}

// The CoSQL/SParC schema text of appendix D's prompts: "create table t (\n    col type,\n ...
// primary key (...),\n    foreign key (c) references u(d)\n)\n/*\n1 example rows from table t:
// ...*/". Spider's column types are number/text; we map SQLite declared types onto them. The
// example row takes each column's first sample value (DatabaseSchema keeps per-column samples,
// not whole rows) and separates cells by tabs: guesses, the PDF shows only aligned spaces.
std::string spider_type(const std::string& declared) {
  std::string t;
  for (char c : declared) t += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* n : {"INT", "REAL", "FLOA", "DOUB", "NUM", "DEC", "BOOL"}) {
    if (t.find(n) != std::string::npos) return "number";
  }
  return "text";
}

std::string mtsql_schema(const sql::DatabaseSchema& schema) {
  std::string out;
  for (const sql::TableInfo& t : schema.tables) {
    out += "create table " + t.name + " (\n";
    std::vector<std::string> lines, keys;
    for (const sql::ColumnInfo& c : t.columns) {
      lines.push_back(c.name + " " + spider_type(c.type));
      if (c.primary_key) keys.push_back(c.name);
    }
    if (!keys.empty()) {
      std::string pk;
      for (const std::string& k : keys) pk += (pk.empty() ? "" : ", ") + k;
      lines.push_back("primary key (" + pk + ")");
    }
    for (const sql::ForeignKey& fk : t.foreign_keys) {
      lines.push_back("foreign key (" + fk.column + ") references " + fk.ref_table +
                      (fk.ref_column.empty() ? "" : "(" + fk.ref_column + ")"));
    }
    for (size_t i = 0; i < lines.size(); ++i) out += "    " + lines[i] + (i + 1 < lines.size() ? ",\n" : "\n");
    out += ")\n/*\n1 example rows from table " + t.name + ":\n";
    std::string header, row;
    for (size_t i = 0; i < t.columns.size(); ++i) {
      header += (i ? "\t" : "") + t.columns[i].name;
      row += (i ? "\t" : "") + (t.columns[i].samples.empty() ? std::string() : sql::python_str(t.columns[i].samples[0]));
    }
    out += header + "\n" + row + "\n*/\n";
  }
  return out;
}

// Appendix D, "PROMPT FOR OURS" (D.2's layout of the history: User: "..." / Corresponding
// Correct SQL: "..."). The first turn of a dialogue has no history section; its schema goes
// before the question as D's history shows it for turn 1 (a guess: the paper shows only later
// turns).
std::string user_prompt(const sql::Example& example, const sql::DatabaseSchema& schema) {
  std::string out =
      "You are a SQL expert. Your task is to translate a natural language question into SQL through step-by-step "
      "reasoning. Please follow the steps:\n"
      "\n"
      "1. Reasoning\n"
      "   - Always think step by step before calling the tool. Draft the SQL.\n"
      "2. Calling 'exec_sql' tool (Please call 'exec_sql' tool at least once)\n"
      "   - Call the 'exec_sql' tool to execute the current generated SQL and verify the execution results based on "
      "questions.\n"
      "   - conclude <exec_verify>pass</exec_verify> if results are reasonable, otherwise "
      "<exec_verify>no_pass</exec_verify>.\n"
      "   - If no_pass, refine the SQL using the execution results and repeat call 'exec_sql' tool until it passes.\n"
      "\n"
      "Note:\n"
      "1. Please call 'exec_sql' tool at least once\n"
      "2. Return the final SQL enclosed in: <answer_sql> ... </answer_sql>\n"
      "\n";
  const std::string schema_text = "Database schema:\n" + untrusted(mtsql_schema(schema));
  if (example.history.empty()) {
    out += schema_text + "\n";
  } else {
    out += "Here are previous question and corresponding correct SQL in this dialogue:\n\n";
    for (size_t i = 0; i < example.history.size(); ++i) {
      const sql::Turn& turn = example.history[i];
      out += "## Turn " + std::to_string(i + 1) + " ##\nUser: \"" + (i == 0 ? schema_text : std::string()) +
             "Question: " + untrusted(turn.question) + " \"\nCorresponding Correct SQL: \"" + untrusted(turn.gold_sql) +
             "\"\n\n";
    }
  }
  out += "Now please translate the following question to SQL step by step\nQuestion: " + untrusted(example.question) +
         " (Note you only need to translate the question to SQL instead answer the question. Once you feel you are "
         "ready for the final SQL, directly return the SQL inside <answer_sql> and </answer_sql> at the end of your "
         "response.\nNote please call 'exec_sql' tool at least once)";
  return out;
}

// B.0.1's exec_sql return message; line breaks as printed, with the PDF's wrapped lines joined
// and the straight quotes of the rendered tool response in D.1.
std::string exec_recap(const std::string& current_q, const std::string& code, const std::string& return_msg) {
  return "Recap:\n"
         "- Current question: " + current_q + "\n"
         "- Generated SQL: " + code + "\n"
         "- SQL execution results (truncated to 200 characters): " + return_msg + "\n"
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
         "3. If <exec_verify>no_pass</exec_verify>, think step by step, refine the SQL and provide a corrected SQL and "
         "then execute it via re-calling 'exec_sql' tool again via <tool_call>. Repeat until you get valid results.\n"
         "\n"
         "4. If <exec_verify>pass</exec_verify>, You have to call 'memory_retrieve' tool via <tool_call> at least "
         "once to ensure the current generated SQL is coherent with the historical memory.";
}

// "Memory (historical information in order)" as D.1/D.2 print it: per earlier turn k (from 0)
// "== Turn k ==", the question (with the "Question: " prefix the paper shows twice), the gold SQL,
// Spider's parse of it ("Parsed Elements for each term", the released memory_retriever.py's
// line; `schema` null: left out) and, when the engine ran it, its result cut to 50 characters,
// then "== Turn k ==" again.
std::string memory_string(const sql::Example& example, const std::vector<sql::Result>* results,
                          const sql::Schema* schema) {
  std::string out;
  for (size_t k = 0; k < example.history.size(); ++k) {
    const std::string marker = "== Turn " + std::to_string(k) + " ==";
    out += (k ? "\n" : "") + marker + "\nQuestion: Question: " + untrusted(example.history[k].question) +
           "\nGround-Truth SQL: " + untrusted(example.history[k].gold_sql) + "\n";
    if (schema != nullptr)
      out += "Parsed Elements for each term: " + untrusted(mtsql_parsed_elements(*schema, example.history[k].gold_sql)) + "\n";
    if (results != nullptr && k < results->size()) {
      const sql::Result& r = (*results)[k];
      out += "SQL Results (truncated to 50 characters): " +
             untrusted(sql::utf8_prefix(r.ok() ? sql::python_rows_repr(r.rows) : "Error: " + r.error, 50)) + "\n";
    }
    out += marker;
  }
  return out;
}

// B.0.1's memory_retrieve return message (layout as exec_recap's).
std::string memory_text(const std::string& current_q, const std::string& code, const std::string& execution_results,
                        const std::string& memory) {
  return "You are a coherence verifier for Multi-turn Text2SQL.\n"
         "\n"
         "Current Question: " + current_q + "\n"
         "Proposed SQL: " + code + "\n"
         "The execution results of the proposed SQL: " + execution_results + "\n"
         "\n"
         "Memory (historical information in order):\n" + memory + "\n"
         "\n"
         "Your tasks:\n"
         "1. Verify whether the Proposed SQL is coherent with the Current Question and the Memory, based on the "
         "relation between the Current Question and Historical Questions.\n"
         "   - If the Current Question introduces changes (new columns, conditions, ordering, etc.), SQL should "
         "update accordingly.\n"
         "   - If not, SQL must remain consistent with the Historical Questions.\n"
         "\n"
         "Step-by-step reasoning checklist:\n"
         "1. First parse the Proposed SQL into its components (SELECT, FROM, WHERE, GROUP BY, HAVING, ORDER BY, "
         "JOINs).\n"
         "2. Check tables are consistent with context.\n"
         "3. Check selected columns match current and historical intent.\n"
         "4. Check conditions (WHERE/GROUP/HAVING) reflect the relation between current and past questions.\n"
         "5. Check ordering (ORDER BY) is preserved unless explicitly changed.\n"
         "6. Verify that joins and table relationships follow the established context.\n"
         "7. Make sure the SQL and the execution results of the proposed SQL answer the current question while "
         "remaining logically coherent with the conversation history and execution results.\n"
         "\n"
         "2. After verifying, output one of the following:\n"
         "   - '<memory_verify>pass</memory_verify>' if coherent.\n"
         "   - '<memory_verify>no_pass</memory_verify>' if not coherent.\n"
         "\n"
         "3. If 'no_pass': explain issues, think step by step to refine SQL, and then please call 'exec_sql' tool "
         "again via <tool_call> to check the corrected SQL and get the execution results. Repeat until you get "
         "'pass'.\n"
         "\n"
         "4. If 'pass': return the final SQL inside '<answer_sql>...</answer_sql>'.\n"
         "\n"
         "Note finally you should return the final SQL inside '<answer_sql>...</answer_sql>";
}

struct Mtsql final : Protocol {
  ProtocolSettings settings;
  // Spider's schema of each database a memory was shown for (read once; null: unreadable).
  mutable std::mutex schemas_mutex;
  mutable std::map<std::string, std::shared_ptr<const sql::Schema>> schemas;

  explicit Mtsql(const ProtocolSettings& s) : settings(s) {}
  const char* name() const override { return "mtsql"; }

  std::shared_ptr<const sql::Schema> spider_schema(const std::string& db_path) const {
    std::lock_guard<std::mutex> lock(schemas_mutex);
    auto it = schemas.find(db_path);
    if (it != schemas.end()) return it->second;
    std::shared_ptr<const sql::Schema> schema;
    try {
      schema = std::make_shared<const sql::Schema>(sql::load_schema_sqlite(db_path));
    } catch (const Error&) {
      // The history's queries fail on such a database too, and say so in the memory.
    }
    return schemas.emplace(db_path, schema).first->second;
  }
  // B: "the maximum interaction between agent and tools is set to 4" (verl multi_turn.max_turns
  // = 4, which counts assistant generations).
  int max_turns() const override { return 4; }
  // verl samples to EOS and then parses tool calls; stopping at </tool_call> gives the same
  // text (the chat markup that would follow is written by inject).
  std::vector<std::string> stop_strings() const override { return {"</tool_call>", "</answer_sql>"}; }

  std::vector<ChatMessage> first_prompt(const sql::Example& example, const sql::DatabaseSchema& schema) const override {
    std::vector<std::string> tools = {
        tool_json("exec_sql", "A tool for executing sql and return the query results",
                  "The current generated SQL that will be executed"),
        tool_json("memory_retrieve", "A tool for retrieving the historical questions and ground-truth SQL in this dialogue",
                  "The current generated SQL that needs to be verified coherence with the given historical memory")};
    return {ChatMessage{"system", qwen_tools_system(tools), std::nullopt, {}},
            ChatMessage{"user", user_prompt(example, schema), std::nullopt, {}}};
  }

  Action parse(std::string_view turn_text) const override {
    std::string text = drop_blocks(turn_text, "<think>", "</think>");
    Action a = find_action(text, "<tool_call>", "</tool_call>", "<answer_sql>", "</answer_sql>");
    if (a.kind == ActionKind::Invalid) return a;
    VerifyVerdicts v = mtsql_verdicts(turn_text);
    a.verdict = !v.memory.empty() ? v.memory : v.exec;
    if (a.kind == ActionKind::Answer) {
      a.sql = strip_sql_fence(a.sql);
      if (a.sql.empty()) return invalid("empty <answer_sql>");
      return a;
    }
    ToolCall call = parse_tool_call(a.sql);
    if (!call.error.empty()) return invalid(call.error);
    if (call.name != "exec_sql" && call.name != "memory_retrieve") {
      return invalid("unknown tool '" + call.name + "' (tools: exec_sql, memory_retrieve)");
    }
    std::string code, error;
    if (!string_argument(call, "code", &code, &error)) return invalid(error);
    a.kind = call.name == "exec_sql" ? ActionKind::ExecSql : ActionKind::MemoryRetrieve;
    a.tool = call.name;
    a.sql = std::move(code);
    return a;
  }

  // verl's multi-turn rollout ends the episode when an assistant message holds no parsable
  // tool call: an answer, and also an invalid turn, finish it.
  bool done(const Action& action, int) const override {
    return action.kind == ActionKind::Answer || action.kind == ActionKind::Invalid;
  }
  bool executes(const Action& action) const override {
    return action.kind == ActionKind::ExecSql || action.kind == ActionKind::MemoryRetrieve;
  }

  std::string inject(const Action& action, const StepOutcome& outcome, const sql::Example& example) const override {
    // D.1: "Current question: Question: ..."
    const std::string current_q = "Question: " + untrusted(example.question);
    const std::string results =
        outcome.result != nullptr ? untrusted(sql::format_recap_observation(*outcome.result, 200)) : "";
    const std::string code = untrusted(action.sql);  // the model's SQL, read back as text
    if (action.kind == ActionKind::ExecSql) {
      return tool_response_turn(exec_recap(current_q, code, results), outcome);
    }
    if (action.kind == ActionKind::MemoryRetrieve) {
      // An unreadable database: an empty schema, on which every parse fails ("{}").
      static const sql::Schema unreadable;
      std::shared_ptr<const sql::Schema> schema;
      if (settings.mtsql_memory_parse && !example.history.empty()) schema = spider_schema(example.db_path);
      const sql::Schema* shown = !settings.mtsql_memory_parse ? nullptr : schema ? schema.get() : &unreadable;
      return tool_response_turn(
          memory_text(current_q, code, results, memory_string(example, outcome.history_results, shown)), outcome);
    }
    return "";  // Answer / Invalid end the episode: nothing follows
  }

  // The released reward's extract_code (verl/utils/reward_score/text2sql.py): the last
  // <answer_sql>, else the `code` of the last tool call (either tool), else the last <think>
  // block's text, else the whole response. We take the first two: what a <think> block or the
  // whole text holds is prose, and scoring it as SQL can only fail.
  std::string fallback_answer(const Trajectory& t) const override {
    if (!settings.mtsql_answer_fallback) return {};
    for (auto turn = t.turns.rbegin(); turn != t.turns.rend(); ++turn)
      if (turn->action.kind == ActionKind::ExecSql || turn->action.kind == ActionKind::MemoryRetrieve)
        return turn->action.sql;
    return {};
  }

  std::string demo_turn(const DemoStep& turn) const override {
    const std::string head = demo_think_head(turn);
    if (turn.action == DemoAction::Answer) return head + "<answer_sql>" + turn.sql + "</answer_sql>";
    const nlohmann::ordered_json call = {{"name", turn.action == DemoAction::Memory ? "memory_retrieve" : "exec_sql"},
                                         {"arguments", {{"code", turn.sql}}}};
    return head + "<tool_call>\n" + chat_json_dumps(call) + "\n</tool_call>";
  }
  bool has_memory() const override { return true; }
  // The prompts' words (appendix B): pass / no_pass.
  std::string verdict(DemoAction on, bool pass) const override {
    const char* tag = on == DemoAction::Memory ? "memory_verify" : "exec_verify";
    return std::string("<") + tag + ">" + (pass ? "pass" : "no_pass") + "</" + tag + ">\n";
  }
};

}  // namespace

std::unique_ptr<Protocol> make_mtsql(const ProtocolSettings& settings) { return std::make_unique<Mtsql>(settings); }

}  // namespace sqlrl::rl::detail

// SQL-Trail (arXiv 2601.17699): <reasoning>…</reasoning> then <sql>…</sql> or <solution>…</solution>;
// observations in a user turn with column headers and "You have N turns left"; Algorithm 1 of
// appendix A.8 is the environment.
#include "rl/agent/protocol_impl.h"
#include "sql/exec/format.h"

namespace sqlrl::rl::detail {
namespace {

// "System Prompt for Multi-turn Text-to-SQL Agent" (appendix A.8), verbatim; the PDF text has no
// line breaks, so the layout follows the SkyRL-SQL prompt it extends (A.3 cites SkyRL-v0). The
// paper prints "…" where SkyRL's code has "..."; we keep SkyRL's ASCII. "Relavent" and the stray
// "nothing more." are the paper's. The example uses <think> although the format asks for
// <reasoning>: the paper's, kept.
constexpr const char* kSystemHead =
    "Task Overview:\n"
    "You are a helpful text-to-SQL expert assistant. Below, you are provided with a database schema and a natural "
    "language question. Your task is to understand the schema and generate a valid SQL query to answer the "
    "question within limited turns. You should breakdown the problem, draft your reasoning process, and generate "
    "the solution.\n"
    "\n"
    "Database Engine:\n";
constexpr const char* kSystemTail =
    "Instructions:\n"
    "1. Make sure you only output the information that is asked in the question. If the question asks for a "
    "specific column, make sure to only include that column in the SELECT clause, nothing more.\n"
    "2. The generated query should return all of the information asked in the question without any missing or "
    "extra information.\n"
    "3. In your first response, you must identify all tables and columns from the database schema that are "
    "relevant to answering the question.\n"
    "4. Before generating the final SQL query you should reflect through previous steps and refine any errors "
    "previous steps.\n"
    "\n"
    "Format:\n"
    "1. Conduct thinking inside <reasoning>...</reasoning> blocks every time you get new observation or "
    "information. nothing more.\n"
    "2. You can use SQL tool written within a single <sql>your sql</sql> block to explore or verify. SQL tool "
    "output will be shown as dataframe inside <observation>...</observation>. Based on this observation, you can "
    "think again and refine.\n"
    "3. The returned dataframe will be truncated in 50 rows if observation is too long.\n"
    "4. If you find no further exploration is needed or reaches max turns, directly provide the final sql in "
    "<solution>...</solution>\n"
    "------------------------ START OF EXAMPLE ------------------------\n"
    "Question: what is the average price of all products?\n"
    "\n"
    "Database Schema:\n"
    "    Table: products\n"
    "    - id (INTEGER, PRIMARY KEY)\n"
    "    - name (TEXT)\n"
    "    - price (REAL)\n"
    "\n"
    "<think>I need to find the average price of all items listed in the products table.\n"
    "\n"
    "Relavent tables and columns:\n"
    "- 'products':'price'\n"
    "\n"
    "To solve this problem I should issue a simple aggregate query using\n"
    "AVG(price).</think>\n"
    "<sql>SELECT AVG(price) FROM products;</sql>\n"
    "<observation>\n"
    "   AVG(price)\n"
    "0       24.75\n"
    "</observation>\n"
    "<think>The result shows that the average product price is 24.75. The question asks\n"
    "for the average price, so I can directly return this SQL query as the final\n"
    "solution.</think>\n"
    "<solution>SELECT AVG(price) FROM products;</solution>\n"
    "------------------------ END OF EXAMPLE ------------------------";

// Algorithm 1, line 22: the observation when the query's result "is invalid" (an SQLite error
// or timeout). A turn whose <sql>/<solution> block is malformed gets it too (line 18 runs
// whatever <sql> holds, which then fails). A turn with neither block gets nothing (lines 15-28
// append no observation), unless sqltrail-reasoning-stop is off: then it gets this text.
constexpr const char* kInvalid = "Your previous action is invalid. Think and try again.";

bool has_action_tag(std::string_view text) {
  for (const char* tag : {"<sql>", "</sql>", "<solution>", "</solution>"})
    if (text.find(tag) != std::string_view::npos) return true;
  return false;
}

struct SqlTrail final : Protocol {
  ProtocolSettings settings;
  explicit SqlTrail(const ProtocolSettings& s) : settings(s) {}
  const char* name() const override { return "sqltrail"; }
  // Algorithm 1 runs T = 10 turns (A.5) and then, line 31, generates one final <solution>
  // block: 11 assistant turns at most, the last one after "You have 1 turns left".
  int max_turns() const override { return 11; }
  // Algorithm 1 line 10: a segment ends on </reasoning>, </sql>, </solution> or <eos>, and each
  // segment is a turn of the budget (line 29), a reasoning-only one too.
  std::vector<std::string> stop_strings() const override {
    if (settings.sqltrail_reasoning_stop) return {"</reasoning>", "</sql>", "</solution>"};
    return {"</sql>", "</solution>"};
  }
  // Line 31: "Generate final <solution></solution> block": the environment opens the block and
  // the model writes the SQL and closes it.
  std::string final_turn_prefix() const override { return settings.sqltrail_final_solution ? "<solution>" : ""; }
  std::vector<std::string> final_turn_stops() const override {
    if (settings.sqltrail_final_solution) return {"</solution>"};
    return stop_strings();
  }

  // The A.8 template filled in (engine, SQL-Trail's "Table: t / - col (TYPE, PRIMARY KEY)" schema,
  // external knowledge, question) as the system message; Algorithm 1's dialogue then starts from
  // the question x as the user message (line 3: h <- x).
  std::vector<ChatMessage> first_prompt(const sql::Example& example, const sql::DatabaseSchema& schema) const override {
    std::string system = kSystemHead;
    system += "SQLite\n\nDatabase Schema:\n" + untrusted(trim(sql::schema_sqltrail(schema))) + "\n\nExternal Knowledge:\n" +
              untrusted(example.evidence) + "\n\nQuestion:\n" + untrusted(example.question) + "\n\n" + kSystemTail;
    return {ChatMessage{"system", std::move(system), std::nullopt, {}},
            ChatMessage{"user", untrusted(example.question), std::nullopt, {}}};
  }

  Action parse(std::string_view turn_text) const override {
    // The format asks for <reasoning>, the prompt's own example uses <think>: both are reasoning.
    std::string text = drop_blocks(drop_blocks(turn_text, "<reasoning>", "</reasoning>"), "<think>", "</think>");
    if (settings.sqltrail_reasoning_stop && !has_action_tag(text)) {
      Action a;
      a.kind = ActionKind::Reasoning;  // lines 15-28: neither block, nothing happens
      return a;
    }
    return parse_sql_or_solution(text);
  }

  bool done(const Action& action, int) const override { return action.kind == ActionKind::Answer; }

  // Algorithm 1 lines 24-27: "<observation>" o + "You have (T−t) turns left to complete the
  // task." "</observation>", appended as a user turn (A.3: "appended to the conversation as user
  // input"). o = ToString(DataFrame(r) with column headers): pandas to_string with index and
  // column names, the first 50 rows after SkyRL's note when over 9000 characters. Line breaks
  // around o follow the example in the system prompt. A reasoning segment appends nothing: the
  // model goes on in its own message (a new one when it closed its message with <|im_end|>).
  std::string inject(const Action& action, const StepOutcome& outcome, const sql::Example&) const override {
    if (action.kind == ActionKind::Reasoning) return assistant_continuation("", outcome);
    std::string o = kInvalid;
    if (action.kind == ActionKind::ExecSql && outcome.result != nullptr && outcome.result->ok()) {
      o = untrusted(sql::format_df_observation(*outcome.result, sql::DataFrameStyle{},
                                               sql::ObservationContext{outcome.db_path, action.sql}));
    }
    return user_turn("<observation>\n" + o + "\nYou have " + std::to_string(outcome.turns_left) +
                         " turns left to complete the task.\n</observation>",
                     outcome);
  }

  std::string demo_turn(const DemoStep& turn) const override {
    return demo_reasoning_then_sql(turn, "<reasoning>", "</reasoning>");
  }
};

}  // namespace

std::unique_ptr<Protocol> make_sqltrail(const ProtocolSettings& settings) { return std::make_unique<SqlTrail>(settings); }

}  // namespace sqlrl::rl::detail

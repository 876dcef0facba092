// SkyRL-SQL (MTI-LLM workshop at NeurIPS 2025, OpenReview VNPGUGbC1p): <think>…</think> then <sql>…</sql> or <solution>…</solution>.
//
// The paper's appendix A prints the prompt; its public code (NovaSky-AI/SkyRL,
// skyrl-train/examples/text_to_sql/sql_dataset.py, the data behind SkyRL-SQL-653) uses that text
// as the *system* message with its {db_details} / {external_knowledge} / {question} placeholders
// left unfilled, and fills a user message "{db_details}:<schema>;\n {external_knowledge}: ...".
// We reproduce the code byte for byte (trailing spaces included): that is what the released
// model was trained on. The environment is skyrl_gym's text2sql env + SQLCodeExecutorToolGroup.
#include "rl/agent/protocol_impl.h"
#include "sql/exec/format.h"

namespace sqlrl::rl::detail {
namespace {

// Appendix A, as in sql_dataset.py's THINKING_SYSTEM (the multi-turn prompt; "analisying" sic).
constexpr const char* kSystem =
    "\n"
    "Task Overview:\n"
    "You are a data science expert. Below, you are provided with a database schema and a natural language "
    "question. Your task is to understand the schema and generate a valid SQL query to answer the question within "
    "limited turns. You should breakdown the problem, draft your reasoning process, and generate the solution.\n"
    "\n"
    "Database Engine:\n"
    "SQLite\n"
    "\n"
    "Database Schema:\n"
    "{db_details}\n"
    "This schema describes the database's structure, including tables, columns, primary keys, foreign keys, and "
    "any relevant relationships or constraints.\n"
    "\n"
    "External Knowledge:\n"
    "{external_knowledge}\n"
    "\n"
    "Question:\n"
    "{question}\n"
    "\n"
    "Instructions:\n"
    "- Make sure you only output the information that is asked in the question. If the question asks for a "
    "specific column, make sure to only include that column in the SELECT clause, nothing more.\n"
    "- The generated query should return all of the information asked in the question without any missing or "
    "extra information.\n"
    "- Before generating the final SQL query, please think through the steps of how to write the query. It "
    "should include detailed considerations such as analisying questions, \n"
    "summarizing relevant findings, brainstorming new ideas, verifying the accuracy of the current steps, "
    "refining any errors, thinking of how to call SQL tools, and revisiting previous steps.\n"
    "\n"
    "\n"
    "Format:\n"
    "- Conduct thinking inside <think>...</think> blocks every time you get new observation or information. \n"
    "- You can use SQL tool written within a single <sql>your sql</sql> block to explore or verify. SQL tool "
    "output will be shown as dataframe inside <observation>...</observation>. Based on this observation, you can "
    "think again and refine.\n"
    "- The returned dataframe will be truncated in 50 rows if observation is too long. \n"
    "- If you find no further exploration is needed or reaches max turns, you MUST directly provide the final "
    "SQL query solution inside <solution>...</solution>. \n"
    "\n"
    "------------------------ START OF EXAMPLE ------------------------\n"
    "Question: how many pigs are in the farm? \n"
    "    Database Schema:\n"
    "    Table: animals\n"
    "    - id (INTEGER, PRIMARY KEY)\n"
    "    - species (TEXT)\n"
    "    - age (INTEGER)\n"
    "    - name (TEXT)\n"
    "\n"
    "<think>I am querying how many pigs are in the farm. I will begin by checking if the 'animals' table exists "
    "and contains entries with species = 'pig'.</think>\n"
    "<sql>SELECT COUNT(*) FROM animals WHERE species = 'pig';</sql>\n"
    "<observation>\n"
    "+----------+\n"
    "| COUNT(*) |\n"
    "+----------+\n"
    "|   12     |\n"
    "+----------+\n"
    "</observation>\n"
    "<think>The result indicates that there are 12 pigs in the farm. Since the question asks for how many pigs, "
    "I can now output the final SQL as the solution.</think>\n"
    "<solution>SELECT COUNT(*) FROM animals WHERE species = 'pig';</solution>\n"
    "------------------------ END OF EXAMPLE ------------------------\n";

// SQLCodeExecutorToolGroup.sql's text when the env found no <sql> block (sql is None).
constexpr const char* kInvalid =
    "Your previous action is invalid. Follow the format of outputting thinking process and sql tool, and try "
    "again.";

struct SkyRL final : Protocol {
  const char* name() const override { return "skyrl"; }
  // Section 5: "allowing each rollout to go for up to 5 turns" (env default max_turns = 5).
  int max_turns() const override { return 5; }
  // run_skyrl_sql.sh: generator.sampling_params.stop='["</sql>", "</solution>"]'.
  std::vector<std::string> stop_strings() const override { return {"</sql>", "</solution>"}; }

  std::vector<ChatMessage> first_prompt(const sql::Example& example, const sql::DatabaseSchema& schema) const override {
    // SynSQL's "schema" field is OmniSQL's CREATE TABLE text: schema_ddl.
    std::string user = "{db_details}:" + untrusted(sql::schema_ddl(schema)) + ";\n {external_knowledge}: " +
                       untrusted(example.evidence) + ";\n {question}: " + untrusted(example.question);
    return {ChatMessage{"system", kSystem, std::nullopt, {}}, ChatMessage{"user", std::move(user), std::nullopt, {}}};
  }

  Action parse(std::string_view turn_text) const override {
    return parse_sql_or_solution(drop_blocks(turn_text, "<think>", "</think>"));
  }

  // The env ends on <solution> (or the budget, which the engine counts); an invalid turn gets
  // kInvalid as its observation and the episode goes on.
  bool done(const Action& action, int) const override { return action.kind == ActionKind::Answer; }

  // SkyRL-SQL is trained with generator.use_conversation_multi_turn=false (and SkyRL-v0 before
  // it appended next_obs the same way): the observation is appended to the assistant's own
  // stream, no chat markup, exactly as the tool returns it:
  //   "\n\n<observation>{obs}\n<reminder>You have {n} turns left to complete the task.</reminder></observation>\n\n"
  // with n = max_turns - turns taken. Rows: pandas to_string(index=False) of set(rows) (column
  // labels 0..k-1), the first 50 rows after a note when over 9000 characters.
  std::string inject(const Action& action, const StepOutcome& outcome, const sql::Example&) const override {
    std::string obs;
    if (action.kind == ActionKind::ExecSql && outcome.result != nullptr) {
      sql::DataFrameStyle style;
      style.index = false;
      style.column_names = false;
      style.dedupe_rows = true;
      obs = untrusted(sql::format_df_observation(*outcome.result, style, sql::ObservationContext{outcome.db_path, action.sql}));
    } else {
      obs = kInvalid;
    }
    return "\n\n<observation>" + obs + "\n<reminder>You have " + std::to_string(outcome.turns_left) +
           " turns left to complete the task.</reminder></observation>\n\n";
  }

  std::string demo_turn(const DemoStep& turn) const override { return demo_reasoning_then_sql(turn, "<think>", "</think>"); }
};

}  // namespace

std::unique_ptr<Protocol> make_skyrl() { return std::make_unique<SkyRL>(); }

}  // namespace sqlrl::rl::detail

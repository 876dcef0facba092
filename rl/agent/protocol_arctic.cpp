// Arctic-Text2SQL-R1 (Yao et al. 2025, "Arctic-Text2SQL-R1: Simple Rewards, Strong Reasoning in
// Text-to-SQL", arXiv 2505.20315): single-turn GRPO with a reward of execution alone.
//
// One assistant turn, nothing executed during the episode: <think>…</think> then
// <answer>summary ```sql …```</answer>, and the SQL of the turn's last ```sql fenced block is the
// answer (the authors' parse_response in snowflakedb/ArcticTraining
// projects/arctic_text2sql_r1/bird_eval/infer.py takes the last block; none = no answer). The
// prompt is that script's system message and user template (OmniSQL's prompt with a <think> /
// <answer> output format; the schema as CREATE TABLE DDL with example values, sql::schema_ddl).
// Not reproduced: the assistant prefix "Let me solve this step by step. \n<think>" the script
// appends after the generation prompt (the chat template's own generation prompt ends the
// prompt here), and the BM25 value retrieval that picks the schema's example values.
//
// Reward (the paper's §3, as quoted; docs/paper-arctic.md): 1 when the result equals the gold's,
// 0.1 when the SQL executes but is wrong, 0 otherwise (no answer, an error, a timeout).
#include "rl/agent/protocol_impl.h"
#include "rl/agent/reward_detail.h"
#include "sql/exec/schema.h"

namespace sqlrl::rl::detail {
namespace {

constexpr const char* kSystem =
    "You are a data science expert. Below, you are provided with a database schema and a natural language "
    "question. Your task is to understand the schema and generate a valid SQL query to answer the question.";

constexpr const char* kUserHead =
    "Database Engine:\n"
    "SQLite\n"
    "\n"
    "Database Schema:\n";

constexpr const char* kUserSchemaNote =
    "\n"
    "This schema describes the database's structure, including tables, columns, primary keys, foreign keys, and any "
    "relevant relationships or constraints.\n"
    "\n"
    "Question:\n";

constexpr const char* kUserTail =
    "\n"
    "\n"
    "Instructions:\n"
    "- Make sure you only output the information that is asked in the question. If the question asks for a specific "
    "column, make sure to only include that column in the SELECT clause, nothing more.\n"
    "- The generated query should return all of the information asked in the question without any missing or extra "
    "information.\n"
    "- Before generating the final SQL query, please think through the steps of how to write the query.\n"
    "\n"
    "Output Format:\n"
    "Please provide a detailed chain-of-thought reasoning process and include your thought process within `<think>` "
    "tags. Your final answer should be enclosed within `<answer>` tags.\n"
    "\n"
    "Ensure that your SQL query follows the correct syntax and is formatted as follows:\n"
    "\n"
    "```sql\n"
    "-- Your SQL query here\n"
    "```\n"
    "\n"
    "Example format:\n"
    "<think> Step-by-step reasoning, including self-reflection and corrections if necessary. [Limited by 4K tokens] "
    "</think>\n"
    "<answer> Summary of the thought process leading to the final SQL query. [Limited by 1K tokens]\n"
    "\n"
    "```sql\n"
    "Correct SQL query here\n"
    "```\n"
    "</answer>";

// The content of the last ```sql fence (to the next ``` or the end), trimmed; "" when none.
std::string last_sql_fence(std::string_view text) {
  const size_t open = text.rfind("```sql");
  if (open == std::string_view::npos) return {};
  const size_t body = open + 6;
  const size_t close = text.find("```", body);
  return trim(text.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body));
}

struct Arctic final : Protocol {
  const char* name() const override { return "arctic"; }
  int max_turns() const override { return 1; }
  // The answer block closes the turn (the authors' script stops at <|im_end|>, which follows it).
  std::vector<std::string> stop_strings() const override { return {"</answer>"}; }

  std::vector<ChatMessage> first_prompt(const sql::Example& example, const sql::DatabaseSchema& schema) const override {
    // The script's question: the evidence, a line break, the question (BIRD's external knowledge).
    const std::string question =
        example.evidence.empty() ? untrusted(example.question) : untrusted(example.evidence) + "\n" + untrusted(example.question);
    std::string user = std::string(kUserHead) + untrusted(sql::schema_ddl(schema)) + kUserSchemaNote + question + kUserTail;
    return {ChatMessage{"system", kSystem, std::nullopt, {}}, ChatMessage{"user", std::move(user), std::nullopt, {}}};
  }

  Action parse(std::string_view turn_text) const override {
    std::string sql = last_sql_fence(turn_text);
    if (sql.empty()) return invalid("no ```sql block with a query");
    Action a;
    a.kind = ActionKind::Answer;
    a.sql = std::move(sql);
    return a;
  }

  bool done(const Action&, int) const override { return true; }  // one turn, whatever it wrote
  std::string inject(const Action&, const StepOutcome&, const sql::Example&) const override { return ""; }

  std::string demo_turn(const DemoStep& turn) const override {
    return "<think>\n" + turn.reasoning + "\n</think>\n<answer>\n```sql\n" + turn.sql + "\n```\n</answer>";
  }
};

}  // namespace

std::unique_ptr<Protocol> make_arctic(const ProtocolSettings&) { return std::make_unique<Arctic>(); }

// One term, "execution": 1 / 0.1 / 0.
std::vector<double> arctic_terms(const sql::Example&, const Trajectory&, const Outcome& o, RewardContext&) {
  return {o.ex ? 1.0 : o.executable ? 0.1 : 0.0};
}

}  // namespace sqlrl::rl::detail

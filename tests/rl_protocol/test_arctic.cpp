// Arctic-Text2SQL-R1's protocol (rl/agent/protocol_arctic.cpp): the authors' inference prompt
// (snowflakedb/ArcticTraining projects/arctic_text2sql_r1/bird_eval/infer.py), one turn whatever
// it writes, the answer the last ```sql block of the turn, and its reward 1 / 0.1 / 0.
#include <gtest/gtest.h>

#include "rl/agent/paper.h"
#include "tests/rl_protocol/protocol_test_util.h"

namespace sqlrl::rl {
namespace {

using testing::farm_example;
using testing::farm_schema;

TEST(Arctic, PromptIsTheAuthorsInferenceTemplate) {
  const auto p = make_protocol("arctic");
  const std::vector<ChatMessage> m = testing::prompt_text(*p, farm_example(), farm_schema());
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].content.rfind("You are a data science expert. Below, you are provided with a database schema", 0), 0u);
  const std::string& u = m[1].content;
  EXPECT_EQ(u.rfind("Database Engine:\nSQLite\n\nDatabase Schema:\nCREATE TABLE animals", 0), 0u) << u;
  // The evidence, a line break, then the question (the script's external_knowledge + "\n" + question).
  EXPECT_NE(u.find("\nQuestion:\npig refers to species = 'pig'\nhow many pigs are in the farm?\n\nInstructions:\n"),
            std::string::npos)
      << u;
  EXPECT_NE(u.find("Your final answer should be enclosed within `<answer>` tags."), std::string::npos);
  EXPECT_TRUE(u.ends_with("```sql\nCorrect SQL query here\n```\n</answer>")) << u;
  sql::Example no_evidence = farm_example();
  no_evidence.evidence.clear();
  EXPECT_NE(testing::prompt_text(*p, no_evidence, farm_schema())[1].content.find(
                "Question:\nhow many pigs are in the farm?\n\nInstructions:"),
            std::string::npos);
}

TEST(Arctic, OneTurnAnsweredByItsLastSqlBlock) {
  const auto p = make_protocol("arctic");
  EXPECT_EQ(p->max_turns(), 1);
  EXPECT_EQ(p->stop_strings(), std::vector<std::string>{"</answer>"});
  const Action a = p->parse(
      "<think>try\n```sql\nSELECT 1\n```\nno, the count</think>\n<answer>count the pigs\n\n```sql\n"
      "SELECT COUNT(*) FROM animals WHERE species = 'pig'\n```\n</answer>");
  EXPECT_EQ(a.kind, ActionKind::Answer);
  EXPECT_EQ(a.sql, "SELECT COUNT(*) FROM animals WHERE species = 'pig'");
  // An unclosed last block still counts to the end of the turn (the cap cut it).
  EXPECT_EQ(p->parse("<answer>\n```sql\nSELECT 2").sql, "SELECT 2");
  const Action none = p->parse("<think>hm</think><answer>SELECT 1</answer>");
  EXPECT_EQ(none.kind, ActionKind::Invalid);
  EXPECT_NE(none.error.find("```sql"), std::string::npos) << none.error;
  EXPECT_TRUE(p->done(none, 0));
  EXPECT_TRUE(p->done(a, 0));
}

}  // namespace
}  // namespace sqlrl::rl

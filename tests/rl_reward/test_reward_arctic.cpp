// Arctic-Text2SQL-R1's reward (arXiv 2505.20315, §3 as quoted in docs/paper-arctic.md): 1 when
// the answer's result equals the gold's, 0.1 when it executes but is wrong, 0 otherwise. The
// panel's default comparison is BIRD's set equality (the authors' bird_eval/evaluate_bird.py).
#include <gtest/gtest.h>

#include "reward_fixture.h"
#include "rl/agent/paper.h"

namespace sqlrl::rl::testing {
namespace {

TEST(RewardArctic, OneTenthZero) {
  EXPECT_TRUE(find_paper("arctic").bird_compare);
  sql::Pool pool;
  RewardContext ctx(pool, {}, sql::CompareMode::BirdSet);
  const RewardPanel p = make_reward_panel("arctic");
  ASSERT_EQ(p.terms.size(), 1u);
  EXPECT_EQ(p.terms[0].name, "execution");
  sql::Example ex = example("SELECT dname FROM dept");
  auto answered = [](const std::string& sql) {
    return trajectory({turn("<think>t</think><answer>\n```sql\n" + sql + "\n```\n</answer>", ActionKind::Answer, sql)});
  };
  Trajectory right = answered("SELECT dname FROM dept ORDER BY id DESC");  // set semantics: order ignored
  Trajectory wrong = answered("SELECT dname FROM dept WHERE id = 1");
  Trajectory broken = answered("SELECT dnam FROM dept");
  Trajectory none = trajectory({turn("<think>t</think><answer>dept names</answer>", ActionKind::Invalid)});
  const std::vector<std::pair<Trajectory*, double>> cases = {{&right, 1.0}, {&wrong, 0.1}, {&broken, 0.0}, {&none, 0.0}};
  for (size_t i = 0; i < cases.size(); ++i) {
    score(p, ex, *cases[i].first, ctx);
    EXPECT_EQ(cases[i].first->reward, cases[i].second) << i;
  }
}

}  // namespace
}  // namespace sqlrl::rl::testing

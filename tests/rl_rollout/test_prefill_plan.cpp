// plan_shared_prefills (rl/agent/rollout.h): which stretches of prompts admitted together are
// prefilled once, on hand-made token sequences whose tree is worked out in the comments.
#include <gtest/gtest.h>

#include <numeric>

#include "rl/agent/rollout.h"

namespace sqlrl::rl {
namespace {

std::vector<int32_t> run_of(int32_t first, int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Every prompt is its nodes' stretches (each beginning where its parent ends, the first at 0)
// and then its own, non-empty, run; every node is long enough. Returns the tokens the plan runs.
int64_t check_plan(const std::vector<std::vector<int32_t>>& prompts, const PrefillPlan& plan, int64_t min_shared) {
  int64_t ran = 0;
  for (size_t n = 0; n < plan.nodes.size(); ++n) {
    const PrefillPlan::Node& node = plan.nodes[n];
    SCOPED_TRACE("node " + std::to_string(n));
    EXPECT_GE(node.end - node.begin, min_shared);
    EXPECT_LT(node.parent, static_cast<int64_t>(n)) << "parents come first";
    EXPECT_EQ(node.begin, node.parent < 0 ? 0 : plan.nodes[node.parent].end);
    EXPECT_EQ(node.level, node.parent < 0 ? 0 : plan.nodes[node.parent].level + 1);
    ran += node.end - node.begin;
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const int64_t size = static_cast<int64_t>(prompts[i].size());
    EXPECT_LT(plan.from[i], size) << "its last token is its own";
    EXPECT_EQ(plan.from[i], plan.fork_of[i] < 0 ? 0 : plan.nodes[plan.fork_of[i]].end);
    for (int64_t n = plan.fork_of[i]; n >= 0; n = plan.nodes[n].parent) {
      const PrefillPlan::Node& node = plan.nodes[n];
      for (int64_t t = node.begin; t < node.end; ++t)
        EXPECT_EQ(prompts[node.prompt][t], prompts[i][t]) << "node " << n << " runs other tokens at " << t;
    }
    ran += size - plan.from[i];
  }
  return ran;
}

std::vector<std::span<const int32_t>> spans(const std::vector<std::vector<int32_t>>& prompts) {
  return {prompts.begin(), prompts.end()};
}

TEST(PrefillPlan, SharedStretchesRunOnceAndEveryPromptKeepsItsLastToken) {
  // S: 10 tokens every prompt but `other` begins with; D1, D2: 5 tokens (two "schemas"); q: 3.
  const auto S = run_of(100, 10), D1 = run_of(200, 5), D2 = run_of(300, 5);
  const std::vector<std::vector<int32_t>> prompts = {
      cat({S, D1, run_of(400, 3)}),  // a
      cat({S, D1, run_of(500, 3)}),  // b
      cat({S, D2, run_of(600, 3)}),  // c
      run_of(700, 7),                // other: shares nothing
      cat({S, D1, run_of(400, 3)}),  // a again
      S,                             // S alone: a prefix of the others
  };
  // min_shared 4: S [0, 10) is a root node; S+D1 [10, 15) its child. a, b and a-again fork the
  // child (a and a-again share 17 tokens, but 2 past the child are too few for a node; each keeps
  // [15, 18)); c forks S from 10; `other` runs alone; S alone keeps its last token: the common
  // stretch of the five stops at 9, so S's node is [0, 9).
  PrefillPlan plan = plan_shared_prefills(spans(prompts), 4);
  ASSERT_EQ(plan.nodes.size(), 2u);
  EXPECT_EQ(plan.nodes[0].begin, 0);
  EXPECT_EQ(plan.nodes[0].end, 9);
  EXPECT_EQ(plan.nodes[1].parent, 0);
  EXPECT_EQ(plan.nodes[1].begin, 9);
  EXPECT_EQ(plan.nodes[1].end, 15);
  EXPECT_EQ(plan.fork_of, (std::vector<int64_t>{1, 1, 0, -1, 1, 0}));
  EXPECT_EQ(plan.from, (std::vector<int64_t>{15, 15, 9, 0, 15, 9}));
  // 9 + 6 (nodes) + 3 + 3 + 9 + 7 + 3 + 1, against 18 * 4 + 7 + 10 prefilled whole.
  EXPECT_EQ(check_plan(prompts, plan, 4), 41);

  // A longer minimum: [9, 15) (6 tokens) and a/a-again's [9, 17) (8) are no nodes, so a, b, c and
  // a-again all run [9, 18) themselves.
  PrefillPlan coarse = plan_shared_prefills(spans(prompts), 9);
  ASSERT_EQ(coarse.nodes.size(), 1u);
  EXPECT_EQ(coarse.fork_of, (std::vector<int64_t>{0, 0, 0, -1, 0, 0}));
  EXPECT_EQ(check_plan(prompts, coarse, 9), 9 + 9 * 4 + 7 + 1);
  // At 8, a and a-again's [9, 17) is one.
  PrefillPlan eight = plan_shared_prefills(spans(prompts), 8);
  ASSERT_EQ(eight.nodes.size(), 2u);
  EXPECT_EQ(eight.nodes[1].end, 17);
  EXPECT_EQ(eight.fork_of, (std::vector<int64_t>{1, 0, 0, -1, 1, 0}));
  EXPECT_EQ(check_plan(prompts, eight, 8), 9 + 8 + 1 + 9 + 9 + 7 + 1 + 1);
  // Nothing long enough is shared (the longest, a and a-again's, is 17 tokens): every prompt runs whole.
  PrefillPlan none = plan_shared_prefills(spans(prompts), 18);
  EXPECT_TRUE(none.nodes.empty());
  EXPECT_EQ(none.fork_of, std::vector<int64_t>(prompts.size(), -1));
  EXPECT_EQ(check_plan(prompts, none, 18), 18 * 4 + 7 + 10);
}

TEST(PrefillPlan, IdenticalPromptsShareAllButTheirLastToken) {
  const std::vector<std::vector<int32_t>> prompts(3, run_of(1, 40));
  PrefillPlan plan = plan_shared_prefills(spans(prompts), 32);
  ASSERT_EQ(plan.nodes.size(), 1u);
  EXPECT_EQ(plan.nodes[0].end, 39);
  EXPECT_EQ(plan.from, (std::vector<int64_t>{39, 39, 39}));
  EXPECT_EQ(check_plan(prompts, plan, 32), 39 + 3);
  EXPECT_THROW(plan_shared_prefills({std::span<const int32_t>()}, 32), std::exception);
}

}  // namespace
}  // namespace sqlrl::rl

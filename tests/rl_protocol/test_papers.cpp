// The paper table (rl/agent/paper.h): one row per paper, and everything named after a paper comes
// from it. Each row's protocol answers to its name, its reward panel is its terms, its recipe
// exists, and its demonstration writer (Protocol::demo_turn, beside the parser) writes turns its
// own parser reads back as the action written.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "rl/agent/paper.h"
#include "runtime/error.h"

namespace sqlrl::rl {
namespace {

TEST(Papers, EachRowNamesItsProtocolPanelAndRecipe) {
  std::set<std::string> seen;
  for (const Paper& p : papers()) {
    SCOPED_TRACE(p.name);
    EXPECT_TRUE(seen.insert(p.name).second) << "two rows named " << p.name;
    EXPECT_STREQ(make_protocol(p.name)->name(), p.name);
    const RewardPanel panel = make_reward_panel(p.name);
    ASSERT_EQ(panel.terms.size(), p.terms.size());
    for (size_t i = 0; i < p.terms.size(); ++i) EXPECT_EQ(panel.terms[i].name, p.terms[i].name);
    EXPECT_GT(std::string(p.citation).size(), std::string(p.name).size()) << "a citation, not a name";
    // `--config <name>` resolves to configs/<name>.toml, compiled in.
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(SQLRL_SOURCE_DIR) / "configs" / (std::string(p.name) + ".toml")));
  }
  EXPECT_EQ(paper_names(), protocol_names());
  EXPECT_EQ(paper_names(), reward_panel_names());
  try {
    find_paper("sql-r1", "reward panel");
    FAIL() << "an unknown paper was found";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reward panel: unknown name 'sql-r1'"), std::string::npos) << e.what();
  }
}

// What demo_turn writes, parse reads back: the action kind and its SQL (one turn protocols write
// every turn as their answer).
TEST(Papers, DemoTurnsParseBackAsWritten) {
  for (const std::string& name : protocol_names()) {
    SCOPED_TRACE(name);
    const auto p = make_protocol(name);
    const std::string sql = "SELECT name FROM singer WHERE age > 30";
    for (DemoAction action : {DemoAction::ExecSql, DemoAction::Memory, DemoAction::Answer}) {
      if (action == DemoAction::Memory && !p->has_memory()) continue;
      if (action != DemoAction::Answer && p->max_turns() < 2) continue;
      DemoStep step;
      step.reasoning = "I look at the singers.";
      step.action = action;
      step.sql = sql;
      step.verdicts = p->verdict(DemoAction::ExecSql, true);
      step.db_id = "concert_singer";
      const Action a = p->parse(p->demo_turn(step));
      const ActionKind want = action == DemoAction::Answer   ? ActionKind::Answer
                              : action == DemoAction::Memory ? ActionKind::MemoryRetrieve
                                                             : ActionKind::ExecSql;
      EXPECT_EQ(a.kind, want) << p->demo_turn(step) << "\n" << a.error;
      EXPECT_EQ(a.sql, sql) << p->demo_turn(step);
    }
  }
}

}  // namespace
}  // namespace sqlrl::rl

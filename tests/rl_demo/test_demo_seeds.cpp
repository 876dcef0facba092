// `demo --seeds`: the claims' verdicts from per-seed report.json figures, and the sweep that runs
// each seed in its own folder and reuses a finished one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "rl/demo/demo.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace sqlrl::rl {
namespace {

// The report.json fields the claims read: the 2x2, the SFT stage, dev_ex.
nlohmann::json report(uint64_t seed, double sft, double ss, double mm, bool with_single = true) {
  nlohmann::json cat = {{"by_category", {{"plain", {{"ex", 0.5}, {"n", 2}}}, {"stored_form:text", {{"ex", 0.0}, {"n", 1}}},
                                         {"stored_form:unit", {{"ex", 1.0}, {"n", 1}}}}},
                        {"copy_error_rate", 0.25}};
  nlohmann::json r;
  r["seed"] = seed;
  r["stages"]["sft"] = {{"multi_turn", {{"ex", sft}}}, {"single_turn", {{"ex", sft - 0.1}}}};
  r["dev_ex"] = {{"sft", sft}, {"rl", mm}};
  r["grid"]["multi"] = {{"multi", mm}, {"single", mm - 0.2}};
  r["grid_details"]["multi"] = {{"multi", cat}, {"single", cat}};
  if (with_single) {
    r["grid"]["single"] = {{"multi", ss + 0.1}, {"single", ss}};
    r["grid_details"]["single"] = {{"multi", cat}, {"single", cat}};
  }
  r["sft_loss"] = {{"dev", 0.2}};
  r["seconds"] = 100.0;
  r["cpu_seconds"] = 190.0;
  return r;
}

const nlohmann::ordered_json& claim(const nlohmann::ordered_json& s, const std::string& name) {
  for (const nlohmann::ordered_json& c : s["claims"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no claim " + name);
}

TEST(DemoSeeds, AClaimHoldsOnlyWhenEverySeedsMarginExceedsTheBaselinesSpread) {
  // Multi x multi against single x single: margins 0.20 and 0.13, single x single moves 0.02
  // between the seeds. GRPO against SFT: margins 0.10 and 0.04, SFT moves 0.01.
  nlohmann::ordered_json s = demo_seeds_json({report(1, 0.30, 0.20, 0.40), report(2, 0.31, 0.22, 0.35)});
  const nlohmann::ordered_json mvs = claim(s, "multi_turn_beats_single_turn");
  EXPECT_NEAR(mvs["margins"][0].get<double>(), 0.20, 1e-12);
  EXPECT_NEAR(mvs["margins"][1].get<double>(), 0.13, 1e-12);
  EXPECT_NEAR(mvs["smallest_margin"].get<double>(), 0.13, 1e-12);
  EXPECT_NEAR(mvs["mean_margin"].get<double>(), 0.165, 1e-12);
  EXPECT_NEAR(mvs["baseline_spread"].get<double>(), 0.02, 1e-12);
  EXPECT_NEAR(mvs["treatment_spread"].get<double>(), 0.05, 1e-12);
  EXPECT_TRUE(mvs["holds"].get<bool>());
  const nlohmann::ordered_json gvs = claim(s, "grpo_beats_sft");
  EXPECT_NEAR(gvs["smallest_margin"].get<double>(), 0.04, 1e-12);
  EXPECT_NEAR(gvs["baseline_spread"].get<double>(), 0.01, 1e-12);
  EXPECT_TRUE(gvs["holds"].get<bool>());
  // Per-seed rows: stored_form pools its sub-categories (0 of 1 and 1 of 1: 0.5).
  EXPECT_NEAR(s["seeds"][0]["categories"]["multi"]["multi"]["stored_form"].get<double>(), 0.5, 1e-12);
  const std::string table = demo_seeds_table(s);
  EXPECT_NE(table.find("| 1 | 30.0 / 20.0 | 20.0 | 30.0 | 20.0 | 40.0 | +20.0 | +10.0 |"), std::string::npos) << table;
  EXPECT_NE(table.find("margins +20.0 / +13.0 (mean +16.5)"), std::string::npos) << table;

  // A third seed whose SFT is 0.08 higher: GRPO's margins (0.10, 0.04, 0.03) stay positive but
  // SFT now spreads 0.09, more than the smallest margin, so that claim no longer holds.
  s = demo_seeds_json({report(1, 0.30, 0.20, 0.40), report(2, 0.31, 0.22, 0.35), report(3, 0.39, 0.21, 0.42)});
  EXPECT_FALSE(claim(s, "grpo_beats_sft")["holds"].get<bool>());
  EXPECT_TRUE(claim(s, "multi_turn_beats_single_turn")["holds"].get<bool>());
  EXPECT_NE(demo_seeds_table(s).find("does not hold"), std::string::npos);
  // A negative margin on one seed fails the claim whatever the spread.
  s = demo_seeds_json({report(1, 0.30, 0.20, 0.40), report(2, 0.30, 0.20, 0.19)});
  EXPECT_FALSE(claim(s, "multi_turn_beats_single_turn")["holds"].get<bool>());
  // One seed has no spread: nothing holds.
  s = demo_seeds_json({report(1, 0.30, 0.20, 0.40)});
  EXPECT_FALSE(claim(s, "multi_turn_beats_single_turn")["holds"].get<bool>());
  EXPECT_NE(demo_seeds_table(s).find("one seed"), std::string::npos);
  // Without the single-turn run the 2x2 claim is missing, not failed silently as a number.
  s = demo_seeds_json({report(1, 0.30, 0.20, 0.40, false), report(2, 0.31, 0.22, 0.35, false)});
  EXPECT_TRUE(claim(s, "multi_turn_beats_single_turn").value("missing", false));
  EXPECT_TRUE(claim(s, "grpo_beats_sft")["holds"].get<bool>());
}

// Two mini seeds: each in OUT/seed-N with its own report; a second sweep reuses both finished
// runs (their files untouched), and a changed setting runs them again.
TEST(DemoSeeds, RunsEachSeedInItsFolderAndReusesAFinishedOne) {
  DemoConfig c;
  c.out = sqlrl::testing::process_temp_path("sqlrl_test_demo_seeds").string();
  fs::remove_all(c.out);
  c.sizes = demo_sizes("mini");
  c.sizes.rl_single_turn = 0;  // seconds matter here; the grid's claim is then reported missing
  std::vector<std::string> lines;
  c.log = [&](const std::string& l) { lines.push_back(l); };
  const nlohmann::ordered_json s = run_demo_seeds(c, {3, 5});
  ASSERT_EQ(s["seeds"].size(), 2u);
  EXPECT_EQ(s["seeds"][0]["seed"], 3);
  EXPECT_EQ(s["seeds"][1]["seed"], 5);
  for (const char* f : {"seed-3/report.json", "seed-5/report.json", "seeds.json", "seeds.md"})
    EXPECT_TRUE(fs::exists(fs::path(c.out) / f)) << f;
  std::ifstream in(fs::path(c.out) / "seed-5" / "report.json");
  EXPECT_EQ(nlohmann::json::parse(in)["seed"], 5);
  const auto stamp = fs::last_write_time(fs::path(c.out) / "seed-3" / "report.json");

  lines.clear();
  const nlohmann::ordered_json again = run_demo_seeds(c, {3, 5});
  EXPECT_EQ(again.dump(), s.dump());
  EXPECT_EQ(fs::last_write_time(fs::path(c.out) / "seed-3" / "report.json"), stamp);
  int reused = 0;
  for (const std::string& l : lines) reused += l.find("reused") != std::string::npos;
  EXPECT_EQ(reused, 2);

  c.sizes.rl_steps = 1;  // another setting: seed 3 runs again
  lines.clear();
  run_demo_seeds(c, {3});
  std::ifstream rerun(fs::path(c.out) / "seed-3" / "report.json");
  EXPECT_EQ(nlohmann::json::parse(rerun)["sizes"]["rl_steps"], 1);
  EXPECT_TRUE(fs::exists(fs::path(c.out) / "seed-3" / "previous" / "report.json"));
  EXPECT_ANY_THROW(run_demo_seeds(c, {3, 3}));
  fs::remove_all(c.out);
}

}  // namespace
}  // namespace sqlrl::rl

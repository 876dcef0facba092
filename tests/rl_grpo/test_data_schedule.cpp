// The data schedule (rl/grpo/data_schedule.h) and the papers' schedules built from a difficulty
// pre-pass (rl/grpo/difficulty.h): SQL-Trail's pass@G curation and MTSQL-R1's curriculum.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "rl/grpo/data_schedule.h"
#include "rl/grpo/difficulty.h"
#include "runtime/error.h"
#include "tests/sql/pool_test_db.h"

namespace sqlrl::rl {
namespace {

TEST(DataSchedule, EachEpochDrawsEveryExampleOnceInANewOrder) {
  const int64_t n = 7;
  DataSchedule s = whole_dataset_schedule(n);
  DataCursor c;
  std::vector<std::vector<int64_t>> epochs(3);
  for (int64_t e = 0; e < 3; ++e) {
    EXPECT_EQ(cursor_epoch(s, c), e);
    for (int64_t i = 0; i < n; ++i) epochs[e].push_back(draw_example(s, c, 5));
    std::vector<int64_t> sorted = epochs[e];
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6})) << "epoch " << e;
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_EQ(c.draws, 3 * n);
  // Another seed, another order; the same seed, the same.
  DataCursor c2, c3;
  std::vector<int64_t> other, same;
  for (int64_t i = 0; i < n; ++i) other.push_back(draw_example(s, c2, 6)), same.push_back(draw_example(s, c3, 5));
  EXPECT_NE(other, epochs[0]);
  EXPECT_EQ(same, epochs[0]);
}

TEST(DataSchedule, LevelsAreDrawnInTurnAndMoveOnAfterTheirEpochs) {
  DataSchedule s;
  s.levels = {{4, 2}, {0, 1, 3}};
  s.level_epochs = 2;
  DataCursor c;
  std::multiset<int64_t> first;
  for (int i = 0; i < 4; ++i) first.insert(draw_example(s, c, 1));
  EXPECT_EQ(first, (std::multiset<int64_t>{2, 2, 4, 4}));  // two passes over level 1, nothing else
  EXPECT_TRUE(observe_step(s, c, 0.0));                     // 4 draws = 2 epochs of 2
  EXPECT_EQ(c.level, 1);
  EXPECT_EQ(c.level_draws, 0);
  EXPECT_EQ(c.draws, 4);
  std::set<int64_t> second;
  for (int i = 0; i < 3; ++i) second.insert(draw_example(s, c, 1));
  EXPECT_EQ(second, (std::set<int64_t>{0, 1, 3}));
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(observe_step(s, c, 1.0));  // the last level stays
  EXPECT_EQ(c.level, 1);
}

// Promotion by the mean training EX of the last `window` steps (a full window only).
TEST(DataSchedule, PromotesWhenTheWindowsMeanExReachesTheThreshold) {
  DataSchedule s;
  s.levels = {{0, 1, 2}, {3}};
  s.level_epochs = 100;
  s.promote_at = 0.5;
  s.window = 3;
  DataCursor c;
  EXPECT_FALSE(observe_step(s, c, 0.2));
  EXPECT_FALSE(observe_step(s, c, 0.2));
  EXPECT_FALSE(observe_step(s, c, 0.8));  // mean 0.4
  EXPECT_FALSE(observe_step(s, c, 0.4));  // 0.2 0.8 0.4: 0.466...
  EXPECT_TRUE(observe_step(s, c, 0.4));   // 0.8 0.4 0.4: 0.533...
  EXPECT_EQ(c.level, 1);
  EXPECT_TRUE(c.recent_ex.empty());
}

TEST(DataSchedule, CursorRoundTripsThroughTrainerState) {
  DataCursor c{2, 17, 99, {0.25, 0.5}};
  nlohmann::json state;
  state["data_cursor"] = cursor_json(c);
  DataCursor r = cursor_from_json(nlohmann::json::parse(state.dump()), 0);
  EXPECT_EQ(r.level, 2);
  EXPECT_EQ(r.level_draws, 17);
  EXPECT_EQ(r.draws, 99);
  EXPECT_EQ(r.recent_ex, c.recent_ex);
  // A checkpoint from before cursors: the plain stream at step * batch size.
  DataCursor old = cursor_from_json(nlohmann::json::object(), 24);
  EXPECT_EQ(old.draws, 24);
  EXPECT_EQ(old.level_draws, 24);
  EXPECT_EQ(old.level, 0);
}

std::vector<Difficulty> solved_counts(const std::vector<int64_t>& solved, int64_t k) {
  std::vector<Difficulty> d;
  for (size_t i = 0; i < solved.size(); ++i) d.push_back({"q" + std::to_string(i), k, solved[i]});
  return d;
}

// SQL-Trail A.6, eq. 13: S(q) = pass@G if 0 < pass@G < 1 else 1; rank ascending, keep the top N.
// The reference sorts (S, index) pairs in float64; ties keep dataset order.
std::vector<int64_t> sqltrail_reference(const std::vector<Difficulty>& d, int64_t keep, int64_t unsolved) {
  std::vector<std::pair<double, int64_t>> scored;
  std::vector<int64_t> never;
  for (size_t i = 0; i < d.size(); ++i) {
    const double pass = static_cast<double>(d[i].solved) / static_cast<double>(d[i].samples);
    const double score = pass > 0 && pass < 1 ? pass : 1.0;
    if (score < 1.0) scored.push_back({score, static_cast<int64_t>(i)});
    if (d[i].solved == 0 && static_cast<int64_t>(never.size()) < unsolved) never.push_back(static_cast<int64_t>(i));
  }
  std::sort(scored.begin(), scored.end());
  std::vector<int64_t> out;
  for (size_t i = 0; i < scored.size() && (keep == 0 || static_cast<int64_t>(i) < keep); ++i) out.push_back(scored[i].second);
  out.insert(out.end(), never.begin(), never.end());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Difficulty, CurationKeepsTheHardestSolvableAndSomeUnsolved) {
  const std::vector<Difficulty> d = solved_counts({6, 0, 1, 5, 3, 0, 1, 6, 2, 0, 4}, 6);
  for (auto [keep, unsolved] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {3, 0}, {4, 2}, {100, 100}, {1, 1}}) {
    ScheduleCounts counts;
    EXPECT_EQ(curate_pass_at_g(d, keep, unsolved, &counts), sqltrail_reference(d, keep, unsolved))
        << "keep " << keep << " unsolved " << unsolved;
    EXPECT_EQ(counts.always, 2);
    EXPECT_EQ(counts.never, 3);
    EXPECT_EQ(counts.sometimes, 6);
  }
  // keep 3: pass 1/6 (q2, q6) and 2/6 (q8).
  EXPECT_EQ(curate_pass_at_g(d, 3, 1), (std::vector<int64_t>{1, 2, 6, 8}));
}

TEST(Difficulty, CurriculumDropsTheAlwaysSolvedAndBinsEasiestFirst) {
  const std::vector<Difficulty> d = solved_counts({20, 3, 19, 0, 19, 7, 20, 12}, 20);
  ScheduleCounts counts;
  const auto levels = curriculum_levels(d, 3, &counts);
  // s descending: 19 (q2), 19 (q4), 12 (q7) | 7 (q5), 3 (q1), 0 (q3); q0 and q6 (20/20) dropped.
  ASSERT_EQ(levels.size(), 2u);
  EXPECT_EQ(levels[0], (std::vector<int64_t>{2, 4, 7}));
  EXPECT_EQ(levels[1], (std::vector<int64_t>{5, 1, 3}));
  EXPECT_EQ(counts.kept, 6);
  EXPECT_EQ(counts.level_sizes, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(curriculum_levels(d, 4).back().size(), 2u);  // the last bin holds the rest
}

TEST(Difficulty, FileRoundTripsAndNamesAMismatch) {
  std::vector<sql::Example> examples(3);
  for (size_t i = 0; i < 3; ++i) examples[i].id = "train_" + std::to_string(i), examples[i].difficulty = "easy";
  std::vector<Difficulty> d = solved_counts({1, 0, 4}, 4);
  for (size_t i = 0; i < 3; ++i) d[i].id = examples[i].id;
  const std::string path = sql::testing::temp_dir() + "/difficulty.jsonl";
  std::ofstream(path) << difficulty_jsonl(examples, d);
  std::vector<Difficulty> back = read_difficulty_jsonl(path, examples);
  ASSERT_EQ(back.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back[i].solved, d[i].solved);
    EXPECT_EQ(back[i].samples, 4);
  }
  examples[1].id = "train_x";
  try {
    read_difficulty_jsonl(path, examples);
    FAIL() << "read a file of another split";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("difficulty.jsonl:2: question 'train_1'"), std::string::npos) << e.what();
  }
  examples.push_back(examples[0]);
  examples[1].id = "train_1";
  EXPECT_THROW(read_difficulty_jsonl(path, examples), Error);  // 3 lines for 4 questions
}

}  // namespace
}  // namespace sqlrl::rl

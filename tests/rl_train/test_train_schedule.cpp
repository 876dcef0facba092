// The trainer's data side through run_training: DAPO's dynamic sampling, the difficulty pre-pass
// and the schedules built from it (curation, curriculum), and that each resumes bit for bit.
#include <cmath>
#include <fstream>
#include <functional>
#include <set>
#include <nlohmann/json.hpp>

#include "rl/grpo/difficulty.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

std::vector<nlohmann::json> metrics(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::vector<std::string> metric_lines(const std::string& dir) {
  std::vector<std::string> out;
  for (nlohmann::json j : metrics(dir)) j.erase("time"), j.erase("rollout"), out.push_back(j.dump());
  return out;
}

TEST(TrainDynamicSampling, FillsTheBatchWithInformativeGroupsInBoundedTries) {
  TrainConfig c = toy_config(fresh_dir("dyn_fill"));
  c.max_steps = 3;
  c.dynamic_sampling = true;
  TrainEnv env = toy_env(c);
  std::vector<std::string> seen;
  half_flat_scorer(env, &seen);
  run_training(env, true);
  const auto m = metrics(c.out);
  ASSERT_EQ(m.size(), 3u);
  int64_t tries = 0;
  for (const auto& j : m) {
    const auto& d = j.at("dynamic_sampling");
    // Any 12 consecutive draws (two epochs of 6) hold all 3 informative questions twice: the 4
    // groups are there by the third try of 4 prompts.
    EXPECT_GE(d.at("tries").get<int64_t>(), 2) << j.dump();  // one try of 4 holds at most 3 informative
    EXPECT_LE(d.at("tries").get<int64_t>(), 3) << j.dump();
    EXPECT_EQ(d.at("prompts").get<int64_t>(), 4 * d.at("tries").get<int64_t>());
    EXPECT_GE(d.at("informative_groups").get<int64_t>(), 4);
    EXPECT_EQ(d.at("kept_groups").get<int64_t>(), 4);
    // Only informative groups reach the trainer: the filter sees no zero-variance group.
    EXPECT_EQ(j.at("filtered").at("groups").get<int64_t>(), 4);
    EXPECT_EQ(j.at("filtered").at("zero_variance_groups").get<int64_t>(), 0);
    // The reward curve is over everything sampled.
    EXPECT_EQ(j.at("trajectories").get<int64_t>(), 4 * 8 * d.at("tries").get<int64_t>());
    tries += d.at("tries").get<int64_t>();
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), 4 * tries);
  EXPECT_EQ(m.back().at("data_position").get<int64_t>(), 4 * (tries - m.back().at("dynamic_sampling").at("tries").get<int64_t>()));
}

TEST(TrainDynamicSampling, StopsAtMaxTriesWithWhatItHas) {
  TrainConfig c = toy_config(fresh_dir("dyn_cap"));
  c.max_steps = 2;
  c.dynamic_sampling = true;
  c.dynamic_sampling_max_tries = 1;
  TrainEnv env = toy_env(c);
  half_flat_scorer(env, nullptr);
  run_training(env, true);
  for (const auto& j : metrics(c.out)) {
    const auto& d = j.at("dynamic_sampling");
    EXPECT_EQ(d.at("tries").get<int64_t>(), 1);
    EXPECT_LT(d.at("kept_groups").get<int64_t>(), 4);  // at most 3 of 6 questions vary
    EXPECT_EQ(d.at("kept_groups").get<int64_t>(), d.at("informative_groups").get<int64_t>());
    EXPECT_EQ(j.at("filtered").at("groups").get<int64_t>(), d.at("kept_groups").get<int64_t>());
  }
}

// Stop after k steps and resume: every later step (draws, tries, the trained batch, weights) is
// the uninterrupted run's.
void expect_resume_is_exact(TrainConfig base, const std::string& name, const std::function<void(TrainEnv&)>& setup) {
  const int64_t k = 2, total = 5;
  TrainConfig full = base, part = base;
  full.out = fresh_dir(name + "_full"), full.max_steps = total, full.save_every = 1;
  part.out = fresh_dir(name + "_part"), part.max_steps = k, part.save_every = 1;
  for (TrainConfig* c : {&full, &part}) {
    TrainEnv env = toy_env(*c);
    setup(env);
    run_training(env, true);
  }
  TrainConfig again = part;
  again.resume = part.out, again.max_steps = total;
  {
    TrainEnv env = toy_env(again);
    setup(env);
    run_training(env, true);
  }
  EXPECT_EQ(metric_lines(full.out), metric_lines(part.out));
  using sql::testing::file_bytes;
  EXPECT_EQ(file_bytes(checkpoint_dir(full.out, total) + "/model.safetensors"),
            file_bytes(checkpoint_dir(part.out, total) + "/model.safetensors"));
  EXPECT_EQ(file_bytes(checkpoint_dir(full.out, total) + "/trainer_state.json"),
            file_bytes(checkpoint_dir(part.out, total) + "/trainer_state.json"));
}

TEST(TrainDynamicSampling, ResumesBitForBit) {
  TrainConfig c = toy_config("");
  c.dynamic_sampling = true;
  expect_resume_is_exact(c, "dyn_resume", [](TrainEnv& env) { half_flat_scorer(env, nullptr); });
}

// A difficulty file for the toy questions: toy_i solved `solved[i]` of 4 times.
std::string toy_difficulty_file(const std::string& name, const std::vector<int64_t>& solved) {
  std::vector<Difficulty> d;
  const std::vector<sql::Example> examples = toy_examples();
  for (size_t i = 0; i < examples.size(); ++i) d.push_back({examples[i].id, 4, solved[i]});
  const std::string path = sql::testing::temp_dir() + "/" + name + ".jsonl";
  std::ofstream(path) << difficulty_jsonl(examples, d);
  return path;
}

TEST(TrainCurriculum, TrainsLevelByLevelAndResumesBitForBit) {
  TrainConfig c = toy_config(fresh_dir("curriculum"));
  c.batch_size = 2;
  c.max_steps = 5;
  // s: toy_0 4/4 (dropped), then 3 (toy_4), 2 (toy_1, toy_2), 1 (toy_5), 0 (toy_3): levels of 2.
  c.difficulty_file = toy_difficulty_file("curriculum", {4, 2, 2, 0, 3, 1});
  c.curriculum_bin_size = 2;
  std::vector<std::string> seen;
  {
    TrainEnv env = toy_env(c);
    half_flat_scorer(env, &seen);
    run_training(env, true);
  }
  // Level 1 = {toy_4, toy_1} for one epoch (one step of 2), level 2 = {toy_2, toy_5}, then level
  // 3 = {toy_3} for good.
  ASSERT_EQ(seen.size(), 10u);
  std::multiset<std::string> l1(seen.begin(), seen.begin() + 2), l2(seen.begin() + 2, seen.begin() + 4);
  EXPECT_EQ(l1, (std::multiset<std::string>{"toy_1", "toy_4"}));
  EXPECT_EQ(l2, (std::multiset<std::string>{"toy_2", "toy_5"}));
  for (size_t i = 4; i < seen.size(); ++i) EXPECT_EQ(seen[i], "toy_3");
  const auto m = metrics(c.out);
  EXPECT_EQ(m[0].at("curriculum_level").get<int64_t>(), 1);
  EXPECT_EQ(m[1].at("curriculum_level").get<int64_t>(), 2);
  EXPECT_EQ(m[4].at("curriculum_level").get<int64_t>(), 3);
  const nlohmann::json s = nlohmann::json::parse(sql::testing::file_bytes(c.out + "/data_schedule.json"));
  EXPECT_EQ(s.at("always_solved").get<int64_t>(), 1);
  EXPECT_EQ(s.at("kept").get<int64_t>(), 5);
  EXPECT_EQ(s.at("level_sizes"), nlohmann::json::parse("[2, 2, 1]"));
  // The run keeps the difficulty it trained with.
  EXPECT_EQ(sql::testing::file_bytes(c.out + "/difficulty.jsonl"), sql::testing::file_bytes(c.difficulty_file));

  TrainConfig r = toy_config("");
  r.batch_size = 2, r.difficulty_file = c.difficulty_file, r.curriculum_bin_size = 2;
  expect_resume_is_exact(r, "curriculum_resume", [](TrainEnv& env) { half_flat_scorer(env, nullptr); });
}

TEST(TrainCuration, TrainsOnlyOnTheCuratedQuestions) {
  TrainConfig c = toy_config(fresh_dir("curate"));
  c.max_steps = 3;
  c.difficulty_file = toy_difficulty_file("curate", {4, 1, 0, 3, 2, 0});
  c.curate = "pass-at-g";
  c.curate_keep = 2;     // toy_1 (1/4), toy_4 (2/4)
  c.curate_unsolved = 1;  // toy_2
  std::vector<std::string> seen;
  TrainEnv env = toy_env(c);
  half_flat_scorer(env, &seen);
  run_training(env, true);
  ASSERT_EQ(seen.size(), 12u);
  for (const std::string& id : seen) EXPECT_TRUE(id == "toy_1" || id == "toy_4" || id == "toy_2") << id;
  const nlohmann::json s = nlohmann::json::parse(sql::testing::file_bytes(c.out + "/data_schedule.json"));
  EXPECT_EQ(s.at("kept").get<int64_t>(), 3);
  EXPECT_EQ(s.at("never_solved").get<int64_t>(), 2);
}

// Without a difficulty file the pre-pass samples K rollouts of every question with the initial
// weights, writes difficulty.jsonl, and a resumed run reads it instead of sampling again.
TEST(TrainCuration, PrePassMeasuresEveryQuestionOnce) {
  TrainConfig c = toy_config(fresh_dir("prepass"));
  c.max_steps = 1;
  c.save_every = 1;
  c.difficulty_samples = 3;
  c.curriculum_bin_size = 3;
  TrainEnv env = toy_env(c);
  env.reward_context = std::make_unique<RewardContext>(*env.pool);
  run_training(env, true);
  const std::vector<Difficulty> d = read_difficulty_jsonl(c.out + "/difficulty.jsonl", toy_examples());
  ASSERT_EQ(d.size(), 6u);
  for (const Difficulty& q : d) EXPECT_EQ(q.samples, 3);
  // Resume with a file that says otherwise: the run's own file wins over sampling again.
  std::vector<int64_t> solved{0, 0, 0, 0, 0, 3};
  std::ofstream(c.out + "/difficulty.jsonl") << sql::testing::file_bytes(toy_difficulty_file("prepass_edit", solved));
  TrainConfig again = c;
  again.resume = c.out, again.max_steps = 2;
  TrainEnv env2 = toy_env(again);
  env2.reward_context = std::make_unique<RewardContext>(*env2.pool);
  run_training(env2, true);
  const nlohmann::json s = nlohmann::json::parse(sql::testing::file_bytes(c.out + "/data_schedule.json"));
  EXPECT_EQ(s.at("always_solved").get<int64_t>(), 0);  // the edited file: samples 4, none all-solved
  EXPECT_EQ(s.at("kept").get<int64_t>(), 6);
}

}  // namespace
}  // namespace sqlrl::rl::testing

namespace sqlrl::rl::testing {
namespace {

// --epochs: the run's length is the passes over the examples the schedule holds, ceil(epochs * n
// / batch) steps (6 toy examples, batch 4: 2 epochs = 3 steps), and a positive max-steps caps it.
// The cosine horizon follows the derived length: the last step's lr is the floor. Catches an
// epochs knob that is ignored, a floor instead of a ceiling, or a horizon left at max-steps.
TEST(TrainEpochs, EpochsSetTheStepsAndTheCosineHorizon) {
  TrainConfig c = toy_config(fresh_dir("epochs_two"));
  c.max_steps = 0;
  c.epochs = 2;
  c.lr_schedule = "cosine";
  c.min_lr_ratio = 0.1;
  TrainEnv env = toy_env(c);
  TrainSummary s = run_training(env, true);
  EXPECT_EQ(s.last_step, 3);
  const auto m = metrics(c.out);
  ASSERT_EQ(m.size(), 3u);
  // The third update of a 3-step cosine runs at t = 2 of T = 3 (0-based, as the optimizer's
  // schedule counts): lr * (floor + (1 - floor) * (1 + cos(pi t / T)) / 2). A horizon left at
  // max-steps (0) gives another value. Float lr: 1e-6 relative.
  const double want = c.lr * (c.min_lr_ratio + (1 - c.min_lr_ratio) * 0.5 * (1 + std::cos(M_PI * 2.0 / 3.0)));
  EXPECT_NEAR(m.back().at("lr").get<double>(), want, 1e-6 * c.lr) << m.back().dump();

  TrainConfig capped = toy_config(fresh_dir("epochs_capped"));
  capped.max_steps = 2;
  capped.epochs = 5;
  TrainEnv env2 = toy_env(capped);
  EXPECT_EQ(run_training(env2, true).last_step, 2);
}

}  // namespace
}  // namespace sqlrl::rl::testing

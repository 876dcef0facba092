// RUN/tb (rl/tb_log.h, runtime/tfevents.h), read back by the independent reader of
// tests/tfevents_reader.h (its own framing and CRC checks, protoc's Event classes): every
// metrics.jsonl number is a scalar at its step and tag, the config and the sampled trajectories
// are text summaries, a resumed run logs each step exactly once, and `tensorboard = false`
// writes nothing.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "rl/grpo/train.h"
#include "runtime/tfevents.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/test_util.h"
#include "tests/tfevents_reader.h"

namespace sqlrl::rl::testing {
namespace {

namespace fs = std::filesystem;
using sqlrl::testing::TbContents;

std::vector<nlohmann::json> jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Every number of every metrics.jsonl line is exactly one scalar at (tag, step), equal as a
// float32 (TensorBoard's simple_value is a float: the double rounded once, so equality is exact),
// and the folder holds no scalar that metrics.jsonl lacks.
void expect_scalars_equal_metrics(const TbContents& tb, const std::string& metrics_path) {
  size_t numbers = 0;
  for (const nlohmann::json& line : jsonl(metrics_path)) {
    const int64_t step = line.at("step").get<int64_t>();
    std::map<std::string, double> flat;
    for (const auto& [k, v] : line.items())
      if (k != "step") sqlrl::testing::tb_flatten(v, k, flat);
    for (const auto& [tag, value] : flat) {
      ++numbers;
      auto it = tb.scalars.find({tag, step});
      if (it == tb.scalars.end()) {
        ADD_FAILURE() << "no scalar " << tag << " at step " << step;
        continue;
      }
      ASSERT_EQ(it->second.size(), 1u) << tag << " at step " << step << " logged " << it->second.size() << " times";
      if (std::isnan(value)) EXPECT_TRUE(std::isnan(it->second[0])) << tag << " at step " << step;
      else EXPECT_EQ(it->second[0], static_cast<float>(value)) << tag << " at step " << step;
    }
  }
  EXPECT_GT(numbers, 40u);
  EXPECT_EQ(tb.scalars.size(), numbers) << "scalars that metrics.jsonl does not hold";
}

// How many text summaries of `tag` the folder holds at `step`.
size_t texts_at(const TbContents& tb, const std::string& tag, int64_t step) {
  auto it = tb.texts.find({tag, step});
  return it == tb.texts.end() ? 0 : it->second.size();
}

// The text summary back to the plain text (rl/tb_log.cpp indents it as a markdown code block).
std::string unindent(const std::string& md) {
  std::string out, line;
  std::istringstream in(md);
  while (std::getline(in, line)) out += (line.rfind("    ", 0) == 0 ? line.substr(4) : line) + "\n";
  return out;
}

TEST(TensorBoardFormat, Crc32cOfTheStandardCheckString) {
  // CRC-32C's check value (the CRC of "123456789"; RFC 3720 B.4's polynomial, the catalogue's CRC-32/ISCSI).
  const std::string nine = "123456789";
  EXPECT_EQ(crc32c(nine.data(), nine.size()), 0xe3069283u);
  EXPECT_EQ(sqlrl::testing::tb_crc32c(nine.data(), nine.size()), 0xe3069283u);
  // The writer's framing is the reader's, byte for byte.
  EXPECT_EQ(tfrecord_frame("an event's bytes"), sqlrl::testing::tb_frame("an event's bytes"));
}

// The writer's events decoded by hand with TensorBoard's field numbers (tensorflow/tensorboard
// tensorboard/compat/proto/event.proto, summary.proto, tensor.proto; types.proto DT_STRING = 7),
// so a wrong number in runtime/proto fails here even though the generated classes would agree.
TEST(TensorBoardFormat, EventsCarryTensorBoardsFieldNumbers) {
  const std::string dir = fresh_dir("tb_format");
  {
    EventFile f = create_event_file(dir);
    write_scalars(f, 3, {{"loss", 0.5}, {"filtered/kept", 7}});
    write_text(f, 4, "config", "seed = 1");
  }
  const std::vector<std::string> files = sqlrl::testing::tb_files(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(fs::path(files[0]).filename().string().rfind("events.out.tfevents.", 0), 0u);
  const std::vector<std::string> records = sqlrl::testing::tb_read_records(files[0]);
  ASSERT_EQ(records.size(), 3u);
  using sqlrl::testing::tb_wire;
  // Event: wall_time 1 (double), step 2, file_version 3, summary 5.
  const auto first = tb_wire(records[0]);
  EXPECT_EQ(first.one(3), "brain.Event:2");
  EXPECT_EQ(first.one(1).size(), 8u);
  const auto scalars = tb_wire(records[1]);
  EXPECT_EQ(scalars.num(2), 3u);
  // Summary: value 1; Value: tag 1, simple_value 2 (float32, little-endian).
  const auto values = tb_wire(scalars.one(5)).bytes;
  ASSERT_EQ(values.count(1), 2u);
  const std::string expect_loss = std::string("\x00\x00\x00\x3f", 4);  // 0.5f
  const std::string expect_kept = std::string("\x00\x00\xe0\x40", 4);  // 7.0f
  auto it = values.equal_range(1).first;
  EXPECT_EQ(tb_wire(it->second).one(1), "loss");
  EXPECT_EQ(tb_wire(it->second).one(2), expect_loss);
  ++it;
  EXPECT_EQ(tb_wire(it->second).one(1), "filtered/kept");
  EXPECT_EQ(tb_wire(it->second).one(2), expect_kept);
  // Text: Value.metadata 9 -> SummaryMetadata.plugin_data 1 -> PluginData.plugin_name 1 = "text";
  // Value.tensor 8 -> TensorProto.dtype 1 = DT_STRING (7), string_val 8.
  const auto text = tb_wire(records[2]);
  EXPECT_EQ(text.num(2), 4u);
  const auto value = tb_wire(tb_wire(text.one(5)).one(1));
  EXPECT_EQ(value.one(1), "config");
  EXPECT_EQ(tb_wire(tb_wire(value.one(9)).one(1)).one(1), "text");
  const auto tensor = tb_wire(value.one(8));
  EXPECT_EQ(tensor.num(1), 7u);
  EXPECT_EQ(tensor.one(8), "seed = 1");
}

TEST(TensorBoard, EveryMetricsNumberIsAScalarAtItsStepAndTheConfigAndTrajectoriesAreText) {
  TrainConfig c = toy_config(fresh_dir("tb_run"));
  c.max_steps = 3;
  c.log_trajectories = 2;
  {
    TrainEnv env = toy_env(c);
    run_training(env, true);
  }
  const TbContents tb = sqlrl::testing::tb_read_dir(c.out + "/tb");
  ASSERT_EQ(tb.files, 1);
  EXPECT_EQ(tb.file_version_first, 1) << "the first event must be file_version brain.Event:2";
  ASSERT_EQ(jsonl(c.out + "/metrics.jsonl").size(), 3u);
  expect_scalars_equal_metrics(tb, c.out + "/metrics.jsonl");
  // The resolved config.toml at step 0, whole.
  ASSERT_EQ(tb.texts.count({"config", 0}), 1u);
  EXPECT_EQ(unindent(tb.texts.at({"config", 0})[0]), sql::testing::file_bytes(c.out + "/config.toml"));
  // Each step's trajectories.jsonl lines, once per step.
  const std::vector<nlohmann::json> trajs = jsonl(c.out + "/trajectories.jsonl");
  ASSERT_EQ(trajs.size(), 6u);
  for (const nlohmann::json& t : trajs) {
    const int64_t step = t["step"].get<int64_t>();
    ASSERT_EQ(tb.texts.count({"trajectories", step}), 1u) << "step " << step;
    ASSERT_EQ(tb.texts.at({"trajectories", step}).size(), 1u) << "step " << step;
    const std::string& md = tb.texts.at({"trajectories", step})[0];
    EXPECT_NE(unindent(md).find("\"example_id\": " + t["example_id"].dump()), std::string::npos) << md;
    EXPECT_NE(unindent(md).find("\"sample\": " + t["sample"].dump()), std::string::npos) << md;
  }
  EXPECT_EQ(tb.texts.size(), 4u);  // config + 3 steps

  // Off: the same run writes no tb folder (and the same metrics).
  TrainConfig off = toy_config(fresh_dir("tb_off"));
  off.max_steps = 3;
  off.log_trajectories = 2;
  off.tensorboard = false;
  {
    TrainEnv env = toy_env(off);
    run_training(env, true);
  }
  EXPECT_FALSE(fs::exists(off.out + "/tb"));
  std::vector<nlohmann::json> a = jsonl(c.out + "/metrics.jsonl"), b = jsonl(off.out + "/metrics.jsonl");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i].erase("time"), b[i].erase("time"), a[i].erase("rollout"), b[i].erase("rollout");
    EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
  }
}

// A crash after step k (its checkpoint written, an event of step k+1 logged without one), then
// two resumes: each step, config and trajectory text exactly once, the values the final
// metrics.jsonl's; the resumed process's file sorts after the first.
TEST(TensorBoard, AResumedRunLogsEachStepExactlyOnce) {
  const int64_t k = 3, total = 5;
  TrainConfig part = toy_config(fresh_dir("tb_resume"));
  part.max_steps = k;
  part.save_every = 2;
  {
    TrainEnv env = toy_env(part);
    run_training(env, true);
  }
  std::vector<std::string> files = sqlrl::testing::tb_files(part.out + "/tb");
  ASSERT_EQ(files.size(), 1u);
  {
    tensorboard::Event leftover;
    leftover.set_step(k + 1);
    tensorboard::Summary::Value* v = leftover.mutable_summary()->add_value();
    v->set_tag("reward_mean");
    v->set_simple_value(9.0f);
    std::ofstream(files[0], std::ios::binary | std::ios::app) << sqlrl::testing::tb_frame(leftover.SerializeAsString());
    std::ofstream(part.out + "/metrics.jsonl", std::ios::app) << "{\"step\":" << k + 1 << ",\"reward_mean\":9}\n";
  }
  TrainConfig again = part;
  again.resume = part.out;
  again.max_steps = total;
  {
    TrainEnv env = toy_env(again);
    run_training(env, true);
  }
  files = sqlrl::testing::tb_files(part.out + "/tb");
  ASSERT_EQ(files.size(), 2u);
  for (const tensorboard::Event& e : sqlrl::testing::tb_read_file(files[1]))
    EXPECT_TRUE(!e.has_summary() || e.step() >= k) << files[1] << " holds an event of step " << e.step();
  TbContents tb = sqlrl::testing::tb_read_dir(part.out + "/tb");
  EXPECT_EQ(tb.file_version_first, 2);
  ASSERT_EQ(jsonl(part.out + "/metrics.jsonl").size(), static_cast<size_t>(total));
  expect_scalars_equal_metrics(tb, part.out + "/metrics.jsonl");
  EXPECT_EQ(tb.texts.size(), static_cast<size_t>(2 + total));  // config at 0 and k, trajectories 1..total
  for (int64_t s : {int64_t{0}, k}) EXPECT_EQ(texts_at(tb, "config", s), 1u) << "config at step " << s;
  for (int64_t s = 1; s <= total; ++s) EXPECT_EQ(texts_at(tb, "trajectories", s), 1u) << "step " << s;

  // Lose the checkpoints past k and resume from k again: the config at k is written once more,
  // not twice, and the steps past k are the new process's alone.
  fs::remove_all(checkpoint_dir(part.out, 4));
  fs::remove_all(checkpoint_dir(part.out, 5));
  {
    TrainEnv env = toy_env(again);
    run_training(env, true);
  }
  tb = sqlrl::testing::tb_read_dir(part.out + "/tb");
  EXPECT_EQ(tb.files, 2);  // the second process's file lost every step past k and its config: gone
  expect_scalars_equal_metrics(tb, part.out + "/metrics.jsonl");
  for (int64_t s : {int64_t{0}, k}) EXPECT_EQ(texts_at(tb, "config", s), 1u) << "config at step " << s;
  for (int64_t s = 1; s <= total; ++s) EXPECT_EQ(texts_at(tb, "trajectories", s), 1u) << "step " << s;
}

// Through the binary, with --eval-every: the evaluation's figures are scalars under eval/ at its
// step, and the config text is the run's config.toml (each key's source included).
TEST(TensorBoard, TheCliLogsEvalFiguresAndTheResolvedConfig) {
  const std::string dir = fresh_dir("tb_cli_eval");
  CliRun r = run_command(str_cat(SQLRL_BINARY, " train --config tiny --weights ", SQLRL_FIXTURES_DIR,
                                 "/sft_tiny --max-steps 1 --batch-size 2 --group-size 4 --save-every 0 "
                                 "--max-turn-tokens 64 --max-total-tokens 2048 --eval-every 1 --eval-limit 3 --out ",
                                 dir),
                         "tb_cli_eval");
  ASSERT_EQ(r.rc, 0) << r.err;
  const TbContents tb = sqlrl::testing::tb_read_dir(dir + "/tb");
  expect_scalars_equal_metrics(tb, dir + "/metrics.jsonl");
  const nlohmann::json line = jsonl(dir + "/metrics.jsonl").at(0);
  ASSERT_TRUE(line.contains("eval"));
  ASSERT_EQ(tb.scalars.count({"eval/ex", 1}), 1u);
  EXPECT_EQ(tb.scalars.at({"eval/ex", 1})[0], line["eval"]["ex"].get<float>());
  EXPECT_EQ(tb.scalars.count({"eval/by_difficulty/easy/n", 1}), line["eval"]["by_difficulty"].contains("easy") ? 1u : 0u);
  ASSERT_EQ(tb.texts.count({"config", 0}), 1u);
  const std::string config = sql::testing::file_bytes(dir + "/config.toml");
  EXPECT_NE(config.find("tensorboard = true"), std::string::npos);
  EXPECT_EQ(unindent(tb.texts.at({"config", 0})[0]), config);
}

}  // namespace
}  // namespace sqlrl::rl::testing

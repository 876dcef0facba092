// SFT training: the update's loss and gradient against float64 references, the learning signal
// on a fixed demo set, and the run folder (metrics, atomic checkpoints that load back).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "rl/sft/sft.h"
#include "tests/rl_sft/sft_fixture.h"

namespace sqlrl::rl {
namespace {

using testing::sft_model;
using testing::sft_temp_dir;
using testing::sft_tokenizer;

// A fixed small demo set in two protocols' shapes: prompt and observations masked.
std::vector<SftSequence> demo_set() {
  const char* questions[] = {"How many cities are there?", "Name every city.", "Which city is largest?"};
  const char* sqls[] = {"SELECT count(*) FROM city", "SELECT name FROM city", "SELECT name FROM city ORDER BY population DESC LIMIT 1"};
  std::vector<SftSequence> out;
  for (int q = 0; q < 3; ++q) {
    std::string prompt = std::string("<|im_start|>system\nYou answer questions with SQL.<|im_end|>\n<|im_start|>user\n") +
                         questions[q] + "<|im_end|>\n<|im_start|>assistant\n";
    std::vector<SftSegment> a = {{prompt, false},
                                 {std::string("<think>\ncount the rows\n</think>\n<sql>") + sqls[q] + "</sql>", true},
                                 {"\n\n<observation>3</observation>\n\n", false},
                                 {std::string("<solution>") + sqls[q] + "</solution>", true},
                                 {"<|im_end|>", true}};
    std::vector<SftSegment> b = {{prompt, false},
                                 {std::string("<sql>") + sqls[q] + "</sql>", true},
                                 {"<|im_end|>\n<|im_start|>user\n<tool_response>\nname population 3\n</tool_response><|im_end|>\n<|im_start|>assistant\n", false},
                                 {std::string("<solution>") + sqls[q] + "</solution><|im_end|>", true}};
    out.push_back(tokenize_segments(sft_tokenizer(), a));
    out.push_back(tokenize_segments(sft_tokenizer(), b));
  }
  return out;
}

// -mean over trained targets of log softmax(logits), in float64 from the full logits.
double reference_nll(const QwenModel& model, const std::vector<SftSequence>& data) {
  const int64_t V = model.config.vocab_size;
  double nll = 0;
  int64_t n = 0;
  for (const SftSequence& s : data) {
    PackedBatch b = pack_sequences({std::vector<int32_t>(s.tokens.begin(), s.tokens.end() - 1)});
    TrainOptions o;
    o.max_tokens = b.num_tokens();
    TrainState st = make_train_state(model.config, o);
    std::vector<float> logits(static_cast<size_t>(b.num_tokens() * V));
    forward_logits(model, st, b, logits.data());
    for (int64_t t = 0; t < b.num_tokens(); ++t) {
      if (!s.mask[t + 1]) continue;
      const float* row = logits.data() + t * V;
      double mx = row[0], sum = 0;
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      nll -= static_cast<double>(row[s.tokens[t + 1]]) - mx - std::log(sum);
      ++n;
    }
  }
  return nll / static_cast<double>(n);
}

TEST(SftUpdate, LossAndGradientMatchFloat64) {
  std::vector<SftSequence> data = demo_set();
  QwenModel model = sft_model(static_cast<int64_t>(sft_tokenizer().size()));
  alloc_grads(model);
  OptimizerState opt = make_optimizer_state(model.num_params);
  TrainOptions to;
  to.max_tokens = 512;
  to.logprob_chunk = 16;  // several lm_head chunks
  Policy policy = cpu_policy(model);
  PolicyActivations acts;
  acts.host = make_train_state(model.config, to);
  std::vector<int64_t> order = epoch_order(static_cast<int64_t>(data.size()), 0, 0, false);
  std::vector<MicroBatch> mbs = pack_sft(data, order, 200);  // several micro-batches in one update
  ASSERT_GT(mbs.size(), 1u);
  std::vector<const MicroBatch*> group;
  for (const MicroBatch& mb : mbs) group.push_back(&mb);
  LrSchedule zero;  // lr 0 at step 0 of a warmup: the parameters stay, the gradients remain
  zero.warmup_steps = 10;
  SftConfig cfg;
  cfg.max_grad_norm = 0;
  const std::vector<float> before = model.params;
  SftUpdateStats st = sft_update(policy, opt, acts, group, zero, cfg);
  EXPECT_EQ(model.params, before);
  const double ref = reference_nll(model, data);
  // fp32 log-probs summed over ~100 tokens vs float64: 1e-5 relative is ~50 ulps of headroom.
  EXPECT_NEAR(st.loss, ref, 1e-5 * ref);
  int64_t trained = 0;
  for (const SftSequence& s : data) trained += s.trained() - s.mask[0];
  EXPECT_EQ(st.tokens, trained);
  // Central differences on the 6 largest gradient entries. eps 1e-3 on weights of scale 0.05;
  // float32 losses (~6 nats, rounding ~5e-7) give ~5e-4 absolute noise in the quotient.
  std::vector<int64_t> idx(static_cast<size_t>(model.num_params));
  for (int64_t i = 0; i < model.num_params; ++i) idx[i] = i;
  std::partial_sort(idx.begin(), idx.begin() + 6, idx.end(),
                    [&](int64_t a, int64_t b) { return std::fabs(model.grads[a]) > std::fabs(model.grads[b]); });
  for (int k = 0; k < 6; ++k) {
    const int64_t i = idx[k];
    const float keep = model.params[i], eps = 1e-3f;
    model.params[i] = keep + eps;
    double up = reference_nll(model, data);
    model.params[i] = keep - eps;
    double down = reference_nll(model, data);
    model.params[i] = keep;
    double fd = (up - down) / (2.0 * eps);
    EXPECT_NEAR(model.grads[i], fd, 0.02 * std::fabs(fd) + 2e-3) << "parameter " << i;
  }
}

// The memory modes change where buffers live, not the arithmetic: every layer recomputed gives
// the weights of storing them, bit for bit (the CPU forward is deterministic, so a recomputed
// layer must reproduce its activations exactly; a recomputation that left any stale would
// change the gradients). bf16 moments train too, close to fp32 ones. run.modes is what ran.
TEST(SftRun, MemoryModesRunAsPlannedAndRecomputationIsExact) {
  std::vector<SftSequence> data = demo_set();
  const int64_t vocab = static_cast<int64_t>(sft_tokenizer().size());
  SftConfig cfg;
  cfg.lr = 1e-2f;
  cfg.epochs = 100;
  cfg.max_steps = 12;
  cfg.micro_batch_tokens = 256;
  auto run = [&](const char* recompute, const char* bf16, SftRunStats* stats) {
    QwenModel model = sft_model(vocab);
    OptimizerState opt;
    SftRunOptions ro{};
    ro.memory.recompute = recompute;
    ro.memory.bf16_moments = bf16;
    *stats = run_sft(model, opt, data, cfg, ro);
    EXPECT_EQ(stats->modes.bf16_moments, std::string(bf16) == "on");
    EXPECT_EQ(stats->modes.recomputed_layers(), std::string(recompute) == "on" ? model.config.num_hidden_layers : 0);
    return model.params;
  };
  SftRunStats stored, recomputed, bf16;
  std::vector<float> a = run("off", "off", &stored), b = run("on", "off", &recomputed), c = run("off", "on", &bf16);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);  // bf16 moments do differ...
  // ...but learn alike: the training loss falls as far (measured 3.340 vs 3.341 after 12 updates).
  std::printf("SFT loss %.3f -> %.3f (fp32 moments), %.3f -> %.3f (bf16 moments)\n", stored.first_loss,
              stored.last_loss, bf16.first_loss, bf16.last_loss);
  EXPECT_LT(bf16.last_loss, 0.7 * bf16.first_loss);  // measured 5.96 -> 3.34 in 12 updates, as fp32
  EXPECT_NEAR(bf16.last_loss, stored.last_loss, 0.1 * stored.last_loss);
}

TEST(SftRun, LossFallsOnAFixedDemoSet) {
  std::vector<SftSequence> data = demo_set();
  QwenModel model = sft_model(static_cast<int64_t>(sft_tokenizer().size()));
  TrainOptions to;
  to.max_tokens = 256;
  TrainState state = make_train_state(model.config, to);
  const double before = sft_eval_loss(model, state, data, 256);
  SftConfig cfg;
  cfg.lr = 1e-2f;
  cfg.epochs = 100;
  cfg.max_steps = 40;
  cfg.micro_batch_tokens = 256;
  cfg.warmup_ratio = 0.1f;
  OptimizerState opt;
  SftRunStats st = run_sft(model, opt, data, cfg, SftRunOptions{});
  const double after = sft_eval_loss(model, state, data, 256);
  std::printf("SFT eval loss %.3f -> %.3f nats/token over %lld updates (training loss %.3f -> %.3f)\n", before, after,
              static_cast<long long>(st.updates), st.first_loss, st.last_loss);
  EXPECT_EQ(st.updates, 40);
  // Measured: 5.96 -> 0.83 nats/token (ln 400 = 5.99 at the start); a quarter leaves a wide margin.
  EXPECT_LT(after, 0.25 * before);
}

TEST(SftRun, WritesMetricsAndCheckpointsThatLoadBack) {
  const std::string out = sft_temp_dir() + "/run";
  const std::string tok_path = sft_temp_dir() + "/tokenizer.json";
  std::ofstream(tok_path, std::ios::binary) << testing::sft_tokenizer_json();
  std::vector<SftSequence> data = demo_set();
  QwenModel model = sft_model(static_cast<int64_t>(sft_tokenizer().size()));
  SftConfig cfg;
  cfg.lr = 1e-3f;
  cfg.max_steps = 6;
  cfg.epochs = 10;
  cfg.micro_batch_tokens = 128;
  cfg.save_every = 4;
  OptimizerState opt;
  SftRunStats st = run_sft(model, opt, data, cfg, SftRunOptions{out, tok_path, {}});
  namespace fs = std::filesystem;
  ASSERT_EQ(st.checkpoints.size(), 2u);  // step 4 and the last, step 6
  EXPECT_TRUE(fs::exists(out + "/checkpoints/step-4/model.safetensors"));
  const std::string last = out + "/checkpoints/step-6";
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "optimizer.safetensors", "trainer_state.json"})
    EXPECT_TRUE(fs::exists(last + "/" + f)) << f;
  for (const auto& e : fs::directory_iterator(out + "/checkpoints"))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  std::ifstream metrics(out + "/metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(metrics, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    for (const char* k : {"step", "loss", "tokens", "lr", "tokens_per_s"}) EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_EQ(j["step"].get<int64_t>(), ++lines);
  }
  EXPECT_EQ(lines, 6);
  QwenModel back = load_model(last);
  EXPECT_EQ(back.params, model.params);
  OptimizerState ob = load_optimizer(last + "/optimizer.safetensors", model.num_params);
  EXPECT_EQ(ob.adam_step, 6);
  EXPECT_EQ(ob.m, opt.m);
  EXPECT_EQ(load_tokenizer(last + "/tokenizer.json")->size(), sft_tokenizer().size());
}

// Off a terminal the progress line is a plain line per update, or with progress_plain_lines N
// about N lines in all, the last update's always among them (the demo's log: 20 lines for ~2,000
// updates instead of one per update).
TEST(SftRun, PlainProgressLinesAreSpacedAsAsked) {
  auto progress_lines = [](int64_t plain_lines) {
    QwenModel model = sft_model(static_cast<int64_t>(sft_tokenizer().size()));
    SftConfig cfg;
    cfg.max_steps = 9;
    cfg.epochs = 10;
    cfg.micro_batch_tokens = 128;
    OptimizerState opt;
    SftRunOptions ro;
    ro.progress = true;
    ro.progress_label = "sft-progress-test";
    ro.progress_plain_lines = plain_lines;
    ::testing::internal::CaptureStdout();
    run_sft(model, opt, demo_set(), cfg, ro);
    const std::string out = ::testing::internal::GetCapturedStdout();
    std::vector<std::string> lines;
    for (size_t at = out.find("sft-progress-test "); at != std::string::npos; at = out.find("sft-progress-test ", at + 1))
      lines.push_back(out.substr(at, out.find('\n', at) - at));
    return lines;
  };
  EXPECT_EQ(progress_lines(0).size(), 9u);
  const std::vector<std::string> spaced = progress_lines(3);  // every 3 updates: 3, 6, 9
  ASSERT_EQ(spaced.size(), 3u);
  EXPECT_NE(spaced[0].find(" 3/9 "), std::string::npos) << spaced[0];
  EXPECT_NE(spaced[2].find(" 9/9 "), std::string::npos) << spaced[2];
  EXPECT_EQ(progress_lines(4).size(), 5u);  // every 2 updates (9 / 4): 2, 4, 6, 8 and the last, 9
}

}  // namespace
}  // namespace sqlrl::rl

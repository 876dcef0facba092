// LoRA adapters (model/lora.h) against Hugging Face PEFT: tests/fixtures/lora holds adapters PEFT
// saved on the random models of tests/fixtures/model and PEFT's float64 logits with them, unmerged
// and merged (tools/make_lora_fixtures.py). Also: a zero B leaves the model bit for bit, the
// save/load round trip in PEFT's layout, PEFT's init, target selection, and errors that name
// the file, the tensor and the shape.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "lora_fixture.h"
#include "model/infer.h"
#include "model/lora.h"
#include "runtime/file_io.h"

namespace sqlrl {
namespace {

using testing::error_of;
using testing::scaled_max_error;
using json = nlohmann::json;

// The budget of the base fixtures (test_hf_forward_backward.cpp): fp32 against the float64
// reference lands near 1e-6 of the largest logit there (f32 roundings of ~6e-8 through two layers
// of dot products of 64 to 128 terms, attention and the norms). The adapter adds, per projection,
// two products of r <= 8 terms on the same scale, so the error stays in the same decade; 1e-4
// keeps two decades of margin and is still far below what a wrong adapter gives (the fixtures
// move the logits by more than 100% of the largest one; halving the scale moves them by tens of %).
constexpr double kLogitBudget = 1e-4;

using testing::AdapterFixture;
AdapterFixture load_fixture(const std::string& name) { return testing::load_adapter_fixture(name); }

std::vector<float> logits_of(const QwenModel& model, const PackedBatch& batch, const LoraAdapter* lora) {
  const int64_t T = batch.num_tokens();
  TrainState state = make_train_state(model.config, testing::options(T));
  std::vector<float> logits(static_cast<size_t>(T * model.config.vocab_size), NAN);
  forward_logits(model, state, batch, logits.data(), lora);
  return logits;
}

class LoraPeft : public ::testing::TestWithParam<const char*> {};

TEST_P(LoraPeft, UnmergedLogitsMatchPeft) {
  AdapterFixture a = load_fixture(GetParam());
  const std::vector<float> want = a.f.floats("logits");
  double err = scaled_max_error(logits_of(a.f.model, a.f.batch, &a.adapter), want);
  // How far the base model alone is from PEFT's adapted logits: what the adapter contributes.
  double base = scaled_max_error(logits_of(a.f.model, a.f.batch, nullptr), want);
  std::printf("%s: base + adapter logits, max error / max |logit| = %.3g (budget %g); without the adapter %.3g\n",
              GetParam(), err, kLogitBudget, base);
  EXPECT_LE(err, kLogitBudget);
  EXPECT_GT(base, 100 * kLogitBudget) << "the fixture's adapter must change the logits well past the budget";
}

TEST_P(LoraPeft, MergedLogitsMatchPeftMergeAndUnload) {
  AdapterFixture a = load_fixture(GetParam());
  merge_adapter(a.f.model, a.adapter);
  double err = scaled_max_error(logits_of(a.f.model, a.f.batch, nullptr), a.f.floats("merged_logits"));
  std::printf("%s: merged logits, max error / max |logit| = %.3g (budget %g)\n", GetParam(), err, kLogitBudget);
  EXPECT_LE(err, kLogitBudget);
}

TEST_P(LoraPeft, LogprobsWithAdapterMatchPeft) {
  AdapterFixture a = load_fixture(GetParam());
  const int64_t T = a.f.batch.num_tokens(), V = a.f.model.config.vocab_size;
  std::vector<int32_t> targets(static_cast<size_t>(T));
  std::vector<uint8_t> mask(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) targets[t] = (a.f.batch.tokens[t] * 7 + 3) % static_cast<int32_t>(V), mask[t] = t % 3 != 0;
  // log_softmax of PEFT's logits (double) at the targets.
  const std::vector<float> logits = a.f.floats("logits");
  std::vector<double> want(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(logits[t * V + v]));
    for (int64_t v = 0; v < V; ++v) sum += std::exp(logits[t * V + v] - mx);
    want[t] = logits[t * V + targets[t]] - mx - std::log(sum);
  }
  TrainState state = make_train_state(a.f.model.config, testing::options(T, 7));
  std::vector<float> lp(static_cast<size_t>(T)), masked(static_cast<size_t>(T));
  forward_logprobs(a.f.model, state, a.f.batch, targets, lp.data(), nullptr, 1.0f, &a.adapter);
  forward_logprobs_masked(a.f.model, state, a.f.batch, targets, mask.data(), masked.data(), &a.adapter);
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    worst = std::max(worst, std::fabs(lp[t] - want[t]) / std::max(1.0, std::fabs(want[t])));
    // The masked path's lm_head sees fewer rows (other GEMM blocking): the same within f32 rounding.
    if (mask[t]) worst = std::max(worst, std::fabs(masked[t] - want[t]) / std::max(1.0, std::fabs(want[t])));
    else EXPECT_EQ(masked[t], 0.0f) << "row " << t;
  }
  std::printf("%s: log-probs with the adapter, max error %.3g (budget %g)\n", GetParam(), worst, kLogitBudget);
  EXPECT_LE(worst, kLogitBudget);
}

TEST_P(LoraPeft, CachedForwardWithAdapterEqualsTrainingForward) {
  AdapterFixture a = load_fixture(GetParam());
  const int64_t V = a.f.model.config.vocab_size;
  const PackedBatch& b = a.f.batch;
  std::vector<int32_t> seq(b.tokens.begin() + b.cu_seqlens[2], b.tokens.begin() + b.cu_seqlens[3]);
  const int64_t n = static_cast<int64_t>(seq.size());
  std::vector<float> full = logits_of(a.f.model, pack_sequences({seq}), &a.adapter);
  PagedKVCache cache = make_kv_cache(a.f.model.config, 16, 3);
  int64_t h = kv_new_sequence(cache);
  std::vector<float> logits;
  forward_cached(a.f.model, cache, {{h, std::vector<int32_t>(seq.begin(), seq.begin() + 5)}}, logits, true, &a.adapter);
  double worst = scaled_max_error(logits, std::vector<float>(full.begin(), full.begin() + 5 * V));
  for (int64_t t = 5; t < n; ++t) {
    forward_cached(a.f.model, cache, {{h, {seq[t]}}}, logits, false, &a.adapter);
    worst = std::max(worst, scaled_max_error(logits, std::vector<float>(full.begin() + t * V, full.begin() + (t + 1) * V)));
  }
  std::printf("%s: cached vs training forward with the adapter, worst scaled error %.3g\n", GetParam(), worst);
  // The bound of test_kv_cache.cpp: the same formula, summed in another order by the decode kernel.
  EXPECT_LE(worst, 1e-5);
}

TEST_P(LoraPeft, SaveLoadRoundTripsBitExactlyInPeftLayout) {
  AdapterFixture a = load_fixture(GetParam());
  // With SQLRL_LORA_RESAVE_DIR set the adapters stay there for tools/make_lora_fixtures.py
  // --resaved, which checks that PEFT loads them.
  const char* keep = std::getenv("SQLRL_LORA_RESAVE_DIR");
  const std::filesystem::path dir =
      keep ? std::filesystem::path(keep) / GetParam() : testing::process_temp_path(std::string("lora_") + GetParam());
  std::filesystem::create_directories(dir.parent_path());
  save_adapter(a.adapter, dir.string());
  LoraAdapter back = load_adapter(dir.string(), a.f.model);
  ASSERT_EQ(back.num_params, a.adapter.num_params);
  EXPECT_EQ(std::memcmp(back.params.data(), a.adapter.params.data(), sizeof(float) * a.adapter.params.size()), 0);
  ASSERT_EQ(back.table.size(), a.adapter.table.size());
  for (size_t i = 0; i < back.table.size(); ++i) {
    EXPECT_EQ(back.table[i].hf_name, a.adapter.table[i].hf_name);
    EXPECT_EQ(back.table[i].shape, a.adapter.table[i].shape);
    EXPECT_EQ(back.table[i].offset, a.adapter.table[i].offset);
  }
  EXPECT_EQ(back.config.rank, a.adapter.config.rank);
  EXPECT_EQ(back.config.alpha, a.adapter.config.alpha);
  EXPECT_EQ(back.config.use_rslora, a.adapter.config.use_rslora);
  EXPECT_EQ(back.config.target_modules, a.adapter.config.target_modules);
  EXPECT_EQ(back.config.base_model, a.adapter.config.base_model);
  // Tensor for tensor PEFT's names: the saved file and the one PEFT wrote hold the same set.
  std::set<std::string> ours, peft;
  for (const TensorEntry& e : open_safetensors((dir / "adapter_model.safetensors").string()).tensors) ours.insert(e.name);
  for (const TensorEntry& e : open_safetensors(a.dir + "/adapter_model.safetensors").tensors) peft.insert(e.name);
  EXPECT_EQ(ours, peft);
  EXPECT_TRUE(ours.count("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
  json config = json::parse(read_file_text((dir / "adapter_config.json").string()));
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["r"], a.adapter.config.rank);
  if (!keep) std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Lora, LoraPeft, ::testing::Values("qwen3_tied", "qwen2_untied", "qwen3_tied_rslora"));

LoraConfig all_linear(int64_t rank, double alpha) {
  LoraConfig c;
  c.rank = rank;
  c.alpha = alpha;
  c.target_pattern = "all-linear";
  return c;
}

TEST(Lora, ZeroBLeavesTheBaseModelBitForBit) {
  for (const char* name : {"qwen3_tied", "qwen2_untied"}) {
    auto f = testing::load_model_fixture(name);
    LoraAdapter fresh = init_adapter(all_linear(4, 8), f.model.config, 5);  // A random, B = 0
    std::vector<float> base = logits_of(f.model, f.batch, nullptr), with = logits_of(f.model, f.batch, &fresh);
    EXPECT_EQ(std::memcmp(base.data(), with.data(), sizeof(float) * base.size()), 0) << name << ": training forward";
    std::vector<float> cached_base, cached_with;
    for (auto [out, lora] : {std::pair{&cached_base, (const LoraAdapter*)nullptr}, {&cached_with, &fresh}}) {
      PagedKVCache cache = make_kv_cache(f.model.config, 16, 4);
      forward_cached(f.model, cache, {{kv_new_sequence(cache), f.ints("greedy_prompt")}}, *out, true, lora);
    }
    EXPECT_EQ(cached_base, cached_with) << name << ": cached forward";
    std::vector<float> params = f.model.params;
    merge_adapter(f.model, fresh);
    EXPECT_EQ(std::memcmp(params.data(), f.model.params.data(), sizeof(float) * params.size()), 0) << name << ": merge";
  }
}

TEST(Lora, InitIsPeftsDefaultFromPhilox) {
  auto f = testing::load_model_fixture("qwen3_tied");
  LoraAdapter a = init_adapter(all_linear(4, 8), f.model.config, 7);
  EXPECT_EQ(a.table.size(), size_t{2 * 7 * 2});  // 2 layers x 7 projections x (A, B)
  for (const LoraView& v : a.table) {
    const float* p = a.params.data() + v.offset;
    float largest = 0;
    for (int64_t i = 0; i < v.numel(); ++i) largest = std::max(largest, std::fabs(p[i]));
    if (v.is_b) {
      EXPECT_EQ(largest, 0.0f) << v.hf_name;
    } else {  // kaiming_uniform(a = sqrt(5)): U(-1/sqrt(in), 1/sqrt(in))
      const float bound = 1.0f / std::sqrt(static_cast<float>(v.shape[1]));
      EXPECT_LE(largest, bound) << v.hf_name;
      EXPECT_GT(largest, 0.9f * bound) << v.hf_name;
    }
  }
  EXPECT_EQ(init_adapter(all_linear(4, 8), f.model.config, 7).params, a.params) << "same seed, same bits";
  EXPECT_NE(init_adapter(all_linear(4, 8), f.model.config, 8).params, a.params);
  if (const char* keep = std::getenv("SQLRL_LORA_RESAVE_DIR"))
    save_adapter(a, (std::filesystem::path(keep) / "init_qwen3_tied").string());
}

TEST(Lora, ScaleAndTargetsFollowPeft) {
  LoraConfig c = all_linear(8, 16);
  EXPECT_EQ(lora_scale(c), 2.0f);
  c.use_rslora = true;
  EXPECT_EQ(lora_scale(c), static_cast<float>(16 / std::sqrt(8.0)));
  QwenConfig model = preset_config("qwen3-0.6b");
  auto count = [&](const LoraConfig& config) {
    int n = 0;
    for (const auto& layer : lora_targets(config, model))
      for (bool on : layer) n += on;
    return n;
  };
  const int L = static_cast<int>(model.num_hidden_layers);
  EXPECT_EQ(count(c), 7 * L);
  LoraConfig list;
  list.target_modules = {"q_proj", "self_attn.v_proj"};  // names and suffixes, as PEFT matches them
  EXPECT_EQ(count(list), 2 * L);
  LoraConfig pattern;
  pattern.target_pattern = R"(.*\.(q_proj|v_proj))";  // PEFT: re.fullmatch on the module name
  EXPECT_EQ(lora_targets(pattern, model), lora_targets(list, model));
  LoraConfig one;
  one.target_modules = {"layers.1.mlp.down_proj"};
  auto t = lora_targets(one, model);
  EXPECT_EQ(count(one), 1);
  EXPECT_TRUE(t[1][static_cast<int>(LoraModule::down_proj)]);
  LoraConfig head;
  head.target_modules = {"q_proj", "lm_head"};
  EXPECT_NE(error_of([&] { lora_targets(head, model); }).find("lm_head, which is not supported"), std::string::npos);
  LoraConfig none;
  none.target_pattern = ".*\\.c_attn";
  EXPECT_NE(error_of([&] { lora_targets(none, model); }).find("matches no projection"), std::string::npos);
}

// A copy of a fixture adapter in a temp folder, its config and tensors edited first.
struct AdapterVariant {
  std::filesystem::path dir;
  AdapterVariant(const std::string& fixture, const std::string& tag, const std::function<void(json&)>& edit_config,
                 const std::function<void(std::vector<TensorRecord>&)>& edit_records, const LoraAdapter& adapter) {
    dir = testing::process_temp_path("lora_bad_" + tag);
    std::filesystem::create_directories(dir);
    json config = json::parse(read_file_text(testing::fixture_path("lora/" + fixture + "/adapter_config.json")));
    edit_config(config);
    write_text_atomic((dir / "adapter_config.json").string(), config.dump(2));
    std::vector<TensorRecord> records;
    for (const LoraView& v : adapter.table) records.push_back({v.hf_name, StDType::F32, v.shape, adapter.params.data() + v.offset});
    edit_records(records);
    write_safetensors((dir / "adapter_model.safetensors").string(), records);
  }
  ~AdapterVariant() { std::filesystem::remove_all(dir); }
};

TEST(Lora, BadAdaptersFailNamingFileTensorAndShape) {
  AdapterFixture a = load_fixture("qwen3_tied");
  const std::string q_a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
  const std::string up_b = "base_model.model.model.layers.1.mlp.up_proj.lora_B.weight";
  auto same_config = [](json&) {};
  auto same_records = [](std::vector<TensorRecord>&) {};
  auto load_error = [&](const AdapterVariant& v) { return error_of([&] { load_adapter(v.dir.string(), a.f.model); }); };
  struct Case {
    const char* tag;
    std::function<void(json&)> config;
    std::function<void(std::vector<TensorRecord>&)> records;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"shape", same_config,
       [&](std::vector<TensorRecord>& r) {
         for (TensorRecord& t : r)
           if (t.name == q_a) t.shape = {4, 32};
       },
       "adapter_model.safetensors: tensor '" + q_a + "' has shape [4, 32], expected [4, 64]"},
      {"missing", same_config,
       [&](std::vector<TensorRecord>& r) { std::erase_if(r, [&](const TensorRecord& t) { return t.name == up_b; }); },
       "adapter_model.safetensors: missing tensor '" + up_b + "' [128, 4]"},
      {"untargeted", [](json& c) { c["target_modules"] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "down_proj"}; },
       same_records, "unexpected tensor '" + up_b + "' [128, 4] (adapts model.layers.1.mlp.up_proj, which target_modules"},
      {"stray", same_config,
       [&](std::vector<TensorRecord>& r) { r.push_back({"base_model.model.model.norm.lora_A.weight", StDType::F32, {4, 64}, r[0].data}); },
       "unexpected tensor 'base_model.model.model.norm.lora_A.weight' [4, 64] (not the lora_A or lora_B"},
      {"module", [](json& c) { c["target_modules"] = {"q_proj", "c_attn"}; }, same_records,
       "adapter_config.json: target_modules entry 'c_attn' matches no projection"},
      {"dora", [](json& c) { c["use_dora"] = true; }, same_records, "adapter_config.json: use_dora = true: DoRA"},
      {"bias", [](json& c) { c["bias"] = "all"; }, same_records, "adapter_config.json: bias = \"all\""},
      {"save", [](json& c) { c["modules_to_save"] = {"lm_head"}; }, same_records, "modules_to_save = [\"lm_head\"]"},
      {"ranks", [](json& c) { c["rank_pattern"] = {{"q_proj", 8}}; }, same_records, "rank_pattern = {\"q_proj\":8}"},
      {"head", [](json& c) { c["target_modules"] = {"q_proj", "lm_head"}; }, same_records,
       "names lm_head, which is not supported"},
      {"unknown", [](json& c) { c["use_magic"] = 3; }, same_records, "field 'use_magic' = 3 is not understood"},
  };
  for (const Case& c : cases) {
    AdapterVariant v("qwen3_tied", c.tag, c.config, c.records, a.adapter);
    std::string err = load_error(v);
    EXPECT_NE(err.find(c.want), std::string::npos) << c.tag << ": got '" << err << "'";
  }
}

}  // namespace
}  // namespace sqlrl

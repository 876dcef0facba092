// Reading the Hugging Face golden fixtures of tools/make_model_fixtures.py.
#pragma once
#include <string>
#include <vector>

#include "model/model.h"
#include "model/train.h"
#include "tests/test_util.h"
#include "weights/safetensors.h"

namespace sqlrl::testing {

struct ModelFixture {
  std::string folder;
  QwenModel model;
  SafetensorsFile expected;
  PackedBatch batch;
  std::vector<int32_t> targets, mask;

  std::vector<float> floats(const std::string& name) const {
    const TensorEntry* e = expected.find(name);
    if (!e) throw std::runtime_error(folder + "/expected.safetensors: no tensor " + name);
    return to_floats(tensor_view(expected, *e));
  }
  std::vector<int32_t> ints(const std::string& name) const {
    const TensorEntry* e = expected.find(name);
    if (!e) throw std::runtime_error(folder + "/expected.safetensors: no tensor " + name);
    Tensor t = tensor_view(expected, *e);
    const int32_t* p = t.data_as<int32_t>();
    return std::vector<int32_t>(p, p + t.numel());
  }
};

inline ModelFixture load_model_fixture(const std::string& name) {
  ModelFixture f;
  f.folder = fixture_path("model/" + name);
  f.model = load_model(f.folder);
  f.expected = open_safetensors(f.folder + "/expected.safetensors");
  f.batch.tokens = f.ints("tokens");
  f.batch.positions = f.ints("positions");
  f.batch.cu_seqlens = f.ints("cu_seqlens");
  f.targets = f.ints("targets");
  f.mask = f.ints("mask");
  return f;
}

inline TrainOptions options(int64_t max_tokens, int64_t chunk = 128, std::vector<bool> recompute = {}) {
  TrainOptions o;
  o.max_tokens = max_tokens;
  o.logprob_chunk = chunk;
  o.recompute = std::move(recompute);
  return o;
}

// Max |got - want| over max |want|: the error relative to the tensor's scale.
inline double scaled_max_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, scale = 0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  if (got.size() != want.size()) return INFINITY;
  return scale > 0 ? worst / scale : worst;
}

}  // namespace sqlrl::testing

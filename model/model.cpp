#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "runtime/error.h"
#include "runtime/random.h"
#include "runtime/tensor.h"
#include "weights/checkpoint.h"

namespace sqlrl {

QwenModel make_model(const QwenConfig& config) {
  validate_config(config, "model");
  QwenModel model;
  model.config = config;
  for (const ParamSpec& spec : qwen_parameters(config)) {
    model.table.push_back({spec, model.num_params});
    model.num_params += spec.numel();
  }
  model.params.assign(static_cast<size_t>(model.num_params), 0.0f);
  return model;
}

ModelWeights QwenModel::bind_weights(const QwenModel& model, float* base) {
  check(base != nullptr, "model: binding views to an unallocated buffer");
  ModelWeights w;
  w.layers.resize(static_cast<size_t>(model.config.num_hidden_layers));
  for (const ParamView& view : model.table) {
    float* p = base + view.offset;
    const std::string& name = view.spec.name;
    if (name == "embed") {
      w.embed = p;
    } else if (name == "final_norm") {
      w.final_norm = p;
    } else if (name == "lm_head") {
      w.lm_head = p;
    } else {
      check(name.size() > 1 && name[0] == 'L', "model: unexpected parameter name '", name, "'");
      size_t dot = name.find('.');
      size_t layer = std::stoul(name.substr(1, dot - 1));
      check(layer < w.layers.size(), "model: parameter '", name, "' names a layer past ", w.layers.size());
      LayerWeights& l = w.layers[layer];
      std::string field = name.substr(dot + 1);
      float** slot = field == "attn_norm" ? &l.attn_norm
                     : field == "wq"      ? &l.wq
                     : field == "bq"      ? &l.bq
                     : field == "wk"      ? &l.wk
                     : field == "bk"      ? &l.bk
                     : field == "wv"      ? &l.wv
                     : field == "bv"      ? &l.bv
                     : field == "wo"      ? &l.wo
                     : field == "bo"      ? &l.bo
                     : field == "q_norm"  ? &l.q_norm
                     : field == "k_norm"  ? &l.k_norm
                     : field == "mlp_norm" ? &l.mlp_norm
                     : field == "w_gate"  ? &l.w_gate
                     : field == "w_up"    ? &l.w_up
                     : field == "w_down"  ? &l.w_down
                                          : nullptr;
      check(slot != nullptr, "model: unknown layer parameter '", name, "'");
      *slot = p;
    }
  }
  if (model.config.tie_word_embeddings) w.lm_head = w.embed;
  check(w.embed && w.final_norm && w.lm_head, "model: parameter table lacks embed, final_norm or lm_head");
  return w;
}

void init_random_weights(QwenModel& model, uint64_t seed, float stddev) {
  uint64_t stream = 0;
  for (const ParamView& view : model.table) {
    float* p = model.params.data() + view.offset;
    int64_t n = view.spec.numel();
    if (view.spec.name.find("norm") != std::string::npos)
      std::fill(p, p + n, 1.0f);
    else
      fill_normal(wrap(p, {n}, DType::F32, cpu_device(), nullptr), seed, stream++, 0.0f, stddev);
  }
}

QwenModel load_model(const std::string& path) {
  Checkpoint checkpoint = open_checkpoint(path);
  QwenConfig config = checkpoint_config(checkpoint);
  QwenModel model = make_model(config);
  std::vector<LoadedParam> loaded = load_qwen_weights(checkpoint, config, DType::F32, cpu_device());
  check(loaded.size() == model.table.size(), path, ": loaded ", loaded.size(), " tensors, the model has ",
        model.table.size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    const ParamView& view = model.table[i];
    check(loaded[i].spec.hf_name == view.spec.hf_name && loaded[i].tensor.numel() == view.spec.numel(), path,
          ": tensor ", i, " is '", loaded[i].spec.hf_name, "', expected '", view.spec.hf_name, "'");
    std::memcpy(model.params.data() + view.offset, loaded[i].tensor.data(), sizeof(float) * view.spec.numel());
  }
  return model;
}

void save_model(const QwenModel& model, const std::string& folder) {
  std::vector<TensorRecord> records;
  for (const ParamView& view : model.table) {
    TensorRecord r;
    r.name = view.spec.hf_name;
    r.dtype = StDType::F32;
    r.shape = view.spec.shape;
    r.data = model.params.data() + view.offset;
    records.push_back(r);
  }
  QwenConfig config = model.config;
  config.torch_dtype = "float32";
  save_checkpoint(folder, records, config);
}

const ParamView& find_param(const QwenModel& model, const std::string& hf_name) {
  for (const ParamView& view : model.table)
    if (view.spec.hf_name == hf_name) return view;
  fail("model: no parameter named '", hf_name, "' in the ", arch_name(model.config.arch), " table");
}

void alloc_grads(QwenModel& model) { model.grads.assign(static_cast<size_t>(model.num_params), 0.0f); }

void zero_grads(QwenModel& model) { std::fill(model.grads.begin(), model.grads.end(), 0.0f); }

}  // namespace sqlrl

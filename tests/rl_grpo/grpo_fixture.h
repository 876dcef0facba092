// Hand-made trajectories and a tiny random Qwen3 for the trainer tests.
#pragma once
#include <string>
#include <vector>

#include "model/model.h"
#include "model/train.h"
#include "rl/agent/trajectory.h"
#include "runtime/random.h"
#include "runtime/tensor.h"

namespace sqlrl::testing {

// Log-probs of tokens[1..n) of each trajectory (index p predicts token p + 1) under
// softmax(logits / temperature), one trajectory per CPU forward. With `entropy`, each
// position's policy entropy too.
inline std::vector<std::vector<float>> trajectory_logprobs(const QwenModel& model,
                                                           const std::vector<rl::Trajectory>& batch,
                                                           std::vector<std::vector<float>>* entropy = nullptr,
                                                           float temperature = 1.0f) {
  std::vector<std::vector<float>> out;
  for (const rl::Trajectory& t : batch) {
    std::vector<int32_t> in(t.tokens.begin(), t.tokens.end() - 1), tg(t.tokens.begin() + 1, t.tokens.end());
    PackedBatch pb = pack_sequences({in});
    TrainOptions options;
    options.max_tokens = pb.num_tokens();
    options.logprob_chunk = 8;
    TrainState st = make_train_state(model.config, options);
    std::vector<float> lp(tg.size()), h(tg.size());
    forward_logprobs(model, st, pb, tg, lp.data(), entropy ? h.data() : nullptr, 1.0f / temperature);
    out.push_back(lp);
    if (entropy) entropy->push_back(h);
  }
  return out;
}

inline QwenConfig tiny_config() {
  QwenConfig c;
  c.vocab_size = 24;
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  c.rope_theta = 100.0;
  return c;
}

// Norm scales 1, everything else N(0, stddev), as transformers initialises a fresh model.
inline QwenModel random_model(const QwenConfig& config, uint64_t seed, float stddev = 0.02f) {
  QwenModel model = make_model(config);
  init_random_weights(model, seed, stddev);
  return model;
}

// prompt, then sampled tokens (mask 1), then optionally an observation (mask 0) and more
// sampled tokens; one valid Answer turn so that the default filter keeps it.
inline rl::Trajectory make_trajectory(int64_t example, int64_t sample, std::vector<int32_t> prompt,
                                      std::vector<std::vector<int32_t>> segments, double reward) {
  rl::Trajectory t;
  t.example_index = example, t.sample_index = sample, t.reward = reward;
  t.tokens = prompt;
  t.policy_mask.assign(prompt.size(), 0);
  t.prompt_length = static_cast<int64_t>(prompt.size());
  for (size_t s = 0; s < segments.size(); ++s)
    for (int32_t tok : segments[s]) t.tokens.push_back(tok), t.policy_mask.push_back(s % 2 == 0 ? 1 : 0);
  t.sampler_logprobs.assign(t.tokens.size(), 0.0f);
  rl::TurnRecord turn;
  turn.action.kind = rl::ActionKind::Answer;
  t.turns.push_back(turn);
  t.answered = true;
  return t;
}

// prompt, a query turn (sampled), its observation, an answer turn (sampled): the query `ran`
// (executed, failed when !ran_ok) and the answer `answer`.
inline rl::Trajectory make_two_turn(int64_t example, int64_t sample, double reward, const std::string& ran, bool ran_ok,
                                    const std::string& answer) {
  rl::Trajectory t = make_trajectory(example, sample, {1, 2, 3}, {{4, 5, 6}, {7, 8}, {9, 10, 11}}, reward);
  rl::TurnRecord query;
  query.action.kind = rl::ActionKind::ExecSql, query.action.sql = ran;
  query.executed = true, query.sql_error = !ran_ok;
  t.turns.insert(t.turns.begin(), query);
  t.turns.back().action.sql = answer;
  t.final_sql = answer;
  return t;
}

}  // namespace sqlrl::testing

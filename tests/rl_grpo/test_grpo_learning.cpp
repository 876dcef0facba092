// Learning signal: a tiny random Qwen3 trained by grpo_step on fixed hand-made trajectories in
// which reward 1 always goes to one token sequence. GRPO's advantage is positive only there,
// so the log-prob of that sequence must rise clearly within a few dozen steps.
#include <cmath>
#include <cstdio>

#include "rl/grpo/grpo.h"
#include "tests/rl_grpo/grpo_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::testing {
namespace {

const std::vector<int32_t> kRewarded = {5, 6, 7, 8};

double sequence_logprob(const QwenModel& model, const std::vector<int32_t>& prompt) {
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), kRewarded.begin(), kRewarded.end());
  std::vector<int32_t> in(seq.begin(), seq.end() - 1), tg(seq.begin() + 1, seq.end());
  PackedBatch pb = pack_sequences({in});
  TrainOptions o;
  o.max_tokens = pb.num_tokens();
  TrainState st = make_train_state(model.config, o);
  std::vector<float> lp(tg.size());
  forward_logprobs(model, st, pb, tg, lp.data());
  double sum = 0;
  for (size_t p = prompt.size() - 1; p < lp.size(); ++p) sum += lp[p];  // the answer tokens only
  return sum;
}

struct Trained {
  double before = 0, after = 0, after_other_prompt = 0;
  rl::GrpoStepStats last;
};

// 2 prompts x G = 4: sample 0 answers kRewarded, samples 1..3 other fixed sequences; reward 1
// goes to sample `winner` of each group. 30 steps of 2 epochs x 2 mini-batches.
Trained train(int winner) {
  QwenConfig cfg = tiny_config();
  QwenModel model = random_model(cfg, 3);
  alloc_grads(model);
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {1, 2, 4}};
  std::vector<rl::Trajectory> batch;
  for (size_t e = 0; e < prompts.size(); ++e) {
    for (int s = 0; s < 4; ++s) {
      std::vector<int32_t> answer = kRewarded;
      if (s > 0)
        for (int k = 0; k < 4; ++k) answer[k] = 9 + (s * 5 + k * 3 + static_cast<int>(e)) % 15;
      batch.push_back(make_trajectory(static_cast<int64_t>(e), s, prompts[e], {answer}, s == winner ? 1.0 : 0.0));
    }
  }
  rl::GrpoConfig gc;
  gc.clip_low = 0.2f, gc.clip_high = 0.28f;
  gc.ppo_epochs = 2, gc.mini_batches = 2;
  gc.schedule = rl::LrSchedule{3e-3f, 3, 30, rl::LrDecay::Cosine, 0.1f};
  rl::OptimizerState opt = rl::make_optimizer_state(model.num_params);
  TrainOptions o;
  o.max_tokens = 16;
  TrainState state = make_train_state(cfg, o);
  Trained run;
  run.before = sequence_logprob(model, prompts[0]);
  for (int step = 0; step < 30; ++step) run.last = rl::grpo_step(model, nullptr, opt, state, batch, gc);
  run.after = sequence_logprob(model, prompts[0]);
  run.after_other_prompt = sequence_logprob(model, prompts[1]);
  std::printf("reward on sample %d: log p(5 6 7 8 | prompt 0) %.3f -> %.3f (prompt 1: %.3f); last step: loss %.4f "
              "grad norm %.4f clip %.3f kl %.5f\n", winner, run.before, run.after, run.after_other_prompt,
              run.last.loss, run.last.grad_norm, run.last.clip_fraction, run.last.approx_kl);
  return run;
}

// Measured over init seeds 1..8 (before the seed was fixed at 3): the answer's log-prob went
// from -12.4..-12.7 (uniform over 24 tokens: 4 ln 24 = 12.7) to -1.43..-1.82, a gain of
// 10.7..11.3 nats. Asserted: a gain above 8 and p(answer) above e^-3 (5%).
TEST(GrpoLearning, RewardedSequenceLogprobRises) {
  Trained run = train(0);
  EXPECT_EQ(run.last.filtered.kept, 8);
  EXPECT_EQ(run.last.updates, 4);
  EXPECT_GT(run.after - run.before, 8.0);
  EXPECT_GT(run.after, -3.0);
  EXPECT_GT(run.after_other_prompt, -3.0);
}

// Control: the same sequence, unrewarded (reward on another sample), must not rise.
TEST(GrpoLearning, UnrewardedSequenceLogprobFalls) {
  Trained run = train(1);
  EXPECT_LT(run.after, run.before);
}

}  // namespace
}  // namespace sqlrl::testing

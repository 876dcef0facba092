// Disaggregated rollout: the job's split, the messages between trainers and rollout ranks, and a
// rollout rank's loop (see rl/grpo/rollout_ranks.h for the protocol).
#include "rl/grpo/rollout_ranks.h"

#include <algorithm>
#include <chrono>
#include <vector>
#include <nlohmann/json.hpp>

#include "rl/grpo/async.h"
#include "rl/grpo/train.h"
#include "rl/grpo/train_log.h"
#include "rl/policy.h"
#include "rl/policy_backend.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/gemm.h"

namespace sqlrl::rl {
namespace {

constexpr int kTrainerRoot = 0;  // job rank of trainer 0, who speaks for the trainers

using Clock = std::chrono::steady_clock;

// The messages are our own processes' JSON: a missing or mistyped field is a bug or a mismatch of
// builds, named with the message it came in.
template <class F>
auto parse_message(const std::string& text, const char* what, F&& read) {
  try {
    return read(nlohmann::json::parse(text));
  } catch (const nlohmann::json::exception& e) {
    fail("rollout ranks: the ", what, " message: ", e.what(), " (every rank must run the same llm_sqlrl build)");
  }
}

std::string start_text(const RolloutStart& s) {
  const DataSchedule& d = s.schedule;
  nlohmann::ordered_json j;
  j["step"] = s.step;
  j["max_steps"] = s.max_steps;
  j["live"] = s.live;
  j["kv_blocks"] = s.kv_blocks;
  j["thread_independent"] = s.thread_independent;
  j["ahead"] = s.ahead;
  j["weight_bytes"] = s.weight_bytes;
  j["data_cursor"] = cursor_json(s.cursor);
  j["schedule"] = {{"levels", d.levels}, {"level_epochs", d.level_epochs}, {"promote_at", d.promote_at},
                   {"window", d.window}};
  return j.dump();
}

RolloutStart start_from_text(const std::string& text) {
  return parse_message(text, "start", [](const nlohmann::json& j) {
    RolloutStart s;
    s.step = j.at("step").get<int64_t>();
    s.max_steps = j.at("max_steps").get<int64_t>();
    s.live = j.at("live").get<int64_t>();
    s.kv_blocks = j.at("kv_blocks").get<int64_t>();
    s.thread_independent = j.at("thread_independent").get<bool>();
    s.ahead = j.at("ahead").get<int64_t>();
    s.weight_bytes = j.at("weight_bytes").get<int64_t>();
    s.cursor = cursor_from_json(j, 0);
    const nlohmann::json& d = j.at("schedule");
    s.schedule.levels = d.at("levels").get<std::vector<std::vector<int64_t>>>();
    s.schedule.level_epochs = d.at("level_epochs").get<int64_t>();
    s.schedule.promote_at = d.at("promote_at").get<double>();
    s.schedule.window = d.at("window").get<int64_t>();
    return s;
  });
}

// Trainer 0 -> the rollout root -> every rollout rank (a broadcast in their group).
void relay(const RankLayout& layout, void* data, int64_t bytes) {
  if (layout.group.rank == 0) comm_recv(*layout.job, data, bytes, kTrainerRoot);
  comm_broadcast(layout.group, data, bytes, 0);
}

// Trainer 0's weights to the rollout root, through the layout's host staging.
void send_weights(const RankLayout& layout, const Policy& policy) {
  layout.staging.resize(static_cast<size_t>(policy_rollout_weight_bytes(policy)));
  policy_read_rollout_weights(policy, layout.staging.data());
  comm_send(*layout.job, layout.staging.data(), static_cast<int64_t>(layout.staging.size()), layout.rollout_root());
}

// A rollout rank's side: relayed into the staging (sized by the start message), then into its policy.
void receive_weights(const RankLayout& layout, Policy& policy) {
  relay(layout, layout.staging.data(), static_cast<int64_t>(layout.staging.size()));
  policy_write_rollout_weights(policy, layout.staging.data());
}

std::string relay_bytes(const RankLayout& layout) {
  std::string m;
  if (layout.group.rank == 0) m = comm_recv_bytes(*layout.job, kTrainerRoot);
  comm_broadcast_bytes(layout.group, m, 0);
  return m;
}

// Prompts [lo, hi) of a step's batch of B.
struct Range {
  int64_t lo = 0, hi = 0;
};
Range unit_prompts(const RankLayout& l, int unit, int64_t B) {
  return {unit * B / l.units(), (unit + 1) * B / l.units()};
}
Range trainer_prompts(const RankLayout& l, int trainer, int64_t B) {
  return {trainer * B / l.trainers, (trainer + 1) * B / l.trainers};
}
bool overlap(const Range& a, const Range& b) { return std::max(a.lo, b.lo) < std::min(a.hi, b.hi); }

// Prompts [lo, hi) of a unit's batch (indices into its examples) with their trajectories, without
// trajectory sums (the trainer sums what it holds). The unit's rollout figures go with its first
// piece only, so the trainers' totals count them once.
StepBatch piece_of(const StepBatch& unit, int64_t lo, int64_t hi, bool first) {
  check(0 <= lo && lo <= hi && hi <= static_cast<int64_t>(unit.examples.size()), "rollout ranks: prompts [", lo, ", ",
        hi, ") of a unit of ", unit.examples.size());
  StepBatch p;
  p.examples.assign(unit.examples.begin() + lo, unit.examples.begin() + hi);
  p.example_ids.assign(unit.example_ids.begin() + lo, unit.example_ids.begin() + hi);
  for (size_t i = 0; i < unit.trajs.size(); ++i) {
    const int64_t e = unit.trajs[i].example_index;
    if (e < lo || e >= hi) continue;
    p.trajs.push_back(unit.trajs[i]);
    p.trajs.back().example_index = e - lo;
    p.ex.push_back(unit.ex[i]);
  }
  if (first) p.rollout = unit.rollout, p.score_seconds = unit.score_seconds;
  p.dynamic = unit.dynamic;
  p.first_draw = unit.first_draw, p.epoch = unit.epoch, p.level = unit.level, p.version = unit.version;
  return p;
}

// A trainer's batch from its pieces, in unit order: what it would hold had it sampled them.
StepBatch merge_pieces(std::vector<StepBatch> pieces, const TrainEnv& env) {
  StepBatch b = std::move(pieces[0]);
  for (size_t i = 1; i < pieces.size(); ++i) {
    StepBatch& p = pieces[i];
    const int64_t offset = static_cast<int64_t>(b.examples.size());
    b.examples.insert(b.examples.end(), p.examples.begin(), p.examples.end());
    b.example_ids.insert(b.example_ids.end(), p.example_ids.begin(), p.example_ids.end());
    for (Trajectory& t : p.trajs) {
      t.example_index += offset;
      b.trajs.push_back(std::move(t));
    }
    b.ex.insert(b.ex.end(), p.ex.begin(), p.ex.end());
    add_rollout_stats(b.rollout, p.rollout);
    b.score_seconds += p.score_seconds;
    b.sampler_idle_seconds = std::max(b.sampler_idle_seconds, p.sampler_idle_seconds);
    b.sampler_wall_seconds = std::max(b.sampler_wall_seconds, p.sampler_wall_seconds);
  }
  // One whole unit keeps its own sums (with dynamic sampling they count every try's trajectories,
  // not only the kept ones); pieces (piece_of sends none) sum the trajectories they hold.
  if (pieces.size() > 1 || b.sums.empty()) b.sums = trajectory_sums(b.trajs, &b.ex, env.panel);
  return b;
}

}  // namespace

RankLayout split_rollout_ranks(const Comm& job, int64_t rollout_ranks) {
  const int64_t trainers = job.world_size - rollout_ranks;
  check(rollout_ranks >= 1 && trainers >= 1, "train: --rollout-ranks ", rollout_ranks, " in a job of ", job.world_size,
        " ranks leaves ", trainers, " to train (run more ranks: mpirun -np N with N > rollout-ranks)");
  RankLayout l;
  l.job = &job;
  l.trainers = static_cast<int>(trainers);
  l.rollout = static_cast<int>(rollout_ranks);
  l.group = comm_split(job, job.rank >= l.trainers ? 1 : 0);
  // NCCL spans the ranks it was made over: the trainers' collectives need a communicator of
  // their own (the rollout ranks' exchanges are host messages).
  if (job.nccl && !l.rolls_out()) comm_init_nccl(l.group, job.device);
  return l;
}

void send_rollout_start(const RankLayout& layout, const Policy& policy, RolloutStart start) {
  if (layout.job->rank != kTrainerRoot) return;
  start.weight_bytes = policy_rollout_weight_bytes(policy);
  comm_send_bytes(*layout.job, start_text(start), layout.rollout_root());
  send_weights(layout, policy);
}

StepBatch receive_step_batch(const RankLayout& layout, const TrainEnv& env, DataCursor& cursor) {
  const int64_t B = env.config.batch_size;
  const Range mine = trainer_prompts(layout, layout.group.rank, B);
  const auto t0 = Clock::now();
  std::vector<StepBatch> pieces;
  for (int u = 0; u < layout.units(); ++u) {
    if (!overlap(unit_prompts(layout, u, B), mine)) continue;
    const int from = layout.sampler_of_unit(u);
    const std::string text = comm_recv_bytes(*layout.job, from);
    const std::string where = str_cat("rollout rank ", from, "'s batch");
    pieces.push_back(parse_message(text, "batch", [&](const nlohmann::json& j) {
      cursor = cursor_from_json(j, 0);
      StepBatch out = step_batch_from_json(j.at("batch"), env.examples, where);
      out.sampler_idle_seconds = j.at("idle_s").get<double>();
      out.sampler_wall_seconds = j.at("wall_s").get<double>();
      return out;
    }));
  }
  check(!pieces.empty(), "rollout ranks: trainer ", layout.group.rank, " holds no prompt of a batch of ", B);
  StepBatch b = merge_pieces(std::move(pieces), env);
  b.wait_seconds = seconds_since(t0);
  return b;
}

// The EX message: step s's training EX, or (--partial-rollout) the order to stop.
void send_ex_message(const RankLayout& layout, double ex, bool stop) {
  const double m[2] = {ex, stop ? 1.0 : 0.0};
  if (layout.job->rank == kTrainerRoot) comm_send(*layout.job, m, sizeof m, layout.rollout_root());
}

void send_step_ex(const RankLayout& layout, double ex) { send_ex_message(layout, ex, false); }
void send_rollout_stop(const RankLayout& layout) { send_ex_message(layout, 0, true); }

double send_rollout_weights(const RankLayout& layout, const Policy& policy, bool stop) {
  if (layout.job->rank != kTrainerRoot) return 0;
  const auto t0 = Clock::now();
  const int64_t flag = stop ? 1 : 0;
  comm_send(*layout.job, &flag, sizeof flag, layout.rollout_root());
  if (!stop) send_weights(layout, policy);
  return seconds_since(t0);
}

void check_rollout_layout(const RankLayout& layout, const TrainConfig& c) {
  check(c.batch_size >= layout.units(), "train: batch-size ", c.batch_size, " with ", layout.trainers, " trainers and ",
        layout.rollout, " rollout ranks leaves a rank without a prompt (at least ", layout.units(), ")");
  check(!c.dynamic_sampling || layout.rollout <= layout.trainers, "train: --dynamic-sampling with --rollout-ranks ",
        layout.rollout, " and ", layout.trainers, " trainers: a trainer's groups must come from one rollout rank, so at "
        "most as many rollout ranks as trainers");
  check(c.partial_rollout == 0 || layout.trainers <= layout.rollout, "train: --partial-rollout with --rollout-ranks ",
        layout.rollout, " and ", layout.trainers, " trainers: a rollout rank sampling two units would start the second "
        "on the switched weights, so at least as many rollout ranks as trainers");
}

namespace {

void rollout_rank_loop(TrainEnv& env, const RankLayout& layout) {
  const TrainConfig& c = env.config;
  check_rollout_layout(layout, c);
  const int64_t lag = async_lag(c.async, c.max_staleness);
  const bool partial = c.partial_rollout > 0;
  const RolloutStart start = start_from_text(relay_bytes(layout));
  // The trainers' GEMM mode: their synchronous run's rollouts computed these bits.
  set_gemm_thread_independent(start.thread_independent);
  const PolicyBackend& backend = find_backend(c.device);
  // Made from the weights as loaded, then given the trainers' (a resume's, or an update's).
  Policy policy = frozen_policy(backend, env.model, std::max(layout.job->device, 0));
  if (env.adapter) policy_attach_lora(policy, env.adapter.get(), /*grads=*/false);
  check(policy_rollout_weight_bytes(policy) == start.weight_bytes, "rollout rank ", layout.job->rank, ": its weights "
        "take ", policy_rollout_weight_bytes(policy), " bytes, the trainers send ", start.weight_bytes,
        " (every rank must load the same model, adapter and device)");
  layout.staging.resize(static_cast<size_t>(start.weight_bytes));
  receive_weights(layout, policy);
  const RolloutOptions base = train_rollout_options(c, env.chat_template, start.live);
  PolicyKV kv = make_policy_kv(policy, start.kv_blocks, base.kv_block_size);
  SchemaCache schemas;
  DataCursor cursor = start.cursor;
  std::vector<int> units;  // the units of each batch this rank samples
  for (int u = 0; u < layout.units(); ++u)
    if (layout.sampler_of_unit(u) == layout.job->rank) units.push_back(u);

  // Per batch sent, the window since the previous one: its wall seconds and those spent waiting
  // for the trainers (their messages, and the previous batch's send until they took it).
  double idle = 0;
  auto since = Clock::now();
  auto wait = [&](auto&& receive) {
    const auto t0 = Clock::now();
    receive();
    idle += seconds_since(t0);
  };
  // The weights of the update in progress (the trainers' stop-or-go, then the bytes); false: stop.
  bool weights_taken = false;
  auto take_weights = [&] {
    int64_t stop = 0;
    wait([&] {
      relay(layout, &stop, sizeof stop);
      if (stop == 0) receive_weights(layout, policy);
    });
    weights_taken = true;
    return stop == 0;
  };
  // The next batch, by the weights of update `version`: each unit drawn from the same cursor, as
  // rank u of a synchronous run draws the whole batch and rolls out its part (rl/grpo/train_data.h),
  // then each trainer sent its piece, units and trainers in order. switch_to_next: the batch takes
  // the next weights at decode step c.partial_rollout (its trajectories' switch_at).
  auto sample = [&](int64_t version, bool switch_to_next) {
    const int64_t B = c.batch_size;
    DataCursor after = cursor;
    RolloutOptions options = base;
    if (switch_to_next) {
      options.switch_step = c.partial_rollout;
      options.switch_weights = take_weights;
      options.partial_kv_keep = find_partial_kv(c.partial_kv).keep;
    }
    // Dynamic sampling's counts of informative groups, each unit's slot filled by its rollout rank.
    std::vector<StepBatch> batches =
        sample_step_units(env, policy, kv, options, start.schedule, after, schemas, units, layout.units(),
                          [&](std::vector<double>& per_unit) {
                            comm_all_reduce_sum(layout.group, per_unit.data(), static_cast<int64_t>(per_unit.size()));
                          });
    for (StepBatch& b : batches) b.version = version;
    const auto sent = Clock::now();
    std::vector<std::pair<int, std::string>> messages;  // trainer, text
    for (size_t i = 0; i < units.size(); ++i) {
      const Range prompts = unit_prompts(layout, units[i], B);
      bool first = true;
      for (int k = 0; k < layout.trainers; ++k) {
        const Range theirs = trainer_prompts(layout, k, B);
        if (!overlap(prompts, theirs)) continue;
        nlohmann::ordered_json m;
        m["data_cursor"] = cursor_json(after);
        m["idle_s"] = idle;
        m["wall_s"] = std::chrono::duration<double>(sent - since).count();
        // A unit that is the trainer's whole share goes whole (with dynamic sampling it holds only
        // its kept groups, which no longer line up with prompt ranges: check_rollout_layout).
        const bool whole = prompts.lo == theirs.lo && prompts.hi == theirs.hi;
        m["batch"] = step_batch_json(whole ? batches[i]
                                           : piece_of(batches[i], std::max(prompts.lo, theirs.lo) - prompts.lo,
                                                      std::min(prompts.hi, theirs.hi) - prompts.lo, first));
        messages.emplace_back(k, m.dump());
        first = false;
      }
    }
    cursor = after;
    // A switched batch that ended before its switch step takes the weights now: trainer 0 sends
    // them before it takes this batch (rl/grpo/rollout_ranks.h).
    if (switch_to_next && !weights_taken && !take_weights()) throw RolloutStopped{};
    idle = 0, since = sent;
    const auto t0 = Clock::now();
    for (const auto& [k, text] : messages) comm_send_bytes(*layout.job, text, k);
    idle += seconds_since(t0);
  };

  int64_t step = start.step;
  int64_t next = step + start.ahead;  // the next batch to sample
  if (next == step && step < start.max_steps) sample(step, false), ++next;
  for (; step < start.max_steps; ++step) {
    double ex[2] = {0, 0};  // step s's training EX; stop (--partial-rollout, interrupted)
    wait([&] { relay(layout, ex, sizeof ex); });
    if (ex[1] != 0) return;
    observe_step(start.schedule, cursor, ex[0]);
    // Ahead (one-step, full): the batches up to step s+lag, by the weights step s starts from; with
    // --partial-rollout the newest of them takes the next weights mid-way (when a step follows).
    weights_taken = false;
    for (; next <= step + lag && next < start.max_steps; ++next)
      sample(step, partial && next == step + lag && step + 1 < start.max_steps);
    if (step + 1 >= start.max_steps) break;
    if (!weights_taken && !take_weights()) break;
    if (lag == 0) sample(step + 1, false), ++next;
  }
}

}  // namespace

void run_rollout_rank(TrainEnv& env, const RankLayout& layout) {
  try {
    rollout_rank_loop(env, layout);
  } catch (const RolloutStopped&) {
    // --partial-rollout: the trainers ended while a batch waited for their weights.
  }
}

}  // namespace sqlrl::rl

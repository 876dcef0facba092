// run_training: the step loop (see rl/grpo/train.h for what a step does and how resume stays exact).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <optional>

#include "rl/checkpoint_writer.h"
#include "runtime/clock.h"
#include "rl/eval/eval.h"
#include "rl/grpo/async.h"
#include "rl/grpo/grpo.h"
#include "rl/grpo/rollout_ranks.h"
#include "rl/grpo/train.h"
#include "rl/grpo/train_data.h"
#include "rl/grpo/train_log.h"
#include "rl/tb_log.h"
#include "rl/policy_backend.h"
#include "rl/train_memory.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/gemm.h"
#include "runtime/interrupt.h"
#include "runtime/thread_pool.h"

namespace fs = std::filesystem;

namespace sqlrl::rl {
namespace {

// A stretch of wall time; overlap_seconds: how much of two ran at once.
struct Interval {
  std::chrono::steady_clock::time_point begin, end;
};
double overlap_seconds(const Interval& a, const Interval& b) {
  const auto from = std::max(a.begin, b.begin), to = std::min(a.end, b.end);
  return to > from ? std::chrono::duration<double>(to - from).count() : 0.0;
}

GrpoConfig grpo_config(const TrainConfig& c) {
  GrpoConfig g;
  g.advantage_estimator = &find_advantage_estimator(c.advantage);
  g.advantage.eps = static_cast<float>(c.adv_eps);
  g.advantage.divide_std = c.adv_std;
  g.filter = {c.filter_truncated, c.filter_malformed, c.filter_no_valid_action, c.filter_zero_variance,
              c.zero_variance_in_denominator, c.exclude_infra_failures, c.spare_copied_answers};
  g.clip_low = static_cast<float>(c.clip_low);
  g.clip_high = static_cast<float>(c.clip_high);
  g.kl_coef = static_cast<float>(c.kl_coef);
  g.kl_estimator = &find_kl_estimator(c.kl_estimator);
  g.kl_reward_coef = static_cast<float>(c.kl_reward_coef);
  g.kl_reward_estimator = &find_kl_estimator(c.kl_reward_estimator, "kl-reward-estimator");
  g.dual_clip = static_cast<float>(c.dual_clip);
  g.entropy_coef = static_cast<float>(c.entropy_coef);
  g.policy_loss = &find_policy_loss(c.policy_loss);
  g.agg = parse_loss_agg(c.loss_agg);
  g.loss_norm_tokens = c.loss_norm_tokens > 0 ? c.loss_norm_tokens : c.max_total_tokens;
  g.use_sampler_logprobs = c.sampler_logprobs;
  g.rollout_is = rollout_is_config(c);
  g.temperature = static_cast<float>(c.temperature);
  g.share_prefixes = c.share_prefixes;
  g.ppo_epochs = c.ppo_epochs;
  g.mini_batches = c.mini_batches;
  g.adamw = {static_cast<float>(c.beta1), static_cast<float>(c.beta2), static_cast<float>(c.adam_eps),
             static_cast<float>(c.weight_decay)};
  g.schedule.lr = static_cast<float>(c.lr);
  g.schedule.warmup_steps = c.warmup_steps;
  g.schedule.total_steps = c.total_steps > 0 ? c.total_steps : c.max_steps;
  g.schedule.decay = c.lr_schedule == "cosine" ? LrDecay::Cosine : LrDecay::Constant;
  g.schedule.min_lr_ratio = static_cast<float>(c.min_lr_ratio);
  g.max_grad_norm = static_cast<float>(c.max_grad_norm);
  return g;
}

}  // namespace

RolloutOptions train_rollout_options(const TrainConfig& c, ChatTemplate chat_template, int64_t live) {
  RolloutOptions o;
  o.group_size = c.group_size;
  apply_to_rollout(o, c, c.seed, c, c);
  o.max_batch_sequences = live;
  o.batch_invariant = c.batch_invariant;
  o.chat_template = chat_template;
  o.enable_thinking = c.enable_thinking;
  o.reproducible = true;  // resume and repeat runs must draw the same tokens
  if (c.single_turn) {
    // As eval --single-turn (rl/eval/eval_run.cpp): the difficulty pre-pass and eval-every follow.
    o.single_turn = true;
    o.max_turns = 1;
  }
  return o;
}

namespace {


// trainer_state.json (rl/run_folder.h) with what resume checks and, for reading, what the next
// step draws (the loop derives both from step and seed).
nlohmann::ordered_json grpo_trainer_state(const OptimizerState& optimizer, const TrainConfig& c, int64_t dataset_size,
                                          const DataCursor& cursor, int64_t shards) {
  nlohmann::ordered_json j = trainer_state_head("grpo", optimizer);
  j["seed"] = c.seed;
  j["shards"] = shards;  // ranks x grad-accum: how the step's gradient was summed
  j["batch_size"] = c.batch_size;
  j["group_size"] = c.group_size;
  j["dataset_size"] = dataset_size;
  j["next_data_position"] = cursor.draws;
  j["next_sample_id"] = cursor.draws * c.group_size;
  j["data_cursor"] = cursor_json(cursor);
  return j;
}

// The versions of the step's sampled tokens (every rank's), for a batch whose oldest token is
// `staleness` updates old: the newest token's staleness and the mean over tokens (tokens sampled
// after a partial rollout's switch are one update fresher; without one, all three are equal).
void staleness_spread(const std::vector<Trajectory>& trajs, const DataParallel& dp, const Comm& comm, StepRecord& rec) {
  std::vector<double> n{0, 0};  // sampled tokens; of them, sampled after the switch
  for (const Trajectory& t : trajs)
    for (size_t i = 0; i < t.tokens.size(); ++i)
      if (t.policy_mask[i]) ++n[0], n[1] += t.switch_at >= 0 && static_cast<int64_t>(i) >= t.switch_at;
  if (dp.distributed()) comm_sum_in_rank_order(comm, n);
  rec.staleness_min = rec.staleness - (n[1] > 0 ? 1 : 0);
  rec.staleness_mean = static_cast<double>(rec.staleness) - (n[0] > 0 ? n[1] / n[0] : 0.0);
}

// Data parallel: the step's figures over every rank (counts summed in rank order, wall-clock
// figures the slowest rank's), so rank 0 logs the job, not itself. The caches' sizes and peaks
// add up (each rank has its own), as do the samples decoded per step and their steps. The
// trajectory sums are not here: the loop reduces them before the step trains (they move the
// curriculum before the next batch is drawn).
void reduce_step_record(const Comm& comm, StepRecord& rec) {
  RolloutStats& s = rec.rollout;
  std::vector<int64_t*> summed{&s.sampled_tokens, &s.injected_tokens, &s.prompt_tokens,   &s.sql_calls,
                               &s.sql_errors,     &s.kv_blocks,       &s.sql_infra_errors, &s.prefill_tokens,
                               &s.kv_blocks_peak, &s.preemptions,     &s.preempted_tokens, &s.live_sum,
                               &s.live_steps,     &s.weight_switches, &s.switch_recomputed_tokens};
  std::vector<double> counts;
  for (const int64_t* c : summed) counts.push_back(static_cast<double>(*c));
  comm_sum_in_rank_order(comm, counts);
  for (size_t i = 0; i < summed.size(); ++i) *summed[i] = static_cast<int64_t>(counts[i]);
  const std::vector<double*> seconds{&s.decode_seconds, &s.prefill_seconds, &s.sql_seconds, &s.wall_seconds,
                                     &rec.score_seconds, &rec.grpo.seconds};
  const std::vector<int64_t*> most{&s.decode_steps, &s.live_max};
  std::vector<double> slowest;
  for (const double* x : seconds) slowest.push_back(*x);
  for (const int64_t* x : most) slowest.push_back(static_cast<double>(*x));
  comm_all_reduce_max(comm, slowest.data(), static_cast<int64_t>(slowest.size()));
  for (size_t i = 0; i < seconds.size(); ++i) *seconds[i] = slowest[i];
  for (size_t i = 0; i < most.size(); ++i) *most[i] = static_cast<int64_t>(slowest[seconds.size() + i]);
}

// trainer_state.json's "ahead": every rank's batches sampled ahead ([rank][batch]), so that a
// resumed run trains on the samples the uninterrupted one would (a collective: every rank calls it).
nlohmann::ordered_json ahead_json(const std::deque<StepBatch>& ahead, const Comm& comm) {
  nlohmann::ordered_json mine = nlohmann::ordered_json::array();
  for (const StepBatch& b : ahead) mine.push_back(step_batch_json(b));
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (const std::string& rank : comm_all_gather_bytes(comm, mine.dump())) all.push_back(nlohmann::ordered_json::parse(rank));
  return all;
}

// --async resume: this rank's batches sampled ahead, from the checkpoint that holds every rank's;
// without them (another number of ranks) the cursor goes back to where they were drawn, to draw
// them again with the checkpoint's weights.
void resume_ahead(const nlohmann::json& saved, const std::string& ckpt, const TrainEnv& env, const Comm& comm,
                  int64_t step, bool quiet, std::deque<StepBatch>& ahead, DataCursor& cursor) {
  const auto it = saved.find("ahead");
  if (it != saved.end() && it->is_array() && it->size() == static_cast<size_t>(comm.world_size)) {
    const std::string where = str_cat(ckpt, "/trainer_state.json: ahead[", comm.rank, "]");
    const nlohmann::json& mine = (*it)[static_cast<size_t>(comm.rank)];
    check(mine.is_array(), where, " is not an array");
    for (size_t i = 0; i < mine.size(); ++i)
      ahead.push_back(step_batch_from_json(mine[i], env.examples, str_cat(where, "[", i, "]")));
  } else if (const auto before = saved.find("ahead_cursor"); before != saved.end()) {
    cursor = cursor_from_json(nlohmann::json{{"data_cursor", *before}}, step * env.config.batch_size);
  } else if (it != saved.end() && step < env.config.max_steps) {
    // Several batches ahead: the curriculum moved between their draws, so only the cursor past
    // them is known, and drawing on from it would skip them.
    fail("resume: ", ckpt, " holds batches sampled ahead by ", it->is_array() ? it->size() : 0, " ranks; this run "
         "has ", comm.world_size, " (resume an --async full run on the number of ranks that saved it)");
  }
  if (ahead.empty() && step < env.config.max_steps && !quiet)
    std::printf("resume: %s holds no batch sampled ahead for this run (it ended there, ran on another number of "
                "ranks, or without --async): step %lld's is sampled now, by the checkpoint's weights\n",
                ckpt.c_str(), static_cast<long long>(step + 1));
}

// The samples one rollout of this rank holds: its share of a step's prompts (at most ceil(B / N)
// with N ranks) times G.
int64_t rank_samples(const TrainEnv& env) {
  const TrainConfig& c = env.config;
  const int world = env.comm ? env.comm->world_size : 1;
  return (c.batch_size + world - 1) / world * c.group_size;
}

}  // namespace

MemoryPlanOptions grpo_memory_plan_options(const TrainEnv& env) {
  const TrainConfig& c = env.config;
  MemoryPlanOptions mo = memory_plan_options(c, find_backend(c.device), env.comm);
  const int64_t cap = std::min(c.max_total_tokens, env.model.config.max_position_embeddings);
  mo.tokens_per_micro_batch = std::max(c.micro_batch_tokens, cap);  // one whole trajectory fits a micro-batch
  mo.rollout_sequence_tokens = cap;
  // A cache for as many samples at the full length as may be live (whole groups, at least one
  // group): a step's samples when max-batch-sequences is auto, so that nothing is ever preempted
  // where memory allows.
  const int world = env.comm ? env.comm->world_size : 1;
  const int64_t samples = rank_samples(env);
  const int64_t live = c.max_batch_sequences > 0 ? std::min(c.max_batch_sequences, samples) : samples;
  mo.rollout_sequences = std::max<int64_t>(1, (live + c.group_size - 1) / c.group_size) * c.group_size;
  mo.min_rollout_sequences = c.group_size;
  mo.kv_block_size = RolloutOptions{}.kv_block_size;
  mo.kv_blocks = c.kv_cache_blocks;
  mo.rollout_mean_tokens = c.rollout_mean_tokens > 0 ? c.rollout_mean_tokens : (cap + 1) / 2;
  mo.reference_model = env.reference != nullptr || (env.adapter && (c.kl_coef > 0 || c.kl_reward_coef > 0));
  if (env.adapter) mo.lora = env.adapter->config;
  mo.world_size = world;
  mo.zero_stage = world > 1 ? static_cast<int>(c.zero_stage) : 0;
  return mo;
}

int64_t live_samples(const TrainEnv& env, const MemoryPlan& plan, const MemoryPlanOptions& mo) {
  const TrainConfig& c = env.config;
  const int64_t G = c.group_size, samples = rank_samples(env);
  if (c.max_batch_sequences > 0) return c.max_batch_sequences;
  const int64_t fit = kv_sequences_at(plan, mo.rollout_mean_tokens) / G * G;
  return std::min(samples, std::max(G, fit));
}

TrainSummary run_training(TrainEnv& env, bool quiet) {
  const TrainConfig& c = env.config;
  // Data parallel: rank 0 owns the run folder and the logs; every rank rolls out and trains its
  // shard of each step's prompts (rl/grpo/grpo.h DataParallel).
  const Comm single;
  const Comm& comm = env.comm ? *env.comm : single;
  const bool owner = comm.is_root();
  quiet = quiet || !owner;
  // --rollout-ranks: this rank trains; the job's rollout ranks sample every step's batch.
  const RankLayout* layout = env.layout;
  check(!layout || !layout->rolls_out(), "train: run_training on a rollout rank (run_rollout_rank runs those)");
  if (layout) check_rollout_layout(*layout, c);
  const DataParallel dp{&comm, c.grad_accum, c.deterministic_reduce, static_cast<int>(c.zero_stage)};
  const PolicyBackend& backend = find_backend(c.device);  // rl/policy_backend.h
  check(backend.zero_shards_adapter || !dp.distributed() || c.zero_stage == 0 || !env.adapter, "train: --zero-stage ",
        c.zero_stage, " with a LoRA adapter on ", backend.name, ": the adapter trains whole there (ZeRO 0: its state "
        "is small); --zero-stage shards a full fine-tuning run");
  check(!backend.device_collectives || !dp.distributed() || comm_has_device_transport(comm), "train: several ranks on ",
        backend.name, " need the job's NCCL communicator or host staging (app/launch.h join_job_gpu)");
  // Each rank drives the GPU join_job_gpu chose (local_rank, or shared round-robin) and made current.
  const int gpu = comm_gpu(comm);
  // N ranks (each bound to its own cores by mpirun) and one process with --grad-accum N must
  // compute the same bits: GEMMs whose bits do not depend on the thread count (runtime/gemm.h).
  // Rollout ranks take the same mode, so a rollout's bits do not depend on which process runs it.
  if ((dp.shards() > 1 || layout) && c.deterministic_reduce) set_gemm_thread_independent(true);
  check(env.protocol && env.tokenizer && env.score, "train: the environment lacks a protocol, tokenizer or scorer");
  check(!env.examples.empty(), "train: no training examples");
  check(c.eval_every == 0 || (env.eval_context && !env.eval_examples.empty()), "train: eval-every ", c.eval_every,
        " but the environment has no held-out questions or EX context (make_train_env loads them)");
  const std::string dir = c.resume.empty() ? c.out : c.resume;
  const fs::path run = dir;
  const std::string tb_dir = tb_log_dir(dir, env.tb_dir);
  const int64_t n_examples = static_cast<int64_t>(env.examples.size());

  // The memory plan (rl/train_memory.h): modes and sizes, refused before the run folder changes.
  GrpoConfig gc = grpo_config(c);
  const int64_t lag = async_lag(c.async, c.max_staleness);  // rl/grpo/async.h
  const bool partial = layout && c.partial_rollout > 0;
  const MemoryPlanOptions mo = grpo_memory_plan_options(env);
  TrainOptions to;
  to.max_tokens = mo.tokens_per_micro_batch;
  to.logprob_chunk = mo.logprob_chunk_tokens;
  const MemoryPlan plan = plan_memory(env.model.config, mo);
  check(plan.fits, "train: the memory plan does not fit: ", plan.problem, " (`llm_sqlrl plan` shows it; memory-gb, ",
        "micro-batch-tokens, max-total-tokens, max-batch-sequences and kv-cache-blocks size it)");
  to.recompute = plan.modes.recompute;
  const RolloutOptions base = train_rollout_options(c, env.chat_template, live_samples(env, plan, mo));

  RunLock own_lock;
  if (owner && env.lock.fd < 0) own_lock = lock_run_folder(dir);
  check(!env.adapter || !env.reference, "train: a LoRA run's KL reference is its frozen base; TrainEnv::reference "
        "must be empty");
  // What AdamW updates: the adapter's parameters in a LoRA run, else the model's.
  const int64_t trainable = env.adapter ? env.adapter->num_params : env.model.num_params;
  // ZeRO 1-3: this rank's moments cover its slice of the parameters only, and each rank writes
  // its slice into checkpoints (every rank then has a writer).
  const auto [slice_lo, slice_hi] = optimizer_slice(dp, trainable);
  const int64_t moments = slice_hi - slice_lo;
  CheckpointWriterOptions writer_options = checkpoint_writer_options(c);
  if (moments != trainable) writer_options.shard = {comm.rank, comm.world_size, slice_lo, trainable};
  // After the lock, so that it is destroyed (its write in flight finished) before the lock goes.
  std::optional<CheckpointWriter> writer;
  if (owner || writer_options.shard.sharded()) writer.emplace(dir, env.tokenizer_path, writer_options);
  OptimizerState optimizer;
  int64_t step = 0;
  DataCursor cursor;
  // --async: batches sampled ahead of their step by the weights of the step that sampled them
  // (rl/grpo/async.h), their data drawn in the synchronous run's order; checkpoints keep them.
  std::deque<StepBatch> ahead;
  const std::string ckpt = c.resume.empty() ? "" : latest_checkpoint(dir);
  if (!c.resume.empty() && ckpt.empty()) {
    // Stopped before its first checkpoint: nothing to continue from, so the run starts again at
    // step 0 in its own folder (its config.toml made this environment; lines logged by the lost
    // steps are dropped).
    if (!quiet)
      std::printf("resume: %s has no complete checkpoint (the run stopped before its first): starting it again "
                  "from step 0\n", dir.c_str());
    if (owner) {
      truncate_jsonl((run / "metrics.jsonl").string(), 0);
      truncate_jsonl((run / "trajectories.jsonl").string(), 0);
      truncate_tb_log(tb_dir, 0);
      fs::create_directories(run / "checkpoints");
    }
    optimizer = fresh_optimizer_state(backend, moments, plan.modes.bf16_moments);
  } else if (!c.resume.empty()) {
    const nlohmann::json saved = read_trainer_state(ckpt, "grpo");
    if (const std::string note = blas_threads_note(saved, ckpt); owner && !note.empty()) std::printf("%s\n", note.c_str());
    if (const std::string note = backend.host_blas ? check_blas_core(saved, ckpt) : ""; owner && !note.empty())
      std::printf("%s\n", note.c_str());
    // Another number of shards sums the gradient in another grouping: a valid run, not the bits of
    // the one that saved (ranks x grad-accum decide it; rl/data_parallel.h).
    if (const int64_t was = saved.value("shards", int64_t(0)); owner && was > 0 && was != dp.shards()) {
      const std::string keep = was % comm.world_size == 0
                                   ? str_cat("--grad-accum ", was / comm.world_size, " on ", comm.world_size, " ranks")
                                   : str_cat("a number of ranks dividing ", was, ", times --grad-accum");
      std::printf("resume: %s summed each step's gradient over %lld shards, this run over %lld (ranks x grad-accum): "
                  "the steps from here differ in their last bits from a run that kept %lld (%s keeps them)\n",
                  ckpt.c_str(), static_cast<long long>(was), static_cast<long long>(dp.shards()),
                  static_cast<long long>(was), keep.c_str());
    }
    auto same = [&](const char* what, const char* key, int64_t b) {
      int64_t a = 0;
      try {
        a = saved.at(key).get<int64_t>();
      } catch (const nlohmann::json::exception& e) {
        fail(ckpt, "/trainer_state.json: field '", key, "': ", e.what());
      }
      check(a == b, "resume: ", ckpt, " was trained with ", what, " ", a, ", this run has ", b);
    };
    same("batch-size", "batch_size", c.batch_size);
    same("group-size", "group_size", c.group_size);
    same("dataset size", "dataset_size", n_examples);
    same("seed", "seed", static_cast<int64_t>(c.seed));
    load_checkpoint_weights(ckpt, env.model, env.adapter.get());
    // This rank's slice, from one file of every moment or from the shards of any world size.
    optimizer = load_optimizer_range(ckpt, trainable, slice_lo, slice_hi, plan.modes.bf16_moments);
    step = saved["step"].get<int64_t>();
    cursor = cursor_from_json(saved, step * c.batch_size);
    if (lag > 0) resume_ahead(saved, ckpt, env, comm, step, quiet, ahead, cursor);
    if (owner) {
      truncate_jsonl((run / "metrics.jsonl").string(), step);
      truncate_jsonl((run / "trajectories.jsonl").string(), step);
      truncate_tb_log(tb_dir, step);
    }
  } else {
    if (owner) {
      check_no_run_in(dir, str_cat("use --resume ", dir));
      truncate_tb_log(tb_dir, 0);  // a stale RUN/tb without a run beside it
      fs::create_directories(run / "checkpoints");
    }
    // On CUDA the moments start on the device (start_train_memory), or on the host when offloaded.
    optimizer = fresh_optimizer_state(backend, moments, plan.modes.bf16_moments);
  }
  // The best evaluation so far, from the metrics lines kept (resume) or none; every rank takes
  // rank 0's, since a new best saves a checkpoint, which every rank takes part in.
  // The checkpoint copy's memory, allocated while the first steps run (ZeRO 1-3: the rank's slice
  // of the moments, and only rank 0 copies the weights).
  if (writer) writer->prepare(env.adapter || !owner ? 0 : env.model.num_params, moments, plan.modes.bf16_moments);
  BestEval best;
  if (owner && !c.resume.empty()) {
    best = best_eval_in((run / "metrics.jsonl").string());
    if (best.step > 0) write_best_json(dir, best);
    else fs::remove(run / "best.json");
  }
  if (dp.distributed()) {
    const std::string rank0 = comm_all_gather_bytes(comm, owner ? nlohmann::json{best.step, best.ex}.dump() : "")[0];
    const nlohmann::json j = nlohmann::json::parse(rank0);
    best = {j[0].get<int64_t>(), j[1].get<double>()};
  }
  // Every rank past its checks before rank 0 writes config.toml: a rank that fails above ends
  // the job (comm_abort) before the folder changes.
  comm_barrier(comm);
  if (writer_options.shard.sharded()) check_run_folder_shared(comm, dir);
  TrainConfig resolved = c;
  resolved.resume.clear();
  resolved.out = dir;
  const bool sourced = env.config_sources.size() == config_fields(resolved).size();
  const std::string config_toml = sourced ? config_to_toml(resolved, env.config_sources) : config_to_toml(resolved);
  if (owner) {
    write_text_atomic((run / "config.toml").string(), config_toml);
    write_text_atomic((run / "memory_plan.txt").string(), format_memory_plan(env.model.config, plan, mo));
  }
  if (!quiet)
    std::printf("memory: %s; rollout: %lld KV blocks, %lld samples live at most%s\n", plan.modes.describe().c_str(),
                static_cast<long long>(plan.kv_blocks), static_cast<long long>(base.max_batch_sequences),
                c.max_batch_sequences > 0 ? "" : " (max-batch-sequences auto)");
  // Upload once (after a resume loaded its weights); the host model is then only the shape and
  // the staging buffer of each checkpoint's download.
  // LoRA: the base frozen (on CUDA bf16 weights only, as the plan prices it), the adapter trained.
  // ZeRO 3 on CUDA: the fp32 master of this rank's slice only (every bf16 weight, for rollouts).
  Policy policy = training_policy(backend, env.model, {env.adapter.get(), slice_lo, slice_hi,
                                                       c.zero_stage == 3 && dp.distributed(), gpu});
  // LoRA: the reference is the frozen base itself, run without the adapter (on CUDA the same
  // device weights: policy_base uploads nothing).
  const bool has_reference = mo.reference_model;
  Policy reference;
  if (env.reference) reference = frozen_policy(backend, *env.reference, gpu);
  else if (has_reference) reference = policy_base(policy);
  TrainMemory memory = start_train_memory(policy, plan, to, base.kv_block_size, gc.adamw, optimizer);
  SchemaCache schemas;

  std::unique_ptr<JsonlWriter> metrics, traj_log;
  std::unique_ptr<TbLog> tb;
  if (owner) {
    metrics = std::make_unique<JsonlWriter>((run / "metrics.jsonl").string());
    traj_log = std::make_unique<JsonlWriter>((run / "trajectories.jsonl").string());
    if (c.tensorboard) tb = std::make_unique<TbLog>(open_tb_log(tb_dir, step, config_toml));
  }
  const bool tty = !quiet && isatty(fileno(stderr));

  // The data schedule (a difficulty pre-pass runs here, with the weights about to be trained).
  nlohmann::ordered_json schedule_summary;
  const DataSchedule schedule = make_data_schedule(env, policy, memory_for_rollout(policy, memory, optimizer), base, comm,
                                                   owner, quiet, &schedule_summary);
  if (owner && !schedule_summary.empty())
    write_text_atomic((run / "data_schedule.json").string(), schedule_summary.dump(2) + "\n");
  if (c.epochs > 0) {
    // Only now is the number of examples known (a curation or curriculum pre-pass decides it).
    int64_t examples = 0;
    for (const std::vector<int64_t>& level : schedule.levels) examples += static_cast<int64_t>(level.size());
    const int64_t steps = (c.epochs * examples + c.batch_size - 1) / c.batch_size;
    env.config.max_steps = c.max_steps > 0 ? std::min(c.max_steps, steps) : steps;
    if (c.total_steps == 0) gc.schedule.total_steps = env.config.max_steps;
    if (!quiet)
      std::printf("train: %lld epochs of %lld examples at batch %lld = %lld steps%s\n", static_cast<long long>(c.epochs),
                  static_cast<long long>(examples), static_cast<long long>(c.batch_size),
                  static_cast<long long>(env.config.max_steps), env.config.max_steps < steps ? " (max-steps caps it)" : "");
  }
  // Greedy pass@1 with the training's caps, template and SQL limits (run_eval sets T = 0 and one
  // sample), through the rollout's KV cache.
  EvalOptions eval_options;
  eval_options.rollout = base;
  eval_options.rollout.batch_invariant = false;  // `eval`'s arithmetic, so `eval` of a checkpoint answers the same
  eval_options.dialogue = env.eval_dialogue;
  double last_eval_ex = -1;

  if (layout)
    send_rollout_start(*layout, policy, {step, env.config.max_steps, base.max_batch_sequences, plan.kv_blocks,
                                         gemm_thread_independent(), static_cast<int64_t>(ahead.size()), 0, cursor,
                                         schedule});
  // A batch sampled on this rank now, by the weights of `version` (sampled ahead or not); scored
  // now unless `defer_score`.
  auto sample_here = [&](int64_t version, bool defer_score = false) {
    StepBatch b = sample_step_batch(env, policy, memory_for_rollout(policy, memory, optimizer), base, schedule, cursor,
                                    schemas, comm, defer_score);
    b.version = version;
    return b;
  };
  // --overlap-scoring (--async on one process): the batches sampled ahead are scored on a thread
  // of their own while the step trains, since only the step that trains them needs their rewards.
  // Their SQL runs on workers of its own, not the kernels' pool, where it would wait behind the
  // training's chunks or run inside one (runtime/thread_pool.h parallel_for: a waiting caller
  // works off the queue). Dynamic sampling needs the rewards to choose the batch: scored in turn.
  const bool overlap_scoring = !layout && lag > 0 && c.overlap_scoring && !c.dynamic_sampling;
  std::optional<ThreadPool> score_workers;
  struct RestoreWorkers {
    RewardContext* ctx;
    ThreadPool* was;
    ~RestoreWorkers() {
      if (ctx) ctx->workers = was;
    }
  } restore_workers{env.reward_context.get(), env.reward_context ? env.reward_context->workers : nullptr};
  if (overlap_scoring && env.reward_context) {
    score_workers.emplace(default_thread_pool().size());
    env.reward_context->workers = &*score_workers;
  }

  TrainSummary summary;
  summary.first_step = step;
  auto run_start = std::chrono::steady_clock::now();

  for (; step < c.max_steps; ++step) {
    auto step_start = std::chrono::steady_clock::now();
    const double comm_start = comm.seconds;
    double waited = 0;  // --rollout-ranks: this step's wait for batches
    // Sampled now: the synchronous loop, or the first step of an async run.
    if (ahead.empty()) {
      ahead.push_back(layout ? receive_step_batch(*layout, env, cursor) : sample_here(step));
      waited += ahead.back().wait_seconds;
    }
    StepBatch sb = std::move(ahead.front());
    ahead.pop_front();
    const std::vector<sql::Example>& batch = sb.examples;
    const std::vector<Trajectory>& trajs = sb.trajs;

    StepRecord rec;
    rec.step = step + 1;
    rec.epoch = sb.epoch;
    rec.data_position = sb.first_draw;
    rec.level = schedule.levels.size() > 1 ? sb.level + 1 : 0;
    rec.dynamic = c.dynamic_sampling ? &sb.dynamic : nullptr;
    rec.ppo_epochs = c.ppo_epochs;
    rec.rollout = sb.rollout;
    rec.score_seconds = sb.score_seconds;
    rec.staleness = lag > 0 ? step - sb.version : -1;
    if (lag > 0) staleness_spread(trajs, dp, comm, rec);
    // The curriculum moves on by the step's training EX over every rank's samples, before the
    // batch `lag` steps on is drawn (for off and one-step: the synchronous loop's order).
    rec.sums = sb.sums;
    if (dp.distributed()) comm_sum_in_rank_order(comm, rec.sums);
    const double step_ex = rec.sums[0] > 0 ? rec.sums[3] / rec.sums[0] : 0.0;
    if (layout) send_step_ex(*layout, step_ex);
    if (observe_step(schedule, cursor, step_ex) && !quiet)
      std::printf("curriculum: level %lld of %zu from step %lld\n", static_cast<long long>(cursor.level + 1),
                  schedule.levels.size(), static_cast<long long>(step + 2));
    // A checkpoint of this step records the cursor past this step's own batch: a resumed run
    // draws the batches ahead again (with its own weights).
    const DataCursor step_cursor = cursor;
    auto more_ahead = [&] {
      return static_cast<int64_t>(ahead.size()) < lag && step + 1 + static_cast<int64_t>(ahead.size()) < c.max_steps;
    };
    // By the weights this step starts from.
    while (!layout && more_ahead()) ahead.push_back(sample_here(step, overlap_scoring));
    Interval scored, trained;
    std::future<void> scoring;  // its destructor waits, should the step throw
    if (overlap_scoring)
      scoring = std::async(std::launch::async, [&] {
        scored.begin = std::chrono::steady_clock::now();
        for (StepBatch& b : ahead) score_step_batch(env, b);
        scored.end = std::chrono::steady_clock::now();
      });
    PolicyActivations& state = memory_for_train(policy, memory, optimizer);
    if (summary.modes.recompute.empty()) summary.modes = executed_modes(policy, memory, optimizer);
    trained.begin = std::chrono::steady_clock::now();
    if (env.on_train_begin) env.on_train_begin();
    rec.grpo = grpo_step(policy, has_reference ? &reference : nullptr, optimizer, state, trajs, gc, dp);
    trained.end = std::chrono::steady_clock::now();
    if (scoring.valid()) {
      scoring.get();
      rec.overlap_seconds = overlap_seconds(scored, trained);
    }
    // Rollout ranks sampled the batches ahead while this step trained. --partial-rollout: all but
    // the newest, then the new weights, which the newest waits for mid-way: it is taken at the end
    // of the next step (or before a save, which keeps every batch ahead), so that its rest runs
    // while that step trains (rl/grpo/rollout_ranks.h). An interruption then stops the rollout
    // ranks in place of the next step's EX.
    auto receive_ahead = [&](int64_t hold) {
      while (static_cast<int64_t>(ahead.size()) < hold && more_ahead()) {
        ahead.push_back(receive_step_batch(*layout, env, cursor));
        waited += ahead.back().wait_seconds;
      }
    };
    double weight_sync = 0;
    if (layout) receive_ahead(partial ? lag - 1 : lag);
    if (partial && step + 1 < c.max_steps) weight_sync = send_rollout_weights(*layout, policy, false);
    rec.examples = &batch;
    rec.trajs = &trajs;
    rec.ex = &sb.ex;
    if (dp.distributed()) reduce_step_record(comm, rec);
    if (layout) {  // the slowest trainer's and rollout rank's
      double idle[3] = {waited, sb.sampler_idle_seconds, sb.sampler_wall_seconds};
      comm_all_reduce_max(comm, idle, 3);
      rec.trainer_idle_seconds = idle[0], rec.rollout_idle_seconds = idle[1], rec.rollout_wall_seconds = idle[2];
      rec.weight_sync_seconds = weight_sync;
    }
    rec.step_seconds = seconds_since(step_start);
    rec.comm_seconds = comm.seconds - comm_start;

    // Rank 0 logs every rank's sampled trajectories (an equal share of the log-trajectories each).
    std::string my_lines;
    const int64_t share = c.log_trajectories > 0 ? std::max<int64_t>(1, c.log_trajectories / comm.world_size) : 0;
    for (const auto& j : trajectory_json(rec, dp.distributed() ? share : c.log_trajectories))
      my_lines += j.dump() + "\n";
    const std::vector<std::string> lines = dp.distributed() ? comm_all_gather_bytes(comm, my_lines)
                                                            : std::vector<std::string>{my_lines};
    const int64_t done = step + 1;
    const bool last = done == c.max_steps;
    // A first SIGINT/SIGTERM (runtime/interrupt.h): this step is done; save it and stop. Every
    // rank stops at the same step (a signal may reach only some).
    int64_t stop = interrupt_requested() ? 1 : 0;
    if (dp.distributed()) comm_all_reduce_sum(comm, &stop, 1);
    const bool interrupted = stop > 0;
    const bool scheduled_save = last || interrupted || (c.save_every > 0 && done % c.save_every == 0);

    // ---- evaluation (eval-every): every rank its share of the questions, rank 0 writes
    nlohmann::ordered_json eval_figures;
    bool new_best = false;
    if (c.eval_every > 0 && (done % c.eval_every == 0 || last)) {
      EvalOptions eo = eval_options;
      eo.kv = &memory_for_rollout(policy, memory, optimizer);
      // `eval`'s GEMMs (runtime/gemm.h: a row's bits do not depend on the batch), then the run's again.
      const bool thread_independent = gemm_thread_independent();
      if (backend.host_blas && !thread_independent) set_gemm_thread_independent(true);
      const EvalRun ev = run_eval(policy, *env.tokenizer, *env.protocol, *env.pool, env.eval_examples, eo,
                                  *env.eval_context, comm);
      if (backend.host_blas && !thread_independent) set_gemm_thread_independent(false);
      const double ex = ev.summary.total.ex();
      new_best = is_new_best(best, ex);
      const bool saved = scheduled_save || new_best;
      const EvalInfo info{env.eval_dataset, c.eval_split, c.protocol,
                          saved ? checkpoint_dir(dir, done) : str_cat(dir, " at step ", done, " (no checkpoint)"),
                          env.eval_context->mode == sql::CompareMode::BirdSet ? "bird" : "spider", c.seed, c.device};
      // The outputs before the metrics line: a line with "eval" always has its folder.
      if (owner)
        write_eval_outputs((run / "eval" / ("step-" + std::to_string(done))).string(), env.eval_examples, ev, eo, info);
      eval_figures = eval_metrics_json(summary_json(ev, eo, info));
      rec.eval = &eval_figures;
      rec.eval_seconds = ev.seconds;
      last_eval_ex = ex;
      summary.eval_ex.emplace_back(done, ex);
    }
    // A new best evaluation is saved too, so best.json always names a checkpoint.
    // Before the metrics line, so that the line carries the save's time.
    if (partial && (scheduled_save || new_best)) receive_ahead(lag);
    if (scheduled_save || new_best) {
      const auto save_start = std::chrono::steady_clock::now();
      // CUDA: the master weights to the host model; the moments to the host (offloaded: they
      // are there once the region turns to the next rollout's cache, no second copy).
      // Between save-optimizer-every saves, the weights alone: no moments to bring or write.
      const bool with_optimizer = saves_optimizer(c, done, last || interrupted);
      data_parallel_download(policy, dp, env.model);
      memory_for_rollout(policy, memory, optimizer);
      // Moments resident on the device: their host copy is only ever the checkpoint's, so they go
      // straight into the writer's buffers (rl/checkpoint_writer.h staged_optimizer).
      const bool moments_on_device = !backend.host_moments && !plan.modes.offload_optimizer;
      OptimizerState* saved = &optimizer;
      if (with_optimizer && moments_on_device && writer) saved = &writer->staged_optimizer(optimizer);
      if (with_optimizer) memory_optimizer_to_host(policy, memory, *saved);
      // ZeRO 1-3: every rank writes its slice of the moments (no gather); any world size
      // resumes from the shards.
      // best.json is written once the checkpoint it names is in place (the writer's `after`).
      std::function<void(const std::string&)> after;
      if (new_best) after = [dir, b = BestEval{done, last_eval_ex}](const std::string&) { write_best_json(dir, b); };
      // --async: the cursor past the batches ahead, which the checkpoint holds (and, one batch
      // ahead, the cursor before it, for a resume that cannot take it: another number of ranks).
      nlohmann::ordered_json state = grpo_trainer_state(optimizer, c, n_examples, cursor, dp.shards());
      if (lag > 0) state["ahead"] = ahead_json(ahead, comm);
      if (lag == 1) state["ahead_cursor"] = cursor_json(step_cursor);
      if (writer) writer->save(done, env.model, with_optimizer ? saved : nullptr, state, env.adapter.get(), std::move(after));
      comm_barrier(comm);  // no rank runs ahead of a save that failed (the previous write's error is raised here)
      if (moments_on_device) optimizer.m = {}, optimizer.v = {}, optimizer.m16 = {}, optimizer.v16 = {};
      rec.checkpoint_seconds = seconds_since(save_start);
    }
    // The rollout ranks go on with the new weights, or stop with the trainers.
    if (layout && done < c.max_steps && !partial) rec.weight_sync_seconds = send_rollout_weights(*layout, policy, interrupted);
    if (layout && done < c.max_steps && partial && interrupted) send_rollout_stop(*layout);
    if (owner) {
      const nlohmann::ordered_json line = metrics_json(rec, env.panel);
      metrics->append(line.dump());
      std::vector<std::string> traj_lines;
      for (const std::string& block : lines)
        for (size_t at = 0, nl; (nl = block.find('\n', at)) != std::string::npos; at = nl + 1)
          traj_lines.push_back(block.substr(at, nl - at));
      for (const std::string& l : traj_lines) traj_log->append(l);
      if (tb) tb_log_metrics(*tb, line), tb_log_trajectories(*tb, done, traj_lines);
    }
    if (new_best) best = {done, last_eval_ex};

    summary.reward_means.push_back(rec.sums[0] > 0 ? rec.sums[1] / rec.sums[0] : 0.0);
    double mean_step = seconds_since(run_start) / static_cast<double>(step + 1 - summary.first_step);
    std::string line = progress_line(rec, c.max_steps, mean_step, last_eval_ex);
    if (tty) std::fprintf(stderr, "\r%s\x1b[K%s", line.c_str(), last || interrupted ? "\n" : "");
    else if (!quiet) std::printf("%s\n", line.c_str()), std::fflush(stdout);
    if (interrupted) {
      summary.interrupted = true;
      ++step;
      break;
    }
  }
  summary.last_step = std::max(step, summary.first_step);
  summary.best_step = best.step, summary.best_ex = best.ex;
  // The last checkpoint's write: the run is over only once it is in place (or its error raised).
  if (writer) writer->finish();
  summary.seconds = seconds_since(run_start);
  return summary;
}

}  // namespace sqlrl::rl

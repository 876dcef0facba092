#include "rl/sft/sft.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/gemm.h"
#include "runtime/interrupt.h"
#include "runtime/progress.h"
#include "rl/policy_backend.h"
#include "rl/run_folder.h"
#include "rl/tb_log.h"
#include "rl/train_memory.h"

namespace sqlrl::rl {
namespace fs = std::filesystem;

ClipStats clip_sequences(std::vector<SftSequence>& data, int64_t micro_batch_tokens) {
  check(micro_batch_tokens >= 1, "sft: micro_batch_tokens must be at least 1, got ", micro_batch_tokens);
  ClipStats st;
  const size_t keep = static_cast<size_t>(micro_batch_tokens) + 1;
  std::vector<SftSequence> out;
  for (SftSequence& s : data) {
    if (s.tokens.size() > keep) {
      s.tokens.resize(keep);
      s.mask.resize(keep);
      ++st.cut;
      // Position 0 is never a target.
      if (std::count(s.mask.begin() + 1, s.mask.end(), uint8_t{1}) == 0) {
        ++st.dropped;
        continue;
      }
    }
    out.push_back(std::move(s));
  }
  data = std::move(out);
  return st;
}

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  if (!shuffle) return order;
  uint64_t state = seed * 0x2545F4914F6CDD1Dull + static_cast<uint64_t>(epoch);
  for (int64_t i = n - 1; i > 0; --i) {
    // Multiply-shift keeps the draw unbiased enough for shuffling and identical everywhere.
    uint64_t j = static_cast<uint64_t>((static_cast<unsigned __int128>(splitmix64(state)) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order[i], order[j]);
  }
  return order;
}

namespace {

int64_t untrained_start(const SftSequence& s) {
  int64_t n = 0;
  while (n < static_cast<int64_t>(s.mask.size()) && !s.mask[n]) ++n;
  return n;
}

int64_t common_start(const SftSequence& a, const SftSequence& b, int64_t cap) {
  int64_t n = 0;
  while (n < cap && a.tokens[n] == b.tokens[n]) ++n;
  return n;
}

}  // namespace

std::vector<int64_t> grouped_epoch_order(const std::vector<SftSequence>& data, uint64_t seed, int64_t epoch,
                                         int64_t group) {
  check(group >= 1, "sft: share_group must be at least 1, got ", group);
  const int64_t n = static_cast<int64_t>(data.size());
  std::vector<int64_t> start(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) start[i] = untrained_start(data[i]);
  // Lexicographic order of the untrained starts puts long common starts next to each other;
  // a family ends where the next start shares less than half of the shorter one.
  std::vector<int64_t> sorted = epoch_order(n, 0, 0, false);
  std::stable_sort(sorted.begin(), sorted.end(), [&](int64_t a, int64_t b) {
    return std::lexicographical_compare(data[a].tokens.begin(), data[a].tokens.begin() + start[a],
                                        data[b].tokens.begin(), data[b].tokens.begin() + start[b]);
  });
  std::vector<std::vector<int64_t>> families;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = sorted[k];
    if (k > 0) {
      const int64_t j = sorted[k - 1], shorter = std::min(start[i], start[j]);
      if (2 * common_start(data[i], data[j], shorter) >= shorter && shorter > 0) {
        families.back().push_back(i);
        continue;
      }
    }
    families.push_back({i});
  }
  std::vector<std::vector<int64_t>> runs;
  for (size_t f = 0; f < families.size(); ++f) {
    const std::vector<int64_t>& fam = families[f];
    std::vector<int64_t> perm = epoch_order(static_cast<int64_t>(fam.size()), seed * 0x9E3779B97F4A7C15ull + f, epoch, true);
    for (size_t r = 0; r < fam.size(); r += static_cast<size_t>(group)) {
      runs.emplace_back();
      for (size_t k = r; k < std::min(fam.size(), r + static_cast<size_t>(group)); ++k) runs.back().push_back(fam[perm[k]]);
    }
  }
  std::vector<int64_t> order;
  for (int64_t r : epoch_order(static_cast<int64_t>(runs.size()), seed, epoch, true))
    order.insert(order.end(), runs[r].begin(), runs[r].end());
  return order;
}

std::vector<MicroBatch> pack_sft(const std::vector<SftSequence>& data, const std::vector<int64_t>& order,
                                 int64_t max_tokens, int64_t share_min_tokens) {
  // pack_micro_batches reads tokens and policy_mask of a Trajectory; SFT has no advantages.
  std::vector<Trajectory> trajs(data.size());
  for (int64_t i : order) {
    check(i >= 0 && i < static_cast<int64_t>(data.size()), "sft: order names sequence ", i, " of ", data.size());
    check(data[i].tokens.size() == data[i].mask.size(), "sft: ", data[i].source, ": ", data[i].tokens.size(),
          " tokens but ", data[i].mask.size(), " mask entries");
    trajs[i].tokens = data[i].tokens;
    trajs[i].policy_mask = data[i].mask;
  }
  std::vector<float> zero(data.size(), 0.0f);
  return pack_micro_batches(trajs, order, zero, max_tokens, share_min_tokens);
}

SftUpdateStats sft_update(Policy& policy, OptimizerState& optimizer, PolicyActivations& acts,
                          const std::vector<const MicroBatch*>& micro, const LrSchedule& schedule, const SftConfig& config,
                          const DataParallel& dp) {
  check(policy_training_ready(policy), "sft: gradients are not allocated (policy_init_training)");
  const auto [slice_lo, slice_hi] = optimizer_slice(dp, policy_num_trainable(policy));
  check(!policy.backend->host_moments || moments_size(optimizer) == slice_hi - slice_lo, "sft: optimizer state has ",
        moments_size(optimizer), " moments for ", slice_hi - slice_lo, " parameters",
        dp.zero_stage > 0 && dp.distributed() ? " (this rank's ZeRO slice)" : "");
  SftUpdateStats st;
  st.lr = lr_at(schedule, optimizer.train_step);
  ++optimizer.train_step;
  // Every rank holds the whole plan: the update's token count needs no communication.
  for (const MicroBatch* mb : micro) {
    for (uint8_t m : mb->mask) st.tokens += m;
    st.positions += static_cast<int64_t>(mb->targets.size());
  }
  if (st.tokens == 0) return st;
  const float scale = -1.0f / static_cast<float>(st.tokens);
  // The shards this process trains: micro[s] for shard s, or (one shard) all of them.
  const int64_t R = dp.shards();
  std::vector<std::vector<const MicroBatch*>> mine;
  auto shard = [&](int64_t s) {
    return s < static_cast<int64_t>(micro.size()) ? std::vector<const MicroBatch*>{micro[s]}
                                                   : std::vector<const MicroBatch*>{};
  };
  if (R == 1) mine.push_back(micro);
  else for (int64_t a = 0; a < dp.grad_accum; ++a) mine.push_back(shard(dp.rank() * dp.grad_accum + a));
  std::vector<float> logp, dlogp;
  std::vector<std::vector<double>> nlls;
  std::vector<std::vector<float>> shard_grads;
  const bool apart = policy.backend->shard_gradients_apart;  // rl/policy_backend.h
  for (const auto& part : mine) {
    // Each shard's gradient from zero, or every shard's backward into one buffer (CUDA).
    if (&part == &mine.front() || apart) policy_zero_grads(policy);
    double nll = 0;
    for (const MicroBatch* mb : part) {
      const size_t T = mb->targets.size();
      logp.resize(T), dlogp.resize(T);
      policy_forward_logprobs_masked(policy, acts, mb->batch, mb->targets, mb->mask.data(), logp.data());
      for (size_t t = 0; t < T; ++t) {
        dlogp[t] = mb->mask[t] ? scale : 0.0f;
        if (mb->mask[t]) nll -= logp[t];
      }
      policy_backward_logprobs(policy, acts, mb->batch, mb->targets, dlogp.data());
    }
    nlls.push_back({nll});
    if (mine.size() > 1 && apart) {  // this shard's gradient, from zero
      const TrainableBuffers t = policy_trainable(policy);
      shard_grads.emplace_back(t.grads, t.grads + t.n);
    }
  }
  st.loss = sum_over_shards(dp, nlls)[0] / static_cast<double>(st.tokens);
  std::vector<float> slice;
  const float* own = nullptr;
  const double sq = reduce_gradients(policy, dp, shard_grads, slice, &own);
  st.grad_norm = std::sqrt(sq);
  ++optimizer.adam_step;
  data_parallel_adamw(policy, optimizer, dp, own, config.adamw, st.lr, config.max_grad_norm, sq);
  return st;
}

double sft_eval_loss(const QwenModel& model, TrainState& state, const std::vector<SftSequence>& data,
                     int64_t max_tokens) {
  std::vector<int64_t> order = epoch_order(static_cast<int64_t>(data.size()), 0, 0, false);
  double nll = 0;
  int64_t tokens = 0;
  std::vector<float> logp;
  for (const MicroBatch& mb : pack_sft(data, order, max_tokens)) {
    logp.resize(mb.targets.size());
    forward_logprobs_masked(model, state, mb.batch, mb.targets, mb.mask.data(), logp.data());
    for (size_t t = 0; t < logp.size(); ++t)
      if (mb.mask[t]) nll -= logp[t], ++tokens;
  }
  return tokens > 0 ? nll / static_cast<double>(tokens) : 0.0;
}

SftRunStats run_sft(QwenModel& model, OptimizerState& optimizer, std::vector<SftSequence> data,
                    const SftConfig& given_config, const SftRunOptions& options) {
  auto start = std::chrono::steady_clock::now();
  const SftCheckpoint* resume = options.resume;
  const SftConfig& config = resume ? resume->config : given_config;
  check(config.epochs >= 1 || config.max_steps > 0, "sft: needs epochs >= 1 or max_steps > 0");
  check(config.grad_accum >= 1, "sft: grad_accum must be at least 1, got ", config.grad_accum);
  // Several ranks: each update is one micro-batch per rank (rl/data_parallel.h).
  const Comm single;
  const Comm& comm = options.comm ? *options.comm : single;
  const bool owner = comm.is_root();
  check(options.zero_stage >= 0 && options.zero_stage <= 3, "sft: zero stage ", options.zero_stage,
        " is not 0, 1, 2 or 3");
  const PolicyBackend& backend = policy_backend(options.device);
  check(backend.zero_shards_adapter || comm.world_size == 1 || options.zero_stage == 0 || !options.adapter,
        "sft: --zero-stage ", options.zero_stage, " with a LoRA adapter on ", backend.name, ": the adapter trains whole "
        "there (ZeRO 0: its state is small); --zero-stage shards a full fine-tuning run");
  check(comm.world_size == 1 || !backend.device_collectives || comm_has_device_transport(comm), "sft: several ranks on ",
        backend.name, " need the job's NCCL communicator or host staging (app/launch.h join_job_gpu)");
  // Each rank drives the GPU join_job_gpu chose (local_rank, or shared round-robin) and made current.
  const int gpu = comm_gpu(comm);
  const int64_t per_update = config.grad_accum * comm.world_size;  // micro-batches per update
  check(!data.empty(), "sft: no training sequence (every line had no trained token?)");
  // The memory plan (no rollout phase): recomputed layers and the moments' precision.
  MemoryPlanOptions mo = memory_plan_options(options.memory, backend, &comm);
  mo.rollout = false;
  mo.tokens_per_micro_batch = config.micro_batch_tokens;
  if (options.adapter) mo.lora = options.adapter->config;
  mo.world_size = comm.world_size;
  mo.zero_stage = comm.world_size > 1 ? options.zero_stage : 0;
  const MemoryPlan mplan = plan_memory(model.config, mo);
  check(mplan.fits, "sft: the memory plan does not fit: ", mplan.problem,
        " (`llm_sqlrl plan` shows it; memory-gb and micro-batch-tokens size it)");
  // On CUDA the moments start on the device; a resumed run's host copy is uploaded there.
  set_moment_precision(optimizer, mplan.modes.bf16_moments);
  const int64_t trainable = options.adapter ? options.adapter->num_params : model.num_params;
  // --grad-accum on the CPU and N ranks: the shard gradients of rl/data_parallel.h, and GEMMs whose
  // bits do not depend on the thread count (a rank bound to one core vs a process with two).
  const DataParallel dp{&comm, config.grad_accum, true, mo.zero_stage};
  // ZeRO 1-3: this rank's moments cover its slice of the parameters only.
  const auto [slice_lo, slice_hi] = optimizer_slice(dp, trainable);
  // (CUDA: a fresh run's moments start on the device, none on the host.)
  if ((backend.host_moments || moments_size(optimizer) > 0) && moments_size(optimizer) != slice_hi - slice_lo) {
    check(!resume || moments_size(optimizer) == trainable, "sft: the resumed optimizer holds ", moments_size(optimizer),
          " moments, the run trains ", trainable, options.adapter ? " adapter parameters" : " parameters");
    optimizer = resume ? optimizer_slice_of(optimizer, slice_lo, slice_hi)
                       : make_optimizer_state(slice_hi - slice_lo, mplan.modes.bf16_moments);
  }
  SftRunStats run;
  const size_t given = data.size();
  run.clipped = clip_sequences(data, config.micro_batch_tokens);
  check(!data.empty(), "sft: all ", given, " sequences lose every trained token when cut to the micro-batch budget of ",
        config.micro_batch_tokens, " tokens (raise --micro-batch-tokens)");
  const uint64_t fingerprint = sft_data_fingerprint(data);

  // Each epoch's micro-batches, packed when first needed (max_steps beyond the configured epochs
  // cycles on with the next epoch's order).
  const int64_t n = static_cast<int64_t>(data.size());
  std::vector<std::vector<MicroBatch>> plan;
  auto plan_of = [&](int64_t e) -> const std::vector<MicroBatch>& {
    while (static_cast<int64_t>(plan.size()) <= e)
      plan.push_back(config.share_group > 0
                         ? pack_sft(data, grouped_epoch_order(data, config.seed, static_cast<int64_t>(plan.size()),
                                                              config.share_group),
                                    config.micro_batch_tokens, kSharePrefixMinTokens)
                         : pack_sft(data, epoch_order(n, config.seed, static_cast<int64_t>(plan.size()), config.shuffle),
                                    config.micro_batch_tokens));
    return plan[e];
  };
  const int64_t epochs = std::max<int64_t>(config.epochs, 1);
  SftCursor cursor;
  if (resume) {
    const std::string state_file = (fs::path(resume->path) / "trainer_state.json").string();
    check(fingerprint == resume->data_fingerprint && n == resume->sequences, "resume: ", state_file, " was trained on ",
          resume->sequences, " sequences with fingerprint ", resume->data_fingerprint, ", this data has ", n,
          " with fingerprint ", fingerprint, " (a different file, tokenizer or --micro-batch-tokens?)");
    check(optimizer.train_step == resume->train_step, "resume: ", state_file, " is at train_step ", resume->train_step,
          " but the optimizer given is at ", optimizer.train_step, " (load the checkpoint's optimizer.safetensors)");
    cursor = resume->cursor;
  } else {
    // The cosine needs the total number of updates.
    for (int64_t e = 0; e < epochs; ++e)
      cursor.planned += (static_cast<int64_t>(plan_of(e).size()) + per_update - 1) / per_update;
    if (config.max_steps > 0) cursor.planned = config.max_steps;
    cursor.total_steps = optimizer.train_step + cursor.planned;
    cursor.warmup_steps = static_cast<int64_t>(std::floor(config.warmup_ratio * static_cast<float>(cursor.planned)));
    if (config.decay == LrDecay::Cosine && cursor.total_steps <= cursor.warmup_steps)
      cursor.total_steps = cursor.warmup_steps + 1;
  }
  LrSchedule schedule;
  schedule.lr = config.lr;
  schedule.decay = config.decay;
  schedule.min_lr_ratio = config.min_lr_ratio;
  schedule.total_steps = cursor.total_steps;
  schedule.warmup_steps = cursor.warmup_steps;

  TrainOptions topt;
  topt.max_tokens = mo.tokens_per_micro_batch;
  topt.logprob_chunk = mo.logprob_chunk_tokens;
  topt.recompute = mplan.modes.recompute;
  if (dp.shards() > 1) set_gemm_thread_independent(true);
  // LoRA: the base frozen, the adapter trained. ZeRO 3 on CUDA: the fp32 master of this rank's
  // slice only.
  Policy policy = training_policy(backend, model, {options.adapter, slice_lo, slice_hi,
                                                   mo.zero_stage == 3 && dp.distributed(), gpu});
  TrainMemory memory = start_train_memory(policy, mplan, topt, RolloutOptions{}.kv_block_size, config.adamw, optimizer);
  PolicyActivations& acts = memory_for_train(policy, memory, optimizer);
  run.modes = executed_modes(policy, memory, optimizer);
  const fs::path out = options.out_dir;
  RunLock lock;
  std::unique_ptr<JsonlWriter> metrics;
  std::unique_ptr<TbLog> tb;
  const std::string tb_dir = tb_log_dir(options.out_dir, options.tb_dir);
  std::optional<CheckpointWriter> writer;  // after the lock: its write ends before the lock goes
  // ZeRO 1-3: each rank writes its slice of the moments into checkpoints (a writer on every rank).
  CheckpointWriterOptions writer_options = checkpoint_writer_options(options.checkpoint);
  if (slice_hi - slice_lo != trainable) writer_options.shard = {comm.rank, comm.world_size, slice_lo, trainable};
  if (!options.out_dir.empty() && writer_options.shard.sharded() && !owner) {
    check_run_folder_shared(comm, options.out_dir);  // once rank 0 holds the folder (below)
    writer.emplace(options.out_dir, options.tokenizer_path, writer_options);
    writer->prepare(0, slice_hi - slice_lo, optimizer.bf16);
  }
  if (!options.out_dir.empty() && owner) {
    lock = lock_run_folder(options.out_dir);
    if (writer_options.shard.sharded()) check_run_folder_shared(comm, options.out_dir);
    writer.emplace(options.out_dir, options.tokenizer_path, writer_options);
    writer->prepare(options.adapter ? 0 : model.num_params, slice_hi - slice_lo, optimizer.bf16);
    if (resume) {
      truncate_jsonl((out / "metrics.jsonl").string(), optimizer.train_step);
      truncate_tb_log(tb_dir, optimizer.train_step);
    } else if (sft_run_without_checkpoint(options.out_dir)) {
      // Stopped before its first checkpoint: nothing is lost by starting it again (the lines its
      // lost updates logged are dropped), and --resume has nothing to continue from.
      if (options.log)
        options.log(str_cat("sft: ", options.out_dir, " holds an sft run stopped before its first checkpoint: starting "
                            "it again from update 0"));  // before the progress line starts
      truncate_jsonl((out / "metrics.jsonl").string(), 0);
      truncate_tb_log(tb_dir, 0);
    } else {
      check_no_run_in(options.out_dir, str_cat("continue it with sft --resume ", options.out_dir, " or choose another --out"));
      truncate_tb_log(tb_dir, 0);  // a stale OUT/tb without a run beside it
    }
    if (!options.config_toml.empty()) write_text_atomic((out / "config.toml").string(), options.config_toml);
    write_text_atomic((out / "memory_plan.txt").string(), format_memory_plan(model.config, mplan, mo));
    metrics = std::make_unique<JsonlWriter>((out / "metrics.jsonl").string());
    if (options.tensorboard)
      tb = std::make_unique<TbLog>(open_tb_log(tb_dir, optimizer.train_step, options.config_toml));
  }
  auto trainer_state = [&] {
    nlohmann::ordered_json s = trainer_state_head("sft", optimizer);
    s["epoch"] = cursor.epoch;
    s["cursor"] = {{"epoch", cursor.epoch}, {"micro", cursor.micro}};
    s["updates"] = cursor.updates;
    s["planned_updates"] = cursor.planned;
    s["lr"] = config.lr;
    s["total_steps"] = schedule.total_steps;
    s["warmup_steps"] = schedule.warmup_steps;
    s["seed"] = config.seed;
    s["sequences"] = data.size();
    s["data_fingerprint"] = fingerprint;
    s["config"] = sft_config_json(config);
    s["run"] = resume ? resume->run : options.run_info;
    return s;
  };
  // The progress line (rank 0, when asked); a log line while it is drawn goes above it.
  std::optional<Progress> bar;
  if (options.progress && owner) {
    bar = progress_start(options.progress_label, "updates", cursor.planned, cursor.updates);
    progress_plain_lines(*bar, options.progress_plain_lines);
  }
  auto note = [&](const std::string& line) {
    if (!options.log) return;
    if (bar) progress_clear(*bar);
    options.log(line);
    if (bar) progress_redraw(*bar);
  };
  int64_t saved_step = resume ? optimizer.train_step : -1;
  auto save = [&](bool last) {
    if (options.out_dir.empty() || saved_step == optimizer.train_step) return;
    saved_step = optimizer.train_step;
    const bool with_optimizer = saves_optimizer(options.checkpoint, optimizer.train_step, last);
    data_parallel_download(policy, dp, model);
    if (with_optimizer) memory_optimizer_to_host(policy, memory, optimizer);
    // ZeRO 1-3: every rank writes its slice of the moments (no gather).
    if (writer) {
      const std::string folder =
          writer->save(optimizer.train_step, model, with_optimizer ? &optimizer : nullptr, trainer_state(), options.adapter);
      if (owner) {
        run.checkpoints.push_back(folder);
        note(str_cat("checkpoint ", folder, with_optimizer ? "" : " (weights only)"));
      }
    }
    comm_barrier(comm);  // no rank runs ahead of a checkpoint that may fail
  };

  while (cursor.updates < cursor.planned) {
    const std::vector<MicroBatch>& micro = plan_of(cursor.epoch);
    if (cursor.micro >= static_cast<int64_t>(micro.size())) {
      ++cursor.epoch, cursor.micro = 0;
      continue;
    }
    std::vector<const MicroBatch*> group;
    const size_t m = static_cast<size_t>(cursor.micro);
    for (size_t k = m; k < std::min(micro.size(), m + static_cast<size_t>(per_update)); ++k) group.push_back(&micro[k]);
    auto t0 = std::chrono::steady_clock::now();
    SftUpdateStats st = sft_update(policy, optimizer, acts, group, schedule, config, dp);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (run.updates == 0) run.first_loss = st.loss;
    run.last_loss = st.loss;
    ++run.updates, ++cursor.updates;
    run.trained_tokens += st.tokens;
    nlohmann::ordered_json line;
    line["step"] = optimizer.train_step;
    line["epoch"] = cursor.epoch;
    line["loss"] = st.loss;
    line["tokens"] = st.tokens;
    line["positions"] = st.positions;
    line["lr"] = st.lr;
    line["grad_norm"] = st.grad_norm;
    line["tokens_per_s"] = seconds > 0 ? static_cast<double>(st.tokens) / seconds : 0.0;
    line["seconds"] = seconds;
    if (metrics) metrics->append(line.dump());
    if (tb) tb_log_metrics(*tb, line);
    if (bar) {
      // max_steps decides the length: the epoch count is then not the end.
      std::string epoch = std::to_string(line["epoch"].get<int64_t>() + 1);
      if (config.max_steps == 0) epoch += "/" + std::to_string(epochs);
      char detail[160];
      std::snprintf(detail, sizeof detail, "epoch %s | loss %.4f | lr %.3g | %.0f tok/s", epoch.c_str(), st.loss,
                    static_cast<double>(st.lr), line["tokens_per_s"].get<double>());
      progress_update(*bar, cursor.updates, detail);
    } else if (options.log && owner) {
      options.log(line.dump());
    }
    cursor.micro += per_update;
    if (cursor.micro >= static_cast<int64_t>(micro.size())) ++cursor.epoch, cursor.micro = 0;
    if (config.save_every > 0 && cursor.updates % config.save_every == 0) save(false);
    // runtime/interrupt.h: this update is done; save it and stop (every rank at the same update).
    int64_t stop = interrupt_requested() ? 1 : 0;
    if (comm.world_size > 1) comm_all_reduce_sum(comm, &stop, 1);
    if (stop > 0) {
      run.interrupted = true;
      break;
    }
  }
  run.epochs_done = cursor.epoch + (cursor.micro > 0 ? 1 : 0);  // epochs begun
  save(true);
  if (writer) writer->finish();  // the run is over once its last checkpoint is in place
  if (bar) progress_finish(*bar);
  data_parallel_download(policy, dp, model);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

}  // namespace sqlrl::rl

#include "rl/checkpoint_writer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "rl/run_folder.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/json_depth.h"

namespace sqlrl::rl {
namespace fs = std::filesystem;

// What one checkpoint holds, owned by the writer (background) or borrowed (in the caller's thread).
struct CheckpointWriter::Job {
  int64_t step = 0;
  QwenModel model_copy;
  std::optional<LoraAdapter> adapter_copy;
  OptimizerState optimizer_copy;
  const QwenModel* model = nullptr;
  const LoraAdapter* adapter = nullptr;
  const OptimizerState* optimizer = nullptr;
  nlohmann::ordered_json trainer_state;
  std::function<void(const std::string&)> after;
};

namespace {

// The tensors a checkpoint writes, without the gradients (a trained model holds as many again),
// into `c`'s buffers: from the second save on they are the right size already, so the copy is a
// memcpy into memory the process has touched (a fresh 7 GB allocation costs as much again in page
// faults: 13 s against ~1 s on a 2-core VM, bench_checkpoint).
void copy_weights_into(QwenModel& c, const QwenModel& m) {
  c.config = m.config;
  c.table = m.table;
  c.num_params = m.num_params;
  c.params.assign(m.params.begin(), m.params.end());
}

LoraAdapter adapter_copy(const LoraAdapter& a) {
  LoraAdapter c;
  c.config = a.config;
  c.model = a.model;
  c.table = a.table;
  c.num_params = a.num_params;
  c.params = a.params;
  return c;
}

// The folder name best.json names ("step-N"), "" when there is none or it cannot be read.
std::string best_checkpoint_name(const std::string& run_dir) {
  const fs::path path = fs::path(run_dir) / "best.json";
  if (!fs::is_regular_file(path)) return "";
  const std::string text = read_file_text(path.string());
  if (json_too_deep_at(text) != std::string_view::npos) return "";
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("checkpoint") || !j["checkpoint"].is_string()) return "";
  return fs::path(j["checkpoint"].get<std::string>()).filename().string();
}

}  // namespace

std::vector<std::string> prune_checkpoints(const std::string& run_dir, int64_t keep) {
  std::vector<std::string> deleted;
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  if (keep <= 0 || !fs::is_directory(dir)) return deleted;
  std::vector<std::pair<int64_t, fs::path>> complete;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const int64_t step = checkpoint_step(entry.path().filename().string());
    if (step >= 0 && entry.is_directory() && fs::exists(entry.path() / "trainer_state.json"))
      complete.emplace_back(step, entry.path());
  }
  std::sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  const std::string best = best_checkpoint_name(run_dir);
  bool resumable_kept = false;  // among the newest `keep`, or spared below
  for (size_t i = 0; i < complete.size(); ++i) {
    const bool resumable = is_resumable_checkpoint(complete[i].second.string());
    if (i < static_cast<size_t>(keep) || complete[i].second.filename().string() == best ||
        (resumable && !resumable_kept)) {
      resumable_kept = resumable_kept || resumable;
      continue;
    }
    fs::remove_all(complete[i].second);
    deleted.push_back(complete[i].second.string());
  }
  return deleted;
}

CheckpointWriter::CheckpointWriter(std::string run_dir, std::string tokenizer_path, CheckpointWriterOptions options)
    : run_dir_(std::move(run_dir)), tokenizer_path_(std::move(tokenizer_path)), options_(options) {
  if (owner()) remove_unfinished_checkpoints(run_dir_);
}

CheckpointWriter::~CheckpointWriter() {
  cancel_ = true;  // finish() was not called: the run is failing, and other ranks may never write
  if (thread_.joinable()) thread_.join();
  if (!error_.empty()) std::fprintf(stderr, "error: %s\n", error_.c_str());
}

void CheckpointWriter::write(Job& job) {
  const auto start = std::chrono::steady_clock::now();
  try {
    if (before_write_) before_write_();
    const std::string folder = save_checkpoint(run_dir_, job.step, *job.model, job.optimizer, tokenizer_path_,
                                               job.trainer_state, job.adapter, options_.shard, &cancel_);
    if (owner()) {
      prune_checkpoints(run_dir_, options_.keep);
      if (job.after) job.after(folder);
    }
  } catch (const std::exception& e) {
    error_ = str_cat("checkpoint step ", job.step, " of ", run_dir_, ": ", e.what());
  }
  last_write_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void CheckpointWriter::finish() {
  if (thread_.joinable()) thread_.join();
  if (!error_.empty()) {
    const std::string error = std::move(error_);
    error_.clear();
    throw Error(error);
  }
}

namespace {

int64_t moment_bytes(const OptimizerState& o) {
  return static_cast<int64_t>((o.m.capacity() + o.v.capacity()) * sizeof(float) +
                              (o.m16.capacity() + o.v16.capacity()) * sizeof(uint16_t));
}

}  // namespace

bool CheckpointWriter::in_background(int64_t bytes, bool note) {
  if (options_.background != Choice::Auto) return options_.background == Choice::On;
  const int64_t held = job_ ? static_cast<int64_t>(job_->model_copy.params.capacity() * sizeof(float)) +
                                  moment_bytes(job_->optimizer_copy)
                            : 0;
  const int64_t need = bytes - held, available = host_available_bytes();
  if (need <= 0 || (available > 0 && need <= available / 2)) return true;
  if (note && !noted_) {
    noted_ = true;
    std::fprintf(stderr, "checkpoint: written in place (training waits for it): a background copy needs %.1f GB more, "
                 "the host has %.1f GB available (--checkpoint-background on forces it)\n", static_cast<double>(need) / 1e9,
                 static_cast<double>(available) / 1e9);
  }
  return false;
}

void CheckpointWriter::prepare(int64_t weights, int64_t moments, bool bf16_moments) {
  const int64_t bytes = weights * static_cast<int64_t>(sizeof(float)) +
                        2 * moments * static_cast<int64_t>(bf16_moments ? sizeof(uint16_t) : sizeof(float));
  if (!in_background(bytes, false)) return;
  finish();
  if (!job_) job_ = std::make_shared<Job>();
  std::shared_ptr<Job> job = job_;
  thread_ = std::thread([job, weights, moments, bf16_moments] {
    // resize() writes every element: the pages are touched here, not in the first save's copy.
    job->model_copy.params.resize(static_cast<size_t>(weights));
    OptimizerState& o = job->optimizer_copy;
    const size_t n = static_cast<size_t>(moments);
    if (bf16_moments) o.m16.resize(n), o.v16.resize(n);
    else o.m.resize(n), o.v.resize(n);
  });
}

OptimizerState& CheckpointWriter::staged_optimizer(const OptimizerState& counters) {
  finish();
  if (!job_) job_ = std::make_shared<Job>();
  OptimizerState& o = job_->optimizer_copy;
  o.bf16 = counters.bf16, o.adam_step = counters.adam_step, o.train_step = counters.train_step;
  return o;
}

std::string CheckpointWriter::save(int64_t step, const QwenModel& model, const OptimizerState* optimizer,
                                   const nlohmann::ordered_json& trainer_state, const LoraAdapter* adapter,
                                   std::function<void(const std::string&)> after) {
  finish();
  if (!job_) job_ = std::make_shared<Job>();
  std::shared_ptr<Job> job = job_;  // its buffers reused (the previous write has finished)
  job->step = step;
  job->trainer_state = trainer_state;
  job->after = std::move(after);
  const int64_t bytes =
      (!owner() ? 0 : adapter ? adapter->num_params : model.num_params) * static_cast<int64_t>(sizeof(float)) +
      (optimizer ? static_cast<int64_t>((optimizer->m.size() + optimizer->v.size()) * sizeof(float) +
                                        (optimizer->m16.size() + optimizer->v16.size()) * sizeof(uint16_t))
                 : 0);
  if (!in_background(bytes, true)) {
    job->model = &model, job->adapter = adapter, job->optimizer = optimizer;
    write(*job);
    job->after = {};
    finish();
    return checkpoint_dir(run_dir_, step);
  }
  // The copy training waits for; the rest happens beside the next steps.
  if (!owner()) job->adapter = nullptr;  // a shard alone: the weights are not read
  else if (adapter) job->adapter_copy = adapter_copy(*adapter), job->adapter = &*job->adapter_copy;
  else copy_weights_into(job->model_copy, model), job->adapter = nullptr;
  job->model = adapter || !owner() ? &model : &job->model_copy;  // with an adapter the weights are not read
  // Vector assignment keeps the buffers' capacity; a staged state is in them already.
  if (optimizer && optimizer != &job->optimizer_copy) job->optimizer_copy = *optimizer;
  job->optimizer = optimizer ? &job->optimizer_copy : nullptr;
  thread_ = std::thread([this, job] { write(*job); });
  return checkpoint_dir(run_dir_, step);
}

}  // namespace sqlrl::rl

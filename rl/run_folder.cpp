#include "rl/run_folder.h"

#include <fcntl.h>
#include <strings.h>
#include <sys/file.h>
#include <unistd.h>

#include <cblas.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "runtime/blas_core.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/gemm.h"
#include "runtime/json_depth.h"

namespace sqlrl::rl {

std::vector<std::string> fixed_settings_changed(const OptionTable& saved, const OptionTable& asked) {
  check(saved.size() == asked.size(), "resume: option tables of ", saved.size(), " and ", asked.size(), " keys");
  std::vector<std::string> out;
  for (size_t i = 0; i < saved.size(); ++i)
    if (!saved[i].resumable && options_to_toml({saved[i]}, "") != options_to_toml({asked[i]}, "")) out.push_back(saved[i].key);
  return out;
}

std::vector<std::string> fixed_settings_given(const OptionTable& table, const std::vector<bool>& given) {
  check(table.size() == given.size(), "resume: ", given.size(), " flags for ", table.size(), " keys");
  std::vector<std::string> out;
  for (size_t i = 0; i < table.size(); ++i)
    if (given[i] && !table[i].resumable) out.push_back(table[i].key);
  return out;
}
namespace fs = std::filesystem;

RunLock& RunLock::operator=(RunLock&& o) noexcept {
  if (this != &o) {
    if (fd >= 0) ::close(fd);
    fd = o.fd, path = std::move(o.path), o.fd = -1;
  }
  return *this;
}

RunLock::~RunLock() {
  if (fd >= 0) ::close(fd);  // releases the flock; the file stays (a later run reuses it)
}

RunLock lock_run_folder(const std::string& dir) {
  fs::create_directories(dir);
  RunLock lock;
  lock.path = (fs::path(dir) / ".lock").string();
  lock.fd = ::open(lock.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  check(lock.fd >= 0, lock.path, ": cannot open the run folder's lock: ", std::strerror(errno));
  if (::flock(lock.fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    ssize_t n = ::pread(lock.fd, buf, sizeof buf - 1, 0);
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    check(err != EWOULDBLOCK, "run folder ", dir, " is in use by process ", pid, " (", lock.path,
          "); wait for it to finish or choose another folder");
    fail(lock.path, ": cannot lock: ", std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  check(::ftruncate(lock.fd, 0) == 0 && ::pwrite(lock.fd, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size()),
        lock.path, ": cannot write the pid: ", std::strerror(errno));
  return lock;
}

void check_no_run_in(const std::string& dir, const std::string& resume_hint) {
  const fs::path run = dir;
  check(!fs::exists(run / "metrics.jsonl") && latest_checkpoint(dir).empty(), "run folder ", dir,
        " already holds a run; ", resume_hint);
}

bool sft_run_without_checkpoint(const std::string& dir) {
  std::ifstream config(fs::path(dir) / "config.toml");
  std::string head;
  std::getline(config, head);
  return head.rfind("# llm_sqlrl sft: ", 0) == 0 && latest_checkpoint(dir).empty();
}

std::string checkpoint_dir(const std::string& run_dir, int64_t step) {
  return (fs::path(run_dir) / "checkpoints" / ("step-" + std::to_string(step))).string();
}

const std::vector<std::string>& tokenizer_file_names() {
  static const std::vector<std::string> names = {
      "tokenizer.json",         "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
      "chat_template.jinja",    "vocab.json",            "merges.txt",              "generation_config.json"};
  return names;
}

void copy_tokenizer_files(const std::string& tokenizer_path, const std::string& dest_dir) {
  if (tokenizer_path.empty()) return;
  fs::path src = tokenizer_path;
  const fs::path folder = fs::is_directory(src) ? src : src.parent_path();
  if (fs::is_directory(src)) src /= "tokenizer.json";
  check(fs::is_regular_file(src), src.string(), ": tokenizer file not found");
  fs::copy_file(src, fs::path(dest_dir) / "tokenizer.json", fs::copy_options::overwrite_existing);
  for (const std::string& name : tokenizer_file_names()) {
    if (name == "tokenizer.json") continue;  // the one given, whatever its name
    const fs::path f = folder / name;
    // generation_config.json is the model's; a tokenizer folder that is also the weights folder
    // has it, and save_model does not write one.
    if (fs::is_regular_file(f)) fs::copy_file(f, fs::path(dest_dir) / name, fs::copy_options::overwrite_existing);
  }
}

namespace {

// The CPU GEMMs' thread count as far as their bits go: OpenBLAS picks other kernels and
// partitions for other counts (runtime/gemm.h), so a resume under another OMP_NUM_THREADS /
// OPENBLAS_NUM_THREADS continues with other bits. 0: thread-independent GEMMs (data-parallel
// runs), whose bits no thread count changes.
int64_t gemm_threads_for_bits() { return gemm_thread_independent() ? 0 : openblas_get_num_threads(); }

}  // namespace

std::string trainer_state_text(const nlohmann::ordered_json& state) {
  std::string out = "{";
  for (auto it = state.begin(); it != state.end(); ++it)
    out += str_cat(it == state.begin() ? "\n" : ",\n", "  ", nlohmann::ordered_json(it.key()).dump(), ": ", it.value().dump());
  return out + "\n}\n";
}

nlohmann::ordered_json trainer_state_head(const char* trainer, const OptimizerState& optimizer) {
  nlohmann::ordered_json j;
  j["version"] = kTrainerStateVersion;
  j["trainer"] = trainer;
  j["step"] = optimizer.train_step;
  j["adam_step"] = optimizer.adam_step;
  j["blas_threads"] = gemm_threads_for_bits();
  j["blas_core"] = blas_core();
  j["cpu_kernels"] = cpu_kernels_mode_name();
  return j;
}

std::string check_blas_core(const nlohmann::json& saved, const std::string& checkpoint) {
  if (!saved.contains("blas_core") || !saved["blas_core"].is_string()) return "";
  const std::string then = saved["blas_core"].get<std::string>(), now = blas_core();
  if (strcasecmp(then.c_str(), now.c_str()) == 0) return "";
  const std::string mode = saved.contains("cpu_kernels") && saved["cpu_kernels"].is_string()
                               ? saved["cpu_kernels"].get<std::string>() : std::string("fast");
  const std::string what = str_cat(checkpoint, " was trained on OpenBLAS's ", then, " kernels (--cpu-kernels ", mode,
                                   "), this process runs its ", now, " kernels: the CPU GEMMs sum in another order");
  check(cpu_kernels_mode() == CpuKernels::inherit, "resume: ", what, ", so the steps from here would not be those of "
        "the run never interrupted. Resume on a machine that runs ", then, " (--cpu-kernels portable runs Haswell on "
        "every CPU with AVX2), or give --cpu-kernels inherit to go on with other bits");
  return str_cat("resume: ", what, ": the steps from here differ in the last bits from a run never interrupted");
}

std::string blas_threads_note(const nlohmann::json& saved, const std::string& checkpoint) {
  if (!saved.contains("blas_threads") || !saved["blas_threads"].is_number_integer()) return "";
  const int64_t then = saved["blas_threads"].get<int64_t>(), now = gemm_threads_for_bits();
  if (then == now) return "";
  auto name = [](int64_t t) { return t == 0 ? std::string("thread-independent GEMMs") : str_cat(t, " OpenBLAS threads"); };
  return str_cat("resume: ", checkpoint, " was trained with ", name(then), ", this process has ", name(now),
                 ": the CPU GEMMs sum in another order, so the steps from here differ in the last bits from a run "
                 "never interrupted",
                 then > 0 ? str_cat(" (OPENBLAS_NUM_THREADS=", then, " reproduces them)") : std::string());
}

namespace {

// A shard written under a temporary name and renamed: a reader never sees half of one.
void write_shard(const OptimizerState& slice, const OptimizerShard& shard, const fs::path& dir) {
  const fs::path path = dir / optimizer_shard_name(shard.rank, shard.world_size);
  const fs::path tmp = path.string() + ".tmp";
  save_optimizer_shard(slice, tmp.string(), shard.offset, shard.total);
  fs::rename(tmp, path);
}

// Rank 0: every other rank's shard from `from` into `into`, as each appears.
void collect_shards(const fs::path& from, const fs::path& into, int world_size, const std::atomic<bool>* cancel) {
  constexpr double kPatienceSeconds = 3600;  // without a new shard (runtime/comm.h's watchdog default)
  std::vector<bool> have(static_cast<size_t>(world_size), false);
  have[0] = true;
  int missing = world_size - 1;
  auto last = std::chrono::steady_clock::now();
  while (missing > 0) {
    for (int r = 1; r < world_size; ++r) {
      const std::string name = optimizer_shard_name(r, world_size);
      if (have[r] || !fs::exists(from / name)) continue;
      fs::rename(from / name, into / name);
      have[r] = true, --missing, last = std::chrono::steady_clock::now();
    }
    if (missing == 0) break;
    std::string which;
    for (int r = 1; r < world_size; ++r)
      if (!have[r]) which += (which.empty() ? "" : ", ") + std::to_string(r);
    check(!cancel || !cancel->load(), "stopped while waiting for the optimizer shards of ranks ", which);
    check(std::chrono::duration<double>(std::chrono::steady_clock::now() - last).count() < kPatienceSeconds,
          "no optimizer shard for ", kPatienceSeconds, " s; missing ranks ", which, " (in ", from.string(), ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::error_code ignored;
  fs::remove_all(from, ignored);
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, int64_t step, const QwenModel& model,
                            const OptimizerState* optimizer, const std::string& tokenizer_path,
                            const nlohmann::ordered_json& trainer_state, const LoraAdapter* adapter,
                            const OptimizerShard& shard, const std::atomic<bool>* cancel) {
  const std::string name = "step-" + std::to_string(step);
  const fs::path checkpoints = fs::path(run_dir) / "checkpoints";
  const fs::path final_dir = checkpoints / name, tmp = checkpoints / ("." + name + ".tmp");
  const fs::path shards = checkpoints / ("." + name + ".shards");
  const bool sharded = optimizer && shard.sharded();
  if (shard.sharded() && shard.rank != 0) {  // its shard alone (none in a weights-only checkpoint)
    if (optimizer) fs::create_directories(shards), write_shard(*optimizer, shard, shards);
    return final_dir.string();
  }
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    if (adapter) save_adapter(*adapter, tmp.string());
    else save_model(model, tmp.string());
    if (sharded) write_shard(*optimizer, shard, tmp);
    else if (optimizer) save_optimizer(*optimizer, (tmp / "optimizer.safetensors").string());
    copy_tokenizer_files(tokenizer_path, tmp.string());
    if (sharded) collect_shards(shards, tmp, shard.world_size, cancel);
    write_text_atomic((tmp / "trainer_state.json").string(), trainer_state_text(trainer_state));
  } catch (...) {
    std::error_code ignored;  // a full disk: give the space back, keep the previous checkpoint
    fs::remove_all(tmp, ignored);
    throw;
  }
  if (fs::exists(final_dir)) {
    const fs::path old = checkpoints / ("." + name + ".old");
    fs::remove_all(old);
    fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fs::remove_all(old);
  } else {
    fs::rename(tmp, final_dir);
  }
  return final_dir.string();
}

bool is_adapter_checkpoint(const std::string& checkpoint) {
  return fs::is_regular_file(fs::path(checkpoint) / "adapter_config.json");
}

void load_checkpoint_weights(const std::string& checkpoint, QwenModel& model, LoraAdapter* adapter) {
  const bool has_adapter = is_adapter_checkpoint(checkpoint);
  if (!adapter) {
    check(!has_adapter, "resume: ", checkpoint, " holds a LoRA adapter, but this run trains every weight (was it "
          "started with lora-rank, which its config.toml keeps?)");
    QwenModel loaded = load_model(checkpoint);
    check(loaded.num_params == model.num_params, "resume: ", checkpoint, " holds ", loaded.num_params,
          " parameters, the model has ", model.num_params);
    model.params = std::move(loaded.params);
    return;
  }
  check(has_adapter, "resume: ", checkpoint, " holds full weights (no adapter_config.json), but this run trains a LoRA "
        "adapter");
  LoraAdapter loaded = load_adapter(checkpoint, model);
  const LoraConfig &a = loaded.config, &b = adapter->config;
  check(a.rank == b.rank && a.alpha == b.alpha && a.use_rslora == b.use_rslora && loaded.num_params == adapter->num_params,
        "resume: ", checkpoint, " holds a LoRA adapter of rank ", a.rank, ", alpha ", a.alpha, a.use_rslora ? " (rsLoRA)" : "",
        ", ", loaded.num_params, " parameters; this run's is rank ", b.rank, ", alpha ", b.alpha,
        b.use_rslora ? " (rsLoRA)" : "", ", ", adapter->num_params, " parameters");
  for (size_t i = 0; i < loaded.table.size(); ++i)
    check(loaded.table[i].hf_name == adapter->table[i].hf_name, "resume: ", checkpoint, "'s adapter has ",
          loaded.table[i].hf_name, " where this run's has ", adapter->table[i].hf_name, " (other target modules)");
  adapter->params = std::move(loaded.params);
}

nlohmann::json read_trainer_state(const std::string& checkpoint, const char* trainer) {
  const std::string path = (fs::path(checkpoint) / "trainer_state.json").string();
  check(fs::is_regular_file(path), path, ": cannot read (not a checkpoint folder?)");
  const std::string text = read_file_text(path);
  check_json_depth(text, path);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  check(!j.is_discarded() && j.is_object(), path, ": not a JSON object");
  if (!j.contains("version")) {
    // Before version 1: SFT wrote "format": "sqlrl-sft" and "train_step", GRPO neither.
    const bool sft = j.value("format", std::string()) == "sqlrl-sft";
    j["version"] = kTrainerStateVersion;
    j["trainer"] = sft ? "sft" : "grpo";
    if (sft && j.contains("train_step")) j["step"] = j["train_step"];
  }
  check(j["version"].is_number_integer() && j["version"].get<int64_t>() <= kTrainerStateVersion, path,
        ": version ", j["version"].dump(), " is newer than this build reads (", kTrainerStateVersion, ")");
  const std::string written_by = j.value("trainer", std::string("?"));
  check(written_by == trainer, path, ": a checkpoint of ", written_by, ", not of ", trainer);
  check(j.contains("step") && j["step"].is_number_integer(), path, ": field 'step' is missing or not an integer");
  return j;
}

std::string latest_checkpoint(const std::string& run_dir) {
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  int64_t best = -1;
  std::string path;
  if (!fs::is_directory(dir)) return "";
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const int64_t step = checkpoint_step(name);
    if (step < 0 || !entry.is_directory() || !is_resumable_checkpoint(entry.path().string())) continue;
    if (step > best) best = step, path = entry.path().string();
  }
  return path;
}

int64_t checkpoint_step(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5) return -1;
  char* end = nullptr;
  const long long step = std::strtoll(name.c_str() + 5, &end, 10);
  return *end == 0 && step >= 0 ? step : -1;
}

bool is_resumable_checkpoint(const std::string& checkpoint) {
  return fs::exists(fs::path(checkpoint) / "trainer_state.json") && has_optimizer_state(checkpoint);
}

void remove_unfinished_checkpoints(const std::string& run_dir) {
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(dir)) return;
  std::vector<std::pair<fs::path, std::string>> stale;  // path, the checkpoint name it belongs to
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    for (const std::string suffix : {".tmp", ".old", ".shards"})
      if (name.size() > suffix.size() + 1 && name[0] == '.' && name.ends_with(suffix) &&
          checkpoint_step(name.substr(1, name.size() - 1 - suffix.size())) >= 0)
        stale.emplace_back(entry.path(), name.substr(1, name.size() - 1 - suffix.size()));
  }
  for (const auto& [path, name] : stale) {
    // A crash between save_checkpoint's two renames leaves the previous step-N as .old alone:
    // it is complete, so it takes its name back.
    if (path.extension() == ".old" && !fs::exists(dir / name)) fs::rename(path, dir / name);
    else fs::remove_all(path);
  }
}

void check_run_folder_shared(const Comm& comm, const std::string& run_dir) {
  if (comm.world_size == 1) return;
  const std::vector<std::string> pids = comm_all_gather_bytes(comm, std::to_string(::getpid()));
  if (comm.is_root()) return;
  const fs::path lock = fs::path(run_dir) / ".lock";
  std::string held;
  if (std::ifstream in(lock); in) std::getline(in, held);
  check(held == pids[0], "rank ", comm.rank, ": the run folder ", run_dir, " is not the one rank 0 writes (",
        lock.string(), held.empty() ? " is missing" : " names process " + held + ", not rank 0's " + pids[0],
        "): sharded optimizer checkpoints (zero-stage 1-3) need the run folder on a filesystem every rank sees");
}

std::string resolve_checkpoint(const std::string& dir) {
  check(fs::is_directory(dir), "resume: ", dir, " is not a folder");
  fs::path folder = fs::path(dir).lexically_normal();
  if (!folder.has_filename()) folder = folder.parent_path();  // "run/checkpoints/step-2/"
  if (fs::exists(folder / "trainer_state.json")) {
    if (is_resumable_checkpoint(folder.string())) return folder.string();
    const std::string run = folder.parent_path().parent_path().string(), latest = latest_checkpoint(run);
    fail("resume: ", folder.string(), " holds weights only (no optimizer.safetensors: a checkpoint between "
         "save-optimizer-every saves), so training cannot continue from it bit for bit; ",
         latest.empty() ? std::string("its run has no resumable checkpoint") : "resume from " + latest);
  }
  std::string latest = latest_checkpoint(dir);
  check(!latest.empty(), "resume: ", dir, " is neither a checkpoint (no trainer_state.json) nor a run folder with a "
        "complete checkpoints/step-N");
  return latest;
}

void truncate_jsonl(const std::string& path, int64_t step) {
  if (!fs::exists(path)) return;
  std::ifstream in(path, std::ios::binary);
  std::string line, kept;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    // Lines this program did not write whole (a crash mid-line, absurd nesting) are dropped.
    if (json_too_deep_at(line) != std::string_view::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step")) continue;
    check(j["step"].is_number_integer(), path, ":", number, ": \"step\" is not an integer: ", line.substr(0, 80));
    if (j["step"].get<int64_t>() > step) continue;
    kept += line + "\n";
  }
  in.close();
  write_text_atomic(path, kept);
}

JsonlWriter::JsonlWriter(std::string file) : path(std::move(file)), out(path, std::ios::binary | std::ios::app) {
  check(out.good(), path, ": cannot open for appending");
}

void JsonlWriter::append(const std::string& json_line) {
  out << json_line << "\n";
  out.flush();
  check(out.good(), path, ": write failed");
}

}  // namespace sqlrl::rl

#include "rl/options.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "rl/agent/paper.h"
#include "rl/policy.h"
#include "runtime/error.h"

namespace sqlrl::rl {

void add_output_options(OptionTable& t, OutputOptions& o, const char* help) { t.push_back({"out", help, &o.out, true}); }

void add_memory_options(OptionTable& t, MemoryOptions& o) {
  const size_t first = t.size();
  t.push_back({"memory-gb", "memory the plan may use, GB (10^9 bytes; 0 = the GPU's, or the host's RAM on cpu, less a reserve of 2 / 1 GiB)",
               &o.memory_gb});
  t.push_back({"bf16-moments", "AdamW moments in bf16: auto (when training cannot fit otherwise) | on | off",
               &o.bf16_moments});
  t.push_back({"recompute", "recompute layers in the backward: auto (the fewest that fit) | on (all) | off",
               &o.recompute});
  t.push_back({"offload-optimizer",
               "cuda: AdamW moments in host memory during rollouts: auto (when the KV cache would fall short) | on | off",
               &o.offload_optimizer});
  // How it runs, not what it trains: a resumed run may change them (Option::resumable).
  for (size_t i = first; i < t.size(); ++i) t[i].resumable = true;
}

void validate(const MemoryOptions& o) {
  check(o.memory_gb >= 0 && std::isfinite(o.memory_gb), "memory-gb must be >= 0 (0 = the device's), got ", o.memory_gb);
  for (auto [key, value] : {std::pair{"bf16-moments", &o.bf16_moments}, {"recompute", &o.recompute},
                            {"offload-optimizer", &o.offload_optimizer}})
    check(*value == "auto" || *value == "on" || *value == "off", key, " must be auto, on or off, got '", *value, "'");
}

void add_device_options(OptionTable& t, DeviceOptions& o) {
  const size_t first = t.size();
  static const std::string help = backend_help();  // the rows of rl/policy_backend.h
  t.push_back({"device", help.c_str(), &o.device});
  // How it runs, not what it trains: a resumed run may change them (Option::resumable).
  for (size_t i = first; i < t.size(); ++i) t[i].resumable = true;
}

void add_model_options(OptionTable& t, ModelOptions& o) {
  t.push_back({"weights", "Hugging Face checkpoint file or folder", &o.weights});
  t.push_back({"tokenizer", "tokenizer.json or its folder (default: the weights folder's)", &o.tokenizer});
}

std::string model_tokenizer_path(const ModelOptions& o) {
  namespace fs = std::filesystem;
  if (!o.tokenizer.empty()) {
    fs::path p = o.tokenizer;
    if (fs::is_directory(p)) p /= "tokenizer.json";
    check(fs::is_regular_file(p), "tokenizer: no such file: ", p.string());
    return p.string();
  }
  if (o.weights.empty()) return "";
  fs::path folder = fs::is_directory(o.weights) ? fs::path(o.weights) : fs::path(o.weights).parent_path();
  fs::path p = folder / "tokenizer.json";
  return fs::is_regular_file(p) ? p.string() : "";
}

void add_adapter_options(OptionTable& t, AdapterOptions& o) {
  t.push_back({"adapter", "PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) applied unmerged "
               "on the weights", &o.adapter});
}

std::unique_ptr<LoraAdapter> load_adapter_option(const std::string& dir, const QwenModel& model, const char* who) {
  namespace fs = std::filesystem;
  if (dir.empty()) return nullptr;
  check(fs::is_directory(dir), who, ": adapter: ", dir, " is not a folder (a PEFT adapter folder holds "
        "adapter_config.json and adapter_model.safetensors)");
  for (const char* name : {"adapter_config.json", "adapter_model.safetensors"}) {
    const fs::path f = fs::path(dir) / name;
    // PEFT before 0.7 (or safe_serialization=False) wrote a pickle, which is never read here.
    const bool pickle = std::string(name) == "adapter_model.safetensors" && fs::exists(fs::path(dir) / "adapter_model.bin");
    check(fs::is_regular_file(f), who, ": adapter: no ", f.string(),
          pickle ? " (adapter_model.bin is a PyTorch pickle, not read here: save the adapter with PEFT's "
                   "save_pretrained(..., safe_serialization=True))"
                 : " (a PEFT adapter folder holds adapter_config.json and adapter_model.safetensors)");
  }
  return std::make_unique<LoraAdapter>(load_adapter(dir, model));  // its errors name the file and tensor
}

void add_lora_options(OptionTable& t, LoraOptions& o) {
  t.push_back({"lora-rank", "train a LoRA adapter of this rank on the frozen base (0 = off: full fine-tuning; 16 is "
               "the usual choice)", &o.lora_rank});
  t.push_back({"lora-alpha", "LoRA alpha: the adapter's output is scaled by alpha / rank (0 = 2 x rank)", &o.lora_alpha});
  t.push_back({"lora-target-modules", "projections that get an adapter: all-linear (all seven) or a comma list of "
               "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", &o.lora_target_modules});
  t.push_back({"lora-rslora", "rsLoRA: scale by alpha / sqrt(rank) instead of alpha / rank", &o.lora_rslora});
}

namespace {

// lora-target-modules as PEFT's target_modules: "all-linear" (its string form) or a list of
// module names, each one of the seven projections, none twice.
void set_lora_targets(const std::string& value, LoraConfig& c) {
  if (value == "all-linear") {
    c.target_pattern = value;
    return;
  }
  std::string known;
  for (int m = 0; m < kLoraModules; ++m) known += std::string(m ? "," : "") + lora_module_name(LoraModule(m));
  size_t start = 0;
  while (true) {
    const size_t comma = value.find(',', start);
    const std::string name = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    bool ok = false;
    for (int m = 0; m < kLoraModules; ++m) ok = ok || name == lora_module_name(LoraModule(m));
    check(ok, "lora-target-modules '", value, "': '", name, "' is not all-linear or one of ", known);
    check(std::find(c.target_modules.begin(), c.target_modules.end(), name) == c.target_modules.end(),
          "lora-target-modules '", value, "' names ", name, " twice");
    c.target_modules.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
}

}  // namespace

void validate(const LoraOptions& o) { (void)lora_config_from(o); }

std::unique_ptr<LoraAdapter> training_adapter(const LoraOptions& lora, const AdapterOptions& from,
                                              const QwenModel& model, uint64_t seed, const std::string& base,
                                              const char* who) {
  const std::optional<LoraConfig> asked = lora_config_from(lora);
  std::unique_ptr<LoraAdapter> adapter = load_adapter_option(from.adapter, model, who);
  if (adapter) {
    check(!asked || asked->rank == adapter->config.rank, who, ": --adapter ", from.adapter, " has rank ",
          adapter->config.rank, " but lora-rank is ", lora.lora_rank, " (the adapter's files set its shape: drop one)");
  } else if (asked) {
    adapter = std::make_unique<LoraAdapter>(init_adapter(*asked, model.config, seed));
  } else {
    return nullptr;
  }
  check(adapter->config.dropout == 0, who, ": --adapter ", from.adapter, " has lora_dropout ", adapter->config.dropout,
        "; training here implements no adapter dropout (set it to 0 in its adapter_config.json)");
  adapter->config.base_model = base;
  return adapter;
}

std::optional<LoraConfig> lora_config_from(const LoraOptions& o) {
  check(o.lora_rank >= 0 && o.lora_rank <= 65536, "lora-rank must be in [0, 65536] (0 = off), got ", o.lora_rank);
  check(o.lora_alpha >= 0 && std::isfinite(o.lora_alpha), "lora-alpha must be >= 0 (0 = 2 x rank), got ",
        o.lora_alpha);
  LoraConfig c;
  set_lora_targets(o.lora_target_modules, c);  // checked even when off: a typo in a config file is an error
  if (o.lora_rank == 0) return std::nullopt;
  c.rank = o.lora_rank;
  c.alpha = o.lora_alpha > 0 ? o.lora_alpha : 2.0 * static_cast<double>(o.lora_rank);
  c.dropout = 0;
  c.use_rslora = o.lora_rslora;
  return c;
}

void add_template_options(OptionTable& t, TemplateOptions& o) {
  t.push_back({"chat-template", "qwen3 | qwen2.5 (default: detected from the tokenizer folder, else qwen3)",
               &o.chat_template});
  add_thinking_option(t, o.enable_thinking);
}

void add_thinking_option(OptionTable& t, bool& enable_thinking) {
  t.push_back({"enable-thinking", "Qwen3 template flag (false renders the empty think block)", &enable_thinking});
}

void add_protocol_options(OptionTable& t, ProtocolOptions& o) {
  t.push_back({"protocol", protocol_help(), &o.protocol});
  t.push_back({"sqltrail-reasoning-stop", "sqltrail: </reasoning> ends a segment, which uses a turn and gets no "
               "observation (SQL-Trail arXiv 2601.17699, Algorithm 1 lines 10 and 15-29); false: turns end at "
               "</sql> or </solution> only", &o.sqltrail_reasoning_stop});
  t.push_back({"sqltrail-final-solution", "sqltrail: the last turn is the forced final <solution> block (Algorithm 1 "
               "line 31: it starts with <solution>, ends at </solution>); false: an ordinary turn",
               &o.sqltrail_final_solution});
  t.push_back({"mtir-rethink", "mtir: where \"My action is not correct. Let me rethink.\" goes after a turn with no "
               "action: assistant (the model's own stream, MTIR-SQL arXiv 2510.25510 Algorithm 1 line 20) | user "
               "(a user turn)", &o.mtir_rethink});
  t.push_back({"mtsql-memory-parse", "mtsql: the memory shows Spider's parse of each earlier gold SQL (\"Parsed "
               "Elements for each term\", MTSQL-R1 arXiv 2510.12831 appendix D.1)", &o.mtsql_memory_parse});
  t.push_back({"mtsql-answer-fallback", "mtsql: an episode with no <answer_sql> is scored on its last tool call's SQL "
               "(MTSQL-R1's released reward, verl/utils/reward_score/text2sql.py extract_code)",
               &o.mtsql_answer_fallback});
}

void add_sampling_options(OptionTable& t, SamplingOptions& o) {
  t.push_back({"temperature", "sampling temperature (0 = greedy)", &o.temperature});
  t.push_back({"top-p", "nucleus mass (1 = off)", &o.top_p});
  t.push_back({"top-k", "top-k (0 = off)", &o.top_k});
}

void add_turn_options(OptionTable& t, TurnOptions& o) {
  t.push_back({"max-turns", "assistant turns (0 = the protocol's budget)", &o.max_turns});
  t.push_back({"max-turn-tokens", "sampled tokens per assistant turn", &o.max_turn_tokens});
  t.push_back({"max-total-tokens", "tokens per trajectory (prompt + turns + observations)", &o.max_total_tokens});
}

void add_sql_options(OptionTable& t, SqlOptions& o) {
  // The machine's limits (a resumed run may change them); the row and step budgets shape what is
  // observed and scored, and stay.
  t.push_back({"sql-timeout-ms", "wall-clock limit per SQL call (0 = none)", &o.sql_timeout_ms, true});
  t.push_back({"sql-max-rows", "rows fetched per SQL call", &o.sql_max_rows});
  t.push_back({"sql-memory-mb", "memory one SQL call may hold inside SQLite, MiB (0 = none)", &o.sql_memory_mb, true});
  t.push_back({"sql-max-value-kb", "longest string or blob one SQL call may build, KiB", &o.sql_max_value_kb});
  t.push_back({"sql-vm-steps", "deterministic budget per SQL call in SQLite VM steps (0 = none); with one, the "
               "wall clock firing first is the machine's failure (infrastructure), not the query's", &o.sql_vm_steps});
}

std::vector<std::string> environment_keys() {
  struct Environment : TemplateOptions, ProtocolOptions, TurnOptions, SqlOptions {} e;
  OptionTable t;
  add_template_options(t, e);
  add_protocol_options(t, e);
  add_turn_options(t, e);
  add_sql_options(t, e);
  std::vector<std::string> keys;
  for (const Option& o : t) keys.push_back(o.key);
  keys.push_back("compare");  // EX semantics: train's reward and eval's score read results alike
  return keys;
}

void add_parallel_options(OptionTable& t, ParallelOptions& o) {
  const size_t first = t.size();
  t.push_back({"grad-accum", "split each process's share of a step's prompts into N shards, each shard's gradient "
               "computed from zero and every shard's added in order: one process computes what N ranks of mpirun "
               "compute, and M ranks what M x N do (a run resumed on fewer ranks keeps its bits; on cuda the shards add into "
               "one gradient buffer: the same up to fp32 rounding)", &o.grad_accum});
  add_zero_stage_option(t, o.zero_stage);
  t.push_back({"deterministic-reduce", "several ranks: sum gradients in rank order (all-to-all), so N ranks give the "
               "bits of --grad-accum N; off: MPI's all-reduce", &o.deterministic_reduce});
  // How it runs, not what it trains: a resumed run may change them (Option::resumable).
  for (size_t i = first; i < t.size(); ++i) t[i].resumable = true;
}

void add_zero_stage_option(OptionTable& t, int64_t& zero_stage) {
  const size_t first = t.size();
  t.push_back({"zero-stage", "several ranks: 0 (every rank keeps all AdamW moments) | 1 (each keeps its slice's) | "
               "2 (and only its slice's reduced gradient) | 3 (and only its slice's fp32 master weights; on the cpu, "
               "whose fp32 weights are the master, what 2 holds). cuda: every bf16 weight stays on every GPU; a LoRA "
               "adapter trains whole (0)", &zero_stage});
  // How it runs, not what it trains: a resumed run may change them (Option::resumable).
  for (size_t i = first; i < t.size(); ++i) t[i].resumable = true;
}

void add_checkpoint_options(OptionTable& t, CheckpointOptions& o) {
  const size_t first = t.size();
  t.push_back({"checkpoint-background", "auto | on | off: write each checkpoint on a thread from a host copy while "
               "training goes on (it waits for the copy only); off: for the whole write, without the copy's memory; "
               "auto: on while the copy fits in half the host's available memory", &o.checkpoint_background});
  t.push_back({"keep-checkpoints", "after each checkpoint, delete all but the newest N complete ones (and best.json's); "
               "0 = keep all", &o.keep_checkpoints});
  t.push_back({"save-optimizer-every", "only every N-th step's checkpoint carries the optimizer state (resumable); "
               "those between hold the weights only (0 = all carry it; the last always does)", &o.save_optimizer_every});
  // How it runs, not what it trains: a resumed run may change them (Option::resumable).
  for (size_t i = first; i < t.size(); ++i) t[i].resumable = true;
}

CheckpointWriterOptions checkpoint_writer_options(const CheckpointOptions& o) {
  CheckpointWriterOptions w;
  w.background = parse_choice(o.checkpoint_background, "checkpoint-background");
  w.keep = o.keep_checkpoints;
  return w;
}

void validate(const CheckpointOptions& o) {
  (void)parse_choice(o.checkpoint_background, "checkpoint-background");
  check(o.keep_checkpoints >= 0, "keep-checkpoints must be >= 0 (0 = keep all), got ", o.keep_checkpoints);
  check(o.save_optimizer_every >= 0, "save-optimizer-every must be >= 0 (0 = every checkpoint), got ",
        o.save_optimizer_every);
}

bool saves_optimizer(const CheckpointOptions& o, int64_t step, bool last) {
  return last || o.save_optimizer_every <= 0 || step % o.save_optimizer_every == 0;
}

void validate(const ParallelOptions& o) {
  check(o.grad_accum >= 1 && o.grad_accum <= 4096, "grad-accum must be in [1, 4096], got ", o.grad_accum);
  validate_zero_stage(o.zero_stage);
}

void validate_zero_stage(int64_t zero_stage) {
  check(zero_stage >= 0 && zero_stage <= 3, "zero-stage must be 0, 1, 2 or 3, got ", zero_stage);
}

void validate(const DeviceOptions& o) { find_backend(o.device); }  // fails naming the rows

void validate(const ProtocolOptions& o) {
  bool known = false;
  std::string names;
  for (const std::string& n : protocol_names()) known = known || n == o.protocol, names += (names.empty() ? "" : " | ") + n;
  check(known, "protocol '", o.protocol, "' is not one of ", names);
  check(o.mtir_rethink == "assistant" || o.mtir_rethink == "user", "mtir-rethink must be assistant or user, got '",
        o.mtir_rethink, "'");
  // A paper detail switched off for another protocol than its own would silently do nothing.
  const ProtocolSettings paper;
  const std::pair<const char*, bool> changed[] = {
      {"sqltrail-reasoning-stop", o.sqltrail_reasoning_stop != paper.sqltrail_reasoning_stop},
      {"sqltrail-final-solution", o.sqltrail_final_solution != paper.sqltrail_final_solution},
      {"mtir-rethink", o.mtir_rethink != paper.mtir_rethink},
      {"mtsql-memory-parse", o.mtsql_memory_parse != paper.mtsql_memory_parse},
      {"mtsql-answer-fallback", o.mtsql_answer_fallback != paper.mtsql_answer_fallback}};
  for (const auto& [key, is_changed] : changed) {
    const std::string owner = std::string(key).substr(0, std::string(key).find('-'));
    check(!is_changed || owner == o.protocol, key, " applies to --protocol ", owner, " only (protocol is ", o.protocol,
          ")");
  }
}

void validate(const SamplingOptions& o) {
  check(o.temperature >= 0 && std::isfinite(o.temperature), "temperature must be >= 0, got ", o.temperature);
  check(o.top_p > 0 && o.top_p <= 1, "top-p must be in (0, 1], got ", o.top_p);
  check(o.top_k >= 0, "top-k must be >= 0, got ", o.top_k);
}

void validate(const TurnOptions& o) {
  check(o.max_turns >= 0, "max-turns must be >= 0, got ", o.max_turns);
  check(o.max_turn_tokens > 0, "max-turn-tokens must be positive, got ", o.max_turn_tokens);
  check(o.max_total_tokens > 0, "max-total-tokens must be positive, got ", o.max_total_tokens);
}

void validate(const SqlOptions& o) {
  check(o.sql_timeout_ms >= 0, "sql-timeout-ms must be >= 0 (0 = none), got ", o.sql_timeout_ms);
  check(o.sql_max_rows > 0, "sql-max-rows must be positive, got ", o.sql_max_rows);
  check(o.sql_memory_mb >= 0, "sql-memory-mb must be >= 0 (0 = none), got ", o.sql_memory_mb);
  check(o.sql_vm_steps >= 0, "sql-vm-steps must be >= 0 (0 = none), got ", o.sql_vm_steps);
  check(o.sql_max_value_kb > 0 && o.sql_max_value_kb <= 1000000, "sql-max-value-kb must be in [1, 1000000] (SQLite's "
        "own ceiling is 1e9 bytes), got ", o.sql_max_value_kb);
}

void apply_to_rollout(RolloutOptions& ro, const SamplingOptions& s, uint64_t seed, const TurnOptions& t,
                      const SqlOptions& q) {
  ro.sampling = {static_cast<float>(s.temperature), s.top_k, static_cast<float>(s.top_p), seed};
  ro.max_turns = static_cast<int>(t.max_turns);
  ro.max_turn_tokens = t.max_turn_tokens;
  ro.max_total_tokens = t.max_total_tokens;
  ro.sql_limits.timeout_ms = q.sql_timeout_ms;
  ro.sql_limits.max_rows = static_cast<size_t>(q.sql_max_rows);
  ro.sql_limits.max_query_memory_bytes = q.sql_memory_mb << 20;
  ro.sql_limits.max_value_bytes = q.sql_max_value_kb << 10;
  ro.sql_limits.max_vm_steps = q.sql_vm_steps;
}

}  // namespace sqlrl::rl

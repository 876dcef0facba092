#include "rl/grpo/train_config.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "rl/grpo/loss_agg.h"
#include "runtime/error.h"

namespace sqlrl::rl {

std::vector<ConfigField> config_fields(TrainConfig& c) {
  return {
      {"out", "run folder", &c.out},
      {"resume", "continue the run in this folder from its latest checkpoint", &c.resume},
      {"device", "cpu | cuda (cuda: rollout and GRPO on one GPU, bf16 weights with f32 master; head_dim 64 or 128)", &c.device},
      {"max-steps", "trainer steps (rollout batches) to reach", &c.max_steps},
      {"seed", "seed of the data shuffle, the sampler (Philox) and the embedded model", &c.seed},
      {"save-every", "checkpoint every N steps (the last always); 0 = last only", &c.save_every},
      {"log-trajectories", "trajectories per step written to trajectories.jsonl", &c.log_trajectories},
      {"weights", "Hugging Face checkpoint file or folder (default: the embedded tiny model)", &c.weights},
      {"tokenizer", "tokenizer.json or folder (default: the weights folder's, else the embedded one)", &c.tokenizer},
      {"chat-template", "qwen3 | qwen2.5 (default: detected from the tokenizer folder, else qwen3)", &c.chat_template},
      {"enable-thinking", "Qwen3 template flag", &c.enable_thinking},
      {"tiny-vocab", "embedded model: BPE vocabulary size (added tokens included)", &c.tiny_vocab},
      {"tiny-hidden", "embedded model: hidden size", &c.tiny_hidden},
      {"tiny-layers", "embedded model: layers", &c.tiny_layers},
      {"tiny-heads", "embedded model: attention heads", &c.tiny_heads},
      {"tiny-kv-heads", "embedded model: key/value heads", &c.tiny_kv_heads},
      {"tiny-head-dim", "embedded model: head dimension", &c.tiny_head_dim},
      {"tiny-intermediate", "embedded model: MLP size", &c.tiny_intermediate},
      {"tiny-init-std", "embedded model: std of the random weights", &c.tiny_init_std},
      {"dataset", "FORMAT:PATH (spider|bird|sparc|cosql|synsql); default: the built-in synthetic benchmark", &c.dataset},
      {"split", "dataset split to train on", &c.split},
      {"synth-seed", "generator seed of the built-in synthetic benchmark", &c.synth_seed},
      {"compare", "EX comparison: spider | bird (default: bird for BIRD data and skyrl, else spider)", &c.compare},
      {"protocol", "skyrl | sqltrail | mtir | mtsql", &c.protocol},
      {"reward", "reward panel (default: the protocol's)", &c.reward},
      {"reward-weight", "panel weight override TERM=W (repeatable)", &c.reward_weights},
      {"reward-turn-budget", "SQL-Trail turn reward's T (0 = max-turns if set, else 10)", &c.reward_turn_budget},
      {"batch-size", "prompts per step", &c.batch_size},
      {"group-size", "samples per prompt (G)", &c.group_size},
      {"temperature", "sampling temperature; GRPO trains softmax(logits / T), the policy that sampled (as verl)", &c.temperature},
      {"top-p", "nucleus mass (1 = off)", &c.top_p},
      {"top-k", "top-k (0 = off)", &c.top_k},
      {"max-turns", "assistant turns (0 = the protocol's budget)", &c.max_turns},
      {"max-turn-tokens", "sampled tokens per assistant turn", &c.max_turn_tokens},
      {"max-total-tokens", "tokens per trajectory (prompt + turns + observations)", &c.max_total_tokens},
      {"max-batch-sequences", "samples decoded together", &c.max_batch_sequences},
      {"sql-timeout-ms", "wall-clock limit per SQL call", &c.sql_timeout_ms},
      {"sql-max-rows", "rows fetched per SQL call", &c.sql_max_rows},
      {"lr", "peak learning rate", &c.lr},
      {"lr-schedule", "constant | cosine", &c.lr_schedule},
      {"warmup-steps", "linear warmup steps", &c.warmup_steps},
      {"total-steps", "cosine horizon (0 = max-steps)", &c.total_steps},
      {"min-lr-ratio", "cosine floor as a fraction of lr", &c.min_lr_ratio},
      {"beta1", "AdamW beta1", &c.beta1},
      {"beta2", "AdamW beta2", &c.beta2},
      {"adam-eps", "AdamW epsilon", &c.adam_eps},
      {"weight-decay", "AdamW weight decay", &c.weight_decay},
      {"clip-low", "PPO ratio clip below (1 - clip-low)", &c.clip_low},
      {"clip-high", "PPO ratio clip above (1 + clip-high); > clip-low = clip-higher", &c.clip_high},
      {"kl-coef", "k3 KL to the initial model (0 = off)", &c.kl_coef},
      {"loss-agg", "token-mean | seq-mean-token-mean (rl/grpo/loss_agg.h)", &c.loss_agg},
      {"sampler-logprobs", "old log-probs from the sampler instead of a training forward", &c.sampler_logprobs},
      {"ppo-epochs", "passes over each rollout batch", &c.ppo_epochs},
      {"mini-batches", "optimizer updates per epoch", &c.mini_batches},
      {"max-grad-norm", "gradient-norm clip (<= 0 = off)", &c.max_grad_norm},
      {"adv-std", "divide the group advantage by its std", &c.adv_std},
      {"adv-eps", "epsilon added to the group std", &c.adv_eps},
      {"filter-truncated", "GRPO-Filter: drop trajectories that hit the token cap", &c.filter_truncated},
      {"filter-malformed", "GRPO-Filter: drop trajectories with an invalid action", &c.filter_malformed},
      {"filter-no-valid-action", "GRPO-Filter: drop trajectories with no valid action", &c.filter_no_valid_action},
      {"filter-zero-variance", "GRPO-Filter: drop groups whose rewards are all equal", &c.filter_zero_variance},
      {"zero-variance-in-denominator",
       "the loss mean also counts the dropped zero-variance trajectories' tokens (advantage 0: verl's token-mean; a step with few informative groups moves less)",
       &c.zero_variance_in_denominator},
      {"micro-batch-tokens", "packed tokens per training micro-batch", &c.micro_batch_tokens},
      {"share-prefixes", "pack a group's common prompt once (same update up to rounding)", &c.share_prefixes},
  };
}

namespace {

bool one_of(const std::string& value, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (value == n) return true;
  return false;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

std::string format_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  // TOML floats need a '.' or an exponent; %.17g gives "1" for 1.0.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// A TOML basic string or a bare word, unescaped.
std::string parse_string(std::string_view v, const std::string& where) {
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'')) {
    check(v.back() == v.front(), where, ": unterminated string");
    std::string out;
    for (size_t i = 1; i + 1 < v.size(); ++i) {
      if (v.front() == '"' && v[i] == '\\' && i + 2 < v.size()) ++i;
      out += v[i];
    }
    return out;
  }
  return std::string(v);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The value text with a trailing '# comment' removed (a '#' inside quotes is kept).
std::string_view strip_comment(std::string_view s) {
  char in = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (in) {
      if (s[i] == '\\' && in == '"') ++i;
      else if (s[i] == in) in = 0;
    } else if (s[i] == '"' || s[i] == '\'') {
      in = s[i];
    } else if (s[i] == '#') {
      return s.substr(0, i);
    }
  }
  return s;
}

}  // namespace

void validate_config(const TrainConfig& c) {
  check(one_of(c.device, {"cpu", "cuda"}), "config: device '", c.device, "' is not cpu or cuda");
  check(c.max_steps >= 0, "config: max-steps must be >= 0, got ", c.max_steps);
  check(c.save_every >= 0, "config: save-every must be >= 0, got ", c.save_every);
  check(c.log_trajectories >= 0, "config: log-trajectories must be >= 0, got ", c.log_trajectories);
  check(c.batch_size > 0, "config: batch-size must be positive, got ", c.batch_size);
  check(c.group_size > 0, "config: group-size must be positive, got ", c.group_size);
  check(c.temperature >= 0, "config: temperature must be >= 0, got ", c.temperature);
  check(c.top_p > 0 && c.top_p <= 1, "config: top-p must be in (0, 1], got ", c.top_p);
  check(c.top_k >= 0, "config: top-k must be >= 0, got ", c.top_k);
  check(c.reward_turn_budget >= 0, "config: reward-turn-budget must be >= 0, got ", c.reward_turn_budget);
  check(c.max_turns >= 0, "config: max-turns must be >= 0, got ", c.max_turns);
  check(c.max_turn_tokens > 0, "config: max-turn-tokens must be positive, got ", c.max_turn_tokens);
  check(c.max_total_tokens > 0, "config: max-total-tokens must be positive, got ", c.max_total_tokens);
  check(c.max_batch_sequences > 0, "config: max-batch-sequences must be positive, got ", c.max_batch_sequences);
  check(c.lr >= 0 && std::isfinite(c.lr), "config: lr must be a finite number >= 0, got ", c.lr);
  check(one_of(c.lr_schedule, {"constant", "cosine"}), "config: lr-schedule '", c.lr_schedule,
        "' is not constant or cosine");
  try {
    parse_loss_agg(c.loss_agg);
  } catch (const Error& e) {
    fail("config: ", e.what());
  }
  check(c.compare.empty() || one_of(c.compare, {"spider", "bird"}), "config: compare '", c.compare,
        "' is not spider or bird");
  check(c.clip_low >= 0 && c.clip_high >= 0, "config: clip-low/clip-high must be >= 0");
  check(c.kl_coef >= 0, "config: kl-coef must be >= 0, got ", c.kl_coef);
  check(c.ppo_epochs > 0 && c.mini_batches > 0, "config: ppo-epochs and mini-batches must be positive");
  check(c.micro_batch_tokens > 0, "config: micro-batch-tokens must be positive, got ", c.micro_batch_tokens);
  check(c.warmup_steps >= 0 && c.total_steps >= 0, "config: warmup-steps and total-steps must be >= 0");
  check(c.tiny_vocab >= 300, "config: tiny-vocab must be >= 300 (256 bytes + added tokens), got ", c.tiny_vocab);
  check(c.tiny_hidden > 0 && c.tiny_layers > 0 && c.tiny_heads > 0 && c.tiny_kv_heads > 0 && c.tiny_head_dim > 0 &&
            c.tiny_intermediate > 0,
        "config: tiny-* sizes must be positive");
}

std::string config_to_toml(const TrainConfig& config) {
  TrainConfig copy = config;
  std::string out = "# llm_sqlrl train: the resolved configuration of this run (CLI11 config format)\n";
  for (const ConfigField& f : config_fields(copy)) {
    out += f.key;
    out += " = ";
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>) out += *p ? "true" : "false";
          else if constexpr (std::is_same_v<T, double>) out += format_double(*p);
          else if constexpr (std::is_same_v<T, std::string>) out += quote(*p);
          else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            out += "[";
            for (size_t i = 0; i < p->size(); ++i) out += (i ? ", " : "") + quote((*p)[i]);
            out += "]";
          } else out += std::to_string(*p);
        },
        f.value);
    out += "\n";
  }
  return out;
}

TrainConfig read_config_toml(const std::string& path, std::vector<size_t>* present) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path, ": cannot read the config file");
  TrainConfig config;
  std::vector<ConfigField> fields = config_fields(config);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    std::string_view s = trim(strip_comment(line));
    if (s.empty() || s.front() == '[') continue;  // CLI11 accepts a [train] section header
    size_t eq = s.find('=');
    std::string where = str_cat(path, ":", line_no);
    check(eq != std::string_view::npos, where, ": expected key = value");
    std::string key(trim(s.substr(0, eq)));
    std::string_view value = trim(s.substr(eq + 1));
    const ConfigField* field = nullptr;
    for (const ConfigField& f : fields)
      if (key == f.key) field = &f;
    check(field != nullptr, where, ": unknown config key '", key, "'");
    if (present) present->push_back(static_cast<size_t>(field - fields.data()));
    where += str_cat(" (", key, ")");
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          std::string text = parse_string(value, where);
          if constexpr (std::is_same_v<T, bool>) {
            check(text == "true" || text == "false", where, ": expected true or false, got ", text);
            *p = text == "true";
          } else if constexpr (std::is_same_v<T, std::string>) {
            *p = text;
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            p->clear();
            check(value.size() >= 2 && value.front() == '[' && value.back() == ']', where, ": expected [\"...\", ...]");
            std::string_view body = trim(value.substr(1, value.size() - 2));
            while (!body.empty()) {
              size_t end = body.find(',');
              if (body.front() == '"') end = body.find(',', body.find('"', 1));
              p->push_back(parse_string(trim(body.substr(0, end)), where));
              body = end == std::string_view::npos ? std::string_view{} : trim(body.substr(end + 1));
            }
          } else {
            errno = 0;
            char* end = nullptr;
            if constexpr (std::is_same_v<T, double>) *p = std::strtod(text.c_str(), &end);
            else if constexpr (std::is_same_v<T, uint64_t>) *p = std::strtoull(text.c_str(), &end, 10);
            else *p = std::strtoll(text.c_str(), &end, 10);
            check(!text.empty() && end && *end == 0 && errno == 0, where, ": not a number: ", text);
          }
        },
        field->value);
  }
  return config;
}

void copy_config_field(const TrainConfig& from, TrainConfig& to, size_t index) {
  TrainConfig source = from;
  std::vector<ConfigField> src = config_fields(source), dst = config_fields(to);
  check(index < src.size(), "config field index ", index, " out of range");
  std::visit([&](auto* s) { *std::get<decltype(s)>(dst[index].value) = *s; }, src[index].value);
}

}  // namespace sqlrl::rl

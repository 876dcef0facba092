// `llm_sqlrl generate`: text generation with the paged KV cache, on the CPU (f32) or one GPU
// (bf16 weights, device sampler), streaming the decoded text to stdout as tokens arrive.
//   llm_sqlrl generate --weights DIR --tokenizer tokenizer.json --prompt TEXT | --chat FILE
//       [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--stop STR...]
//       [--adapter DIR] [--device cpu|cuda] [--config FILE]
// --prompt-ids / --print-ids bypass the tokenizer (tiny test models have byte-sized
// vocabularies); --resave DIR writes the loaded model back out (HF layout, f32) and exits.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/commands.h"
#include "app/options.h"
#include "model/infer.h"
#include "model/model.h"
#include "rl/options.h"
#include "rl/policy.h"
#include "rl/policy_backend.h"
#include "runtime/error.h"
#include "runtime/json_depth.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream.h"
#include "tokenizer/tokenizer.h"

namespace sqlrl {
namespace {

// The settings (one options table: flags and --config FILE); the prompt and the output mode are
// this call's inputs, plain flags.
struct GenerateSettings : rl::DeviceOptions, rl::ModelOptions, rl::AdapterOptions, rl::SamplingOptions {
  int64_t max_new_tokens = 128;
  uint64_t seed = 0;
  int64_t block_size = 16;
  std::vector<std::string> stops;
};

OptionTable generate_options(GenerateSettings& s) {
  OptionTable t;
  rl::add_model_options(t, s);
  rl::add_adapter_options(t, s);
  t.push_back({"max-new-tokens", "tokens to generate at most", &s.max_new_tokens});
  rl::add_sampling_options(t, s);
  t.insert(t.end(), {
      {"seed", "Philox seed", &s.seed},
      {"stop", "stop strings (kept in the output)", &s.stops},
      {"block-size", "KV-cache block size", &s.block_size},
  });
  rl::add_device_options(t, s);
  return t;
}

struct GenerateArgs {
  GenerateSettings settings;  // the flags' values
  TableFlags flags;
  std::string prompt, chat, resave;
  std::vector<int32_t> prompt_ids;
  bool print_ids = false;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "generate: cannot read ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void run_generate(GenerateArgs& args) {
  const GenerateSettings s = resolve_options(args.flags, args.settings, GenerateSettings{}, generate_options);
  rl::validate_groups(s, "generate");
  check(!s.weights.empty(), "generate: --weights is required (a checkpoint file or folder)");
  const rl::PolicyBackend& backend = rl::find_backend(s.device);
  rl::check_backend_usable(backend, "generate");
  check(s.max_new_tokens > 0 && s.block_size > 0, "generate: max-new-tokens and block-size must be positive");
  check(args.resave.empty() || s.adapter.empty(), "generate: --resave writes the weights alone; to write them with "
        "the adapter merged in: llm_sqlrl merge --weights ", s.weights, " --adapter ", s.adapter, " --out DIR");
  QwenModel model = load_model(s.weights);
  const std::unique_ptr<LoraAdapter> adapter = rl::load_adapter_option(s.adapter, model, "generate");
  if (!args.resave.empty()) {
    save_model(model, args.resave);
    std::printf("saved %lld parameters to %s\n", static_cast<long long>(model.num_params), args.resave.c_str());
    return;
  }
  int sources = !args.prompt.empty() + !args.chat.empty() + !args.prompt_ids.empty();
  check(sources == 1, "generate: give exactly one of --prompt, --chat, --prompt-ids");
  std::unique_ptr<Tokenizer> tok;
  if (const std::string path = rl::model_tokenizer_path(s); !path.empty()) tok = load_tokenizer(path);
  check(tok || (args.print_ids && !args.prompt_ids.empty()),
        "generate: no tokenizer.json beside the weights: give --tokenizer PATH (only --prompt-ids with --print-ids "
        "needs none)");
  std::vector<int32_t> prompt = args.prompt_ids;
  if (!args.prompt.empty()) prompt = encode(*tok, args.prompt);
  if (!args.chat.empty()) {
    std::vector<ChatMessage> messages;
    ChatOptions options;
    const std::string text = read_text(args.chat);
    check_json_depth(text, args.chat);
    chat_request_from_json(nlohmann::ordered_json::parse(text), &messages, &options);
    options.add_generation_prompt = true;
    prompt = encode(*tok, render_chat(messages, options));
  }
  check(!prompt.empty(), "generate: the prompt encodes to no tokens");
  for (size_t i = 0; i < prompt.size(); ++i)
    check(prompt[i] >= 0 && prompt[i] < model.config.vocab_size, "generate: prompt token ", prompt[i], " at ", i,
          " is outside the model's vocabulary of ", model.config.vocab_size);

  // The prompt and what may follow it must fit the model's positions: beyond them RoPE runs at
  // positions the model never saw, and the KV cache below is sized for all of it.
  const int64_t context = model.config.max_position_embeddings;
  check(static_cast<int64_t>(prompt.size()) < context, "generate: the prompt is ", prompt.size(),
        " tokens, the model's context (max_position_embeddings) ", context);
  check(s.max_new_tokens <= context - static_cast<int64_t>(prompt.size()), "generate: max-new-tokens ",
        s.max_new_tokens, " past a prompt of ", prompt.size(), " tokens exceeds the model's context of ", context,
        " (at most ", context - static_cast<int64_t>(prompt.size()), ")");

  GenerateOptions options;
  options.max_new_tokens = s.max_new_tokens;
  options.sampling = {static_cast<float>(s.temperature), s.top_k, static_cast<float>(s.top_p), s.seed};
  for (int64_t id : model.config.eos_token_ids) options.stop_tokens.push_back(static_cast<int32_t>(id));
  int64_t total = static_cast<int64_t>(prompt.size()) + s.max_new_tokens;
  int64_t blocks = (total + s.block_size - 1) / s.block_size + 1;

  std::unique_ptr<TokenStream> stream;
  if (tok && !args.print_ids) stream = std::make_unique<TokenStream>(*tok, s.stops, true);
  auto on_token = [&](int64_t, int32_t token) {
    if (!stream) return true;
    TokenStream::Step step = stream->push(token);
    std::fwrite(step.text.data(), 1, step.text.size(), stdout);
    std::fflush(stdout);
    return step.stop < 0;
  };
  // Fails in one line naming why: no device, or a head_dim the CUDA attention does not take.
  rl::Policy policy = rl::frozen_policy(backend, model);
  // The adapter (if any) unmerged on either device (CUDA: uploaded beside the base, no gradients).
  rl::policy_attach_lora(policy, adapter.get(), /*grads=*/false);
  const std::vector<GeneratedSample> samples = rl::policy_generate(policy, prompt, blocks, s.block_size, options, on_token);
  if (stream) {
    if (!stream->stopped) {
      TokenStream::Step step = stream->finish();
      std::fwrite(step.text.data(), 1, step.text.size(), stdout);
    }
    std::printf("\n");
  } else {
    for (size_t i = 0; i < samples[0].tokens.size(); ++i) std::printf(i ? " %d" : "%d", samples[0].tokens[i]);
    std::printf("\n");
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text with a Qwen2/Qwen3 checkpoint (CPU or one GPU)");
  add_table_flags(cmd, generate_options(args->settings), args->flags);
  cmd->add_option("--prompt", args->prompt, "prompt text");
  cmd->add_option("--chat", args->chat, "JSON file {\"messages\": [...]} rendered with the ChatML template");
  cmd->add_option("--prompt-ids", args->prompt_ids, "prompt as token ids (no tokenizer)")->delimiter(',');
  cmd->add_flag("--print-ids", args->print_ids, "print generated token ids instead of text");
  cmd->add_option("--resave", args->resave, "save the loaded model to this folder and exit");
  cmd->callback([args] { run_generate(*args); });
}

}  // namespace sqlrl

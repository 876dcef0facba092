// `llm_sqlrl tokenize`: JSON lines in, JSON lines out.
//   {"text": ...}             -> {"ids": [...]}
//   {"ids": [...]} (--decode)  -> {"text": ...}
//   golden chat object (--chat) -> {"rendered": ...}; --template qwen3|qwen2.5, else detected
//   from the --tokenizer folder's chat template, else qwen3
// `llm_sqlrl tokenize train --corpus F --vocab-size N --out tokenizer.json` trains a small BPE.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/commands.h"
#include "runtime/error.h"
#include "runtime/json_depth.h"
#include "runtime/file_io.h"
#include "runtime/log.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/trainer.h"

namespace sqlrl {
namespace {

struct TokenizeArgs {
  std::string tokenizer;
  std::string input;
  bool decode = false;
  bool chat = false;
  bool skip_special = false;
  std::string chat_template;  // "qwen3", "qwen2.5" or empty (detect)
};

struct TrainArgs {
  std::string corpus;
  std::string out;
  size_t vocab_size = 1024;
  size_t min_frequency = 2;
};

void run_tokenize(const TokenizeArgs& args) {
  check(!args.tokenizer.empty() || args.chat, "tokenize: --tokenizer PATH is required (except with --chat)");
  check(!(args.decode && args.chat), "tokenize: --decode and --chat are exclusive");
  check(args.chat_template.empty() || args.chat, "tokenize: --template needs --chat");
  std::unique_ptr<Tokenizer> tok;
  ChatTemplate chat_template = ChatTemplate::qwen3;
  if (args.chat) {
    // Rendering needs no vocabulary: the tokenizer path only tells which template to use.
    if (!args.chat_template.empty()) {
      chat_template = chat_template_from_name(args.chat_template);
    } else if (!args.tokenizer.empty()) {
      std::optional<ChatTemplate> detected = detect_chat_template_for_tokenizer(args.tokenizer);
      if (detected) chat_template = *detected;
      else log_warn("tokenize: no known chat template next to ", args.tokenizer, "; using qwen3");
    }
  } else if (!args.tokenizer.empty()) {
    tok = load_tokenizer(args.tokenizer);
  }
  std::ifstream file;
  std::istream* in = &std::cin;
  std::string source = "stdin";
  if (!args.input.empty()) {
    file.open(args.input, std::ios::binary);
    check(file.good(), args.input, ": cannot open input file");
    in = &file;
    source = args.input;
  }
  std::string line;
  size_t line_no = 0;
  while (std::getline(*in, line)) {
    ++line_no;
    if (line.empty() || line == "\r") continue;
    check_json_depth(line, str_cat(source, ":", line_no));
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(source, ":", line_no, ": not valid JSON: ", e.what());
    }
    nlohmann::ordered_json out;
    try {
      if (args.chat) {
        std::vector<ChatMessage> messages;
        ChatOptions options;
        options.chat_template = chat_template;
        chat_request_from_json(j, &messages, &options);
        out["rendered"] = render_chat(messages, options);
      } else if (args.decode) {
        check(j.is_object() && j.contains("ids") && j["ids"].is_array(), "expected {\"ids\": [...]}");
        std::vector<int32_t> ids;
        for (const auto& v : j["ids"]) {
          check(v.is_number_integer(), "ids must be integers");
          // get<int32_t> wraps: 4294967297 decoded as id 1. Out of range is an error (the
          // decoder names ids past the vocabulary itself).
          const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t{INT32_MAX}
                                                       : v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX;
          check(in_range, "id ", v.dump(), " is not a token id (0 to ", INT32_MAX, ")");
          ids.push_back(v.get<int32_t>());
        }
        out["text"] = decode(*tok, ids, args.skip_special);
      } else {
        check(j.is_object() && j.contains("text") && j["text"].is_string(), "expected {\"text\": \"...\"}");
        out["ids"] = encode(*tok, j["text"].get_ref<const std::string&>());
      }
    } catch (const Error& e) {
      fail(source, ":", line_no, ": ", e.what());
    }
    std::string text = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
  }
  std::fflush(stdout);
}

void run_train(const TrainArgs& args) {
  std::ifstream in(args.corpus, std::ios::binary);
  check(in.good(), args.corpus, ": cannot open corpus file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  BpeTrainOptions options;
  options.vocab_size = args.vocab_size;
  options.min_frequency = args.min_frequency;
  options.progress = true;
  BpeTrainResult result = train_bpe(buffer.str(), options);
  write_text_atomic(args.out, result.tokenizer_json);  // a crash never leaves half a tokenizer.json
  log_info("tokenize train: ", result.merges, " merges, ", result.vocab_size, " ids (requested ", args.vocab_size, ") -> ", args.out);
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  auto train = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode / decode JSON lines with a tokenizer.json, or render chat templates");
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json path or model folder");
  cmd->add_option("--input", args->input, "JSON-lines input file (default: stdin)");
  cmd->add_flag("--decode", args->decode, "input lines are {\"ids\": [...]}; write {\"text\": ...}");
  cmd->add_flag("--chat", args->chat, "input lines are chat requests; write {\"rendered\": ...}");
  cmd->add_flag("--skip-special", args->skip_special, "with --decode, leave special tokens out");
  cmd->add_option("--template", args->chat_template,
                  "with --chat: qwen3 or qwen2.5 (default: detected from the --tokenizer folder, else qwen3)")
      ->check(CLI::IsMember({"qwen3", "qwen2.5"}));
  cmd->require_subcommand(0, 1);
  CLI::App* train_cmd = cmd->add_subcommand("train", "Train a small byte-level BPE tokenizer (Qwen3 format and added tokens)");
  train_cmd->add_option("--corpus", train->corpus, "UTF-8 text file")->required();
  train_cmd->add_option("--vocab-size", train->vocab_size, "total ids, added tokens included")->required();
  train_cmd->add_option("--min-frequency", train->min_frequency, "pairs seen fewer times are not merged");
  train_cmd->add_option("--out", train->out, "output tokenizer.json")->required();
  train_cmd->callback([train] { run_train(*train); });
  cmd->callback([cmd, train_cmd, args] {
    if (train_cmd->parsed()) return;
    (void)cmd;
    run_tokenize(*args);
  });
}

}  // namespace sqlrl

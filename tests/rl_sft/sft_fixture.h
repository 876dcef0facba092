// A tiny world for the SFT tests: a BPE tokenizer trained here (Qwen3 added tokens, so the
// chat markup is single tokens), a small random Qwen3 model of its vocabulary, a per-binary
// temporary folder and a small synthetic benchmark.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "tests/rl_grpo/grpo_fixture.h"
#include "tests/test_util.h"
#include "sql/data/synth.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/trainer.h"

namespace sqlrl::testing {

inline const std::string& sft_tokenizer_json() {
  static std::string json = [] {
    std::string corpus;
    for (int i = 0; i < 20; ++i)
      corpus += "<|im_start|>system\nYou answer questions with SQL.<|im_end|>\n<|im_start|>user\nHow many cities are "
                "there?<|im_end|>\n<|im_start|>assistant\n<think>\ncount the rows\n</think>\n<sql>SELECT count(*) FROM "
                "city WHERE population > 1000 ORDER BY id;</sql><|im_end|>\n<tool_response>\nname population 3\n"
                "</tool_response>\n<solution>SELECT name FROM city</solution>\n";
    BpeTrainOptions options;
    options.vocab_size = 400;
    return train_bpe(corpus, options).tokenizer_json;
  }();
  return json;
}

inline const Tokenizer& sft_tokenizer() {
  static std::unique_ptr<Tokenizer> tok = load_tokenizer_from_string(sft_tokenizer_json(), "sft-tiny-bpe");
  return *tok;
}

// A random Qwen3 of the given vocabulary (the GRPO tests' initialisation: norm scales 1, the
// rest N(0, stddev)).
inline QwenModel sft_model(int64_t vocab, uint64_t seed = 7, float stddev = 0.05f) {
  QwenConfig c;
  c.arch = QwenArch::Qwen3;
  c.vocab_size = vocab;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.tie_word_embeddings = true;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 8192;
  return random_model(c, seed, stddev);
}

inline std::string sft_temp_dir() {
  static std::string dir = [] {
    auto d = process_temp_path("sqlrl_sft_test");
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d.string();
  }();
  return dir;
}

// A small synthetic benchmark (written once per binary): 2 train databases, many traps.
inline std::string small_bench() {
  static std::string dir = [] {
    std::string d = sft_temp_dir() + "/bench";
    sql::SynthOptions o;
    o.seed = 5;
    o.train_databases = 2;
    o.dev_databases = 1;
    o.questions_per_database = 16;
    o.dialogues_per_database = 4;
    o.trap_share = 0.6;
    sql::write_synth_benchmark(d, o);
    return d;
  }();
  return dir;
}

}  // namespace sqlrl::testing

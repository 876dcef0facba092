// One row per paper: everything the tree knows of a paper, in one table (rl/agent/paper.cpp). A
// row's name names its protocol (`--protocol`), its reward panel (`--reward`) and its recipe
// (configs/<name>.toml, `--config <name>`); no code compares a paper's name anywhere else.
//
//   field         what it gives                                     used by
//   make_protocol the agent protocol (rl/agent/protocol_<name>.cpp)  make_protocol
//   terms, score  the reward panel: terms with the paper's weights,  make_reward_panel, score
//                 and each term's raw value (rl/agent/reward_terms.cpp)
//   dialogues     trains on dialogues (the built-in benchmark's      train's default data
//                 SParC-format set): MTSQL-R1's memory reads them
//   bird_compare  EX by BIRD's set equality when `compare` is unset  train's EX comparison
//   embedded_corpus  its first prompts are in the embedded tokenizer's rl/grpo/train_embedded.cpp
//                 training text
//
// The demonstration writer of each paper is its protocol's demo_turn, beside its parser.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "rl/agent/protocol.h"
#include "rl/agent/reward.h"

namespace sqlrl::rl {

namespace detail {
struct Outcome;  // rl/agent/reward_detail.h: what every panel knows of the final answer
}

struct Paper {
  const char* name;
  const char* citation;  // title and arXiv id (or venue)
  std::unique_ptr<Protocol> (*make_protocol)(const ProtocolSettings& settings);
  std::vector<RewardTerm> terms;
  std::vector<double> (*score)(const sql::Example& example, const Trajectory& trajectory, const detail::Outcome& outcome,
                               RewardContext& ctx);
  bool dialogues = false;
  bool bird_compare = false;
  // The embedded BPE tokenizer (trained on the synthetic benchmark for the tiny model) learns from
  // these rows' first prompts. A row added after the embedded demo's figures were measured stays
  // out, so that the demo keeps its tokenizer and its results bit for bit; its prompt text is
  // still encoded, in smaller pieces (byte-level BPE covers any text).
  bool embedded_corpus = false;
};

const std::vector<Paper>& papers();
// The row named `name`; an unknown name is a one-line error naming `key` and the rows.
const Paper& find_paper(const std::string& name, const char* key = "protocol");
std::vector<std::string> paper_names();
// The protocol option's help: "agent protocol (prompt, tags, tools, reward panel): skyrl (<citation>) | ...".
const char* protocol_help();

}  // namespace sqlrl::rl

#include "rl/agent/paper.h"

#include "rl/agent/protocol_impl.h"  // each paper's protocol factory
#include "rl/agent/reward_detail.h"  // each paper's terms
#include "runtime/error.h"

namespace sqlrl::rl {

namespace {

std::unique_ptr<Protocol> skyrl_protocol(const ProtocolSettings&) { return detail::make_skyrl(); }

const std::vector<Paper>& table() {
  static const std::vector<Paper> rows = {
      // SkyRL-SQL §4.1: one piecewise reward, −1 / 0 / 1. The released reward compares result sets
      // (skyrl-gym/skyrl_gym/envs/sql/utils.py, frozenset): BIRD's comparison by default.
      {"skyrl", "SkyRL-SQL (MTI-LLM workshop at NeurIPS 2025, OpenReview VNPGUGbC1p)", skyrl_protocol,
       {{"outcome", 1}}, detail::skyrl_terms, false, true, true},
      // SQL-Trail §3.3.2 eq. 4 = A.4 eq. 12: 5·exec + 2·turns + schema + bigram + syntax + format.
      {"sqltrail", "SQL-Trail (arXiv 2601.17699)", detail::make_sqltrail,
       {{"exec", 5}, {"turns", 2}, {"schema", 1}, {"bigram", 1}, {"syntax", 1}, {"format", 1}}, detail::sqltrail_terms,
       false, false, true},
      // MTIR-SQL §3.3: R_f = ±0.1 (eq. 5), R_e = +0.1 / 0 / −0.1 (eq. 6), R_r = +1 / 0 / −1 (eq. 7).
      // Raw terms are ±1 so the weight is the magnitude the paper's ablation varies (Table 5:
      // format reward 0, 0.1, 0.2, 0.3).
      {"mtir", "MTIR-SQL (arXiv 2510.25510)", detail::make_mtir, {{"format", 0.1}, {"exec", 0.1}, {"result", 1.0}},
       detail::mtir_terms, false, false, true},
      // MTSQL-R1 §3.3.2: R_all = w1·EX + w2·EM + w3·R_propose/self-correct + w4·(R_E-verify +
      // R_M-verify). The paper only says the w are grid-searched; these are the authors' released
      // reward (taichengguo/MTSQL-R1 verl/utils/reward_score/text2sql_process.py): 1, 1, 0.8, 0.1.
      // A dialogue protocol: memory_retrieve reads the dialogue's earlier turns.
      {"mtsql", "MTSQL-R1 (arXiv 2510.12831)", detail::make_mtsql,
       {{"ex", 1}, {"em", 1}, {"clause_f1", 0.8}, {"verify", 0.1}}, detail::mtsql_terms, true, false, true},
      // Arctic-Text2SQL-R1 §3 (as quoted; docs/paper-arctic.md): execution alone, 1 / 0.1 / 0, one
      // turn. The authors' evaluation compares result sets (snowflakedb/ArcticTraining
      // projects/arctic_text2sql_r1/bird_eval/evaluate_bird.py compare_sql): BIRD's comparison.
      // Added after the embedded demo's figures: not in the embedded tokenizer's corpus.
      {"arctic", "Arctic-Text2SQL-R1 (arXiv 2505.20315)", detail::make_arctic, {{"execution", 1}}, detail::arctic_terms,
       false, true, false},
  };
  return rows;
}

}  // namespace

const std::vector<Paper>& papers() { return table(); }

std::vector<std::string> paper_names() {
  std::vector<std::string> out;
  for (const Paper& p : table()) out.push_back(p.name);
  return out;
}

const Paper& find_paper(const std::string& name, const char* key) {
  for (const Paper& p : table())
    if (name == p.name) return p;
  std::string known;
  for (const Paper& p : table()) known += (known.empty() ? "" : ", ") + std::string(p.name);
  fail(key, ": unknown name '", name, "' (known: ", known, ")");
}

const char* protocol_help() {
  static const std::string help = [] {
    std::string out = "agent protocol, with its prompt, tags, tools and reward panel: ";
    for (size_t i = 0; i < table().size(); ++i)
      out += (i ? " | " : "") + std::string(table()[i].name) + " (" + table()[i].citation + ")";
    return out;
  }();
  return help.c_str();
}

std::unique_ptr<Protocol> make_protocol(const std::string& name, const ProtocolSettings& settings) {
  check(settings.mtir_rethink == "assistant" || settings.mtir_rethink == "user",
        "protocol: mtir-rethink must be assistant or user, got '", settings.mtir_rethink, "'");
  return find_paper(name).make_protocol(settings);
}

std::vector<std::string> protocol_names() { return paper_names(); }

}  // namespace sqlrl::rl

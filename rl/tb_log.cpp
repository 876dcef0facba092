#include "rl/tb_log.h"

#include <filesystem>

#include "runtime/error.h"

namespace sqlrl::rl {
namespace {

void flatten(const nlohmann::ordered_json& j, const std::string& tag, std::vector<std::pair<std::string, double>>& out) {
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) flatten(value, tag.empty() ? key : tag + "/" + key, out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) flatten(j[i], tag + "/" + std::to_string(i), out);
  } else if (j.is_boolean()) {
    out.emplace_back(tag, j.get<bool>() ? 1.0 : 0.0);
  } else if (j.is_number()) {
    out.emplace_back(tag, j.get<double>());
  }
}

// Markdown: an indented block is shown verbatim (no fence a model's text could close).
std::string code_block(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == 0 || text[i - 1] == '\n') out += "    ";
    out += text[i];
  }
  return out;
}

}  // namespace

std::string tb_log_dir(const std::string& run_dir, const std::string& tb_dir) {
  return tb_dir.empty() ? (std::filesystem::path(run_dir) / "tb").string() : tb_dir;
}

void truncate_tb_log(const std::string& tb_dir, int64_t step) {
  truncate_event_files(tb_dir, [step](int64_t s, const std::string& tag) {
    return s < step || (s == step && tag != "config");
  });
}

TbLog open_tb_log(const std::string& tb_dir, int64_t step, const std::string& config_toml) {
  TbLog log{create_event_file(tb_dir)};
  if (!config_toml.empty()) write_text(log.file, step, "config", code_block(config_toml));
  return log;
}

std::vector<std::pair<std::string, double>> metrics_scalars(const nlohmann::ordered_json& line) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [key, value] : line.items())
    if (key != "step") flatten(value, key, out);
  return out;
}

void tb_log_metrics(TbLog& log, const nlohmann::ordered_json& line) {
  check(line.contains("step") && line["step"].is_number_integer(), log.file.path,
        ": a metrics line without an integer \"step\": ", line.dump().substr(0, 80));
  write_scalars(log.file, line["step"].get<int64_t>(), metrics_scalars(line));
}

void tb_log_trajectories(TbLog& log, int64_t step, const std::vector<std::string>& jsonl_lines) {
  if (jsonl_lines.empty()) return;
  std::string md;
  for (const std::string& line : jsonl_lines) {
    const nlohmann::ordered_json t = nlohmann::ordered_json::parse(line);
    md += str_cat("**", t.value("example_id", std::string("?")), "** sample ", t.value("sample", int64_t{0}),
                  ", reward ", t.value("reward", 0.0), ", EX ", t.value("ex", int64_t{0}), "\n\n");
    md += code_block(t.dump(2)) + "\n\n";
  }
  write_text(log.file, step, "trajectories", md);
}

}  // namespace sqlrl::rl

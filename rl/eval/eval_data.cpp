// What an evaluation reads: the split, its EX semantics, whether it is a dialogue dataset. One
// place for `eval` and for evaluation during `train`, so both score the same questions the same way.
#include <filesystem>

#include "rl/eval/eval.h"
#include "runtime/error.h"

namespace fs = std::filesystem;

namespace sqlrl::rl {

sql::LoadOptions eval_load_options(const std::string& spec, const std::string& split, const std::string& key) {
  sql::LoadOptions load = sql::parse_dataset_spec(spec, split, key);
  load.compute_difficulty = true;  // EX by difficulty needs a label on every question
  check(fs::is_directory(load.dir), key, " '", spec, "': dataset folder does not exist: ", load.dir, " (",
        sql::dataset_format_name(load.format), " comes from ", sql::dataset_source(load.format), ")");
  return load;
}

std::vector<sql::Example> load_eval_examples(const sql::LoadOptions& load, int64_t limit, const std::string& what) {
  std::vector<sql::Example> examples = sql::load_dataset(load).examples;
  if (limit > 0 && static_cast<size_t>(limit) < examples.size()) examples.resize(static_cast<size_t>(limit));
  check(!examples.empty(), what, " (", load.split, ") has no examples");
  return examples;
}

sql::CompareMode eval_compare_mode(const std::string& compare, sql::DatasetFormat format, const std::string& key) {
  check(compare.empty() || compare == "spider" || compare == "bird", key, " '", compare,
        "': expected spider or bird");
  const bool bird = compare.empty() ? format == sql::DatasetFormat::Bird : compare == "bird";
  return bird ? sql::CompareMode::BirdSet : sql::CompareMode::Spider;
}

bool dialogue_format(sql::DatasetFormat format) {
  return format == sql::DatasetFormat::Sparc || format == sql::DatasetFormat::Cosql;
}

}  // namespace sqlrl::rl

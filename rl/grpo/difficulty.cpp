#include "rl/grpo/difficulty.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/file_io.h"

namespace sqlrl::rl {

std::vector<Difficulty> difficulty_of(const std::vector<sql::Example>& examples,
                                      const std::vector<ExampleResult>& results, bool ex_and_em) {
  check(results.size() == examples.size(), "difficulty: ", results.size(), " results for ", examples.size(),
        " questions");
  std::vector<Difficulty> out;
  for (size_t i = 0; i < results.size(); ++i) {
    Difficulty d{examples[i].id, static_cast<int64_t>(results[i].samples.size()), 0};
    for (const SampleOutcome& s : results[i].samples) d.solved += s.ex && (!ex_and_em || s.em);
    out.push_back(d);
  }
  return out;
}

std::string difficulty_jsonl(const std::vector<sql::Example>& examples, const std::vector<Difficulty>& d) {
  std::string out;
  for (size_t i = 0; i < d.size(); ++i) {
    nlohmann::ordered_json j;
    j["index"] = i;
    j["id"] = d[i].id;
    j["difficulty"] = i < examples.size() ? examples[i].difficulty : "";
    j["samples"] = d[i].samples;
    j["solved"] = d[i].solved;
    out += j.dump() + "\n";
  }
  return out;
}

std::vector<Difficulty> read_difficulty_jsonl(const std::string& path, const std::vector<sql::Example>& examples) {
  const std::string text = read_file_text(path);
  std::vector<Difficulty> out;
  size_t line = 0;
  for (size_t at = 0, nl; at < text.size(); at = nl + 1) {
    nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    ++line;
    if (nl == at) continue;
    const size_t i = out.size();
    Difficulty d;
    try {
      const nlohmann::json j = nlohmann::json::parse(text.substr(at, nl - at));
      check(j.at("index").get<size_t>() == i, "index ", j.at("index").get<size_t>(), " where ", i, " was expected");
      d.id = j.at("id").get<std::string>();
      d.samples = j.at("samples").get<int64_t>();
      d.solved = j.at("solved").get<int64_t>();
    } catch (const std::exception& e) {
      fail(path, ":", line, ": ", e.what());
    }
    check(i < examples.size(), path, ":", line, ": more questions than the ", examples.size(), " of the training split");
    check(d.id == examples[i].id, path, ":", line, ": question '", d.id, "' where the training split has '",
          examples[i].id, "' (another dataset or split?)");
    check(d.samples > 0 && d.solved >= 0 && d.solved <= d.samples, path, ":", line, ": solved ", d.solved, " of ",
          d.samples, " samples");
    out.push_back(d);
  }
  check(out.size() == examples.size(), path, ": ", out.size(), " questions, the training split has ", examples.size());
  return out;
}

ScheduleCounts count_pass_rates(const std::vector<Difficulty>& d) {
  ScheduleCounts c;
  for (const Difficulty& q : d) {
    if (q.solved == q.samples) ++c.always;
    else if (q.solved == 0) ++c.never;
    else ++c.sometimes;
  }
  return c;
}

std::vector<int64_t> curate_pass_at_g(const std::vector<Difficulty>& d, int64_t keep, int64_t unsolved,
                                      ScheduleCounts* counts) {
  std::vector<int64_t> sometimes, never;
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i].solved == 0) never.push_back(static_cast<int64_t>(i));
    else if (d[i].solved < d[i].samples) sometimes.push_back(static_cast<int64_t>(i));
  }
  // Ascending S(q) = pass rate (exact as a cross product: sample counts may differ per line).
  std::stable_sort(sometimes.begin(), sometimes.end(), [&](int64_t a, int64_t b) {
    return d[a].solved * d[b].samples < d[b].solved * d[a].samples;
  });
  if (keep > 0 && keep < static_cast<int64_t>(sometimes.size())) sometimes.resize(static_cast<size_t>(keep));
  if (static_cast<int64_t>(never.size()) > unsolved) never.resize(static_cast<size_t>(unsolved));
  std::vector<int64_t> out = sometimes;
  out.insert(out.end(), never.begin(), never.end());
  std::sort(out.begin(), out.end());
  if (counts) *counts = count_pass_rates(d), counts->kept = static_cast<int64_t>(out.size());
  return out;
}

std::vector<std::vector<int64_t>> curriculum_levels(const std::vector<Difficulty>& d, int64_t bin_size,
                                                    ScheduleCounts* counts) {
  check(bin_size > 0, "curriculum: bin size must be positive, got ", bin_size);
  std::vector<int64_t> order;
  for (size_t i = 0; i < d.size(); ++i)
    if (d[i].solved < d[i].samples) order.push_back(static_cast<int64_t>(i));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return d[a].solved * d[b].samples > d[b].solved * d[a].samples;
  });
  std::vector<std::vector<int64_t>> levels;
  for (size_t at = 0; at < order.size(); at += static_cast<size_t>(bin_size))
    levels.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(at),
                        order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), at + static_cast<size_t>(bin_size))));
  if (counts) {
    *counts = count_pass_rates(d);
    counts->kept = static_cast<int64_t>(order.size());
    for (const auto& l : levels) counts->level_sizes.push_back(static_cast<int64_t>(l.size()));
  }
  return levels;
}

}  // namespace sqlrl::rl

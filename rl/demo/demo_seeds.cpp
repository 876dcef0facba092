// `demo --seeds`: one configuration on several seeds, and the papers' two claims judged against
// the spread the seed alone produces (rl/demo/demo.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "rl/demo/demo.h"
#include "rl/demo/demo_format.h"
#include "runtime/error.h"
#include "runtime/json_depth.h"
#include "runtime/file_io.h"

namespace fs = std::filesystem;

namespace sqlrl::rl {
namespace {

// The value at a path of keys into report.json ("grid", "multi", "multi"); null when absent.
const nlohmann::json* find_cell(const nlohmann::json& report, const std::vector<const char*>& path) {
  const nlohmann::json* j = &report;
  for (const char* key : path) {
    if (!j->is_object() || !j->contains(key)) return nullptr;
    j = &j->at(key);
  }
  return j;
}

double cell(const nlohmann::json& report, const std::vector<const char*>& path) {
  const nlohmann::json* j = find_cell(report, path);
  if (j == nullptr) {
    std::string where = "report.json";
    for (const char* key : path) where += str_cat(".", key);
    fail("demo seeds: seed ", report.value("seed", 0), ": no ", where);
  }
  return j->get<double>();
}

// EX of every category whose label starts with `prefix` (stored_form:* are several), pooled.
double category_ex(const nlohmann::json& details, const std::string& prefix) {
  int64_t n = 0;
  double correct = 0;
  for (const auto& [label, t] : details.at("by_category").items())
    if (label.rfind(prefix, 0) == 0) {
      n += t.at("n").get<int64_t>();
      correct += t.at("ex").get<double>() * t.at("n").get<double>();
    }
  return n ? correct / static_cast<double>(n) : 0.0;
}

struct Claim {
  const char* name;
  const char* text;
  std::vector<const char*> treatment, baseline;
  const char* baseline_label;
};

const Claim kClaims[] = {
    {"multi_turn_beats_single_turn",
     "multi-turn GRPO evaluated multi-turn beats single-turn GRPO evaluated single-turn (SkyRL-SQL's 2x2)",
     {"grid", "multi", "multi"}, {"grid", "single", "single"}, "single x single"},
    {"grpo_beats_sft", "multi-turn GRPO beats its SFT start (multi-turn EX)", {"dev_ex", "rl"}, {"dev_ex", "sft"}, "SFT"},
};

double spread(const std::vector<double>& x) {
  return x.empty() ? 0.0 : *std::max_element(x.begin(), x.end()) - *std::min_element(x.begin(), x.end());
}

}  // namespace

nlohmann::ordered_json demo_seeds_json(const std::vector<nlohmann::json>& reports) {
  check(!reports.empty(), "demo seeds: no report");
  nlohmann::ordered_json j;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const nlohmann::json& r : reports) {
    nlohmann::ordered_json row;
    row["seed"] = r.at("seed");
    row["sft"] = {{"multi", cell(r, {"stages", "sft", "multi_turn", "ex"})},
                  {"single", cell(r, {"stages", "sft", "single_turn", "ex"})}};
    row["grid"] = r.at("grid");
    for (const char* trained : {"single", "multi"})
      if (r.at("grid_details").contains(trained))
        for (const char* evaluated : {"single", "multi"}) {
          const nlohmann::json& d = r["grid_details"][trained][evaluated];
          row["categories"][trained][evaluated] = {{"stored_form", category_ex(d, "stored_form")},
                                                   {"plain", category_ex(d, "plain")}};
        }
    row["copy_error_rate"] = r["grid_details"]["multi"]["multi"].value("copy_error_rate", 0.0);
    row["sft_dev_loss"] = r.at("sft_loss").value("dev", 0.0);
    row["seconds"] = r.at("seconds");
    row["cpu_seconds"] = r.at("cpu_seconds");
    rows.push_back(row);
  }
  j["seeds"] = rows;
  nlohmann::ordered_json claims = nlohmann::ordered_json::array();
  for (const Claim& c : kClaims) {
    // A run without the single-turn GRPO run (rl_single_turn = 0) has no grid.single: that claim
    // has nothing to compare.
    const bool complete = std::all_of(reports.begin(), reports.end(), [&](const nlohmann::json& r) {
      return find_cell(r, c.treatment) != nullptr && find_cell(r, c.baseline) != nullptr;
    });
    if (!complete) {
      j["claims"].push_back({{"name", c.name}, {"claim", c.text}, {"holds", false}, {"missing", true}});
      continue;
    }
    std::vector<double> t, b, margins;
    for (const nlohmann::json& r : reports) {
      t.push_back(cell(r, c.treatment));
      b.push_back(cell(r, c.baseline));
      margins.push_back(t.back() - b.back());
    }
    const double smallest = *std::min_element(margins.begin(), margins.end());
    double mean = 0;
    for (double m : margins) mean += m / static_cast<double>(margins.size());
    // Held: on every seed the treatment wins by more than the baseline moves between seeds, which
    // also puts the worst seed's treatment above the best seed's baseline. One seed has no spread.
    const bool holds = reports.size() >= 2 && smallest > 0 && smallest > spread(b);
    j["claims"].push_back({{"name", c.name},
                           {"claim", c.text},
                           {"baseline", c.baseline_label},
                           {"margins", margins},
                           {"smallest_margin", smallest},
                           {"mean_margin", mean},
                           {"baseline_spread", spread(b)},
                           {"treatment_spread", spread(t)},
                           {"holds", holds}});
  }
  return j;
}

std::string demo_seeds_table(const nlohmann::json& s) {
  const nlohmann::json& rows = s.at("seeds");
  std::string seeds;
  for (const nlohmann::json& r : rows) seeds += str_cat(seeds.empty() ? "" : ", ", r.at("seed").get<uint64_t>());
  std::string t = str_cat(
      "EX (%) by seed (", seeds, "), trained -> evaluated; MM = multi-turn GRPO evaluated multi-turn, SS = single-turn "
      "GRPO evaluated single-turn\n\n| seed | SFT multi / single | single -> single | single -> multi | multi -> single | "
      "multi -> multi | MM - SS | GRPO - SFT (multi) | stored_form MM / SS | plain MM / SS | copy errors MM | SFT dev "
      "loss | wall s | CPU s |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const nlohmann::json& r : rows) {
    const nlohmann::json& g = r.at("grid");
    const bool single = g.contains("single");
    auto g_cell = [&](const char* trained, const char* evaluated) {
      return g.contains(trained) ? pct(g[trained][evaluated].get<double>()) : std::string("-");
    };
    auto cat = [&](const char* name) {
      if (!single) return pct(r["categories"]["multi"]["multi"][name].get<double>()) + " / -";
      return pct(r["categories"]["multi"]["multi"][name].get<double>()) + " / " +
             pct(r["categories"]["single"]["single"][name].get<double>());
    };
    const double mm = g["multi"]["multi"].get<double>();
    t += str_cat("| ", r["seed"].get<uint64_t>(), " | ", pct(r["sft"]["multi"].get<double>()), " / ",
                 pct(r["sft"]["single"].get<double>()), " | ", g_cell("single", "single"), " | ", g_cell("single", "multi"),
                 " | ", g_cell("multi", "single"), " | ", g_cell("multi", "multi"), " | ",
                 single ? signed_pct(mm - g["single"]["single"].get<double>()) : std::string("-"), " | ",
                 signed_pct(mm - r["sft"]["multi"].get<double>()), " | ", cat("stored_form"), " | ", cat("plain"), " | ",
                 pct(r["copy_error_rate"].get<double>()), " | ", fixed(r["sft_dev_loss"].get<double>(), 3), " | ",
                 static_cast<int64_t>(r["seconds"].get<double>()), " | ", static_cast<int64_t>(r["cpu_seconds"].get<double>()),
                 " |\n");
  }
  t += "\nA claim holds when, on every seed, its margin is positive and larger than the spread (max - min over the "
       "seeds) of its baseline.\n\n";
  for (const nlohmann::json& c : s.at("claims")) {
    if (c.value("missing", false)) {
      t += str_cat("- ", c["claim"].get<std::string>(), ": not every seed has both cells (rl_single_turn = 0?)\n");
      continue;
    }
    std::string margins;
    for (const nlohmann::json& m : c.at("margins")) margins += (margins.empty() ? "" : " / ") + signed_pct(m.get<double>());
    t += str_cat("- ", c["claim"].get<std::string>(), ": margins ", margins, " (mean ", signed_pct(c["mean_margin"].get<double>()),
                 "), spread of ", c["baseline"].get<std::string>(), " ",
                 pct(c["baseline_spread"].get<double>()), ", of the treatment ",
                 pct(c["treatment_spread"].get<double>()), ": **",
                 rows.size() < 2 ? "one seed, no spread to judge by" : c["holds"].get<bool>() ? "holds" : "does not hold", "**\n");
  }
  return t;
}

namespace {

// The settings a finished seed folder must have been run with to be reused (report.json).
bool same_settings(const nlohmann::json& saved, const nlohmann::json& wanted) {
  for (const char* key : {"seed", "synth_seed", "protocol", "device", "sizes", "train_sets", "sft_from"})
    if (saved.value(key, nlohmann::json()) != wanted.value(key, nlohmann::json())) return false;
  return true;
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path.string(), ": cannot read");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  check_json_depth(text, path.string());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path.string(), ": ", e.what());
  }
}

}  // namespace

nlohmann::ordered_json run_demo_seeds(const DemoConfig& config, const std::vector<uint64_t>& seeds) {
  check(!seeds.empty(), "demo --seeds: no seed");
  for (size_t i = 0; i < seeds.size(); ++i)
    check(std::find(seeds.begin(), seeds.begin() + static_cast<std::ptrdiff_t>(i), seeds[i]) ==
              seeds.begin() + static_cast<std::ptrdiff_t>(i),
          "demo --seeds: seed ", seeds[i], " is listed twice");
  auto log = [&](const std::string& line) {
    if (config.log) config.log(line);
  };
  std::vector<nlohmann::json> reports;
  for (uint64_t seed : seeds) {
    DemoConfig c = config;
    c.seed = seed;
    c.out = (fs::path(config.out) / str_cat("seed-", seed)).string();
    if (!config.sft_from.empty()) c.sft_from = (fs::path(config.sft_from) / str_cat("seed-", seed)).string();
    const fs::path report = fs::path(c.out) / "report.json";
    if (fs::exists(report)) {
      nlohmann::json saved = read_json(report);
      if (same_settings(saved, nlohmann::json::parse(demo_settings_json(c).dump()))) {
        log(str_cat("demo --seeds: seed ", seed, ": the finished run in ", c.out, " has these settings; reused"));
        reports.push_back(std::move(saved));
        continue;
      }
      log(str_cat("demo --seeds: seed ", seed, ": ", c.out, " was run with other settings; running it again"));
    }
    log(str_cat("demo --seeds: seed ", seed, " (", reports.size() + 1, " of ", seeds.size(), ") in ", c.out));
    run_demo(c);
    reports.push_back(read_json(report));
  }
  nlohmann::ordered_json summary = demo_seeds_json(reports);
  write_text_atomic((fs::path(config.out) / "seeds.json").string(), summary.dump(2) + "\n");
  write_text_atomic((fs::path(config.out) / "seeds.md").string(), demo_seeds_table(summary));
  return summary;
}

}  // namespace sqlrl::rl

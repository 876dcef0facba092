// evaluate() and print_scores() of test-suite-sql-eval's evaluation.py. Pairs are scored in
// parallel (each is independent); aggregation and printing then run in file order so the output
// is the official one byte for byte. Unlike the official script, schemas are read once per
// database instead of once per pair.
#include "sql/eval/eval_spider_run.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/thread_pool.h"
#include "sql/eval/eval_spider_exec.h"
#include "sql/exec/pool.h"

namespace sqlrl::sql {
namespace {

struct Line {
  int number = 0;  // 1-based
  std::vector<std::string> fields;
};
using Interaction = std::vector<Line>;

std::string python_strip(const std::string& s) {
  auto ws = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); };
  size_t b = 0, e = s.size();
  while (b < e && ws(s[b])) ++b;
  while (e > b && ws(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// Lines split by '\t' after strip(); a blank line closes an interaction (an empty one if
// several blank lines follow each other), and the last one is kept when not empty.
std::vector<Interaction> read_interactions(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path, ": cannot open");
  std::vector<Interaction> all;
  Interaction current;
  std::string raw;
  int number = 0;
  while (std::getline(in, raw)) {
    ++number;
    std::string line = python_strip(raw);
    if (line.empty()) {
      all.push_back(std::move(current));
      current.clear();
      continue;
    }
    Line l;
    l.number = number;
    size_t pos = 0;
    while (true) {
      size_t tab = line.find('\t', pos);
      l.fields.push_back(line.substr(pos, tab == std::string::npos ? std::string::npos : tab - pos));
      if (tab == std::string::npos) break;
      pos = tab + 1;
    }
    current.push_back(std::move(l));
  }
  if (!current.empty()) all.push_back(std::move(current));
  return all;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  std::string out;
  size_t pos = 0, hit;
  while ((hit = s.find(from, pos)) != std::string::npos) {
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// Python's "{:<20.3f}" / "{:<20d}" / "{:20}" cells joined by single spaces after a 20-wide name.
std::string pad20(const std::string& s) { return s.size() >= 20 ? s : s + std::string(20 - s.size(), ' '); }
std::string fmt3(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}
void print_row(std::string& out, const std::string& name, const std::vector<std::string>& cells) {
  out += pad20(name);
  out += ' ';
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i) out += ' ';
    out += pad20(cells[i]);
  }
  out += '\n';
}

struct PartialAgg {
  double acc = 0, rec = 0, f1 = 0;
  int acc_count = 0, rec_count = 0;
};
struct LevelAgg {
  int count = 0;
  int match_count = 0;  // of which scored for EM (all of them unless a gold query was unparsed)
  double exact = 0, exec = 0;
  std::array<PartialAgg, kNumPartial> partial{};
};

}  // namespace

std::string spider_score_table(const std::vector<SpiderItem>& items, size_t interactions, EvalType etype) {
  const bool with_exec = etype != EvalType::Match, with_match = etype != EvalType::Exec;
  const bool include_turn_acc = interactions > 1;
  const char* turn_names[] = {"turn 1", "turn 2", "turn 3", "turn 4", "turn > 4"};
  std::map<std::string, LevelAgg> levels;  // easy medium hard extra all joint_all
  std::array<LevelAgg, 5> turns{};

  std::vector<std::pair<bool, bool>> joint(interactions, {true, true});  // exec, exact
  for (const SpiderItem& it : items) {
    int turn = it.turn > 3 ? 4 : it.turn;
    // An unparsed gold query has no hardness: it counts in "all" and its turn only.
    const std::string hard = it.gold_unparsed.empty() ? hardness_name(it.hardness) : "all";
    turns[turn].count++;
    levels[hard].count++;
    if (hard != "all") levels["all"].count++;
    if (with_exec) {
      if (it.exec == 1) {
        if (hard != "all") levels[hard].exec++;
        turns[turn].exec++;
        levels["all"].exec++;
      } else {
        joint[it.interaction].first = false;
      }
    }
    if (with_match && !it.has_match) joint[it.interaction].second = false;
    if (with_match && it.has_match) {
      turns[turn].match_count++;
      levels[hard].match_count++;
      levels["all"].match_count++;
      int exact = it.match.exact ? 1 : 0;
      if (!exact) joint[it.interaction].second = false;
      turns[turn].exact += exact;
      levels[hard].exact += exact;
      levels["all"].exact += exact;
      for (const std::string& name : {hard, std::string("all")}) {
        for (int k = 0; k < kNumPartial; ++k) {
          const PartialScore& s = it.match.partial[k];
          PartialAgg& a = levels[name].partial[k];
          if (s.pred_total > 0) {
            a.acc += s.acc;
            a.acc_count++;
          }
          if (s.label_total > 0) {
            a.rec += s.rec;
            a.rec_count++;
          }
          a.f1 += s.f1;
        }
      }
    }
  }
  LevelAgg& joint_all = levels["joint_all"];
  joint_all.count = joint_all.match_count = static_cast<int>(interactions);
  for (const auto& [e, m] : joint) {
    joint_all.exec += e;
    joint_all.exact += m;
  }

  for (LevelAgg& t : turns) {
    if (t.count == 0) continue;
    if (with_exec) t.exec /= t.count;
    if (with_match && t.match_count > 0) t.exact /= t.match_count;
  }
  std::vector<std::string> level_names = {"easy", "medium", "hard", "extra", "all"};
  if (include_turn_acc) level_names.push_back("joint_all");
  for (const char* name : {"easy", "medium", "hard", "extra", "all", "joint_all"}) {
    LevelAgg& l = levels[name];
    if (l.count == 0) continue;
    if (with_exec) l.exec /= l.count;
    if (with_match) {
      if (l.match_count > 0) l.exact /= l.match_count;
      for (PartialAgg& a : l.partial) {
        a.acc = a.acc_count == 0 ? 0 : a.acc / a.acc_count * 1.0;
        a.rec = a.rec_count == 0 ? 0 : a.rec / a.rec_count * 1.0;
        a.f1 = (a.acc == 0 && a.rec == 0) ? 1 : 2.0 * a.acc * a.rec / (a.rec + a.acc);
      }
    }
  }

  std::string out;
  print_row(out, "", level_names);
  std::vector<std::string> cells;
  for (const std::string& n : level_names) cells.push_back(std::to_string(levels[n].count));
  print_row(out, "count", cells);
  if (with_exec) {
    out += "=====================   EXECUTION ACCURACY     =====================\n";
    cells.clear();
    for (const std::string& n : level_names) cells.push_back(fmt3(levels[n].exec));
    print_row(out, "execution", cells);
  }
  if (with_match) {
    out += "\n====================== EXACT MATCHING ACCURACY =====================\n";
    cells.clear();
    for (const std::string& n : level_names) cells.push_back(fmt3(levels[n].exact));
    print_row(out, "exact match", cells);
    const char* headers[] = {"\n---------------------PARTIAL MATCHING ACCURACY----------------------\n",
                             "---------------------- PARTIAL MATCHING RECALL ----------------------\n",
                             "---------------------- PARTIAL MATCHING F1 --------------------------\n"};
    for (int which = 0; which < 3; ++which) {
      out += headers[which];
      for (int k = 0; k < kNumPartial; ++k) {
        cells.clear();
        for (const std::string& n : level_names) {
          const PartialAgg& a = levels[n].partial[k];
          cells.push_back(fmt3(which == 0 ? a.acc : which == 1 ? a.rec : a.f1));
        }
        print_row(out, kPartialTypes[k], cells);
      }
    }
  }
  if (include_turn_acc) {
    out += "\n\n";
    print_row(out, "", std::vector<std::string>(std::begin(turn_names), std::end(turn_names)));
    cells.clear();
    for (const LevelAgg& t : turns) cells.push_back(std::to_string(t.count));
    print_row(out, "count", cells);
    if (with_exec) {
      out += "=====================   TURN EXECUTION ACCURACY     =====================\n";
      cells.clear();
      for (const LevelAgg& t : turns) cells.push_back(fmt3(t.exec));
      print_row(out, "execution", cells);
    }
    if (with_match) {
      out += "\n====================== TURN EXACT MATCHING ACCURACY =====================\n";
      cells.clear();
      for (const LevelAgg& t : turns) cells.push_back(fmt3(t.exact));
      print_row(out, "exact match", cells);
    }
  }
  return out;
}

SpiderEvalReport run_spider_eval(const SpiderEvalOptions& options, Pool* pool) {
  const bool with_exec = options.etype != EvalType::Match, with_match = options.etype != EvalType::Exec;
  check(!with_exec || pool, "run_spider_eval: EX needs a SQLite pool");
  std::vector<Interaction> gold = read_interactions(options.gold_path);
  std::vector<Interaction> pred = read_interactions(options.pred_path);
  check(gold.size() == pred.size(), "number of sessions must equal: ", options.gold_path, " has ", gold.size(), ", ",
        options.pred_path, " has ", pred.size());

  SpiderEvalReport report;
  report.interactions = gold.size();
  // The official script zips each interaction's predictions with its gold queries, dropping the
  // extra turns on either side: 50 predictions for 114 gold queries scored 50 and printed 1.000.
  // A count that differs is an error instead.
  for (size_t i = 0; i < gold.size(); ++i) {
    if (gold[i].size() == pred[i].size()) continue;
    fail(options.pred_path, ": ", gold.size() > 1 ? str_cat("interaction ", i + 1, " has ") : std::string("has "),
         pred[i].size(), " prediction line", pred[i].size() == 1 ? "" : "s", ", ", options.gold_path, " has ",
         gold[i].size(), " gold queries", gold[i].empty() ? "" : str_cat(" (lines ", gold[i].front().number, "-",
         gold[i].back().number, ")"), ": one prediction per gold query, in order");
  }
  for (size_t i = 0; i < gold.size(); ++i) {
    size_t n = gold[i].size();
    for (size_t t = 0; t < n; ++t) {
      const Line& g = gold[i][t];
      check(g.fields.size() == 2, options.gold_path, ":", g.number, ": expected 'SQL<TAB>db_id', got ", g.fields.size(),
            " tab-separated fields");
      SpiderItem item;
      item.index = static_cast<int>(report.items.size());
      item.interaction = static_cast<int>(i);
      item.turn = static_cast<int>(t);
      item.gold_line = g.number;
      item.gold = g.fields[0];
      item.db_id = g.fields[1];
      item.pred = replace_all(pred[i][t].fields[0], "value", "1");
      report.items.push_back(std::move(item));
    }
  }

  // Schemas and foreign-key maps, once per database.
  std::map<std::string, Schema> schemas;
  std::map<std::string, std::vector<std::string>> db_files;
  for (const SpiderItem& it : report.items) {
    if (schemas.count(it.db_id)) continue;
    std::string dir = options.db_dir + "/" + it.db_id;
    try {
      schemas[it.db_id] = load_schema_sqlite(dir + "/" + it.db_id + ".sqlite");
      if (with_exec) db_files[it.db_id] = sqlite_files_in(dir);
    } catch (const Error& e) {
      fail(options.gold_path, ":", it.gold_line, ": database '", it.db_id, "': ", e.what());
    }
  }
  std::unordered_map<std::string, ForeignKeyMap> kmaps;
  if (with_match) kmaps = load_foreign_key_maps(options.tables_path);

  SpiderExecOptions exec_options;
  exec_options.keep_distinct = options.keep_distinct;
  exec_options.plug_value = options.plug_value;
  exec_options.limits = official_script_limits(60000, options.caps);
  std::vector<std::string> errors(report.items.size());
  auto score = [&](size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k) {
      SpiderItem& it = report.items[k];
      const Schema& schema = schemas.at(it.db_id);
      try {
        Sql g_sql;
        try {
          g_sql = parse_spider_sql(schema, it.gold);
        } catch (const Error& e) {
          // The official script stops here. EX needs no parse: the item is scored for it alone.
          if (!with_exec) fail("the official parser rejects the gold query (EX, which needs no parse, was not asked): ",
                               e.what());
          it.gold_unparsed = e.what();
          it.exec = spider_exec_match(*pool, db_files.at(it.db_id), it.pred, it.gold, exec_options);
          continue;
        }
        it.hardness = spider_hardness(g_sql);
        Sql p_sql;
        try {
          p_sql = parse_spider_sql(schema, it.pred);
        } catch (const Error&) {
          it.pred_parsed = false;
          p_sql = empty_sql();
        }
        if (with_exec) it.exec = spider_exec_match(*pool, db_files.at(it.db_id), it.pred, it.gold, exec_options);
        if (with_match) {
          auto kmap = kmaps.find(it.db_id);
          if (kmap == kmaps.end()) fail("database '", it.db_id, "' is not in ", options.tables_path);
          Sql g = rebuild_for_match(g_sql, schema, kmap->second);
          Sql p = rebuild_for_match(p_sql, schema, kmap->second);
          it.match = spider_match(p, g);
          it.has_match = true;
        }
      } catch (const Error& e) {
        errors[k] = str_cat(options.gold_path, ":", it.gold_line, ": ", e.what());
      }
    }
  };
  if (options.threads == 1) {
    score(0, report.items.size());
  } else {
    std::unique_ptr<ThreadPool> own;
    ThreadPool* workers = &default_thread_pool();
    if (options.threads > 1) {
      own = std::make_unique<ThreadPool>(options.threads);
      workers = own.get();
    }
    workers->parallel_for(report.items.size(), 8, score);
  }
  for (const std::string& e : errors)
    if (!e.empty()) throw Error(e);

  // The per-miss lines and progress lines, in the official order, then the tables.
  std::string& out = report.printout;
  size_t next = 0;
  for (size_t i = 0; i < gold.size(); ++i) {
    if ((i + 1) % 10 == 0) out += str_cat("Evaluating ", i + 1, "th prediction\n");
    while (next < report.items.size() && report.items[next].interaction == static_cast<int>(i)) {
      const SpiderItem& it = report.items[next++];
      if (with_match && !it.match.exact) {
        const char* h = hardness_name(it.hardness);
        out += str_cat(h, " pred: ", it.pred, "\n", h, " gold: ", it.gold, "\n\n");
      }
    }
  }
  out += spider_score_table(report.items, report.interactions, options.etype);
  size_t unparsed = 0;
  const SpiderItem* first = nullptr;
  for (const SpiderItem& it : report.items)
    if (!it.gold_unparsed.empty()) first = first ? first : &it, ++unparsed;
  if (first)
    out += str_cat("\n", unparsed, " of ", report.items.size(), " gold queries are outside the official parser (the first, ",
                   options.gold_path, ":", first->gold_line, ": ", first->gold_unparsed,
                   "): scored for execution in 'all' and their turn only; left out of the hardness levels and of exact "
                   "matching (an interaction holding one does not count as a joint exact match)\n");
  return report;
}

nlohmann::json spider_item_json(const SpiderItem& item) {
  nlohmann::json j;
  j["index"] = item.index;
  j["interaction"] = item.interaction;
  j["turn"] = item.turn;
  j["db_id"] = item.db_id;
  j["gold"] = item.gold;
  j["pred"] = item.pred;
  j["pred_parsed"] = item.pred_parsed ? 1 : 0;
  if (!item.gold_unparsed.empty()) j["gold_unparsed"] = item.gold_unparsed;  // no hardness, no EM
  j["hardness"] = item.gold_unparsed.empty() ? hardness_name(item.hardness) : "none";
  if (item.exec >= 0) j["exec"] = item.exec;
  if (item.has_match) {
    j["exact"] = item.match.exact ? 1 : 0;
    nlohmann::json partial = nlohmann::json::object();
    for (int k = 0; k < kNumPartial; ++k) {
      const PartialScore& s = item.match.partial[k];
      partial[kPartialTypes[k]] = {{"acc", s.acc}, {"rec", s.rec}, {"f1", s.f1}, {"label_total", s.label_total}, {"pred_total", s.pred_total}};
    }
    j["partial"] = partial;
  }
  return j;
}

}  // namespace sqlrl::sql

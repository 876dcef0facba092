// `llm_sqlrl data stats`: load a benchmark (Spider and its DK / Syn / Realistic variants, BIRD, SParC,
// CoSQL, SynSQL; the --dataset spec of `eval`), print counts,
// the difficulty histogram and the gold executability audit; --filter-empty writes the records
// whose gold queries all ran and returned rows (MTIR-SQL's training filter).
// `llm_sqlrl data synth`: write the built-in synthetic benchmark (sql/data/synth.h).
#include <chrono>
#include <cstdio>
#include <fstream>

#include "app/commands.h"
#include "runtime/error.h"
#include "sql/data/datasets.h"
#include "sql/exec/pool.h"
#include "sql/data/synth.h"

namespace sqlrl {

void add_data_command(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Benchmark datasets: statistics, gold audit, synthetic benchmark");
  data->require_subcommand(1);

  struct StatsArgs {
    std::string dataset, split = "dev", file, filter_empty;
    bool skip_missing = false, compute_difficulty = false, no_audit = false;
    int64_t timeout_ms = 5000;
    size_t show = 10;
  };
  auto s = std::make_shared<StatsArgs>();
  CLI::App* stats = data->add_subcommand("stats", "Counts, difficulty histogram and gold executability audit");
  stats->add_option("--dataset", s->dataset,
                    "FORMAT:PATH[,db=DBDIR] as `eval --dataset` takes it (spider, spider-dk, spider-syn, "
                    "spider-realistic, bird, sparc, cosql, synsql)")
      ->required();
  stats->add_option("--split", s->split, "train | dev | test (Spider only)");
  stats->add_option("--file", s->file, "questions file instead of the split's default");
  stats->add_flag("--skip-missing", s->skip_missing, "skip records whose database is missing (else an error)");
  stats->add_flag("--compute-difficulty", s->compute_difficulty, "Spider hardness for records without a label");
  stats->add_flag("--no-audit", s->no_audit, "do not execute the gold queries");
  stats->add_option("--timeout-ms", s->timeout_ms, "per gold query wall-clock limit");
  stats->add_option("--show", s->show, "failing gold queries to list");
  stats->add_option("--filter-empty", s->filter_empty, "write the records whose gold queries all return rows to this file");
  stats->callback([s] {
    sql::LoadOptions o = sql::parse_dataset_spec(s->dataset, s->split, "--dataset");
    o.file = s->file;
    o.skip_missing = s->skip_missing;
    o.compute_difficulty = s->compute_difficulty;
    sql::Dataset ds = sql::load_dataset(o);
    std::fputs(sql::dataset_summary(ds).c_str(), stdout);
    if (s->no_audit) {
      check(s->filter_empty.empty(), "--filter-empty needs the audit (drop --no-audit)");
      return;
    }
    sql::Pool pool;
    sql::Limits limits;
    limits.timeout_ms = s->timeout_ms;
    sql::AuditReport audit = sql::audit_gold(pool, ds.examples, limits);
    std::fputs(sql::audit_summary(ds, audit, s->show).c_str(), stdout);
    if (!s->filter_empty.empty()) {
      nlohmann::json kept = sql::kept_records(ds, audit);
      std::ofstream out(s->filter_empty, std::ios::binary | std::ios::trunc);
      check(out.good(), s->filter_empty, ": cannot write");
      out << kept.dump(2) << "\n";
      check(out.good(), s->filter_empty, ": write failed");
      std::printf("kept %zu of %zu records -> %s\n", kept.size(), ds.records.size(), s->filter_empty.c_str());
    }
  });

  auto g = std::make_shared<sql::SynthOptions>();
  auto out_dir = std::make_shared<std::string>();
  auto mix = std::make_shared<std::vector<double>>(g->mix.begin(), g->mix.end());
  CLI::App* synth = data->add_subcommand("synth", "Write the built-in synthetic benchmark (Spider + SParC formats)");
  synth->add_option("--out", *out_dir, "output folder")->required();
  synth->add_option("--seed", g->seed, "generator seed (same seed, same bytes)");
  synth->add_option("--train-dbs", g->train_databases, "train databases");
  synth->add_option("--dev-dbs", g->dev_databases, "dev databases (disjoint from train)");
  synth->add_option("--questions-per-db", g->questions_per_database, "questions per database");
  synth->add_option("--dialogues-per-db", g->dialogues_per_database, "SParC-style dialogues per database");
  synth->add_option("--mix", *mix, "shares of easy medium hard extra (Spider hardness)")->expected(4);
  synth->add_option("--trap-share", g->trap_share, "share of each level's questions naming a value whose stored form only execution shows (docs/synthetic-benchmark.md)");
  synth->callback([g, out_dir, mix] {
    for (size_t i = 0; i < 4; ++i) g->mix[i] = (*mix)[i];
    g->progress = true;
    auto start = std::chrono::steady_clock::now();
    sql::SynthReport r = sql::write_synth_benchmark(*out_dir, *g);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("wrote %s: %d databases, %d train + %d dev questions (easy %d, medium %d, hard %d, extra %d), "
                "%d surface-form traps, %d number-as-text traps, %d + %d dialogues (%d turns) in %.2f s\n",
                out_dir->c_str(), r.databases, r.train_questions, r.dev_questions, r.hardness[0], r.hardness[1],
                r.hardness[2], r.hardness[3], r.surface_form_traps, r.number_as_text_traps, r.train_dialogues,
                r.dev_dialogues, r.dialogue_turns, seconds);
  });
}

}  // namespace sqlrl

// The built-in synthetic text-to-SQL benchmark: `llm_sqlrl data synth`. Deterministic from the
// seed (same seed, same options -> the same bytes in every file), written in Spider's on-disk
// format (and SParC's for dialogues) so load_dataset() reads it:
//
//   DIR/tables.json, DIR/train_spider.json, DIR/dev.json, DIR/{train,dev}_gold.sql,
//   DIR/database/<db>/<db>.sqlite, DIR/sparc/{train,dev,tables}.json + DIR/sparc/database/...,
//   DIR/synth_info.json (options and counts).
//
// Each question record has db_id, question, query, difficulty (Spider hardness of the gold,
// computed with the evaluation's own rules) and a "synth" object: the template name and the
// "traps" list — where the question's wording and the stored data differ, e.g.
//   {"kind":"surface_form","table":"student","column":"city","question_value":"New York City",
//    "stored_value":"NYC","style":"abbreviation"}
//   {"kind":"number_as_text","table":"store","column":"size_sqft"}
// Spider's parsed "sql" field is omitted. Train and dev use disjoint databases (and domains, as
// long as there are at least as many domains as databases). Every gold query was executed at
// generation time through the pool and returned rows.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace sqlrl::sql {

struct SynthOptions {
  uint64_t seed = 1;
  int train_databases = 8;
  int dev_databases = 4;
  int questions_per_database = 30;
  int dialogues_per_database = 6;
  // Share of questions per Spider hardness level (easy, medium, hard, extra); normalised.
  std::array<double, 4> mix = {0.3, 0.3, 0.2, 0.2};
  // Share of questions per level that name a value whose stored form differs (abbreviation,
  // case, trailing space), is not among the schema's sample values, and makes the question's
  // naive query find nothing: only execution reveals it. Rounded per database and level; what a
  // level cannot place (its columns' stored forms all shown) moves to the next easier level, then
  // to the split's next database. 0.65 puts 41-50% of the dev questions of the demo's benchmarks
  // (synth seeds 1-3, 12 dev databases) in this category, 37-46% plain.
  double trap_share = 0.65;
  bool progress = false;  // a progress line per database (runtime/progress.h); not part of the data
};

struct SynthReport {
  int databases = 0;
  int train_questions = 0, dev_questions = 0;
  int train_dialogues = 0, dev_dialogues = 0, dialogue_turns = 0;
  std::array<int, 4> hardness{};  // questions per level, train + dev
  int surface_form_traps = 0;     // questions whose value is stored in another form
  int number_as_text_traps = 0;   // questions on numbers stored as text
  std::map<std::string, int> categories;  // questions per "synth.category" (synth_writer.cpp)
};

// Writes the benchmark under out_dir (created; existing files of the same names are replaced).
// Throws when a level of the mix cannot be filled (named) or a file cannot be written.
SynthReport write_synth_benchmark(const std::string& out_dir, const SynthOptions& options);

}  // namespace sqlrl::sql

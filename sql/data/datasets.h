// Benchmark loaders: Spider (and its variants Spider-DK, Spider-Syn, Spider-Realistic), BIRD,
// SParC, CoSQL and SynSQL-2.5M, all read into one Example type; plus the executability audit that
// `llm_sqlrl data stats` prints (gold queries run through the pool).
//
// On-disk layouts read, as each set is distributed (DIR is the PATH of the spec below):
//   spider  DIR/tables.json, DIR/{train_spider,dev}.json (db_id, question, query),
//           DIR/database/<db>/<db>.sqlite; split test: DIR/test.json, DIR/test_tables.json,
//           DIR/test_database/<db>/<db>.sqlite (the spider_data.zip release,
//           https://yale-lily.github.io/spider)
//   spider-dk         DIR/Spider-DK.json (type, db_id, query, question), DIR/tables.json, and
//                     DIR/database/ holding only the 3 databases it modified (new_concert_singer,
//                     new_orchestra, new_pets_1); the rest are Spider's: add db=SPIDER/database.
//                     One evaluation set (split dev). github.com/ygan/Spider-DK, repository root.
//   spider-syn        DIR/{train_spider,dev}.json (db_id, SpiderQuestion, SpiderSynQuestion,
//                     query; the question read is SpiderSynQuestion); no databases, no tables:
//                     Spider's (db=SPIDER/database). github.com/ygan/Spider-Syn: DIR is its
//                     Spider-Syn/ folder (the repository root is accepted too).
//   spider-realistic  DIR/spider-realistic.json (Spider's record format); no databases: Spider's
//                     dev ones (db=SPIDER/database). One evaluation set (split dev).
//                     https://doi.org/10.5281/zenodo.5205322 (Deng et al., "Structure-Grounded
//                     Pretraining for Text-to-SQL", arXiv 2010.12773)
//   bird    DIR/{train,dev}.json (db_id, question, evidence, SQL, difficulty),
//           DIR/{train,dev}_tables.json, DIR/{train,dev}_databases/<db>/<db>.sqlite,
//           optional .../<db>/database_description/<table>.csv; no public test split
//   sparc   DIR/{train,dev}.json (database_id, interaction [{utterance, query}], final),
//           DIR/tables.json, DIR/database/<db>/<db>.sqlite; no public test split
//   cosql   as sparc, the interactions in DIR/sql_state_tracking/cosql_{train,dev}.json
//           (DIR/{train,dev}.json accepted too); no public test split
//   synsql  DIR/data.json (db_id, question, sql, external_knowledge, sql_complexity),
//           DIR/tables.json, DIR/databases/<db>/<db>.sqlite (the split is ignored)
//
// The spec every command takes (eval --dataset, train --dataset / --eval-dataset, data stats
// --dataset, the recipes' keys): FORMAT:DIR[,db=DBDIR]. db= names one more folder of
// <db>/<db>.sqlite, searched after the set's own; the variants that ship no databases need it.
// It is part of the spec, not a flag of its own, because the spec is the one string that travels
// through every command, recipe and resolved config.toml: a separate flag would need a field in
// each options table and could be paired with the wrong dataset.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sql/exec/pool.h"

namespace sqlrl::sql {

enum class DatasetFormat { Spider, Bird, Sparc, Cosql, Synsql, SpiderDk, SpiderSyn, SpiderRealistic };
DatasetFormat parse_dataset_format(const std::string& name);  // throws on an unknown name
const char* dataset_format_name(DatasetFormat format);       // the spec's spelling ("spider-dk")
// Where the set is downloaded, for the errors that name a missing file.
const char* dataset_source(DatasetFormat format);

struct Turn {
  std::string question;
  std::string gold_sql;
};

struct Example {
  std::string id;        // "<split>_<record>" or "<split>_<record>_t<turn>" for dialogue turns
  std::string db_id;
  std::string db_path;   // the .sqlite file
  std::string question;
  std::string evidence;  // BIRD external knowledge / SynSQL external_knowledge; "" otherwise
  std::string gold_sql;
  // As the dataset labels it (Spider-format files written by `data synth` carry one; BIRD:
  // simple/moderate/challenging; SynSQL: sql_complexity lower-cased) or computed with Spider's
  // hardness rules when LoadOptions::compute_difficulty is set; "" when neither.
  std::string difficulty;
  // The trap category of a question written by `data synth` (its record's synth.category:
  // "plain", "number_as_text", "stored_form:abbreviation", ...), for EX by category; "" when the
  // record has none (other datasets, dialogue turns).
  std::string category;
  std::vector<Turn> history;  // earlier turns of the same dialogue, oldest first
  int turn_index = 0;         // 0 for single-turn datasets
  size_t record_index = 0;    // index of the source record (interaction for dialogues) in its file
};

struct LoadOptions {
  DatasetFormat format = DatasetFormat::Spider;
  std::string dir;               // the dataset's root folder
  std::string split = "dev";     // "train", "dev" or (spider) "test"; synsql: ignored (data.json)
  std::string file;              // explicit questions file instead of the split's default
  std::string extra_db_root;     // db= of the spec: searched after the set's own database folder
  bool skip_missing = false;     // skip records whose database file is missing (else throw)
  bool compute_difficulty = false;  // Spider hardness of the gold SQL where no label is given
};

struct Dataset {
  DatasetFormat format = DatasetFormat::Spider;
  std::string questions_path;  // the file the records came from
  std::string tables_path;     // tables.json ("" when absent)
  std::string db_root;         // folder holding <db>/<db>.sqlite (the first searched)
  std::vector<Example> examples;
  nlohmann::json records;      // the source records as read (for writing a filtered copy)
  size_t missing_records = 0;  // records skipped because their database file is missing
  std::vector<std::string> missing_ids;  // their db ids, first few (at most 10), in file order
  size_t unparsed_difficulty = 0;  // compute_difficulty: gold queries Spider's parser rejects
};

// "FORMAT:DIR[,db=DBDIR]" (see the top of this file) as load options of `split`. Errors name
// the spec: no colon, an unknown format, an unknown option, an empty db=.
// `key` (the flag or config key) starts each message.
LoadOptions parse_dataset_spec(const std::string& spec, const std::string& split, const std::string& key = "dataset");

// Throws sqlrl::Error naming the file, the record index and the field on malformed input; a split
// the set does not have (BIRD, SParC and CoSQL keep their test sets hidden); a missing questions
// file or db= folder, naming the path expected and where the set is downloaded; and (without
// skip_missing) the count and first ids of records whose database is missing, with the folders
// searched.
Dataset load_dataset(const LoadOptions& options);

// BIRD database_description/*.csv of one database folder: table (file stem) -> column -> text
// ("description; values: value_description" when both given). Empty map when the folder is absent.
std::map<std::string, std::map<std::string, std::string>> load_bird_descriptions(const std::string& db_dir);

// Spider's eval_hardness of `sql` on the database's schema (process_sql parse); "" when the
// parser rejects the query (why goes to *parse_error when given).
std::string spider_hardness_of(const std::string& db_path, const std::string& sql, std::string* parse_error = nullptr);

// ---- executability audit ----
enum class GoldStatus : uint8_t { Ok, Empty, Error, Timeout };
const char* gold_status_name(GoldStatus status);

struct AuditItem {
  GoldStatus status = GoldStatus::Ok;
  std::string error;  // SQLite's message for Error/Timeout
  size_t rows = 0;
};

struct AuditReport {
  std::vector<AuditItem> items;  // one per example, same order
  size_t ok = 0, empty = 0, errors = 0, timeouts = 0;
};

// Runs every gold query through the pool (in parallel on the pool's workers).
AuditReport audit_gold(Pool& pool, const std::vector<Example>& examples, const Limits& limits);

// Source records whose examples all passed (status Ok): the MTIR-SQL filter. For dialogues an
// interaction is kept only when every turn passed. Same format as the input file.
nlohmann::json kept_records(const Dataset& dataset, const AuditReport& audit);

// Counts and histograms as `data stats` prints them.
std::string dataset_summary(const Dataset& dataset);
std::string audit_summary(const Dataset& dataset, const AuditReport& audit, size_t show_failures);

}  // namespace sqlrl::sql

// Synthetic benchmark, part 3: choosing domains per split, writing the SQLite files, filling the
// hardness mix with executed and classified questions, and writing the Spider / SParC files.
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/progress.h"
#include "sql/data/datasets.h"
#include "sql/exec/pool.h"
#include "sql/exec/schema.h"
#include "sql/data/synth.h"
#include "sql/data/synth_questions.h"

namespace sqlrl::sql {
namespace fs = std::filesystem;
using nlohmann::ordered_json;
using namespace synth;

namespace {

const char* kLevelNames[4] = {"easy", "medium", "hard", "extra"};

uint64_t mix_seed(uint64_t seed, uint64_t stream) {
  Rng r(seed ^ (0xD1B54A32D192ED03ull * (stream + 1)));
  return r.next();
}

void exec_or_fail(sqlite3* db, const std::string& sql, const std::string& path) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err ? err : "unknown error";
    sqlite3_free(err);
    fail(path, ": ", sql.substr(0, 80), ": ", why);
  }
}

void write_sqlite(const Database& data, const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  fs::remove(path);
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    std::string why = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    fail(path, ": cannot create database: ", why);
  }
  try {
    exec_or_fail(db, "PRAGMA page_size = 4096; PRAGMA journal_mode = OFF; BEGIN", path);
    for (const TableData& t : data.tables) {
      const TableSpec& s = *t.spec;
      std::string ddl = "CREATE TABLE " + s.name + " (";
      std::string fks;
      for (size_t c = 0; c < s.columns.size(); ++c) {
        const ColumnSpec& col = s.columns[c];
        ddl += (c ? ", " : "") + col.name + " " + declared_type(col.kind) + (col.kind == ColKind::Id ? " PRIMARY KEY" : "");
        if (col.kind == ColKind::ForeignKey) fks += ", FOREIGN KEY (" + col.name + ") REFERENCES " + col.ref_table + "(id)";
      }
      exec_or_fail(db, ddl + fks + ")", path);
      std::string insert = "INSERT INTO " + s.name + " VALUES (";
      for (size_t c = 0; c < s.columns.size(); ++c) insert += c ? ", ?" : "?";
      insert += ")";
      sqlite3_stmt* stmt = nullptr;
      check(sqlite3_prepare_v2(db, insert.c_str(), -1, &stmt, nullptr) == SQLITE_OK, path, ": ", insert, ": ", sqlite3_errmsg(db));
      for (const auto& row : t.rows) {
        sqlite3_reset(stmt);
        for (size_t c = 0; c < row.size(); ++c) {
          const synth::Cell& cell = row[c];
          int i = static_cast<int>(c) + 1;
          ColKind k = s.columns[c].kind;
          if (cell.null) sqlite3_bind_null(stmt, i);
          else if (k == ColKind::Real) sqlite3_bind_double(stmt, i, cell.real);
          else if (k == ColKind::Id || k == ColKind::ForeignKey || k == ColKind::Integer) sqlite3_bind_int64(stmt, i, cell.integer);
          else sqlite3_bind_text(stmt, i, cell.text.data(), static_cast<int>(cell.text.size()), SQLITE_TRANSIENT);
        }
        if (sqlite3_step(stmt) != SQLITE_DONE) {
          std::string why = sqlite3_errmsg(db);
          sqlite3_finalize(stmt);
          fail(path, ": inserting into ", s.name, ": ", why);
        }
      }
      sqlite3_finalize(stmt);
    }
    exec_or_fail(db, "COMMIT", path);
  } catch (...) {
    sqlite3_close(db);
    throw;
  }
  sqlite3_close(db);
}

std::string natural(std::string s) {
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

ordered_json tables_entry(const Database& data) {
  ordered_json e;
  ordered_json names_orig = ordered_json::array(), names = ordered_json::array();
  ordered_json cols_orig = ordered_json::array({ordered_json::array({-1, "*"})});
  ordered_json cols = ordered_json::array({ordered_json::array({-1, "*"})});
  ordered_json types = ordered_json::array({"text"}), pks = ordered_json::array(), fks = ordered_json::array();
  std::map<std::string, int> id_index;  // table -> global index of its id column
  std::vector<std::pair<int, std::string>> pending_fks;
  int index = 1;
  for (size_t t = 0; t < data.tables.size(); ++t) {
    const TableSpec& s = *data.tables[t].spec;
    names_orig.push_back(s.name);
    names.push_back(natural(s.name));
    for (const ColumnSpec& col : s.columns) {
      cols_orig.push_back(ordered_json::array({static_cast<int>(t), col.name}));
      cols.push_back(ordered_json::array({static_cast<int>(t), natural(col.name)}));
      types.push_back(std::string(declared_type(col.kind)) == "TEXT" ? "text" : "number");
      if (col.kind == ColKind::Id) {
        pks.push_back(index);
        id_index[s.name] = index;
      }
      if (col.kind == ColKind::ForeignKey) pending_fks.push_back({index, col.ref_table});
      ++index;
    }
  }
  for (const auto& [col, table] : pending_fks) fks.push_back(ordered_json::array({col, id_index.at(table)}));
  e["column_names"] = cols;
  e["column_names_original"] = cols_orig;
  e["column_types"] = types;
  e["db_id"] = data.db_id;
  e["foreign_keys"] = fks;
  e["primary_keys"] = pks;
  e["table_names"] = names;
  e["table_names_original"] = names_orig;
  return e;
}

ordered_json traps_json(const std::vector<Trap>& traps) {
  ordered_json out = ordered_json::array();
  for (const Trap& t : traps) {
    ordered_json j;
    j["kind"] = t.kind;
    j["table"] = t.table;
    j["column"] = t.column;
    if (t.kind == "surface_form") {
      j["question_value"] = t.question_value;
      j["stored_value"] = t.stored_value;
      j["style"] = t.style;
      j["hidden"] = t.hidden;
    }
    out.push_back(j);
  }
  return out;
}

// Marks each surface-form trap whose stored form the prompt's schema does not show among the
// column's sample values (read_schema, exactly as a rollout's prompt is built).
void mark_hidden(std::vector<Trap>& traps, const DatabaseSchema& schema) {
  for (Trap& t : traps) {
    if (t.kind != "surface_form") continue;
    bool shown = false;
    for (const TableInfo& table : schema.tables)
      for (const ColumnInfo& col : table.columns)
        if (table.name == t.table && col.name == t.column)
          for (const sql::Cell& v : col.samples) shown = shown || (v.type == CellType::Text && v.text == t.stored_value);
    t.hidden = !shown;
  }
}

// A question's category (its record's "synth.category"): what a model needs to know beyond the
// question and the prompt's schema.
//   stored_form:<style>  a value's stored form that only execution shows (hidden surface form)
//   visible_form         a stored form the schema's sample values show
//   number_as_text       numbers kept as text (the schema's TEXT type says so): CAST
//   plain                nothing
std::string question_category(const std::vector<Trap>& traps) {
  for (const Trap& t : traps)
    if (t.kind == "surface_form" && t.hidden) return "stored_form:" + t.style;
  for (const Trap& t : traps)
    if (t.kind == "surface_form") return "visible_form";
  for (const Trap& t : traps)
    if (t.kind == "number_as_text") return "number_as_text";
  return "plain";
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  check(out.good(), path.string(), ": cannot write");
  out << text;
  check(out.good(), path.string(), ": write failed");
}

// Questions per level for n questions: largest remainder of n * mix (ties to the lower level).
std::array<int, 4> level_counts(int n, const std::array<double, 4>& mix) {
  double total = 0;
  for (double m : mix) {
    check(m >= 0, "synth: mix shares must be >= 0");
    total += m;
  }
  check(total > 0, "synth: the difficulty mix sums to 0");
  std::array<int, 4> counts{};
  std::array<double, 4> rest{};
  int used = 0;
  for (int l = 0; l < 4; ++l) {
    double want = n * mix[l] / total;
    counts[l] = static_cast<int>(std::floor(want));
    rest[l] = want - counts[l];
    used += counts[l];
  }
  while (used < n) {
    int best = 0;
    for (int l = 1; l < 4; ++l)
      if (rest[l] > rest[best]) best = l;
    counts[best]++;
    rest[best] = -1;
    ++used;
  }
  return counts;
}

struct DbOutput {
  ordered_json questions = ordered_json::array();
  ordered_json dialogues = ordered_json::array();
};

}  // namespace

SynthReport write_synth_benchmark(const std::string& out_dir, const SynthOptions& o) {
  check(o.train_databases >= 1 && o.dev_databases >= 1, "synth: need at least one train and one dev database (got ",
        o.train_databases, " and ", o.dev_databases, ")");
  check(o.questions_per_database >= 0 && o.dialogues_per_database >= 0, "synth: counts must be >= 0");
  check(o.trap_share >= 0 && o.trap_share <= 1, "synth: trap share must be in [0, 1], got ", o.trap_share);
  const fs::path root(out_dir);
  fs::create_directories(root / "database");
  fs::create_directories(root / "sparc" / "database");

  // Domains in a seed-dependent order; database i uses domain i mod n, so train and dev get
  // different domains while there are enough of them.
  const auto& all = domains();
  std::vector<size_t> order(all.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Rng shuffle(mix_seed(o.seed, 0));
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[shuffle.below(i)]);

  const int total_dbs = o.train_databases + o.dev_databases;
  const std::array<int, 4> per_level = level_counts(o.questions_per_database, o.mix);
  Pool pool;
  SynthReport report;
  report.databases = total_dbs;
  ordered_json tables = ordered_json::array();
  std::vector<DbOutput> outputs(static_cast<size_t>(total_dbs));
  Progress bar = progress_start("synth", "databases", total_dbs);

  int split_carry = 0;
  for (int i = 0; i < total_dbs; ++i) {
    const DomainSpec& domain = all[order[static_cast<size_t>(i) % all.size()]];
    const int round = i / static_cast<int>(all.size());
    const std::string db_id = round == 0 ? domain.name : str_cat(domain.name, "_", round + 1);
    Rng rng(mix_seed(o.seed, static_cast<uint64_t>(i) + 1));
    Database data = generate_database(domain, db_id, rng, 0.6);
    const std::string db_path = (root / "database" / db_id / (db_id + ".sqlite")).string();
    write_sqlite(data, db_path);
    tables.push_back(tables_entry(data));

    auto nonempty = [&](const std::string& sql) {
      Result r = pool.execute(db_path, sql);
      return r.ok() && !r.rows.empty();
    };
    auto looks_empty = [&](const std::string& sql) { return result_looks_empty(pool.execute(db_path, sql)); };
    const DatabaseSchema schema = read_schema(pool, db_path);
    DbOutput& out = outputs[static_cast<size_t>(i)];
    std::set<std::string> used_sql;
    std::vector<ordered_json> questions;
    // Hardest level first: its templates can hide a value least often (they filter small parent
    // tables, whose few values the schema's samples mostly show); what a level cannot hide moves
    // on to the next easier one, whose templates filter the large tables.
    // What a database cannot hide at all moves on to the next database of its split, so that each
    // split holds its share.
    if (i == o.train_databases) split_carry = 0;
    int trap_carry = split_carry;
    for (int level = 3; level >= 0; --level) {
      std::vector<int> nominal, any;
      for (int t = 0; t < template_count(); ++t) {
        any.push_back(t);
        if (template_nominal_level(t) == level) nominal.push_back(t);
      }
      // The level's trap questions come first, as many as trap_share asks (rounded) plus what the
      // harder levels could not place; a database whose values cannot hide enough of them (few
      // values per column, all shown in the schema's samples) gets other questions instead.
      const int trap_quota =
          std::min(per_level[level], static_cast<int>(std::lround(o.trap_share * per_level[level])) + trap_carry);
      const int trap_attempt_cap = 100 + 80 * trap_quota;
      int made = 0, attempts = 0, traps_made = 0, trap_attempts = 0;
      const int max_attempts = 200 + 100 * per_level[level] + trap_attempt_cap;
      while (made < per_level[level]) {
        check(++attempts <= max_attempts, "synth: database ", db_id, ": filled only ", made, " of ", per_level[level], " ",
              kLevelNames[level], " questions after ", max_attempts, " attempts");
        const std::vector<int>& pool_of = (!nominal.empty() && rng.chance(0.85)) ? nominal : any;
        int t = pool_of[rng.below(pool_of.size())];
        const bool want_trap = traps_made < trap_quota && trap_attempts < trap_attempt_cap;
        trap_attempts += want_trap;
        // The other questions name messy values too, now and then (variety where a column has
        // few clean values), as long as the schema's samples show their stored form.
        auto c = make_question(data, t, rng, want_trap || rng.chance(0.35));
        if (!c || used_sql.count(c->sql) || !nonempty(c->sql)) continue;
        mark_hidden(c->traps, schema);
        const std::string category = question_category(c->traps);
        // A trap question: every value it names is stored in a form the prompt does not show, and
        // its naive query (the question's wording) visibly finds nothing. The others name no value
        // whose stored form is hidden (the builder prefers clean values; where a column has none,
        // a stored form the schema's samples show makes a "visible_form" question).
        const bool any_shown = std::any_of(c->traps.begin(), c->traps.end(),
                                           [](const Trap& x) { return x.kind == "surface_form" && !x.hidden; });
        const bool stored_form = category.starts_with("stored_form:");
        if (want_trap ? !stored_form || any_shown || !looks_empty(naive_sql(c->sql, c->traps)) : stored_form) continue;
        if (spider_hardness_of(db_path, strip_casts(c->sql)) != kLevelNames[level]) continue;
        used_sql.insert(c->sql);
        traps_made += want_trap;
        report.categories[category]++;
        ordered_json q;
        q["db_id"] = db_id;
        q["question"] = c->question;
        q["query"] = c->sql;
        q["difficulty"] = kLevelNames[level];
        q["synth"]["template"] = c->template_name;
        q["synth"]["category"] = category;
        q["synth"]["traps"] = traps_json(c->traps);
        for (const Trap& tr : c->traps) {
          if (tr.kind == "surface_form") { report.surface_form_traps++; break; }
        }
        for (const Trap& tr : c->traps) {
          if (tr.kind == "number_as_text") { report.number_as_text_traps++; break; }
        }
        report.hardness[static_cast<size_t>(level)]++;
        questions.push_back(std::move(q));
        ++made;
      }
      trap_carry = trap_quota - traps_made;
    }
    split_carry = trap_carry;
    for (size_t k = questions.size(); k > 1; --k) std::swap(questions[k - 1], questions[rng.below(k)]);
    for (auto& q : questions) out.questions.push_back(std::move(q));

    for (int d = 0; d < o.dialogues_per_database; ++d) {
      std::optional<std::vector<DialogueTurn>> turns;
      for (int attempt = 0; attempt < 30 && !turns; ++attempt)
        turns = make_dialogue(data, rng, rng.chance(o.trap_share), 2 + static_cast<int>(rng.below(3)), nonempty);
      check(turns.has_value(), "synth: database ", db_id, ": could not build dialogue ", d, " in 30 attempts");
      ordered_json inter;
      inter["database_id"] = db_id;
      inter["interaction"] = ordered_json::array();
      for (const DialogueTurn& t : *turns) {
        ordered_json turn;
        turn["utterance"] = t.question;
        turn["query"] = t.sql;
        turn["synth"]["edit"] = t.edit;
        turn["synth"]["traps"] = traps_json(t.traps);
        inter["interaction"].push_back(turn);
      }
      // SParC's "final" is the whole request in one utterance; here: the last turn's query with
      // the turns' utterances joined.
      std::string joined;
      for (const DialogueTurn& t : *turns) joined += (joined.empty() ? "" : " ") + t.question;
      inter["final"]["utterance"] = joined;
      inter["final"]["query"] = turns->back().sql;
      report.dialogue_turns += static_cast<int>(turns->size());
      out.dialogues.push_back(std::move(inter));
    }
    if (o.progress)
      progress_update(bar, i + 1, str_cat(db_id, ": ", out.questions.size(), " questions, ", out.dialogues.size(),
                                          " dialogues"));
  }
  if (o.progress) progress_finish(bar);
  pool.close_idle();

  // Files.
  ordered_json train = ordered_json::array(), dev = ordered_json::array();
  ordered_json sparc_train = ordered_json::array(), sparc_dev = ordered_json::array();
  std::string train_gold, dev_gold, sparc_train_gold, sparc_dev_gold;
  for (int i = 0; i < total_dbs; ++i) {
    bool is_train = i < o.train_databases;
    for (const auto& q : outputs[static_cast<size_t>(i)].questions) {
      (is_train ? train : dev).push_back(q);
      (is_train ? train_gold : dev_gold) += q["query"].get<std::string>() + "\t" + q["db_id"].get<std::string>() + "\n";
    }
    for (const auto& d : outputs[static_cast<size_t>(i)].dialogues) {
      (is_train ? sparc_train : sparc_dev).push_back(d);
      std::string& gold = is_train ? sparc_train_gold : sparc_dev_gold;
      for (const auto& t : d["interaction"]) gold += t["query"].get<std::string>() + "\t" + d["database_id"].get<std::string>() + "\n";
      gold += "\n";
    }
  }
  report.train_questions = static_cast<int>(train.size());
  report.dev_questions = static_cast<int>(dev.size());
  report.train_dialogues = static_cast<int>(sparc_train.size());
  report.dev_dialogues = static_cast<int>(sparc_dev.size());

  const std::string tables_text = tables.dump(2) + "\n";
  write_text(root / "tables.json", tables_text);
  write_text(root / "train_spider.json", train.dump(2) + "\n");
  write_text(root / "dev.json", dev.dump(2) + "\n");
  write_text(root / "train_gold.sql", train_gold);
  write_text(root / "dev_gold.sql", dev_gold);
  write_text(root / "sparc" / "tables.json", tables_text);
  write_text(root / "sparc" / "train.json", sparc_train.dump(2) + "\n");
  write_text(root / "sparc" / "dev.json", sparc_dev.dump(2) + "\n");
  write_text(root / "sparc" / "train_gold.txt", sparc_train_gold);
  write_text(root / "sparc" / "dev_gold.txt", sparc_dev_gold);
  for (const auto& entry : tables) {
    const std::string db_id = entry["db_id"].get<std::string>();
    fs::create_directories(root / "sparc" / "database" / db_id);
    fs::copy_file(root / "database" / db_id / (db_id + ".sqlite"), root / "sparc" / "database" / db_id / (db_id + ".sqlite"),
                  fs::copy_options::overwrite_existing);
  }

  ordered_json info;
  info["generator"] = "llm_sqlrl data synth";
  info["seed"] = o.seed;
  info["train_databases"] = o.train_databases;
  info["dev_databases"] = o.dev_databases;
  info["questions_per_database"] = o.questions_per_database;
  info["dialogues_per_database"] = o.dialogues_per_database;
  info["mix"] = {{"easy", o.mix[0]}, {"medium", o.mix[1]}, {"hard", o.mix[2]}, {"extra", o.mix[3]}};
  info["trap_share"] = o.trap_share;
  info["questions"] = {{"train", report.train_questions}, {"dev", report.dev_questions}};
  info["hardness"] = {{"easy", report.hardness[0]}, {"medium", report.hardness[1]}, {"hard", report.hardness[2]}, {"extra", report.hardness[3]}};
  info["surface_form_traps"] = report.surface_form_traps;
  info["number_as_text_traps"] = report.number_as_text_traps;
  info["categories"] = report.categories;
  info["dialogues"] = {{"train", report.train_dialogues}, {"dev", report.dev_dialogues}, {"turns", report.dialogue_turns}};
  info["note"] = "Spider's parsed 'sql' field is omitted; 'difficulty' is Spider hardness of the gold (CAST(x AS INTEGER) read as x).";
  write_text(root / "synth_info.json", info.dump(2) + "\n");
  return report;
}

}  // namespace sqlrl::sql

// Loaders for the benchmark formats listed in datasets.h. Every record is checked field by
// field; a problem names the file, the record index and the field.
#include "sql/data/datasets.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <iterator>

#include "runtime/error.h"
#include "runtime/json_depth.h"

namespace sqlrl::sql {
namespace fs = std::filesystem;
using nlohmann::json;

DatasetFormat parse_dataset_format(const std::string& name) {
  if (name == "spider") return DatasetFormat::Spider;
  if (name == "bird") return DatasetFormat::Bird;
  if (name == "sparc") return DatasetFormat::Sparc;
  if (name == "cosql") return DatasetFormat::Cosql;
  if (name == "synsql") return DatasetFormat::Synsql;
  if (name == "spider-dk") return DatasetFormat::SpiderDk;
  if (name == "spider-syn") return DatasetFormat::SpiderSyn;
  if (name == "spider-realistic") return DatasetFormat::SpiderRealistic;
  fail("unknown dataset format '", name,
       "' (expected spider, spider-dk, spider-syn, spider-realistic, bird, sparc, cosql or synsql)");
}

const char* dataset_format_name(DatasetFormat format) {
  switch (format) {
    case DatasetFormat::Spider: return "spider";
    case DatasetFormat::Bird: return "bird";
    case DatasetFormat::Sparc: return "sparc";
    case DatasetFormat::Cosql: return "cosql";
    case DatasetFormat::Synsql: return "synsql";
    case DatasetFormat::SpiderDk: return "spider-dk";
    case DatasetFormat::SpiderSyn: return "spider-syn";
    case DatasetFormat::SpiderRealistic: return "spider-realistic";
  }
  return "?";
}

const char* dataset_source(DatasetFormat format) {
  switch (format) {
    case DatasetFormat::Spider: return "spider_data.zip of https://yale-lily.github.io/spider";
    case DatasetFormat::Bird: return "https://bird-bench.github.io";
    case DatasetFormat::Sparc: return "https://yale-lily.github.io/sparc";
    case DatasetFormat::Cosql: return "https://yale-lily.github.io/cosql";
    case DatasetFormat::Synsql: return "https://huggingface.co/datasets/seeklhy/SynSQL-2.5M";
    case DatasetFormat::SpiderDk: return "https://github.com/ygan/Spider-DK";
    case DatasetFormat::SpiderSyn: return "https://github.com/ygan/Spider-Syn";
    case DatasetFormat::SpiderRealistic: return "https://doi.org/10.5281/zenodo.5205322";
  }
  return "?";
}

LoadOptions parse_dataset_spec(const std::string& spec, const std::string& split, const std::string& key) {
  const size_t colon = spec.find(':');
  check(colon != std::string::npos && colon > 0, key, " '", spec,
        "': expected FORMAT:PATH[,db=DBDIR], e.g. spider:data/spider or spider-syn:data/Spider-Syn,db=data/spider/database");
  LoadOptions load;
  try {
    load.format = parse_dataset_format(spec.substr(0, colon));
  } catch (const Error& e) {
    fail(key, " '", spec, "': ", e.what());
  }
  std::string rest = spec.substr(colon + 1);
  const size_t db = rest.rfind(",db=");
  if (db != std::string::npos) {
    load.extra_db_root = rest.substr(db + 4);
    rest.resize(db);
    check(!load.extra_db_root.empty(), key, " '", spec, "': db= names no folder");
  }
  // Any other ",name=" is a misspelt option, not a comma in a folder name.
  const size_t comma = rest.rfind(',');
  if (comma != std::string::npos) {
    const std::string tail = rest.substr(comma + 1);
    const size_t eq = tail.find('=');
    const bool option = eq != std::string::npos && eq > 0 &&
                        std::all_of(tail.begin(), tail.begin() + static_cast<std::ptrdiff_t>(eq),
                                    [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
    check(!option, key, " '", spec, "': unknown option '", tail.substr(0, eq), "' (the one option is db=DBDIR)");
  }
  check(!rest.empty(), key, " '", spec, "': no dataset folder after the colon");
  load.dir = rest;
  load.split = split;
  return load;
}

namespace {

json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path, ": cannot open");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  check_json_depth(text, path);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
}

// A required string field of record `index`.
std::string string_field(const json& record, const char* field, const std::string& path, size_t index) {
  auto it = record.find(field);
  check(it != record.end(), path, ": record ", index, ": field '", field, "' is missing");
  check(it->is_string(), path, ": record ", index, ": field '", field, "' is not a string (", it->type_name(), ")");
  return it->get<std::string>();
}

// An optional string field: "" when absent or null.
std::string optional_string(const json& record, const char* field, const std::string& path, size_t index) {
  auto it = record.find(field);
  if (it == record.end() || it->is_null()) return "";
  check(it->is_string(), path, ": record ", index, ": field '", field, "' is not a string (", it->type_name(), ")");
  return it->get<std::string>();
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

struct Layout {
  std::string questions, tables;
  std::vector<std::string> db_roots;  // searched in order for <db>/<db>.sqlite
};

// The splits each set publishes. A split it does not have is an error saying why, so a missing
// file is never mistaken for a typo in the path.
void check_split(const LoadOptions& o) {
  if (!o.file.empty() || o.format == DatasetFormat::Synsql) return;
  const std::string& s = o.split;
  const char* name = dataset_format_name(o.format);
  switch (o.format) {
    case DatasetFormat::Spider:
      check(s == "train" || s == "dev" || s == "test", "dataset spider: split must be train, dev or test, got '", s, "'");
      return;
    case DatasetFormat::Bird:
    case DatasetFormat::Sparc:
    case DatasetFormat::Cosql:
      check(s != "test", "dataset ", name, ": there is no public test split (its authors keep the test set hidden and ",
            "score submitted models, ", dataset_source(o.format), "); evaluate on dev");
      check(s == "train" || s == "dev", "dataset ", name, ": split must be train or dev, got '", s, "'");
      return;
    case DatasetFormat::SpiderSyn:
      check(s == "train" || s == "dev", "dataset spider-syn: split must be train or dev (Spider-Syn rewrites Spider's ",
            "train and dev questions; it has no test split), got '", s, "'");
      return;
    case DatasetFormat::SpiderDk:
    case DatasetFormat::SpiderRealistic:
      check(s == "dev", "dataset ", name, " is one evaluation set built from Spider dev: use split dev, got '", s, "'");
      return;
    case DatasetFormat::Synsql: return;
  }
}

Layout layout_for(const LoadOptions& o) {
  check_split(o);
  fs::path dir(o.dir);
  const bool test = o.split == "test";
  Layout l;
  std::string own_db;
  switch (o.format) {
    case DatasetFormat::Spider:
      l.questions = (dir / (test ? "test.json" : o.split == "train" ? "train_spider.json" : "dev.json")).string();
      l.tables = (dir / (test ? "test_tables.json" : "tables.json")).string();
      own_db = (dir / (test ? "test_database" : "database")).string();
      break;
    case DatasetFormat::SpiderDk:
      // ygan/Spider-DK: Spider-DK.json, tables.json (to use instead of Spider's) and database/
      // with the three databases it modified, at the repository root.
      l.questions = (dir / "Spider-DK.json").string();
      l.tables = (dir / "tables.json").string();
      own_db = (dir / "database").string();
      break;
    case DatasetFormat::SpiderSyn: {
      // ygan/Spider-Syn keeps Spider-Syn/{train_spider,dev}.json; its root is accepted too.
      const std::string file = o.split == "train" ? "train_spider.json" : "dev.json";
      if (!fs::exists(dir / file) && fs::exists(dir / "Spider-Syn" / file)) dir /= "Spider-Syn";
      l.questions = (dir / file).string();
      l.tables = (dir / "tables.json").string();
      own_db = (dir / "database").string();
      break;
    }
    case DatasetFormat::SpiderRealistic:
      l.questions = (dir / "spider-realistic.json").string();
      l.tables = (dir / "tables.json").string();
      own_db = (dir / "database").string();
      break;
    case DatasetFormat::Bird:
      l.questions = (dir / (o.split + ".json")).string();
      l.tables = (dir / (o.split + "_tables.json")).string();
      own_db = (dir / (o.split + "_databases")).string();
      break;
    case DatasetFormat::Sparc:
      l.questions = (dir / (o.split + ".json")).string();
      l.tables = (dir / "tables.json").string();
      own_db = (dir / "database").string();
      break;
    case DatasetFormat::Cosql: {
      fs::path tracked = dir / "sql_state_tracking" / ("cosql_" + o.split + ".json");
      l.questions = fs::exists(tracked) ? tracked.string() : (dir / (o.split + ".json")).string();
      l.tables = (dir / "tables.json").string();
      own_db = (dir / "database").string();
      break;
    }
    case DatasetFormat::Synsql:
      l.questions = (dir / "data.json").string();
      l.tables = (dir / "tables.json").string();
      own_db = (dir / "databases").string();
      break;
  }
  if (o.file.empty())
    check(fs::is_regular_file(l.questions), l.questions, ": no such file (the ", dataset_format_name(o.format), " ",
          o.format == DatasetFormat::Synsql ? "" : o.split + " ", "questions; the set comes from ",
          dataset_source(o.format), ")");
  else
    l.questions = o.file;
  l.db_roots.push_back(own_db);
  if (!o.extra_db_root.empty()) {
    check(fs::is_directory(o.extra_db_root), "db=", o.extra_db_root, ": no such folder (the folder of <db>/<db>.sqlite, ",
          "e.g. Spider's database/)");
    l.db_roots.push_back(o.extra_db_root);
    // The variants that ship no tables.json use Spider's, beside its database/ folder.
    if (!fs::exists(l.tables)) l.tables = (fs::path(o.extra_db_root).parent_path() / "tables.json").string();
  }
  if (!fs::exists(l.tables)) l.tables.clear();
  return l;
}

// Resolves <root>/<db>/<db>.sqlite once per database, in the first root that has it.
struct DbResolver {
  std::vector<std::string> roots;
  std::map<std::string, std::string> found;  // db id -> its file, "" when no root has it
  static std::string in(const std::string& root, const std::string& db_id) {
    return (fs::path(root) / db_id / (db_id + ".sqlite")).string();
  }
  const std::string& resolve(const std::string& db_id) {
    auto it = found.find(db_id);
    if (it != found.end()) return it->second;
    std::string hit;
    for (const std::string& root : roots)
      if (!db_id.empty() && fs::is_regular_file(in(root, db_id))) {
        hit = in(root, db_id);
        break;
      }
    return found.emplace(db_id, std::move(hit)).first->second;
  }
  // The file found, else where the first root would hold it (what the error names).
  std::string path(const std::string& db_id) {
    const std::string& hit = resolve(db_id);
    return hit.empty() ? in(roots.front(), db_id) : hit;
  }
  bool present(const std::string& db_id) { return !resolve(db_id).empty(); }
};

// Why records name databases that are not there, and what to do about it.
std::string missing_database_message(const LoadOptions& o, const Layout& l, const Dataset& ds) {
  std::string ids, roots, absent;
  for (const std::string& id : ds.missing_ids) ids += (ids.empty() ? "" : ", ") + id;
  for (const std::string& r : l.db_roots) {
    roots += (roots.empty() ? "" : " or ") + r;
    if (!fs::is_directory(r)) absent += str_cat("; ", r, " does not exist");
  }
  std::string hint;
  if (o.extra_db_root.empty() && (o.format == DatasetFormat::SpiderDk || o.format == DatasetFormat::SpiderSyn ||
                                  o.format == DatasetFormat::SpiderRealistic))
    hint = str_cat("; ", dataset_format_name(o.format), " uses Spider's databases: add ,db=SPIDER/database to the spec");
  return str_cat(l.questions, ": ", ds.missing_records, " record(s) name a database missing under ", roots,
                 " (first: ", ids, "; expected <folder>/<db>/<db>.sqlite)", absent, hint, "; the set comes from ",
                 dataset_source(o.format), "; use --skip-missing to skip them");
}

}  // namespace

Dataset load_dataset(const LoadOptions& options) {
  Layout layout = layout_for(options);
  Dataset ds;
  ds.format = options.format;
  ds.questions_path = layout.questions;
  ds.tables_path = layout.tables;
  ds.db_root = layout.db_roots.front();
  ds.records = read_json_file(layout.questions);
  const std::string& path = layout.questions;
  check(ds.records.is_array(), path, ": expected a JSON array of records, got ", ds.records.type_name());

  DbResolver dbs{layout.db_roots, {}};
  const std::string split = options.file.empty() ? options.split : fs::path(options.file).stem().string();
  const bool dialogue = options.format == DatasetFormat::Sparc || options.format == DatasetFormat::Cosql;

  auto note_missing = [&](const std::string& db_id) {
    ++ds.missing_records;
    if (ds.missing_ids.size() < 10) ds.missing_ids.push_back(db_id);
  };

  for (size_t i = 0; i < ds.records.size(); ++i) {
    const json& rec = ds.records[i];
    check(rec.is_object(), path, ": record ", i, ": expected an object, got ", rec.type_name());
    if (dialogue) {
      std::string db_id = string_field(rec, "database_id", path, i);
      auto it = rec.find("interaction");
      check(it != rec.end(), path, ": record ", i, ": field 'interaction' is missing");
      check(it->is_array(), path, ": record ", i, ": field 'interaction' is not a list");
      check(!it->empty(), path, ": record ", i, ": field 'interaction' is empty");
      std::vector<Example> turns;
      for (size_t t = 0; t < it->size(); ++t) {
        const json& turn = (*it)[t];
        std::string where = str_cat("interaction[", t, "]");
        check(turn.is_object(), path, ": record ", i, ": ", where, " is not an object");
        auto utter = turn.find("utterance");
        auto query = turn.find("query");
        check(utter != turn.end() && utter->is_string(), path, ": record ", i, ": ", where,
              ".utterance is missing or not a string");
        check(query != turn.end() && query->is_string(), path, ": record ", i, ": ", where,
              ".query is missing or not a string");
        Example e;
        e.id = str_cat(split, "_", i, "_t", t);
        e.db_id = db_id;
        e.db_path = dbs.path(db_id);
        e.question = utter->get<std::string>();
        e.gold_sql = query->get<std::string>();
        e.turn_index = static_cast<int>(t);
        e.record_index = i;
        for (const Example& prev : turns) e.history.push_back({prev.question, prev.gold_sql});
        turns.push_back(std::move(e));
      }
      if (!dbs.present(db_id)) {
        note_missing(db_id);
        continue;
      }
      for (Example& e : turns) ds.examples.push_back(std::move(e));
      continue;
    }

    Example e;
    e.id = str_cat(split, "_", i);
    e.record_index = i;
    e.db_id = string_field(rec, "db_id", path, i);
    e.db_path = dbs.path(e.db_id);
    // Spider-Syn keeps Spider's question beside its synonym-substituted one; the latter is the set.
    e.question = string_field(rec, options.format == DatasetFormat::SpiderSyn ? "SpiderSynQuestion" : "question", path, i);
    switch (options.format) {
      case DatasetFormat::Spider:
      case DatasetFormat::SpiderDk:
      case DatasetFormat::SpiderSyn:
      case DatasetFormat::SpiderRealistic:
        e.gold_sql = string_field(rec, "query", path, i);
        e.difficulty = optional_string(rec, "difficulty", path, i);
        if (auto synth = rec.find("synth"); synth != rec.end() && synth->is_object())
          e.category = optional_string(*synth, "category", path, i);
        break;
      case DatasetFormat::Bird:
        e.gold_sql = string_field(rec, "SQL", path, i);
        e.evidence = optional_string(rec, "evidence", path, i);
        e.difficulty = optional_string(rec, "difficulty", path, i);
        break;
      case DatasetFormat::Synsql:
        e.gold_sql = string_field(rec, "sql", path, i);
        e.evidence = optional_string(rec, "external_knowledge", path, i);
        e.difficulty = lower(optional_string(rec, "sql_complexity", path, i));
        break;
      default: break;
    }
    if (!dbs.present(e.db_id)) {
      note_missing(e.db_id);
      continue;
    }
    ds.examples.push_back(std::move(e));
  }

  if (ds.missing_records > 0 && !options.skip_missing) fail(missing_database_message(options, layout, ds));

  if (options.compute_difficulty)
    for (Example& e : ds.examples)
      if (e.difficulty.empty()) {
        e.difficulty = spider_hardness_of(e.db_path, e.gold_sql);
        if (e.difficulty.empty()) ++ds.unparsed_difficulty;
      }
  return ds;
}

// ---- BIRD database descriptions ----
namespace {

// RFC 4180 records (quoted fields may hold commas, doubled quotes and newlines).
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false, any = false;
  size_t i = 0;
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) i = 3;  // BIRD's files often start with a BOM
  for (; i < text.size(); ++i) {
    char c = text[i];
    any = true;
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(std::move(field));
      field.clear();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      row.push_back(std::move(field));
      field.clear();
      rows.push_back(std::move(row));
      row.clear();
      any = false;
    } else {
      field += c;
    }
  }
  if (any) {
    row.push_back(std::move(field));
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

std::map<std::string, std::map<std::string, std::string>> load_bird_descriptions(const std::string& db_dir) {
  std::map<std::string, std::map<std::string, std::string>> out;
  fs::path dir = fs::path(db_dir) / "database_description";
  if (!fs::is_directory(dir)) return out;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".csv") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    check(in.good(), file.string(), ": cannot open");
    std::stringstream buf;
    buf << in.rdbuf();
    auto rows = parse_csv(buf.str());
    if (rows.empty()) continue;
    int col_name = -1, col_desc = -1, value_desc = -1;
    for (size_t c = 0; c < rows[0].size(); ++c) {
      std::string h = lower(trim(rows[0][c]));
      if (h == "original_column_name") col_name = static_cast<int>(c);
      if (h == "column_description") col_desc = static_cast<int>(c);
      if (h == "value_description") value_desc = static_cast<int>(c);
    }
    check(col_name >= 0, file.string(), ": header has no 'original_column_name' column");
    auto& table = out[file.stem().string()];
    for (size_t r = 1; r < rows.size(); ++r) {
      const auto& row = rows[r];
      if (row.size() == 1 && trim(row[0]).empty()) continue;
      check(static_cast<int>(row.size()) > col_name, file.string(), ": row ", r, " has ", row.size(),
            " fields, fewer than the header's");
      std::string name = trim(row[col_name]);
      std::string desc = col_desc >= 0 && col_desc < static_cast<int>(row.size()) ? trim(row[col_desc]) : "";
      std::string values = value_desc >= 0 && value_desc < static_cast<int>(row.size()) ? trim(row[value_desc]) : "";
      std::string text = desc;
      if (!values.empty()) text += (text.empty() ? "values: " : "; values: ") + values;
      if (!name.empty() && !text.empty()) table[name] = text;
    }
  }
  return out;
}

// ---- audit ----
const char* gold_status_name(GoldStatus status) {
  switch (status) {
    case GoldStatus::Ok: return "ok";
    case GoldStatus::Empty: return "empty";
    case GoldStatus::Error: return "error";
    case GoldStatus::Timeout: return "timeout";
  }
  return "?";
}

AuditReport audit_gold(Pool& pool, const std::vector<Example>& examples, const Limits& limits) {
  std::vector<std::future<Result>> futures;
  futures.reserve(examples.size());
  for (const Example& e : examples) futures.push_back(pool.submit(e.db_path, e.gold_sql, limits));
  AuditReport report;
  report.items.resize(examples.size());
  for (size_t i = 0; i < futures.size(); ++i) {
    Result r = futures[i].get();
    AuditItem& item = report.items[i];
    item.rows = r.rows.size();
    if (r.timed_out) {
      item.status = GoldStatus::Timeout;
      item.error = r.error;
      ++report.timeouts;
    } else if (!r.ok()) {
      item.status = GoldStatus::Error;
      item.error = r.error;
      ++report.errors;
    } else if (r.rows.empty()) {
      item.status = GoldStatus::Empty;
      ++report.empty;
    } else {
      ++report.ok;
    }
  }
  return report;
}

json kept_records(const Dataset& dataset, const AuditReport& audit) {
  check(audit.items.size() == dataset.examples.size(), "audit has ", audit.items.size(), " items for ",
        dataset.examples.size(), " examples");
  // record -> all of its examples passed
  std::map<size_t, bool> passed;
  for (size_t i = 0; i < dataset.examples.size(); ++i) {
    auto [it, fresh] = passed.emplace(dataset.examples[i].record_index, true);
    it->second = it->second && audit.items[i].status == GoldStatus::Ok;
  }
  json out = json::array();
  for (const auto& [record, ok] : passed)
    if (ok) out.push_back(dataset.records[record]);
  return out;
}

std::string dataset_summary(const Dataset& ds) {
  std::ostringstream s;
  std::set<std::string> dbs;
  std::map<std::string, size_t> difficulty;
  std::map<int, size_t> turns;
  size_t with_evidence = 0;
  std::set<size_t> records;
  for (const Example& e : ds.examples) {
    dbs.insert(e.db_id);
    difficulty[e.difficulty.empty() ? "(none)" : e.difficulty]++;
    turns[e.turn_index]++;
    records.insert(e.record_index);
    if (!e.evidence.empty()) ++with_evidence;
  }
  s << "format:      " << dataset_format_name(ds.format) << "\n";
  s << "questions:   " << ds.questions_path << "\n";
  s << "records:     " << ds.records.size() << " (" << records.size() << " loaded, " << ds.missing_records
    << " skipped for a missing database)\n";
  s << "examples:    " << ds.examples.size() << "\n";
  s << "databases:   " << dbs.size() << "\n";
  if (with_evidence) s << "evidence:    " << with_evidence << "\n";
  if (ds.missing_records) {
    s << "missing dbs: ";
    for (size_t i = 0; i < ds.missing_ids.size(); ++i) s << (i ? ", " : "") << ds.missing_ids[i];
    s << "\n";
  }
  if (turns.size() > 1) {
    s << "turns:";
    for (const auto& [t, n] : turns) s << " " << t + 1 << ":" << n;
    s << "\n";
  }
  s << "difficulty:";
  for (const auto& [d, n] : difficulty) s << " " << d << ":" << n;
  s << "\n";
  if (ds.unparsed_difficulty) s << "hardness not computable (Spider parser rejects the gold): " << ds.unparsed_difficulty << "\n";
  return s.str();
}

std::string audit_summary(const Dataset& ds, const AuditReport& audit, size_t show_failures) {
  std::ostringstream s;
  s << "gold audit:  ok " << audit.ok << ", empty " << audit.empty << ", error " << audit.errors << ", timeout "
    << audit.timeouts << "\n";
  size_t shown = 0;
  for (size_t i = 0; i < audit.items.size() && shown < show_failures; ++i) {
    const AuditItem& item = audit.items[i];
    if (item.status == GoldStatus::Ok) continue;
    ++shown;
    const Example& e = ds.examples[i];
    s << "  " << gold_status_name(item.status) << " " << e.id << " [" << e.db_id << "] " << e.gold_sql;
    if (!item.error.empty()) s << "  -- " << item.error;
    s << "\n";
  }
  return s.str();
}

}  // namespace sqlrl::sql

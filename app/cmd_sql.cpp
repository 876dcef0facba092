// `llm_sqlrl sql`: run one query through the read-only pool and print the observation exactly as
// a model would see it. `llm_sqlrl schema`: print a database's schema in a prompt style.
#include <cstdio>

#include "app/commands.h"
#include "runtime/error.h"
#include "sql/exec/format.h"
#include "sql/exec/pool.h"
#include "sql/exec/schema.h"

namespace sqlrl {

namespace {

void add_schema_command(CLI::App& app);

// The observation formats, one row each: a name, its help, how it renders a result.
struct ObservationFormat {
  const char* name;
  const char* help;
  std::string (*render)(const sql::Result& r, const std::string& db, const std::string& sql, bool no_index);
  bool notes_tail;  // a statement after the first is reported on stderr (json carries it itself)
};

std::string df_frame(const sql::Result& r, const std::string& db, const std::string& sql, bool no_index) {
  sql::DataFrameStyle style;
  style.index = !no_index;
  return sql::format_df_observation(r, style, {db, sql});
}
std::string skyrl_frame(const sql::Result& r, const std::string& db, const std::string& sql, bool) {
  sql::DataFrameStyle style;
  style.index = false;
  style.column_names = false;
  style.dedupe_rows = true;
  return sql::format_df_observation(r, style, {db, sql});
}
std::string mtir_json(const sql::Result& r, const std::string&, const std::string&, bool) {
  return sql::format_mtir_observation(r);
}
std::string recap(const sql::Result& r, const std::string&, const std::string&, bool) {
  return sql::format_recap_observation(r);
}
std::string json(const sql::Result& r, const std::string&, const std::string&, bool) {
  return sql::format_result_json(r);
}

const ObservationFormat kFormats[] = {
    {"df", "SQL-Trail's data frame", df_frame, true},
    {"skyrl", "SkyRL-SQL's frame", skyrl_frame, true},
    {"mtir", "MTIR-SQL's JSON", mtir_json, true},
    {"recap", "a one-line recap", recap, true},
    {"json", "the full result", json, false},
};

std::vector<std::string> format_names() {
  std::vector<std::string> out;
  for (const ObservationFormat& f : kFormats) out.push_back(f.name);
  return out;
}
std::string format_help() {
  std::string out;
  for (const ObservationFormat& f : kFormats) out += (out.empty() ? "" : ", ") + std::string(f.name) + " (" + f.help + ")";
  return out;
}
const ObservationFormat& find_format(const std::string& name) {
  for (const ObservationFormat& f : kFormats)
    if (name == f.name) return f;
  fail("sql: --format '", name, "' is not one of ", format_help());
}

}  // namespace

// Registers both `sql` and `schema` (one entry point, so app/commands.h gains one line).
void add_sql_command(CLI::App& app) {
  add_schema_command(app);
  CLI::App* cmd = app.add_subcommand("sql", "Run one SQL query read-only and print the observation a model would see");
  auto db = std::make_shared<std::string>();
  auto sql_text = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>("df");
  auto timeout_ms = std::make_shared<int64_t>(5000);
  auto max_rows = std::make_shared<size_t>(10000);
  auto vm_steps = std::make_shared<int64_t>(0);
  auto no_index = std::make_shared<bool>(false);
  cmd->add_option("--db", *db, "SQLite database file")->required();
  cmd->add_option("--format", *format, format_help())->check(CLI::IsMember(format_names()));
  cmd->add_option("--timeout-ms", *timeout_ms, "wall-clock limit inside SQLite");
  cmd->add_option("--max-rows", *max_rows, "rows fetched at most");
  cmd->add_option("--vm-steps", *vm_steps, "deterministic budget in SQLite VM steps (0 = none)");
  cmd->add_flag("--no-index", *no_index, "df: omit the index column");
  cmd->add_option("query", *sql_text, "the SQL (only the first statement runs)")->required();
  cmd->callback([=] {
    sql::Limits limits;
    limits.timeout_ms = *timeout_ms;
    limits.max_rows = *max_rows;
    limits.max_vm_steps = *vm_steps;
    sql::Result r = sql::execute_once(*db, *sql_text, limits);
    const ObservationFormat& f = find_format(*format);
    const std::string out = f.render(r, *db, *sql_text, *no_index);
    std::printf("%s\n", out.c_str());
    if (!r.ignored_tail.empty() && f.notes_tail)
      std::fprintf(stderr, "note: only the first statement ran; not executed: %s\n", r.ignored_tail.c_str());
  });
}

namespace {

// The schema styles, one row each: a name, whether it shows sample values, how it renders.
struct SchemaStyle {
  const char* name;
  bool samples;
  std::string (*render)(const sql::DatabaseSchema& schema);
};
const SchemaStyle kStyles[] = {
    {"ddl", true, sql::schema_ddl},
    {"sqltrail", false, sql::schema_sqltrail},
    {"compact", false, sql::schema_compact},
};
std::vector<std::string> style_names() {
  std::vector<std::string> out;
  for (const SchemaStyle& s : kStyles) out.push_back(s.name);
  return out;
}
const SchemaStyle& find_style(const std::string& name) {
  for (const SchemaStyle& s : kStyles)
    if (name == s.name) return s;
  fail("schema: --style '", name, "' is not one of the styles");
}

void add_schema_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("schema", "Print a database schema as a prompt shows it");
  auto db = std::make_shared<std::string>();
  auto style = std::make_shared<std::string>("ddl");
  auto samples = std::make_shared<size_t>(3);
  cmd->add_option("--db", *db, "SQLite database file")->required();
  cmd->add_option("--style", *style, "ddl (OmniSQL/SkyRL/Arctic, with sample values), sqltrail, compact")
      ->check(CLI::IsMember(style_names()));
  cmd->add_option("--samples", *samples, "distinct sample values per column (ddl)");
  cmd->callback([=] {
    sql::Pool pool;
    const SchemaStyle& st = find_style(*style);
    sql::DatabaseSchema schema = sql::read_schema(pool, *db, st.samples ? *samples : 0);
    std::string out = st.render(schema);
    std::printf("%s\n", out.c_str());
  });
}
}  // namespace

}  // namespace sqlrl

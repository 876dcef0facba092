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
}

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
  cmd->add_option("--format", *format, "df (SQL-Trail frame), skyrl (SkyRL-SQL frame), mtir, recap, json")
      ->check(CLI::IsMember({"df", "skyrl", "mtir", "recap", "json"}));
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
    std::string out;
    if (*format == "df" || *format == "skyrl") {
      sql::DataFrameStyle style;
      if (*format == "skyrl") {
        style.index = false;
        style.column_names = false;
        style.dedupe_rows = true;
      } else {
        style.index = !*no_index;
      }
      out = sql::format_df_observation(r, style, {*db, *sql_text});
    } else if (*format == "mtir") {
      out = sql::format_mtir_observation(r);
    } else if (*format == "recap") {
      out = sql::format_recap_observation(r);
    } else {
      out = sql::format_result_json(r);
    }
    std::printf("%s\n", out.c_str());
    if (!r.ignored_tail.empty() && *format != "json")
      std::fprintf(stderr, "note: only the first statement ran; not executed: %s\n", r.ignored_tail.c_str());
  });
}

namespace {
void add_schema_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("schema", "Print a database schema as a prompt shows it");
  auto db = std::make_shared<std::string>();
  auto style = std::make_shared<std::string>("ddl");
  auto samples = std::make_shared<size_t>(3);
  cmd->add_option("--db", *db, "SQLite database file")->required();
  cmd->add_option("--style", *style, "ddl (OmniSQL/SkyRL), sqltrail, compact")
      ->check(CLI::IsMember({"ddl", "sqltrail", "compact"}));
  cmd->add_option("--samples", *samples, "distinct sample values per column (ddl)");
  cmd->callback([=] {
    sql::Pool pool;
    sql::DatabaseSchema schema = sql::read_schema(pool, *db, *style == "ddl" ? *samples : 0);
    std::string out = *style == "ddl" ? sql::schema_ddl(schema)
                      : *style == "sqltrail" ? sql::schema_sqltrail(schema)
                                             : sql::schema_compact(schema);
    std::printf("%s\n", out.c_str());
  });
}
}  // namespace

}  // namespace sqlrl

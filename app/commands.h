// Each subcommand lives in its own app/cmd_*.cpp and registers itself on the CLI11 app here.
// The callback a command sets returns nothing; errors are thrown as sqlrl::Error and main
// prints them on one line with exit code 1.
#pragma once
#include <CLI/CLI.hpp>

namespace sqlrl {

void add_info_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_sql_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_eval_sql_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_init_command(CLI::App& app);
void add_sft_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_merge_command(CLI::App& app);
// `llm_sqlrl demo` with its defaults (what `llm_sqlrl train` with no arguments runs).
void run_default_demo();

}  // namespace sqlrl

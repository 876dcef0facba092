// A command's options table (runtime/options.h) on the command line: one flag per entry, plus
// --config FILE, resolved in layers. Every command with settings registers itself this way, so a
// knob has one spelling, one help line and one config-file key everywhere.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/options.h"

namespace sqlrl {

struct TableFlags {
  std::string config;               // --config FILE
  std::vector<CLI::Option*> flags;  // one per table entry, in table order
  bool show_config = false;         // --show-config: print the resolved settings and stop
  ConfigSection section;            // the part of a paper recipe this command reads
  std::string command;              // "eval", "sft self-taught", ...: names the printout
  bool any_given() const;           // --config, --show-config or any flag on the command line
};

// A command's parsed command line: the settings instance its flags wrote into, and which were given.
template <class Settings>
struct TableArgs {
  Settings settings;
  TableFlags flags;
};

// Registers --config FILE, --show-config and one flag per entry of `table` (whose fields receive
// the parsed values). A bool entry is a flag: `--enable-thinking`, `--enable-thinking=false`.
// `section`: the [section] of a paper recipe the command reads ("" = the top, train's; runtime/
// options.h ConfigSection); a sectioned command also takes the top's environment keys
// (rl::environment_keys: protocol, template, turn caps, SQL limits, compare).
void add_table_flags(CLI::App* cmd, const OptionTable& table, TableFlags& flags, const std::string& section = "");

// One entry of a table as a CLI flag (what add_table_flags does for each), for a command that
// takes a shared group's keys as plain flags without --config (`plan`).
CLI::Option* add_table_flag(CLI::App* cmd, const Option& option);

// The [section] names a recipe may hold: one per command that reads one.
const std::vector<std::string>& recipe_sections();

// What --config names: a file, else one of the recipes compiled in (app/recipes.h) by name.
struct ConfigText {
  std::string text, label;  // label: "file PATH" or "recipe NAME"
};
ConfigText read_config_arg(const std::string& value);

// Copies the keys `config` sets into `target` (except `skip`), marking them in `sources` (when
// given) with config.label. table_of(x) gives the table of instance x.
// Fails naming a [section] no command reads (a typo would silently drop its keys).
void check_config_sections(const ConfigText& config);

template <class Config, class TableOf>
void apply_config_text(Config& target, const ConfigText& config, TableOf table_of, OptionSources* sources,
                       const std::vector<std::string>& skip = {}, const ConfigSection& section = {}) {
  check_config_sections(config);
  Config file;
  std::vector<size_t> present;
  read_options_text(config.text, config.label, table_of(file), &present, section);
  const OptionTable src = table_of(file), dst = table_of(target);
  for (size_t i : present) {
    bool skipped = false;
    for (const std::string& k : skip) skipped = skipped || k == src[i].key;
    if (skipped) continue;
    copy_option(src, dst, i);
    if (sources) (*sources)[i] = config.label;
  }
}

// --show-config: the resolved settings, each with where it came from, on stdout; then exit 0.
[[noreturn]] void show_config_and_exit(const TableFlags& flags, const OptionTable& table, const OptionSources& sources);

// Layers, later ones winning: `base` (the defaults, or a resumed run's own config), the keys the
// --config file or recipe sets (the command's part of it: TableFlags::section), then the flags
// given on the command line. `parsed` is the instance the flags wrote into. `sources`, when
// given, is table-aligned and updated.
template <class Config, class TableOf>
Config resolve_options(const TableFlags& flags, Config& parsed, Config base, TableOf table_of,
                       OptionSources* sources = nullptr) {
  OptionSources local(table_of(base).size(), "default");
  OptionSources& where = sources ? *sources : local;
  if (!flags.config.empty())
    apply_config_text(base, read_config_arg(flags.config), table_of, &where, {}, flags.section);
  const OptionTable src = table_of(parsed), dst = table_of(base);
  for (size_t i = 0; i < flags.flags.size(); ++i)
    if (flags.flags[i]->count() > 0) {
      copy_option(src, dst, i);
      where[i] = "flag";
    }
  if (flags.show_config) show_config_and_exit(flags, table_of(base), where);
  return base;
}

// Spellings that changed: a command line using one fails before parsing, naming the new one.
void refuse_old_spellings(int argc, char** argv);

}  // namespace sqlrl

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
  bool any_given() const;           // --config or any flag on the command line
};

// A command's parsed command line: the settings instance its flags wrote into, and which were given.
template <class Settings>
struct TableArgs {
  Settings settings;
  TableFlags flags;
};

// Registers --config FILE and one flag per entry of `table` (whose fields receive the parsed
// values). A bool entry is a flag: `--enable-thinking`, `--enable-thinking=false`.
void add_table_flags(CLI::App* cmd, const OptionTable& table, TableFlags& flags);

// What --config names: a file, else one of the recipes compiled in (app/recipes.h) by name.
struct ConfigText {
  std::string text, label;  // label: "file PATH" or "recipe NAME"
};
ConfigText read_config_arg(const std::string& value);

// Copies the keys `config` sets into `target` (except `skip`), marking them in `sources` (when
// given) with config.label. table_of(x) gives the table of instance x.
template <class Config, class TableOf>
void apply_config_text(Config& target, const ConfigText& config, TableOf table_of, OptionSources* sources,
                       const std::vector<std::string>& skip = {}) {
  Config file;
  std::vector<size_t> present;
  read_options_text(config.text, config.label, table_of(file), &present);
  const OptionTable src = table_of(file), dst = table_of(target);
  for (size_t i : present) {
    bool skipped = false;
    for (const std::string& k : skip) skipped = skipped || k == src[i].key;
    if (skipped) continue;
    copy_option(src, dst, i);
    if (sources) (*sources)[i] = config.label;
  }
}

// Layers, later ones winning: `base` (the defaults, or a resumed run's own config), the keys the
// --config file or recipe sets, then the flags given on the command line. `parsed` is the
// instance the flags wrote into. `sources`, when given, is table-aligned and updated.
template <class Config, class TableOf>
Config resolve_options(const TableFlags& flags, Config& parsed, Config base, TableOf table_of,
                       OptionSources* sources = nullptr) {
  if (!flags.config.empty()) apply_config_text(base, read_config_arg(flags.config), table_of, sources);
  const OptionTable src = table_of(parsed), dst = table_of(base);
  for (size_t i = 0; i < flags.flags.size(); ++i)
    if (flags.flags[i]->count() > 0) {
      copy_option(src, dst, i);
      if (sources) (*sources)[i] = "flag";
    }
  return base;
}

// Spellings that changed: a command line using one fails before parsing, naming the new one.
void refuse_old_spellings(int argc, char** argv);

}  // namespace sqlrl

// One table of options per command. Each entry names a field of the command's config struct,
// its key (the --flag without the dashes, and the config-file key) and its help line. The same
// table drives the CLI flags (app/options.h), the config files a command reads (--config FILE)
// and the resolved config.toml it writes into its output folder, so a key means the same thing
// everywhere. Shared groups of options (model, sampling, turn caps, ...) are rl/options.h.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sqlrl {

using OptionValue =
    std::variant<int64_t*, uint64_t*, double*, float*, bool*, std::string*, std::vector<std::string>*>;

struct Option {
  const char* key;   // flag without the dashes, and the config-file key
  const char* help;
  OptionValue value;  // points into the struct the table was made for
  // Whether a resumed run may take a new value: how far it goes, where and how it runs, how it
  // logs and checkpoints. false: what is trained (data, model, algorithm, sampling) stays the
  // run's own, or metrics.jsonl would mix two runs (rl/run_folder.h fixed_settings_changed).
  bool resumable = false;
};
using OptionTable = std::vector<Option>;

// The table's values as a TOML file in CLI11's config format: `# title`, then one `key = value`
// line per entry (strings quoted, arrays ["a", "b"], floats that read back to the same bits).
std::string options_to_toml(const OptionTable& table, const std::string& title);

// Where each setting of a table came from, index for index: "default", "recipe skyrl",
// "file configs/x.toml", "flag", ...
using OptionSources = std::vector<std::string>;

// The table's values as TOML (as options_to_toml), each line followed by `# <its source>`.
std::string options_to_toml(const OptionTable& table, const std::string& title, const OptionSources& sources);

// Which part of a file a command reads. A file without [section] headers is one command's
// settings (a run's config.toml): every key is that command's. A paper recipe (configs/*.toml)
// holds several phases: the RL run's keys at the top (`train` reads those), then `[sft]`,
// `[self-taught]`, `[eval]`, ... sections (`[train]` is another name for the top). A command with a section name reads its own section,
// plus the top's keys listed in `inherit` (what every phase shares: protocol, template, turn caps,
// SQL limits), so a recipe states those once; the top's other keys and other sections are not its.
struct ConfigSection {
  std::string name;                  // "" = the top (train); else the [name] this command reads
  std::vector<std::string> inherit;  // top keys taken too (those the command's table has)
};

// Reads `key = value` lines (strings quoted or bare, arrays ["a", "b"], # comments) of the part
// `section` selects into the table's fields; keys not in the file keep their values, and
// `present` (when given) receives the table indices the file set. An unknown key in the part
// read, a malformed line or value is a one-line error naming the file, the line and the key.
void read_options_toml(const std::string& path, const OptionTable& table, std::vector<size_t>* present = nullptr,
                       const ConfigSection& section = {});
// The same from text; `origin` names it in errors (a path, or "recipe skyrl").
void read_options_text(const std::string& text, const std::string& origin, const OptionTable& table,
                       std::vector<size_t>* present = nullptr, const ConfigSection& section = {});
// The [section] names a file holds, in order (empty for a flat file).
std::vector<std::string> config_sections(const std::string& text);

// Parses `value` (TOML: a quoted or bare string, a number, true/false, ["a", "b"]) into the
// option's field; errors name `where`.
void set_option_value(const Option& option, std::string_view value, const std::string& where);

// *to[index] = *from[index] for two tables of the same layout (two instances of one struct).
void copy_option(const OptionTable& from, const OptionTable& to, size_t index);

// Replaces the help line of `key` (a command's own wording of a shared option); fails when the
// table has no such key.
void set_option_help(OptionTable& table, const char* key, const char* help);
// Sets the resumable attribute of `key` (a command's own rule for a shared option); fails when
// the table has no such key.
void set_option_resumable(OptionTable& table, const char* key, bool resumable);

// The value as the TOML file writes it (for messages).
std::string option_value_text(const Option& option);

}  // namespace sqlrl

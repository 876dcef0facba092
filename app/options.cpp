#include "app/options.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <type_traits>

#include "app/recipes.h"
#include "rl/options.h"
#include "runtime/file_io.h"

namespace sqlrl {

bool TableFlags::any_given() const {
  if (!config.empty() || show_config) return true;
  for (const CLI::Option* o : flags)
    if (o->count() > 0) return true;
  return false;
}

const std::vector<std::string>& recipe_sections() {
  static const std::vector<std::string> names = {"train", "sft", "self-taught", "synth-demos", "eval"};
  return names;
}

void check_config_sections(const ConfigText& config) {
  for (const std::string& name : config_sections(config.text)) {
    const std::vector<std::string>& known = recipe_sections();
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "[" : ", [") + k + "]";
    fail(config.label, ": section [", name, "] is read by no command (the top is train's; sections: ", list, ")");
  }
}

void add_table_flags(CLI::App* cmd, const OptionTable& table, TableFlags& flags, const std::string& section) {
  flags.section.name = section;
  if (!section.empty()) flags.section.inherit = rl::environment_keys();
  flags.command = cmd->get_parent() && !cmd->get_parent()->get_name().empty() && cmd->get_parent()->get_parent()
                      ? cmd->get_parent()->get_name() + " " + cmd->get_name()
                      : cmd->get_name();
  std::string part = section.empty() ? "the top of a recipe (the RL run)" : "a recipe's [" + section + "] section plus its top's protocol, template, turn and SQL keys";
  cmd->add_option("--config", flags.config,
                  "config file (TOML `key = value`, keys = these flags without dashes, e.g. a run's config.toml) or "
                  "a built-in recipe by name (" + recipe_names() + "), of which this command reads " + part +
                  "; flags override its keys");
  cmd->add_flag("--show-config", flags.show_config,
                "print the resolved settings (config.toml form, each line with where its value came from) and stop");
  for (const Option& o : table) flags.flags.push_back(add_table_flag(cmd, o));
}

CLI::Option* add_table_flag(CLI::App* cmd, const Option& o) {
  const std::string flag = std::string("--") + o.key;
  return std::visit(
      [&](auto* p) -> CLI::Option* {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>)
          return cmd->add_flag(flag, *p, std::string(o.help) + (*p ? " (on by default; " + flag + "=false turns it off)" : ""));
        else if constexpr (std::is_same_v<T, uint64_t>)
          // CLI11 converts "-1" to 2^64 - 1 (a negative seed silently became another seed), as
          // strtoull does; the config files refuse it too (runtime/options.cpp).
          return cmd->add_option(flag, *p, o.help)
              ->capture_default_str()
              ->check(CLI::Validator(
                  [](std::string& text) {
                    return text.find('-') == std::string::npos ? std::string() : "must be >= 0, got " + text;
                  },
                  "UINT", "non-negative"));
        else return cmd->add_option(flag, *p, o.help)->capture_default_str();  // --help shows the default
      },
      o.value);
}

[[noreturn]] void show_config_and_exit(const TableFlags& flags, const OptionTable& table, const OptionSources& sources) {
  std::fputs(options_to_toml(table, "llm_sqlrl " + flags.command + ": the resolved configuration", sources).c_str(),
             stdout);
  std::fflush(stdout);
  std::exit(0);
}

ConfigText read_config_arg(const std::string& value) {
  if (std::filesystem::is_regular_file(value)) return {read_file_text(value), value};
  if (const Recipe* r = find_recipe(value)) return {r->text, std::string("recipe ") + r->name};
  fail("config: ", value, " is neither a file nor a built-in recipe (", recipe_names(), ")");
}

void refuse_old_spellings(int argc, char** argv) {
  struct Renamed {
    const char* old_flag;
    const char* now;
  };
  static const Renamed renamed[] = {
      {"--no-thinking", "--enable-thinking=false"},
      {"--no-naive", "--naive=false"},
  };
  for (int i = 1; i < argc; ++i) {
    for (const Renamed& r : renamed)
      check(std::strcmp(argv[i], r.old_flag) != 0, argv[i], " is now spelled ", r.now);
    // `--enable-thinking false` (a value after a flag) was sft synth-demos' spelling.
    if (std::strcmp(argv[i], "--enable-thinking") == 0 && i + 1 < argc &&
        (std::strcmp(argv[i + 1], "true") == 0 || std::strcmp(argv[i + 1], "false") == 0))
      fail("--enable-thinking ", argv[i + 1], " is now spelled --enable-thinking=", argv[i + 1]);
  }
}

}  // namespace sqlrl

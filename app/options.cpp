#include "app/options.h"

#include <cstring>
#include <filesystem>
#include <type_traits>

#include "app/recipes.h"
#include "runtime/file_io.h"

namespace sqlrl {

bool TableFlags::any_given() const {
  if (!config.empty()) return true;
  for (const CLI::Option* o : flags)
    if (o->count() > 0) return true;
  return false;
}

void add_table_flags(CLI::App* cmd, const OptionTable& table, TableFlags& flags) {
  cmd->add_option("--config", flags.config,
                  "config file (TOML `key = value`, keys = these flags without dashes, e.g. a run's config.toml) or "
                  "a built-in recipe by name (" + recipe_names() + "); flags override its keys");
  for (const Option& o : table) {
    const std::string flag = std::string("--") + o.key;
    CLI::Option* opt = std::visit(
        [&](auto* p) -> CLI::Option* {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>)
            return cmd->add_flag(flag, *p, std::string(o.help) + (*p ? " (on by default; " + flag + "=false turns it off)" : ""));
          else return cmd->add_option(flag, *p, o.help)->capture_default_str();  // --help shows the default
        },
        o.value);
    flags.flags.push_back(opt);
  }
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

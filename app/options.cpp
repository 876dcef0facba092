#include "app/options.h"

#include <cstring>
#include <type_traits>

namespace sqlrl {

bool TableFlags::any_given() const {
  if (!config.empty()) return true;
  for (const CLI::Option* o : flags)
    if (o->count() > 0) return true;
  return false;
}

void add_table_flags(CLI::App* cmd, const OptionTable& table, TableFlags& flags) {
  cmd->add_option("--config", flags.config,
                  "config file (TOML `key = value`, keys = these flags without dashes, e.g. a recipe in configs/ or "
                  "a run's config.toml); flags override its keys");
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

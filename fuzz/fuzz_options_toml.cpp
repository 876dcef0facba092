// The TOML config reader (runtime/options.h read_options_text) over `train`'s real option table
// (rl/grpo/train_config.h config_fields), so the recipes in configs/ are valid seeds. Whatever
// it accepts must survive the resolved config.toml a run writes: options_to_toml, read back into
// a fresh config, renders the same text (runtime/options.h promises values that read back to the
// same bits; `--config RUN/config.toml` relies on it). validate_config is run as `train` does.
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "rl/grpo/train_config.h"
#include "runtime/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sqlrl;
  const std::string text(fuzz::as_text(data, size));
  rl::TrainConfig config;
  OptionTable table = rl::config_fields(config);
  bool read = false;
  fuzz::expect_ok_or_error([&] {
    std::vector<size_t> present;
    read_options_text(text, "fuzz.toml", table, &present);
    read = true;
  });
  if (!read) return 0;
  fuzz::expect_ok_or_error([&] { rl::validate_config(config); });

  const std::string saved = options_to_toml(table, "saved");
  rl::TrainConfig again;
  OptionTable again_table = rl::config_fields(again);
  try {
    read_options_text(saved, "saved config.toml", again_table);
    const std::string resaved = options_to_toml(again_table, "saved");
    if (resaved == saved) return 0;
    std::fprintf(stderr, "fuzz: config.toml reads back as different values:\n--- written\n%s--- read back\n%s",
                 saved.c_str(), resaved.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: config.toml does not read back: %s\n--- written\n%s", e.what(), saved.c_str());
  }
  std::abort();
}

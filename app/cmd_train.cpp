// `llm_sqlrl train`: the GRPO trainer. Its engine (rollout, rewards, GRPO) is issue 10; until it
// lands the command says so and fails, rather than pretending to train.
#include <cstdio>
#include <string>

#include "app/commands.h"
#include "runtime/error.h"

namespace sqlrl {

void add_train_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("train", "Train a model with multi-turn GRPO (not built yet: fails with a message)");
  cmd->allow_extras();
  cmd->callback([] { fail("llm_sqlrl train: not built yet: see issue list (multi-turn rollout + GRPO trainer)"); });
}

}  // namespace sqlrl

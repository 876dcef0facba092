// The embedded BPE tokenizer (rl/grpo/train_embedded.cpp) is trained on the synthetic benchmark and
// the first prompts of the paper rows marked embedded_corpus (rl/agent/paper.h). Every figure of
// the embedded demo (README, bench/RESULTS.md) was measured with it: a change to its corpus (a row
// flag, a prompt's text, the BPE trainer) changes the demo's results, and must come with the demo
// re-measured. This pins the tokenizer of one small benchmark by its FNV-1a hash, computed by the
// build whose demo bytes equal 6d888b6's (2026-11-29); update it only together with the figures.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "rl/grpo/train.h"
#include "tests/rl_sft/sft_fixture.h"

namespace sqlrl::rl {
namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  return h;
}

TEST(EmbeddedTokenizer, CorpusIsUnchangedSinceTheDemoFiguresWereMeasured) {
  sql::LoadOptions lo;
  lo.dir = sqlrl::testing::small_bench();  // 2 databases, 16 questions each (tests/rl_sft)
  const std::vector<sql::Example> examples = sql::load_dataset(lo).examples;
  sql::Pool pool;
  const std::string json = train_embedded_tokenizer(examples, pool, 512);
  EXPECT_EQ(fnv1a(json), 13371251410785567203ull) << "the embedded tokenizer changed: hash " << fnv1a(json);
}

}  // namespace
}  // namespace sqlrl::rl

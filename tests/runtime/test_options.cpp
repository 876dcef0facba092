// The options tables' file reader (runtime/options.h): one line per key, errors naming the file,
// the line and the key; a key set twice is refused (the second line would silently win).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/options.h"

namespace sqlrl {
namespace {

struct Knobs {
  int64_t steps = 1;
  uint64_t seed = 7;
  std::vector<std::string> tags;
  double lr = 0.1;
  std::string name = "a";
};

OptionTable table(Knobs& k) {
  return {{"steps", "", &k.steps}, {"lr", "", &k.lr}, {"name", "", &k.name}, {"seed", "", &k.seed}, {"tags", "", &k.tags}};
}

std::string error_of(const std::string& text) {
  Knobs k;
  try {
    read_options_text(text, "x.toml", table(k));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(OptionsFile, ReadsKeysAndSaysWhichLineIsWrong) {
  Knobs k;
  std::vector<size_t> present;
  read_options_text("# comment\nsteps = 5\n[train]\nname = \"b\"  # trailing\n", "x.toml", table(k), &present);
  EXPECT_EQ(k.steps, 5);
  EXPECT_EQ(k.name, "b");
  EXPECT_EQ(k.lr, 0.1);
  EXPECT_EQ(present, (std::vector<size_t>{0, 2}));
  EXPECT_NE(error_of("steps = 5\nnope = 1\n").find("x.toml:2: unknown config key 'nope'"), std::string::npos);
}

// A sectioned file (a paper recipe): the top is train's; a command with a section reads that
// section strictly plus the top's keys it inherits, and skips the rest. Catches a reader that
// lets the top's train keys (or another section's) into a sectioned command, or misses an
// override of an inherited key.
TEST(OptionsFile, ASectionedFileGivesEachCommandItsPart) {
  const std::string text = "steps = 5\nlr = 0.5\nname = \"top\"\n[sft]\nseed = 9\n[eval]\nsteps = 7\nseed = 3\n";
  Knobs top;
  read_options_text(text, "x.toml", table(top));
  EXPECT_EQ(top.steps, 5);
  EXPECT_EQ(top.seed, Knobs{}.seed);  // neither section is the top's
  Knobs ev;
  std::vector<size_t> present;
  read_options_text(text, "x.toml", table(ev), &present, ConfigSection{"eval", {"name", "steps"}});
  EXPECT_EQ(ev.name, "top");  // inherited
  EXPECT_EQ(ev.steps, 7);     // inherited, then [eval]'s own value wins
  EXPECT_EQ(ev.lr, 0.1);      // the top's, not inherited
  EXPECT_EQ(ev.seed, 3u);     // [eval]'s, not [sft]'s
  // An unknown key is an error only in the part the command owns.
  Knobs k;
  EXPECT_NO_THROW(read_options_text("nope = 1\n[eval]\nseed = 2\n", "x.toml", table(k), nullptr, ConfigSection{"eval", {}}));
  try {
    read_options_text("seed = 1\n[eval]\nnope = 1\n", "x.toml", table(k), nullptr, ConfigSection{"eval", {}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x.toml:3: unknown config key 'nope' [eval]"), std::string::npos) << e.what();
  }
  EXPECT_EQ(config_sections(text), (std::vector<std::string>{"sft", "eval"}));
}

// strtoull wraps "-1" to 2^64 - 1: an unsigned key (a seed) given a negative value was another
// value, silently (found reading the fuzz harness's round trip).
TEST(OptionsFile, AnUnsignedKeyRefusesANegativeValue) {
  Knobs k;
  read_options_text("seed = 42\n", "x.toml", table(k));
  EXPECT_EQ(k.seed, 42u);
  const std::string e = error_of("seed = -1\n");
  EXPECT_NE(e.find("x.toml:1"), std::string::npos) << e;
  EXPECT_NE(e.find("must be >= 0, got -1"), std::string::npos) << e;
}

TEST(OptionsFile, AKeySetTwiceIsRefused) {
  std::string e = error_of("lr = 0.5\nsteps = 2\nlr = 0.7\n");
  EXPECT_NE(e.find("x.toml:3: key 'lr' is set twice (first at line 1)"), std::string::npos) << e;
}

// An escaped quote inside an array element ended the element there: ["x\", y"] read as two
// elements, 'x\' and ' y"'. Catches a splitter that looks for the next quote, not the closing one.
TEST(OptionsFile, AnEscapedQuoteStaysInsideItsArrayElement) {
  Knobs k;
  read_options_text("tags = [\"x\\\", y\", \"z\"]\n", "x.toml", table(k));
  EXPECT_EQ(k.tags, (std::vector<std::string>{"x\", y", "z"}));
}

}  // namespace
}  // namespace sqlrl

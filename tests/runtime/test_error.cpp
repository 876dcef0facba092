#include <gtest/gtest.h>

#include "runtime/error.h"
#include "runtime/log.h"

namespace sqlrl {
namespace {

TEST(Error, FailCarriesMessageAndCallerLocation) {
  int line = __LINE__ + 2;
  try {
    fail("model.safetensors: tensor '", std::string("lm_head.weight"), "' ends at byte ", 912, " past file size ", 800);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), str_cat("model.safetensors: tensor 'lm_head.weight' ends at byte 912 past file size 800 "
                                             "[tests/runtime/test_error.cpp:", line, "]"));
    return;
  }
  FAIL() << "fail() did not throw";
}

TEST(Error, SingleArgumentFailIsACallNotADeclaration) {
  std::string message = "plain";
  EXPECT_THROW(fail(message), Error);  // with a type named fail this would declare a variable
}

TEST(Error, CheckBuildsTheMessageOnlyOnFailure) {
  int built = 0;
  struct Counted {
    int* count;
  };
  auto stream_counted = [&](bool ok) { check(ok, "value ", (++built, 1)); };
  stream_counted(true);
  EXPECT_EQ(built, 1);  // arguments are evaluated (C++ has no lazy arguments) ...
  EXPECT_THROW(stream_counted(false), Error);  // ... but only a failed check throws
  EXPECT_NO_THROW(check(reinterpret_cast<void*>(1), "pointers convert to bool"));
  EXPECT_THROW(check(nullptr, "null is false"), Error);
}

TEST(Log, ParsesLevels) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::Debug);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::Warn);
  EXPECT_THROW(parse_log_level("loud"), Error);
  LogLevel before = log_level();
  set_log_level(LogLevel::Error);
  EXPECT_EQ(log_level(), LogLevel::Error);
  set_log_level(before);
}

}  // namespace
}  // namespace sqlrl

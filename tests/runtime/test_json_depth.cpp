// runtime/json_depth.h: the depth scan that runs before every parse of untrusted JSON.
#include "runtime/json_depth.h"

#include <gtest/gtest.h>

#include <string>

#include "runtime/error.h"

namespace sqlrl {
namespace {

constexpr size_t npos = std::string_view::npos;

TEST(JsonDepth, CountsArraysAndObjectsToTheLimitAndNoFurther) {
  EXPECT_EQ(json_too_deep_at("{}", 1), npos);
  EXPECT_EQ(json_too_deep_at("{\"a\":[1]}", 1), 5u);  // the '[' is level 2
  EXPECT_EQ(json_too_deep_at("{\"a\":[1]}", 2), npos);
  // Siblings do not add up: depth is nesting, not a count.
  EXPECT_EQ(json_too_deep_at("[[1],[2],{\"b\":[3]}]", 2), 14u);
  const std::string at_limit = std::string(kJsonMaxDepth, '[') + std::string(kJsonMaxDepth, ']');
  EXPECT_EQ(json_too_deep_at(at_limit), npos);
  const std::string over = "[" + at_limit + "]";
  EXPECT_EQ(json_too_deep_at(over), static_cast<size_t>(kJsonMaxDepth));
}

// Brackets in strings are text: a SQL query with [quoted] names or a regex full of '[' nests
// nothing; an escaped quote does not end the string, an escaped backslash before a quote does.
TEST(JsonDepth, BracketsInsideStringsDoNotCount) {
  const std::string many(1000, '[');
  EXPECT_EQ(json_too_deep_at("{\"sql\":\"" + many + "\"}", 2), npos);
  EXPECT_EQ(json_too_deep_at("[\"\\\"" + many + "\"]", 2), npos);
  const std::string closed = "[\"\\\\\",[[1]]]";  // the string is one backslash; then [[1]] nests
  EXPECT_EQ(json_too_deep_at(closed, 2), 7u);
  EXPECT_EQ(json_too_deep_at(closed, 3), npos);
}

TEST(JsonDepth, CheckNamesTheSourceAndTheByte) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  try {
    check_json_depth(deep, "weights/config.json");
    FAIL() << "100,000 levels passed";
  } catch (const Error& e) {
    // what() ends with the caller's location (runtime/error.h).
    EXPECT_EQ(std::string(e.what()).rfind("weights/config.json: JSON nests deeper than 256 levels (at byte 256) [", 0), 0u)
        << e.what();
  }
  EXPECT_NO_THROW(check_json_depth("{\"a\":[[{}]]}", "x.json"));
}

}  // namespace
}  // namespace sqlrl

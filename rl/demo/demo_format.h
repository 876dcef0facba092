// Number formats of the demo's tables (demo_report.cpp, demo_seeds.cpp).
#pragma once
#include <cstdio>
#include <string>

#include "runtime/error.h"

namespace sqlrl::rl {

inline std::string fixed(double x, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}
inline std::string pct(double x) { return fixed(100.0 * x, 1); }                              // 0.4278 -> "42.8"
inline std::string signed_pct(double x) { return str_cat(x >= 0 ? "+" : "", pct(x)); }  // -> "+42.8"

}  // namespace sqlrl::rl

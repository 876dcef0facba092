#include "runtime/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace sqlrl {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long long s = std::llround(seconds);
  char buf[48];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm%02llds", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  return buf;
}

double progress_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Progress progress_start(std::string label, std::string unit, int64_t total, int64_t done, double now) {
  Progress p;
  p.label = std::move(label);
  p.unit = std::move(unit);
  p.total = total;
  p.base = p.done = done;
  p.start = now;
  p.tty = isatty(fileno(stderr)) != 0;
  p.out = p.tty ? stderr : stdout;
  if (p.tty) {
    winsize ws{};
    if (ioctl(fileno(stderr), TIOCGWINSZ, &ws) == 0) p.columns = ws.ws_col;
  }
  p.last_plain = done;
  return p;
}

std::string progress_text(const Progress& p, int64_t done, double now, const std::string& detail) {
  const double elapsed = std::max(0.0, now - p.start);
  const int64_t since = done - p.base;  // units this process did: the pace
  char buf[160];
  std::string line = p.label;
  if (p.total > 0) {
    std::snprintf(buf, sizeof buf, " %lld/%lld %s (%d%%)", static_cast<long long>(done),
                  static_cast<long long>(p.total), p.unit.c_str(),
                  static_cast<int>(std::floor(100.0 * static_cast<double>(done) / static_cast<double>(p.total))));
  } else {
    std::snprintf(buf, sizeof buf, " %lld %s", static_cast<long long>(done), p.unit.c_str());
  }
  line += buf;
  // Below one unit a second, seconds per unit read better ("12.5 s/update" vs "0.08 updates/s").
  const double rate = since > 0 && elapsed > 0 ? static_cast<double>(since) / elapsed : 0;
  if (rate >= 1 || rate == 0) {
    if (rate > 0) std::snprintf(buf, sizeof buf, " | %.1f %s/s", rate, p.unit.c_str());
    else std::snprintf(buf, sizeof buf, " | ? %s/s", p.unit.c_str());
  } else {
    std::string one = p.unit;
    if (!one.empty() && one.back() == 's') one.pop_back();
    std::snprintf(buf, sizeof buf, " | %.1f s/%s", 1.0 / rate, one.c_str());
  }
  line += buf;
  line += " | elapsed " + format_duration(elapsed);
  if (p.total > 0) {
    const double eta = since > 0 ? elapsed / static_cast<double>(since) * static_cast<double>(std::max<int64_t>(0, p.total - done))
                                 : -1;  // nothing done yet: unknown
    line += " | ETA " + format_duration(eta);
  }
  if (!detail.empty()) line += " | " + detail;
  return line;
}

namespace {

void draw(Progress& p, double now) {
  std::string text = progress_text(p, p.done, now, p.detail);
  if (p.columns > 1 && static_cast<int>(text.size()) > p.columns - 1) text.resize(static_cast<size_t>(p.columns - 1));
  // \r back to the line's start, the text, then erase what a longer earlier line left behind.
  std::fprintf(p.out, "\r%s\x1b[K", text.c_str());
  std::fflush(p.out);
  p.last_draw = now;
  p.shown = p.on_screen = true;
  p.cleared = false;
}

void write_plain(Progress& p, double now) {
  std::fprintf(p.out, "%s\n", progress_text(p, p.done, now, p.detail).c_str());
  std::fflush(p.out);
  p.last_plain = p.done;
  p.shown = true;
}

}  // namespace

void progress_update(Progress& p, int64_t done, const std::string& detail, double now) {
  p.done = done;
  p.detail = detail;
  p.shown = false;
  const bool last = p.total > 0 && done >= p.total;
  if (p.tty) {
    if (last || !p.on_screen || now - p.last_draw >= p.min_redraw_s) draw(p, now);
  } else if (last || done - p.last_plain >= std::max<int64_t>(1, p.plain_every)) {
    write_plain(p, now);
  }
}

void progress_clear(Progress& p) {
  if (!p.tty || !p.on_screen) return;
  std::fputs("\r\x1b[K", p.out);
  std::fflush(p.out);
  p.on_screen = false;
  p.cleared = true;
}

void progress_redraw(Progress& p, double now) {
  if (p.tty && p.cleared) draw(p, now);
}

void progress_finish(Progress& p, double now) {
  if (!p.shown || p.cleared) {
    if (p.tty) draw(p, now);
    else write_plain(p, now);
  }
  if (p.tty && p.on_screen) {
    std::fputc('\n', p.out);
    std::fflush(p.out);
    p.on_screen = false;
  }
}

void progress_plain_lines(Progress& p, int64_t lines) {
  if (lines > 0) p.plain_every = std::max<int64_t>(1, (p.total - p.base) / lines);
}

}  // namespace sqlrl

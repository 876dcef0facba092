#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "runtime/progress.h"

namespace sqlrl {
namespace {

// A Progress that writes into a temporary file instead of the terminal or stdout.
struct Captured {
  FILE* file = std::tmpfile();
  ~Captured() { std::fclose(file); }
  std::string text() const {
    std::fflush(file);
    std::string out;
    std::rewind(file);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, file)) > 0) out.append(buf, n);
    return out;
  }
};

Progress make(FILE* out, bool tty, int64_t total, int64_t base = 0) {
  Progress p = progress_start("sft", "updates", total, base, /*now=*/100.0);
  p.tty = tty;
  p.out = out;
  p.columns = 0;
  return p;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

TEST(Progress, DurationsInMinutesAndFromAnHourInHours) {
  EXPECT_EQ(format_duration(0), "0m00s");
  EXPECT_EQ(format_duration(5), "0m05s");
  EXPECT_EQ(format_duration(252), "4m12s");
  EXPECT_EQ(format_duration(59.6), "1m00s");  // rounded, carried into the minutes
  EXPECT_EQ(format_duration(3599.4), "59m59s");
  EXPECT_EQ(format_duration(3600), "1h00m00s");
  EXPECT_EQ(format_duration(3725), "1h02m05s");
  EXPECT_EQ(format_duration(90061), "25h01m01s");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(std::nan("")), "?");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::infinity()), "?");
}

TEST(Progress, TextHasCountPercentRateElapsedEtaAndDetail) {
  Progress p = make(stdout, false, 100);
  // 25 updates in 10 s: 2.5 a second, 75 left at that pace: 30 s.
  EXPECT_EQ(progress_text(p, 25, 110.0, "loss 1.23"),
            "sft 25/100 updates (25%) | 2.5 updates/s | elapsed 0m10s | ETA 0m30s | loss 1.23");
  EXPECT_EQ(progress_text(p, 25, 110.0, ""), "sft 25/100 updates (25%) | 2.5 updates/s | elapsed 0m10s | ETA 0m30s");
  // The percentage is floored: 999 of 1000 is not yet 100%.
  p.total = 1000;
  EXPECT_NE(progress_text(p, 999, 110.0, "").find("(99%)"), std::string::npos);
  // An hour and more left reads in hours: 1 update per 10 s, 999 left.
  EXPECT_NE(progress_text(p, 1, 110.0, "").find("ETA 2h46m30s"), std::string::npos) << progress_text(p, 1, 110.0, "");
}

TEST(Progress, EtaCountsOnlyTheUnitsDoneSinceTheStart) {
  // A resumed run: 400 of 1000 were done before, 100 more in 100 s. Its pace is 1 update/s, so
  // 500 left take 500 s (counting the 400 would claim 5/s and 100 s).
  Progress p = make(stdout, false, 1000, /*base=*/400);
  const std::string line = progress_text(p, 500, 200.0, "");
  EXPECT_NE(line.find("500/1000 updates (50%)"), std::string::npos) << line;
  EXPECT_NE(line.find("| 1.0 updates/s |"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 8m20s"), std::string::npos) << line;
  // Nothing done yet since the start: no pace to estimate from.
  const std::string first = progress_text(p, 400, 150.0, "");
  EXPECT_NE(first.find("? updates/s"), std::string::npos) << first;
  EXPECT_NE(first.find("ETA ?"), std::string::npos) << first;
}

TEST(Progress, SlowUnitsReadAsSecondsEachAndUnknownTotalsHaveNoEta) {
  Progress p = make(stdout, false, 10);
  EXPECT_NE(progress_text(p, 2, 125.0, "").find("| 12.5 s/update |"), std::string::npos) << progress_text(p, 2, 125.0, "");
  p.total = 0;
  EXPECT_EQ(progress_text(p, 7, 107.0, ""), "sft 7 updates | 1.0 updates/s | elapsed 0m07s");
}

TEST(Progress, PlainModeWritesOneLinePerUnitAndNoCarriageReturn) {
  Captured c;
  Progress p = make(c.file, false, 3);
  for (int i = 1; i <= 3; ++i) progress_update(p, i, "loss " + std::to_string(i), 100.0 + i);
  progress_finish(p, 104.0);  // every unit already written: nothing more
  const std::string out = c.text();
  EXPECT_EQ(out, progress_text(p, 1, 101.0, "loss 1") + "\n" + progress_text(p, 2, 102.0, "loss 2") + "\n" +
                     progress_text(p, 3, 103.0, "loss 3") + "\n");
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_EQ(out.find("\x1b["), std::string::npos);
}

TEST(Progress, PlainModeEveryNUnitsStillWritesTheLast) {
  Captured c;
  Progress p = make(c.file, false, 12);
  p.plain_every = 5;
  for (int i = 1; i <= 7; ++i) progress_update(p, i, "", 100.0 + i);
  EXPECT_EQ(count(c.text(), "\n"), 1u) << c.text();  // unit 5
  progress_finish(p, 108.0);  // stopped early at 7: the last state is written
  const std::string out = c.text();
  EXPECT_EQ(count(out, "\n"), 2u) << out;
  EXPECT_NE(out.find("sft 5/12"), std::string::npos) << out;
  EXPECT_NE(out.find("sft 7/12"), std::string::npos) << out;
  // Reaching the total writes even between two multiples.
  Captured d;
  Progress q = make(d.file, false, 12);
  q.plain_every = 5;
  for (int i = 1; i <= 12; ++i) progress_update(q, i, "", 100.0 + i);
  EXPECT_EQ(count(d.text(), "\n"), 3u) << d.text();  // 5, 10, 12
  EXPECT_NE(d.text().find("sft 12/12"), std::string::npos) << d.text();
}

// progress_plain_lines spreads N lines over the units still to do (a resumed run's too).
TEST(Progress, PlainLinesSpreadOverTheUnitsLeft) {
  Captured c;
  Progress p = make(c.file, false, 100);
  progress_plain_lines(p, 20);
  EXPECT_EQ(p.plain_every, 5);
  p.base = 40;  // resumed at unit 40: 60 units left
  progress_plain_lines(p, 20);
  EXPECT_EQ(p.plain_every, 3);
  progress_plain_lines(p, 500);  // more lines than units: one per unit
  EXPECT_EQ(p.plain_every, 1);
  p.plain_every = 7;
  progress_plain_lines(p, 0);  // 0: left as it was
  EXPECT_EQ(p.plain_every, 7);
}

TEST(Progress, TerminalModeRedrawsOneLineInPlaceAndEndsItAtFinish) {
  Captured c;
  Progress p = make(c.file, true, 3);
  for (int i = 1; i <= 3; ++i) progress_update(p, i, "", 100.0 + i);
  std::string out = c.text();
  EXPECT_EQ(out, "\r" + progress_text(p, 1, 101.0, "") + "\x1b[K\r" + progress_text(p, 2, 102.0, "") + "\x1b[K\r" +
                     progress_text(p, 3, 103.0, "") + "\x1b[K");
  progress_finish(p, 104.0);
  out = c.text();
  EXPECT_EQ(count(out, "\n"), 1u);
  EXPECT_EQ(out.back(), '\n');
  progress_finish(p, 105.0);  // a second finish adds nothing
  EXPECT_EQ(c.text(), out);
}

TEST(Progress, TerminalRedrawsAreThrottledButTheLastUnitAlwaysDraws) {
  Captured c;
  Progress p = make(c.file, true, 10);
  // Ten updates 10 ms apart: the first draws, the next eight fall within 0.1 s of it, the tenth is
  // the last unit.
  for (int i = 1; i <= 10; ++i) progress_update(p, i, "", 100.0 + 0.01 * i);
  const std::string out = c.text();
  EXPECT_EQ(count(out, "\r"), 2u) << out;
  EXPECT_NE(out.find("sft 1/10"), std::string::npos) << out;
  EXPECT_NE(out.find("sft 10/10"), std::string::npos) << out;
  EXPECT_EQ(out.find("sft 5/10"), std::string::npos) << out;
  // Past the interval it draws again.
  Captured d;
  Progress q = make(d.file, true, 10);
  progress_update(q, 1, "", 100.0);
  progress_update(q, 2, "", 100.05);
  progress_update(q, 3, "", 100.2);
  EXPECT_EQ(count(d.text(), "\r"), 2u) << d.text();
  EXPECT_NE(d.text().find("sft 3/10"), std::string::npos) << d.text();
  // A skipped state is drawn by finish.
  progress_update(q, 4, "", 100.21);
  EXPECT_EQ(d.text().find("sft 4/10"), std::string::npos) << d.text();
  progress_finish(q, 100.22);
  EXPECT_NE(d.text().find("sft 4/10"), std::string::npos) << d.text();
}

TEST(Progress, ClearErasesTheLineForOtherOutputAndRedrawBringsItBack) {
  Captured c;
  Progress p = make(c.file, true, 10);
  progress_update(p, 1, "", 101.0);
  progress_clear(p);
  EXPECT_EQ(c.text().substr(c.text().size() - 4), "\r\x1b[K");
  const size_t before = c.text().size();
  progress_redraw(p, 101.01);  // within the throttle interval: a redraw is not throttled
  EXPECT_NE(c.text().find("sft 1/10", before), std::string::npos) << c.text();
  progress_finish(p, 102.0);
  const size_t finished = c.text().size();
  progress_redraw(p, 103.0);  // nothing was cleared since: no second copy of a finished line
  EXPECT_EQ(c.text().size(), finished);

  Captured d;
  Progress q = make(d.file, false, 10);
  progress_update(q, 1, "", 101.0);
  const std::string plain = d.text();
  progress_clear(q);
  progress_redraw(q, 102.0);
  EXPECT_EQ(d.text(), plain);
}

TEST(Progress, TerminalLineIsCutToTheWidthAndNothingIsWrittenWithoutAnUpdate) {
  Captured c;
  Progress p = make(c.file, true, 10);
  p.columns = 20;
  progress_update(p, 1, "a long detail that would wrap", 101.0);
  EXPECT_EQ(c.text(), "\r" + progress_text(p, 1, 101.0, "a long detail that would wrap").substr(0, 19) + "\x1b[K");

  Captured d;
  Progress q = make(d.file, true, 10);
  progress_finish(q, 101.0);
  Progress r = make(d.file, false, 10);
  progress_finish(r, 101.0);
  EXPECT_EQ(d.text(), "");
}

TEST(Progress, StartPicksStderrOnATerminalElseStdout) {
  Progress p = progress_start("eval", "questions", 5);
  EXPECT_EQ(p.out, p.tty ? stderr : stdout);
  EXPECT_EQ(p.done, 0);
  Progress q = progress_start("sft", "updates", 10, 4);
  EXPECT_EQ(q.base, 4);
  EXPECT_EQ(q.done, 4);
}

}  // namespace
}  // namespace sqlrl

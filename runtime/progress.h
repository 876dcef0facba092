// Progress of a long command (SFT updates, evaluation questions, data synthesis, tokenizer
// merges): on a terminal one line redrawn in place on stderr, otherwise one plain line per unit on
// stdout (a log file or a pipe keeps every line; a terminal keeps one).
//
//   LABEL done/total UNIT (pct%) | rate | elapsed XmYYs | ETA XmYYs | detail
//
// The rate and the ETA count only the units done since progress_start: a resumed run that starts
// at unit 400 of 1000 estimates from its own pace, not from 400 units it did not spend time on.
// Plain struct + free functions; the stream, the terminal flag and the clock are fields and
// arguments so tests can drive it without a terminal or a real clock.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace sqlrl {

// "4m12s" (minutes and two-digit seconds, "0m05s" under a minute), "1h05m12s" from an hour on;
// "?" for a negative, NaN or infinite duration. Rounded to the nearest second.
std::string format_duration(double seconds);

// Seconds on the monotonic clock (the default `now` of the functions below).
double progress_now();

struct Progress {
  std::string label;     // "sft", "eval"
  std::string unit;      // plural noun: "updates", "questions" (the rate says "s/update" below 1/s)
  int64_t total = 0;     // units in all; <= 0: unknown (no percentage, no ETA)
  int64_t base = 0;      // units already done at the start (resume): left out of the rate and ETA
  double start = 0;      // progress_now() at the start
  bool tty = false;      // redraw one line in place; false: a plain line per unit
  FILE* out = nullptr;   // stderr on a terminal, stdout otherwise
  int columns = 0;       // tty: the terminal's width; the line is cut to columns - 1 so it never
                         // wraps (a wrapped line cannot be redrawn with \r). 0: not cut
  double min_redraw_s = 0.1;  // tty: at most ~10 redraws a second; the last unit always draws
  int64_t plain_every = 1;    // plain: a line once this many units passed since the last one
                              // (and always the last unit)

  // Where it stands (progress_update keeps these).
  int64_t done = 0;
  std::string detail;
  double last_draw = -1;    // tty: when the line was last drawn
  int64_t last_plain = 0;   // plain: the units done at the last line written
  bool shown = true;        // the current state is on screen (tty) or written (plain)
  bool on_screen = false;   // tty: a line is drawn and not yet ended by a newline
  bool cleared = false;     // tty: progress_clear erased the line; progress_redraw brings it back
};

// Decides tty = isatty(stderr) (out = stderr, columns from the terminal) or plain (out = stdout).
// Writes nothing. done: units finished before this start (a resumed run's).
Progress progress_start(std::string label, std::string unit, int64_t total, int64_t done = 0,
                        double now = progress_now());

// The line for `done` units at time `now` (no \r, no newline).
std::string progress_text(const Progress& p, int64_t done, double now, const std::string& detail);

// Off a terminal, about `lines` plain lines over the units still to do (the last unit always
// writes one): for work of thousands of quick units whose log should not hold a line each.
// lines <= 0 leaves one line per unit.
void progress_plain_lines(Progress& p, int64_t lines);

// `done` units are finished. tty: redraws unless the last redraw was under min_redraw_s ago
// (the last unit, done >= total, always redraws). Plain: a line when plain_every units passed.
void progress_update(Progress& p, int64_t done, const std::string& detail = "", double now = progress_now());

// tty: erases the line, so other output (a "saved checkpoint" line on stdout) does not land on
// it; progress_redraw or the next update draws it again. Plain: nothing.
void progress_clear(Progress& p);
// tty: draws the current state again (after progress_clear). Plain: nothing.
void progress_redraw(Progress& p, double now = progress_now());

// Shows the last state if a throttle skipped it and ends the line (tty: a newline), so it stays
// on screen. A later update starts a new line. Nothing when no update came since the last finish.
void progress_finish(Progress& p, double now = progress_now());

}  // namespace sqlrl

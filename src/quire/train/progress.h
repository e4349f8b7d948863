#pragma once
// The progress a training run prints as it goes. On a terminal one line is
// redrawn in place after every step; into a file or a pipe (a CI log) a
// redrawn line would be a mess of '\r's, so plain lines are printed instead,
// often enough to follow and rarely enough that a long run's log stays
// readable (default_log_every). Messages (a checkpoint written, a warning)
// go on their own lines in both modes without breaking the in-place line.

#include <cstdint>
#include <ostream>
#include <string>

#include "quire/train/metrics.h"

namespace quire::train {

/// "m:ss" below an hour, "h:mm:ss" from one ("0:07", "1:02:03"), rounded to
/// the nearest second; "--:--" for a negative or non-finite duration (an ETA
/// not known yet).
std::string format_duration(double seconds);

/// One step's progress, fields separated by two spaces, e.g.
///   step 120/320  epoch 4/10  loss 1.2345e-02  lr 9.100e-03  |g| 4.5120e-01  1234 samples/s  0:03 left
/// The epoch is shown from 1. loss and |g| have 5 significant digits, lr 4;
/// a non-finite one prints as "nan", "inf" or "-inf". A skipped step adds
/// "skipped (scale S)" after the loss, a clipped one " (clipped)" after |g|,
/// and an f16 run's step that was not skipped "scale S" before the
/// throughput (a skipped one already shows it).
std::string progress_line(const StepRecord& r);

/// The interval of plain mode's lines: 1 when total_steps ≤ 100, else
/// ceil(total_steps / 50), about 50 lines for the whole run.
int64_t default_log_every(int64_t total_steps);

/// Prints progress lines and messages to one stream (see the file comment).
class Progress {
 public:
  /// `tty`: redraw one line in place; else plain lines for step 1, the
  /// first step given (a resumed run's), every `every`-th step (every < 1
  /// counts as 1), the last step and every skipped step. `out` must outlive
  /// this object.
  Progress(std::ostream& out, bool tty, int64_t every);
  /// Ends an in-place line (finish()), so that what is printed after an
  /// early exit, such as an error, starts on its own line.
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// tty: "\r" + line + "\x1b[K" (erase the rest of a longer old line), no
  /// newline; plain: the line and '\n' when the step is one to print.
  void step(const StepRecord& r);
  /// tty: clears the in-place line ("\r\x1b[K"), prints the message and
  /// '\n', then redraws the last progress line; plain: the message and '\n'.
  void message(const std::string& text);
  /// Ends the in-place line with '\n'; idempotent; nothing in plain mode.
  /// A later step() starts a new in-place line.
  void finish();

 private:
  void draw();

  std::ostream& out_;
  bool tty_;
  int64_t every_;
  std::string last_line_;
  bool line_open_ = false;  ///< tty: a progress line is shown and the cursor is at its end
  bool seen_step_ = false;
};

}  // namespace quire::train

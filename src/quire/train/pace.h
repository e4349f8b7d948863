#pragma once
// How fast a training run is going now: the throughput and the time left that
// the progress line and the metrics show. They come from a window of recent
// steps, not from the run's average: the first step of an invocation also
// compiles the step's kernels (seconds, against milliseconds for a step), and
// an average that includes it would announce hours left for a run that ends
// in seconds.

#include <cstddef>
#include <cstdint>
#include <deque>

namespace quire::train {

class RecentPace {
 public:
  /// The pace is the mean of the last `window` step durations (at least 1).
  explicit RecentPace(size_t window = 20);

  /// A step ended `elapsed_s` seconds after the invocation started (not
  /// decreasing from one call to the next).
  void step_done(double elapsed_s);

  /// Seconds per step over the window: the first step's own duration while it
  /// is the only one, then only the steps after it (the first, which compiles,
  /// never counts once a second has ended). 0 before any step.
  double seconds_per_step() const;
  /// `batch` samples per step at that pace; 0 before any step or at a zero pace.
  double samples_per_s(int64_t batch) const;
  /// Seconds for `steps_left` more steps at that pace.
  double seconds_left(int64_t steps_left) const;

 private:
  size_t window_;
  std::deque<double> ends_;  ///< the last window + 1 step ends, oldest first
  int64_t steps_ = 0;
};

}  // namespace quire::train

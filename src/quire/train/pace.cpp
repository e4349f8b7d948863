#include "quire/train/pace.h"

#include <algorithm>

namespace quire::train {

RecentPace::RecentPace(size_t window) : window_(std::max<size_t>(window, 1)) {}

void RecentPace::step_done(double elapsed_s) {
  ends_.push_back(elapsed_s);
  // window + 1 ends bound window durations; the invocation's first step
  // (which ends at ends_.front() until it leaves) is never one of them.
  if (ends_.size() > window_ + 1) ends_.pop_front();
  ++steps_;
}

double RecentPace::seconds_per_step() const {
  if (steps_ == 0) return 0;
  if (steps_ == 1) return ends_.back();
  return (ends_.back() - ends_.front()) / static_cast<double>(ends_.size() - 1);
}

double RecentPace::samples_per_s(int64_t batch) const {
  const double s = seconds_per_step();
  return s > 0 ? static_cast<double>(batch) / s : 0;
}

double RecentPace::seconds_left(int64_t steps_left) const {
  return seconds_per_step() * static_cast<double>(std::max<int64_t>(steps_left, 0));
}

}  // namespace quire::train

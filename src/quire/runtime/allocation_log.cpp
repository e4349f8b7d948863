#include "quire/runtime/allocation_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace quire::runtime {

std::atomic<AllocationLog*> AllocationLog::installed_{nullptr};

const char* held_as_name(HeldAs held) {
  switch (held) {
    case HeldAs::F64: return "f64";
    case HeldAs::F32: return "f32";
  }
  return "?";
}

AllocationLog::AllocationLog() {
  AllocationLog* none = nullptr;
  if (!installed_.compare_exchange_strong(none, this, std::memory_order_acq_rel))
    throw std::logic_error("internal: an allocation log is already installed (one measurement at a time)");
}

AllocationLog::~AllocationLog() { installed_.store(nullptr, std::memory_order_release); }

int64_t AllocationLog::live_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_bytes_;
}

int64_t AllocationLog::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_bytes_;
}

std::vector<LoggedAllocation> AllocationLog::live_at_peak() const {
  std::vector<LoggedAllocation> out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out = at_peak_;
  }
  std::sort(out.begin(), out.end(), [](const LoggedAllocation& x, const LoggedAllocation& y) {
    return x.bytes != y.bytes ? x.bytes > y.bytes : x.held < y.held;
  });
  return out;
}

int64_t AllocationLog::allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocations_;
}

int64_t AllocationLog::releases() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return releases_;
}

void AllocationLog::snapshot_at_peak() {
  peak_bytes_ = live_bytes_;
  at_peak_.clear();  // sorted when asked for (live_at_peak): the peak moves often, and is read once
  for (const auto& [at, a] : live_) at_peak_.push_back(a);
}

void AllocationLog::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  snapshot_at_peak();
}

void AllocationLog::record_allocated(const void* elements, int64_t bytes, HeldAs held) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!live_.emplace(elements, LoggedAllocation{bytes, held}).second)
    throw std::logic_error(
        fmt::format("internal: the allocation log saw {} allocated twice without a release", fmt::ptr(elements)));
  ++allocations_;
  live_bytes_ += bytes;
  if (live_bytes_ > peak_bytes_) snapshot_at_peak();
}

void AllocationLog::record_released(const void* elements) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(elements);
  if (it == live_.end()) return;  // allocated before the log was installed
  ++releases_;
  live_bytes_ -= it->second.bytes;
  live_.erase(it);
}

}  // namespace quire::runtime

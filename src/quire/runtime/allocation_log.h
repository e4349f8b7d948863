#pragma once
// The allocation log: every allocation and release of a real tensor's
// elements (RealStorage's f64 and f32 views, real_storage.h), reported to
// one process-wide observer while an AllocationLog is in scope. It keeps the
// bytes live, the most live at once (the peak) and what was live when the
// peak was first reached: the measurement that compile/memory.h's count of
// a call is checked against (compile/memory_allocation_test.cpp).
//
// Off by default: with no log installed, a report is one load of an atomic
// pointer and one branch that is always taken the same way.
//
// Only what is allocated while the log is installed counts: a view made
// before it (the caller's inputs, its parameters) is not live in it, and its
// release is ignored. So a log installed just before a call measures what
// the call allocates on top of what its caller already holds.
//
// What it does not see: integer, boolean and key tensors (their elements are
// a std::vector<int64_t>, tensor.h), scratch that kernels allocate for
// themselves (packed products' panels), and any allocation not of tensor
// elements.
//
// Thread-safe: reports from any thread are serialized by a mutex, and a view
// is reported released before its memory is freed, so another thread's
// allocation at the same address cannot be reported first. Deterministic
// where the allocations are (quire's host is one thread; the kernels' worker
// threads write into storage allocated before they start). The log must be
// installed before the work it observes begins and outlive it.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace quire::runtime {

/// The elements of a view as held: f64 or f32 (a bf16 or f16 value is held as f32).
enum class HeldAs : uint8_t { F64, F32 };
const char* held_as_name(HeldAs held);  ///< "f64", "f32"

/// One view's elements, as the log saw them allocated.
struct LoggedAllocation {
  int64_t bytes = 0;
  HeldAs held = HeldAs::F64;
  friend bool operator==(const LoggedAllocation&, const LoggedAllocation&) = default;
};

class AllocationLog {
 public:
  /// Installs this log as the process's observer; std::logic_error when
  /// another is installed (one measurement at a time).
  AllocationLog();
  /// Uninstalls it.
  ~AllocationLog();
  AllocationLog(const AllocationLog&) = delete;
  AllocationLog& operator=(const AllocationLog&) = delete;

  /// Bytes allocated while installed and not yet released.
  int64_t live_bytes() const;
  /// The most bytes live at once since installation or the last reset_peak().
  int64_t peak_bytes() const;
  /// What was live when the peak was first reached: largest first, f64
  /// before f32 at equal bytes (an order that does not depend on addresses).
  std::vector<LoggedAllocation> live_at_peak() const;
  /// Allocations and releases reported since installation.
  int64_t allocations() const;
  int64_t releases() const;
  /// Starts the peak again from what is live now (a second measurement
  /// under the same log).
  void reset_peak();

  /// Reports from RealStorage: `elements` was just allocated (`bytes` of
  /// them, held as `held`), or is about to be freed.
  static void allocated(const void* elements, int64_t bytes, HeldAs held) {
    if (AllocationLog* log = installed_.load(std::memory_order_acquire)) [[unlikely]]
      log->record_allocated(elements, bytes, held);
  }
  static void released(const void* elements) {
    if (AllocationLog* log = installed_.load(std::memory_order_acquire)) [[unlikely]]
      log->record_released(elements);
  }

 private:
  void record_allocated(const void* elements, int64_t bytes, HeldAs held);
  void record_released(const void* elements);
  /// The peak is now: keeps what is live (the mutex held).
  void snapshot_at_peak();

  static std::atomic<AllocationLog*> installed_;

  mutable std::mutex mutex_;
  std::unordered_map<const void*, LoggedAllocation> live_;  ///< by the address of the elements
  int64_t live_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  std::vector<LoggedAllocation> at_peak_;
  int64_t allocations_ = 0;
  int64_t releases_ = 0;
};

}  // namespace quire::runtime

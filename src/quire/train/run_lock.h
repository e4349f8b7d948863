#pragma once
// One `quire train` at a time on a run folder. Two runs writing one folder
// would interleave their metrics and checkpoints, and retention in one would
// remove the other's. The lock is flock(2) on <run folder>/lock, a file that
// holds the holder's pid (for the message that refuses a second run); the
// kernel releases it when the holder's process ends, however it ends, so a
// killed run never leaves the folder locked.

#include <string>

namespace quire::train {

/// Holds the lock of a run folder for its lifetime.
class RunLock {
 public:
  /// Takes the lock of `run_dir` (an existing folder) without waiting.
  /// io::IoError naming the folder and the holder's pid when another process
  /// holds it, or naming the lock file when it cannot be opened or locked.
  explicit RunLock(const std::string& run_dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return path_; }  ///< the lock file

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace quire::train

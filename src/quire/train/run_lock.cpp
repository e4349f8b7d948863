#include "quire/train/run_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "quire/io/io_error.h"

namespace quire::train {

namespace {

/// The pid the holder wrote, as text ("unknown" when the file is empty: the
/// holder took the lock and has not written it yet).
std::string holder_pid(int fd) {
  char buffer[32] = {};
  const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
  std::string text = n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.empty() ? "unknown" : text;
}

}  // namespace

RunLock::RunLock(const std::string& run_dir) : path_((std::filesystem::path(run_dir) / "lock").string()) {
  // Not truncated on open: the holder's pid must stay readable to a refused run.
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw io::IoError(path_, fmt::format("cannot open the run folder's lock: {}", std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string pid = error == EWOULDBLOCK ? holder_pid(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK)
      throw io::IoError(run_dir, fmt::format("another `quire train` (pid {}) is running on this run folder: wait for "
                                             "it to end, or choose another --run-dir",
                                             pid));
    throw io::IoError(path_, fmt::format("cannot lock the run folder: {}", std::strerror(error)));
  }
  const std::string pid = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    throw io::IoError(path_, fmt::format("cannot write the run folder's lock: {}", std::strerror(error)));
  }
}

RunLock::~RunLock() {
  // Closing the last descriptor releases the lock; the file stays, so that
  // a run starting meanwhile locks the same inode rather than a new one.
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace quire::train

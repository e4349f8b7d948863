#include "quire/io/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>

namespace quire::io {

namespace {

/// "reason: strerror(errno)", captured before anything else can change errno.
std::string with_errno(std::string_view what) { return fmt::format("{}: {}", what, std::strerror(errno)); }

/// "1 GiB", "64 MiB", "12345 bytes": the largest binary unit that divides it.
std::string byte_count(size_t n) {
  if (n >= (size_t{1} << 30) && n % (size_t{1} << 30) == 0) return fmt::format("{} GiB", n >> 30);
  if (n >= (size_t{1} << 20) && n % (size_t{1} << 20) == 0) return fmt::format("{} MiB", n >> 20);
  return fmt::format("{} bytes", n);
}

/// The directory holding `path` ("." for a bare file name), where the
/// temporary file must live for rename() to be atomic.
std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

/// Closes a descriptor on every path out of a scope.
struct FileDescriptor {
  int fd = -1;
  explicit FileDescriptor(int fd) : fd(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
  /// Closes now, reporting the error: a close can report a write-back failure.
  int close() {
    const int rc = ::close(fd);
    fd = -1;
    return rc;
  }
};

/// Creates a new temporary file beside `path` with O_EXCL, so two writers of
/// the same target never share a temporary. Returns its name and descriptor.
std::pair<std::string, int> create_temporary(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  // A leading dot hides the temporary from globs such as `*.npz`; the suffix
  // makes a left-over one (after a crash) recognizable.
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string name =
        fmt::format("{}.{}.{}-{}-{:x}.tmp", dir, base, ::getpid(), counter.fetch_add(1), rng() & 0xffffffu);
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return {name, fd};
    if (errno != EEXIST) throw IoError(path, with_errno("cannot create a temporary file in " + directory_of(path)));
  }
  throw IoError(path, "cannot create a temporary file: 100 names were taken");
}

/// Writes all of `bytes`, retrying short writes and EINTR.
bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

/// Where a write to `path` lands: `path` with every symbolic link along the
/// final component followed (a link in a folder part is left to the kernel),
/// so that a rename replaces the file the link names, not the link. A link
/// to a missing file yields that file's name, which the write then creates.
std::string follow_links(const std::string& path) {
  // The kernel's own limit on a chain of links (MAXSYMLINKS); past it a
  // link loop is reported as open() would report it.
  constexpr int kMaxLinks = 40;
  std::string current = path;
  for (int hops = 0; hops <= kMaxLinks; ++hops) {
    struct stat st {};
    if (::lstat(current.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return current;
    std::string target(static_cast<size_t>(st.st_size > 0 ? st.st_size : PATH_MAX), '\0');
    const ssize_t n = ::readlink(current.c_str(), target.data(), target.size());
    if (n < 0) throw IoError(path, with_errno("cannot read the symbolic link " + current));
    target.resize(static_cast<size_t>(n));
    current = target.front() == '/' || current.find('/') == std::string::npos
                  ? target
                  : directory_of(current) + "/" + target;
  }
  errno = ELOOP;
  throw IoError(path, with_errno("cannot follow the symbolic link"));
}

/// Writes `bytes` straight into what `fd` is open on (a device, a FIFO,
/// standard output): such a file has no folder entry a rename could swap.
void write_in_place(const std::string& path, int fd, std::string_view bytes) {
  if (!write_all(fd, bytes)) throw IoError(path, with_errno("cannot write"));
}

/// Replaces the regular file (or nothing) at `path`; the steps of the header's contract.
void replace_atomically(const std::string& path, std::string_view bytes) {
  auto [temporary, raw_fd] = create_temporary(path);
  FileDescriptor fd(raw_fd);
  // Any failure below: remove the temporary (errno is saved in the message
  // first, since unlink may change it) and leave the target untouched.
  auto fail = [&, temp = temporary](std::string_view step) {
    IoError error(path, with_errno(step));
    if (fd.fd >= 0) fd.close();
    ::unlink(temp.c_str());
    throw error;
  };
  if (!write_all(fd.fd, bytes)) fail("cannot write");
  if (::fsync(fd.fd) != 0) fail("cannot sync");
  if (fd.close() != 0) fail("cannot close");
  if (::rename(temporary.c_str(), path.c_str()) != 0) fail("cannot rename the temporary file over it");
  // The data is safe; make the new directory entry durable too. A failure
  // here is still reported: the caller asked for a file that survives a crash.
  const std::string dir = directory_of(path);
  FileDescriptor dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.fd < 0) throw IoError(path, with_errno("cannot open directory " + dir + " to sync it"));
  // EINVAL: this file system cannot sync a directory (its renames are then
  // as durable as it makes them); nothing more can be done.
  if (::fsync(dir_fd.fd) != 0 && errno != EINVAL) throw IoError(path, with_errno("cannot sync directory " + dir));
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  if (path.empty()) throw IoError(path, "empty file name");
  if (path == "-") {
    // Whatever the program printed before through stdio goes out first.
    std::fflush(stdout);
    write_in_place(path, STDOUT_FILENO, bytes);
    return;
  }
  const std::string target = follow_links(path);
  struct stat st {};
  if (::stat(target.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return replace_atomically(target, bytes);
  if (S_ISDIR(st.st_mode)) throw IoError(path, "is a folder");
  // A device or FIFO: renaming a file over it would destroy the node (as
  // root, /dev/null itself). O_TRUNC is not asked: it means nothing there.
  FileDescriptor fd(::open(target.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY));
  if (fd.fd < 0) throw IoError(path, with_errno("cannot open"));
  write_in_place(path, fd.fd, bytes);
  if (fd.close() != 0) throw IoError(path, with_errno("cannot close"));
}

std::string read_file(const std::string& path, size_t max_bytes) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) throw IoError(path, with_errno("cannot open"));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) throw IoError(path, with_errno("cannot stat"));
  const bool regular = S_ISREG(st.st_mode);
  const size_t limit = regular ? max_bytes : std::min(max_bytes, kMaxStreamBytes);
  auto too_long = [&] {
    return IoError(path, fmt::format("is longer than {}{}", byte_count(limit), regular ? "" : " and not a regular file"));
  };
  if (regular && static_cast<uint64_t>(st.st_size) > limit) throw too_long();
  std::string bytes;
  try {
    // The size is a hint (the file may change while read); read to end of file.
    if (regular && st.st_size > 0) bytes.reserve(static_cast<size_t>(st.st_size));
    char buffer[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd.fd, buffer, sizeof buffer);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw IoError(path, with_errno("cannot read"));
      }
      if (n == 0) break;
      if (static_cast<size_t>(n) > limit - bytes.size()) throw too_long();
      bytes.append(buffer, static_cast<size_t>(n));
    }
  } catch (const std::bad_alloc&) {
    throw IoError(path, fmt::format("out of memory after reading {}", byte_count(bytes.size())));
  }
  return bytes;
}

}  // namespace quire::io

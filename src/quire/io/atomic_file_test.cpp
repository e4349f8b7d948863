#include "quire/io/atomic_file.h"
#include "quire/support/testing.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace quire::io {

namespace {

namespace fs = std::filesystem;

struct ScratchDir : quire::testing::ScratchDir {
  ScratchDir() : quire::testing::ScratchDir("atomic") {}
};

}  // namespace

TEST(AtomicFile, WritesReadsAndLeavesNoTemporary) {
  ScratchDir dir;
  const std::string path = dir.file("ckpt.bin");
  write_file_atomically(path, std::string("a\0b", 3));
  EXPECT_EQ(read_file(path), std::string("a\0b", 3));
  write_file_atomically(path, "replaced");
  EXPECT_EQ(read_file(path), "replaced");
  write_file_atomically(path, "");
  EXPECT_EQ(read_file(path), "");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"ckpt.bin"});
}

TEST(AtomicFile, MissingDirectoryIsAnErrorNamingThePath) {
  ScratchDir dir;
  const std::string path = dir.file("no/such/dir/x.npy");
  try {
    write_file_atomically(path, "data");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(e.path, path);
    EXPECT_EQ(std::string(e.what()).rfind(path + ": cannot create a temporary file", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.names().empty());
}

TEST(AtomicFile, FailedWriteKeepsTheOldFileAndRemovesTheTemporary) {
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  write_file_atomically(path, "old contents");
  // Make write() itself fail half-way (EFBIG), even as root: limit the size
  // of files this process may write, with SIGXFSZ ignored so write returns.
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit tiny = saved;
  tiny.rlim_cur = 64;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &tiny), 0);
  std::string message;
  try {
    write_file_atomically(path, std::string(100000, 'x'));
  } catch (const IoError& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(message, path + ": cannot write: File too large");
  EXPECT_EQ(read_file(path), "old contents");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"model.safetensors"});
}

TEST(AtomicFile, RenameOverADirectoryFailsCleanly) {
  ScratchDir dir;
  fs::create_directory(dir.path / "target");
  std::ofstream(dir.path / "target" / "inside") << "keep";
  EXPECT_THROW(write_file_atomically(dir.file("target"), "data"), IoError);
  EXPECT_EQ(read_file(dir.file("target/inside")), "keep");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"target"});
}

TEST(AtomicFile, ReadErrorsSayWhy) {
  ScratchDir dir;
  const std::string missing = dir.file("missing.npy");
  try {
    read_file(missing);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), missing + ": cannot open: No such file or directory");
    EXPECT_EQ(e.reason, "cannot open: No such file or directory");
  }
  try {
    read_file(dir.path.string());
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), dir.path.string() + ": cannot read: Is a directory");
  }
}

TEST(AtomicFile, ReadsAreBounded) {
  ScratchDir dir;
  const std::string path = dir.file("big.bin");
  write_file_atomically(path, std::string(5000, 'x'));
  EXPECT_EQ(read_file(path, 5000).size(), 5000u);
  try {
    read_file(path, 4999);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(e.reason, "is longer than 4999 bytes");
  }
  // /dev/zero has no end and no size to check first: the read stops at the
  // limit (kMaxStreamBytes, 1 GiB, at most; before, it ran out of memory).
  try {
    read_file("/dev/zero", size_t{1} << 20);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), "/dev/zero: is longer than 1 MiB and not a regular file");
  }
}

TEST(AtomicFile, RelativeNamesUseTheCurrentDirectory) {
  ScratchDir dir;
  const fs::path previous = fs::current_path();
  fs::current_path(dir.path);
  write_file_atomically("plain.txt", "hello");
  fs::current_path(previous);
  EXPECT_EQ(read_file(dir.file("plain.txt")), "hello");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"plain.txt"});
}

TEST(AtomicFile, ASymbolicLinkIsFollowedAndStaysALink) {
  ScratchDir dir;
  fs::create_directory(dir.path / "real");
  std::ofstream(dir.path / "real" / "plan.json") << "old";
  // A relative link, resolved against its own folder, two hops long.
  fs::create_symlink("real/plan.json", dir.path / "hop");
  fs::create_symlink("hop", dir.path / "out.json");
  write_file_atomically(dir.file("out.json"), "new");
  EXPECT_TRUE(fs::is_symlink(dir.path / "out.json"));
  EXPECT_TRUE(fs::is_symlink(dir.path / "hop"));
  EXPECT_EQ(read_file(dir.file("real/plan.json")), "new");
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"hop", "out.json", "real"}));
  // A link to a file not yet there creates that file.
  fs::create_symlink(dir.path / "real" / "fresh.json", dir.path / "dangling");
  write_file_atomically(dir.file("dangling"), "created");
  EXPECT_TRUE(fs::is_symlink(dir.path / "dangling"));
  EXPECT_EQ(read_file(dir.file("real/fresh.json")), "created");
}

TEST(AtomicFile, AFifoIsWrittenInPlace) {
  ScratchDir dir;
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  // The read end is opened first, without blocking, so the writer's open
  // returns at once; were the FIFO replaced, the read below finds nothing
  // rather than hanging.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0) << std::strerror(errno);
  write_file_atomically(fifo, "through the pipe");
  char buffer[64] = {};
  const ssize_t n = ::read(reader, buffer, sizeof buffer);
  ::close(reader);
  EXPECT_EQ(std::string(buffer, n > 0 ? static_cast<size_t>(n) : 0), "through the pipe");
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced by a file";
  EXPECT_EQ(dir.names(), std::vector<std::string>{"pipe"});
}

TEST(AtomicFile, ADeviceIsWrittenInPlace) {
  ScratchDir dir;
  // A node of its own with /dev/null's numbers (1, 3): the machine's
  // /dev/null is never touched. Only root may make one, on a file system
  // that allows devices.
  const std::string device = dir.file("mynull");
  if (::mknod(device.c_str(), S_IFCHR | 0600, makedev(1, 3)) != 0) GTEST_SKIP() << "mknod: " << std::strerror(errno);
  const int probe = ::open(device.c_str(), O_WRONLY);
  if (probe < 0) GTEST_SKIP() << "cannot open a device here: " << std::strerror(errno);
  ::close(probe);
  write_file_atomically(device, "discarded");
  struct stat st {};
  ASSERT_EQ(::lstat(device.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device was replaced by a file";
  EXPECT_EQ(dir.names(), std::vector<std::string>{"mynull"});
}

TEST(AtomicFile, DashIsStandardOutput) {
  ::testing::internal::CaptureStdout();
  write_file_atomically("-", "to stdout\n");
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "to stdout\n");
}

TEST(AtomicFile, AnEmptyNameIsAnError) {
  EXPECT_THROW(write_file_atomically("", "data"), IoError);
}

}  // namespace quire::io

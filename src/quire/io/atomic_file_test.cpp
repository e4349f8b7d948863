#include "quire/io/atomic_file.h"
#include "quire/support/testing.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
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

}  // namespace quire::io

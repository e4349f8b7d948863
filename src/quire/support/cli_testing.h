#pragma once
// Tests that run the built `quire` binary as a user would: the binary is
// `quire` in the build folder, beside the src/ folder the test binary lives in.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace quire::testing {

/// What a command did.
struct Outcome {
  int status = -1;     ///< the exit status (128 + n for a signal)
  std::string output;  ///< stdout and stderr together
};

inline std::filesystem::path quire_binary() {
  return std::filesystem::canonical("/proc/self/exe").parent_path().parent_path() / "quire";
}

/// Runs `quire ARGS` (a shell command line) and collects its output.
inline Outcome run_quire(const std::string& args) {
  Outcome o;
  FILE* pipe = popen((quire_binary().string() + " " + args + " 2>&1").c_str(), "r");
  if (!pipe) return o;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) o.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  o.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return o;
}

/// A fixture with a fresh folder per test (removed after); skips when the
/// binary has not been built.
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(quire_binary())) GTEST_SKIP() << "no quire binary at " << quire_binary();
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("quire_cli_{}_{}_{}", ::testing::UnitTest::GetInstance()->current_test_suite()->name(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name(), static_cast<long>(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  /// Writes `text` to `name` in the folder and returns its path.
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  /// The path of `name` in the folder.
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

}  // namespace quire::testing

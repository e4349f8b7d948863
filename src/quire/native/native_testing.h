#pragma once
// Helpers shared by the native backend's tests: whether a C compiler is
// there (the tests skip cleanly without one), an environment variable set
// for a scope, and a fixture that gives each test a fresh object cache.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>

namespace quire::native::testing {

inline bool c_compiler_available() {
  if (const char* cc = std::getenv("CC"); cc && *cc) return true;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && access((dir + "/cc").c_str(), X_OK) == 0) return true;
  return false;
}

/// Sets an environment variable for a scope, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

/// Each test gets a fresh QUIRE_CACHE_DIR (dir_), removed afterwards; the
/// test is skipped where no C compiler is found.
class FreshCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!c_compiler_available()) GTEST_SKIP() << "no C compiler (`cc` on PATH or $CC)";
    std::string pattern = (std::filesystem::temp_directory_path() / "quire-native-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    cache_env_.emplace("QUIRE_CACHE_DIR", dir_);
  }
  void TearDown() override {
    cache_env_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string dir_;
  std::optional<ScopedEnv> cache_env_;
};

}  // namespace quire::native::testing

// The object cache's trust in what it loads (c_compiler.h, TRUST): an object
// swapped for another kernel's, or truncated, is found out before dlopen and
// compiled again, with a warning; and a compiler that never returns is killed
// at its time limit (TIME LIMIT). A program's kernels are prepared side by
// side, each distinct source compiled once, or in batches (BATCHES). The
// flags follow QUIRE_ISA's cap.

#include "quire/native/c_compiler.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "quire/native/native_testing.h"
#include "quire/runtime/isa.h"

namespace quire::native {
namespace {

namespace fs = std::filesystem;
using testing::ScopedEnv;

class ObjectCacheTest : public testing::FreshCacheTest {
 protected:
  /// The objects in the cache, by path.
  std::set<std::string> objects() const {
    std::set<std::string> found;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().extension() == ".so") found.insert(e.path().string());
    return found;
  }
  /// The settings of the environment, with warnings collected in warnings_.
  CompilerSettings collecting() {
    CompilerSettings s = CompilerSettings::from_environment();
    s.warn = [this](const std::string& message) { warnings_.push_back(message); };
    return s;
  }
  /// The object built from `source`, compiled by a compiler gone when this returns (its object closed).
  std::string build(const std::string& source) {
    const std::set<std::string> before = objects();
    CCompiler(collecting()).load(source, "value");
    for (const std::string& o : objects())
      if (!before.count(o)) return o;
    ADD_FAILURE() << "no new object";
    return "";
  }
  /// What `value()` returns in the object `source` loads to, through a fresh compiler.
  double value_of(const std::string& source, int64_t* compilations = nullptr) {
    CCompiler compiler(collecting());
    const auto value = reinterpret_cast<double (*)(void)>(compiler.load(source, "value"));
    const double v = value();
    if (compilations) *compilations = compiler.compilations();
    return v;
  }
  std::vector<std::string> warnings_;
};

std::string returning(int n) { return fmt::format("double value(void) {{ return {}.0; }}\n", n); }

std::string sum_of(const std::string& object) { return object.substr(0, object.size() - 3) + ".sum"; }

TEST_F(ObjectCacheTest, AnotherKernelsObjectUnderThisNameIsCompiledAgain) {
  const std::string one = build(returning(1));
  const std::string two = build(returning(2));
  ASSERT_TRUE(fs::exists(sum_of(one)));
  // The object alone swapped: its bytes are not the ones recorded.
  fs::copy_file(two, one, fs::copy_options::overwrite_existing);
  int64_t compilations = 0;
  EXPECT_EQ(value_of(returning(1), &compilations), 1.0);
  EXPECT_EQ(compilations, 1);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find(one), std::string::npos) << warnings_[0];
  EXPECT_NE(warnings_[0].find("does not match the checksum"), std::string::npos) << warnings_[0];
  // The object and its record swapped: the record names another source.
  fs::copy_file(two, one, fs::copy_options::overwrite_existing);
  fs::copy_file(sum_of(two), sum_of(one), fs::copy_options::overwrite_existing);
  EXPECT_EQ(value_of(returning(1)), 1.0);
  ASSERT_EQ(warnings_.size(), 2u);
  EXPECT_NE(warnings_[1].find("another kernel's source"), std::string::npos) << warnings_[1];
  // Compiled again, it is trusted again: no warning, no compile.
  EXPECT_EQ(value_of(returning(1), &compilations), 1.0);
  EXPECT_EQ(compilations, 0);
  EXPECT_EQ(warnings_.size(), 2u);
}

TEST_F(ObjectCacheTest, ATruncatedObjectIsCompiledAgain) {
  const std::string one = build(returning(1));
  fs::resize_file(one, fs::file_size(one) / 2);
  EXPECT_EQ(value_of(returning(1)), 1.0);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("truncated"), std::string::npos) << warnings_[0];
}

TEST_F(ObjectCacheTest, AnObjectWithoutItsRecordIsCompiledAgainQuietly) {
  // As an older quire sharing the cache leaves it: nothing to check it by.
  const std::string one = build(returning(1));
  fs::remove(sum_of(one));
  int64_t compilations = 0;
  EXPECT_EQ(value_of(returning(1), &compilations), 1.0);
  EXPECT_EQ(compilations, 1);
  EXPECT_TRUE(warnings_.empty());
  EXPECT_TRUE(fs::exists(sum_of(one)));
  // A record that cannot be parsed is a mismatch, said.
  std::ofstream(sum_of(one)) << "garbage\n";
  EXPECT_EQ(value_of(returning(1)), 1.0);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("unreadable record"), std::string::npos) << warnings_[0];
}

/// A compiler that answers --version and then never finishes a compile.
std::string hanging_compiler(const std::string& dir) {
  const std::string path = dir + "/hanging-cc";
  std::ofstream(path) << "#!/bin/sh\nif [ \"$1\" = --version ]; then echo hanging-cc 1.0; exit 0; fi\nsleep 60\n";
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

TEST_F(ObjectCacheTest, ACompilerPastItsTimeLimitIsKilled) {
  ScopedEnv cc("CC", hanging_compiler(dir_));
  ScopedEnv limit("QUIRE_CC_TIMEOUT", "0.5");
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    CCompiler().load(returning(1), "value");
  } catch (const NativeError& e) {
    message = e.what();
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(elapsed, 20.0);
  EXPECT_NE(message.find("did not finish within 0.5 s"), std::string::npos) << message;
  EXPECT_NE(message.find("QUIRE_CC_TIMEOUT"), std::string::npos) << message;
}

TEST_F(ObjectCacheTest, AnUnusableTimeLimitIsNamed) {
  for (const char* bad : {"soon", "0", "-3", "inf"}) {
    ScopedEnv limit("QUIRE_CC_TIMEOUT", bad);
    std::string message;
    try {
      CCompiler().load(returning(1), "value");
    } catch (const NativeError& e) {
      message = e.what();
    }
    EXPECT_EQ(message, fmt::format("QUIRE_CC_TIMEOUT={}: not a positive number of seconds", bad));
  }
}

// In a process of its own (QUIRE_ISA is read once per process): sets
// QUIRE_ISA to `cap` and exits with 0 if compile_flags() then holds `flag`.
[[noreturn]] void exit_with_flag_result(const char* cap, const char* flag) {
  setenv("QUIRE_ISA", cap, 1);
  const std::vector<std::string>& flags = compile_flags();
  std::exit(std::find(flags.begin(), flags.end(), flag) != flags.end() ? 0 : 1);
}

TEST_F(ObjectCacheTest, PrepareCompilesEachDistinctSourceOnceSideBySide) {
  // Six sources, two of them twice, one built already: four compiles, on
  // three compiler processes at a time, and the loads that follow find
  // every object built, counting neither a compile nor a cache hit.
  build(returning(0));
  const std::vector<std::string> sources = {returning(0), returning(1), returning(2), returning(1),
                                            returning(3), returning(4), returning(2)};
  CCompiler compiler(collecting());
  compiler.prepare(sources, 3);
  EXPECT_EQ(compiler.compilations(), 4);
  EXPECT_EQ(objects().size(), 5u);
  for (int n = 0; n <= 4; ++n) {
    const auto value = reinterpret_cast<double (*)(void)>(compiler.load(returning(n), "value"));
    EXPECT_EQ(value(), n);
  }
  EXPECT_EQ(compiler.compilations(), 4);
  EXPECT_EQ(compiler.cache_hits(), 1);  // returning(0), built before prepare
  // Prepared again, nothing is compiled.
  compiler.prepare(sources, 3);
  EXPECT_EQ(compiler.compilations(), 4);
  EXPECT_TRUE(warnings_.empty());
}

TEST_F(ObjectCacheTest, PrepareReportsAFailedCompileInSourceOrder) {
  CCompiler compiler(collecting());
  const std::vector<std::string> sources = {returning(5), "double value(void) { return nonesuch; }\n", returning(6),
                                            "int broken(\n"};
  try {
    compiler.prepare(sources, 2);
    FAIL() << "a source that does not compile was prepared";
  } catch (const NativeError& e) {
    EXPECT_NE(std::string(e.what()).find("nonesuch"), std::string::npos) << e.what();
  }
  // What compiled stays built and loads.
  const auto value = reinterpret_cast<double (*)(void)>(compiler.load(returning(6), "value"));
  EXPECT_EQ(value(), 6.0);
}

// BATCHES: what the cache lacks is compiled one unit per job; every source
// loads from its batch, in this process and the next, without compiling.
TEST_F(ObjectCacheTest, PrepareBatchedCompilesOneUnitPerJob) {
  build(returning(0));
  const std::vector<std::string> sources = {returning(0), returning(1), returning(2), returning(1),
                                            returning(3), returning(4), returning(5)};
  {
    CCompiler compiler(collecting());
    compiler.prepare_batched(sources, "value", 2);
    EXPECT_EQ(compiler.compilations(), 2);  // returning(1 … 5) in two units
    EXPECT_EQ(objects().size(), 3u);         // returning(0)'s own, and the two units'
    for (int n = 0; n <= 5; ++n) {
      const auto value = reinterpret_cast<double (*)(void)>(compiler.load(returning(n), "value"));
      EXPECT_EQ(value(), n);
    }
    EXPECT_EQ(compiler.compilations(), 2);
  }
  // Another process finds every one in its batch.
  CCompiler again(collecting());
  again.prepare_batched(sources, "value", 2);
  for (int n = 0; n <= 5; ++n) {
    const auto value = reinterpret_cast<double (*)(void)>(again.load(returning(n), "value"));
    EXPECT_EQ(value(), n);
  }
  EXPECT_EQ(again.compilations(), 0);
  EXPECT_EQ(again.cache_hits(), 6);
  // So does a load without prepare.
  CCompiler single(collecting());
  EXPECT_EQ(reinterpret_cast<double (*)(void)>(single.load(returning(4), "value"))(), 4.0);
  EXPECT_EQ(single.compilations(), 0);
  EXPECT_TRUE(warnings_.empty());
}

TEST_F(ObjectCacheTest, ADamagedBatchIsFoundOutAndItsKernelCompiledAlone) {
  const std::vector<std::string> sources = {returning(1), returning(2), returning(3)};
  {
    CCompiler compiler(collecting());
    compiler.prepare_batched(sources, "value", 1);
    EXPECT_EQ(compiler.compilations(), 1);
  }
  ASSERT_EQ(objects().size(), 1u);
  const std::string batch = *objects().begin();
  fs::resize_file(batch, fs::file_size(batch) / 2);
  CCompiler compiler(collecting());
  EXPECT_EQ(reinterpret_cast<double (*)(void)>(compiler.load(returning(2), "value"))(), 2.0);
  EXPECT_EQ(compiler.compilations(), 1);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("names the batch object " + batch), std::string::npos) << warnings_[0];
  EXPECT_NE(warnings_[0].find("truncated"), std::string::npos) << warnings_[0];
}

TEST_F(ObjectCacheTest, ABatchThatFailsIsCompiledSourceBySourceNamingTheFailure) {
  CCompiler compiler(collecting());
  const std::vector<std::string> sources = {returning(7), "double value(void) { return nonesuch; }\n", returning(8)};
  try {
    compiler.prepare_batched(sources, "value", 1);
    FAIL() << "a source that does not compile was prepared";
  } catch (const NativeError& e) {
    EXPECT_NE(std::string(e.what()).find("nonesuch"), std::string::npos) << e.what();
  }
  // The unit, then each of its three sources alone: the others are built.
  EXPECT_EQ(compiler.compilations(), 4);
  EXPECT_EQ(reinterpret_cast<double (*)(void)>(compiler.load(returning(8), "value"))(), 8.0);
  EXPECT_EQ(compiler.compilations(), 4);
}

TEST(CompileFlags, FollowTheIsaCap) {
  if (runtime::cpu_isa() < runtime::Isa::Avx512) GTEST_SKIP() << "the caps change nothing below AVX-512";
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: QUIRE_ISA not yet read
  EXPECT_EXIT(exit_with_flag_result("avx512", "-march=native"), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(exit_with_flag_result("avx2", "-mno-avx512f"), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(exit_with_flag_result("baseline", "-march=x86-64"), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace quire::native

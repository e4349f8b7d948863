#include "quire/calibrate/machine_profile.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "quire/native/native_testing.h"
#include "quire/support/cli_testing.h"

namespace quire::machine {
namespace {

// The facts of the machine the shipped profile describes.
MachineFacts shipped_facts() {
  const Profile& p = shipped_profile();
  MachineFacts m;
  m.processor = "a processor";
  m.isa = "avx512";
  m.cores = p.cores;
  m.vector_bytes = p.vector_bytes;
  m.caches = p.caches;
  return m;
}

// A calibration that measures nothing: the shipped profile under the name
// asked for, counting its calls.
struct FakeMeasure {
  int calls = 0;
  Calibration operator()(const CalibrationOptions& o) {
    ++calls;
    EXPECT_TRUE(o.quick) << "first use measures the quick set";
    Calibration c;
    c.profile = shipped_profile();
    c.profile.name = o.name;
    c.profile.cores = 3;
    return c;
  }
};

TEST(MachineProfile, DescribesComparesCoresVectorsAndCaches) {
  const MachineFacts here = shipped_facts();
  EXPECT_TRUE(describes(shipped_profile(), here));
  for (int change = 0; change < 5; ++change) {
    MachineFacts m = here;
    switch (change) {
      case 0: m.cores += 1; break;
      case 1: m.vector_bytes = 32; break;
      case 2: m.caches.l1 /= 2; break;
      case 3: m.caches.l2 /= 2; break;
      case 4: m.caches.l3 /= 2; break;
    }
    EXPECT_FALSE(describes(shipped_profile(), m)) << "change " << change;
  }
}

TEST(MachineProfile, KeyNamesEveryFact) {
  const MachineFacts here = shipped_facts();
  EXPECT_EQ(machine_key(here), machine_key(here));
  EXPECT_EQ(machine_key(here).size(), 16u);
  MachineFacts other = here;
  other.processor = "another processor";
  EXPECT_NE(machine_key(other), machine_key(here));
  other = here;
  other.isa = "avx2";
  EXPECT_NE(machine_key(other), machine_key(here));
}

class MachineProfileCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("quire_machine_profile_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(MachineProfileCache, TheShippedMachineMeasuresNothing) {
  FakeMeasure measure;
  const MachineProfile m = machine_profile(shipped_facts(), dir_.string(), std::ref(measure));
  EXPECT_EQ(m.path, "");
  EXPECT_FALSE(m.measured_now);
  EXPECT_EQ(m.note, "");
  EXPECT_EQ(measure.calls, 0);
  EXPECT_FALSE(std::filesystem::exists(dir_)) << "nothing written";
}

TEST_F(MachineProfileCache, AnotherMachineIsMeasuredOnceAndSaysSoOnce) {
  MachineFacts here = shipped_facts();
  here.vector_bytes = 32;
  here.isa = "avx2";
  FakeMeasure measure;
  const MachineProfile first = machine_profile(here, dir_.string(), std::ref(measure));
  EXPECT_EQ(measure.calls, 1);
  EXPECT_TRUE(first.measured_now);
  const std::string name = "machine-" + machine_key(here);
  EXPECT_EQ(first.path, (dir_ / (name + ".json")).string());
  EXPECT_NE(first.note.find("avx2, 32-byte vectors"), std::string::npos) << first.note;
  EXPECT_NE(first.note.find("avx512, 64-byte vectors"), std::string::npos) << first.note;
  EXPECT_NE(first.note.find(first.path), std::string::npos) << first.note;
  const Profile kept = planning_profile(first.path);
  EXPECT_EQ(kept.name, name);
  EXPECT_EQ(kept.cores, 3) << "what the measurement gave";
  EXPECT_NE(kept.source.find("on first use"), std::string::npos) << kept.source;

  const MachineProfile again = machine_profile(here, dir_.string(), std::ref(measure));
  EXPECT_EQ(measure.calls, 1) << "the kept profile is used";
  EXPECT_FALSE(again.measured_now);
  EXPECT_EQ(again.note, "") << "said once";
  EXPECT_EQ(again.path, first.path);

  // Another machine sharing the folder gets its own.
  MachineFacts other = here;
  other.processor = "another processor";
  const MachineProfile theirs = machine_profile(other, dir_.string(), std::ref(measure));
  EXPECT_EQ(measure.calls, 2);
  EXPECT_NE(theirs.path, first.path);
}

TEST_F(MachineProfileCache, AKeptProfileThatDoesNotReadBackIsMeasuredAgain) {
  MachineFacts here = shipped_facts();
  here.cores = 7;
  FakeMeasure measure;
  const std::string path = machine_profile(here, dir_.string(), std::ref(measure)).path;
  struct Damage {
    const char* what;
    std::string text;
    const char* reason;
  };
  nlohmann::ordered_json renamed = profile_json(shipped_profile());
  renamed["name"] = "machine-0000000000000000";
  nlohmann::ordered_json v1 = profile_json(shipped_profile());
  v1["version"] = 1;
  v1.erase("layout_model");
  v1["name"] = "machine-" + machine_key(here);
  // Fitted freely, as quick profiles were before they kept the shipped
  // model's shape.
  nlohmann::ordered_json free_fit = profile_json(shipped_profile());
  free_fit["name"] = "machine-" + machine_key(here);
  free_fit["layout_model"]["lane_speedup"] = 251.5;
  const std::vector<Damage> damages = {
      {"cut short", "{\"format\": \"quire-profile\", \"vers", ""},
      {"another machine's", renamed.dump(), "is named `machine-0000000000000000`"},
      {"without a layout model", v1.dump(), "no layout model"},
      {"fitted freely", free_fit.dump(), "not the shipped model's shape (lane speedup 251.5"},
  };
  int calls = measure.calls;
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    std::ofstream(path, std::ios::trunc) << d.text;
    const MachineProfile m = machine_profile(here, dir_.string(), std::ref(measure));
    EXPECT_EQ(measure.calls, ++calls) << "measured again";
    EXPECT_TRUE(m.measured_now);
    EXPECT_NE(m.note.find("the profile kept there was refused"), std::string::npos) << m.note;
    EXPECT_NE(m.note.find(d.reason), std::string::npos) << m.note;
    EXPECT_EQ(planning_profile(path).name, "machine-" + machine_key(here)) << "rewritten whole";
  }
}

// The real thing: a quick calibration of this machine under facts that the
// shipped profile does not describe, kept and read back as a planning profile.
TEST_F(MachineProfileCache, FirstUseRunsAQuickCalibration) {
  if (!native::testing::c_compiler_available()) GTEST_SKIP() << "no C compiler (`cc` on PATH or $CC)";
  native::testing::ScopedEnv cache("QUIRE_CACHE_DIR", (dir_ / "objects").string());
  MachineFacts here = this_machine();
  here.processor += " (as a test's other machine)";
  here.cores = shipped_profile().cores + 1;
  const MachineProfile m = machine_profile(here, dir_.string());
  ASSERT_TRUE(m.measured_now);
  EXPECT_GT(m.seconds, 0);
  const Profile p = planning_profile(m.path);
  ASSERT_TRUE(p.layout.has_value());
  EXPECT_GT(p.layout->points, 0);
  EXPECT_GT(p.layout->packed_flops, 0);
}

// `quire run` under QUIRE_PROFILE=machine on a machine the shipped profile
// does not describe (QUIRE_ISA=avx2 narrows the vectors to 32 bytes, or the
// machine's own differ): the note once, on the first run, and the profile kept.
class MachineProfileCli : public quire::testing::CliTest {};

TEST_F(MachineProfileCli, RunMeasuresOnFirstUseAndSaysSoOnce) {
  if (!native::testing::c_compiler_available()) GTEST_SKIP() << "no C compiler (`cc` on PATH or $CC)";
  native::testing::ScopedEnv cache("QUIRE_CACHE_DIR", file("objects"));
  native::testing::ScopedEnv isa("QUIRE_ISA", "avx2");
  native::testing::ScopedEnv profile("QUIRE_PROFILE", "machine");
  const std::string program = write("p.qr", "fn f(x : ℝ[n: 64]) -> ℝ[n: 64] = x * x + 1.0\n");
  const std::string args = "run " + program + " --entry f --seed 1";
  const quire::testing::Outcome first = quire::testing::run_quire(args);
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_NE(first.output.find("is not the one the shipped profile describes"), std::string::npos) << first.output;
  size_t kept = 0;
  for (const auto& e : std::filesystem::directory_iterator(file("objects")))
    if (e.path().filename().string().rfind("machine-", 0) == 0) {
      ++kept;
      EXPECT_NO_THROW(planning_profile(e.path().string()));
    }
  EXPECT_EQ(kept, 1u);
  const quire::testing::Outcome second = quire::testing::run_quire(args);
  ASSERT_EQ(second.status, 0) << second.output;
  EXPECT_EQ(second.output.find("shipped profile"), std::string::npos) << second.output;
  EXPECT_EQ(second.output.substr(second.output.find('[')), first.output.substr(first.output.find('[')))
      << "the same result";

  {
    native::testing::ScopedEnv missing("QUIRE_PROFILE", file("nowhere.json"));
    const quire::testing::Outcome refused = quire::testing::run_quire(args);
    EXPECT_NE(refused.status, 0);
    EXPECT_NE(refused.output.find("QUIRE_PROFILE=" + file("nowhere.json") + ": no such profile file"), std::string::npos)
        << refused.output;
  }
  native::testing::ScopedEnv shipped("QUIRE_PROFILE", "shipped");
  native::testing::ScopedEnv fresh("QUIRE_CACHE_DIR", file("objects2"));
  const quire::testing::Outcome pinned = quire::testing::run_quire(args);
  ASSERT_EQ(pinned.status, 0) << pinned.output;
  EXPECT_EQ(pinned.output.find("shipped profile"), std::string::npos) << pinned.output;
}

}  // namespace
}  // namespace quire::machine

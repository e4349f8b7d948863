// Calibration: the fit recovers a known model from its own predictions,
// Spearman's ρ on hand-made rankings, the sysfs reader on a fake tree, the
// calibration set's facts, and `quire profile calibrate` end to end.
#include "quire/calibrate/calibrate.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "quire/io/atomic_file.h"
#include "quire/io/io_error.h"
#include "quire/native/native_testing.h"
#include "quire/support/cli_testing.h"

namespace quire::machine {
namespace {

namespace fs = std::filesystem;

// A machine like CI's, with a model whose terms are each the largest for
// some nests of the calibration set, so that every constant is pinned.
Profile known_machine() {
  Profile p;
  p.name = "known";
  p.cores = 2;
  p.vector_bytes = 64;
  p.memory_bandwidth = 2e10;
  p.caches = Caches{49152, 2 << 20, 32 << 20, 2, 64};
  p.l2_bandwidth = 1e11;
  p.l3_bandwidth = 5e10;
  LayoutModel m;
  m.launch_seconds = 3e-7;
  m.spawn_seconds = 5e-6;
  m.op_seconds = 1.2e-9;
  m.load_seconds = 4e-10;
  m.call_seconds = 1.5e-8;
  m.fresh_seconds = 1.0 / 2e10;
  m.lane_speedup = 3.5;
  m.p = 1.6;
  p.layout = m;
  return p;
}

TEST(CalibrateFit, RecoversKnownConstantsFromTheirOwnPredictions) {
  const Profile truth = known_machine();
  std::vector<CalibrationSample> samples;
  for (const CalibrationNest& nest : calibration_nests(false)) {
    const kernel::NestFacts facts = kernel::nest_facts(nest.kernel);
    for (const kernel::Layout& l : kernel::layout_space(facts, truth))
      samples.push_back(CalibrationSample{nest.name, facts, l, kernel::predict(facts, l, truth).total});
  }
  ASSERT_GT(samples.size(), 100u);
  // The fit starts from the spawn it is given and nothing else of the truth.
  Profile measured = truth;
  measured.layout = LayoutModel{};
  measured.layout->spawn_seconds = truth.layout->spawn_seconds;
  const LayoutModel fitted = fit_layout_model(samples, measured);
  const LayoutModel& want = *truth.layout;
  EXPECT_NEAR(fitted.launch_seconds / want.launch_seconds, 1, 1e-3);
  EXPECT_NEAR(fitted.op_seconds / want.op_seconds, 1, 1e-3);
  EXPECT_NEAR(fitted.load_seconds / want.load_seconds, 1, 1e-3);
  EXPECT_NEAR(fitted.call_seconds / want.call_seconds, 1, 1e-3);
  EXPECT_NEAR(fitted.fresh_seconds / want.fresh_seconds, 1, 1e-3);
  EXPECT_NEAR(fitted.lane_speedup / want.lane_speedup, 1, 1e-3);
  EXPECT_NEAR(fitted.p / want.p, 1, 1e-3);
  EXPECT_EQ(fitted.spawn_seconds, want.spawn_seconds);
  EXPECT_LT(fitted.error, 1e-3);
  EXPECT_NEAR(fitted.rank_correlation, 1, 1e-9);
  EXPECT_EQ(fitted.points, static_cast<int>(samples.size()));
}

TEST(CalibrateFit, EveryPointOfTheSearchIsAModelAProfileAccepts) {
  // A constant no sample is bound by lets the search walk its log far down;
  // exp of −1000 is 0, which a profile refuses (the quick calibration in CI
  // once wrote op_seconds 0). Far up too.
  for (double far : {-1000.0, 1000.0}) {
    Profile p = shipped_profile();
    p.layout = layout_model_at(*p.layout, {far, far, far, far, far, far, far});
    for (double c : {p.layout->launch_seconds, p.layout->op_seconds, p.layout->load_seconds, p.layout->call_seconds,
                     p.layout->fresh_seconds, p.layout->lane_speedup})
      EXPECT_TRUE(c > 0 && std::isfinite(c)) << c;
    EXPECT_NO_THROW(parse_profile(profile_json(p), "far")) << far;
  }
  // Inside the bounds the map is exp itself.
  const LayoutModel m = layout_model_at(LayoutModel{}, {std::log(3e-7), std::log(1.2e-9), 0, 0, 0, 0, 0});
  EXPECT_NEAR(m.launch_seconds / 3e-7, 1, 1e-12);
  EXPECT_NEAR(m.op_seconds / 1.2e-9, 1, 1e-12);
  EXPECT_DOUBLE_EQ(m.p, 2.0);
}

TEST(CalibrateFit, TheScaleFitRecoversLaunchAndScaleOnTheQuickSetAndKeepsTheAnchorsShape) {
  const Profile anchor_machine = known_machine();
  const LayoutModel& anchor = *anchor_machine.layout;
  Profile truth = anchor_machine;
  truth.layout->launch_seconds = 1.7e-7;
  for (double* t : {&truth.layout->op_seconds, &truth.layout->load_seconds, &truth.layout->call_seconds,
                    &truth.layout->fresh_seconds})
    *t *= 0.3;
  std::vector<CalibrationSample> samples;
  for (const CalibrationNest& nest : calibration_nests(true)) {
    const kernel::NestFacts facts = kernel::nest_facts(nest.kernel);
    for (const kernel::Layout& l : kernel::layout_space(facts, truth))
      samples.push_back(CalibrationSample{nest.name, facts, l, kernel::predict(facts, l, truth).total});
  }
  Profile measured = truth;
  measured.layout = LayoutModel{};
  measured.layout->spawn_seconds = truth.layout->spawn_seconds;
  const LayoutModel fitted = fit_layout_scale(samples, measured, anchor);
  EXPECT_NEAR(fitted.launch_seconds / 1.7e-7, 1, 1e-3);
  EXPECT_NEAR(fitted.op_seconds / (0.3 * anchor.op_seconds), 1, 1e-3);
  EXPECT_NEAR(fitted.load_seconds / (0.3 * anchor.load_seconds), 1, 1e-3);
  EXPECT_NEAR(fitted.call_seconds / (0.3 * anchor.call_seconds), 1, 1e-3);
  EXPECT_NEAR(fitted.fresh_seconds / (0.3 * anchor.fresh_seconds), 1, 1e-3);
  EXPECT_EQ(fitted.lane_speedup, anchor.lane_speedup);
  EXPECT_EQ(fitted.p, anchor.p);
  EXPECT_EQ(fitted.spawn_seconds, anchor.spawn_seconds);
  EXPECT_LT(fitted.error, 1e-3);
  EXPECT_EQ(fitted.points, static_cast<int>(samples.size()));
  EXPECT_THROW(fit_layout_scale({}, measured, anchor), std::invalid_argument);
}

TEST(CalibrateFit, RefusesNoSamples) {
  EXPECT_THROW(fit_layout_model({}, known_machine()), std::invalid_argument);
}

TEST(CalibrateSpearman, HandMadeRankings) {
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1);
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1);
  // Monotone but not linear: only the order counts.
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4, 5}, {1, 8, 27, 64, 1000}), 1);
  // One swap in five: ρ = 1 − 6·Σd²/(n(n²−1)) = 1 − 6·2/120.
  EXPECT_NEAR(spearman({1, 2, 3, 4, 5}, {1, 3, 2, 4, 5}), 0.9, 1e-12);
  // Ties take their mean rank: (1, 2.5, 2.5, 4) against (1, 2, 3, 4) gives
  // 4.5 / √(4.5 · 5).
  EXPECT_NEAR(spearman({1, 2, 2, 3}, {1, 2, 3, 4}), 4.5 / std::sqrt(4.5 * 5), 1e-12);
  EXPECT_NEAR(spearman({5, 5, 1, 1}, {2, 2, 1, 1}), 1, 1e-12);
  EXPECT_EQ(spearman({3, 3, 3}, {1, 2, 3}), 0);
  EXPECT_THROW(spearman({1, 2}, {1}), std::invalid_argument);
}

/// A temporary folder shaped like sysfs's cpu0/cache, removed after.
class CalibrateCaches : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "quire-sysfs-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  void cache(const std::string& index, const std::string& level, const std::string& type, const std::string& size,
             const std::string& shared) {
    const fs::path d = dir_ / index;
    fs::create_directories(d);
    std::ofstream(d / "level") << level << "\n";
    std::ofstream(d / "type") << type << "\n";
    std::ofstream(d / "size") << size << "\n";
    std::ofstream(d / "shared_cpu_list") << shared << "\n";
    std::ofstream(d / "coherency_line_size") << "64\n";
  }
  void typical() {
    cache("index0", "1", "Data", "48K", "0");
    cache("index1", "1", "Instruction", "32K", "0");
    cache("index2", "2", "Unified", "2048K", "0");
    cache("index3", "3", "Unified", "307200K", "0-1,4-5");
  }

  fs::path dir_;
};

TEST_F(CalibrateCaches, ReadsEachLevelAndSkipsTheInstructionCache) {
  typical();
  const Caches c = read_caches(dir_.string());
  EXPECT_EQ(c.l1, 48 << 10);
  EXPECT_EQ(c.l2, 2048 << 10);
  EXPECT_EQ(c.l3, int64_t{307200} << 10);
  EXPECT_EQ(c.l3_shared_by, 4);
  EXPECT_EQ(c.line, 64);
}

TEST_F(CalibrateCaches, WithoutAnL3TheL3BandIsEmpty) {
  cache("index0", "1", "Data", "32K", "0");
  cache("index2", "2", "Unified", "1M", "0");
  const Caches c = read_caches(dir_.string());
  EXPECT_EQ(c.l2, 1 << 20);
  EXPECT_EQ(c.l3, c.l2);
  EXPECT_EQ(c.l3_shared_by, 1);
}

TEST_F(CalibrateCaches, AMissingFolderIsNamed) {
  try {
    read_caches((dir_ / "nowhere").string());
    FAIL() << "expected an IoError";
  } catch (const io::IoError& e) {
    EXPECT_EQ(e.path, (dir_ / "nowhere").string());
    EXPECT_NE(e.reason.find("sysfs"), std::string::npos) << e.what();
  }
}

TEST_F(CalibrateCaches, AMalformedFileIsNamed) {
  typical();
  std::ofstream(dir_ / "index2" / "size") << "lots\n";
  try {
    read_caches(dir_.string());
    FAIL() << "expected an IoError";
  } catch (const io::IoError& e) {
    EXPECT_EQ(e.path, (dir_ / "index2" / "size").string());
    EXPECT_NE(e.reason.find("`lots`"), std::string::npos) << e.what();
  }
}

TEST(CalibrateNests, CountWhatTheirCodeDoes) {
  for (const CalibrationNest& nest : calibration_nests(true)) {
    const kernel::NestFacts f = kernel::nest_facts(nest.kernel);
    const int64_t elements = runtime::element_count(nest.kernel.buffers[0].shape);
    if (nest.name.rfind("chain4", 0) == 0) {
      EXPECT_EQ(f.ops, 4 * elements) << nest.name;
      EXPECT_EQ(f.moved, 2 * elements) << nest.name;  // one load, one store
    }
    if (nest.name.rfind("rowsum", 0) == 0) {
      EXPECT_EQ(f.ops, elements) << nest.name;
      EXPECT_EQ(f.split_extent, nest.kernel.buffers[0].shape[0]) << nest.name;
      // The fold is not independent: only the rows take lanes.
      EXPECT_EQ(f.independent, std::vector<int64_t>{nest.kernel.buffers[0].shape[0]}) << nest.name;
    } else {
      EXPECT_EQ(f.independent, nest.kernel.buffers[0].shape) << nest.name;
    }
    EXPECT_GT(f.split_extent, 0) << nest.name;
  }
}

class CalibrateCli : public quire::testing::CliTest {};

TEST_F(CalibrateCli, QuickWritesAProfileReadProfileAccepts) {
  if (!native::testing::c_compiler_available()) GTEST_SKIP() << "no C compiler (`cc` on PATH or $CC)";
  native::testing::ScopedEnv cache("QUIRE_CACHE_DIR", file("kernel-cache"));
  const std::string out = file("quick.json");
  const quire::testing::Outcome o = quire::testing::run_quire("profile calibrate --quick --name quick -o " + out);
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_NE(o.output.find("ρ = "), std::string::npos) << o.output;
  const Profile p = read_profile(out);
  EXPECT_EQ(p.name, "quick");
  ASSERT_TRUE(p.layout.has_value());
  EXPECT_GT(p.layout->points, 0);
  EXPECT_GT(p.layout->packed_flops, 0) << "the packed product's rate is measured";
  // The shipped model's shape: only its launch and one scale are fitted.
  EXPECT_EQ(p.layout->lane_speedup, shipped_profile().layout->lane_speedup);
  EXPECT_EQ(p.layout->p, shipped_profile().layout->p);
  const double scale = p.layout->op_seconds / shipped_profile().layout->op_seconds;
  EXPECT_NEAR(p.layout->load_seconds / shipped_profile().layout->load_seconds / scale, 1, 1e-9);
  EXPECT_NEAR(p.layout->call_seconds / shipped_profile().layout->call_seconds / scale, 1, 1e-9);
  EXPECT_NE(p.source.find("calibrate"), std::string::npos);
  EXPECT_NE(io::read_file(out).find("\"version\": 2"), std::string::npos);
}

TEST_F(CalibrateCli, AnUnwritableOutputIsNamedBeforeMeasuring) {
  const std::string out = file("no-such-folder/p.json");
  const quire::testing::Outcome o = quire::testing::run_quire("profile calibrate --quick -o " + out);
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_NE(o.output.find(out), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("internal error"), std::string::npos) << o.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(CalibrateCli, AMissingOutputIsAUsageError) {
  const quire::testing::Outcome o = quire::testing::run_quire("profile calibrate --quick");
  EXPECT_NE(o.status, 0) << o.output;
  EXPECT_NE(o.output.find("--out"), std::string::npos) << o.output;
}

}  // namespace
}  // namespace quire::machine

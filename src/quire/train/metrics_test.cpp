// The metrics file: the exact JSON of a record, non-finite numbers, the
// bit-exact round trip, and the file's behaviour across a kill and a resume
// (torn last line, steps after the checkpoint dropped, fresh-run truncation).

#include "quire/train/metrics.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "quire/io/atomic_file.h"
#include "quire/support/testing.h"

namespace quire::train {
namespace {

using quire::testing::error_of;
using quire::testing::ScratchDir;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

StepRecord record(int64_t step) {
  StepRecord r;
  r.step = step;
  r.total_steps = 8;
  r.epoch = (step - 1) / 4;
  r.epochs = 2;
  r.loss = 1.0 / double(step);
  r.lr = 0.01;
  r.grad_norm = 0.5;
  r.samples_per_s = 100;
  r.elapsed_s = 0.25 * double(step);
  r.eta_s = 0.25 * double(8 - step);
  return r;
}

/// The steps of the records, in order.
std::vector<int64_t> steps_of(const std::vector<StepRecord>& records) {
  std::vector<int64_t> steps;
  for (const StepRecord& r : records) steps.push_back(r.step);
  return steps;
}

TEST(MetricsFileTest, JsonKeysFollowTheFieldOrder) {
  StepRecord r = record(3);
  r.loss = 0.125;
  r.clipped = true;
  r.loss_scale = 65536;
  EXPECT_EQ(to_json(r).dump(),
            R"({"step":3,"total_steps":8,"epoch":0,"epochs":2,"loss":0.125,"lr":0.01,"grad_norm":0.5,)"
            R"("clipped":true,"skipped":false,"loss_scale":65536.0,"samples_per_s":100.0,"elapsed_s":0.75,)"
            R"("eta_s":1.25})");
}

TEST(MetricsFileTest, LossScaleIsOmittedWithoutOne) {
  const auto j = to_json(record(1));
  EXPECT_FALSE(j.contains("loss_scale"));
  EXPECT_FALSE(step_record_from_json(nlohmann::json::parse(j.dump())).loss_scale.has_value());
}

TEST(MetricsFileTest, AHeldOutLossIsWrittenLastAndReadBackOnlyWhereThereIsOne) {
  StepRecord r = record(5);
  EXPECT_FALSE(to_json(r).contains("held_out_loss"));
  EXPECT_FALSE(step_record_from_json(nlohmann::json::parse(to_json(r).dump())).held_out_loss);
  r.held_out_loss = 0.1 + 0.2;
  const auto j = to_json(r);
  EXPECT_EQ(std::prev(j.end()).key(), "held_out_loss");
  const StepRecord back = step_record_from_json(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back.held_out_loss);
  EXPECT_EQ(*back.held_out_loss, 0.1 + 0.2);
}

TEST(MetricsFileTest, NonFiniteDoublesAreStrings) {
  StepRecord r = record(2);
  r.loss = kNaN;
  r.grad_norm = kInf;
  r.loss_scale = -kInf;
  r.skipped = true;
  const auto j = to_json(r);
  EXPECT_EQ(j["loss"], "nan");
  EXPECT_EQ(j["grad_norm"], "inf");
  EXPECT_EQ(j["loss_scale"], "-inf");
  r.loss = -kNaN;  // a NaN's sign means nothing
  EXPECT_EQ(to_json(r)["loss"], "nan");
  r.loss = kNaN;

  const StepRecord back = step_record_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_TRUE(std::isnan(back.loss));
  EXPECT_EQ(back.grad_norm, kInf);
  EXPECT_EQ(back.loss_scale, -kInf);
  EXPECT_TRUE(back.skipped);
}

TEST(MetricsFileTest, DoublesRoundTripBitExactly) {
  const double values[] = {0.1, 1.0 / 3, 1e-300, 5e-324, -0.0, 1.7976931348623157e308, 2.0 / 3 * 1e17};
  for (double v : values) {
    StepRecord r = record(1);
    r.loss = v;
    r.lr = v;
    r.eta_s = v;
    r.loss_scale = v;
    const StepRecord back = step_record_from_json(nlohmann::json::parse(to_json(r).dump()));
    EXPECT_EQ(std::bit_cast<uint64_t>(back.loss), std::bit_cast<uint64_t>(v)) << v;
    EXPECT_EQ(std::bit_cast<uint64_t>(back.lr), std::bit_cast<uint64_t>(v)) << v;
    EXPECT_EQ(std::bit_cast<uint64_t>(back.eta_s), std::bit_cast<uint64_t>(v)) << v;
    EXPECT_EQ(std::bit_cast<uint64_t>(*back.loss_scale), std::bit_cast<uint64_t>(v)) << v;
  }
}

TEST(MetricsFileTest, FromJsonNamesTheMissingOrBadKey) {
  auto error_for = [](auto edit) {
    nlohmann::json j = nlohmann::json::parse(to_json(record(1)).dump());
    edit(j);
    return error_of<std::runtime_error>([&] { step_record_from_json(j); });
  };
  EXPECT_EQ(error_for([](auto& j) { j.erase("loss"); }), "missing key `loss`");
  EXPECT_EQ(error_for([](auto& j) { j["step"] = 1.5; }), "key `step` is not an integer");
  EXPECT_EQ(error_for([](auto& j) { j["epoch"] = 18446744073709551615u; }), "key `epoch` is out of range");
  EXPECT_EQ(error_for([](auto& j) { j["clipped"] = 1; }), "key `clipped` is not a boolean");
  EXPECT_EQ(error_for([](auto& j) { j["lr"] = "NaN"; }), R"(key `lr` is not a number (nor "nan", "inf", "-inf"))");
  EXPECT_EQ(error_for([](auto& j) { j["loss_scale"] = nullptr; }),
            R"(key `loss_scale` is not a number (nor "nan", "inf", "-inf"))");
  EXPECT_EQ(error_for([](auto& j) { j = nlohmann::json::array(); }), "a step record is not a JSON object");
  // A newer quire's extra keys are ignored.
  EXPECT_EQ(error_for([](auto& j) { j["tokens_per_s"] = 7; }), "(no error)");
}

TEST(MetricsFileTest, AppendedLinesReadBack) {
  ScratchDir dir("metrics");
  const std::string path = dir.file("metrics.jsonl");
  {
    MetricsFile file(path, 0);
    EXPECT_EQ(file.path(), path);
    EXPECT_EQ(io::read_file(path), "");  // created at once
    file.append(record(1));
    // Flushed: visible to another reader before the file is closed.
    EXPECT_EQ(io::read_file(path), to_json(record(1)).dump() + "\n");
    file.append(record(2));
  }
  const auto records = read_metrics(path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(to_json(records[0]), to_json(record(1)));
  EXPECT_EQ(to_json(records[1]), to_json(record(2)));
}

TEST(MetricsFileTest, ResumeDropsTheStepsAfterTheCheckpoint) {
  ScratchDir dir("metrics");
  const std::string path = dir.file("metrics.jsonl");
  {
    MetricsFile file(path, 0);
    for (int64_t s = 1; s <= 5; ++s) file.append(record(s));
  }
  {
    MetricsFile file(path, 3);  // resumed from the checkpoint at step 3
    EXPECT_EQ(steps_of(read_metrics(path)), (std::vector<int64_t>{1, 2, 3}));
    file.append(record(4));
  }
  EXPECT_EQ(steps_of(read_metrics(path)), (std::vector<int64_t>{1, 2, 3, 4}));
  // Nothing to drop: the file is kept as it is.
  { MetricsFile file(path, 8); }
  EXPECT_EQ(steps_of(read_metrics(path)), (std::vector<int64_t>{1, 2, 3, 4}));
  // A fresh run starts the file over.
  { MetricsFile file(path, 0); }
  EXPECT_EQ(io::read_file(path), "");
}

TEST(MetricsFileTest, ResumeCreatesAMissingFile) {
  ScratchDir dir("metrics");
  const std::string path = dir.file("metrics.jsonl");
  MetricsFile file(path, 10);
  EXPECT_EQ(file.repair(), "");
  file.append(record(11));
  EXPECT_EQ(steps_of(read_metrics(path)), (std::vector<int64_t>{11}));
}

TEST(MetricsFileTest, TornLastLineIsDropped) {
  ScratchDir dir("metrics");
  const std::string path = dir.file("metrics.jsonl");
  const std::string whole = to_json(record(1)).dump() + "\n" + to_json(record(2)).dump() + "\n";
  io::write_file_atomically(path, whole + R"({"step":3,"total_st)");
  EXPECT_EQ(steps_of(read_metrics(path)), (std::vector<int64_t>{1, 2}));
  {
    MetricsFile file(path, 5);
    EXPECT_EQ(io::read_file(path), whole);
    EXPECT_EQ(file.repair(), path + ": its last line was cut short (19 bytes after line 2, a step's metrics being "
                                   "written when the run stopped): truncated to the last complete line");
    file.append(record(3));
  }
  EXPECT_EQ(steps_of(read_metrics(path)), (std::vector<int64_t>{1, 2, 3}));
}

TEST(MetricsFileTest, MalformedLineIsReportedWithItsNumber) {
  ScratchDir dir("metrics");
  const std::string path = dir.file("metrics.jsonl");
  const std::string first = to_json(record(1)).dump() + "\n";
  auto error_for = [&](const std::string& second_line) {
    io::write_file_atomically(path, first + second_line + "\n");
    return error_of<io::IoError>([&] { read_metrics(path); });
  };
  EXPECT_EQ(error_for("{\"step\":"), path + ":2: invalid JSON at column 9");
  EXPECT_EQ(error_for("[1, 2]"), path + ":2: not a JSON object");
  EXPECT_EQ(error_for(""), path + ":2: empty line");
  EXPECT_EQ(error_for(R"({"step":2})"), path + ":2: missing key `total_steps`");
  // A resume refuses to rewrite a file it cannot read rather than lose it.
  EXPECT_EQ(error_of<io::IoError>([&] { MetricsFile(path, 1); }), path + ":2: missing key `total_steps`");
  EXPECT_EQ(io::read_file(path), first + R"({"step":2})" + "\n");
  // A fresh run does not read it at all.
  EXPECT_EQ(error_of<io::IoError>([&] { MetricsFile(path, 0); }), "(no error)");
}

TEST(MetricsFileTest, FileErrorsNameThePath) {
  ScratchDir dir("metrics");
  const std::string missing = dir.file("missing.jsonl");
  EXPECT_EQ(error_of<io::IoError>([&] { read_metrics(missing); }),
            missing + ": cannot open: No such file or directory");
  const std::string nowhere = dir.file("no/such/folder/metrics.jsonl");
  EXPECT_EQ(error_of<io::IoError>([&] { MetricsFile(nowhere, 0); }).rfind(nowhere + ": ", 0), 0u);
  EXPECT_EQ(error_of<io::IoError>([&] { MetricsFile(nowhere, 3); }).rfind(nowhere + ": ", 0), 0u);
}

}  // namespace
}  // namespace quire::train

#include "quire/train/checkpoint.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <filesystem>
#include <fstream>
#include <functional>

#include "quire/io/atomic_file.h"
#include "quire/support/sha256.h"
#include "quire/support/testing.h"
#include "quire/train/checkpoint_testing.h"

namespace quire::train {

using support::sha256_hex;

namespace {

namespace fs = std::filesystem;
using runtime::ElemKind;
using runtime::Tensor;
using testing::corrupt_checkpoint;
using testing::reseal;

/// A scratch folder that names checkpoint folders in it.
struct ScratchDir : quire::testing::ScratchDir {
  ScratchDir() : quire::testing::ScratchDir("checkpoint") {}
  std::string folder(int64_t step) const { return (path / checkpoint_folder_name(step)).string(); }
};

Tensor reals(runtime::Shape shape, std::vector<double> values) {
  Tensor t = Tensor::real(std::move(shape));
  t.reals = std::move(values);
  return t;
}

/// Parameters with an F32 master `w`, an F64 `b` and an integer tensor.
struct Parts {
  io::NamedTensors params{{"w", reals({2, 2}, {0.1f, -2.5f, 3e-8f, 1e30f})},
                          {"b", reals({3}, {0.1, -0.0, 1e-310})},
                          {"ids", Tensor::integer(ElemKind::I64, {2}, 7)}};
  io::StoreTypes param_types{io::StoreType::F64};
  io::NamedTensors optimizer{{"m.w", reals({2, 2}, {1, 2, 3, 4})}, {"v.w", reals({2, 2}, {0.5, 0.25, 0, 1})}};
  io::StoreTypes optimizer_types{io::StoreType::F32};
  Parts() { param_types.by_name["w"] = io::StoreType::F32; }
};

CheckpointState state_at(int64_t step) {
  CheckpointState s;
  s.step = step;
  s.epoch = step / 10;
  s.data = {step / 10, step % 10, step * 8};
  s.schedule_step = step;
  s.loss_scale = {{"scale", 65536.0}, {"good_steps", 12}};
  s.random = {{"key", {1, 2}}};
  s.trainer = {{"precision", "bf16"}, {"seed", 0}};
  return s;
}

std::string write_at(const ScratchDir& dir, int64_t step, int keep = 10) {
  const Parts parts;
  return write_checkpoint(dir.str(), state_at(step), parts.params, parts.param_types, parts.optimizer,
                          parts.optimizer_types, keep);
}

void expect_same_bits(const io::NamedTensors& a, const io::NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].first);
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.kind, b[i].second.kind);
    EXPECT_EQ(a[i].second.shape, b[i].second.shape);
    ASSERT_EQ(a[i].second.reals.size(), b[i].second.reals.size());
    for (size_t k = 0; k < a[i].second.reals.size(); ++k)
      EXPECT_EQ(std::bit_cast<uint64_t>(a[i].second.reals[k]), std::bit_cast<uint64_t>(b[i].second.reals[k]));
    EXPECT_EQ(a[i].second.ints, b[i].second.ints);
  }
}

/// The one refusal of find_latest, which must have fallen back to `expected_step`.
RefusedCheckpoint only_refusal(const ScratchDir& dir, int64_t expected_step) {
  const LatestCheckpoint latest = find_latest(dir.str());
  EXPECT_TRUE(latest.checkpoint);
  if (latest.checkpoint) {
    EXPECT_EQ(latest.checkpoint->state.step, expected_step);
  }
  EXPECT_EQ(latest.refused.size(), 1u);
  return latest.refused.empty() ? RefusedCheckpoint{} : latest.refused[0];
}

}  // namespace

TEST(CheckpointSha256, MatchesTheStandardTestVectors) {
  // FIPS 180-2, appendix B.1, and the digest of the empty string.
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Checkpoint, RoundTripKeepsBitsAndStoreTypes) {
  ScratchDir dir;
  const std::string folder = write_at(dir, 150);
  EXPECT_EQ(folder, dir.folder(150));
  EXPECT_EQ(fs::path(folder).filename(), "step-00000150");
  const LatestCheckpoint latest = find_latest(dir.str());
  ASSERT_TRUE(latest.checkpoint);
  EXPECT_TRUE(latest.refused.empty());
  const Checkpoint& c = *latest.checkpoint;
  EXPECT_EQ(c.path, folder);
  const CheckpointState expected = state_at(150);
  EXPECT_EQ(c.state.step, 150);
  EXPECT_EQ(c.state.epoch, expected.epoch);
  EXPECT_EQ(c.state.data, expected.data);
  EXPECT_EQ(c.state.schedule_step, 150);
  EXPECT_EQ(c.state.loss_scale, expected.loss_scale);
  EXPECT_EQ(c.state.random, expected.random);
  EXPECT_EQ(c.state.trainer, expected.trainer);
  EXPECT_EQ(c.state.quire_version, kQuireVersion);
  const Parts parts;
  expect_same_bits(c.params, parts.params);  // w's values are f32 values: stored as F32 exactly
  expect_same_bits(c.optimizer, parts.optimizer);
  EXPECT_EQ(c.param_types.of("w"), io::StoreType::F32);
  EXPECT_EQ(c.param_types.of("b"), io::StoreType::F64);
  EXPECT_EQ(c.optimizer_types.of("m.w"), io::StoreType::F32);
  EXPECT_EQ(c.optimizer_types.of("v.w"), io::StoreType::F32);

  // state.json records the digest of each file.
  const nlohmann::json state = nlohmann::json::parse(io::read_file(folder + "/state.json"));
  EXPECT_EQ(state["format"], "quire-checkpoint");
  EXPECT_EQ(state["step"], 150);
  EXPECT_EQ(state["data_position"]["samples"], 1200);
  EXPECT_EQ(state["files"]["params.safetensors"]["sha256"],
            sha256_hex(io::read_file(folder + "/params.safetensors")));
  EXPECT_EQ(state["files"]["optimizer.safetensors"]["sha256"],
            sha256_hex(io::read_file(folder + "/optimizer.safetensors")));
  EXPECT_EQ(dir.names(), std::vector<std::string>{"step-00000150"});  // no temporary left
}

TEST(Checkpoint, KeepsTheNewestK) {
  ScratchDir dir;
  for (int64_t step = 10; step <= 60; step += 10) write_at(dir, step, 3);
  EXPECT_EQ(dir.names(), std::vector<std::string>({"step-00000040", "step-00000050", "step-00000060"}));
  write_at(dir, 70, 1);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"step-00000070"});
}

TEST(Checkpoint, PruningCountsOnlyCompleteCheckpoints) {
  ScratchDir dir;
  for (int64_t step = 10; step <= 30; step += 10) write_at(dir, step);
  fs::remove(dir.folder(30) + "/optimizer.safetensors");
  write_at(dir, 40, 2);  // 40 and 20 are the newest complete ones; 30 is newer than 20 and stays
  EXPECT_EQ(dir.names(), std::vector<std::string>({"step-00000020", "step-00000030", "step-00000040"}));
}

TEST(Checkpoint, TruncatedParamsFallsBackToThePrevious) {
  ScratchDir dir;
  write_at(dir, 10);
  write_at(dir, 20);
  const std::string params = dir.folder(20) + "/params.safetensors";
  const uintmax_t size = fs::file_size(params);
  fs::resize_file(params, size - 5);
  const RefusedCheckpoint refused = only_refusal(dir, 10);
  EXPECT_EQ(refused.path, dir.folder(20));
  EXPECT_EQ(refused.reason,
            fmt::format("params.safetensors: truncated ({} bytes, state.json records {})", size - 5, size));
  EXPECT_EQ(refused.message(), dir.folder(20) + ": " + refused.reason);
}

TEST(Checkpoint, FlippedByteIsAChecksumMismatch) {
  ScratchDir dir;
  write_at(dir, 10);
  write_at(dir, 20);
  corrupt_checkpoint(dir.folder(20));
  EXPECT_EQ(only_refusal(dir, 10).reason, "params.safetensors: checksum mismatch");
}

TEST(Checkpoint, TruncatedStateJsonFallsBackToThePrevious) {
  ScratchDir dir;
  write_at(dir, 10);
  write_at(dir, 20);
  const std::string state = dir.folder(20) + "/state.json";
  fs::resize_file(state, fs::file_size(state) / 2);
  EXPECT_EQ(only_refusal(dir, 10).reason, "state.json: truncated or invalid JSON");
}

TEST(Checkpoint, MissingFilesAndFieldsAreRefused) {
  ScratchDir dir;
  write_at(dir, 10);
  write_at(dir, 20);
  fs::remove(dir.folder(20) + "/optimizer.safetensors");
  write_at(dir, 30);
  reseal(dir.folder(30), [](nlohmann::json& j) { j.erase("schedule_step"); });
  write_at(dir, 40);
  fs::rename(dir.folder(40), dir.folder(41));  // state.json says 40
  const LatestCheckpoint latest = find_latest(dir.str());
  ASSERT_TRUE(latest.checkpoint);
  EXPECT_EQ(latest.checkpoint->state.step, 10);
  ASSERT_EQ(latest.refused.size(), 3u);
  EXPECT_EQ(latest.refused[0].message(), dir.folder(41) + ": state.json: step 40 does not match the folder's name");
  EXPECT_EQ(latest.refused[1].message(), dir.folder(30) + ": state.json: missing field `schedule_step`");
  EXPECT_EQ(latest.refused[2].message(), dir.folder(20) + ": missing optimizer.safetensors");
}

TEST(Checkpoint, AChangedDigitInTheStateIsAChecksumMismatch) {
  ScratchDir dir;
  write_at(dir, 10);
  write_at(dir, 20);
  const std::string state = dir.folder(20) + "/state.json";
  std::string text = io::read_file(state);
  const size_t at = text.find("\"samples\": 160");
  ASSERT_NE(at, std::string::npos) << text;
  text[at + 12] = '7';  // 160 → 170
  io::write_file_atomically(state, text);
  EXPECT_EQ(only_refusal(dir, 10).reason,
            "state.json: checksum mismatch (the state was changed after it was written)");
}

TEST(Checkpoint, AnInconsistentStateIsRefusedByName) {
  ScratchDir dir;
  write_at(dir, 10);
  write_at(dir, 20);
  reseal(dir.folder(20), [](nlohmann::json& j) { j["epoch"] = 7; });
  EXPECT_EQ(only_refusal(dir, 10).reason, "state.json: `epoch` 7 is not `data_position.epoch` 2");
  write_at(dir, 20);
  reseal(dir.folder(20), [](nlohmann::json& j) { j["schedule_step"] = 21; });
  EXPECT_EQ(only_refusal(dir, 10).reason, "state.json: `schedule_step` 21 is past `step` 20");
  write_at(dir, 20);
  reseal(dir.folder(20), [](nlohmann::json& j) { j["format_version"] = 1; });
  EXPECT_EQ(only_refusal(dir, 10).reason,
            "state.json: format version 1 is older than this quire reads (2: its state is covered by a checksum)");
}

TEST(Checkpoint, LeftoverTemporaryFolderIsIgnoredAndReplaced) {
  ScratchDir dir;
  write_at(dir, 10);
  // A crash while writing step 20: its temporary folder holds half the files.
  const std::string temporary = (dir.path / ".step-00000020.tmp").string();
  fs::create_directory(temporary);
  std::ofstream(temporary + "/params.safetensors") << "half";
  LatestCheckpoint latest = find_latest(dir.str());
  ASSERT_TRUE(latest.checkpoint);
  EXPECT_EQ(latest.checkpoint->state.step, 10);
  EXPECT_TRUE(latest.refused.empty());

  write_at(dir, 20);
  EXPECT_EQ(dir.names(), std::vector<std::string>({"step-00000010", "step-00000020"}));
  latest = find_latest(dir.str());
  ASSERT_TRUE(latest.checkpoint);
  EXPECT_EQ(latest.checkpoint->state.step, 20);
}

TEST(Checkpoint, RewritingAStepReplacesIt) {
  ScratchDir dir;
  write_at(dir, 10);
  write_at(dir, 10);  // as after a resume from an earlier step
  EXPECT_EQ(dir.names(), std::vector<std::string>{"step-00000010"});
  // A broken one is not removed but set aside (AnUnreadableCheckpointOfTheSameStepIsSetAside).
  fs::remove(dir.folder(10) + "/params.safetensors");
  write_at(dir, 10);
  EXPECT_EQ(dir.names(), std::vector<std::string>({"step-00000010", "step-00000010.refused"}));
  const LatestCheckpoint latest = find_latest(dir.str());
  ASSERT_TRUE(latest.checkpoint);
  EXPECT_TRUE(latest.refused.empty());
}

TEST(Checkpoint, RefusedCheckpointsNeverPushARunsOwnOut) {
  // A resume that refused every checkpoint starts from step 0: its own
  // checkpoints are older than the refused ones, yet they are what it keeps.
  ScratchDir dir;
  for (int64_t step : {100, 200, 300}) {
    write_at(dir, step);
    corrupt_checkpoint(dir.folder(step));
  }
  ASSERT_FALSE(find_latest(dir.str()).checkpoint);
  CheckpointRetention retention(3);
  const Parts parts;
  for (int64_t step = 5; step <= 20; step += 5)
    write_checkpoint(dir.str(), state_at(step), parts.params, parts.param_types, parts.optimizer,
                     parts.optimizer_types, retention);
  EXPECT_EQ(dir.names(), std::vector<std::string>({"step-00000010", "step-00000015", "step-00000020", "step-00000100",
                                                   "step-00000200", "step-00000300"}));
  const LatestCheckpoint latest = find_latest(dir.str());
  ASSERT_TRUE(latest.checkpoint);
  EXPECT_EQ(latest.checkpoint->state.step, 20);
}

TEST(Checkpoint, AnUnreadableCheckpointIsNeverRemoved) {
  // One of a newer format version: this quire cannot read it, another can.
  ScratchDir dir;
  write_at(dir, 10);
  write_at(dir, 20);
  const std::string state = dir.folder(10) + "/state.json";
  nlohmann::json j = nlohmann::json::parse(io::read_file(state));
  j["format_version"] = kCheckpointFormatVersion + 1;
  io::write_file_atomically(state, j.dump());
  for (int64_t step = 30; step <= 50; step += 10) write_at(dir, step, 2);
  EXPECT_EQ(dir.names(), std::vector<std::string>({"step-00000010", "step-00000040", "step-00000050"}));
}

TEST(Checkpoint, AnUnreadableCheckpointOfTheSameStepIsSetAside) {
  ScratchDir dir;
  write_at(dir, 10);
  corrupt_checkpoint(dir.folder(10));
  write_at(dir, 10);
  EXPECT_EQ(dir.names(), std::vector<std::string>({"step-00000010", "step-00000010.refused"}));
  EXPECT_TRUE(find_latest(dir.str()).refused.empty());
}

TEST(Checkpoint, ARunThatCannotKeepItsOwnCheckpointFails) {
  // Newer checkpoints this run trusts (here: read back whole) would leave no
  // room for the one it writes: an error, not a silent removal.
  ScratchDir dir;
  write_at(dir, 20);
  write_at(dir, 30);
  CheckpointRetention retention(2);
  const Parts parts;
  try {
    write_checkpoint(dir.str(), state_at(10), parts.params, parts.param_types, parts.optimizer, parts.optimizer_types,
                     retention);
    FAIL() << "no error";
  } catch (const io::IoError& e) {
    EXPECT_EQ(e.path, dir.folder(10));
    EXPECT_NE(e.reason.find("would not be kept"), std::string::npos) << e.what();
  }
  EXPECT_EQ(dir.names(), std::vector<std::string>({"step-00000010", "step-00000020", "step-00000030"}));
}

TEST(Checkpoint, MissingFolderHasNoCheckpoint) {
  ScratchDir dir;
  const LatestCheckpoint latest = find_latest((dir.path / "none").string());
  EXPECT_FALSE(latest.checkpoint);
  EXPECT_TRUE(latest.refused.empty());
  // Creating the folder is part of writing.
  const Parts parts;
  write_checkpoint((dir.path / "a/b").string(), state_at(1), parts.params, parts.param_types, parts.optimizer,
                   parts.optimizer_types);
  EXPECT_TRUE(find_latest((dir.path / "a/b").string()).checkpoint);
}

}  // namespace quire::train

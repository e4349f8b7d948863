// Feeds arbitrary bytes, parsed as JSON, to every reader of a JSON artifact
// quire reads back: the envelope (`calibrate -o`), the realization (`solve
// --out`), the machine profile, a checkpoint's state.json and a line of the
// metrics file. Each reader must return a value or throw its documented error
// (io::IoError; std::runtime_error for a metrics line); any other exception,
// a crash, a hang or a sanitizer report is a finding. The corpus holds plain
// artifacts, so every input reaches every reader.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "quire/io/io_error.h"
#include "quire/machine/profile.h"
#include "quire/precision/envelope.h"
#include "quire/realize/realization_file.h"
#include "quire/support/sha256.h"
#include "quire/train/checkpoint.h"
#include "quire/train/metrics.h"

namespace {

template <typename Read>
void expect_value_or_io_error(Read read) {
  try {
    read();
  } catch (const quire::io::IoError&) {
  }
}

// A state.json whose checksum is recomputed: without it almost every mutation
// stops at the checksum, and the field checks behind it go unfuzzed.
nlohmann::json resealed(nlohmann::json j) {
  if (!j.is_object()) return j;
  j.erase("state_sha256");
  j["state_sha256"] = quire::support::sha256_hex(j.dump());
  return j;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, /*callback=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  expect_value_or_io_error([&] { (void)quire::precision::envelope_from_json(j, "fuzz/envelope.json"); });
  expect_value_or_io_error([&] { (void)quire::precision::realization_file_from_json(j, "fuzz/realization.json"); });
  expect_value_or_io_error([&] { (void)quire::machine::parse_profile(j, "fuzz/profile.json"); });
  expect_value_or_io_error([&] { (void)quire::train::checkpoint_state_from_json(j, "fuzz/step-00000002"); });
  expect_value_or_io_error([&] { (void)quire::train::checkpoint_state_from_json(resealed(j), "fuzz/step-00000002"); });
  try {
    (void)quire::train::step_record_from_json(j);
  } catch (const std::runtime_error&) {
  }
  return 0;
}

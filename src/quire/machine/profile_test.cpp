// A profile read back is validated, never trusted: every number in the range a
// machine can have, every text free of control characters.

#include "quire/machine/profile.h"

#include <gtest/gtest.h>

#include <string>

#include "quire/io/io_error.h"

namespace quire::machine {
namespace {

/// What parse_profile says of the shipped profile with one change, or "no error".
template <class Damage>
std::string refusal(Damage damage) {
  nlohmann::json j = nlohmann::json::parse(profile_json(shipped_profile()).dump());
  damage(j);
  try {
    parse_profile(j, "p.json");
    return "no error";
  } catch (const io::IoError& e) {
    return e.what();
  }
}

TEST(Profile, TheShippedOneIsRead) { EXPECT_EQ(refusal([](nlohmann::json&) {}), "no error"); }

TEST(Profile, NumbersOutsideAMachinesRangeAreRefusedByKey) {
  // 2^63 cores printed as -2147483648; 1e9 cores made planning take 13 s.
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["cores"] = uint64_t{1} << 63; }),
            "p.json: key `cores`: expected an integer in [1, 65536]");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["cores"] = 1000000000; }),
            "p.json: key `cores`: expected an integer in [1, 65536]");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["cores"] = 2.5; }), "p.json: key `cores`: expected an integer in [1, 65536]");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["caches"]["line"] = 0; }),
            "p.json: key `caches.line`: expected an integer in [1, 4096]");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["memory_bandwidth"] = -1.0; }),
            "p.json: key `memory_bandwidth`: expected a finite positive number");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["layout_model"]["points"] = -3; }),
            "p.json: key `layout_model.points`: expected an integer in [0, 1073741824]");
}

TEST(Profile, ControlCharactersInItsTextsAreRefused) {
  // The name is printed to a terminal: an escape sequence would be obeyed.
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["name"] = "fast\x1b[2J"; }),
            "p.json: key `name`: holds a control character");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["source"] = 3; }), "p.json: key `source`: expected a string");
}

}  // namespace
}  // namespace quire::machine

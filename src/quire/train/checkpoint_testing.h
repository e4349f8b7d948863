#pragma once
// Damage done to a written checkpoint by the tests of checkpoints and of the
// trainer's resume, so both damage it the same way.

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "quire/io/atomic_file.h"
#include "quire/support/sha256.h"

namespace quire::train::testing {

/// Flips a bit inside a tensor's data in the checkpoint folder `folder`'s
/// params: the file still decodes, its checksum no longer matches.
inline void corrupt_checkpoint(const std::string& folder) {
  const std::string params = folder + "/params.safetensors";
  std::string bytes = io::read_file(params);
  bytes[bytes.size() - 3] ^= 0x10;
  io::write_file_atomically(params, bytes);
}

/// Rewrites `folder`'s state.json as `edit` leaves it, with its checksum made
/// to match again: what is then refused is refused for its fields.
inline void reseal(const std::string& folder, const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = folder + "/state.json";
  nlohmann::json j = nlohmann::json::parse(io::read_file(path));
  j.erase("state_sha256");
  edit(j);
  j["state_sha256"] = support::sha256_hex(j.dump());
  io::write_file_atomically(path, j.dump(2));
}

}  // namespace quire::train::testing

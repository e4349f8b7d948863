#pragma once
// The start of a run of several ranks: every rank must be about to run the
// same thing, or their gradients would not be shards of one step's.
//
// Each rank describes what it will run as named fields (the trainer's: the
// program's and the data's digests, quire's version, the policy, the
// settings that decide the steps, the rank count); every rank sends its
// fields to rank 0, which compares them with its own and sends every rank
// one verdict. A rank that differs refuses the run on every rank, with a
// message naming each rank and field that differs and both values, before
// any step is taken (a step taken by ranks that disagree would at best
// waste the run, at worst hang it in a reduction of mismatched sizes).

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "quire/distributed/communicator.h"

namespace quire::distributed {

/// The ranks of a run disagree; what() names each rank and field.
struct HandshakeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Compares `fields` (a JSON object) across the ranks of `comm` as above.
/// Returns when every rank's equal rank 0's; throws HandshakeError on
/// every rank otherwise, CommunicatorError when a rank is gone.
void agree(Communicator& comm, const nlohmann::json& fields);

}  // namespace quire::distributed

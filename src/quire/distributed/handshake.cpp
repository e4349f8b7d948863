#include "quire/distributed/handshake.h"

#include <fmt/format.h>

#include <string>

namespace quire::distributed {

namespace {

/// A value for a message: strings as they are, the rest as JSON.
std::string shown(const nlohmann::json& value) { return value.is_string() ? value.get<std::string>() : value.dump(); }

/// The lines of `theirs` (rank `rank`'s fields) that differ from `ours` (rank 0's).
std::string differences(const Communicator& comm, int rank, const nlohmann::json& ours, const nlohmann::json& theirs) {
  std::string lines;
  for (const auto& [name, value] : ours.items()) {
    if (!theirs.contains(name))
      lines += fmt::format("  {}: {} has no {}, rank 0 has {}\n", name, comm.describe(rank), name, shown(value));
    else if (theirs[name] != value)
      lines +=
          fmt::format("  {}: {} has {}, rank 0 has {}\n", name, comm.describe(rank), shown(theirs[name]), shown(value));
  }
  for (const auto& [name, value] : theirs.items())
    if (!ours.contains(name))
      lines += fmt::format("  {}: {} has {}, rank 0 has no {}\n", name, comm.describe(rank), shown(value), name);
  return lines;
}

}  // namespace

void agree(Communicator& comm, const nlohmann::json& fields) {
  std::string verdict;
  if (comm.rank() == 0) {
    std::string lines;
    for (int r = 1; r < comm.size(); ++r) {
      const std::string text = receive_text(comm, r);
      const nlohmann::json theirs = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!theirs.is_object())
        lines += fmt::format("  {} sent no description of its run (not a quire of this version?)\n", comm.describe(r));
      else
        lines += differences(comm, r, fields, theirs);
    }
    if (!lines.empty())
      verdict = fmt::format("the {} ranks of this run are not running the same thing, so it cannot start:\n{}",
                            comm.size(), lines);
    if (!verdict.empty() && verdict.back() == '\n') verdict.pop_back();
    for (int r = 1; r < comm.size(); ++r) send_text(comm, r, verdict);
  } else {
    send_text(comm, 0, fields.dump());
    verdict = receive_text(comm, 0);
  }
  if (!verdict.empty()) throw HandshakeError(verdict);
}

}  // namespace quire::distributed

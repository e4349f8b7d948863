#include "quire/distributed/communicator.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>

namespace quire::distributed {

void send_text(Communicator& comm, int to, const std::string& text) {
  const uint64_t length = text.size();
  comm.send(to, std::as_bytes(std::span(&length, 1)));
  comm.send(to, std::as_bytes(std::span(text.data(), text.size())));
}

std::string receive_text(Communicator& comm, int from) {
  uint64_t length = 0;
  comm.receive(from, std::as_writable_bytes(std::span(&length, 1)));
  // A length that no text of a run comes near is a broken peer, not a text to allocate.
  constexpr uint64_t kLimit = uint64_t{1} << 30;
  if (length > kLimit)
    throw CommunicatorError(fmt::format("{} announced a text of {} bytes (at most {}): a broken message",
                                        comm.describe(from), length, kLimit));
  std::string text(length, '\0');
  comm.receive(from, std::as_writable_bytes(std::span(text.data(), text.size())));
  return text;
}

}  // namespace quire::distributed

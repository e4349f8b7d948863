#pragma once
// The processes of one data-parallel run, and the messages between them.
//
// A run of R ranks (`mpirun -n R quire train …`) is R processes, rank 0 to
// R − 1; each computes one shard of every batch (train/shards.h) and the
// shards' gradients are summed by messages along a fixed tree (reduction.h).
// Everything quire says to another rank goes through this interface: two
// blocking operations on raw bytes, so that MPI stays in one file
// (mpi_world.cpp, built only where MPI was found) and the reduction's order
// is quire's own, written once, not an MPI library's.
//
// FAILURE. A rank that dies or stops answering must end the run on every
// rank, naming it, never leave the others waiting: send and receive throw a
// CommunicatorError naming the peer when it is gone (its process ended) or
// silent past the timeout, and abort() ends every rank at once after an
// error that only this rank saw.

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>

namespace quire::distributed {

/// A message that could not be sent or received: the peer is gone, silent
/// past the timeout, or the transport failed. what() names the peer's rank.
struct CommunicatorError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The ranks of one run and the messages between them.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  ///< this process's rank, in [0, size())
  virtual int size() const = 0;  ///< how many ranks the run has

  /// Sends `bytes` to rank `to`; returns once the buffer may be reused.
  /// Messages from one rank to another arrive in the order they were sent.
  virtual void send(int to, std::span<const std::byte> bytes) = 0;
  /// Receives the next message rank `from` sent to this rank, which must
  /// hold exactly bytes.size() bytes (both sides know every message's size).
  virtual void receive(int from, std::span<std::byte> bytes) = 0;

  /// Ends every rank's process with `status`, at once: after an error that
  /// only this rank saw, so that no other rank waits for it forever.
  [[noreturn]] virtual void abort(int status) = 0;

  /// "rank 2 (pid 4711 on node-a)": how messages name a rank.
  virtual std::string describe(int rank) const = 0;
};

/// Sends a string of any length (its length first, then its bytes).
void send_text(Communicator& comm, int to, const std::string& text);
/// Receives a string that send_text sent.
std::string receive_text(Communicator& comm, int from);

}  // namespace quire::distributed

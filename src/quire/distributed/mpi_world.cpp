// MPI_COMM_WORLD as quire's Communicator.
//
// Only point-to-point messages (MPI_Isend, MPI_Irecv) are used: the order
// of a sum is quire's (reduction.h), and a collective's is the library's.
//
// FINDING A FAILED RANK. MPI's default error handler aborts the job without
// saying why, and a blocking MPI_Recv from a rank that died waits forever on
// some transports (shared memory among them). So errors return
// (MPI_ERRORS_RETURN) and every message is a request polled with MPI_Test;
// while it waits, the rank checks every kLivenessPeriod whether the peer's
// process still exists (its pid, when it runs on this node and its pids are
// visible here: the ranks trade node names, process views and pids when the
// world opens) and gives up past the timeout
// (`--rank-timeout`) whatever the node. A dead peer on this node is named
// within a fraction of a second; on another node, the launcher's own daemon
// sees it die and ends the job (Open MPI's mpirun does, and names the rank),
// and the timeout covers a peer that hangs without dying.
//
// Polling costs a core while a rank waits: it yields the processor for the
// first milliseconds (a reply in a reduction comes within them), then sleeps
// between polls, so that ranks oversubscribed on fewer cores leave the
// processor to the ranks still computing.

#include "quire/distributed/mpi_world.h"

#include <fmt/format.h>
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace quire::distributed {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);
constexpr auto kYieldFor = std::chrono::milliseconds(2);
constexpr auto kSleep = std::chrono::microseconds(100);
/// MPI counts are ints: longer messages go in pieces of this many bytes.
constexpr size_t kPiece = size_t{1} << 30;

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<size_t>(length));
}

/// Whether process `pid` of this node has ended: no /proc entry, or a zombie
/// not yet reaped by the launcher's daemon.
bool process_ended(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  // "pid (comm) S …": the command may hold spaces and parentheses, the state follows the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

/// The message of a rank the launcher stops (SIGTERM) because another rank
/// failed: written from the handler, so composed beforehand.
char g_terminated_message[160];

void on_terminate(int) {
  // Only async-signal-safe calls here: write and _exit.
  const ssize_t written = ::write(STDERR_FILENO, g_terminated_message, std::strlen(g_terminated_message));
  (void)written;
  ::_exit(128 + SIGTERM);
}

class MpiWorld final : public Communicator {
 public:
  explicit MpiWorld(double timeout_s) : timeout_(std::chrono::duration<double>(timeout_s)) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized && MPI_Init(nullptr, nullptr) != MPI_SUCCESS)
      throw std::runtime_error("MPI could not start (MPI_Init failed)");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char host[HOST_NAME_MAX + 1] = {};
    ::gethostname(host, sizeof host - 1);
    host_ = host;
    std::snprintf(g_terminated_message, sizeof g_terminated_message,
                  "quire: rank %d: stopped by the launcher (another rank failed, or the job was cancelled)\n", rank_);
    std::signal(SIGTERM, on_terminate);
    trade_peers();
  }

  ~MpiWorld() override { MPI_Finalize(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void send(int to, std::span<const std::byte> bytes) override {
    for_each_piece(
        bytes.size(),
        [&](size_t at, int count, MPI_Request& request) {
          return MPI_Isend(bytes.data() + at, count, MPI_BYTE, to, kTag, MPI_COMM_WORLD, &request);
        },
        to, "send to");
  }

  void receive(int from, std::span<std::byte> bytes) override {
    for_each_piece(
        bytes.size(),
        [&](size_t at, int count, MPI_Request& request) {
          return MPI_Irecv(bytes.data() + at, count, MPI_BYTE, from, kTag, MPI_COMM_WORLD, &request);
        },
        from, "receive from");
  }

  [[noreturn]] void abort(int status) override {
    MPI_Abort(MPI_COMM_WORLD, status);
    std::_Exit(status);  // MPI_Abort does not return; should it, the process still ends
  }

  std::string describe(int rank) const override {
    if (static_cast<size_t>(rank) < peers_.size())
      return fmt::format("rank {} (pid {} on {})", rank, peers_[static_cast<size_t>(rank)].pid,
                         peers_[static_cast<size_t>(rank)].host);
    return fmt::format("rank {}", rank);
  }

 private:
  static constexpr int kTag = 0x71;  ///< every message of quire's: pairs keep their order within one tag

  struct Peer {
    std::string host;
    int pid = 0;
    bool visible = false;  ///< its pid can be looked up from this process (same node, kernel and pid namespace)
  };

  void check(int code, int peer, const char* what) const {
    if (code != MPI_SUCCESS)
      throw CommunicatorError(
          fmt::format("rank {} could not {} {}: {}", rank_, what, describe(peer), mpi_error_text(code)));
  }

  /// Starts `start(at, count, request)` for each piece of a message of
  /// `bytes` bytes (one piece, empty, for an empty message) and waits for it.
  template <typename Start>
  void for_each_piece(size_t bytes, Start start, int peer, const char* what) {
    const size_t pieces = bytes == 0 ? 1 : (bytes + kPiece - 1) / kPiece;
    for (size_t i = 0; i < pieces; ++i) {
      const size_t at = i * kPiece;
      MPI_Request request;
      check(start(at, static_cast<int>(std::min(kPiece, bytes - at)), request), peer, what);
      wait(request, peer, what);
    }
  }

  /// Polls `request` until it completes; CommunicatorError when `peer` has
  /// ended (on this node) or the timeout passes.
  void wait(MPI_Request& request, int peer, const char* what) {
    const Clock::time_point start = Clock::now();
    Clock::time_point next_check = start + kLivenessPeriod;
    for (;;) {
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), peer, what);
      if (done) return;
      const Clock::time_point now = Clock::now();
      if (now >= next_check) {
        next_check = now + kLivenessPeriod;
        const bool visible = static_cast<size_t>(peer) < peers_.size() && peers_[static_cast<size_t>(peer)].visible;
        if (visible && process_ended(peers_[static_cast<size_t>(peer)].pid))
          throw CommunicatorError(fmt::format("{} has ended (killed or crashed) while rank {} waited to {} it",
                                              describe(peer), rank_, what));
        if (now - start > timeout_)
          throw CommunicatorError(
              fmt::format("{} sent nothing for {:.0f} s while rank {} waited to {} it "
                          "(--rank-timeout): it hangs, or its node is unreachable",
                          describe(peer), std::chrono::duration<double>(now - start).count(), rank_, what));
      }
      if (now - start < kYieldFor)
        sched_yield();
      else
        std::this_thread::sleep_for(kSleep);
    }
  }

  /// Every rank's node, process view and pid, to every rank (through rank 0).
  void trade_peers() {
    std::string table;
    const std::string mine = fmt::format("{}\n{}\n{}\n", host_, process_view(), ::getpid());
    if (rank_ == 0) {
      table = mine;
      for (int r = 1; r < size_; ++r) table += receive_text(*this, r);
      for (int r = 1; r < size_; ++r) send_text(*this, r, table);
    } else {
      send_text(*this, 0, mine);
      table = receive_text(*this, 0);
    }
    std::istringstream lines(table);
    const std::string view = process_view();
    for (int r = 0; r < size_; ++r) {
      Peer peer;
      std::string their_view, pid;
      std::getline(lines, peer.host);
      std::getline(lines, their_view);
      std::getline(lines, pid);
      peer.pid = std::atoi(pid.c_str());
      peer.visible = peer.host == host_ && their_view == view && !view.empty();
      peers_.push_back(peer);
    }
  }

  /// Which processes this one can see by pid: the kernel's boot and the pid
  /// namespace. Two ranks with the same view see each other's pids; a node
  /// name alone could be shared by two machines or two containers.
  static std::string process_view() {
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    std::string boot_id;
    std::getline(boot, boot_id);
    std::error_code ec;
    const std::string pid_namespace = std::filesystem::read_symlink("/proc/self/ns/pid", ec).string();
    if (boot_id.empty() || ec) return "";
    return boot_id + " " + pid_namespace;
  }

  int rank_ = 0;
  int size_ = 1;
  std::chrono::duration<double> timeout_;
  std::string host_;
  std::vector<Peer> peers_;  ///< empty until trade_peers has run
};

}  // namespace

std::unique_ptr<Communicator> open_mpi_world(double timeout_s) { return std::make_unique<MpiWorld>(timeout_s); }

}  // namespace quire::distributed

#pragma once
// A Communicator for tests: the ranks of one "run" are threads of the test
// process, and a message is a copy in the receiver's mailbox. It follows the
// contract of communicator.h (messages between two ranks in order, a
// receive of the wrong size or past the timeout an error), so the code that
// runs over MPI can be tested where no MPI is installed.

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "quire/distributed/communicator.h"

namespace quire::distributed {

/// The mailboxes shared by the ranks of one threaded run.
class ThreadWorld {
 public:
  explicit ThreadWorld(int size, std::chrono::milliseconds timeout = std::chrono::seconds(20))
      : size_(size), timeout_(timeout) {}

  int size() const { return size_; }

  /// Rank `rank`'s endpoint.
  std::unique_ptr<Communicator> endpoint(int rank);

  /// Runs `body(rank's communicator)` on one thread per rank and joins them;
  /// each rank's exception (or none) in rank order.
  template <typename Body>
  std::vector<std::exception_ptr> run(Body body) {
    std::vector<std::exception_ptr> errors(static_cast<size_t>(size_));
    std::vector<std::thread> threads;
    for (int r = 0; r < size_; ++r)
      threads.emplace_back([this, r, &errors, &body] {
        try {
          std::unique_ptr<Communicator> comm = endpoint(r);
          body(*comm);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
        }
      });
    for (std::thread& t : threads) t.join();
    return errors;
  }

 private:
  friend class ThreadEndpoint;
  int size_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<std::pair<int, int>, std::deque<std::vector<std::byte>>> mail_;  ///< by (from, to), oldest first
};

class ThreadEndpoint final : public Communicator {
 public:
  ThreadEndpoint(ThreadWorld& world, int rank) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return world_.size_; }
  void send(int to, std::span<const std::byte> bytes) override {
    {
      std::lock_guard lock(world_.mutex_);
      world_.mail_[{rank_, to}].emplace_back(bytes.begin(), bytes.end());
    }
    world_.arrived_.notify_all();
  }
  void receive(int from, std::span<std::byte> bytes) override {
    std::unique_lock lock(world_.mutex_);
    auto& box = world_.mail_[{from, rank_}];
    if (!world_.arrived_.wait_for(lock, world_.timeout_, [&] { return !box.empty(); }))
      throw CommunicatorError(
          fmt::format("{} sent nothing while rank {} waited to receive from it", describe(from), rank_));
    std::vector<std::byte> message = std::move(box.front());
    box.pop_front();
    if (message.size() != bytes.size())
      throw CommunicatorError(
          fmt::format("{} sent {} bytes, rank {} expected {}", describe(from), message.size(), rank_, bytes.size()));
    if (!message.empty()) std::memcpy(bytes.data(), message.data(), message.size());
  }
  [[noreturn]] void abort(int status) override {
    throw CommunicatorError(fmt::format("rank {} aborted the run with status {}", rank_, status));
  }
  std::string describe(int rank) const override { return fmt::format("rank {} (thread)", rank); }

 private:
  ThreadWorld& world_;
  int rank_;
};

inline std::unique_ptr<Communicator> ThreadWorld::endpoint(int rank) {
  return std::make_unique<ThreadEndpoint>(*this, rank);
}

}  // namespace quire::distributed

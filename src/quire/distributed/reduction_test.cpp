#include "quire/distributed/reduction.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "quire/distributed/handshake.h"
#include "quire/distributed/thread_world_testing.h"

namespace quire::distributed {
namespace {

/// Shard buffers whose sum depends on its order: magnitudes spread over many
/// binades, so that (a + b) + c and a + (b + c) round differently.
std::vector<ReductionBuffer> shard_buffers(int n, size_t wide, size_t narrow, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-30, 30);
  std::vector<ReductionBuffer> shards(static_cast<size_t>(n));
  for (ReductionBuffer& b : shards) {
    for (size_t i = 0; i < wide; ++i) b.wide.push_back(std::ldexp(mantissa(rng), exponent(rng)));
    for (size_t i = 0; i < narrow; ++i)
      b.narrow.push_back(static_cast<float>(std::ldexp(mantissa(rng), exponent(rng))));
  }
  return shards;
}

bool same_bits(const ReductionBuffer& a, const ReductionBuffer& b) {
  return a.wide.size() == b.wide.size() && a.narrow.size() == b.narrow.size() &&
         std::memcmp(a.wide.data(), b.wide.data(), a.wide.size() * sizeof(double)) == 0 &&
         std::memcmp(a.narrow.data(), b.narrow.data(), a.narrow.size() * sizeof(float)) == 0;
}

TEST(ReductionTree, IsPairwiseByStrideInShardOrder) {
  EXPECT_TRUE(reduction_tree(1).empty());
  EXPECT_EQ(reduction_tree(2), (std::vector<TreeEdge>{{0, 1}}));
  EXPECT_EQ(reduction_tree(3), (std::vector<TreeEdge>{{0, 1}, {0, 2}}));
  EXPECT_EQ(reduction_tree(4), (std::vector<TreeEdge>{{0, 1}, {2, 3}, {0, 2}}));
  EXPECT_EQ(reduction_tree(5), (std::vector<TreeEdge>{{0, 1}, {2, 3}, {0, 2}, {0, 4}}));
  // Every shard but 0 sends its partial sum exactly once.
  for (int n = 1; n <= 33; ++n) {
    std::vector<int> sent(static_cast<size_t>(n));
    for (const TreeEdge& e : reduction_tree(n)) ++sent[static_cast<size_t>(e.from)];
    for (int r = 0; r < n; ++r) EXPECT_EQ(sent[static_cast<size_t>(r)], r == 0 ? 0 : 1) << "n = " << n << ", r = " << r;
  }
}

TEST(ReductionTree, SumsInProcessInTheTreesOrder) {
  std::vector<ReductionBuffer> shards = shard_buffers(3, 64, 64, 1);
  const std::vector<ReductionBuffer> copy = shards;
  sum_in_process(shards);
  for (size_t i = 0; i < 64; ++i) {
    // (g0 + g1) + g2, each addition rounded in the part's type.
    const double wide = (copy[0].wide[i] + copy[1].wide[i]) + copy[2].wide[i];
    const float narrow = (copy[0].narrow[i] + copy[1].narrow[i]) + copy[2].narrow[i];
    EXPECT_EQ(std::memcmp(&shards[0].wide[i], &wide, sizeof wide), 0) << i;
    EXPECT_EQ(std::memcmp(&shards[0].narrow[i], &narrow, sizeof narrow), 0) << i;
  }
  // The order shows in the bits: some element differs from g0 + (g1 + g2).
  bool differs = false;
  for (size_t i = 0; i < 64; ++i) differs |= shards[0].wide[i] != copy[0].wide[i] + (copy[1].wide[i] + copy[2].wide[i]);
  EXPECT_TRUE(differs) << "the test data cannot tell one order from another";
}

TEST(ReductionTree, RanksSumToTheBitsOfOneProcessOnEveryRank) {
  for (int n = 2; n <= 7; ++n) {
    const std::vector<ReductionBuffer> shards = shard_buffers(n, 300, 500, static_cast<uint32_t>(n));
    std::vector<ReductionBuffer> local = shards;
    sum_in_process(local);
    std::vector<ReductionBuffer> across = shards;
    ThreadWorld world(n);
    const std::vector<std::exception_ptr> errors =
        world.run([&](Communicator& comm) { sum_across_ranks(comm, across[static_cast<size_t>(comm.rank())]); });
    for (int r = 0; r < n; ++r) {
      EXPECT_FALSE(errors[static_cast<size_t>(r)]) << "rank " << r << " of " << n;
      EXPECT_TRUE(same_bits(across[static_cast<size_t>(r)], local[0])) << "rank " << r << " of " << n;
    }
  }
}

TEST(ReductionTree, AddingBuffersOfOtherSizesIsAnInternalError) {
  ReductionBuffer a{{1.0, 2.0}, {}};
  const ReductionBuffer b{{1.0}, {}};
  EXPECT_THROW(add_into(a, b), std::logic_error);
}

TEST(Handshake, RanksThatAgreeStart) {
  ThreadWorld world(3);
  const std::vector<std::exception_ptr> errors = world.run([](Communicator& comm) {
    agree(comm, {{"program", "sha256 abc"}, {"ranks", comm.size()}});
  });
  for (const std::exception_ptr& e : errors) EXPECT_FALSE(e);
}

TEST(Handshake, ARankThatDiffersIsRefusedOnEveryRankNamingItAndTheField) {
  ThreadWorld world(3);
  const std::vector<std::exception_ptr> errors = world.run([](Communicator& comm) {
    nlohmann::json fields = {{"program", "sha256 abc"}, {"seed", 0}};
    if (comm.rank() == 2) fields["program"] = "sha256 def";
    if (comm.rank() == 1) fields.erase("seed");
    agree(comm, fields);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(errors[static_cast<size_t>(r)]) << "rank " << r << " started";
    try {
      std::rethrow_exception(errors[static_cast<size_t>(r)]);
    } catch (const HandshakeError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("the 3 ranks of this run are not running the same thing"), std::string::npos) << message;
      EXPECT_NE(message.find("program: rank 2 (thread) has sha256 def, rank 0 has sha256 abc"), std::string::npos)
          << message;
      EXPECT_NE(message.find("seed: rank 1 (thread) has no seed, rank 0 has 0"), std::string::npos) << message;
    }
  }
}

TEST(ThreadWorld, AMessageOfTheWrongSizeIsAnError) {
  ThreadWorld world(2);
  const std::vector<std::exception_ptr> errors = world.run([](Communicator& comm) {
    double x = 1;
    const char text[] = "hello";
    if (comm.rank() == 0)
      comm.send(1, std::as_bytes(std::span(text, 5)));
    else
      comm.receive(0, std::as_writable_bytes(std::span(&x, 1)));
  });
  EXPECT_FALSE(errors[0]);
  EXPECT_TRUE(errors[1]);
}

}  // namespace
}  // namespace quire::distributed

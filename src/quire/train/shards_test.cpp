#include "quire/train/shards.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <sstream>

#include "quire/distributed/thread_world_testing.h"
#include "quire/elab/elaborator.h"
#include "quire/io/atomic_file.h"
#include "quire/support/testing.h"
#include "quire/train/metrics.h"
#include "quire/train/trainer.h"

namespace quire::train {
namespace {

namespace fs = std::filesystem;
using quire::testing::ScratchDir;
using runtime::FloatType;

const std::string kTutorial = std::string(QUIRE_SOURCE_DIR) + "/examples/tutorial/07_train.qr";

TEST(Shards, ABatchSplitsIntoContiguousRowsTheFirstOnesLonger) {
  EXPECT_EQ(split_rows(8, 1), (std::vector<RowRange>{{0, 8}}));
  EXPECT_EQ(split_rows(8, 2), (std::vector<RowRange>{{0, 4}, {4, 8}}));
  EXPECT_EQ(split_rows(8, 3), (std::vector<RowRange>{{0, 3}, {3, 6}, {6, 8}}));
  EXPECT_EQ(split_rows(16, 3), (std::vector<RowRange>{{0, 6}, {6, 11}, {11, 16}}));
  EXPECT_EQ(split_rows(3, 3), (std::vector<RowRange>{{0, 1}, {1, 2}, {2, 3}}));
}

TEST(Shards, MoreShardsThanRowsAreRefusedNamingBoth) {
  try {
    split_rows(8, 9);
    FAIL() << "9 shards of 8 rows were accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("9 shards of a batch of 8 rows: every shard needs a row"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(split_rows(8, 0), DataError);
}

TEST(Shards, OneShardKeepsTheStepsKeyAndSeveralDeriveOneEach) {
  EXPECT_EQ(shard_key(7, 3, 0, 1), step_key(7, 3));
  const runtime::Key a = shard_key(7, 3, 0, 2), b = shard_key(7, 3, 1, 2);
  EXPECT_NE(a, b);
  EXPECT_NE(a, step_key(7, 3));
  EXPECT_EQ(a, runtime::derive_key(step_key(7, 3), "shard:0"));
}

TEST(Shards, ATermIsTheWeightedGradientInTheMasterTypeThenTheLoss) {
  interp::ParamMap g;
  g["a"] = runtime::Tensor::real({2}, 0.0);
  g["a"].reals[0] = 1.0 / 3.0;
  g["a"].reals[1] = -2.0;
  g["b"] = runtime::Tensor::scalar(0.1);
  const double w = 3.0 / 8.0;
  const distributed::ReductionBuffer f32 = shard_term(g, 0.5, w, FloatType::F32);
  ASSERT_EQ(f32.narrow.size(), 3u);
  ASSERT_EQ(f32.wide.size(), 1u);
  EXPECT_EQ(f32.narrow[0], static_cast<float>(w * (1.0 / 3.0)));
  EXPECT_EQ(f32.narrow[2], static_cast<float>(w * 0.1));
  EXPECT_EQ(summed_loss(f32), w * 0.5);
  const interp::ParamMap back = summed_gradient(f32, g, FloatType::F32);
  EXPECT_EQ(back.at("a").shape, g.at("a").shape);
  EXPECT_TRUE(back.at("a").reals.holds_narrow());
  EXPECT_EQ(back.at("a").reals[1], -0.75);
  EXPECT_EQ(back.at("b").reals[0], static_cast<double>(static_cast<float>(w * 0.1)));

  const distributed::ReductionBuffer f64 = shard_term(g, 0.5, w, FloatType::F64);
  ASSERT_EQ(f64.wide.size(), 4u);
  EXPECT_TRUE(f64.narrow.empty());
  EXPECT_EQ(f64.wide[0], w * (1.0 / 3.0));
  EXPECT_EQ(summed_gradient(f64, g, FloatType::F64).at("b").reals[0], w * 0.1);
}

std::unique_ptr<elab::Program> load(const std::string& path) {
  DiagnosticSink sink;
  auto prog = elab::elaborate(path, sink);
  EXPECT_FALSE(sink.has_errors()) << sink.render(prog->sources);
  return prog;
}

/// The tutorial's first `steps` steps under f32, `shards` shards in this process.
struct ShardedRun {
  TrainOutcome outcome;
  std::string output;
  std::string params;  ///< the --params-out file's bytes
};

ShardedRun train_tutorial(const ScratchDir& dir, const std::string& name, int shards, int64_t steps,
                          bool resume = false) {
  auto prog = load(kTutorial);
  TrainOptions o;
  o.precision = "f32";
  o.run_dir = dir.file(name);
  o.params_out = dir.file(name + ".safetensors");
  o.shards = shards;
  o.max_steps = steps;
  o.resume = resume;
  std::ostringstream out;
  ShardedRun r;
  r.outcome = train(*prog, o, out, /*tty=*/false);
  r.output = out.str();
  r.params = io::read_file(o.params_out);
  return r;
}

TEST(TrainerShards, ShardsTrainTheSameObjectiveRepeatablyWithOtherBits) {
  ScratchDir dir("shards");
  const ShardedRun one = train_tutorial(dir, "one", 1, 12);
  const ShardedRun three = train_tutorial(dir, "three", 3, 12);
  const ShardedRun again = train_tutorial(dir, "again", 3, 12);
  EXPECT_EQ(three.params, again.params);
  EXPECT_NE(three.params, one.params) << "3 shards summed in another order gave the bits of one batch";
  EXPECT_EQ(three.outcome.shards, 3);
  EXPECT_NE(three.output.find("3 shards of 3+3+2 rows in this process"), std::string::npos) << three.output;
  // The weighted mean of the shards' losses is the batch's loss, to rounding.
  const std::vector<StepRecord> a = read_metrics(dir.file("one/metrics.jsonl"));
  const std::vector<StepRecord> b = read_metrics(dir.file("three/metrics.jsonl"));
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  EXPECT_NEAR(a[0].loss, b[0].loss, 1e-5 * a[0].loss);
  EXPECT_NEAR(a[11].loss, b[11].loss, 1e-3 * a[11].loss);
  EXPECT_EQ(three.outcome.reduction_bytes, int64_t{4 * 92 + 8}) << "the tutorial's 92 f32 gradients and the loss";
}

TEST(TrainerShards, ResumingWithTheSameShardsGivesTheBitsOfARunNeverStopped) {
  ScratchDir dir("shards");
  const ShardedRun whole = train_tutorial(dir, "whole", 3, 14);
  train_tutorial(dir, "parts", 3, 6);
  const ShardedRun rest = train_tutorial(dir, "parts", 3, 14, /*resume=*/true);
  EXPECT_EQ(rest.outcome.start_step, 6);
  EXPECT_EQ(whole.params, rest.params);
  EXPECT_EQ(rest.output.find("note:"), std::string::npos) << rest.output;
}

TEST(TrainerShards, ResumingWithOtherShardsGoesOnSayingTheBitsDiffer) {
  ScratchDir dir("shards");
  train_tutorial(dir, "run", 2, 6);
  const ShardedRun rest = train_tutorial(dir, "run", 1, 10, /*resume=*/true);
  EXPECT_EQ(rest.outcome.start_step, 6);
  EXPECT_EQ(rest.outcome.steps_done, 10);
  EXPECT_NE(rest.output.find("was written by a run of 2 shards, this one has 1: the steps from here differ in their "
                             "bits from those of the run never stopped"),
            std::string::npos)
      << rest.output;
}

// The ranks of an MPI run, as threads exchanging messages: the trainer's
// distributed path (one shard per rank, the handshake, rank 0 alone writing)
// gives the bits of --shards N in one process.
TEST(TrainerShards, RanksGiveTheBitsOfShardsInOneProcess) {
  ScratchDir dir("shards");
  const ShardedRun local = train_tutorial(dir, "local", 3, 10);
  distributed::ThreadWorld world(3);
  std::vector<std::string> outputs(3);
  const std::vector<std::exception_ptr> errors = world.run([&](distributed::Communicator& comm) {
    auto prog = load(kTutorial);
    TrainOptions o;
    o.precision = "f32";
    o.run_dir = dir.file("ranks");
    o.params_out = dir.file("ranks.safetensors");
    o.max_steps = 10;
    o.world = &comm;
    std::ostringstream out;
    train(*prog, o, out, /*tty=*/false);
    outputs[static_cast<size_t>(comm.rank())] = out.str();
  });
  for (int r = 0; r < 3; ++r) {
    if (!errors[static_cast<size_t>(r)]) continue;
    try {
      std::rethrow_exception(errors[static_cast<size_t>(r)]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  }
  EXPECT_EQ(io::read_file(dir.file("ranks.safetensors")), local.params);
  EXPECT_NE(outputs[0].find("3 shards of 3+3+2 rows on 3 ranks (one each)"), std::string::npos) << outputs[0];
  EXPECT_EQ(outputs[1], "");
  EXPECT_EQ(outputs[2], "");
  // Rank 0 alone wrote the metrics, with every step.
  EXPECT_EQ(read_metrics(dir.file("ranks/metrics.jsonl")).size(), 10u);
}

TEST(TrainerShards, ShardsOtherThanTheRankCountAreRefused) {
  ScratchDir dir("shards");
  distributed::ThreadWorld world(2);
  const std::vector<std::exception_ptr> errors = world.run([&](distributed::Communicator& comm) {
    auto prog = load(kTutorial);
    TrainOptions o;
    o.run_dir = dir.file("run");
    o.shards = 3;
    o.world = &comm;
    std::ostringstream out;
    train(*prog, o, out, /*tty=*/false);
  });
  for (const std::exception_ptr& e : errors) {
    ASSERT_TRUE(e);
    try {
      std::rethrow_exception(e);
    } catch (const TrainError& t) {
      EXPECT_NE(std::string(t.what()).find("--shards 3 on 2 ranks"), std::string::npos) << t.what();
    }
  }
}

TEST(TrainerShards, RanksThatDisagreeAreRefusedBeforeAnyStep) {
  ScratchDir dir("shards");
  distributed::ThreadWorld world(2);
  const std::vector<std::exception_ptr> errors = world.run([&](distributed::Communicator& comm) {
    auto prog = load(kTutorial);
    TrainOptions o;
    o.run_dir = dir.file("run");
    o.seed = comm.rank() == 1 ? 5 : 0;
    o.world = &comm;
    std::ostringstream out;
    train(*prog, o, out, /*tty=*/false);
  });
  for (const std::exception_ptr& e : errors) {
    ASSERT_TRUE(e);
    try {
      std::rethrow_exception(e);
    } catch (const TrainError& t) {
      EXPECT_NE(std::string(t.what()).find("seed: rank 1 (thread) has 5, rank 0 has 0"), std::string::npos) << t.what();
    }
  }
  EXPECT_FALSE(fs::exists(dir.file("run/metrics.jsonl")));
}

}  // namespace
}  // namespace quire::train

// The ranks of an MPI run on an .npy, which each rank reads by rows
// (data.h, READING): the handshake's digest of the data tells files apart
// without reading them whole, and the trainer's ranks give the bits of
// --shards N in one process.

#include "quire/train/ranks.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "quire/distributed/thread_world_testing.h"
#include "quire/elab/elaborator.h"
#include "quire/io/atomic_file.h"
#include "quire/io/npy.h"
#include "quire/support/sha256.h"
#include "quire/support/testing.h"

namespace quire::train {
namespace {

namespace fs = std::filesystem;
using quire::testing::ScratchDir;
using runtime::Tensor;

/// An f8 array [rows, 4] whose element i is i / 8 + `shift`.
Tensor features(int64_t rows, double shift = 0) {
  Tensor t = Tensor::real({rows, 4});
  for (size_t i = 0; i < t.reals.size(); ++i) t.reals[i] = static_cast<double>(i) / 8 + shift;
  return t;
}

/// describe_run's "data" field for the data file `path`.
std::string data_field(const std::string& path) {
  const elab::Program prog;
  RunDescription run;
  run.data_path = path;
  return describe_run(prog, TrainOptions{}, run)["data"].get<std::string>();
}

TEST(RankHandshake, DigestsAnNpyByItsHeaderAndASpreadSampleOfRows) {
  ScratchDir dir("ranks");
  const std::string a = dir.file("a.npy"), b = dir.file("b.npy");
  io::write_npy(a, features(5000));
  io::write_npy(b, features(5000));
  const std::string field = data_field(a);
  EXPECT_EQ(field, data_field(b));
  EXPECT_NE(field.find("of its header and 1024 of its 5000 rows"), std::string::npos) << field;
  // Sampled rows: ⌊k·4999/1023⌋ for k = 0 … 1023, the first and the last
  // among them; row 5 (⌊1·4999/1023⌋ = 4, ⌊2·4999/1023⌋ = 9) is not.
  for (int64_t row : {int64_t{0}, int64_t{4}, int64_t{2501}, int64_t{4999}}) {
    Tensor t = features(5000);
    t.reals[static_cast<size_t>(4 * row + 3)] += 1;
    io::write_npy(b, t);
    EXPECT_NE(data_field(b), field) << "row " << row;
  }
  // What a sample cannot see: a difference in a row outside it.
  Tensor t = features(5000);
  t.reals[4 * 5] += 1;
  io::write_npy(b, t);
  EXPECT_EQ(data_field(b), field);
  // Another shape or dtype is another header.
  io::write_npy(b, features(5000), io::StoreType::F32);
  EXPECT_NE(data_field(b), field);
  io::write_npy(b, features(4999));
  EXPECT_NE(data_field(b), field);
}

TEST(RankHandshake, DigestsAnyOtherFileWhole) {
  ScratchDir dir("ranks");
  const std::string npz = dir.file("pairs.npz");
  io::write_npz(npz, {{"0", features(3)}});
  const std::string bytes = io::read_file(npz);
  EXPECT_EQ(data_field(npz), fmt::format("{} bytes, sha256 {}", bytes.size(), support::sha256_hex(bytes)));
  // A Fortran-ordered array is read whole by its ranks: digested whole.
  std::string fortran = io::encode_npy(features(3), io::StoreType::F64, "x.npy");
  fortran.replace(fortran.find("False"), 5, "True ");
  const std::string path = dir.file("fortran.npy");
  io::write_file_atomically(path, fortran);
  EXPECT_EQ(data_field(path), fmt::format("{} bytes, sha256 {}", fortran.size(), support::sha256_hex(fortran)));
}

/// The tutorial's run on an .npy of its inputs alone, the targets computed,
/// in the folder `folder` (a copy of the tutorial's with data/x.npy).
std::string npy_tutorial(const fs::path& folder, const Tensor& x) {
  fs::copy(std::string(QUIRE_SOURCE_DIR) + "/examples/tutorial", folder,
           fs::copy_options::recursive | fs::copy_options::skip_existing);
  io::write_npy((folder / "data" / "x.npy").string(), x);
  const std::string program = (folder / "07_train_npy.qr").string();
  io::write_file_atomically(program, R"(import "06_tower.qr" as t
dim B

fn loss(θ : params t.Tower, x : ℝ[batch: B, model: 4]) -> ℝ[] =
  mean((t.Tower.apply(θ, x) - (2.0 * x + 1.0))^2)

optimizer adamw {
  lr       : f64 = 0.1
  schedule : cosine(warmup = 20)
}

training run {
  model     = t.Tower
  objective = loss
  optimizer = adamw
  data      = stream "data/x.npy" |> shuffle(seed = 3) |> batch(B = 8)
  epochs    : nat = 2
}
)");
  return program;
}

std::unique_ptr<elab::Program> load(const std::string& path) {
  DiagnosticSink sink;
  auto prog = elab::elaborate(path, sink);
  EXPECT_FALSE(sink.has_errors()) << sink.render(prog->sources);
  return prog;
}

/// Each rank's error (its message), "" where it had none.
std::vector<std::string> messages(const std::vector<std::exception_ptr>& errors) {
  std::vector<std::string> out;
  for (const std::exception_ptr& e : errors) {
    out.emplace_back();
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      out.back() = x.what();
    }
  }
  return out;
}

TEST(RankData, RanksReadingTheirRowsGiveTheBitsOfShardsInOneProcess) {
  ScratchDir dir("ranks");
  const std::string program = npy_tutorial(dir.path / "run", features(100));
  auto prog = load(program);
  TrainOptions local;
  local.precision = "f32";
  local.shards = 3;
  local.run_dir = dir.file("local");
  local.params_out = dir.file("local.safetensors");
  std::ostringstream out;
  train(*prog, local, out, /*tty=*/false);

  distributed::ThreadWorld world(3);
  const std::vector<std::string> errors = messages(world.run([&](distributed::Communicator& comm) {
    auto mine = load(program);
    TrainOptions o = local;
    o.shards = 1;
    o.run_dir = dir.file("ranks");
    o.params_out = dir.file("ranks.safetensors");
    o.world = &comm;
    std::ostringstream ignored;
    train(*mine, o, ignored, /*tty=*/false);
  }));
  EXPECT_EQ(errors, std::vector<std::string>(3));
  EXPECT_EQ(io::read_file(dir.file("ranks.safetensors")), io::read_file(dir.file("local.safetensors")));
}

TEST(RankData, RanksWhoseDataDifferInASampledRowAreRefused) {
  ScratchDir dir("ranks");
  Tensor other = features(100);
  other.reals[4 * 99] = -1;  // the last row: always in the sample
  const std::string programs[2] = {npy_tutorial(dir.path / "a", features(100)), npy_tutorial(dir.path / "b", other)};
  distributed::ThreadWorld world(2);
  const std::vector<std::string> errors = messages(world.run([&](distributed::Communicator& comm) {
    auto prog = load(programs[comm.rank()]);
    TrainOptions o;
    o.run_dir = dir.file("run");
    o.world = &comm;
    std::ostringstream out;
    train(*prog, o, out, /*tty=*/false);
  }));
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("are not running the same thing"), std::string::npos) << e;
    EXPECT_NE(e.find("  data: rank 1 (thread) has "), std::string::npos) << e;
    EXPECT_EQ(e.find("  program:"), std::string::npos) << e;
  }
  EXPECT_FALSE(fs::exists(dir.file("run/metrics.jsonl")));
}

}  // namespace
}  // namespace quire::train

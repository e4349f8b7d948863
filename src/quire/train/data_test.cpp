#include "quire/train/data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "quire/elab/elaborator.h"
#include "quire/io/npy.h"
#include "quire/support/testing.h"

namespace quire::train {

namespace {

namespace fs = std::filesystem;
using runtime::ElemKind;
using runtime::Tensor;

struct ScratchDir : quire::testing::ScratchDir {
  ScratchDir() : quire::testing::ScratchDir("data") {}
};

elab::Axis axis(const std::string& name, elab::Size size) { return {name, std::move(size)}; }

elab::Type tensor(elab::Elem elem, std::vector<elab::Axis> axes) {
  elab::TensorType t;
  t.elem = elem;
  t.axes = std::move(axes);
  return elab::Type::make_tensor(t);
}

/// (ℝ[batch: B, model: 4], i32[batch: B, T]): features and token ids.
elab::Type pair_type() {
  return elab::Type::make_tuple(
      {tensor(elab::Elem::Real, {axis("batch", elab::Size::symbol("B")), axis("model", elab::Size::constant(4))}),
       tensor(elab::Elem::I32, {axis("batch", elab::Size::symbol("B")), axis("", elab::Size::symbol("T"))})});
}

/// The spec of pair_type() at T = 2.
SampleSpec pair_spec() {
  elab::Program prog;
  return sample_spec(prog, pair_type(), "B", {{"T", 2}});
}

/// A real array whose value at flat index i is base + i.
Tensor reals(runtime::Shape shape, double base = 0) {
  Tensor t = Tensor::real(std::move(shape));
  for (size_t i = 0; i < t.reals.size(); ++i) t.reals[i] = base + static_cast<double>(i);
  return t;
}

Tensor ints(ElemKind kind, runtime::Shape shape, int64_t base = 0) {
  Tensor t = Tensor::integer(kind, std::move(shape));
  for (size_t i = 0; i < t.ints.size(); ++i) t.ints[i] = base + static_cast<int64_t>(i);
  return t;
}

/// The message of the error that opening `path` against `spec` throws ("" if none).
std::string open_error(const std::string& path, const SampleSpec& spec) {
  try {
    Dataset::open(path, spec);
  } catch (const io::IoError& e) {
    EXPECT_EQ(e.path, path);
    return e.what();
  }
  return "";
}

std::string spec_error(const elab::Type& type, const std::map<std::string, int64_t>& dims = {}) {
  elab::Program prog;
  try {
    sample_spec(prog, type, "B", dims);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

/// A dataset of n samples whose element 0 is the scalar sample index (as i64).
Dataset indexed(int64_t n) {
  SampleSpec spec;
  spec.elements.push_back({ElemKind::I64, {}, "i64[]"});
  return Dataset::from_arrays("memory", spec, {ints(ElemKind::I64, {n})});
}

/// Every batch of a loader until it ends, each as its sample indices.
std::vector<std::vector<int64_t>> drain(Loader& loader, std::vector<DataPosition>* positions = nullptr) {
  std::vector<std::vector<int64_t>> batches;
  while (auto batch = loader.next()) {
    batches.push_back(batch->at(0).ints);
    if (positions) positions->push_back(loader.position());
  }
  return batches;
}

}  // namespace

TEST(DataSpec, FromATupleType) {
  const SampleSpec spec = pair_spec();
  EXPECT_TRUE(spec.tuple);
  ASSERT_EQ(spec.elements.size(), 2u);
  EXPECT_EQ(spec.elements[0].kind, ElemKind::Real);
  EXPECT_EQ(spec.elements[0].shape, runtime::Shape({4}));
  EXPECT_EQ(spec.elements[0].description, "ℝ[model: 4]");
  EXPECT_EQ(spec.elements[1].kind, ElemKind::I32);
  EXPECT_EQ(spec.elements[1].shape, runtime::Shape({2}));
  EXPECT_EQ(spec.elements[1].description, "i32[T]");

  elab::Program prog;
  const SampleSpec single =
      sample_spec(prog, tensor(elab::Elem::Bool, {axis("", elab::Size::symbol("B"))}), "B", {});
  EXPECT_FALSE(single.tuple);
  ASSERT_EQ(single.elements.size(), 1u);
  EXPECT_EQ(single.elements[0].kind, ElemKind::Bool);
  EXPECT_EQ(single.elements[0].shape, runtime::Shape{});
}

TEST(DataSpec, RefusesTypesWithoutTheBatchAxisFirst) {
  const auto B = elab::Size::symbol("B");
  EXPECT_EQ(spec_error(tensor(elab::Elem::Real, {axis("model", elab::Size::constant(4)), axis("batch", B)})),
            "the batch argument, `ℝ[model: 4, batch: B]`, must have the batch dim `B` as its first axis (samples are "
            "stacked along it)");
  EXPECT_EQ(spec_error(elab::Type::make_tuple({tensor(elab::Elem::Real, {axis("", B)}), elab::Type::make_key()})),
            "element 1 of the batch argument, `key`, is not a tensor: the batch argument is a tensor or a tuple of "
            "tensors, each with the batch dim `B` as its first axis");
  EXPECT_EQ(spec_error(tensor(elab::Elem::Real, {axis("", B), axis("", elab::Size::symbol("T"))})),
            "the batch argument, `ℝ[B, T]`: its size T needs the dimension T");
  elab::TensorType rest;
  rest.rest = true;
  rest.axes = {axis("", B)};
  EXPECT_EQ(spec_error(elab::Type::make_tensor(rest)),
            "the batch argument, `ℝ[..., B]`, has `...` axes: a sample needs a known shape");
}

TEST(DataFile, AcceptsAnNpzWithArraysNamedByPosition) {
  ScratchDir dir;
  const SampleSpec spec = pair_spec();
  // Reals stored as f4 are read exactly; an i8 array serves an i32 element when it fits.
  const std::string path = dir.file("pairs.npz");
  io::write_npz(path, {{"1", ints(ElemKind::I64, {5, 2}, 100)}, {"0", reals({5, 4}, 0.5)}}, io::StoreType::F32);
  const Dataset data = Dataset::open(path, spec);
  EXPECT_EQ(data.samples(), 5);
  EXPECT_EQ(data.arrays()[1].kind, ElemKind::I32);
  const std::vector<Tensor> batch = data.gather({3, 0});
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].shape, runtime::Shape({2, 4}));
  EXPECT_EQ(batch[0].reals, std::vector<double>({12.5, 13.5, 14.5, 15.5, 0.5, 1.5, 2.5, 3.5}));
  EXPECT_EQ(batch[1].kind, ElemKind::I32);
  EXPECT_EQ(batch[1].shape, runtime::Shape({2, 2}));
  EXPECT_EQ(batch[1].ints, std::vector<int64_t>({106, 107, 100, 101}));

  // Samples in order share the array's elements instead of copying them;
  // the numbers are the same either way, and an index out of range is
  // refused before any batch is made.
  const std::vector<Tensor> in_order = data.gather({1, 2});
  EXPECT_EQ(in_order[0].shape, runtime::Shape({2, 4}));
  EXPECT_EQ(in_order[0].reals, std::vector<double>({4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, 11.5}));
  EXPECT_TRUE(in_order[0].reals.shared()) << "a window onto the array";
  EXPECT_FALSE(batch[0].reals.shared()) << "out of order: a copy";
  EXPECT_EQ(in_order[1].ints, std::vector<int64_t>({102, 103, 104, 105}));
  EXPECT_THROW((void)data.gather({3, 4, 5}), DataError);

  // What np.savez(path, x, y) writes: arr_0, arr_1.
  const std::string numpy_names = dir.file("positional.npz");
  io::write_npz(numpy_names, {{"arr_0", reals({3, 4})}, {"arr_1", ints(ElemKind::I32, {3, 2})}});
  EXPECT_EQ(Dataset::open(numpy_names, spec).samples(), 3);
}

TEST(DataFile, AcceptsAnNpyForASingleElement) {
  ScratchDir dir;
  SampleSpec spec;
  spec.elements.push_back({ElemKind::Real, {2}, "ℝ[2]"});
  const std::string path = dir.file("x.npy");
  io::write_npy(path, reals({3, 2}), io::StoreType::F16);
  const Dataset data = Dataset::open(path, spec);
  EXPECT_EQ(data.samples(), 3);
  EXPECT_EQ(data.gather({2})[0].reals, std::vector<double>({4, 5}));
  EXPECT_EQ(open_error(path, pair_spec()),
            path + ": an .npy file holds one array, but a sample has 2 elements: give an .npz with arrays 0, 1");
}

TEST(DataFile, OpensTheTutorialsPairs) {
  DiagnosticSink sink;
  const std::string source = std::string(QUIRE_SOURCE_DIR) + "/examples/tutorial/07_train.qr";
  auto prog = elab::elaborate(source, sink);
  ASSERT_FALSE(sink.has_errors()) << sink.render(prog->sources);
  const elab::TrainingInfo* run = prog->training();
  ASSERT_NE(run, nullptr);
  const SampleSpec spec = sample_spec(*prog, prog->functions[run->objective].args[1].type, run->batch_dim, {});
  ASSERT_EQ(spec.elements.size(), 2u);
  EXPECT_EQ(spec.elements[1].description, "ℝ[model: 4]");
  const Dataset data =
      Dataset::open(std::string(QUIRE_SOURCE_DIR) + "/examples/tutorial/" + run->data.front().path, spec);
  EXPECT_EQ(data.samples(), 1024);

  const LoaderOptions options = loader_options(*run);
  EXPECT_EQ(options.shuffle_seed, std::optional<uint64_t>(3));
  EXPECT_EQ(options.batch_size, 8);
  EXPECT_EQ(options.epochs, 10);
  Loader loader(data, options);
  EXPECT_EQ(loader.steps_per_epoch(), 128);
  EXPECT_EQ(loader.total_steps(), 1280);
  const auto batch = loader.next();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->at(0).shape, runtime::Shape({8, 4}));
  EXPECT_EQ(batch->at(1).shape, runtime::Shape({8, 4}));
}

TEST(DataFile, RefusesAWrongShape) {
  ScratchDir dir;
  const std::string path = dir.file("pairs.npz");
  io::write_npz(path, {{"0", reals({6, 3})}, {"1", ints(ElemKind::I32, {6, 2})}});
  EXPECT_EQ(open_error(path, pair_spec()),
            path + ": array `0`: expected shape [N, 4] for N samples of ℝ[model: 4], found [6, 3]");
  io::write_npz(path, {{"0", reals({4})}, {"1", ints(ElemKind::I32, {4, 2})}});
  EXPECT_EQ(open_error(path, pair_spec()),
            path + ": array `0`: expected shape [N, 4] for N samples of ℝ[model: 4], found [4]");
  const std::string npy = dir.file("x.npy");
  io::write_npy(npy, Tensor::scalar(1.0));
  SampleSpec scalar;
  scalar.elements.push_back({ElemKind::Real, {}, "ℝ[]"});
  EXPECT_EQ(open_error(npy, scalar), npy + ": expected shape [N] for N samples of ℝ[], found []");
}

TEST(DataFile, RefusesAWrongKind) {
  ScratchDir dir;
  const std::string path = dir.file("pairs.npz");
  io::write_npz(path, {{"0", ints(ElemKind::I64, {6, 4})}, {"1", ints(ElemKind::I32, {6, 2})}});
  EXPECT_EQ(open_error(path, pair_spec()),
            path + ": array `0`: expected real elements (f8, f4 or f2) for samples of ℝ[model: 4], found i64");
  io::write_npz(path, {{"0", reals({6, 4})}, {"1", reals({6, 2})}});
  EXPECT_EQ(open_error(path, pair_spec()),
            path + ": array `1`: expected integer elements (i4 or u1, or i8 within the range of i32) for samples of "
                   "i32[T], found real");
  io::write_npz(path, {{"0", reals({6, 4})}, {"1", ints(ElemKind::I64, {6, 2}, int64_t{1} << 31)}});
  EXPECT_EQ(open_error(path, pair_spec()),
            path + ": array `1`: holds 2147483648 (element 0), outside the range of i32 for samples of i32[T]");
}

TEST(DataFile, RefusesMismatchedSampleCounts) {
  ScratchDir dir;
  const std::string path = dir.file("pairs.npz");
  io::write_npz(path, {{"0", reals({6, 4})}, {"1", ints(ElemKind::I32, {5, 2})}});
  EXPECT_EQ(open_error(path, pair_spec()),
            path + ": array `1` has 5 samples, array `0` has 6: every array holds one row per sample");
  io::write_npz(path, {{"0", reals({0, 4})}, {"1", ints(ElemKind::I32, {0, 2})}});
  EXPECT_EQ(open_error(path, pair_spec()), path + ": holds no samples (shape [0, 4])");
}

TEST(DataFile, RefusesMissingAndExtraArrays) {
  ScratchDir dir;
  const std::string path = dir.file("pairs.npz");
  io::write_npz(path, {{"0", reals({6, 4})}, {"y", ints(ElemKind::I32, {6, 2})}});
  EXPECT_EQ(open_error(path, pair_spec()),
            path + ": no array `1` (expected arrays 0, 1: one per element of the sample, in the order of the batch "
                   "argument)");
  io::write_npz(path, {{"0", reals({6, 4})}, {"1", ints(ElemKind::I32, {6, 2})}, {"2", reals({6})}});
  EXPECT_EQ(open_error(path, pair_spec()), path + ": array `2` is not an element of the sample (expected arrays 0, 1)");
  const std::string csv = dir.file("pairs.csv");
  EXPECT_EQ(open_error(csv, pair_spec()),
            csv + ": a data file is an .npy (one array) or an .npz (one array per element of the sample)");
}

TEST(DataShuffle, MatchesTheDocumentedPermutation) {
  // From an independent Python transcription of the formula in data.h
  // (Philox from Random123's round function, FNV-1a, derive_key).
  EXPECT_EQ(shuffle_permutation(3, 0, 10), std::vector<int64_t>({4, 8, 5, 7, 0, 6, 3, 9, 1, 2}));
  EXPECT_EQ(shuffle_permutation(3, 1, 10), std::vector<int64_t>({8, 2, 3, 6, 5, 0, 9, 4, 1, 7}));
  EXPECT_EQ(shuffle_permutation(0, 0, 16),
            std::vector<int64_t>({13, 7, 9, 15, 3, 6, 8, 12, 11, 10, 5, 2, 14, 4, 0, 1}));
  EXPECT_EQ(shuffle_permutation((uint64_t{1} << 40) + 7, 5, 12),
            std::vector<int64_t>({10, 8, 1, 6, 11, 7, 2, 9, 4, 5, 3, 0}));
}

TEST(DataShuffle, IsADeterministicPermutationPerSeedAndEpoch) {
  const int64_t n = 1000;
  std::vector<int64_t> identity(n);
  std::iota(identity.begin(), identity.end(), int64_t{0});
  const std::vector<int64_t> first = shuffle_permutation(7, 0, n);
  EXPECT_EQ(first, shuffle_permutation(7, 0, n));
  EXPECT_NE(first, shuffle_permutation(7, 1, n));
  EXPECT_NE(first, shuffle_permutation(8, 0, n));
  EXPECT_NE(first, identity);
  for (int64_t epoch : {0, 1, 2, 99}) {
    std::vector<int64_t> sorted = shuffle_permutation(7, epoch, n);
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity) << "epoch " << epoch;
  }
  EXPECT_TRUE(shuffle_permutation(7, 0, 0).empty());
  EXPECT_EQ(shuffle_permutation(7, 0, 1), std::vector<int64_t>({0}));
}

TEST(DataLoader, BatchesInOrderAndDropsTheLastPartialBatch) {
  const Dataset data = indexed(10);
  Loader loader(data, {std::nullopt, 4, 2});
  EXPECT_EQ(loader.steps_per_epoch(), 2);
  std::vector<DataPosition> positions;
  const auto batches = drain(loader, &positions);
  const std::vector<std::vector<int64_t>> expected = {{0, 1, 2, 3}, {4, 5, 6, 7}, {0, 1, 2, 3}, {4, 5, 6, 7}};
  EXPECT_EQ(batches, expected);
  const std::vector<DataPosition> expected_positions = {{0, 1, 4}, {1, 0, 8}, {1, 1, 12}, {2, 0, 16}};
  EXPECT_EQ(positions, expected_positions);
  EXPECT_FALSE(loader.next());

  // Shuffled: each batch is the next B of the epoch's permutation; 8 and 9's places are dropped.
  Loader shuffled(data, {3, 4, 2});
  const auto shuffled_batches = drain(shuffled);
  const std::vector<std::vector<int64_t>> expected_shuffled = {{4, 8, 5, 7}, {0, 6, 3, 9}, {8, 2, 3, 6}, {5, 0, 9, 4}};
  EXPECT_EQ(shuffled_batches, expected_shuffled);

  EXPECT_THROW(Loader(data, {std::nullopt, 11, 1}), DataError);
}

TEST(DataLoader, SeekResumesIdentically) {
  const Dataset data = indexed(13);
  const LoaderOptions options{42, 3, 3};
  Loader whole(data, options);
  std::vector<DataPosition> positions;
  const auto batches = drain(whole, &positions);
  ASSERT_EQ(batches.size(), 12u);  // 4 per epoch, one sample dropped each
  // Resume after 0, 1, 3 (mid-epoch), 4 (an epoch boundary), 11 and all 12 batches.
  for (size_t done : {0u, 1u, 3u, 4u, 7u, 11u, 12u}) {
    Loader resumed(data, options);
    if (done > 0) resumed.seek(positions[done - 1]);
    const auto rest = drain(resumed);
    EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(batches.begin() + done, batches.end())) << "after " << done;
  }
}

TEST(DataLoader, SeekRefusesAPositionThatDoesNotFit) {
  const Dataset data = indexed(13);
  Loader loader(data, {42, 3, 3});
  EXPECT_THROW(loader.seek({0, 4, 12}), DataError);  // batch past the epoch's 4
  EXPECT_THROW(loader.seek({3, 1, 39}), DataError);  // past the last epoch
  try {
    loader.seek({1, 2, 20});  // 18 samples would have been given with 13 samples per file
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              "memory: the data position (epoch 1, batch 2, 20 samples given) does not fit this data (13 samples: 4 "
              "batches of 3 per epoch, 3 epochs); did the file or the batch size change since the checkpoint?");
  }
  loader.seek({3, 0, 36});
  EXPECT_FALSE(loader.next());
}

TEST(DataLoader, OptionsComeFromTheRunsStages) {
  elab::TrainingInfo run;
  run.epochs = 2;
  run.batch_size = 4;
  run.data = {{"stream", "x.npy", {}}, {"shuffle", "", {{"seed", 9}}}, {"batch", "", {{"B", 4}}}};
  const LoaderOptions options = loader_options(run);
  EXPECT_EQ(options.shuffle_seed, std::optional<uint64_t>(9));
  EXPECT_EQ(options.batch_size, 4);
  EXPECT_EQ(options.epochs, 2);

  const auto error = [](const elab::TrainingInfo& r) -> std::string {
    try {
      loader_options(r);
    } catch (const DataError& e) {
      return e.what();
    }
    return "";
  };
  elab::TrainingInfo late = run;
  std::swap(late.data[1], late.data[2]);
  EXPECT_EQ(error(late), "`shuffle` must come before `batch`: it orders the samples, not the batches");
  elab::TrainingInfo unseeded = run;
  unseeded.data[1].args.clear();
  EXPECT_EQ(error(unseeded), "`shuffle` needs `seed = N`: the order must be reproducible");
  elab::TrainingInfo unbatched = run;
  unbatched.data.pop_back();
  EXPECT_EQ(error(unbatched), "the data has no `batch(B = N)` stage");
  elab::TrainingInfo plain = run;
  plain.data.erase(plain.data.begin() + 1);
  EXPECT_FALSE(loader_options(plain).shuffle_seed);
}

}  // namespace quire::train

// A Dataset that reads its rows as they are gathered (data.h, READING): what
// each rank of an MPI run opens. It must give the bits of the whole-file
// Dataset, refuse what it refuses in its words, and read no row it is not
// asked for.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "quire/io/npy.h"
#include "quire/support/testing.h"
#include "quire/train/data.h"
#include "quire/train/shards.h"

namespace quire::train {

namespace {

using runtime::ElemKind;
using runtime::Tensor;

struct ScratchDir : quire::testing::ScratchDir {
  ScratchDir() : quire::testing::ScratchDir("data-rows") {}
};

/// A sample of one element, i32[2] (token ids, say).
SampleSpec ids_spec() {
  SampleSpec spec;
  spec.elements.push_back({ElemKind::I32, {2}, "i32[2]"});
  return spec;
}

/// An i8 array of `samples` rows of 2, row r holding (r, 1000 + r).
Tensor id_rows(int64_t samples) {
  Tensor t = Tensor::integer(ElemKind::I64, {samples, 2});
  for (int64_t r = 0; r < samples; ++r) {
    t.ints[static_cast<size_t>(2 * r)] = r;
    t.ints[static_cast<size_t>(2 * r + 1)] = 1000 + r;
  }
  return t;
}

std::string open_error(const std::string& path, const SampleSpec& spec, DataReading reading) {
  try {
    Dataset::open(path, spec, reading);
  } catch (const io::IoError& e) {
    return e.what();
  }
  return "";
}

/// The samples rank `rank` of `ranks` gathers in one epoch of `loader`'s
/// options over `samples` samples: its shard's rows of each batch.
std::set<int64_t> rank_samples(const Loader& loader, int64_t samples, int rank, int ranks) {
  const RowRange mine = split_rows(loader.options().batch_size, ranks)[static_cast<size_t>(rank)];
  const std::vector<int64_t> order = loader.epoch_order(0);
  std::set<int64_t> out;
  const int64_t batch = loader.options().batch_size;
  for (int64_t b = 0; b < samples / batch; ++b)
    for (int64_t r = mine.begin; r < mine.end; ++r) out.insert(order[static_cast<size_t>(b * batch + r)]);
  return out;
}

}  // namespace

TEST(DataRows, GiveTheBitsOfTheWholeFileForEveryShard) {
  ScratchDir dir;
  const std::string path = dir.file("ids.npy");
  io::write_npy(path, id_rows(29));
  const Dataset whole = Dataset::open(path, ids_spec());
  EXPECT_FALSE(whole.reads_rows());
  const LoaderOptions options{7, 6, 3};  // shuffled, 4 batches of 6 an epoch, 3 epochs
  for (int ranks : {1, 2, 4}) {
    const std::vector<RowRange> shards = split_rows(options.batch_size, ranks);
    for (int rank = 0; rank < ranks; ++rank) {
      const Dataset rows = Dataset::open(path, ids_spec(), DataReading::Rows);
      ASSERT_TRUE(rows.reads_rows());
      EXPECT_EQ(rows.samples(), 29);
      Loader expected(whole, options), got(rows, options);
      const std::vector<RowRange> mine{shards[static_cast<size_t>(rank)]};
      while (auto want = expected.next_rows(mine)) {
        auto have = got.next_rows(mine);
        ASSERT_TRUE(have);
        ASSERT_EQ(have->at(0).at(0).kind, ElemKind::I32);
        EXPECT_EQ(have->at(0).at(0).shape, want->at(0).at(0).shape);
        EXPECT_EQ(have->at(0).at(0).ints, want->at(0).at(0).ints);
      }
      EXPECT_FALSE(got.next_rows(mine));
    }
  }
  // In file order too, where a shard's rows are one read.
  const Dataset rows = Dataset::open(path, ids_spec(), DataReading::Rows);
  Loader got(rows, {std::nullopt, 6, 1});
  EXPECT_EQ(got.next_rows({{2, 5}})->at(0).at(0).ints, std::vector<int64_t>({2, 1002, 3, 1003, 4, 1004}));
}

TEST(DataRows, ARankReadsOnlyItsShardsRows) {
  // Every row that is not rank 1's in the first epoch holds a value outside
  // i32, so reading any of them fails. Rank 1 reads its epoch without a word,
  // and exactly its rows' bytes after the header.
  ScratchDir dir;
  const std::string path = dir.file("ids.npy");
  const int64_t samples = 40;
  const LoaderOptions options{11, 8, 1};  // 5 batches of 8, shards of 3 + 3 + 2 rows
  io::write_npy(path, id_rows(samples));
  const Dataset clean = Dataset::open(path, ids_spec());
  const std::set<int64_t> mine = rank_samples(Loader(clean, options), samples, 1, 3);
  ASSERT_EQ(mine.size(), 15u);
  Tensor poisoned = id_rows(samples);
  for (int64_t r = 0; r < samples; ++r)
    if (!mine.count(r)) poisoned.ints[static_cast<size_t>(2 * r + 1)] = int64_t{1} << 40;
  io::write_npy(path, poisoned);
  EXPECT_NE(open_error(path, ids_spec(), DataReading::Whole), "");

  const Dataset rows = Dataset::open(path, ids_spec(), DataReading::Rows);
  ASSERT_TRUE(rows.reads_rows());
  const uint64_t header = rows.bytes_read();
  EXPECT_EQ(header, 128u);  // write_npy's header: 128 bytes for this shape
  Loader loader(rows, options);
  const RowRange shard = split_rows(options.batch_size, 3)[1];
  std::set<int64_t> seen;
  while (auto part = loader.next_rows({shard})) {
    const Tensor& ids = part->at(0).at(0);
    for (size_t k = 0; k < ids.ints.size(); k += 2) seen.insert(ids.ints[k]);
  }
  EXPECT_EQ(seen, mine);
  EXPECT_EQ(rows.bytes_read(), header + mine.size() * 16);  // 2 i8 values a row

  // Rank 0's first row is poisoned: named as the whole file's check names it.
  const Dataset other = Dataset::open(path, ids_spec(), DataReading::Rows);
  Loader theirs(other, options);
  const int64_t first = theirs.epoch_order(0)[0];
  try {
    theirs.next_rows({split_rows(options.batch_size, 3)[0]});
    FAIL() << "no error";
  } catch (const io::IoError& e) {
    EXPECT_EQ(std::string(e.what()), fmt::format("{}: holds 1099511627776 (element {}), outside the range of i32 for "
                                                 "samples of i32[2]",
                                                 path, 2 * first + 1));
  }
}

TEST(DataRows, RefuseTheLayoutsTheWholeFileRefusesInItsWords) {
  ScratchDir dir;
  const std::string path = dir.file("x.npy");
  const std::vector<Tensor> files{Tensor::real({6, 2}), Tensor::integer(ElemKind::I64, {6, 3}),
                                  Tensor::integer(ElemKind::Bool, {6, 2}), Tensor::integer(ElemKind::I64, {0, 2}),
                                  Tensor::scalar(1.0)};
  for (const Tensor& t : files) {
    io::write_npy(path, t);
    const std::string expected = open_error(path, ids_spec(), DataReading::Whole);
    EXPECT_NE(expected, "");
    EXPECT_EQ(open_error(path, ids_spec(), DataReading::Rows), expected);
  }
  io::write_npy(path, id_rows(4));
  EXPECT_EQ(open_error(path, ids_spec(), DataReading::Rows), "");
}

TEST(DataRows, AnNpzOrAFortranOrderedNpyIsReadWhole) {
  ScratchDir dir;
  const std::string npz = dir.file("x.npz");
  io::write_npz(npz, {{"0", id_rows(4)}});
  const Dataset archive = Dataset::open(npz, ids_spec(), DataReading::Rows);
  EXPECT_FALSE(archive.reads_rows());
  EXPECT_EQ(archive.samples(), 4);

  // [3, 2] in column-major order, (r, c) at r + 3c: C order's bytes of
  // 0, 1, 2, 1000, 1001, 1002 under a header that says Fortran.
  Tensor column_major = Tensor::integer(ElemKind::I64, {3, 2});
  column_major.ints = {0, 1, 2, 1000, 1001, 1002};
  std::string bytes = io::encode_npy(column_major, io::StoreType::F64, "x.npy");
  bytes.replace(bytes.find("False"), 5, "True ");
  const std::string fortran = dir.file("fortran.npy");
  {
    std::ofstream out(fortran, std::ios::binary);
    out << bytes;
  }
  const Dataset data = Dataset::open(fortran, ids_spec(), DataReading::Rows);
  EXPECT_FALSE(data.reads_rows());
  EXPECT_EQ(data.gather({2, 0})[0].ints, std::vector<int64_t>({2, 1002, 0, 1000}));
}

}  // namespace quire::train

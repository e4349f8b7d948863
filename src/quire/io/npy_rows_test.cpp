#include "quire/io/npy_rows.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>

#include "quire/io/io_testing.h"
#include "quire/io/npy.h"
#include "quire/support/testing.h"

namespace quire::io {

namespace {

using runtime::ElemKind;
using runtime::Tensor;
using testing::append_le;
using testing::expect_same;

struct Scratch : quire::testing::ScratchDir {
  Scratch() : quire::testing::ScratchDir("npy-rows") {}
};

/// An .npy file of the given version around a header dict and raw data
/// (written here, not by encode_npy, so that any header can be made).
std::string make_npy(int major, const std::string& dict, const std::string& data) {
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  if (major == 1)
    append_le(out, static_cast<uint16_t>(dict.size()));
  else
    append_le(out, static_cast<uint32_t>(dict.size()));
  return out + dict + data;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Rows `indices` of `whole` (decode_npy's tensor), stacked: what read() must give.
Tensor rows_of(const Tensor& whole, const std::vector<int64_t>& indices) {
  runtime::Shape shape = whole.shape;
  shape[0] = static_cast<int64_t>(indices.size());
  const int64_t row = runtime::element_count(whole.shape) / whole.shape[0];
  Tensor out = whole.is_real() ? Tensor::real(shape) : Tensor::integer(whole.kind, shape);
  for (size_t k = 0; k < indices.size(); ++k)
    for (int64_t e = 0; e < row; ++e) {
      const auto from = static_cast<size_t>(indices[k] * row + e);
      const auto to = static_cast<size_t>(static_cast<int64_t>(k) * row + e);
      if (whole.is_real())
        out.reals[to] = whole.reals[from];
      else
        out.ints[to] = whole.ints[from];
    }
  return out;
}

/// The reason of the IoError that opening `path` throws ("" if none).
std::string open_error(const std::string& path) {
  try {
    NpyRows::open(path);
  } catch (const IoError& e) {
    EXPECT_EQ(e.path, path);
    return e.reason;
  }
  return "";
}

/// The reason decode_npy gives for `bytes` ("" if none).
std::string decode_error(const std::string& bytes, const std::string& path) {
  try {
    decode_npy(bytes, path);
  } catch (const IoError& e) {
    return e.reason;
  }
  return "";
}

/// 15 elements of `size` bytes each, every byte distinct, in a [5, 3] array:
/// any dtype's bit patterns (NaNs, subnormals, negative integers) arise.
std::string patterned_data(size_t size, char kind) {
  std::string data;
  for (size_t i = 0; i < 15 * size; ++i)
    data.push_back(kind == 'b' ? static_cast<char>(i % 2) : static_cast<char>(0x3b + 37 * i));
  return data;
}

}  // namespace

TEST(NpyRows, ReadsEveryDtypeAndVersionAsDecodeNpyDoes) {
  Scratch dir;
  const std::string path = dir.file("x.npy");
  const std::vector<int64_t> picked{4, 0, 1, 2, 2, 3};
  for (const char* descr : {"<f8", "<f4", "<f2", "<i4", "<i8", "|b1", "|u1", ">f8", ">f4", ">f2", ">i4", ">i8"}) {
    const size_t size = static_cast<size_t>(descr[2] - '0');
    for (int major : {1, 2, 3}) {
      SCOPED_TRACE(std::string(descr) + " v" + std::to_string(major));
      const std::string bytes =
          make_npy(major, fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': (5, 3), }}\n", descr),
                   patterned_data(size, descr[1]));
      write_bytes(path, bytes);
      const Tensor whole = decode_npy(bytes, path);
      const NpyRows rows = NpyRows::open(path);
      ASSERT_TRUE(rows.rows_readable());
      EXPECT_EQ(rows.rows(), 5);
      EXPECT_EQ(rows.kind(), whole.kind);
      EXPECT_EQ(rows.shape(), whole.shape);
      EXPECT_EQ(rows.row_bytes(), 3 * size);
      EXPECT_EQ(rows.header_bytes(), bytes.substr(0, bytes.size() - 15 * size));
      expect_same(rows.read(picked), rows_of(whole, picked));
      expect_same(rows.read({}), rows_of(whole, {}));
    }
  }
}

TEST(NpyRows, ReadsOnlyTheHeaderAndTheRowsAskedFor) {
  Scratch dir;
  const std::string path = dir.file("x.npy");
  Tensor t = Tensor::real({100, 4});
  for (size_t i = 0; i < t.reals.size(); ++i) t.reals[i] = static_cast<double>(i);
  write_npy(path, t);
  const NpyRows rows = NpyRows::open(path);
  const uint64_t header = rows.header_bytes().size();
  EXPECT_EQ(rows.bytes_read(), header);
  rows.read({10, 11, 12, 90});
  EXPECT_EQ(rows.bytes_read(), header + 4 * 32);
  EXPECT_EQ(rows.read_raw(99, 1).size(), 32u);
  EXPECT_EQ(rows.bytes_read(), header + 5 * 32);
}

TEST(NpyRows, RefusesWhatDecodeNpyRefusesInItsWords) {
  Scratch dir;
  const std::string path = dir.file("x.npy");
  const std::string f8x2(16, '\0');
  const std::vector<std::string> files{
      "PK\x03\x04 not numpy",
      std::string("\x93NUMPY\x04\x00", 8) + "xx",
      std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 18),
      std::string("\x93NUMPY\x02\x00\x01", 9),
      make_npy(1, "{'descr': '<c16', 'fortran_order': False, 'shape': (2,), }", f8x2),
      // A header that lies about its shape, either way, or past any size.
      make_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", f8x2),
      make_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", f8x2),
      make_npy(3, "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", f8x2),
      make_npy(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (0, 1073741824, 1073741824), }", ""),
      make_npy(1, "{'descr': '<f8', 'shape': (2,), }", f8x2),
      make_npy(2, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,", f8x2),
  };
  for (const std::string& bytes : files) {
    SCOPED_TRACE(bytes);
    write_bytes(path, bytes);
    const std::string expected = decode_error(bytes, path);
    ASSERT_NE(expected, "");
    EXPECT_EQ(open_error(path), expected);
  }
  EXPECT_EQ(decode_error(files[5], path), "data size mismatch: shape [3] of '<f8' needs 24 bytes, the file has 16");
}

TEST(NpyRows, EveryTruncationIsTheSameErrorAsDecodeNpys) {
  Scratch dir;
  const std::string path = dir.file("x.npy");
  const std::string bytes = make_npy(2, "{'descr': '>i8', 'fortran_order': False, 'shape': (3, 2), }\n",
                                     patterned_data(8, 'i').substr(0, 48));
  for (size_t n = 0; n < bytes.size(); ++n) {
    write_bytes(path, bytes.substr(0, n));
    const std::string expected = decode_error(bytes.substr(0, n), path);
    ASSERT_NE(expected, "") << "prefix " << n;
    EXPECT_EQ(open_error(path), expected) << "prefix " << n;
  }
}

TEST(NpyRows, CorruptBytesGiveDecodeNpysValuesOrItsError) {
  // Any single corrupted byte: the rows are decode_npy's rows, or opening or
  // reading them fails as decode_npy fails (run under the sanitizers to see
  // that no read leaves the file's bytes).
  Scratch dir;
  const std::string path = dir.file("x.npy");
  const std::string original =
      make_npy(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (4, 2), }", std::string("\0\1\1\0\1\1\0\0", 8));
  const std::vector<int64_t> all{0, 1, 2, 3};
  for (size_t i = 0; i < original.size(); ++i) {
    for (uint8_t value : {0x00, 0x02, 0x7f, 0x31, 0x29}) {
      std::string corrupt = original;
      corrupt[i] = static_cast<char>(value);
      write_bytes(path, corrupt);
      SCOPED_TRACE(fmt::format("byte {} = {}", i, value));
      std::optional<Tensor> whole;
      std::string expected;
      try {
        whole = decode_npy(corrupt, path);
      } catch (const IoError& e) {
        expected = e.reason;
      }
      std::string got;
      try {
        const NpyRows rows = NpyRows::open(path);
        if (!rows.rows_readable() || rows.rows() != 4) continue;  // another layout: not rows to compare
        const Tensor read = rows.read(all);
        ASSERT_TRUE(whole.has_value()) << expected;
        expect_same(read, *whole);
      } catch (const IoError& e) {
        got = e.reason;
      }
      EXPECT_EQ(got, expected);
    }
  }
}

TEST(NpyRows, NamesABadBoolByteAsDecodeNpyDoesOnlyWhenItsRowIsRead) {
  Scratch dir;
  const std::string path = dir.file("x.npy");
  const std::string bytes =
      make_npy(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (4, 2), }", std::string("\0\1\1\0\1\7\0\0", 8));
  write_bytes(path, bytes);
  EXPECT_EQ(decode_error(bytes, path), "bool element 5 is the byte 7 (not 0 or 1)");
  const NpyRows rows = NpyRows::open(path);
  expect_same(rows.read({0, 1, 3}), testing::ints(ElemKind::Bool, {3, 2}, {0, 1, 1, 0, 0, 0}));
  try {
    rows.read({3, 2});
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": bool element 5 is the byte 7 (not 0 or 1)");
  }
}

TEST(NpyRows, FortranOrderIsReadableAloneOnlyAtRankOne) {
  Scratch dir;
  const std::string path = dir.file("x.npy");
  write_bytes(path, make_npy(1, "{'descr': '<i8', 'fortran_order': True, 'shape': (2, 3), }",
                             patterned_data(8, 'i').substr(0, 48)));
  EXPECT_FALSE(NpyRows::open(path).rows_readable());
  EXPECT_THROW(NpyRows::open(path).read({0}), std::logic_error);
  const std::string bytes =
      make_npy(1, "{'descr': '<i4', 'fortran_order': True, 'shape': (3,), }", patterned_data(4, 'i').substr(0, 12));
  write_bytes(path, bytes);
  const NpyRows rows = NpyRows::open(path);
  ASSERT_TRUE(rows.rows_readable());
  expect_same(rows.read({2, 0}), rows_of(decode_npy(bytes, path), {2, 0}));
  // A rank-0 array has no rows.
  write_bytes(path, make_npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (), }", std::string(4, '\0')));
  EXPECT_FALSE(NpyRows::open(path).rows_readable());
}

TEST(NpyRows, RefusesRowsOutOfRangeAndAFileThatShrankOrIsNoFile) {
  Scratch dir;
  const std::string path = dir.file("x.npy");
  Tensor t = Tensor::real({8, 2});
  write_npy(path, t);
  const NpyRows rows = NpyRows::open(path);
  EXPECT_THROW(rows.read({8}), std::out_of_range);
  EXPECT_THROW(rows.read({-1}), std::out_of_range);
  EXPECT_THROW(rows.read_raw(7, 2), std::out_of_range);
  // Cut after open: the rows past the new end are an error, never short.
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 20);
  EXPECT_NO_THROW(rows.read({0, 1}));
  try {
    rows.read({6, 7});
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(e.reason.find("truncated"), std::string::npos) << e.reason;
    EXPECT_NE(e.reason.find("changed while read"), std::string::npos) << e.reason;
  }
  EXPECT_EQ(open_error(dir.str()), "is not a regular file, so its rows cannot be read where they lie");
  EXPECT_NE(open_error(dir.file("missing.npy")).find("cannot open"), std::string::npos);
}

}  // namespace quire::io

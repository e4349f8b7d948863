#include "quire/io/npy.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "quire/io/io_testing.h"

namespace quire::io {

using runtime::ElemKind;
using runtime::Shape;
using runtime::Tensor;

namespace {

const std::string kOrigin = "data/x.npy";

using testing::append_le;
using testing::expect_same;
using testing::ints;
using testing::reals;

/// An .npy file of the given version around a header dict and raw data.
std::string make_npy(int major, const std::string& dict, const std::string& data) {
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  if (major == 1) append_le(out, static_cast<uint16_t>(dict.size()));
  else append_le(out, static_cast<uint32_t>(dict.size()));
  return out + dict + data;
}

/// The reason of the IoError that decoding `bytes` throws ("" if none).
std::string npy_error(const std::string& bytes) {
  try {
    decode_npy(bytes, kOrigin);
  } catch (const IoError& e) {
    EXPECT_EQ(e.path, kOrigin);
    return e.reason;
  }
  return "";
}

std::string npz_error(const std::string& bytes) {
  try {
    decode_npz(bytes, "data/x.npz");
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A zip writer independent of encode_npz, for archives it never writes:
// ZIP64 fields as Python's zipfile writes them, deflate method numbers.
struct TestEntry {
  std::string name;
  std::string data;
  uint16_t method = 0;
};

struct ZipLayout {
  bool zip64_local = false;    ///< local sizes are markers, values in a ZIP64 extra (np.savez)
  bool zip64_central = false;  ///< central sizes and offset are markers, values in a ZIP64 extra
  bool zip64_end = false;      ///< a ZIP64 end record and locator, the plain end record all markers
};

std::string build_zip(const std::vector<TestEntry>& entries, ZipLayout layout) {
  std::string out, central;
  for (const TestEntry& e : entries) {
    const uint64_t offset = out.size();
    const uint32_t crc = crc32(e.data);
    append_le(out, uint32_t{0x04034b50});
    append_le(out, uint16_t{45});
    append_le(out, uint16_t{0});
    append_le(out, e.method);
    append_le(out, uint32_t{0});  // time, date
    append_le(out, crc);
    const uint32_t local_size = layout.zip64_local ? 0xffffffff : static_cast<uint32_t>(e.data.size());
    append_le(out, local_size);
    append_le(out, local_size);
    append_le(out, static_cast<uint16_t>(e.name.size()));
    append_le(out, static_cast<uint16_t>(layout.zip64_local ? 20 : 0));
    out += e.name;
    if (layout.zip64_local) {
      append_le(out, uint16_t{1});
      append_le(out, uint16_t{16});
      append_le(out, uint64_t{e.data.size()});
      append_le(out, uint64_t{e.data.size()});
    }
    out += e.data;

    append_le(central, uint32_t{0x02014b50});
    append_le(central, uint16_t{45});
    append_le(central, uint16_t{45});
    append_le(central, uint16_t{0});
    append_le(central, e.method);
    append_le(central, uint32_t{0});
    append_le(central, crc);
    const uint32_t size = layout.zip64_central ? 0xffffffff : static_cast<uint32_t>(e.data.size());
    append_le(central, size);
    append_le(central, size);
    append_le(central, static_cast<uint16_t>(e.name.size()));
    append_le(central, static_cast<uint16_t>(layout.zip64_central ? 28 : 0));
    append_le(central, uint16_t{0});  // comment
    append_le(central, uint16_t{0});  // disk
    append_le(central, uint16_t{0});
    append_le(central, uint32_t{0});
    append_le(central, layout.zip64_central ? uint32_t{0xffffffff} : static_cast<uint32_t>(offset));
    central += e.name;
    if (layout.zip64_central) {
      append_le(central, uint16_t{1});
      append_le(central, uint16_t{24});
      append_le(central, uint64_t{e.data.size()});
      append_le(central, uint64_t{e.data.size()});
      append_le(central, offset);
    }
  }
  const uint64_t central_offset = out.size();
  out += central;
  if (layout.zip64_end) {
    const uint64_t record = out.size();
    append_le(out, uint32_t{0x06064b50});
    append_le(out, uint64_t{44});
    append_le(out, uint16_t{45});
    append_le(out, uint16_t{45});
    append_le(out, uint32_t{0});
    append_le(out, uint32_t{0});
    append_le(out, uint64_t{entries.size()});
    append_le(out, uint64_t{entries.size()});
    append_le(out, uint64_t{central.size()});
    append_le(out, central_offset);
    append_le(out, uint32_t{0x07064b50});
    append_le(out, uint32_t{0});
    append_le(out, record);
    append_le(out, uint32_t{1});
  }
  append_le(out, uint32_t{0x06054b50});
  append_le(out, uint32_t{0});
  const uint16_t count = layout.zip64_end ? 0xffff : static_cast<uint16_t>(entries.size());
  append_le(out, count);
  append_le(out, count);
  append_le(out, layout.zip64_end ? uint32_t{0xffffffff} : static_cast<uint32_t>(central.size()));
  append_le(out, layout.zip64_end ? uint32_t{0xffffffff} : static_cast<uint32_t>(central_offset));
  append_le(out, uint16_t{0});
  return out;
}

std::vector<Tensor> every_kind_and_shape() {
  const double inf = std::numeric_limits<double>::infinity();
  return {
      reals({2, 3}, {0.0, -0.0, 1.5, -inf, std::nan(""), 5e-324}),
      reals({}, {3.25}),
      reals({0}, {}),
      reals({3, 0, 2}, {}),
      reals({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}),
      ints(ElemKind::I32, {4}, {0, -1, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}),
      ints(ElemKind::I32, {}, {7}),
      ints(ElemKind::I64, {2, 2}, {0, -1, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}),
      ints(ElemKind::I64, {0, 5}, {}),
      ints(ElemKind::Bool, {3}, {1, 0, 1}),
      ints(ElemKind::Bool, {}, {0}),
  };
}

}  // namespace

TEST(Npy, Crc32OfTheCheckString) { EXPECT_EQ(crc32("123456789"), 0xCBF43926u); }

// Against the definition, one bit at a time, at every length 0 to 40 (every
// tail after the eight-byte steps) and from every offset into a buffer.
TEST(Npy, Crc32IsTheBitwiseDefinitionAtEveryLengthAndOffset) {
  auto bitwise = [](std::string_view bytes) {
    uint32_t c = 0xffffffffu;
    for (char byte : bytes) {
      c ^= static_cast<uint8_t>(byte);
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
  };
  std::string buffer;
  uint32_t x = 12345;
  for (int i = 0; i < 4096 + 13; ++i) {
    x = x * 1664525u + 1013904223u;
    buffer.push_back(static_cast<char>(x >> 24));
  }
  const std::string_view all(buffer);
  for (size_t offset = 0; offset < 8; ++offset)
    for (size_t length = 0; length <= 40; ++length)
      ASSERT_EQ(crc32(all.substr(offset, length)), bitwise(all.substr(offset, length))) << offset << " " << length;
  EXPECT_EQ(crc32(all), bitwise(all));
}

TEST(Npy, RoundTripsEveryKindAndShape) {
  for (const Tensor& t : every_kind_and_shape()) {
    SCOPED_TRACE(runtime::shape_string(t.shape) + " " + runtime::elem_kind_name(t.kind));
    const std::string bytes = encode_npy(t, StoreType::F64, kOrigin);
    EXPECT_EQ(bytes.find('\n') + 1, bytes.size() - t.size() * (t.is_real()               ? 8
                                                               : t.kind == ElemKind::I32 ? 4
                                                               : t.kind == ElemKind::I64 ? 8
                                                                                         : 1));
    expect_same(decode_npy(bytes, kOrigin), t);
  }
}

TEST(Npy, WritesNumpysHeader) {
  const std::string bytes = encode_npy(reals({2, 3}, {1, 2, 3, 4, 5, 6}), StoreType::F64, kOrigin);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
  EXPECT_EQ(bytes.substr(10, dict.size()), dict);
  EXPECT_EQ(bytes.size() - 48, 128u);  // header padded to a multiple of 64
  EXPECT_EQ(bytes[127], '\n');
  EXPECT_TRUE(contains(encode_npy(reals({3}, {1, 2, 3}), StoreType::F64, kOrigin), "'shape': (3,), "));
  EXPECT_TRUE(contains(encode_npy(reals({}, {1}), StoreType::F64, kOrigin), "'shape': (), "));
  EXPECT_TRUE(contains(encode_npy(ints(ElemKind::Bool, {1}, {1}), StoreType::F64, kOrigin), "'descr': '|b1'"));
}

TEST(Npy, StoresRealsAsF32OnRequest) {
  const Tensor t = reals({3}, {0.5, 0.1, 1e300});
  const std::string bytes = encode_npy(t, StoreType::F32, kOrigin);
  EXPECT_TRUE(contains(bytes, "'descr': '<f4'"));
  const Tensor back = decode_npy(bytes, kOrigin);
  EXPECT_EQ(back.reals[0], 0.5);
  EXPECT_EQ(back.reals[1], static_cast<double>(0.1f));
  EXPECT_TRUE(std::isinf(back.reals[2]));
  // Integer tensors keep their own types whatever the StoreType.
  expect_same(decode_npy(encode_npy(ints(ElemKind::I64, {1}, {1LL << 40}), StoreType::F32, kOrigin), kOrigin),
              ints(ElemKind::I64, {1}, {1LL << 40}));
}

TEST(Npy, RejectsI32ValuesOutOfRange) {
  try {
    encode_npy(ints(ElemKind::I32, {2}, {0, 1LL << 40}), StoreType::F64, kOrigin);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), "data/x.npy: i32 element 1 is 1099511627776, outside the i32 range");
  }
}

TEST(Npy, ReadsVersions2And3BigEndianAndHalf) {
  std::string data;
  for (uint64_t bits : {std::bit_cast<uint64_t>(1.5), std::bit_cast<uint64_t>(-2.0)}) {
    for (int i = 7; i >= 0; --i) data.push_back(static_cast<char>(bits >> (8 * i)));
  }
  const Tensor expected = reals({2}, {1.5, -2.0});
  expect_same(decode_npy(make_npy(2, "{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }\n", data), kOrigin),
              expected);
  expect_same(
      decode_npy(make_npy(3, "{\"descr\": \">f8\", \"fortran_order\": False, \"shape\": (2L,)}", data), kOrigin),
      expected);
  // binary16: 1.0, -2.0, the smallest subnormal 2^-24, the largest 65504, -inf.
  std::string half;
  for (uint16_t h : {0x3c00, 0xc000, 0x0001, 0x7bff, 0xfc00}) append_le(half, h);
  expect_same(decode_npy(make_npy(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }", half), kOrigin),
              reals({5}, {1.0, -2.0, std::ldexp(1.0, -24), 65504.0, -std::numeric_limits<double>::infinity()}));
  std::string i4;
  append_le(i4, uint32_t{0xfffffffe});
  expect_same(decode_npy(make_npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (), }", i4), kOrigin),
              ints(ElemKind::I32, {}, {-2}));
  expect_same(decode_npy(make_npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", "\xff\x01"), kOrigin),
              ints(ElemKind::I32, {2}, {255, 1}));
}

TEST(Npy, TransposesFortranOrder) {
  // A 2×3×2 array in column-major order: element (i, j, k) at i + 2j + 6k.
  std::string data;
  for (int64_t k = 0; k < 2; ++k)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t i = 0; i < 2; ++i) append_le(data, static_cast<uint64_t>(100 * i + 10 * j + k));
  const Tensor t =
      decode_npy(make_npy(1, "{'descr': '<i8', 'fortran_order': True, 'shape': (2, 3, 2), }", data), kOrigin);
  ASSERT_EQ(t.shape, (Shape{2, 3, 2}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 2; ++k) EXPECT_EQ(t.ints[static_cast<size_t>(6 * i + 2 * j + k)], 100 * i + 10 * j + k);
}

TEST(Npy, MalformedFilesSayWhy) {
  const std::string f8x2(16, '\0');
  auto with = [&](const std::string& dict, const std::string& data) { return npy_error(make_npy(1, dict, data)); };
  EXPECT_EQ(npy_error("PK\x03\x04 not numpy"), "bad magic: not an .npy file");
  EXPECT_EQ(npy_error(std::string("\x93NUMPY\x04\x00", 8) + "xx"),
            "unsupported .npy version 4.0 (supported: 1.0 2.0 3.0)");
  EXPECT_EQ(npy_error(std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 18)),
            "truncated: the header needs bytes 10..265, the file has 18");
  EXPECT_EQ(with("{'descr': '<c16', 'fortran_order': False, 'shape': (2,), }", f8x2),
            "dtype '<c16' is not supported (supported: f8 f4 f2 i4 i8 b1 u1)");
  EXPECT_EQ(with("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", f8x2),
            "data size mismatch: shape [3] of '<f8' needs 24 bytes, the file has 16");
  EXPECT_EQ(with("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", f8x2),
            "data size mismatch: shape [1] of '<f8' needs 8 bytes, the file has 16");
  EXPECT_EQ(with("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", f8x2),
            "shape [4294967296, 4294967296] is too large");
  // An empty array of absurd dimensions, wherever its zero stands: the fuzzer
  // found the zero-last case escaping as an allocation error.
  EXPECT_EQ(with("{'descr': '<i8', 'fortran_order': False, 'shape': (1073741824, 1073741824, 0), }", ""),
            "shape [1073741824, 1073741824, 0] is too large");
  EXPECT_EQ(with("{'descr': '<i8', 'fortran_order': False, 'shape': (0, 1073741824, 1073741824), }", ""),
            "shape [0, 1073741824, 1073741824] is too large");
  EXPECT_TRUE(contains(with("{'descr': '<f8', 'shape': (2,), }", f8x2), "missing key 'fortran_order'"));
  EXPECT_TRUE(
      contains(with("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'x': 1}", f8x2), "unexpected key 'x'"));
  EXPECT_TRUE(contains(with("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (2,), }", f8x2),
                       "structured dtypes are not supported"));
  EXPECT_TRUE(contains(with("{'descr': '<f8', 'fortran_order': False, 'shape': (-2,), }", f8x2), "negative dimension"));
  EXPECT_TRUE(contains(with("{'descr': '<f8', 'fortran_order': Maybe, 'shape': (2,), }", f8x2), "True or False"));
  EXPECT_TRUE(contains(with("{'descr': '<f8', 'fortran_order': False, 'shape': (2,", f8x2), "malformed header"));
  EXPECT_TRUE(
      contains(with("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (2,)}", f8x2), "appears twice"));
  EXPECT_EQ(with("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", std::string("\x01\x02", 2)),
            "bool element 1 is the byte 2 (not 0 or 1)");
}

TEST(Npy, EveryTruncationIsAnError) {
  for (const Tensor& t : every_kind_and_shape()) {
    const std::string bytes = encode_npy(t, StoreType::F64, kOrigin);
    for (size_t n = 0; n < bytes.size(); ++n) ASSERT_NE(npy_error(bytes.substr(0, n)), "") << "prefix " << n;
  }
}

TEST(Npy, CorruptBytesNeverCrash) {
  // Any single corrupted byte: an error or a tensor, never a crash or an
  // out-of-bounds read (run under the sanitizers to see the latter).
  const std::string bytes = encode_npy(reals({2, 3}, {1, 2, 3, 4, 5, 6}), StoreType::F64, kOrigin);
  const std::string archive =
      encode_npz({{"a", reals({2}, {1, 2})}, {"b", ints(ElemKind::Bool, {1}, {1})}}, StoreType::F64, "x.npz");
  for (const std::string* original : {&bytes, &archive}) {
    for (size_t i = 0; i < original->size(); ++i) {
      for (uint8_t value : {0x00, 0xff, 0x7f, 0x31}) {
        std::string corrupt = *original;
        corrupt[i] = static_cast<char>(value);
        try {
          if (original == &bytes) decode_npy(corrupt, kOrigin);
          else decode_npz(corrupt, "x.npz");
        } catch (const IoError&) {
        }
      }
    }
  }
}

TEST(Npz, RoundTripsEntriesInOrder) {
  NamedTensors entries;
  const auto tensors = every_kind_and_shape();
  for (size_t i = 0; i < tensors.size(); ++i) entries.emplace_back("batch." + std::to_string(i), tensors[i]);
  entries.emplace_back("blocks/proj.w", reals({1}, {2}));
  const std::string bytes = encode_npz(entries, StoreType::F64, "x.npz");
  EXPECT_EQ(bytes.substr(0, 4), "PK\x03\x04");
  const NamedTensors back = decode_npz(bytes, "x.npz");
  ASSERT_EQ(back.size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(back[i].first, entries[i].first);
    expect_same(back[i].second, entries[i].second);
  }
  EXPECT_TRUE(decode_npz(encode_npz({}, StoreType::F64, "x.npz"), "x.npz").empty());
  // Reproducible: the same tensors give the same bytes.
  EXPECT_EQ(encode_npz(entries, StoreType::F64, "x.npz"), bytes);
}

TEST(Npz, ReadsZip64Layouts) {
  const Tensor t = reals({2}, {1.5, 2.5});
  const std::vector<TestEntry> entries{{"w.npy", encode_npy(t, StoreType::F64, "w")},
                                       {"b.npy", encode_npy(ints(ElemKind::I64, {}, {3}), StoreType::F64, "b")}};
  for (ZipLayout layout : {ZipLayout{true, false, false}, ZipLayout{false, true, false}, ZipLayout{false, false, true},
                           ZipLayout{true, true, true}}) {
    const NamedTensors back = decode_npz(build_zip(entries, layout), "x.npz");
    ASSERT_EQ(back.size(), 2u);
    EXPECT_EQ(back[0].first, "w");
    expect_same(back[0].second, t);
    EXPECT_EQ(back[1].second.ints, std::vector<int64_t>{3});
  }
}

TEST(Npz, MalformedArchivesSayWhy) {
  const std::string c16 =
      make_npy(1, "{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }", std::string(16, '\0'));
  EXPECT_EQ(npz_error(build_zip({{"batch.1.npy", c16}}, {})),
            "data/x.npz: entry `batch.1.npy`: dtype '<c16' is not supported (supported: f8 f4 f2 i4 i8 b1 u1)");
  const std::string good = encode_npy(reals({1}, {1}), StoreType::F64, "a");
  EXPECT_EQ(npz_error(build_zip({{"a.npy", good, 8}}, {})),
            "data/x.npz: entry `a.npy`: compressed .npz entries (np.savez_compressed) are not supported; save with "
            "np.savez");
  EXPECT_EQ(npz_error(build_zip({{"a.txt", good}}, {})), "data/x.npz: entry `a.txt`: not a .npy entry");
  EXPECT_EQ(npz_error(build_zip({{"a.npy", good}, {"a.npy", good}}, {})),
            "data/x.npz: entry `a.npy`: appears twice in the archive");
  EXPECT_EQ(npz_error("not a zip at all, just some text"),
            "data/x.npz: not a zip archive: no end of central directory record");
  EXPECT_EQ(npz_error("PK"), "data/x.npz: not a zip archive: 2 bytes is too short for an end record");

  std::string corrupt = build_zip({{"a.npy", good}}, {});
  corrupt[30 + 5 + good.size() - 1] ^= 0x40;  // the last data byte
  EXPECT_TRUE(contains(npz_error(corrupt), "data/x.npz: entry `a.npy`: CRC-32 mismatch")) << npz_error(corrupt);

  std::string wrong_offset = build_zip({{"a.npy", good}}, {});
  wrong_offset[wrong_offset.size() - 22 - 5 - 4] = 7;  // the entry's local header offset
  EXPECT_TRUE(contains(npz_error(wrong_offset), "bad local header signature")) << npz_error(wrong_offset);
}

TEST(Npz, EveryTruncationIsAnError) {
  const std::vector<TestEntry> entries{{"w.npy", encode_npy(reals({3}, {1, 2, 3}), StoreType::F64, "w")}};
  for (const std::string& bytes :
       {encode_npz({{"w", reals({3}, {1, 2, 3})}, {"i", ints(ElemKind::I32, {2}, {1, 2})}}, StoreType::F64, "x"),
        build_zip(entries, {true, true, true})}) {
    for (size_t n = 0; n < bytes.size(); ++n) ASSERT_NE(npz_error(bytes.substr(0, n)), "") << "prefix " << n;
  }
}

TEST(Npz, WriterRejectsBadNames) {
  EXPECT_THROW(encode_npz({{"a", reals({}, {1})}, {"a", reals({}, {2})}}, StoreType::F64, "x"), IoError);
  EXPECT_THROW(encode_npz({{"", reals({}, {1})}}, StoreType::F64, "x"), IoError);
}

}  // namespace quire::io

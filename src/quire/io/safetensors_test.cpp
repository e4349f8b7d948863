#include "quire/io/safetensors.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <limits>

#include "quire/io/atomic_file.h"
#include "quire/io/io_testing.h"
#include "quire/io/npy.h"

namespace quire::io {

using runtime::ElemKind;
using runtime::Shape;
using runtime::Tensor;

namespace {

const std::string kOrigin = "ckpt/model.safetensors";

using testing::append_le;
using testing::expect_same;
using testing::ints;
using testing::reals;

/// A safetensors file from a header text and a buffer, as a foreign writer
/// might make it (no padding unless the text has it).
std::string make_file(const std::string& header, const std::string& buffer) {
  std::string out;
  append_le(out, uint64_t{header.size()});
  return out + header + buffer;
}

std::string error_of(const std::string& bytes) {
  try {
    decode_safetensors(bytes, kOrigin);
  } catch (const IoError& e) {
    EXPECT_EQ(e.path, kOrigin);
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

NamedTensors sample() {
  const double inf = std::numeric_limits<double>::infinity();
  return {
      {"z.last", reals({2, 3}, {0.0, -0.0, 1.5, -inf, std::nan(""), 5e-324})},
      {"a.scalar", reals({}, {3.25})},
      {"m.empty", reals({3, 0}, {})},
      {"tokens",
       ints(ElemKind::I32, {3}, {0, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()})},
      {"step", ints(ElemKind::I64, {}, {std::numeric_limits<int64_t>::min()})},
      {"mask", ints(ElemKind::Bool, {2, 2}, {1, 0, 0, 1})},
      {"none", ints(ElemKind::I64, {0}, {})},
  };
}

}  // namespace

TEST(Safetensors, RoundTripsInTheGivenOrderWithMetadata) {
  const NamedTensors tensors = sample();
  const std::map<std::string, std::string> metadata{{"format", "quire"}, {"step", "100"}};
  const std::string bytes = encode_safetensors(tensors, metadata, StoreType::F64, kOrigin);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ((8 + header_size) % 8, 0u);  // the buffer starts 8-byte aligned
  EXPECT_EQ(bytes[8], '{');
  std::map<std::string, std::string> read_metadata{{"stale", "x"}};
  const NamedTensors back = decode_safetensors(bytes, kOrigin, &read_metadata);
  EXPECT_EQ(read_metadata, metadata);
  ASSERT_EQ(back.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back[i].first, tensors[i].first);
    expect_same(back[i].second, tensors[i].second);
  }
}

TEST(Safetensors, StoresRealsAsF32OnRequest) {
  const std::string bytes = encode_safetensors({{"w", reals({2}, {0.1, 2.0})}}, {}, StoreType::F32, kOrigin);
  EXPECT_TRUE(contains(bytes, "\"dtype\":\"F32\""));
  const NamedTensors back = decode_safetensors(bytes, kOrigin);
  EXPECT_EQ(back[0].second.reals, (std::vector<double>{static_cast<double>(0.1f), 2.0}));
}

TEST(Safetensors, WritesAtomicallyToDisk) {
  const auto dir = std::filesystem::temp_directory_path() / "quire-safetensors-test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "m.safetensors").string();
  write_safetensors(path, sample(), {{"k", "v"}});
  std::map<std::string, std::string> metadata;
  EXPECT_EQ(read_safetensors(path, &metadata).size(), sample().size());
  EXPECT_EQ(metadata.at("k"), "v");
  std::filesystem::remove_all(dir);
}

TEST(Safetensors, ReadsForeignDtypesExactly) {
  std::string buffer;
  for (uint16_t h : {0x3c00, 0x8001, 0x7c00}) append_le(buffer, h);  // F16: 1, -2^-24, inf
  for (uint16_t b : {0x3f80, 0xc2f7, 0x0001}) append_le(buffer, b);  // BF16: 1, -123.5, 2^-133
  buffer += std::string("\x00\x7f\xff", 3);                          // U8
  append_le(buffer, std::bit_cast<uint32_t>(0.1f));                  // F32
  const std::string header = R"({"h":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},)"
                             R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[6,12]},)"
                             R"("u":{"dtype":"U8","shape":[3],"data_offsets":[12,15]},)"
                             R"("f":{"dtype":"F32","shape":[],"data_offsets":[15,19]}})";
  const NamedTensors t = decode_safetensors(make_file(header, buffer), kOrigin);
  ASSERT_EQ(t.size(), 4u);
  expect_same(t[0].second, reals({3}, {1.0, -std::ldexp(1.0, -24), std::numeric_limits<double>::infinity()}));
  expect_same(t[1].second, reals({3}, {1.0, -123.5, std::ldexp(1.0, -133)}));
  expect_same(t[2].second, ints(ElemKind::I32, {3}, {0, 127, 255}));
  expect_same(t[3].second, reals({}, {static_cast<double>(0.1f)}));
}

TEST(Safetensors, MalformedFilesSayWhy) {
  const std::string p = kOrigin + ": ";
  const std::string eight(8, '\0');
  EXPECT_EQ(error_of("abc"), p + "truncated: 3 bytes, too short for the 8-byte header length");
  std::string huge;
  append_le(huge, uint64_t{1} << 62);
  EXPECT_EQ(error_of(huge + "{}"),
            p + "truncated: the header length is 4611686018427387904 but only 2 bytes follow it");
  EXPECT_TRUE(contains(error_of(make_file("{\"a\": ", "")), p + "the header is not valid JSON"));
  EXPECT_EQ(error_of(make_file("[1, 2]", "")), p + "the header is not a JSON object");
  EXPECT_EQ(error_of(make_file(R"({"w":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", eight)),
            p + "tensor `w`: dtype 'C64' is not supported (supported: F64 F32 F16 BF16 I32 I64 BOOL U8)");
  EXPECT_EQ(error_of(make_file(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", eight)),
            p + "tensor `w`: data_offsets [0, 16] lie outside the 8-byte data buffer");
  EXPECT_EQ(error_of(make_file(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[8,0]}})", eight)),
            p + "tensor `w`: data_offsets [8, 0] lie outside the 8-byte data buffer");
  EXPECT_EQ(error_of(make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight)),
            p + "tensor `w`: data_offsets [0, 8] hold 8 bytes, but shape [3] of F32 needs 12");
  EXPECT_EQ(error_of(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"I32","shape":[1],"data_offsets":[4,8]}})",
                               eight)),
            p + "tensor `b`: data_offsets [4, 8] overlap those of `a` [0, 8]");
  EXPECT_EQ(error_of(make_file(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
                               R"("a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
                               eight)),
            p + "the header names `a` twice");
  EXPECT_EQ(error_of(make_file(R"({"w":{"dtype":"F64","shape":[-1],"data_offsets":[0,8]}})", eight)),
            p + "tensor `w`: shape [-1] has a dimension that is not a non-negative integer");
  EXPECT_EQ(error_of(make_file(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight)),
            p + "tensor `w`: shape [4294967296,4294967296] is too large");
  EXPECT_EQ(error_of(make_file(R"({"w":{"dtype":"U8","shape":[1073741824,1073741824,0],"data_offsets":[0,0]}})", eight)),
            p + "tensor `w`: shape [1073741824,1073741824,0] is too large");
  EXPECT_EQ(error_of(make_file(R"({"w":{"dtype":"F64","shape":[1]}})", eight)),
            p + "tensor `w`: missing \"data_offsets\" [begin, end] of non-negative integers");
  EXPECT_EQ(error_of(make_file(R"({"w":[1]})", eight)), p + "tensor `w`: its header entry is not a JSON object");
  EXPECT_EQ(error_of(make_file(R"({"__metadata__":{"k":1}})", "")), p + "__metadata__ value of `k` is not a string");
  EXPECT_EQ(error_of(make_file(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", "\x01\x05")),
            p + "tensor `m`: bool element 1 is the byte 5 (not 0 or 1)");
}

TEST(Safetensors, PaddingIsSpacesAndNoByteIsLeftOver) {
  const std::string p = kOrigin + ": ";
  const std::string eight(8, '\0');
  const std::string w = R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})";
  // Spaces pad a header (the format's own alignment); they are JSON whitespace.
  EXPECT_EQ(error_of(make_file(w + "       ", eight)), "");
  // A NUL is neither, and was accepted.
  EXPECT_EQ(error_of(make_file(w + std::string(3, '\0'), eight)),
            p + "the header holds a NUL byte at offset 62 (a header is padded with spaces)");
  // Bytes after the last tensor's data were accepted too.
  EXPECT_EQ(error_of(make_file(w, eight + "xyz")),
            p + "3 bytes follow after the last tensor's data (the header accounts for 8 of 11 bytes)");
  EXPECT_EQ(error_of(make_file("{}", "x")),
            p + "1 byte follows after the last tensor's data (the header accounts for 0 of 1 bytes)");
}

TEST(Safetensors, EveryTruncationIsAnError) {
  const std::string bytes = encode_safetensors(sample(), {{"a", "b"}}, StoreType::F64, kOrigin);
  for (size_t n = 0; n < bytes.size(); ++n) ASSERT_NE(error_of(bytes.substr(0, n)), "") << "prefix " << n;
}

TEST(Safetensors, CorruptBytesNeverCrash) {
  const std::string bytes = encode_safetensors(sample(), {}, StoreType::F64, kOrigin);
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t value : {0x00, 0xff, 0x22, 0x39}) {
      std::string corrupt = bytes;
      corrupt[i] = static_cast<char>(value);
      try {
        decode_safetensors(corrupt, kOrigin);
      } catch (const IoError&) {
      }
    }
  }
}

TEST(Safetensors, WriterRejectsBadInput) {
  EXPECT_THROW(encode_safetensors({{"a", reals({}, {1})}, {"a", reals({}, {1})}}, {}, StoreType::F64, kOrigin),
               IoError);
  EXPECT_THROW(encode_safetensors({{"__metadata__", reals({}, {1})}}, {}, StoreType::F64, kOrigin), IoError);
  EXPECT_THROW(encode_safetensors({{"i", ints(ElemKind::I32, {1}, {1LL << 33})}}, {}, StoreType::F64, kOrigin),
               IoError);
  EXPECT_THROW(encode_safetensors({{"bad\xff", reals({}, {1})}}, {}, StoreType::F64, kOrigin), IoError);
  Tensor broken = reals({3}, {1, 2});
  EXPECT_THROW(encode_safetensors({{"b", broken}}, {}, StoreType::F64, kOrigin), IoError);
}

// An f32-held tensor is written from its f32 view: no f64 view is made (it
// would stay beside the f32 one as long as the tensor lives), and the bytes
// are those of the same numbers held as f64.
TEST(Safetensors, AnF32HeldTensorIsWrittenWithoutWideningIt) {
  Tensor wide = reals({2, 3}, {0.5, -1.25, 3.0, static_cast<double>(1e-3f), -0.0, 65504.0});
  Tensor narrow = wide;
  narrow.reals.narrow_for_writing();
  ASSERT_FALSE(narrow.reals.holds_wide());
  for (StoreType type : {StoreType::F32, StoreType::F64, StoreType::BF16, StoreType::F16}) {
    EXPECT_EQ(encode_safetensors({{"t", narrow}}, {}, type, kOrigin), encode_safetensors({{"t", wide}}, {}, type, kOrigin));
    EXPECT_EQ(encode_npy(narrow, type, kOrigin), encode_npy(wide, type, kOrigin));
  }
  EXPECT_FALSE(narrow.reals.holds_wide()) << "writing made an f64 view";
}

}  // namespace quire::io

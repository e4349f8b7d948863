#pragma once
// What the file-format tests share: tensors from literal values (which may
// be malformed on purpose: no size check), bit-exact comparison of what was
// read back, and an independent little-endian writer for hand-made files
// (not io/byte_codec.h, whose reading these tests check).

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "quire/runtime/tensor.h"

namespace quire::io::testing {

/// Same kind, shape and bits (so NaNs and -0.0 compare as stored).
inline void expect_same(const runtime::Tensor& a, const runtime::Tensor& b) {
  ASSERT_EQ(a.kind, b.kind);
  ASSERT_EQ(a.shape, b.shape);
  ASSERT_EQ(a.reals.size(), b.reals.size());
  for (size_t i = 0; i < a.reals.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint64_t>(a.reals[i]), std::bit_cast<uint64_t>(b.reals[i])) << "element " << i;
  }
  EXPECT_EQ(a.ints, b.ints);
}

inline runtime::Tensor reals(runtime::Shape shape, std::vector<double> values) {
  runtime::Tensor t = runtime::Tensor::real(std::move(shape));
  t.reals = std::move(values);
  return t;
}

inline runtime::Tensor ints(runtime::ElemKind kind, runtime::Shape shape, std::vector<int64_t> values) {
  runtime::Tensor t = runtime::Tensor::integer(kind, std::move(shape));
  t.ints = std::move(values);
  return t;
}

template <typename T>
void append_le(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xff));
}

}  // namespace quire::io::testing

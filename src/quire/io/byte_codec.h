#pragma once
// The byte-level pieces the file formats share (npy.cpp, safetensors.cpp):
// fixed-width integers in a stated byte order, and IEEE binary16 read exactly.

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

namespace quire::io::bytes {

/// The unsigned integer of sizeof(T) bytes at `offset`, in the given byte order.
/// The caller has checked that the bytes are there.
template <typename T>
T load(std::string_view bytes, size_t offset, bool big_endian = false) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    const size_t at = big_endian ? offset + i : offset + sizeof(T) - 1 - i;
    value = static_cast<T>((static_cast<uint64_t>(value) << 8) | static_cast<uint8_t>(bytes[at]));
  }
  return value;
}

/// Appends `value` as sizeof(T) little-endian bytes.
template <typename T>
void append_le(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xff));
}

/// An IEEE binary16 value as f64, exactly. Unlike runtime::decode_f16, NaN
/// payloads are kept (shifted into the top of the f64 fraction) as NumPy keeps
/// them, so a file read and written back keeps its NaN bits.
inline double half_to_double(uint16_t h) {
  const bool negative = (h & 0x8000) != 0;
  const int exponent = (h >> 10) & 0x1f;
  const uint64_t fraction = h & 0x3ff;
  if (exponent == 0x1f)
    return std::bit_cast<double>((uint64_t{negative} << 63) | (uint64_t{0x7ff} << 52) | (fraction << 42));
  // Subnormal: fraction · 2^-24; normal: (1024 + fraction) · 2^(exponent - 25).
  const double magnitude = exponent == 0 ? std::ldexp(static_cast<double>(fraction), -24)
                                         : std::ldexp(static_cast<double>(1024 + fraction), exponent - 25);
  return negative ? -magnitude : magnitude;
}

}  // namespace quire::io::bytes

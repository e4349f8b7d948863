#pragma once
// Random values of the language: keys, and tensors drawn from a key.
//
// COMPATIBILITY PROMISE. The formulas below fix every random bit quire
// produces: a checkpoint initialized today must initialize identically in any
// later version, on any device, in any evaluation order. Change none of them;
// add a new stream constant instead. philox(c0, c1, c2, c3; k0, k1) is
// Philox-4x32-10 (philox.h), returning words w0..w3.
//
//   key_from_seed(s)     = (k0 = s mod 2^32, k1 = s div 2^32)
//   derive_key(K, path)  : h = FNV-1a-64(bytes of path)
//                            (offset basis 0xcbf29ce484222325, prime 0x100000001b3)
//                          w = philox(h mod 2^32, h div 2^32, 0, 0x51EED001; K)
//                          result (k0, k1) = (w0, w1)
//   split_key(K)         : w = philox(0, 0, 0, 0x5EED5EED; K)
//                          first = (w0, w1), second = (w2, w3)
//   copy_key(K, i)       : w = philox(i mod 2^32, i div 2^32, 0, 0xC0B1E5ED; K)
//                          result (w0, w1)   (copy i of a stack called with K)
//
// Element draws. Element i is the flat row-major index of the element in the
// whole tensor (0 ≤ i < 2^64); its value depends on (key, i, distribution)
// only, never on the tensor's shape or on other elements:
//   w = philox(i mod 2^32, i div 2^32, 0, stream; K)
//   stream: uniform 1, normal 2, bernoulli 3
//   bits53(a, b) = (a << 21) XOR (b >> 11)            an integer in [0, 2^53)
//   uniform01    = bits53(w0, w1) · 2^-53              in [0, 1)
//   uniform(lo, hi) = lo + (hi − lo) · uniform01       (stream 1)
//   normal:  u1 = (bits53(w0, w1) + 1) · 2^-53         in (0, 1]
//            u2 = bits53(w2, w3) · 2^-53               in [0, 1)
//            z  = sqrt(−2 ln u1) · cos(2π u2)          (Box–Muller, one output)
//            value = mean + std · z                    (stream 2)
//   bernoulli(p) = 1 if uniform01 < p else 0           (uniform01 of stream 3)
// Arithmetic is IEEE-754 binary64 with round-to-nearest; ln, cos and sqrt are
// the C library's (correctly rounded sqrt; ln/cos within 1 ulp), so normal
// draws may differ across C libraries in the last bit, the others never.
// (hi − lo) · u rounds, so a uniform draw can equal hi in rare cases.

#include <cstdint>
#include <string_view>
#include <utility>

#include "quire/runtime/philox.h"
#include "quire/runtime/tensor.h"

namespace quire::runtime {

/// A value of the language's `key` type: the whole state of a random stream.
struct Key {
  uint32_t k0 = 0;
  uint32_t k1 = 0;

  bool operator==(const Key&) const = default;
};

/// Counter word 3 of each kind of draw: it keeps the streams of one key apart,
/// so uniform and normal draws of the same key and index are independent.
enum class Stream : uint32_t {
  Uniform = 1,
  Normal = 2,
  Bernoulli = 3,
  DeriveKey = 0x51EED001u,
  SplitKey = 0x5EED5EEDu,
  CopyKey = 0xC0B1E5EDu,
};

/// The key of a user-given seed: k0 = low 32 bits, k1 = high 32 bits.
Key key_from_seed(uint64_t seed);
/// 64-bit FNV-1a of `bytes`: hashes a parameter path into counter words.
uint64_t fnv1a64(std::string_view bytes);
/// The key of a named thing under `base`, e.g. the parameter "blocks.proj.w":
/// distinct paths give independent keys, the same path always the same key.
Key derive_key(Key base, std::string_view path);
/// Two independent keys from one (the language's `split`).
std::pair<Key, Key> split_key(Key key);
/// The key copy `copy` of a stack receives when the stack is called with
/// `key` (`blocks.apply(x, k)`): independent keys for distinct copies.
Key copy_key(Key key, int64_t copy);

/// The four Philox words of element `index` of `stream` under `key`.
inline std::array<uint32_t, 4> element_words(Key key, uint64_t index, Stream stream) {
  return philox4x32_10(
      {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, static_cast<uint32_t>(stream)},
      {key.k0, key.k1});
}

/// The 53-bit integer of two words: all of `hi`, the top 21 bits of `lo`.
inline uint64_t bits53(uint32_t hi, uint32_t lo) { return (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11); }

/// 2^-53: turns a 53-bit integer into a double in [0, 1) exactly.
inline constexpr double kTwoToMinus53 = 1.0 / 9007199254740992.0;

/// Element `index` of a uniform [0, 1) tensor drawn from `key`.
inline double uniform01_at(Key key, uint64_t index) {
  const auto w = element_words(key, index, Stream::Uniform);
  return static_cast<double>(bits53(w[0], w[1])) * kTwoToMinus53;
}

/// Element `index` of a uniform [low, high] tensor drawn from `key`.
inline double uniform_at(Key key, uint64_t index, double low, double high) {
  return low + (high - low) * uniform01_at(key, index);
}

/// Element `index` of a standard normal tensor drawn from `key` (Box–Muller).
double standard_normal_at(Key key, uint64_t index);

/// Element `index` of a normal(mean, std) tensor drawn from `key`.
inline double normal_at(Key key, uint64_t index, double mean, double std) {
  return mean + std * standard_normal_at(key, index);
}

/// Element `index` of a Bernoulli(p) tensor drawn from `key`.
inline bool bernoulli_at(Key key, uint64_t index, double p) {
  const auto w = element_words(key, index, Stream::Bernoulli);
  return static_cast<double>(bits53(w[0], w[1])) * kTwoToMinus53 < p;
}

/// A Real tensor of uniform draws in [low, high]. Throws std::invalid_argument
/// if low > high, either bound is not finite, or a dimension is negative.
Tensor draw_uniform(Key key, const Shape& shape, double low, double high);
/// A Real tensor of normal draws. Throws std::invalid_argument if std < 0,
/// mean or std is not finite, or a dimension is negative.
Tensor draw_normal(Key key, const Shape& shape, double mean, double std);
/// A Bool tensor, 1 with probability p. Throws std::invalid_argument if p is
/// outside [0, 1] (or NaN) or a dimension is negative.
Tensor draw_bernoulli(Key key, const Shape& shape, double p);
/// A kernel's dropout, drawn where the kernel uses it (runtime/attention.h,
/// runtime/layer_norm.h): element i of the lines' `bernoulli(key, κ, like =
/// x)` is bernoulli_at(key, i, κ), with κ = f32(1 − f32(p)) as the lines'
/// f32 sites round it. κ = 1 (p = 0) draws nothing: every draw is below 1.
struct DropoutDraw {
  bool on = false;
  Key key;
  float kept = 1.0f;  ///< κ
  /// The dropout of probability p drawn from `key`.
  static DropoutDraw of(Key key, double p);
  /// A RuntimeError where κ is outside [0, 1] (NaN too), as the lines'
  /// bernoulli refuses it.
  void check() const;
};

/// Elements [first, first + n) of a Bernoulli(p) draw from `key`, each 1 or
/// 0 into out[0, n): bernoulli_at's rule on draw_bernoulli's blocked words,
/// for a kernel that draws a run of a larger tensor's elements
/// (runtime/attention.h's dropout). p must be in [0, 1].
void draw_bernoulli_run(Key key, uint64_t first, int64_t n, double p, uint8_t* out);

}  // namespace quire::runtime

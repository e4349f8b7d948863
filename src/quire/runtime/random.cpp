#include "quire/runtime/random.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "quire/runtime/philox_blocks.h"
#include "quire/runtime/runtime_error.h"

namespace quire::runtime {

Key key_from_seed(uint64_t seed) { return {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}; }

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

Key derive_key(Key base, std::string_view path) {
  const uint64_t h = fnv1a64(path);
  const auto w = philox4x32_10(
      {static_cast<uint32_t>(h), static_cast<uint32_t>(h >> 32), 0u, static_cast<uint32_t>(Stream::DeriveKey)},
      {base.k0, base.k1});
  return {w[0], w[1]};
}

std::pair<Key, Key> split_key(Key key) {
  const auto w = philox4x32_10({0u, 0u, 0u, static_cast<uint32_t>(Stream::SplitKey)}, {key.k0, key.k1});
  return {Key{w[0], w[1]}, Key{w[2], w[3]}};
}

Key copy_key(Key key, int64_t copy) {
  const auto i = static_cast<uint64_t>(copy);
  const auto w = philox4x32_10(
      {static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0u, static_cast<uint32_t>(Stream::CopyKey)},
      {key.k0, key.k1});
  return {w[0], w[1]};
}

double standard_normal_at(Key key, uint64_t index) {
  const auto w = element_words(key, index, Stream::Normal);
  // u1 is in (0, 1] so that ln u1 is finite: the largest |z| is
  // sqrt(-2 ln 2^-53) ≈ 8.57, the tail a 53-bit generator can reach.
  const double u1 = static_cast<double>(bits53(w[0], w[1]) + 1) * kTwoToMinus53;
  const double u2 = static_cast<double>(bits53(w[2], w[3])) * kTwoToMinus53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

namespace {

// A tensor's draws in blocks of sixteen elements (philox_blocks.h).
using philox_blocks::kLanes;
using philox_blocks::Words;

/// Blocks drawn at once: four blocks side by side on the AVX-512 path.
constexpr size_t kBlocksAtOnce = 4;

/// Calls f(i, words, lane) for every element i of an n-element draw of `stream`.
template <class F>
void for_each_element(Key key, size_t n, Stream stream, F&& f) {
  Words words[kBlocksAtOnce];
  for (size_t first = 0; first < n; first += kBlocksAtOnce * kLanes) {
    const size_t count = std::min(kBlocksAtOnce, (n - first + kLanes - 1) / kLanes);
    philox_blocks::blocks(key.k0, key.k1, first, static_cast<uint32_t>(stream), words, count);
    for (size_t b = 0; b < count; ++b) {
      const size_t at = first + b * kLanes;
      const size_t m = std::min(kLanes, n - at);
      for (size_t l = 0; l < m; ++l) f(at + l, words[b], l);
    }
  }
}

/// bernoulli(p)'s test bits53 · 2^-53 < p as an integer one, bits53 < ⌈p · 2^53⌉:
/// both sides scaled by 2^53 exactly, and an integer is below a real x
/// exactly when it is below ⌈x⌉. p in [0, 1].
uint64_t bernoulli_threshold(double p) { return static_cast<uint64_t>(std::ceil(p * 9007199254740992.0)); }

/// Rejects shapes whose element count would be meaningless; `what` names the
/// drawing function in the message.
void check_shape(const char* what, const Shape& shape) {
  for (int64_t d : shape) {
    if (d < 0)
      throw std::invalid_argument(fmt::format("{}: negative dimension in shape {}", what, shape_string(shape)));
  }
}

}  // namespace

Tensor draw_uniform(Key key, const Shape& shape, double low, double high) {
  check_shape("draw_uniform", shape);
  if (!std::isfinite(low) || !std::isfinite(high) || low > high) {
    throw std::invalid_argument(
        fmt::format("draw_uniform: bounds must be finite with low <= high, got [{}, {}]", low, high));
  }
  Tensor t = Tensor::real_for_overwrite(shape);
  double* out = t.reals.data();
  for_each_element(key, t.reals.size(), Stream::Uniform, [&](size_t i, const Words& w, size_t l) {
    out[i] = low + (high - low) * (static_cast<double>(bits53(w.w[0][l], w.w[1][l])) * kTwoToMinus53);
  });
  return t;
}

Tensor draw_normal(Key key, const Shape& shape, double mean, double std) {
  check_shape("draw_normal", shape);
  if (!std::isfinite(mean) || !std::isfinite(std) || std < 0) {
    throw std::invalid_argument(
        fmt::format("draw_normal: mean and std must be finite with std >= 0, got mean {} std {}", mean, std));
  }
  Tensor t = Tensor::real_for_overwrite(shape);
  double* out = t.reals.data();
  for_each_element(key, t.reals.size(), Stream::Normal, [&](size_t i, const Words& w, size_t l) {
    const double u1 = static_cast<double>(bits53(w.w[0][l], w.w[1][l]) + 1) * kTwoToMinus53;
    const double u2 = static_cast<double>(bits53(w.w[2][l], w.w[3][l])) * kTwoToMinus53;
    out[i] = mean + std * (std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
  });
  return t;
}

Tensor draw_bernoulli(Key key, const Shape& shape, double p) {
  check_shape("draw_bernoulli", shape);
  // Written so that NaN fails too.
  if (!(p >= 0.0 && p <= 1.0)) {
    throw std::invalid_argument(fmt::format("draw_bernoulli: probability p must be in [0, 1], got {}", p));
  }
  Tensor t = Tensor::integer(ElemKind::Bool, shape);
  // Runs of draw_bernoulli_run's bytes (the same rule on the same words,
  // tested against bernoulli_at), widened: its vector test, where an
  // element-at-a-time one was most of a dropout's draw.
  constexpr int64_t kRun = 4096;
  uint8_t bytes[kRun];
  const int64_t n = static_cast<int64_t>(t.ints.size());
  for (int64_t first = 0; first < n; first += kRun) {
    const int64_t m = std::min(kRun, n - first);
    draw_bernoulli_run(key, static_cast<uint64_t>(first), m, p, bytes);
    int64_t* out = t.ints.data() + first;
    for (int64_t i = 0; i < m; ++i) out[i] = bytes[i];
  }
  return t;
}

DropoutDraw DropoutDraw::of(Key key, double p) {
  DropoutDraw d;
  d.key = key;
  d.kept = 1.0f - static_cast<float>(p);
  d.on = d.kept != 1.0f;
  return d;
}

void DropoutDraw::check() const {
  // Written so that NaN fails too: the lines' bernoulli refuses it so.
  if (on && !(kept >= 0.0f && kept <= 1.0f))
    throw RuntimeError(fmt::format("dropout: the probability of keeping an element, 1 − p = {}, is outside [0, 1]",
                                   static_cast<double>(kept)));
}

void draw_bernoulli_run(Key key, uint64_t first, int64_t n, double p, uint8_t* out) {
  const uint64_t below = bernoulli_threshold(p);
  const int64_t lanes = static_cast<int64_t>(kLanes);
  Words words[kBlocksAtOnce];
  for (int64_t done = 0; done < n; done += static_cast<int64_t>(kBlocksAtOnce) * lanes) {
    const size_t count = std::min<size_t>(kBlocksAtOnce, static_cast<size_t>((n - done + lanes - 1) / lanes));
    philox_blocks::blocks(key.k0, key.k1, first + static_cast<uint64_t>(done),
                          static_cast<uint32_t>(Stream::Bernoulli), words, count);
    for (size_t b = 0; b < count; ++b) {
      const int64_t at = done + static_cast<int64_t>(b) * lanes;
      if (n - at >= lanes) {
        philox_blocks::bernoulli_bytes(words[b], below, out + at);
        continue;
      }
      uint8_t last[kLanes];
      philox_blocks::bernoulli_bytes(words[b], below, last);
      std::copy(last, last + (n - at), out + at);
    }
  }
}

}  // namespace quire::runtime

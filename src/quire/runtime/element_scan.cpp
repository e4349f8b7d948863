#include "quire/runtime/element_scan.h"

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "quire/runtime/widest_vectors.h"

namespace quire::runtime {

namespace {

// Each scan reads 16 elements at a time into one flag with no early exit, a
// loop GCC vectorizes (the plain loop with an early exit ran five times
// slower over a training step's gradients). The scans run on the host's one
// thread while the kernels' workers wait, over every gradient of a step, so
// they are compiled for the widest vectors the processor has (at the
// baseline's 16-byte vectors they were 2 % of a training step at D = 256).

/// The sign bit and +inf's bits of the float type whose bits are Bits.
template <typename Bits>
constexpr Bits kSignBit = Bits{1} << (8 * sizeof(Bits) - 1);
template <typename Bits>
constexpr Bits kInfBits =
    std::bit_cast<Bits>(std::numeric_limits<std::conditional_t<sizeof(Bits) == 4, float, double>>::infinity());

/// ±inf or NaN: the magnitude's bits at or above +inf's.
template <typename Bits>
inline Bits not_finite(Bits u) {
  return static_cast<Bits>((u & ~kSignBit<Bits>) >= kInfBits<Bits>);
}

/// Whether Flagged is 0 for the bits of every element of v[0, n). The flags
/// collect in 16 lanes, ORed together once at the end: one flag for all 16
/// made GCC reduce a vector to a scalar every 16 elements, ten instructions
/// for each vector read.
template <typename Elem, typename Bits, Bits (*Flagged)(Bits)>
inline bool none_flagged(const Elem* v, size_t n) {
  Bits lanes[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (size_t j = 0; j < 16; ++j) lanes[j] |= Flagged(std::bit_cast<Bits>(v[i + j]));
  Bits bad = 0;
  for (; i < n; ++i) bad |= Flagged(std::bit_cast<Bits>(v[i]));
  for (Bits lane : lanes) bad |= lane;
  return bad == 0;
}

/// The largest magnitude's bits over v[0, n): a float's magnitude bits order
/// as the magnitudes do, +inf's above every finite one and a NaN's above
/// +inf's. 16 lanes, as none_flagged.
template <typename Elem, typename Bits>
inline Bits largest_magnitude_bits(const Elem* v, size_t n) {
  Bits lanes[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (size_t j = 0; j < 16; ++j) {
      const Bits m = std::bit_cast<Bits>(v[i + j]) & ~kSignBit<Bits>;
      lanes[j] = m > lanes[j] ? m : lanes[j];
    }
  Bits top = 0;
  for (; i < n; ++i) {
    const Bits m = std::bit_cast<Bits>(v[i]) & ~kSignBit<Bits>;
    top = m > top ? m : top;
  }
  for (Bits lane : lanes) top = lane > top ? lane : top;
  return top;
}

}  // namespace

QUIRE_WIDEST_VECTORS double largest_magnitude(const float* v, size_t n) {
  const uint32_t top = largest_magnitude_bits<float, uint32_t>(v, n);
  return top > kInfBits<uint32_t> ? std::numeric_limits<double>::quiet_NaN() : std::bit_cast<float>(top);
}
QUIRE_WIDEST_VECTORS double largest_magnitude(const double* v, size_t n) {
  const uint64_t top = largest_magnitude_bits<double, uint64_t>(v, n);
  return top > kInfBits<uint64_t> ? std::numeric_limits<double>::quiet_NaN() : std::bit_cast<double>(top);
}

double largest_magnitude(const RealStorage& x) {
  return x.holds_narrow() ? largest_magnitude(x.narrow(), x.size()) : largest_magnitude(x.data(), x.size());
}

QUIRE_WIDEST_VECTORS bool all_finite(const float* v, size_t n) {
  return none_flagged<float, uint32_t, not_finite<uint32_t>>(v, n);
}
QUIRE_WIDEST_VECTORS bool all_finite(const double* v, size_t n) {
  return none_flagged<double, uint64_t, not_finite<uint64_t>>(v, n);
}

bool all_finite(const RealStorage& x) {
  return x.holds_narrow() ? all_finite(x.narrow(), x.size()) : all_finite(x.data(), x.size());
}

}  // namespace quire::runtime

#include "quire/runtime/host_loops.h"

#include <cstdint>
#include <stdexcept>

#include "quire/runtime/element_scan.h"
#include "quire/runtime/widest_vectors.h"

namespace quire::runtime {

namespace {

// Each loop runs whole blocks of 16 and then the rest: GCC's -O2 vectorizes
// only a loop that needs no scalar remainder, which a fixed 16 gives it.
template <typename In, typename Out, typename Op>
inline void blocks_of_16(const In* x, Out* out, size_t n, Op op) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (size_t j = 0; j < 16; ++j) out[i + j] = op(x[i + j]);
  for (; i < n; ++i) out[i] = op(x[i]);
}

template <typename In, typename S, typename Out>
inline void scale_loop(const In* x, S s, bool divide, Out* out, size_t n) {
  if (divide)
    blocks_of_16(x, out, n, [s](In v) { return static_cast<Out>(static_cast<S>(v) / s); });
  else
    blocks_of_16(x, out, n, [s](In v) { return static_cast<Out>(static_cast<S>(v) * s); });
}

QUIRE_WIDEST_VECTORS void convert_to_f32(const double* v, float* f, size_t n) {
  blocks_of_16(v, f, n, [](double d) { return static_cast<float>(d); });
}

// The output does not overlap the input (`__restrict`): without that
// promise GCC's -O2 would need a run-time overlap check, which its cheap
// vectorization declines, and these loops stayed scalar.
QUIRE_WIDEST_VECTORS void round_bf16_loop(const float* __restrict x, float* __restrict out, size_t n) {
  blocks_of_16(x, out, n, [](float f) { return round_bf16_of_f32(f); });
}
QUIRE_WIDEST_VECTORS void round_f16_loop(const float* __restrict x, float* __restrict out, size_t n) {
  blocks_of_16(x, out, n, [](float f) { return round_f16_of_f32(f); });
}

}  // namespace

bool round_to_f32(const double* v, float* f, size_t n) {
  convert_to_f32(v, f, n);
  return all_finite(f, n);
}

void round_half_of_f32(FloatType half, const float* x, float* out, size_t n) {
  if (half == FloatType::BF16)
    round_bf16_loop(x, out, n);
  else if (half == FloatType::F16)
    round_f16_loop(x, out, n);
  else
    throw std::logic_error("round_half_of_f32: not a half type");
}

QUIRE_WIDEST_VECTORS void scale(const float* x, float s, bool divide, float* out, size_t n) {
  scale_loop(x, s, divide, out, n);
}
QUIRE_WIDEST_VECTORS void scale(const float* x, double s, bool divide, double* out, size_t n) {
  scale_loop(x, s, divide, out, n);
}
QUIRE_WIDEST_VECTORS void scale(const double* x, double s, bool divide, double* out, size_t n) {
  scale_loop(x, s, divide, out, n);
}

}  // namespace quire::runtime

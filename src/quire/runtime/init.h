#pragma once
// Parameter initializers: the value of a `param` at the start of training,
// drawn from the parameter's path key (random.h) so that it depends only on
// the seed and the parameter's name, never on declaration order.
//
// Fans. `stacked_axes` leading axes index copies of a module (`stack{L}`);
// each copy is initialized as the module alone would be, so fans are computed
// on the remaining shape s of rank r:
//   r = 0:  fan_in = fan_out = 1
//   r = 1:  fan_in = fan_out = s[0]
//   r ≥ 2:  receptive = s[1] · … · s[r-2]   (1 when r = 2)
//           fan_in  = s[0]   · receptive
//           fan_out = s[r-1] · receptive
// quire's weights are [In, Out] and multiply as x · w, so the FIRST axis is
// the input: the transpose of PyTorch's [out, in] convention, with the same
// numbers for the same layer.
//
// Distributions (U(-b, b) and N(0, σ) drawn with random.h's uniform and normal
// element formulas over the whole tensor at once: all stacked copies, flat
// row-major index):
//   zeros, ones               exact constants, no draw
//   normal(a)                 N(0, a)
//   uniform(a, b)             U(a, b)
//   xavier_uniform            b = sqrt(6 / (fan_in + fan_out))
//   xavier_normal             σ = sqrt(2 / (fan_in + fan_out))
//   kaiming_uniform           b = sqrt(2) · sqrt(3 / fan_in): PyTorch's default
//                             kaiming_uniform_(a=0, mode='fan_in',
//                             nonlinearity='leaky_relu'), gain sqrt(2 / (1 + 0²))

#include <cstdint>
#include <optional>
#include <string_view>

#include "quire/runtime/random.h"
#include "quire/runtime/tensor.h"

namespace quire::runtime {

/// Which initializer, with its arguments.
struct InitSpec {
  enum Kind { Zeros, Ones, Normal, Uniform, XavierUniform, XavierNormal, KaimingUniform } kind = Zeros;
  double a = 0;  ///< Normal: std; Uniform: low
  double b = 0;  ///< Uniform: high
};

/// Fan-in and fan-out of a weight, as in the table above.
struct Fans {
  int64_t fan_in = 1;
  int64_t fan_out = 1;
};

/// The fans of `shape` with its `stacked_axes` leading axes ignored. Throws
/// std::invalid_argument unless 0 ≤ stacked_axes ≤ rank.
Fans compute_fans(const Shape& shape, int stacked_axes);

/// The initial Real tensor of a parameter of `shape` whose path key is
/// `path_key`. Throws std::invalid_argument on a bad stacked_axes or bad
/// distribution arguments (negative std, low > high).
Tensor initialize(const InitSpec& spec, Key path_key, const Shape& shape, int stacked_axes);

/// The initializer called `name` in source (zeros, ones, normal, uniform,
/// xavier_uniform, xavier_normal, kaiming_uniform), its arguments left 0 for
/// the caller to fill; nullopt for an unknown name.
std::optional<InitSpec> parse_init_name(std::string_view name);

/// The source name of an initializer kind (inverse of parse_init_name).
const char* init_name(InitSpec::Kind kind);

}  // namespace quire::runtime

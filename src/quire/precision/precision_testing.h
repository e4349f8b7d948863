#pragma once
// Programs the precision stages' tests share.

namespace quire::precision::testing {

// Every rule of the realization in one module: the policy, an island, a
// region, `out = f32`, a cast, a `numerics high` parameter and two frozen ones.
inline const char* kEveryMark = R"(module M {
  param w : ℝ[4, 4]  init = xavier_uniform
  param g : ℝ[4]     init = ones  numerics high
  param t : ℝ[4, 4]  init = ones  frozen
  param u : ℝ[4]     init = ones  frozen

  fn apply(x : ℝ[b: 2, 4]) -> ℝ[b: 2, 4] =
    let h = x · w
    let s = numerics(high) { exp(h) }
    let r = precision(bf16) { s · t }
    let m = matmul(r, w, out = f32)
    let c = m as f16
    let k = c * g
    numerics(high) { k + u }
}

fn loss(θ : params M, x : ℝ[b: 2, 4]) -> ℝ[] =
  mean(M.apply(θ, x))
)";

}  // namespace quire::precision::testing

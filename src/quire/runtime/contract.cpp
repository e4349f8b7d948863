// Contraction: the one kernel that multiplies and sums, so the one whose
// order most needs pinning down. Requires: two well-formed Real operands and a
// plan that uses every axis of each exactly once (KernelMisuse otherwise).
// Each result element is `acc = 0.0; acc = acc + a*b` over the contracted
// index tuples in row-major order of the pairs as listed; never blocked,
// vectorised across k, or fused unless the caller asks for fused steps.
#include <cmath>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "quire/runtime/kernels.h"

// `acc = acc + x * y` must round the product and the sum separately: a fused
// multiply-add would change the reference bits. GCC contracts by default in
// C++ wherever the target has FMA (-ffp-contract=fast) and ignores the
// standard pragma; Clang honours it.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace quire::runtime {

namespace {

using detail::misuse;
using detail::StridedWalk;

// Marks `axis` of an operand as placed; each axis is placed exactly once.
void place(const char* op, std::vector<bool>& placed, int axis, char operand) {
  if (axis < 0 || axis >= static_cast<int>(placed.size()))
    misuse(op, fmt::format("axis {} of {}, of rank {}", axis, operand, placed.size()));
  if (placed[axis]) misuse(op, fmt::format("axis {} of {} is used twice", axis, operand));
  placed[axis] = true;
}

Tensor contract_named(const char* op, const Tensor& a, const Tensor& b, const std::vector<ResultAxis>& result,
                      const std::vector<std::pair<int, int>>& contracted, FloatType acc_type, ProductStep step) {
  detail::require_well_formed(a, op);
  const bool fused = step == ProductStep::Fused;
  if (fused && acc_type != FloatType::F64 && acc_type != FloatType::F32)
    misuse(op, fmt::format("a fused step accumulates in f64 or f32, not {}", float_type_name(acc_type)));
  detail::require_well_formed(b, op);
  if (!a.is_real() || !b.is_real())
    misuse(op, fmt::format("takes reals, not {} and {}", elem_kind_name(a.kind), elem_kind_name(b.kind)));

  std::vector<bool> a_placed(a.shape.size(), false), b_placed(b.shape.size(), false);
  for (size_t i = 0; i < result.size(); ++i) {
    const ResultAxis& r = result[i];
    if (r.a_axis < 0 && r.b_axis < 0) misuse(op, fmt::format("result axis {} takes no axis of a or b", i));
    if (r.a_axis >= 0) place(op, a_placed, r.a_axis, 'a');
    if (r.b_axis >= 0) place(op, b_placed, r.b_axis, 'b');
  }
  for (auto [ax, bx] : contracted) {
    place(op, a_placed, ax, 'a');
    place(op, b_placed, bx, 'b');
  }
  for (size_t d = 0; d < a_placed.size(); ++d)
    if (!a_placed[d]) misuse(op, fmt::format("axis {} of a is neither kept nor contracted", d));
  for (size_t d = 0; d < b_placed.size(); ++d)
    if (!b_placed[d]) misuse(op, fmt::format("axis {} of b is neither kept nor contracted", d));

  const std::vector<int64_t> as = contiguous_strides(a.shape);
  const std::vector<int64_t> bs = contiguous_strides(b.shape);

  // The result: its shape, and where each of its axes steps in a and in b.
  Shape shape(result.size());
  std::vector<int64_t> a_step(result.size(), 0), b_step(result.size(), 0);
  for (size_t i = 0; i < result.size(); ++i) {
    const ResultAxis& r = result[i];
    if (r.a_axis >= 0 && r.b_axis >= 0 && a.shape[r.a_axis] != b.shape[r.b_axis])
      throw RuntimeError(fmt::format("{}: batch result axis {} has size {} in a (axis {}) but {} in b (axis {})", op,
                                     i, a.shape[r.a_axis], r.a_axis, b.shape[r.b_axis], r.b_axis));
    shape[i] = r.a_axis >= 0 ? a.shape[r.a_axis] : b.shape[r.b_axis];
    if (r.a_axis >= 0) a_step[i] = as[r.a_axis];
    if (r.b_axis >= 0) b_step[i] = bs[r.b_axis];
  }

  // The contracted tuples: all pairs but the last are enumerated once, here,
  // into offset tables; the last pair is the strided inner loop. With no pair
  // there is one (empty) tuple, so each element is 0.0 + a*b.
  Shape outer_shape;
  std::vector<int64_t> a_outer_step, b_outer_step;
  int64_t inner = 1, a_inner_step = 0, b_inner_step = 0;
  for (size_t p = 0; p < contracted.size(); ++p) {
    const auto [ax, bx] = contracted[p];
    if (a.shape[ax] != b.shape[bx])
      throw RuntimeError(fmt::format("{}: contracted axis {} of a has size {} but axis {} of b has size {}", op, ax,
                                     a.shape[ax], bx, b.shape[bx]));
    if (p + 1 < contracted.size()) {
      outer_shape.push_back(a.shape[ax]);
      a_outer_step.push_back(as[ax]);
      b_outer_step.push_back(bs[bx]);
    } else {
      inner = a.shape[ax];
      a_inner_step = as[ax];
      b_inner_step = bs[bx];
    }
  }
  const size_t outer = static_cast<size_t>(element_count(outer_shape));
  std::vector<int64_t> a_outer(outer), b_outer(outer);
  StridedWalk<2> tuples(outer_shape, {a_outer_step, b_outer_step});
  for (size_t t = 0; t < outer; ++t, tuples.next()) {
    a_outer[t] = tuples.offset(0);
    b_outer[t] = tuples.offset(1);
  }

  Tensor out = Tensor::real_for_overwrite(shape);
  double* cell = out.reals.data();
  StridedWalk<2> cells(shape, {a_step, b_step});
  const double* av = a.reals.data();
  const double* bv = b.reals.data();
  const bool narrow = acc_type != FloatType::F64;
  if (fused && narrow)
    for (const Tensor* t : {&a, &b})
      for (double v : t->reals)
        if (!std::isnan(v) && static_cast<double>(static_cast<float>(v)) != v)
          misuse(op, fmt::format("a fused f32 step reads {}, which is not an f32 value", v));
  for (size_t i = 0; i < out.reals.size(); ++i, cells.next()) {
    double acc = 0.0;
    for (size_t t = 0; t < outer; ++t) {
      const double* x = av + cells.offset(0) + a_outer[t];
      const double* y = bv + cells.offset(1) + b_outer[t];
      if (fused && narrow) {
        // fmaf: exact product and sum, one rounding to f32.
        float f = static_cast<float>(acc);
        for (int64_t k = 0; k < inner; ++k)
          f = std::fma(static_cast<float>(x[k * a_inner_step]), static_cast<float>(y[k * b_inner_step]), f);
        acc = f;
      } else if (fused) {
        for (int64_t k = 0; k < inner; ++k) acc = std::fma(x[k * a_inner_step], y[k * b_inner_step], acc);
      } else if (narrow) {
        for (int64_t k = 0; k < inner; ++k)
          acc = round_to(acc_type, acc + round_to(acc_type, x[k * a_inner_step] * y[k * b_inner_step]));
      } else {
        for (int64_t k = 0; k < inner; ++k) acc = acc + x[k * a_inner_step] * y[k * b_inner_step];
      }
    }
    cell[i] = acc;
  }
  return out;
}

}  // namespace

Tensor contract(const Tensor& a, const Tensor& b, const std::vector<ResultAxis>& result,
                const std::vector<std::pair<int, int>>& contracted, FloatType acc, ProductStep step) {
  return contract_named("contract", a, b, result, contracted, acc, step);
}

ContractPlan dot_plan(int xr, int wr) {
  ContractPlan p;
  for (int d = 0; d + 1 < xr; ++d) p.result.push_back({d, -1});
  for (int d = 1; d < wr; ++d) p.result.push_back({-1, d});
  p.contracted = {{xr - 1, 0}};
  return p;
}

ContractPlan contract_adjoint_a(const ContractPlan& fwd, int a_rank) {
  // ∂a = contract(ct, b): each axis of a is either an axis of y (ct's axis q,
  // batched with b's axis if it was) or contracted with b's axis jb (now b's alone).
  ContractPlan p;
  for (int axis = 0; axis < a_rank; ++axis) {
    ResultAxis r{-1, -1};
    for (size_t q = 0; q < fwd.result.size(); ++q)
      if (fwd.result[q].a_axis == axis) r = {static_cast<int>(q), fwd.result[q].b_axis};
    for (auto [pa, pb] : fwd.contracted)
      if (pa == axis) r = {-1, pb};
    p.result.push_back(r);
  }
  for (size_t q = 0; q < fwd.result.size(); ++q)
    if (fwd.result[q].a_axis < 0) p.contracted.push_back({static_cast<int>(q), fwd.result[q].b_axis});
  return p;
}

ContractPlan contract_adjoint_b(const ContractPlan& fwd, int b_rank) {
  // ∂b = contract(a, ct), symmetrically.
  ContractPlan p;
  for (int axis = 0; axis < b_rank; ++axis) {
    ResultAxis r{-1, -1};
    for (size_t q = 0; q < fwd.result.size(); ++q)
      if (fwd.result[q].b_axis == axis) r = {fwd.result[q].a_axis, static_cast<int>(q)};
    for (auto [pa, pb] : fwd.contracted)
      if (pb == axis) r = {pa, -1};
    p.result.push_back(r);
  }
  for (size_t q = 0; q < fwd.result.size(); ++q)
    if (fwd.result[q].b_axis < 0) p.contracted.push_back({fwd.result[q].a_axis, static_cast<int>(q)});
  return p;
}

Tensor dot(const Tensor& x, const Tensor& w, FloatType acc, ProductStep step) {
  const int xr = static_cast<int>(x.rank()), wr = static_cast<int>(w.rank());
  if (xr < 1 || wr < 1) misuse("dot", fmt::format("operands of rank {} and {}; both need an axis", xr, wr));
  std::vector<ResultAxis> result;
  for (int d = 0; d + 1 < xr; ++d) result.push_back({d, -1});
  for (int d = 1; d < wr; ++d) result.push_back({-1, d});
  return contract_named("dot", x, w, result, {{xr - 1, 0}}, acc, step);
}

}  // namespace quire::runtime

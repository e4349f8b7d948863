// Reductions. Requires: a well-formed operand of a kind the op takes, axes
// sorted and unique (KernelMisuse otherwise). Each result element folds its
// slice in row-major order of the reduced axes into one accumulator, left to
// right; no pairwise or blocked summation, so the bits follow from kernels.h.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "quire/runtime/elementary.h"
#include "quire/runtime/kernels.h"

// The folds contain no product, but the family is built like the others: the
// reference bits forbid fused multiply-add (see elementwise.cpp).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace quire::runtime {

namespace {

using detail::misuse;
using detail::StridedWalk;

// The operand split into the axes that stay (the result's) and the axes folded.
struct Split {
  Shape kept_shape;
  std::vector<int64_t> kept_strides;
  Shape reduced_shape;
  std::vector<int64_t> reduced_strides;
  int64_t count = 1;  // elements per slice
};

Split split_axes(const Tensor& x, const std::vector<int>& axes) {
  const std::vector<int64_t> strides = contiguous_strides(x.shape);
  Split s;
  size_t next = 0;  // the next entry of `axes` to match
  for (int d = 0; d < static_cast<int>(x.rank()); ++d) {
    const bool reduced = next < axes.size() && axes[next] == d;
    if (reduced) ++next;
    (reduced ? s.reduced_shape : s.kept_shape).push_back(x.shape[d]);
    (reduced ? s.reduced_strides : s.kept_strides).push_back(strides[d]);
  }
  s.count = element_count(s.reduced_shape);
  return s;
}

// For each result element in row-major order, hands `fold` a `visit` that
// calls its argument on every element of that element's slice, in order. A
// slice may be visited more than once (LogSumExp does): the inner walk wraps
// back to the slice's start after `count` steps.
template <class Values, class Out, class Fold>
void fold_slices(const Split& s, const Values& values, Out& out_storage, Fold fold) {
  StridedWalk<1> outer(s.kept_shape, {s.kept_strides});
  StridedWalk<1> inner(s.reduced_shape, {s.reduced_strides});
  const size_t n = out_storage.size();
  auto* out = out_storage.data();
  for (size_t i = 0; i < n; ++i, outer.next()) {
    const int64_t base = outer.offset(0);
    auto visit = [&](auto&& take) {
      for (int64_t k = 0; k < s.count; ++k, inner.next()) take(values[base + inner.offset(0)]);
    };
    out[i] = fold(visit, i);
  }
}

template <class Visit>
double fold_max(Visit& visit) {
  bool first = true;
  double acc = 0.0;
  visit([&](double x) {
    acc = first ? x : detail::max_real(acc, x);
    first = false;
  });
  return acc;
}

template <class Visit>
double fold_min(Visit& visit) {
  bool first = true;
  double acc = 0.0;
  visit([&](double x) {
    acc = first ? x : detail::min_real(acc, x);
    first = false;
  });
  return acc;
}

/// Rounds to the accumulator's type; F64 is the identity, skipped.
struct Acc {
  FloatType type;
  double operator()(double v) const { return type == FloatType::F64 ? v : round_to(type, v); }
};

template <class Visit>
double fold_sum(Visit& visit, Acc r) {
  double acc = 0.0;
  visit([&](double x) { acc = r(acc + x); });
  return acc;
}

void reduce_reals(ReduceOp op, const Split& s, const RealStorage& values, RealStorage& out, Acc r) {
  switch (op) {
    case ReduceOp::Sum: return fold_slices(s, values, out, [&](auto& visit, size_t) { return fold_sum(visit, r); });
    case ReduceOp::Mean:
      return fold_slices(s, values, out, [&](auto& visit, size_t) {
        // 0/0 would give the hardware's NaN (negative on x86); the mean of nothing is the quiet NaN.
        if (s.count == 0) return std::numeric_limits<double>::quiet_NaN();
        return r(fold_sum(visit, r) / static_cast<double>(s.count));
      });
    case ReduceOp::Max: return fold_slices(s, values, out, [](auto& visit, size_t) { return fold_max(visit); });
    case ReduceOp::Min: return fold_slices(s, values, out, [](auto& visit, size_t) { return fold_min(visit); });
    case ReduceOp::LogSumExp:
      return fold_slices(s, values, out, [&](auto& visit, size_t) {
        if (s.count == 0) return -std::numeric_limits<double>::infinity();
        const double m = fold_max(visit);
        // ±inf or NaN: x - m would be NaN (inf - inf); the result is m itself.
        if (!std::isfinite(m)) return m;
        double acc = 0.0;
        visit([&](double x) { acc = r(acc + r(elementary_exp(r(x - m)))); });
        return r(m + r(std::log(acc)));
      });
  }
}

void reduce_ints(ReduceOp op, ElemKind kind, const Split& s, const std::vector<int64_t>& values,
                 std::vector<int64_t>& out) {
  const bool fits_i32 = kind == ElemKind::I32;
  fold_slices(s, values, out, [&](auto& visit, size_t i) {
    bool first = true;
    bool overflow = false;
    int64_t acc = 0;
    visit([&](int64_t x) {
      if (op == ReduceOp::Sum)
        overflow = overflow || __builtin_add_overflow(acc, x, &acc);
      else if (first || (op == ReduceOp::Max ? x > acc : x < acc))
        acc = x;
      first = false;
    });
    if (overflow || (fits_i32 && (acc < std::numeric_limits<int32_t>::min() ||
                                  acc > std::numeric_limits<int32_t>::max())))
      throw RuntimeError(fmt::format("sum: the sum at {} of a slice of {} elements overflows {}",
                                     detail::index_string(static_cast<int64_t>(i), s.kept_shape), s.count,
                                     elem_kind_name(kind)));
    return acc;
  });
}

}  // namespace

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::LogSumExp: return "logsumexp";
  }
  return "?";
}

std::optional<ElemKind> reduce_result_kind(ReduceOp op, ElemKind operand) {
  switch (operand) {
    case ElemKind::Real: return ElemKind::Real;
    case ElemKind::I32:
    case ElemKind::I64:
      return op == ReduceOp::Mean || op == ReduceOp::LogSumExp ? ElemKind::Real : operand;
    case ElemKind::Bool: return std::nullopt;
  }
  return std::nullopt;
}

Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int>& axes, FloatType acc) {
  const char* name = op_name(op);
  detail::require_well_formed(x, name);
  const std::optional<ElemKind> kind = reduce_result_kind(op, x.kind);
  if (!kind) misuse(name, fmt::format("does not take a {} operand", elem_kind_name(x.kind)));
  for (size_t k = 0; k < axes.size(); ++k) {
    detail::require_axis(axes[k], x.rank(), name);
    if (k > 0 && axes[k] <= axes[k - 1])
      misuse(name, fmt::format("axes {} are not sorted and unique", fmt::join(axes, ", ")));
  }
  const Split s = split_axes(x, axes);

  Tensor out =
      *kind == ElemKind::Real ? Tensor::real_for_overwrite(s.kept_shape) : Tensor::integer(*kind, s.kept_shape);
  if (axes.empty()) {  // a copy, converted to the result kind; no fold (which would turn -0.0 into +0.0)
    if (*kind == x.kind)
      out = x;
    else
      out.reals = detail::to_reals(x.ints);
    return out;
  }
  if (s.count == 0 && out.size() > 0 && (op == ReduceOp::Max || op == ReduceOp::Min)) {
    int empty_axis = 0;
    for (int axis : axes)
      if (x.shape[axis] == 0) {
        empty_axis = axis;
        break;
      }
    throw RuntimeError(fmt::format("{}: reduced axis {} has size 0, and the {} of no elements is undefined", name,
                                   empty_axis, name));
  }

  if (*kind != ElemKind::Real)
    reduce_ints(op, *kind, s, x.ints, out.ints);
  else if (x.is_real())
    reduce_reals(op, s, x.reals, out.reals, Acc{acc});
  else
    reduce_reals(op, s, detail::to_reals(x.ints), out.reals, Acc{acc});
  return out;
}

}  // namespace quire::runtime

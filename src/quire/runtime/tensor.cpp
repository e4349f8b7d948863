#include "quire/runtime/tensor.h"

#include <fmt/format.h>

#include "quire/runtime/runtime_error.h"

namespace quire::runtime {

const char* elem_kind_name(ElemKind kind) {
  switch (kind) {
    case ElemKind::Real: return "real";
    case ElemKind::I32: return "i32";
    case ElemKind::I64: return "i64";
    case ElemKind::Bool: return "bool";
  }
  return "?";
}

std::optional<int64_t> allocatable_count(const Shape& shape) {
  // Bounded so that a count times the widest element (8 bytes) and every
  // stride and offset derived from it are int64 without overflow checks of
  // their own: products of run-time sizes wrapped to 0 or to small numbers
  // before, and a wrong count is a wrong allocation.
  constexpr int64_t kMaxAllocatedElements = int64_t{1} << 59;
  int64_t nonzero = 1;
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(nonzero, d, &nonzero) || nonzero > kMaxAllocatedElements) return std::nullopt;
  }
  return empty ? 0 : nonzero;
}

int64_t element_count(const Shape& shape) {
  const std::optional<int64_t> count = allocatable_count(shape);
  if (!count)
    throw RuntimeError(fmt::format("a tensor of shape {} cannot be held: its dimensions must be non-negative and "
                                   "their nonzero ones multiply to at most 2^59 (4 EiB of f64); are they what "
                                   "you meant?",
                                   shape_string(shape)));
  return *count;
}

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  element_count(shape);  // every stride is at most the count
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

std::string shape_string(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Tensor Tensor::real(Shape shape, double fill) {
  Tensor t;
  t.kind = ElemKind::Real;
  t.reals.assign(static_cast<size_t>(element_count(shape)), fill);
  t.shape = std::move(shape);
  return t;
}

Tensor Tensor::real_for_overwrite(Shape shape) {
  Tensor t;
  t.kind = ElemKind::Real;
  t.reals = RealStorage::for_overwrite(static_cast<size_t>(element_count(shape)));
  t.shape = std::move(shape);
  return t;
}

Tensor Tensor::integer(ElemKind kind, Shape shape, int64_t fill) {
  Tensor t;
  t.kind = kind;
  t.ints.assign(static_cast<size_t>(element_count(shape)), fill);
  t.shape = std::move(shape);
  return t;
}

Tensor Tensor::scalar(double value) { return real({}, value); }

}  // namespace quire::runtime

#pragma once
// A dense, row-major tensor of the reference interpreter: the values of one
// Core site at run time. Reals are held as f64 (the interpreter's type);
// integer, boolean and key tensors hold their values as int64_t. Axis names
// travel with the static types, not with the data: a Tensor is positional.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "quire/runtime/real_storage.h"

namespace quire::runtime {

/// What the elements of a tensor are.
enum class ElemKind : uint8_t {
  Real,  ///< ℝ: f64 in the reference interpreter
  I32,   ///< 32-bit integer (token ids, targets); held in int64_t, range-checked on store
  I64,   ///< 64-bit integer
  Bool,  ///< comparison results; 0 or 1
};

const char* elem_kind_name(ElemKind kind);

using Shape = std::vector<int64_t>;

/// Number of elements of a shape (1 for a scalar, the empty shape); throws
/// a RuntimeError for a shape `allocatable_count` refuses.
int64_t element_count(const Shape& shape);
/// The number of elements of `shape`, or nullopt if a dimension is negative or
/// the product of its nonzero dimensions passes 2^59. The bound ignores zeros
/// so that it does not depend on their place: every stride of the shape is
/// then below it too, and an empty tensor of absurd dimensions is refused
/// wherever its zero stands. Readers of files call this to refuse a shape
/// with their own error.
std::optional<int64_t> allocatable_count(const Shape& shape);
/// Row-major strides of a contiguous tensor of this shape, in elements.
std::vector<int64_t> contiguous_strides(const Shape& shape);
/// "[2, 3, 4]"
std::string shape_string(const Shape& shape);

/// A dense row-major tensor. Invariant: exactly one of `reals` / `ints` holds
/// element_count(shape) values, chosen by `kind` (Real → reals, else ints).
struct Tensor {
  ElemKind kind = ElemKind::Real;
  Shape shape;
  RealStorage reals;  ///< shared by copies until written (real_storage.h)
  std::vector<int64_t> ints;

  static Tensor real(Shape shape, double fill = 0.0);
  /// A real tensor whose elements are indeterminate: for a writer that sets every one.
  static Tensor real_for_overwrite(Shape shape);
  static Tensor integer(ElemKind kind, Shape shape, int64_t fill = 0);
  static Tensor scalar(double value);

  int64_t size() const { return element_count(shape); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  bool is_real() const { return kind == ElemKind::Real; }
};

}  // namespace quire::runtime
